//! Counts kept per port and per QP, in the index space of
//! `rnic_hw_regs::counters`.

use rnic_hw_regs::counters::COUNTER_SLOTS;

/// One set of counters.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Counters(pub [u64; COUNTER_SLOTS]);

impl Default for Counters {
    fn default() -> Self {
        Counters([0; COUNTER_SLOTS])
    }
}

impl Counters {
    pub(crate) fn add(&mut self, idx: usize, n: u64) {
        self.0[idx] = self.0[idx].wrapping_add(n);
    }
}

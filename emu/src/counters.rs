//! Counts kept per port and per QP, in the index space of
//! `rnic_hw_regs::counters`.

use rnic_hw_regs::counters::MAX_COUNTERS;

/// One set of counters.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Counters(pub [u64; MAX_COUNTERS]);

impl Default for Counters {
    fn default() -> Self {
        Counters([0; MAX_COUNTERS])
    }
}

impl Counters {
    pub(crate) fn add(&mut self, idx: usize, n: u64) {
        self.0[idx] = self.0[idx].wrapping_add(n);
    }
}

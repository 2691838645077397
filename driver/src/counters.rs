//! Port and QP counters (QUERY_COUNTERS).

use rnic_hw_regs::cmd::CmdOpcode;
use rnic_hw_regs::counters::counter::NAMES;
use rnic_hw_regs::counters::{scope, CountersOut, QueryCountersIn, COUNTER_SLOTS};
use rnic_hw_regs::le32;
use rnic_queues::Hal;

use crate::{Context, Result};

pub use rnic_hw_regs::counters::counter;

/// A snapshot of a port's or a QP's counters: frames and bytes, transport
/// events (retransmissions, timeouts, NAKs by kind, duplicates) and, for a
/// port, the frames it dropped (bad ICRC, malformed, wrong version or
/// P_Key, unknown QP), as `rdma statistic` shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    values: [u64; COUNTER_SLOTS],
}

impl Counters {
    pub(crate) fn from_out(o: &CountersOut) -> Self {
        let mut values = [0; COUNTER_SLOTS];
        for (v, w) in values.iter_mut().zip(o.values.iter()) {
            *v = w.to_ne();
        }
        Self { values }
    }

    /// The counter of index `idx` (a [`counter`] constant); 0 for an
    /// unused index.
    pub fn get(&self, idx: usize) -> u64 {
        self.values.get(idx).copied().unwrap_or(0)
    }

    /// Every counter with its name, in index order.
    pub fn iter(&self) -> impl Iterator<Item = (&'static str, u64)> + '_ {
        NAMES.iter().map(|&(i, name)| (name, self.values[i]))
    }
}

impl<H: Hal> Context<H> {
    /// Reads port `port`'s counters.
    pub fn query_port_counters(&self, port: u8) -> Result<Counters> {
        self.shared.port(port)?;
        let input = QueryCountersIn {
            scope: le32::from_ne(scope::PORT),
            id: le32::from_ne(port.into()),
        };
        let out: CountersOut = self.shared.exec(CmdOpcode::QueryCounters, &input)?;
        Ok(Counters::from_out(&out))
    }
}

//! Port and QP counters (QUERY_COUNTERS).

use rnic_hw_regs::cmd::CmdOpcode;
use rnic_hw_regs::counters::counter::NAMES;
use rnic_hw_regs::counters::{scope, CountersOut, QueryCountersIn, COUNTER_SLOTS, MAX_COUNTERS};
use rnic_hw_regs::le32;
use rnic_queues::Hal;

use crate::context::ContextCore;
use crate::{Context, Result};

pub use rnic_hw_regs::counters::counter;

/// A snapshot of a port's or a QP's counters: frames and bytes, transport
/// events (retransmissions, timeouts, NAKs by kind, duplicates) and, for a
/// port, the frames it dropped (bad ICRC, malformed, wrong version or
/// P_Key, unknown QP), as `rdma statistic` shows them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counters {
    values: [u64; MAX_COUNTERS],
}

impl Counters {
    /// Reads every page of `scope`/`id`'s counters (one QUERY_COUNTERS per
    /// [`COUNTER_SLOTS`] counters).
    pub(crate) fn query<H: Hal>(ctx: &ContextCore<H>, scope: u32, id: u32) -> Result<Self> {
        let mut values = [0; MAX_COUNTERS];
        for (page, chunk) in values.chunks_mut(COUNTER_SLOTS).enumerate() {
            let input = QueryCountersIn {
                scope: le32::from_ne(scope),
                id: le32::from_ne(id),
                first: le32::from_ne((page * COUNTER_SLOTS) as u32),
            };
            let out: CountersOut = ctx.exec(CmdOpcode::QueryCounters, &input)?;
            for (v, w) in chunk.iter_mut().zip(out.values.iter()) {
                *v = w.to_ne();
            }
        }
        Ok(Self { values })
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
        Counters::query(&self.shared, scope::PORT, port.into())
    }
}

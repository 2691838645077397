//! QUERY_COUNTERS.

use rnic_hw_regs::cmd::{CmdStatus, CMD_IN_SIZE, CMD_OUT_SIZE};
use rnic_hw_regs::counters::{scope, CountersOut, QueryCountersIn, COUNTER_SLOTS, MAX_COUNTERS};
use rnic_hw_regs::le64;

use super::{check, fail, off, CmdResult};
use crate::counters::Counters;
use crate::iommu::{from_bytes, to_bytes};
use crate::state::State;

pub(super) fn query(
    st: &mut State,
    uid: u32,
    input: &[u8; CMD_IN_SIZE],
    out: &mut [u8; CMD_OUT_SIZE],
) -> CmdResult {
    let i: QueryCountersIn = from_bytes(input);
    let id = i.id.to_ne();
    let first = i.first.to_ne() as usize;
    check(
        first % COUNTER_SLOTS == 0 && first < MAX_COUNTERS,
        CmdStatus::BadParam,
        off!(QueryCountersIn, first),
    )?;
    let c: Counters = match i.scope.to_ne() {
        scope::PORT => {
            check(id == 1, CmdStatus::BadParam, off!(QueryCountersIn, id))?;
            st.dev.port.counters
        }
        scope::QP => {
            st.qps
                .get(id)
                .filter(|_| st.qps.owned(id, uid))
                .ok_or(fail(CmdStatus::BadResource, off!(QueryCountersIn, id)))?
                .counters
        }
        _ => return Err(fail(CmdStatus::BadParam, off!(QueryCountersIn, scope))),
    };
    let mut o = CountersOut::default();
    for (slot, v) in o.values.iter_mut().zip(&c.0[first..]) {
        *slot = le64::from_ne(*v);
    }
    to_bytes(&o, out);
    Ok(())
}

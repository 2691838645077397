//! Command execution: one function per command, each validating every input
//! field before changing anything.
//!
//! A failed command reports a [`CmdStatus`] and a syndrome: the byte offset
//! of the offending field in the input area, plus 1 (0: no single field).

use rnic_hw_regs::cmd::{CmdOpcode, CmdStatus, CMD_IN_SIZE, CMD_OUT_SIZE};

use crate::state::State;

mod counters;
mod cq;
mod eq;
mod pd_mr;
mod qp;
mod query;
mod srq;
#[cfg(test)]
mod tests;
mod uctx;

/// A failed command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CmdError {
    pub status: CmdStatus,
    pub syndrome: u32,
}

type CmdResult = Result<(), CmdError>;

/// A failure blamed on the input field at byte offset `off`.
fn fail(status: CmdStatus, off: usize) -> CmdError {
    CmdError {
        status,
        syndrome: off as u32 + 1,
    }
}

/// `Err(fail(status, off))` unless `ok`.
fn check(ok: bool, status: CmdStatus, off: usize) -> CmdResult {
    if ok {
        Ok(())
    } else {
        Err(fail(status, off))
    }
}

/// Byte offset of a field in an input struct.
macro_rules! off {
    ($t:ty, $f:ident) => {
        core::mem::offset_of!($t, $f)
    };
}
use off;

/// Runs command `opcode` with `input`, filling `out`.
pub(crate) fn execute(
    st: &mut State,
    uid: u32,
    opcode: u16,
    input: &[u8; CMD_IN_SIZE],
    out: &mut [u8; CMD_OUT_SIZE],
) -> Result<(), CmdError> {
    use CmdOpcode::*;
    let Some(op) = CmdOpcode::from_raw(opcode) else {
        log::warn!("unknown command opcode {opcode:#06x}");
        return Err(CmdError {
            status: CmdStatus::BadOpcode,
            syndrome: 0,
        });
    };
    match op {
        QueryDevice => query::device(st, out),
        QueryPort => query::port(st, input, out),
        QueryGid => query::gid(st, input, out),
        SetGid => query::set_gid(st, input),
        CreatePd => pd_mr::create_pd(st, uid, out),
        DestroyPd => pd_mr::destroy_pd(st, uid, input),
        RegMr => pd_mr::reg_mr(st, uid, input, out),
        DeregMr => pd_mr::dereg_mr(st, uid, input),
        ReregMr => pd_mr::rereg_mr(st, uid, input),
        AllocMw => pd_mr::alloc_mw(st, uid, input, out),
        DeallocMw => pd_mr::dealloc_mw(st, uid, input),
        CreateCq => cq::create(st, uid, input, out),
        DestroyCq => cq::destroy(st, uid, input),
        ResizeCq => cq::resize(st, uid, input),
        CreateQp => qp::create(st, uid, input, out),
        ModifyQp => qp::modify(st, uid, input),
        QueryQp => qp::query(st, uid, input, out),
        DestroyQp => qp::destroy(st, uid, input),
        QueryCounters => counters::query(st, uid, input, out),
        CreateSrq | DestroySrq | ModifySrq | QuerySrq if st.dev.cfg.max_srq == 0 => {
            log::warn!("command {op:?}: this device has no SRQs");
            Err(CmdError {
                status: CmdStatus::BadOpcode,
                syndrome: 0,
            })
        }
        CreateSrq => srq::create(st, uid, input, out),
        DestroySrq => srq::destroy(st, uid, input),
        ModifySrq => srq::modify(st, uid, input),
        QuerySrq => srq::query(st, uid, input, out),
        AllocUctx => uctx::alloc(st, uid, input, out),
        DeallocUctx => uctx::dealloc(st, uid, input),
        CreateEq => eq::create(st, uid, input, out),
        DestroyEq => eq::destroy(st, uid, input),
    }
}

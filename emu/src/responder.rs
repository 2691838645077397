//! The responder: executes an incoming request against the destination QP
//! and answers with an ACK, READ data, an atomic result or a NAK.
//!
//! Errors follow InfiniBand RC semantics: a responder-side error moves the
//! responder QP to the error state and NAKs the requester. An error that a
//! receive WQE's completion can report needs nothing more; otherwise the
//! responder gets one async event (`QpAccessErr` for rkey errors, `QpReqErr`
//! for invalid requests, `QpFatal` for local failures).

use std::sync::atomic::{AtomicU64, Ordering};

use rnic_hw_regs::cqe::{CqeFlags, Syndrome};
use rnic_hw_regs::eqe::EventType;
use rnic_hw_regs::le32;
use rnic_hw_regs::verbs::{access, WcOpcode, WcStatus};

use crate::cq;
use crate::op::{Nak, ReqOp, Request, Response};
use crate::qp::{self, BadDbrec, Wq};
use crate::sgl::{self, Seg, Sgl};
use crate::state::State;
use crate::wqe::{self, RecvError, RecvWqe};

/// Executes `req` at QP `req.dest_qpn`, which exists and is in RTR or RTS.
pub(crate) fn execute(st: &mut State, req: &Request<'_>) -> Response {
    let qpn = req.dest_qpn;
    let len = req.len as usize;
    match req.op {
        ReqOp::Send | ReqOp::SendImm => with_scratch(st, |st, s| receive(st, qpn, req, s)),
        ReqOp::WriteImm => with_scratch(st, |st, s| write_imm(st, qpn, req, &mut s.wqe)),
        ReqOp::Write => match remote(st, qpn, req.raddr, req.rkey, req.len, access::REMOTE_WRITE) {
            Ok(dst) => {
                sgl::copy(req.payload, &[dst], len);
                Response::Ack
            }
            Err(nak) => nak,
        },
        ReqOp::Read | ReqOp::CmpSwap | ReqOp::FetchAdd if !accepts_rd_atomic(st, qpn) => {
            qp::to_err(st, qpn, Some((EventType::QpReqErr, Syndrome::NoRdAtomic)));
            Response::Nak(Nak::InvalidRequest, Syndrome::NoRdAtomic)
        }
        ReqOp::Read => match remote(st, qpn, req.raddr, req.rkey, req.len, access::REMOTE_READ) {
            Ok(src) => Response::Read(src),
            Err(nak) => nak,
        },
        ReqOp::CmpSwap | ReqOp::FetchAdd => atomic(st, qpn, req),
    }
}

/// Reusable buffers for the responder, kept in the device state (taken
/// while a message consumes a receive WQE): neither allocated nor
/// initialized per message.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    /// The receive WQE being consumed.
    wqe: RecvWqe,
    /// Its scatter list resolved to host memory.
    dst: Sgl,
}

/// Runs `f` with the responder's scratch buffers.
fn with_scratch(st: &mut State, f: impl FnOnce(&mut State, &mut Scratch) -> Response) -> Response {
    let mut s = st.recv_scratch.take().unwrap_or_default();
    let r = f(st, &mut s);
    st.recv_scratch = Some(s);
    r
}

/// Whether QP `qpn` accepts RDMA READ and atomic requests: a responder
/// with no resources for them (`max_dest_rd_atomic` 0) rejects them as
/// invalid requests, as the InfiniBand spec requires.
fn accepts_rd_atomic(st: &State, qpn: u32) -> bool {
    st.objs
        .qps
        .get(qpn)
        .is_some_and(|qp| qp.attrs.max_dest_rd_atomic > 0)
}

/// A local failure of the responder (its memory faulted).
fn local_fault(st: &mut State, qpn: u32) -> Response {
    qp::to_err(st, qpn, Some((EventType::QpFatal, Syndrome::DmaFault)));
    Response::Nak(Nak::RemoteOp, Syndrome::DmaFault)
}

/// Checks `rkey` for `len` bytes at `raddr` with `need` access at QP
/// `qpn` and returns the target memory, or the syndrome of the failed check.
/// A zero-length RDMA operation checks no key, as the InfiniBand spec says.
fn check_rkey(
    st: &mut State,
    qpn: u32,
    raddr: u64,
    rkey: u32,
    len: u64,
    need: u32,
) -> Result<Seg, Syndrome> {
    if len == 0 {
        return Ok(Seg::EMPTY);
    }
    let Some(qp) = st.objs.qps.get(qpn) else {
        return Err(Syndrome::BadDestQp);
    };
    let (pdn, qp_access) = (qp.pdn, qp.attrs.qp_access_flags.to_ne());
    match st.objs.mrs.get_mut(rkey) {
        None => Err(Syndrome::BadRkey),
        Some(mr) if mr.pdn != pdn => Err(Syndrome::PdMismatch),
        Some(mr) if mr.access & need != need => Err(Syndrome::AccessDenied),
        Some(_) if qp_access & need != need => Err(Syndrome::QpAccessDenied),
        Some(mr) => sgl::mr_range(mr, &st.iommu, raddr, len),
    }
}

/// [`check_rkey`] for an operation that consumes no receive WQE: a failure
/// can only be reported by an async event on the responder and a NAK.
fn remote(
    st: &mut State,
    qpn: u32,
    raddr: u64,
    rkey: u32,
    len: u64,
    need: u32,
) -> Result<Seg, Response> {
    match check_rkey(st, qpn, raddr, rkey, len, need) {
        Ok(seg) => Ok(seg),
        Err(Syndrome::DmaFault) => Err(local_fault(st, qpn)),
        Err(syndrome) => {
            log::debug!("QP {qpn}: remote access refused: {syndrome:?}");
            qp::to_err(st, qpn, Some((EventType::QpAccessErr, syndrome)));
            Err(Response::Nak(Nak::RemoteAccess, syndrome))
        }
    }
}

/// Copies the receive WQE at QP `qpn`'s receive consumer index, not yet
/// consumed, into `w`; receiver-not-ready if there is none.
fn next_recv(st: &mut State, qpn: u32, w: &mut RecvWqe) -> Result<(), Response> {
    let max_sge = st.cfg.max_sge;
    let Some(qp) = st.objs.qps.get_mut(qpn) else {
        return Err(Response::Timeout);
    };
    // The doorbell record is read only once the receive WQEs known from it
    // are consumed.
    if qp::known(qp, Wq::Rq) == 0 {
        match qp::published(qp, &st.iommu, Wq::Rq) {
            Ok(0) => return Err(Response::Nak(Nak::Rnr, Syndrome::None)),
            Ok(_) => {}
            Err(BadDbrec::Unmapped) => return Err(local_fault(st, qpn)),
            Err(e @ BadDbrec::Malformed) => {
                qp::to_err(st, qpn, Some((EventType::QpFatal, e.syndrome())));
                return Err(Response::Nak(Nak::RemoteOp, Syndrome::RemoteError));
            }
        }
    }
    let Some(qp) = st.objs.qps.get_mut(qpn) else {
        return Err(Response::Timeout);
    };
    match wqe::fetch_recv(w, qp, &st.iommu, max_sge) {
        Ok(()) => Ok(()),
        Err(RecvError::Fault) => Err(local_fault(st, qpn)),
        Err(RecvError::Malformed(wr_id)) => Err(recv_error(
            st,
            qpn,
            wr_id,
            (WcStatus::LocQpOpErr, Syndrome::BadWqe),
            (Nak::RemoteOp, Syndrome::RemoteError),
        )),
    }
}

/// Consumes the receive WQE `wr_id` with an error completion, moves the QP
/// to the error state, and NAKs the requester with `nak`.
fn recv_error(
    st: &mut State,
    qpn: u32,
    wr_id: u64,
    (status, syndrome): (WcStatus, Syndrome),
    (nak, nak_syndrome): (Nak, Syndrome),
) -> Response {
    log::debug!("QP {qpn}: receive WQE {wr_id:#x} failed: {status:?} ({syndrome:?})");
    // The receive CQE reports the error; an event only if it cannot.
    let mut event = None;
    if let Some(qp) = st.objs.qps.get_mut(qpn) {
        qp.rq_ci = qp.rq_ci.wrapping_add(1);
        let cqe = cq::cqe(
            wr_id,
            qpn,
            qp.rq_ci,
            WcOpcode::Recv.raw(),
            status,
            syndrome as u32,
        );
        let cqn = qp.recv_cqn;
        if cq::write(st, cqn, &cqe).is_err() {
            event = Some((EventType::QpFatal, Syndrome::CqError));
        }
    }
    qp::to_err(st, qpn, event);
    Response::Nak(nak, nak_syndrome)
}

/// Consumes the receive WQE `wr_id` with a successful completion.
fn complete_recv(st: &mut State, qpn: u32, wr_id: u64, req: &Request<'_>, opcode: WcOpcode) {
    let Some(qp) = st.objs.qps.get_mut(qpn) else {
        return;
    };
    qp.rq_ci = qp.rq_ci.wrapping_add(1);
    let mut cqe = cq::cqe(wr_id, qpn, qp.rq_ci, opcode.raw(), WcStatus::Success, 0);
    cqe.byte_len = le32::from_ne(req.len as u32);
    cqe.src_qp = le32::from_ne(req.src_qpn);
    let with_imm = matches!(req.op, ReqOp::SendImm | ReqOp::WriteImm);
    if with_imm {
        cqe.imm = req.imm;
    }
    cqe.flags = CqeFlags::new()
        .with_with_imm(with_imm)
        .with_solicited(req.solicited);
    let cqn = qp.recv_cqn;
    if cq::write(st, cqn, &cqe).is_err() {
        qp::to_err(st, qpn, Some((EventType::QpFatal, Syndrome::CqError)));
    }
}

/// SEND and SEND with immediate: scatter the payload into the next receive
/// WQE.
fn receive(st: &mut State, qpn: u32, req: &Request<'_>, scratch: &mut Scratch) -> Response {
    let Scratch { wqe: w, dst } = scratch;
    if let Err(r) = next_recv(st, qpn, w) {
        return r;
    }
    let sges = w.sges();
    let capacity: u64 = sges.iter().map(wqe::sge_len).sum();
    if req.len > capacity {
        return recv_error(
            st,
            qpn,
            w.wr_id,
            (WcStatus::LocLenErr, Syndrome::RecvTooSmall),
            (Nak::InvalidRequest, Syndrome::RecvTooSmall),
        );
    }
    let Some(qp) = st.objs.qps.get(qpn) else {
        return Response::Timeout;
    };
    let pdn = qp.pdn;
    // Only the SGEs the message reaches are checked, as a NIC scattering
    // the data would.
    dst.clear();
    let mut left = req.len;
    for s in sges {
        if left == 0 {
            break;
        }
        let n = wqe::sge_len(s).min(left);
        let r = sgl::resolve(
            &mut st.objs.mrs,
            &st.iommu,
            pdn,
            s.lkey.to_ne(),
            s.addr.to_ne(),
            n,
            access::LOCAL_WRITE,
        );
        match r {
            Ok(seg) => dst.push(seg),
            Err(syndrome) => {
                let nak = match syndrome {
                    Syndrome::DmaFault => Syndrome::DmaFault,
                    _ => Syndrome::RemoteError,
                };
                return recv_error(
                    st,
                    qpn,
                    w.wr_id,
                    (WcStatus::LocProtErr, syndrome),
                    (Nak::RemoteOp, nak),
                );
            }
        }
        left -= n;
    }
    sgl::copy(req.payload, dst.segs(), req.len as usize);
    complete_recv(st, qpn, w.wr_id, req, WcOpcode::Recv);
    Response::Ack
}

/// RDMA WRITE with immediate: write the payload, then consume a receive WQE
/// for the immediate. The receive WQE is checked first: no WQE means RNR
/// before any data lands.
fn write_imm(st: &mut State, qpn: u32, req: &Request<'_>, w: &mut RecvWqe) -> Response {
    if let Err(r) = next_recv(st, qpn, w) {
        return r;
    }
    // A failure consumes the receive WQE with an error completion, which
    // reports it (IBV_WC_LOC_ACCESS_ERR is defined for exactly this case).
    match check_rkey(st, qpn, req.raddr, req.rkey, req.len, access::REMOTE_WRITE) {
        Ok(dst) => sgl::copy(req.payload, &[dst], req.len as usize),
        Err(Syndrome::DmaFault) => {
            return recv_error(
                st,
                qpn,
                w.wr_id,
                (WcStatus::LocProtErr, Syndrome::DmaFault),
                (Nak::RemoteOp, Syndrome::DmaFault),
            )
        }
        Err(syndrome) => {
            return recv_error(
                st,
                qpn,
                w.wr_id,
                (WcStatus::LocAccessErr, syndrome),
                (Nak::RemoteAccess, syndrome),
            )
        }
    }
    complete_recv(st, qpn, w.wr_id, req, WcOpcode::RecvRdmaWithImm);
    Response::Ack
}

/// Compare-and-swap and fetch-and-add on the 8 bytes at `raddr`
/// (a little-endian u64), atomic with respect to the host CPU too.
fn atomic(st: &mut State, qpn: u32, req: &Request<'_>) -> Response {
    if req.raddr % 8 != 0 {
        qp::to_err(st, qpn, Some((EventType::QpReqErr, Syndrome::Misaligned)));
        return Response::Nak(Nak::InvalidRequest, Syndrome::Misaligned);
    }
    let seg = match remote(st, qpn, req.raddr, req.rkey, 8, access::REMOTE_ATOMIC) {
        Ok(seg) => seg,
        Err(nak) => return nak,
    };
    let p = seg.ptr.0.cast::<u64>();
    if p as usize % 8 != 0 {
        // IOVAs keep the host page offset, so this means a broken mapping.
        return local_fault(st, qpn);
    }
    // SAFETY: 8 bytes inside a live mapping (translated under the device
    // lock), 8-byte aligned (checked); host code touching them concurrently
    // is expected to use atomics too, as it would with a real NIC.
    let a = unsafe { AtomicU64::from_ptr(p) };
    let orig = match req.op {
        ReqOp::CmpSwap => {
            match a.compare_exchange(
                req.compare.to_le(),
                req.swap_add.to_le(),
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(v) | Err(v) => v,
            }
        }
        _ => {
            let add = |v: u64| Some(u64::from_le(v).wrapping_add(req.swap_add).to_le());
            match a.fetch_update(Ordering::SeqCst, Ordering::SeqCst, add) {
                Ok(v) | Err(v) => v,
            }
        }
    };
    Response::Atomic(u64::from_le(orig))
}

//! The requester: runs a QP's send queue, turning WQEs into requests,
//! sending them through the port and completing them from the response.

use rnic_hw_regs::cqe::{CqeFlags, Syndrome};
use rnic_hw_regs::eqe::EventType;
use rnic_hw_regs::uar::SqDoorbell;
use rnic_hw_regs::verbs::{access, QpState, WcStatus};

use crate::op::{Nak, ReqOp, Request, Response};
use crate::qp::{self, Wq};
use crate::sgl::{self, Seg, Sgl};
use crate::state::State;
use crate::wqe::{self, Data, SendWqe, WqeError};
use crate::{cq, port};

/// `rnr_retry` value meaning "retry without limit".
const RNR_RETRY_INFINITE: u8 = 7;

/// An SQ doorbell on page `page`: reads the doorbell record (a malformed or
/// unmapped one moves the QP to the error state with a `QpFatal` event) and
/// runs the send queue. A send queue stalled on receiver-not-ready stays
/// stalled: the new WQEs queue behind the stalled one, which only an event
/// at the responder retries (see [`crate::qp::wake_waiters`]).
pub(crate) fn sq_doorbell(st: &mut State, page: u32, db: SqDoorbell) {
    let qpn = db.qpn();
    let Some(qp) = st.objs.qps.get_mut(qpn) else {
        log::warn!("SQ doorbell for unknown QP {qpn} ignored");
        return;
    };
    if qp.uar_page != page {
        log::warn!(
            "SQ doorbell for QP {qpn} on page {page}, not its page {}: ignored",
            qp.uar_page
        );
        return;
    }
    // The doorbell record is not in use before the QP leaves RESET; in the
    // error state the flush reads it.
    if !matches!(qp.state, QpState::Reset | QpState::Err) {
        if let Err(e) = qp::published(qp, &st.iommu, Wq::Sq) {
            qp::to_err(st, qpn, Some((EventType::QpFatal, e.syndrome())));
            st.run_kicked();
            return;
        }
    }
    process_sq(st, qpn);
    st.run_kicked();
}

/// Runs QP `qpn`'s send queue: executes WQEs in order while the QP is in
/// RTS, flushes them in the error state, leaves them waiting otherwise.
pub(crate) fn process_sq(st: &mut State, qpn: u32) {
    // Scratch space kept in the device state: neither allocated nor
    // initialized per WQE or per doorbell.
    let mut scratch = st.scratch.take().unwrap_or_default();
    run_sq(st, qpn, &mut scratch);
    st.scratch = Some(scratch);
}

/// Reusable buffers for the requester.
#[derive(Debug, Default)]
pub(crate) struct Scratch {
    wqe: SendWqe,
    local: Sgl,
}

fn run_sq(st: &mut State, qpn: u32, scratch: &mut Scratch) {
    let Scratch { wqe: w, local } = scratch;
    loop {
        let Some(qp) = st.objs.qps.get_mut(qpn) else {
            return;
        };
        match qp.state {
            _ if qp.sq_busy => return,
            QpState::Rts if qp.rnr_stalled_on.is_none() => {}
            QpState::Err => return qp::flush_sq(st, qpn),
            _ => return,
        }
        // The doorbell record is read again only once the BBs published by
        // the last producer index accepted from it are consumed.
        let pending = match qp::known(qp, Wq::Sq) {
            0 => match qp::published(qp, &st.iommu, Wq::Sq) {
                Ok(0) => return,
                Ok(pending) => pending,
                Err(e) => {
                    return qp::to_err(st, qpn, Some((EventType::QpFatal, e.syndrome())));
                }
            },
            pending => pending,
        };
        let max_bbs = st.cfg.max_wqe_bbs;
        match wqe::fetch(w, qp, &st.iommu, pending, max_bbs) {
            Ok(()) => {
                if !execute(st, qpn, w, local) {
                    return;
                }
            }
            Err(e) => fail(st, qpn, e),
        }
    }
}

/// The requester's view of one WQE's outcome.
enum Outcome {
    /// Completed successfully, with this byte count.
    Done(u32),
    /// Failed with this status.
    Failed(WcStatus, Syndrome),
    /// Receiver-not-ready at this QP.
    Rnr(u32),
}

/// Executes one fetched WQE, using `local` as scratch for its local
/// scatter/gather list; returns false if the send queue stalled.
fn execute(st: &mut State, qpn: u32, w: &SendWqe, local: &mut Sgl) -> bool {
    let Some(qp) = st.objs.qps.get_mut(qpn) else {
        return false;
    };
    let (pdn, dest, rnr_retry) = (qp.pdn, qp.attrs.dest_qp_num.to_ne(), qp.attrs.rnr_retry);
    let signaled = w.ctrl.word.signaled() || qp.sq_sig_all;
    let outcome = match w.decode(qp.max_inline, st.cfg.max_sge) {
        Err((status, syndrome)) => Outcome::Failed(status, syndrome),
        Ok(d) => {
            qp.sq_busy = true;
            let o = transfer(st, qpn, pdn, dest, w, d, local);
            if let Some(qp) = st.objs.qps.get_mut(qpn) {
                qp.sq_busy = false;
            }
            o
        }
    };
    let opcode = wqe::wc_opcode(w.ctrl.word.opcode());
    let wr_id = w.ctrl.wr_id.to_ne();
    let outcome = match outcome {
        Outcome::Rnr(responder) => match st.objs.qps.get_mut(qpn) {
            None => return false,
            Some(qp) => {
                // The first attempt and each retry count one RNR NAK:
                // `rnr_retry` retries are allowed after the first attempt,
                // 7 meaning without limit. Retries happen only when the
                // responder has a receive WQE again (another requester may
                // take it first) or leaves RTR/RTS.
                qp.rnr_naks = qp.rnr_naks.saturating_add(1);
                if rnr_retry < RNR_RETRY_INFINITE && qp.rnr_naks > rnr_retry {
                    Outcome::Failed(WcStatus::RnrRetryExcErr, Syndrome::RnrExceeded)
                } else {
                    qp.rnr_stalled_on = Some(responder);
                    Outcome::Rnr(responder)
                }
            }
        },
        o => o,
    };
    match outcome {
        Outcome::Rnr(responder) => {
            if let Some(r) = st.objs.qps.get_mut(responder) {
                if !r.rnr_waiters.contains(&qpn) {
                    r.rnr_waiters.push(qpn);
                }
            }
            log::trace!("QP {qpn}: RNR at QP {responder}; send queue stalled");
            false
        }
        Outcome::Done(byte_len) => {
            let Some(qp) = st.objs.qps.get_mut(qpn) else {
                return false;
            };
            qp.rnr_naks = 0;
            qp.sq_ci = qp.sq_ci.wrapping_add(w.bbs);
            if signaled {
                let mut cqe = cq::cqe(wr_id, qpn, qp.sq_ci, opcode, WcStatus::Success, 0);
                cqe.byte_len = rnic_hw_regs::le32::from_ne(byte_len);
                cqe.flags = CqeFlags::new().with_is_send(true);
                let cqn = qp.send_cqn;
                if cq::write(st, cqn, &cqe).is_err() {
                    qp::to_err(st, qpn, Some((EventType::QpFatal, Syndrome::CqError)));
                }
            }
            true
        }
        Outcome::Failed(status, syndrome) => {
            let e = WqeError {
                wr_id,
                bbs: w.bbs,
                opcode,
                status,
                syndrome,
            };
            fail(st, qpn, e);
            true
        }
    }
}

/// Completes a failed WQE with an error CQE and moves the QP to the error
/// state (flushing the rest). The CQE reports the error; only if it cannot be
/// written does the QP get a `QpFatal` event.
fn fail(st: &mut State, qpn: u32, e: WqeError) {
    let Some(qp) = st.objs.qps.get_mut(qpn) else {
        return;
    };
    log::debug!(
        "QP {qpn}: WQE {:#x} failed: {:?} ({:?})",
        e.wr_id,
        e.status,
        e.syndrome
    );
    qp.rnr_naks = 0;
    qp.sq_ci = qp.sq_ci.wrapping_add(e.bbs);
    let mut cqe = cq::cqe(
        e.wr_id,
        qpn,
        qp.sq_ci,
        e.opcode,
        e.status,
        e.syndrome as u32,
    );
    cqe.flags = CqeFlags::new().with_is_send(true);
    let cqn = qp.send_cqn;
    let event = cq::write(st, cqn, &cqe)
        .is_err()
        .then_some((EventType::QpFatal, Syndrome::CqError));
    qp::to_err(st, qpn, event);
}

/// Checks the local side of a decoded WQE, sends the request and applies
/// the response. `local` is scratch for the local scatter/gather list.
fn transfer(
    st: &mut State,
    qpn: u32,
    pdn: u32,
    dest: u32,
    w: &SendWqe,
    d: wqe::Decoded<'_>,
    local: &mut Sgl,
) -> Outcome {
    local.clear();
    let len = match d.data {
        Data::Inline(bytes) => {
            local.push(Seg {
                // The responder only reads a payload.
                ptr: crate::iommu::HostPtr(bytes.as_ptr().cast_mut()),
                len: bytes.len(),
            });
            bytes.len() as u64
        }
        Data::Sges(_) => {
            let len: u64 = d.data.sges().map(|s| wqe::sge_len(&s)).sum();
            if len > st.cfg.max_msg() {
                return Outcome::Failed(WcStatus::LocLenErr, Syndrome::TooLong);
            }
            // READ responses and atomic results are written locally.
            let need = if d.op == ReqOp::Read || d.op.is_atomic() {
                access::LOCAL_WRITE
            } else {
                0
            };
            for s in d.data.sges() {
                let r = sgl::resolve(
                    &mut st.objs.mrs,
                    &st.iommu,
                    pdn,
                    s.lkey.to_ne(),
                    s.addr.to_ne(),
                    wqe::sge_len(&s),
                    need,
                );
                match r {
                    Ok(seg) => local.push(seg),
                    Err(syndrome) => return Outcome::Failed(WcStatus::LocProtErr, syndrome),
                }
            }
            len
        }
    };
    let req = Request {
        op: d.op,
        src_qpn: qpn,
        dest_qpn: dest,
        // READ and atomic requests carry no payload; `local` is where
        // their response lands.
        payload: if d.op.has_payload() {
            local.segs()
        } else {
            &[]
        },
        len,
        raddr: d.raddr.raddr.to_ne(),
        rkey: d.raddr.rkey.to_ne(),
        imm: w.ctrl.imm,
        solicited: w.ctrl.word.solicited(),
        swap_add: d.atomic.swap_add.to_ne(),
        compare: d.atomic.compare.to_ne(),
    };
    match port::deliver(st, &req) {
        Response::Ack => Outcome::Done(0),
        Response::Read(remote) => {
            sgl::copy(&[remote], local.segs(), remote.len);
            Outcome::Done(remote.len as u32)
        }
        Response::Atomic(orig) => {
            let bytes = orig.to_le_bytes();
            let src = Seg {
                ptr: crate::iommu::HostPtr(bytes.as_ptr().cast_mut()),
                len: 8,
            };
            sgl::copy(&[src], local.segs(), 8);
            Outcome::Done(8)
        }
        Response::Nak(Nak::Rnr, _) => Outcome::Rnr(dest),
        Response::Nak(Nak::InvalidRequest, s) => Outcome::Failed(WcStatus::RemInvReqErr, s),
        Response::Nak(Nak::RemoteAccess, s) => Outcome::Failed(WcStatus::RemAccessErr, s),
        Response::Nak(Nak::RemoteOp, s) => Outcome::Failed(WcStatus::RemOpErr, s),
        Response::Timeout => Outcome::Failed(WcStatus::RetryExcErr, Syndrome::BadDestQp),
    }
}

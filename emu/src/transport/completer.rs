//! The completer: takes a QP's responses and completes its WQEs, in order.
//!
//! - An ACK for PSN `p` acknowledges every request up to `p` (coalesced);
//!   a READ response, an atomic ACK and any NAK acknowledge every request
//!   before theirs (implicit ACKs). A SEND or WRITE completes once its
//!   last PSN is acknowledged, a READ once its last response packet
//!   arrived, an atomic with its atomic ACK.
//! - An ACK past a READ or atomic whose response never came means the
//!   response was lost: the requester asks again (an implied NAK).
//! - A PSN-sequence NAK, a missing READ response packet or the retransmit
//!   timer rewinds the requester (go-back-N) to the NAK's PSN, the missing
//!   response's or the first PSN not acknowledged, costing one of
//!   `retry_cnt` retries; until the requester makes progress further NAKs
//!   start none (one rewind per loss, as rxe's `started_retry`), and the
//!   timer covers a rewind whose packets are lost again. An RNR NAK rewinds it
//!   after the NAK's timer, costing one of `rnr_retry` (7: without limit);
//!   a duplicate of it during that wait costs nothing.
//!   Progress (the oldest unacknowledged PSN moving) restores both
//!   counts.
//! - The other NAKs fail their WQE with `REM_INV_REQ_ERR`,
//!   `REM_ACCESS_ERR`, `REM_OP_ERR` or `REM_INV_RD_REQ_ERR`; running out of
//!   retries with `RETRY_EXC_ERR` or `RNR_RETRY_EXC_ERR`. The QP then moves
//!   to the error state and flushes what is left.

use rnic_hw_regs::counters::counter;
use rnic_hw_regs::cqe::{CqeFlags, Syndrome};
use rnic_hw_regs::eqe::EventType;
use rnic_hw_regs::le32;
use rnic_verbs::{access, QpState, QpType, WcStatus};

use super::{mtu_bytes, timers, ReqOp, ReqState};
use crate::cq;
use crate::objects::Qp;
use crate::port;
use crate::qp;
use crate::sgl;
use crate::state::Dev;
use crate::wire::aeth::{rnr_timer_us, AckKind, NakCode};
use crate::wire::bth::{psn_add, psn_diff, PSN_MASK};
use crate::wire::opcode::{Op, OpcodeInfo};
use crate::wire::roce::RoceRepr;

/// `rnr_retry` value meaning "retry without limit".
const RNR_RETRY_INFINITE: u8 = 7;

/// What a response is, for the requester it reaches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Response {
    /// For no PSN outstanding: ignored.
    NotOutstanding,
    /// An ACK of every PSN up to its own.
    Ack,
    /// An RNR NAK, with its timer code.
    Rnr { timer: u8 },
    /// A PSN-sequence NAK: packets from its PSN were lost.
    SeqNak,
    /// Any other NAK: the WQE at its PSN fails with this status.
    Nak {
        counter: usize,
        status: WcStatus,
        syndrome: Syndrome,
    },
    /// A READ response packet.
    ReadData,
    /// An atomic's answer, with the original value.
    AtomicAck { orig: u64 },
    /// A response no request can have (an atomic ACK carrying a NAK).
    Bad,
}

/// What the response `roce` of opcode class `info` is for requester state
/// `req`: a function of the two alone.
fn response(req: &ReqState, info: &OpcodeInfo, roce: &RoceRepr) -> Response {
    let psn = roce.bth.psn;
    // A response names a PSN that is outstanding.
    if psn_diff(psn, req.unacked) < 0 || psn_diff(psn, req.frontier) >= 0 {
        return Response::NotOutstanding;
    }
    match (info.op, roce.aeth.map(|a| a.kind)) {
        (Op::Ack, Some(AckKind::Ack { .. })) => Response::Ack,
        (Op::Ack, Some(AckKind::RnrNak { timer })) => Response::Rnr { timer },
        (Op::Ack, Some(AckKind::Nak(NakCode::PsnSeqError))) => Response::SeqNak,
        (Op::Ack, Some(AckKind::Nak(code))) => {
            let (counter, status, syndrome) = match code {
                NakCode::InvalidRequest => (
                    counter::INV_REQ_NAKS_RECEIVED,
                    WcStatus::RemInvReqErr,
                    Syndrome::RemoteInvalidRequest,
                ),
                NakCode::RemoteAccess => (
                    counter::ACCESS_NAKS_RECEIVED,
                    WcStatus::RemAccessErr,
                    Syndrome::RemoteAccess,
                ),
                NakCode::RemoteOperational => (
                    counter::OP_NAKS_RECEIVED,
                    WcStatus::RemOpErr,
                    Syndrome::RemoteError,
                ),
                NakCode::InvalidRdRequest | NakCode::PsnSeqError => (
                    counter::INV_REQ_NAKS_RECEIVED,
                    WcStatus::RemInvRdReqErr,
                    Syndrome::RemoteInvalidRd,
                ),
            };
            Response::Nak {
                counter,
                status,
                syndrome,
            }
        }
        (Op::ReadResponse, _) => Response::ReadData,
        (Op::AtomicAck, Some(AckKind::Ack { .. })) => Response::AtomicAck {
            orig: roce.atomic_ack_eth.map_or(0, |a| a.orig),
        },
        _ => Response::Bad,
    }
}

/// A response packet for QP `qpn` (in RTS), from its responder.
pub(crate) fn on_response(
    qp: &mut Qp,
    dev: &mut Dev,
    info: &OpcodeInfo,
    roce: &RoceRepr,
    payload: &[u8],
) {
    let qpn = qp.qpn;
    let psn = roce.bth.psn;
    let before = qp.req.unacked;
    match response(&qp.req, info, roce) {
        Response::NotOutstanding => {
            log::trace!("QP {qpn}: {} for PSN {psn:#x} not outstanding", info.name);
            return port::count(qp, dev, counter::RESPONSES_IGNORED);
        }
        Response::Ack => ack_through(qp, dev, psn),
        Response::Rnr { timer } => {
            port::count(qp, dev, counter::RNR_NAKS_RECEIVED);
            ack_through(qp, dev, psn_add(psn, PSN_MASK));
            rnr(qp, dev, psn, timer);
        }
        Response::SeqNak => {
            port::count(qp, dev, counter::SEQ_NAKS_RECEIVED);
            ack_through(qp, dev, psn_add(psn, PSN_MASK));
            // One rewind per loss: until progress (which the implicit ACK
            // may just have made), NAKs start no other rewind; the
            // retransmit timer covers a retry whose packets are lost
            // again.
            if !qp.req.retrying {
                retry(qp, dev, psn);
            }
        }
        Response::Nak {
            counter,
            status,
            syndrome,
        } => {
            port::count(qp, dev, counter);
            ack_through(qp, dev, psn_add(psn, PSN_MASK));
            fail_at(qp, dev, psn, status, syndrome);
        }
        Response::ReadData => read_response(qp, dev, psn, payload),
        Response::AtomicAck { orig } => atomic_ack(qp, dev, psn, orig),
        Response::Bad => {
            fail_at(qp, dev, psn, WcStatus::BadRespErr, Syndrome::BadResponse);
        }
    }
    progress(qp, dev, before);
}

/// Moves the oldest unacknowledged PSN to `psn`. Progress restores the
/// retry counts and ends a rewind at once: a NAK or gap that the same
/// response reveals is a new loss, and costs its own retry.
fn acked(qp: &mut Qp, psn: u32) {
    let req = &mut qp.req;
    if psn != req.unacked {
        req.unacked = psn;
        req.retry_left = qp.attrs.retry_cnt;
        req.rnr_left = qp.attrs.rnr_retry;
        req.retrying = false;
    }
}

/// After a response: if the oldest unacknowledged PSN moved, the
/// retransmit timer restarts (or stops when nothing is outstanding) and
/// the requester runs again (the window moved).
fn progress(qp: &mut Qp, dev: &mut Dev, before: u32) {
    if !sending(qp.state) || qp.req.unacked == before {
        return;
    }
    let req = &qp.req;
    let outstanding = psn_diff(req.frontier, req.unacked) > 0;
    if qp.timers.rnr.is_none() && outstanding {
        timers::arm_retx(qp, dev);
    } else {
        timers::stop_retx(qp);
    }
    dev.kick(qp);
}

/// Completes, from the front, every WQE acknowledged by an ACK of PSN
/// `a`. A READ or atomic that `a` covers without its response having
/// arrived was answered and the answer lost: the requester asks again.
fn ack_through(qp: &mut Qp, dev: &mut Dev, a: u32) {
    loop {
        if !sending(qp.state) {
            return;
        }
        let Some(e) = qp.req.inflight.front() else {
            return;
        };
        if e.error.is_some() {
            return fail_front(qp, dev);
        }
        if psn_diff(a, e.first_psn) < 0 {
            return;
        }
        let (rd_atomic, last) = (e.op.is_rd_atomic(), e.last_psn());
        if psn_diff(a, last) < 0 {
            // Part of a SEND or WRITE.
            if !rd_atomic {
                acked(qp, psn_add(a, 1));
            }
            return;
        }
        if rd_atomic {
            let missing = psn_add(e.first_psn, e.recv);
            acked(qp, missing);
            if !qp.req.retrying {
                retry(qp, dev, missing);
            }
            return;
        }
        acked(qp, psn_add(last, 1));
        complete_front(qp, dev, WcStatus::Success, Syndrome::None, 0);
    }
}

/// A retransmit timer expiry.
pub(crate) fn on_timeout(qp: &mut Qp, dev: &mut Dev) {
    let qpn = qp.qpn;
    if !sending(qp.state) || psn_diff(qp.req.frontier, qp.req.unacked) <= 0 {
        return;
    }
    let unacked = qp.req.unacked;
    log::debug!("QP {qpn}: local ACK timeout at PSN {unacked:#x}");
    port::count(qp, dev, counter::LOCAL_ACK_TIMEOUTS);
    retry(qp, dev, unacked);
}

/// Rewinds to PSN `psn` for a retry, or fails the WQE there when the
/// retries ran out.
fn retry(qp: &mut Qp, dev: &mut Dev, psn: u32) {
    if !sending(qp.state) {
        return;
    }
    if qp.req.retry_left == 0 {
        port::count(qp, dev, counter::RETRY_EXCEEDED);
        return fail_at(qp, dev, psn, WcStatus::RetryExcErr, Syndrome::RetryExceeded);
    }
    qp.req.retry_left -= 1;
    qp.req.retrying = true;
    rewind(qp, dev, psn);
}

/// An RNR NAK for PSN `psn` with timer code `timer`.
fn rnr(qp: &mut Qp, dev: &mut Dev, psn: u32, timer: u8) {
    let qpn = qp.qpn;
    let now = dev.now;
    if !sending(qp.state) {
        return;
    }
    let waiting = qp.timers.rnr.is_some();
    match rnr_verdict(&mut qp.req, waiting, qp.attrs.rnr_retry, psn) {
        Rnr::Duplicate => log::trace!("QP {qpn}: duplicate RNR NAK for PSN {psn:#x}"),
        Rnr::Exceeded => {
            port::count(qp, dev, counter::RNR_RETRY_EXCEEDED);
            fail_at(
                qp,
                dev,
                psn,
                WcStatus::RnrRetryExcErr,
                Syndrome::RnrExceeded,
            );
        }
        Rnr::Wait => {
            rewind(qp, dev, psn);
            timers::stop_retx(qp);
            timers::arm_rnr(qp, dev, now + rnr_timer_us(timer) * 1000);
        }
    }
}

/// What an RNR NAK does to a requester.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Rnr {
    /// A duplicate of the RNR NAK whose wait is running: nothing.
    Duplicate,
    /// Wait its timer, then send again from its PSN (one RNR retry spent).
    Wait,
    /// No RNR retry is left: the WQE fails.
    Exceeded,
}

/// The verdict on an RNR NAK for `psn`, for requester state `req` whose
/// RNR wait is running or not (`waiting`), with `rnr_retry` (7: without
/// limit); `req` spends the retry. While a wait an RNR NAK for this PSN
/// began lasts, nothing was sent again: another RNR NAK for it is a
/// duplicate of that one (the wire may duplicate frames) and costs no
/// retry.
fn rnr_verdict(req: &mut ReqState, waiting: bool, rnr_retry: u8, psn: u32) -> Rnr {
    if waiting && req.rnr_psn == Some(psn) {
        return Rnr::Duplicate;
    }
    if rnr_retry != RNR_RETRY_INFINITE {
        if req.rnr_left == 0 {
            return Rnr::Exceeded;
        }
        req.rnr_left -= 1;
    }
    req.retrying = true;
    req.rnr_psn = Some(psn);
    Rnr::Wait
}

/// Makes the requester send again from PSN `psn` (go-back-N).
pub(crate) fn rewind(qp: &mut Qp, dev: &mut Dev, psn: u32) {
    let qpn = qp.qpn;
    let req = &mut qp.req;
    let Some(at) = req
        .inflight
        .iter()
        .position(|e| e.npkts > 0 && psn_diff(psn, e.last_psn()) <= 0)
    else {
        return;
    };
    log::trace!("QP {qpn}: go back to PSN {psn:#x}");
    for (i, e) in req.inflight.iter_mut().enumerate().skip(at) {
        e.sent = if i == at && !e.op.is_rd_atomic() {
            psn_diff(psn, e.first_psn).max(0) as u32
        } else {
            0
        };
    }
    req.send_at = req.send_at.min(at);
    dev.kick(qp);
}

/// Fails the WQE holding PSN `psn` with `status`: at once if it is the
/// oldest, else once every WQE before it has completed (nothing after it
/// is sent again).
fn fail_at(qp: &mut Qp, dev: &mut Dev, psn: u32, status: WcStatus, syndrome: Syndrome) {
    if !sending(qp.state) {
        return;
    }
    let req = &mut qp.req;
    let at = req
        .inflight
        .iter()
        .position(|e| e.npkts > 0 && psn_diff(psn, e.last_psn()) <= 0)
        .unwrap_or(0);
    if let Some(e) = req.inflight.get_mut(at) {
        e.error = Some((status, syndrome));
        req.send_at = req.send_at.min(at);
    }
    if at == 0 {
        fail_front(qp, dev);
    }
}

/// Completes the oldest WQE with the error it carries; the QP moves to
/// the error state.
pub(crate) fn fail_front(qp: &mut Qp, dev: &mut Dev) {
    let err = qp.req.inflight.front().and_then(|e| e.error);
    if let Some((status, syndrome)) = err {
        complete_front(qp, dev, status, syndrome, 0);
    }
}

/// Completes the oldest WQE with `status`: a CQE if it is signaled or
/// failed; a failure moves the QP to the error state.
pub(crate) fn complete_front(
    qp: &mut Qp,
    dev: &mut Dev,
    status: WcStatus,
    syndrome: Syndrome,
    byte_len: u32,
) {
    let qpn = qp.qpn;
    let Some(e) = qp.req.inflight.pop_front() else {
        return;
    };
    let req = &mut qp.req;
    req.send_at = req.send_at.saturating_sub(1);
    if e.op.is_rd_atomic() && req.rd_atomic > 0 {
        req.rd_atomic -= 1;
    }
    qp.sq_ci = qp.sq_ci.wrapping_add(e.wqe.bbs);
    let ok = status == WcStatus::Success;
    if !ok {
        log::debug!(
            "QP {qpn}: WQE {:#x} failed: {status:?} ({syndrome:?})",
            e.wr_id
        );
    }
    let mut event = None;
    if e.signaled || !ok {
        let mut c = cq::cqe(e.wr_id, qpn, qp.sq_ci, e.wc_opcode, status, syndrome as u32);
        c.byte_len = le32::from_ne(byte_len);
        c.flags = CqeFlags::new().with_is_send(true);
        let cqn = qp.send_cqn;
        if cq::write(dev, cqn, &c).is_err() {
            event = Some((EventType::QpFatal, Syndrome::CqError));
        }
    }
    dev.recycle_wqe(e.wqe);
    let unreliable = qp.qp_type != QpType::Rc;
    if event.is_some() || (!ok && !unreliable) {
        qp::to_err(qp, dev, event);
    } else if !ok {
        // A UC or UD send error stops the send queue only.
        qp::to_sqe(qp, dev);
    } else {
        qp::check_drained(qp, dev);
    }
}

/// The index of the WQE holding PSN `psn`, once the responses before it
/// have acknowledged everything older: it must then be the oldest.
fn front_holding(qp: &mut Qp, dev: &mut Dev, psn: u32) -> Option<usize> {
    let at = qp
        .req
        .inflight
        .iter()
        .position(|e| e.npkts > 0 && psn_diff(psn, e.last_psn()) <= 0)?;
    let first = qp.req.inflight[at].first_psn;
    if psn_diff(psn, first) < 0 {
        return None;
    }
    // A response acknowledges every request before its own.
    ack_through(qp, dev, psn_add(first, PSN_MASK));
    (sending(qp.state)
        && qp
            .req
            .inflight
            .front()
            .is_some_and(|e| e.first_psn == first))
    .then_some(0)
}

/// A READ response packet.
fn read_response(qp: &mut Qp, dev: &mut Dev, psn: u32, payload: &[u8]) {
    let Some(at) = front_holding(qp, dev, psn) else {
        return;
    };
    let (pdn, mtu) = (qp.pdn, mtu_bytes(qp.attrs.path_mtu) as u64);
    let e = &qp.req.inflight[at];
    if e.op != ReqOp::Read {
        return fail_at(qp, dev, psn, WcStatus::BadRespErr, Syndrome::BadResponse);
    }
    let expected = psn_add(e.first_psn, e.recv);
    if psn != expected {
        let retrying = qp.req.retrying;
        port::count(qp, dev, counter::RESPONSES_IGNORED);
        if psn_diff(psn, expected) > 0 && !retrying {
            // A response packet went missing: ask for the rest.
            retry(qp, dev, expected);
        }
        return;
    }
    let off = e.recv as u64 * mtu;
    let last = e.recv + 1 == e.npkts;
    let want = if last { e.len - off } else { mtu };
    if payload.len() as u64 != want {
        return fail_at(qp, dev, psn, WcStatus::BadRespErr, Syndrome::BadResponse);
    }
    let Ok(d) = e
        .wqe
        .decode(qp.max_inline, rnic_hw_regs::wqe::MAX_SEND_WQE_DS as u8)
    else {
        return;
    };
    // The WQE stays in the QP table while the MR table is borrowed;
    // another process's memory is written by the READ's last response.
    let qpn = qp.qpn;
    let r = sgl::scatter(
        sgl::Keys {
            mrs: &mut dev.objs.mrs,
            iommu: &dev.iommu,
            pdn,
        },
        d.data.sges(),
        off,
        payload,
        access::LOCAL_WRITE,
        Some(qpn),
    )
    .and_then(|()| match last {
        true => sgl::flush(&dev.iommu, qpn),
        false => Ok(()),
    });
    if let Err(syn) = r {
        return fail_at(qp, dev, psn, WcStatus::LocProtErr, syn);
    }
    let e = &mut qp.req.inflight[at];
    e.recv += 1;
    let (done, len) = (e.recv == e.npkts, e.len);
    acked(qp, psn_add(psn, 1));
    if done {
        complete_front(qp, dev, WcStatus::Success, Syndrome::None, len as u32);
    }
}

/// An atomic ACK: the original value goes to the atomic's local SGE.
fn atomic_ack(qp: &mut Qp, dev: &mut Dev, psn: u32, orig: u64) {
    let Some(at) = front_holding(qp, dev, psn) else {
        return;
    };
    let pdn = qp.pdn;
    let e = &qp.req.inflight[at];
    if !e.op.is_atomic() {
        return fail_at(qp, dev, psn, WcStatus::BadRespErr, Syndrome::BadResponse);
    }
    let Ok(d) = e
        .wqe
        .decode(qp.max_inline, rnic_hw_regs::wqe::MAX_SEND_WQE_DS as u8)
    else {
        return;
    };
    let Some(sge) = d.data.sges().next() else {
        return;
    };
    let r = sgl::scatter(
        sgl::Keys {
            mrs: &mut dev.objs.mrs,
            iommu: &dev.iommu,
            pdn,
        },
        [sge],
        0,
        &orig.to_le_bytes(),
        access::LOCAL_WRITE,
        None,
    );
    if let Err(syn) = r {
        return fail_at(qp, dev, psn, WcStatus::LocProtErr, syn);
    }
    acked(qp, psn_add(psn, 1));
    complete_front(qp, dev, WcStatus::Success, Syndrome::None, 8);
}

/// Drops the requester's state (the QP left RTS for RESET or ERR): the
/// in-flight WQEs are still in the send queue, where the flush finds them.
pub(crate) fn clear(qp: &mut Qp, dev: &mut Dev) {
    for e in qp.req.inflight.drain(..) {
        dev.recycle_wqe(e.wqe);
    }
    qp.req.send_at = 0;
    qp.req.rd_atomic = 0;
    qp.bf = None;
    qp.timers.retx = None;
    qp.timers.rnr = None;
    qp.sq_fetch = qp.sq_ci;
}

/// Whether a QP in `state` completes and retransmits what it sent: in RTS,
/// and in SQD, which drains what is in flight.
fn sending(state: QpState) -> bool {
    matches!(state, QpState::Rts | QpState::Sqd)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::aeth::{AethRepr, CREDITS_INVALID};
    use crate::wire::atomic_ack_eth::AtomicAckEthRepr;
    use crate::wire::bth::BthRepr;
    use crate::wire::opcode::{self, info};

    /// A response of opcode `code` at `psn` with AETH `kind`.
    fn resp(code: u8, psn: u32, kind: Option<AckKind>) -> (&'static OpcodeInfo, RoceRepr) {
        let roce = RoceRepr {
            bth: BthRepr {
                opcode: code,
                psn,
                ..BthRepr::default()
            },
            aeth: kind.map(|kind| AethRepr { kind, msn: 0 }),
            ..RoceRepr::default()
        };
        (info(code).expect("a response opcode"), roce)
    }

    const ACK: AckKind = AckKind::Ack {
        credits: CREDITS_INVALID,
    };

    #[test]
    fn a_response_is_classified_by_its_psn_and_its_aeth() {
        // PSNs 100..110 outstanding.
        let req = ReqState {
            unacked: 100,
            frontier: 110,
            ..ReqState::default()
        };
        let of = |code, psn, kind| {
            let (i, r) = resp(code, psn, kind);
            response(&req, i, &r)
        };
        let ack = opcode::RC_ACKNOWLEDGE;
        assert_eq!(of(ack, 99, Some(ACK)), Response::NotOutstanding, "before");
        assert_eq!(
            of(ack, 110, Some(ACK)),
            Response::NotOutstanding,
            "not sent"
        );
        assert_eq!(of(ack, 100, Some(ACK)), Response::Ack);
        assert_eq!(
            of(ack, 109, Some(AckKind::RnrNak { timer: 3 })),
            Response::Rnr { timer: 3 }
        );
        assert_eq!(
            of(ack, 105, Some(AckKind::Nak(NakCode::PsnSeqError))),
            Response::SeqNak
        );
        assert_eq!(
            of(ack, 105, Some(AckKind::Nak(NakCode::RemoteAccess))),
            Response::Nak {
                counter: counter::ACCESS_NAKS_RECEIVED,
                status: WcStatus::RemAccessErr,
                syndrome: Syndrome::RemoteAccess,
            }
        );
        assert_eq!(
            of(opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 104, None),
            Response::ReadData
        );
        let (i, mut r) = resp(opcode::RC_ATOMIC_ACKNOWLEDGE, 101, Some(ACK));
        r.atomic_ack_eth = Some(AtomicAckEthRepr { orig: 42 });
        assert_eq!(response(&req, i, &r), Response::AtomicAck { orig: 42 });
        let nak = Some(AckKind::Nak(NakCode::InvalidRequest));
        assert_eq!(of(opcode::RC_ATOMIC_ACKNOWLEDGE, 101, nak), Response::Bad);
    }

    #[test]
    fn a_duplicated_rnr_nak_costs_no_retry() {
        let mut req = ReqState {
            rnr_left: 1,
            ..ReqState::default()
        };
        assert_eq!(rnr_verdict(&mut req, false, 1, 40), Rnr::Wait);
        assert_eq!(req.rnr_left, 0);
        // The wire delivers the NAK twice while its wait runs.
        assert_eq!(rnr_verdict(&mut req, true, 1, 40), Rnr::Duplicate);
        assert_eq!(req.rnr_left, 0, "no retry spent");
        // After the wait the SEND went again, and is refused again.
        assert_eq!(rnr_verdict(&mut req, false, 1, 40), Rnr::Exceeded);
    }

    #[test]
    fn rnr_retry_7_waits_without_limit_and_another_psn_is_no_duplicate() {
        let mut req = ReqState::default();
        for _ in 0..100 {
            assert_eq!(rnr_verdict(&mut req, false, 7, 5), Rnr::Wait);
        }
        let mut req = ReqState {
            rnr_left: 2,
            ..ReqState::default()
        };
        assert_eq!(rnr_verdict(&mut req, false, 2, 5), Rnr::Wait);
        assert_eq!(rnr_verdict(&mut req, true, 2, 6), Rnr::Wait, "another PSN");
        assert_eq!((req.rnr_left, req.rnr_psn), (0, Some(6)));
    }
}

/// The completer on a QP and its device parts alone.
#[cfg(test)]
mod machine {
    use rnic_hw_regs::counters::counter;
    use rnic_verbs::{QpState, WcStatus};

    use super::super::testbed::{ack, Bed};
    use super::super::ReqOp;
    use super::on_timeout;
    use crate::wire::aeth::{AckKind, AethRepr, NakCode};
    use crate::wire::opcode::RC_ACKNOWLEDGE;

    fn aeth(kind: AckKind) -> Option<AethRepr> {
        Some(AethRepr { kind, msn: 0 })
    }

    /// (wr_id, status) of every CQE.
    fn completions(b: &mut Bed) -> Vec<(u64, u8)> {
        b.cqes()
            .iter()
            .map(|c| (c.wr_id.to_ne(), c.status))
            .collect()
    }

    #[test]
    fn acks_complete_in_order_and_a_nak_fails_the_wqe_it_names() {
        let mut b = Bed::rc(4);
        b.qp.req.next_psn = 5;
        b.qp.req.unacked = 5;
        b.in_flight(ReqOp::Write, 1, 1, 1024);
        b.in_flight(ReqOp::Write, 2, 2, 2048);
        b.in_flight(ReqOp::Send, 3, 1, 8);
        b.respond(RC_ACKNOWLEDGE, 6, ack(0), &[]);
        assert_eq!(completions(&mut b), [(1, WcStatus::Success.raw())]);
        assert_eq!((b.qp.req.unacked, b.qp.sq_ci), (7, 1), "half of WQE 2");
        let nak = AckKind::Nak(NakCode::RemoteAccess);
        b.respond(RC_ACKNOWLEDGE, 7, aeth(nak), &[]);
        let done = completions(&mut b);
        assert_eq!(done[1], (2, WcStatus::RemAccessErr.raw()));
        assert_eq!(done[2], (3, WcStatus::WrFlushErr.raw()), "flushed");
        assert_eq!(b.qp.state, QpState::Err);
        assert_eq!(b.qp.counters.0[counter::ACCESS_NAKS_RECEIVED], 1);
    }

    #[test]
    fn a_timeout_rewinds_to_the_oldest_psn_not_acknowledged_until_retries_run_out() {
        let mut b = Bed::rc(4);
        b.qp.attrs.retry_cnt = 1;
        b.qp.req.retry_left = 1;
        b.in_flight(ReqOp::Write, 1, 3, 3072);
        b.respond(RC_ACKNOWLEDGE, 0, ack(0), &[]);
        on_timeout(&mut b.qp, &mut b.dev);
        let e = &b.qp.req.inflight[0];
        assert_eq!((e.sent, b.qp.req.send_at), (1, 0), "from PSN 1");
        assert!(b.qp.kicked, "the requester runs again");
        assert_eq!(b.qp.counters.0[counter::LOCAL_ACK_TIMEOUTS], 1);
        assert!(completions(&mut b).is_empty());
        on_timeout(&mut b.qp, &mut b.dev);
        assert_eq!(completions(&mut b), [(1, WcStatus::RetryExcErr.raw())]);
        assert_eq!(b.qp.state, QpState::Err);
    }

    #[test]
    fn an_ack_past_a_read_whose_data_never_came_asks_for_it_again() {
        let mut b = Bed::rc(4);
        b.qp.req.next_psn = 3;
        b.qp.req.unacked = 3;
        b.in_flight(ReqOp::Read, 1, 2, 2048);
        b.in_flight(ReqOp::Write, 2, 1, 64);
        // The responder executed both; the READ's response was lost.
        b.respond(RC_ACKNOWLEDGE, 5, ack(0), &[]);
        assert!(completions(&mut b).is_empty(), "the READ has no data");
        let req = &b.qp.req;
        assert_eq!((req.unacked, req.send_at), (3, 0));
        assert_eq!(req.inflight[0].sent, 0, "the READ is sent again");
        assert!(req.retrying);
        // A second such ACK starts no second retry.
        let left = req.retry_left;
        b.respond(RC_ACKNOWLEDGE, 5, ack(0), &[]);
        assert_eq!(b.qp.req.retry_left, left);
    }
}

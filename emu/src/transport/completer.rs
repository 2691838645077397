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
use crate::state::{State, WQE_POOL};
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
    st: &mut State,
    qpn: u32,
    info: &OpcodeInfo,
    roce: &RoceRepr,
    payload: &[u8],
) {
    let Some(qp) = st.objs.qps.get(qpn) else {
        return;
    };
    let psn = roce.bth.psn;
    let before = qp.req.unacked;
    match response(&qp.req, info, roce) {
        Response::NotOutstanding => {
            log::trace!("QP {qpn}: {} for PSN {psn:#x} not outstanding", info.name);
            return port::count(st, qpn, counter::RESPONSES_IGNORED);
        }
        Response::Ack => ack_through(st, qpn, psn),
        Response::Rnr { timer } => {
            port::count(st, qpn, counter::RNR_NAKS_RECEIVED);
            ack_through(st, qpn, psn_add(psn, PSN_MASK));
            rnr(st, qpn, psn, timer);
        }
        Response::SeqNak => {
            port::count(st, qpn, counter::SEQ_NAKS_RECEIVED);
            ack_through(st, qpn, psn_add(psn, PSN_MASK));
            // One rewind per loss: until progress (which the implicit ACK
            // may just have made), NAKs start no other rewind; the
            // retransmit timer covers a retry whose packets are lost
            // again.
            let retrying = st.objs.qps.get(qpn).is_some_and(|q| q.req.retrying);
            if !retrying {
                retry(st, qpn, psn);
            }
        }
        Response::Nak {
            counter,
            status,
            syndrome,
        } => {
            port::count(st, qpn, counter);
            ack_through(st, qpn, psn_add(psn, PSN_MASK));
            fail_at(st, qpn, psn, status, syndrome);
        }
        Response::ReadData => read_response(st, qpn, psn, payload),
        Response::AtomicAck { orig } => atomic_ack(st, qpn, psn, orig),
        Response::Bad => {
            fail_at(st, qpn, psn, WcStatus::BadRespErr, Syndrome::BadResponse);
        }
    }
    progress(st, qpn, before);
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
fn progress(st: &mut State, qpn: u32, before: u32) {
    let now = st.now;
    let Some(qp) = st.objs.qps.get_mut(qpn) else {
        return;
    };
    if !sending(qp.state) || qp.req.unacked == before {
        return;
    }
    let req = &qp.req;
    let outstanding = psn_diff(req.frontier, req.unacked) > 0;
    if qp.timers.rnr.is_none() && outstanding {
        timers::arm_retx(st, qpn, now);
    } else {
        timers::stop_retx(st, qpn);
    }
    st.kick(qpn);
}

/// Completes, from the front, every WQE acknowledged by an ACK of PSN
/// `a`. A READ or atomic that `a` covers without its response having
/// arrived was answered and the answer lost: the requester asks again.
fn ack_through(st: &mut State, qpn: u32, a: u32) {
    loop {
        let Some(qp) = st.objs.qps.get_mut(qpn) else {
            return;
        };
        if !sending(qp.state) {
            return;
        }
        let Some(e) = qp.req.inflight.front() else {
            return;
        };
        if e.error.is_some() {
            return fail_front(st, qpn);
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
                retry(st, qpn, missing);
            }
            return;
        }
        acked(qp, psn_add(last, 1));
        complete_front(st, qpn, WcStatus::Success, Syndrome::None, 0);
    }
}

/// A retransmit timer expiry.
pub(crate) fn on_timeout(st: &mut State, qpn: u32, _now: u64) {
    let Some(qp) = st.objs.qps.get_mut(qpn) else {
        return;
    };
    if !sending(qp.state) || psn_diff(qp.req.frontier, qp.req.unacked) <= 0 {
        return;
    }
    let unacked = qp.req.unacked;
    log::debug!("QP {qpn}: local ACK timeout at PSN {unacked:#x}");
    port::count(st, qpn, counter::LOCAL_ACK_TIMEOUTS);
    retry(st, qpn, unacked);
}

/// Rewinds to PSN `psn` for a retry, or fails the WQE there when the
/// retries ran out.
fn retry(st: &mut State, qpn: u32, psn: u32) {
    let Some(qp) = st.objs.qps.get_mut(qpn) else {
        return;
    };
    if !sending(qp.state) {
        return;
    }
    if qp.req.retry_left == 0 {
        port::count(st, qpn, counter::RETRY_EXCEEDED);
        return fail_at(st, qpn, psn, WcStatus::RetryExcErr, Syndrome::RetryExceeded);
    }
    qp.req.retry_left -= 1;
    qp.req.retrying = true;
    rewind(st, qpn, psn);
}

/// An RNR NAK for PSN `psn` with timer code `timer`.
fn rnr(st: &mut State, qpn: u32, psn: u32, timer: u8) {
    let now = st.now;
    let Some(qp) = st.objs.qps.get_mut(qpn) else {
        return;
    };
    if !sending(qp.state) {
        return;
    }
    let waiting = qp.timers.rnr.is_some();
    match rnr_verdict(&mut qp.req, waiting, qp.attrs.rnr_retry, psn) {
        Rnr::Duplicate => log::trace!("QP {qpn}: duplicate RNR NAK for PSN {psn:#x}"),
        Rnr::Exceeded => {
            port::count(st, qpn, counter::RNR_RETRY_EXCEEDED);
            fail_at(
                st,
                qpn,
                psn,
                WcStatus::RnrRetryExcErr,
                Syndrome::RnrExceeded,
            );
        }
        Rnr::Wait => {
            rewind(st, qpn, psn);
            timers::stop_retx(st, qpn);
            timers::arm_rnr(st, qpn, now + rnr_timer_us(timer) * 1000);
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
pub(crate) fn rewind(st: &mut State, qpn: u32, psn: u32) {
    let Some(qp) = st.objs.qps.get_mut(qpn) else {
        return;
    };
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
    st.kick(qpn);
}

/// Fails the WQE holding PSN `psn` with `status`: at once if it is the
/// oldest, else once every WQE before it has completed (nothing after it
/// is sent again).
fn fail_at(st: &mut State, qpn: u32, psn: u32, status: WcStatus, syndrome: Syndrome) {
    let Some(qp) = st.objs.qps.get_mut(qpn) else {
        return;
    };
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
        fail_front(st, qpn);
    }
}

/// Completes the oldest WQE with the error it carries; the QP moves to
/// the error state.
pub(crate) fn fail_front(st: &mut State, qpn: u32) {
    let err = st
        .objs
        .qps
        .get(qpn)
        .and_then(|q| q.req.inflight.front())
        .and_then(|e| e.error);
    if let Some((status, syndrome)) = err {
        complete_front(st, qpn, status, syndrome, 0);
    }
}

/// Completes the oldest WQE with `status`: a CQE if it is signaled or
/// failed; a failure moves the QP to the error state.
pub(crate) fn complete_front(
    st: &mut State,
    qpn: u32,
    status: WcStatus,
    syndrome: Syndrome,
    byte_len: u32,
) {
    let Some(qp) = st.objs.qps.get_mut(qpn) else {
        return;
    };
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
        if cq::write(st, cqn, &c).is_err() {
            event = Some((EventType::QpFatal, Syndrome::CqError));
        }
    }
    st.recycle_wqe(e.wqe);
    let unreliable = st
        .objs
        .qps
        .get(qpn)
        .is_some_and(|q| q.qp_type != QpType::Rc);
    if event.is_some() || (!ok && !unreliable) {
        qp::to_err(st, qpn, event);
    } else if !ok {
        // A UC or UD send error stops the send queue only.
        qp::to_sqe(st, qpn);
    } else {
        qp::check_drained(st, qpn);
    }
}

/// The index of the WQE holding PSN `psn`, once the responses before it
/// have acknowledged everything older: it must then be the oldest.
fn front_holding(st: &mut State, qpn: u32, psn: u32) -> Option<usize> {
    let qp = st.objs.qps.get(qpn)?;
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
    ack_through(st, qpn, psn_add(first, PSN_MASK));
    let qp = st.objs.qps.get(qpn)?;
    (sending(qp.state)
        && qp
            .req
            .inflight
            .front()
            .is_some_and(|e| e.first_psn == first))
    .then_some(0)
}

/// A READ response packet.
fn read_response(st: &mut State, qpn: u32, psn: u32, payload: &[u8]) {
    let Some(at) = front_holding(st, qpn, psn) else {
        return;
    };
    let Some(qp) = st.objs.qps.get(qpn) else {
        return;
    };
    let (pdn, mtu) = (qp.pdn, mtu_bytes(qp.attrs.path_mtu) as u64);
    let e = &qp.req.inflight[at];
    if e.op != ReqOp::Read {
        return fail_at(st, qpn, psn, WcStatus::BadRespErr, Syndrome::BadResponse);
    }
    let expected = psn_add(e.first_psn, e.recv);
    if psn != expected {
        let retrying = qp.req.retrying;
        port::count(st, qpn, counter::RESPONSES_IGNORED);
        if psn_diff(psn, expected) > 0 && !retrying {
            // A response packet went missing: ask for the rest.
            retry(st, qpn, expected);
        }
        return;
    }
    let off = e.recv as u64 * mtu;
    let last = e.recv + 1 == e.npkts;
    let want = if last { e.len - off } else { mtu };
    if payload.len() as u64 != want {
        return fail_at(st, qpn, psn, WcStatus::BadRespErr, Syndrome::BadResponse);
    }
    let Ok(d) = e
        .wqe
        .decode(qp.max_inline, rnic_hw_regs::wqe::MAX_SEND_WQE_DS as u8)
    else {
        return;
    };
    // The WQE stays in the QP table while the MR table is borrowed.
    let r = sgl::scatter(
        sgl::Keys {
            mrs: &mut st.objs.mrs,
            iommu: &st.iommu,
            pdn,
        },
        d.data.sges(),
        off,
        payload,
        access::LOCAL_WRITE,
    );
    if let Err(syn) = r {
        return fail_at(st, qpn, psn, WcStatus::LocProtErr, syn);
    }
    let Some(qp) = st.objs.qps.get_mut(qpn) else {
        return;
    };
    let e = &mut qp.req.inflight[at];
    e.recv += 1;
    let (done, len) = (e.recv == e.npkts, e.len);
    acked(qp, psn_add(psn, 1));
    if done {
        complete_front(st, qpn, WcStatus::Success, Syndrome::None, len as u32);
    }
}

/// An atomic ACK: the original value goes to the atomic's local SGE.
fn atomic_ack(st: &mut State, qpn: u32, psn: u32, orig: u64) {
    let Some(at) = front_holding(st, qpn, psn) else {
        return;
    };
    let Some(qp) = st.objs.qps.get_mut(qpn) else {
        return;
    };
    let pdn = qp.pdn;
    let e = &qp.req.inflight[at];
    if !e.op.is_atomic() {
        return fail_at(st, qpn, psn, WcStatus::BadRespErr, Syndrome::BadResponse);
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
            mrs: &mut st.objs.mrs,
            iommu: &st.iommu,
            pdn,
        },
        [sge],
        0,
        &orig.to_le_bytes(),
        access::LOCAL_WRITE,
    );
    if let Err(syn) = r {
        return fail_at(st, qpn, psn, WcStatus::LocProtErr, syn);
    }
    if let Some(qp) = st.objs.qps.get_mut(qpn) {
        acked(qp, psn_add(psn, 1));
    }
    complete_front(st, qpn, WcStatus::Success, Syndrome::None, 8);
}

/// Drops the requester's state (the QP left RTS for RESET or ERR): the
/// in-flight WQEs are still in the send queue, where the flush finds them.
pub(crate) fn clear(st: &mut State, qpn: u32) {
    if let Some(qp) = st.objs.qps.get_mut(qpn) {
        for e in qp.req.inflight.drain(..) {
            if st.wqe_pool.len() < WQE_POOL {
                st.wqe_pool.push(e.wqe);
            }
        }
        qp.req.send_at = 0;
        qp.req.rd_atomic = 0;
        qp.bf = None;
        qp.timers.retx = None;
        qp.timers.rnr = None;
        qp.sq_fetch = qp.sq_ci;
    }
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

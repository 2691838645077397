//! QP state changes and their side effects: the error state and its flush,
//! reset, the receive queue doorbell, and reading producer indices from
//! the QP's doorbell record.

use rnic_hw_regs::cqe::{CqeFlags, Syndrome};
use rnic_hw_regs::eqe::EventType;
use rnic_hw_regs::uar::{RqDoorbell, QP_DBREC_RQ, QP_DBREC_SQ};
use rnic_hw_regs::wqe::{wqe_bbs, CtrlSeg, RecvWqeHdr, SEND_WQE_BB};
use rnic_queues::device::ring_pending;
use rnic_verbs::{QpState, WcOpcode, WcStatus};

use crate::iommu::Iommu;
use crate::objects::Qp;
use crate::state::{Dev, State};
use crate::transport::{completer, responder, InMsg, QpTimers, ReqState, RespState};
use crate::{cq, eq, srq, wqe};

/// Work queue indices are 16 bits wide on the device side.
pub(crate) const WQ_INDEX_BITS: u32 = 16;

/// One of a QP's work queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wq {
    Sq,
    Rq,
}

/// Why a QP's doorbell record cannot be used.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum BadDbrec {
    /// The IOMMU does not map it.
    Unmapped,
    /// Its producer index is more than the ring size ahead of the device's
    /// consumer index (or behind it).
    Malformed,
}

impl BadDbrec {
    /// The syndrome of the `QpFatal` event that reports it.
    pub(crate) fn syndrome(self) -> Syndrome {
        match self {
            BadDbrec::Unmapped => Syndrome::DmaFault,
            BadDbrec::Malformed => Syndrome::BadWqe,
        }
    }
}

/// Reads `wq`'s producer index from the QP's doorbell record and returns
/// how many entries (send BBs or receive WQEs) it publishes past the
/// device's consumer index. An accepted index is remembered (`sq_pi` /
/// `rq_pi`): the entries up to it are known to be posted.
///
/// A producer index more than the ring size ahead of the consumer index
/// (for the SQ, of the oldest WQE not completed) cannot be right (the
/// driver cannot have posted more entries than the ring holds): the slots
/// past the ring size hold stale entries of the previous pass, which the
/// 8-bit `wqe_index` check cannot tell apart on large rings. Such a record
/// is refused, and so is an unmapped one.
pub(crate) fn published(qp: &mut Qp, iommu: &Iommu, wq: Wq) -> Result<u32, BadDbrec> {
    let (off, ci, log_size) = match wq {
        Wq::Sq => (QP_DBREC_SQ, qp.sq_ci, qp.log_sq_bbs),
        Wq::Rq => (QP_DBREC_RQ, qp.rq_ci, qp.log_rq_wqes),
    };
    let Some(pi) = qp.dbrec.read_index(iommu, off) else {
        log::warn!("QP {}: doorbell record unmapped", qp.qpn);
        return Err(BadDbrec::Unmapped);
    };
    let pending = ring_pending(pi, ci, WQ_INDEX_BITS);
    if pending > 1 << log_size {
        log::warn!(
            "QP {}: {wq:?} producer index {pi:#x} is {pending} entries ahead of {ci:#x}, \
             beyond the ring of 2^{log_size}",
            qp.qpn
        );
        return Err(BadDbrec::Malformed);
    }
    let accepted = ci.wrapping_add(pending);
    match wq {
        Wq::Sq => qp.sq_pi = accepted,
        Wq::Rq => qp.rq_pi = accepted,
    }
    Ok(pending)
}

/// Entries of `wq` known to be posted and not yet taken: published past
/// the fetch index (SQ) or consumer index (RQ) by the last producer index
/// accepted.
pub(crate) fn known(qp: &Qp, wq: Wq) -> u32 {
    let n = match wq {
        Wq::Sq => ring_pending(qp.sq_pi, qp.sq_fetch, WQ_INDEX_BITS),
        Wq::Rq => ring_pending(qp.rq_pi, qp.rq_ci, WQ_INDEX_BITS),
    };
    // The fetch index never passes the accepted producer index; a distance
    // beyond the ring means it has not been accepted past it yet.
    if n > 1 << (WQ_INDEX_BITS - 1) {
        0
    } else {
        n
    }
}

/// Entries of `wq` to flush: those the doorbell record publishes past the
/// consumer index, or, if it cannot be used, those known from the last
/// accepted producer index. Never more than the ring holds.
fn outstanding(qp: &mut Qp, iommu: &Iommu, wq: Wq) -> u32 {
    published(qp, iommu, wq).unwrap_or_else(|_| match wq {
        Wq::Sq => ring_pending(qp.sq_pi, qp.sq_ci, WQ_INDEX_BITS),
        Wq::Rq => ring_pending(qp.rq_pi, qp.rq_ci, WQ_INDEX_BITS),
    })
}

/// Moves `qp` to the error state: its transport state goes, its
/// outstanding WQEs of both queues are flushed (those in flight included),
/// and `event` (if any) is reported. Nothing happens if the QP is already
/// in the error state.
pub(crate) fn to_err(qp: &mut Qp, dev: &mut Dev, event: Option<(EventType, Syndrome)>) {
    if qp.state == QpState::Err {
        return;
    }
    let qpn = qp.qpn;
    log::debug!("QP {qpn}: {:?} -> Err ({event:?})", qp.state);
    qp.state = QpState::Err;
    let begun = receiving(qp);
    completer::clear(qp, dev);
    srq::flush_held(qp, dev);
    responder::clear(qp);
    flush_rq_begun(qp, dev, begun);
    flush_sq(qp, dev);
    if let Some((ty, syndrome)) = event {
        eq::post(dev, ty, qpn, syndrome as u32);
    }
    if qp.srqn.is_some() {
        // It takes nothing more from the SRQ, and its WQE is back.
        eq::post(dev, EventType::QpLastWqeReached, qpn, 0);
    }
}

/// The device enters the fatal state with its memory still reachable: every
/// QP in service moves to the error state, its outstanding WQEs (SRQ WQEs
/// held included) completing with `FATAL_ERR`, so that no consumer waits
/// for work the device will never do.
pub(crate) fn fail_all(st: &mut State) {
    let fatal = (WcStatus::FatalErr, Syndrome::DeviceFatal);
    for qpn in st.qps.numbers() {
        let Some((qp, dev)) = st.parts(qpn) else {
            continue;
        };
        if matches!(qp.state, QpState::Reset | QpState::Err) {
            continue;
        }
        qp.state = QpState::Err;
        completer::clear(qp, dev);
        srq::flush_held(qp, dev);
        responder::clear(qp);
        flush_rq_as(qp, dev, fatal);
        flush_sq_as(qp, dev, fatal);
    }
}

/// Whether a SEND is filling the receive WQE the QP has taken: leaving
/// service, the QP completes it `REM_ABORT_ERR` (the message was cut off),
/// not `WR_FLUSH_ERR`.
pub(crate) fn receiving(qp: &Qp) -> bool {
    matches!(qp.resp.msg, Some(InMsg::Send { .. }))
}

/// The status of a receive WQE flushed while a message was filling it.
pub(crate) const ABORTED: (WcStatus, Syndrome) = (WcStatus::RemAbortErr, Syndrome::Aborted);

/// Moves UC or UD `qp` to the send queue error state after a send WQE
/// failed: its send queue is flushed (and every WQE posted until it is
/// back in RTS), its receive side goes on.
pub(crate) fn to_sqe(qp: &mut Qp, dev: &mut Dev) {
    let qpn = qp.qpn;
    if matches!(qp.state, QpState::Err | QpState::Sqe | QpState::Reset) {
        return;
    }
    log::debug!("QP {qpn}: {:?} -> Sqe", qp.state);
    qp.state = QpState::Sqe;
    completer::clear(qp, dev);
    flush_sq(qp, dev);
}

/// A QP in SQD with nothing of its send queue in flight has drained: the
/// first time, the `SqDrained` event it asked for.
pub(crate) fn check_drained(qp: &mut Qp, dev: &mut Dev) {
    let qpn = qp.qpn;
    if qp.state != QpState::Sqd || qp.drained || !qp.req.inflight.is_empty() {
        return;
    }
    qp.drained = true;
    if qp.sqd_notify {
        log::debug!("QP {qpn}: send queue drained");
        eq::post(dev, EventType::SqDrained, qpn, 0);
    }
}

/// Moves `qp` to the reset state: queued WQEs are discarded without
/// completions (but an SRQ WQE it holds is completed, being the SRQ's),
/// the type 2 windows bound to it are freed, the consumer indices restart
/// at 0 and the transport state goes.
pub(crate) fn to_reset(qp: &mut Qp, dev: &mut Dev) {
    completer::clear(qp, dev);
    srq::flush_held(qp, dev);
    crate::mw::release_qp(dev, qp.qpn);
    responder::clear(qp);
    qp.state = QpState::Reset;
    qp.comm_est = false;
    qp.sqd_notify = false;
    qp.drained = false;
    qp.sq_ci = 0;
    qp.sq_fetch = 0;
    qp.rq_ci = 0;
    qp.sq_pi = 0;
    qp.rq_pi = 0;
    qp.path = None;
    qp.req = ReqState::default();
    qp.resp = RespState::default();
    qp.timers = QpTimers {
        queued: qp.timers.queued,
        ..QpTimers::default()
    };
}

/// Completes every posted, uncompleted send WQE with `WR_FLUSH_ERR`, one
/// CQE per WQE, in order: those up to the producer index of the doorbell
/// record, or, if the record cannot be used, up to the last producer index
/// accepted from it (so never more than the ring holds). A send queue whose
/// memory is unmapped is dropped without completions: its WQEs cannot be
/// read.
pub(crate) fn flush_sq(qp: &mut Qp, dev: &mut Dev) {
    flush_sq_as(qp, dev, (WcStatus::WrFlushErr, Syndrome::Flushed));
}

/// [`flush_sq`] with completions of `status` and `syndrome`.
fn flush_sq_as(qp: &mut Qp, dev: &mut Dev, (status, syndrome): (WcStatus, Syndrome)) {
    let qpn = qp.qpn;
    let mut pending = outstanding(qp, &dev.iommu, Wq::Sq);
    while pending > 0 {
        let size = 1u32 << qp.log_sq_bbs;
        let slot = (qp.sq_ci & (size - 1)) as usize * SEND_WQE_BB;
        let Some(ctrl) = qp.sq.read::<CtrlSeg>(&dev.iommu, slot) else {
            log::warn!("QP {qpn}: send queue unmapped; {pending} BBs dropped unflushed");
            qp.sq_ci = qp.sq_ci.wrapping_add(pending);
            qp.sq_fetch = qp.sq_ci;
            return;
        };
        // A malformed size still retires at least one BB, never more than
        // were posted.
        let bbs = (wqe_bbs(ctrl.word.ds() as usize) as u32).clamp(1, pending);
        pending -= bbs;
        qp.sq_ci = qp.sq_ci.wrapping_add(bbs);
        qp.sq_fetch = qp.sq_ci;
        let mut cqe = cq::cqe(
            ctrl.wr_id.to_ne(),
            qpn,
            qp.sq_ci,
            wqe::wc_opcode(ctrl.word.opcode()),
            status,
            syndrome as u32,
        );
        cqe.flags = CqeFlags::new().with_is_send(true);
        let cqn = qp.send_cqn;
        // The QP is already in the error state: a failed write just drops
        // the CQE.
        let _ = cq::write(dev, cqn, &cqe);
    }
}

/// Completes every posted receive WQE with `WR_FLUSH_ERR`, in order (as
/// many as [`flush_sq`] would: never more than the ring holds). A QP on
/// an SRQ has no receive queue: the SRQ's WQEs are other QPs' too.
pub(crate) fn flush_rq(qp: &mut Qp, dev: &mut Dev) {
    flush_rq_as(qp, dev, (WcStatus::WrFlushErr, Syndrome::Flushed));
}

/// [`flush_rq`], the first WQE completing [`ABORTED`] if a message had
/// begun to fill it.
fn flush_rq_begun(qp: &mut Qp, dev: &mut Dev, begun: bool) {
    if begun {
        flush_rq_first(qp, dev, ABORTED);
    }
    flush_rq(qp, dev);
}

/// Completes the receive WQE at the consumer index alone, with `status`.
fn flush_rq_first(qp: &mut Qp, dev: &mut Dev, (status, syndrome): (WcStatus, Syndrome)) {
    let qpn = qp.qpn;
    if qp.srqn.is_some() {
        return;
    }
    if outstanding(qp, &dev.iommu, Wq::Rq) == 0 {
        return;
    }
    let stride = 1usize << qp.log_rq_stride;
    let slot = (qp.rq_ci & ((1 << qp.log_rq_wqes) - 1)) as usize * stride;
    let wr_id = qp
        .rq
        .read::<RecvWqeHdr>(&dev.iommu, slot)
        .map_or(0, |h| h.wr_id.to_ne());
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
    let _ = cq::write(dev, cqn, &cqe);
}

/// [`flush_rq`] with completions of `status` and `syndrome`.
fn flush_rq_as(qp: &mut Qp, dev: &mut Dev, (status, syndrome): (WcStatus, Syndrome)) {
    let qpn = qp.qpn;
    if qp.srqn.is_some() {
        return;
    }
    let mut pending = outstanding(qp, &dev.iommu, Wq::Rq);
    while pending > 0 {
        let stride = 1usize << qp.log_rq_stride;
        let slot = (qp.rq_ci & ((1 << qp.log_rq_wqes) - 1)) as usize * stride;
        let Some(hdr) = qp.rq.read::<RecvWqeHdr>(&dev.iommu, slot) else {
            log::warn!("QP {qpn}: receive queue unmapped; {pending} WQEs dropped unflushed");
            qp.rq_ci = qp.rq_ci.wrapping_add(pending);
            return;
        };
        pending -= 1;
        qp.rq_ci = qp.rq_ci.wrapping_add(1);
        let cqe = cq::cqe(
            hdr.wr_id.to_ne(),
            qpn,
            qp.rq_ci,
            WcOpcode::Recv.raw(),
            status,
            syndrome as u32,
        );
        let cqn = qp.recv_cqn;
        let _ = cq::write(dev, cqn, &cqe);
    }
}

/// An RQ doorbell on page `page`: flush in the error state; otherwise take
/// note of the receive WQEs the doorbell record publishes (a malformed or
/// unmapped record moves the QP to the error state with a `QpFatal`
/// event). A requester that met receiver-not-ready retries on its own RNR
/// timer, as on the wire.
pub(crate) fn rq_doorbell(st: &mut State, page: u32, db: RqDoorbell) {
    let qpn = db.qpn();
    let Some(qp) = st.qps.get_mut(qpn) else {
        log::warn!("RQ doorbell for unknown QP {qpn} ignored");
        return;
    };
    if qp.uar_page != page || qp.srqn.is_some() {
        log::warn!(
            "RQ doorbell for QP {qpn} on page {page} (its page {}, SRQ {:?}): ignored",
            qp.uar_page,
            qp.srqn
        );
        return;
    }
    match qp.state {
        QpState::Err => flush_rq(qp, &mut st.dev),
        // The doorbell record is not in use before the QP leaves RESET.
        QpState::Reset => {}
        _ => {
            if let Err(e) = published(qp, &st.dev.iommu, Wq::Rq) {
                to_err(qp, &mut st.dev, Some((EventType::QpFatal, e.syndrome())));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use rnic_hw_regs::cqe::Cqe;
    use rnic_verbs::{QpState, WcStatus, WrOpcode};

    use super::*;
    use crate::transport::testbed::Bed;
    use crate::transport::ReqOp;
    use crate::wire::opcode::RC_SEND_FIRST;

    fn of(c: &Cqe) -> (u64, u8, bool) {
        (c.wr_id.to_ne(), c.status, c.flags.is_send())
    }

    #[test]
    fn the_error_state_flushes_both_queues_in_order_and_aborts_a_message_under_way() {
        let mut b = Bed::rc(4);
        for i in 0..3 {
            b.post_recv(10 + i, i * 2048, 2048);
        }
        // A SEND has begun to fill the first receive WQE.
        b.request(RC_SEND_FIRST, 0, None, &[1; 1024]);
        b.in_flight(ReqOp::Write, 1, 1, 64);
        b.post_send(WrOpcode::RdmaWrite.raw(), 2, 0, 64, 0);
        to_err(&mut b.qp, &mut b.dev, None);
        let flush = WcStatus::WrFlushErr.raw();
        let got: Vec<_> = b.cqes().iter().map(of).collect();
        assert_eq!(
            got,
            [
                (10, WcStatus::RemAbortErr.raw(), false),
                (11, flush, false),
                (12, flush, false),
                (1, flush, true),
                (2, flush, true),
            ],
            "in flight or not yet taken, every WQE completes"
        );
        assert_eq!(b.qp.state, QpState::Err);
        assert!(b.qp.req.inflight.is_empty() && b.qp.resp.msg.is_none());
        // Already in error: nothing is flushed twice.
        to_err(&mut b.qp, &mut b.dev, None);
        assert_eq!(b.cqes().len(), 5);
    }

    #[test]
    fn reset_discards_without_completions_and_restarts_the_indices() {
        let mut b = Bed::rc(4);
        b.post_recv(1, 0, 64);
        b.in_flight(ReqOp::Write, 2, 1, 64);
        b.qp.timers.retx = Some(5);
        to_reset(&mut b.qp, &mut b.dev);
        assert!(b.cqes().is_empty());
        let qp = &b.qp;
        assert_eq!(qp.state, QpState::Reset);
        assert_eq!((qp.sq_ci, qp.sq_fetch, qp.rq_ci, qp.sq_pi), (0, 0, 0, 0));
        assert!(qp.req.inflight.is_empty() && qp.path.is_none());
        assert!(qp.timers.retx.is_none());
    }
}

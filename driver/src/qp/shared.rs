//! The per-QP state shared between the QP (posting) and the CQ poller
//! (retiring), kept in the context's QPN table.

use alloc::boxed::Box;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicU8, Ordering};

use rnic_verbs::QpState;

use crate::srq::SrqSlots;

/// Queue accounting and state of one QP, updated without locks.
///
/// Send queue indices count 64-byte BBs, receive queue indices WQEs; all
/// are free-running. Only the QP's poster writes the heads, only the
/// poller of the completing CQ writes the tails (and a reset, after the
/// CQs were cleaned of the QP's completions).
///
/// The device is not trusted with the work request IDs (as mlx5's wrid
/// arrays): each is kept here by the WQE slot it was posted in and given
/// back by the completion that retires that slot, whatever the CQE says;
/// and a completion is accepted only if it retires whole WQEs that are
/// outstanding.
pub(crate) struct QpShared {
    pub(crate) qpn: u32,
    /// UC or UD: a send error stops the send queue only (SQE).
    unreliable: bool,
    state: AtomicU8,
    /// DESTROY_QP was sent and not refused: the device may have destroyed
    /// the QP and given its number to a new one.
    destroyed: AtomicBool,
    sq_mask: u32,
    /// Send queue producer index, published before each doorbell.
    sq_head: AtomicU32,
    /// Send queue index retired by completions.
    sq_tail: AtomicU32,
    /// Send requests retired by completions.
    sq_wr_tail: AtomicU32,
    /// For each BB that ends a WQE: the number of send requests posted up
    /// to and including that WQE, so a completion retiring up to a BB index
    /// also knows how many requests it retired.
    sq_wr_end: Box<[AtomicU32]>,
    /// For each BB: the free-running index it had when a WQE last ended at
    /// it (a BB inside a multi-BB WQE keeps an older value).
    sq_end_at: Box<[AtomicU32]>,
    /// For each BB that ends a WQE: that WQE's work request ID.
    sq_wrid: Box<[AtomicU64]>,
    /// The SRQ its receive completions retire against (it has no receive
    /// queue of its own).
    pub(crate) srq: Option<Arc<SrqSlots>>,
    rq_mask: u32,
    /// Each receive WQE slot's work request ID.
    rq_wrid: Box<[AtomicU64]>,
    /// Receive queue producer index, published before each doorbell.
    rq_head: AtomicU32,
    /// Receive queue index retired by completions.
    rq_tail: AtomicU32,
}

impl QpShared {
    pub(crate) fn new(
        qpn: u32,
        unreliable: bool,
        log_sq_bbs: u32,
        log_rq_wqes: u32,
        srq: Option<Arc<SrqSlots>>,
    ) -> Self {
        let n = 1usize << log_sq_bbs;
        let r = if srq.is_some() {
            0
        } else {
            1usize << log_rq_wqes
        };
        Self {
            qpn,
            unreliable,
            state: AtomicU8::new(QpState::Reset.raw()),
            destroyed: AtomicBool::new(false),
            sq_mask: (n - 1) as u32,
            sq_head: AtomicU32::new(0),
            sq_tail: AtomicU32::new(0),
            sq_wr_tail: AtomicU32::new(0),
            sq_wr_end: (0..n).map(|_| AtomicU32::new(0)).collect::<Vec<_>>().into(),
            // No BB has ended a WQE yet (a free-running index reaches
            // u32::MAX only after 2^32 BBs, long after every slot was
            // rewritten).
            sq_end_at: (0..n)
                .map(|_| AtomicU32::new(u32::MAX))
                .collect::<Vec<_>>()
                .into(),
            sq_wrid: (0..n).map(|_| AtomicU64::new(0)).collect::<Vec<_>>().into(),
            srq,
            rq_mask: r.saturating_sub(1) as u32,
            rq_wrid: (0..r).map(|_| AtomicU64::new(0)).collect::<Vec<_>>().into(),
            rq_head: AtomicU32::new(0),
            rq_tail: AtomicU32::new(0),
        }
    }

    /// The QP state as the driver knows it.
    pub(crate) fn state(&self) -> QpState {
        QpState::from_raw(self.state.load(Ordering::Acquire)).unwrap_or(QpState::Err)
    }

    pub(crate) fn set_state(&self, s: QpState) {
        self.state.store(s.raw(), Ordering::Release);
    }

    /// Whether the device may have destroyed the QP (and reused its
    /// number): DESTROY_QP was sent and not refused.
    pub(crate) fn destroyed(&self) -> bool {
        self.destroyed.load(Ordering::Acquire)
    }

    /// Marks the QP as possibly destroyed, before DESTROY_QP is sent (so a
    /// QP created with its number as soon as the device frees it finds the
    /// mark: commands are serialized), or unmarks it if the device refused
    /// the command or never got it.
    pub(crate) fn set_destroyed(&self, destroyed: bool) {
        self.destroyed.store(destroyed, Ordering::Release);
    }

    /// Records that the device moved the QP to an error state, as an
    /// error completion (`send` for one of the send queue) or a QP error
    /// event shows: SQE for a send error of a UC or UD QP (unless the QP is
    /// already in ERR), ERR otherwise; a QP in RESET stays there.
    pub(crate) fn mark_error(&self, send: bool) {
        let sqe = send && self.unreliable;
        let _ = self
            .state
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |s| {
                if s == QpState::Reset.raw() || (sqe && s == QpState::Err.raw()) {
                    None
                } else if sqe {
                    Some(QpState::Sqe.raw())
                } else {
                    Some(QpState::Err.raw())
                }
            });
    }

    /// Notes, before the doorbell, that the WQE of work request `wr_id`
    /// ending at BB index `last_bb` brings the number of posted send
    /// requests to `wrs`.
    #[inline]
    pub(crate) fn record_send_wqe(&self, last_bb: u32, wrs: u32, wr_id: u64) {
        let i = (last_bb & self.sq_mask) as usize;
        self.sq_wr_end[i].store(wrs, Ordering::Relaxed);
        self.sq_end_at[i].store(last_bb, Ordering::Relaxed);
        self.sq_wrid[i].store(wr_id, Ordering::Relaxed);
    }

    /// Notes, before the doorbell, the work request ID of the receive WQE
    /// at index `idx`.
    #[inline]
    pub(crate) fn record_recv_wqe(&self, idx: u32, wr_id: u64) {
        self.rq_wrid[(idx & self.rq_mask) as usize].store(wr_id, Ordering::Relaxed);
    }

    /// Publishes the send queue producer index (before the doorbell, so a
    /// completion for the new WQEs is never taken for a bogus one).
    #[inline]
    pub(crate) fn publish_sq_head(&self, pi: u32) {
        self.sq_head.store(pi, Ordering::Release);
    }

    /// Publishes the receive queue producer index.
    #[inline]
    pub(crate) fn publish_rq_head(&self, pi: u32) {
        self.rq_head.store(pi, Ordering::Release);
    }

    /// Send queue BB index and send request count retired so far.
    #[inline]
    pub(crate) fn sq_retired(&self) -> (u32, u32) {
        (
            self.sq_tail.load(Ordering::Acquire),
            self.sq_wr_tail.load(Ordering::Acquire),
        )
    }

    /// Receive queue index retired so far.
    #[inline]
    pub(crate) fn rq_retired(&self) -> u32 {
        self.rq_tail.load(Ordering::Acquire)
    }

    /// Retires the send queue up to the 16-bit BB index `counter` of a
    /// send completion and returns the work request ID of the WQE it
    /// completes; `None` if `counter` is not past the retired index, not
    /// within the posted WQEs, or not just past the end of one (inside a
    /// multi-BB WQE).
    pub(crate) fn retire_sq(&self, counter: u16) -> Option<u64> {
        let tail = self.sq_tail.load(Ordering::Relaxed);
        let head = self.sq_head.load(Ordering::Acquire);
        let step = u32::from(counter.wrapping_sub(tail as u16));
        if step == 0 || step > head.wrapping_sub(tail) {
            return None;
        }
        let new = tail.wrapping_add(step);
        let last = new.wrapping_sub(1);
        let i = (last & self.sq_mask) as usize;
        if self.sq_end_at[i].load(Ordering::Relaxed) != last {
            return None;
        }
        let wrs = self.sq_wr_end[i].load(Ordering::Relaxed);
        self.sq_wr_tail.store(wrs, Ordering::Release);
        self.sq_tail.store(new, Ordering::Release);
        Some(self.sq_wrid[i].load(Ordering::Relaxed))
    }

    /// Retires the receive WQE a receive completion with the 16-bit index
    /// `counter` completes (each completes exactly the oldest one; on an
    /// SRQ, the SRQ slot of index `counter - 1`) and returns its work
    /// request ID; `None` if `counter` names no WQE outstanding.
    pub(crate) fn retire_rq(&self, counter: u16) -> Option<u64> {
        if let Some(srq) = &self.srq {
            return srq.retire(counter);
        }
        let tail = self.rq_tail.load(Ordering::Relaxed);
        let head = self.rq_head.load(Ordering::Acquire);
        if counter != tail.wrapping_add(1) as u16 || head == tail {
            return None;
        }
        self.rq_tail.store(tail.wrapping_add(1), Ordering::Release);
        Some(self.rq_wrid[(tail & self.rq_mask) as usize].load(Ordering::Relaxed))
    }

    /// Zeroes every index, after the QP moved to RESET and the CQs were
    /// cleaned of its completions.
    pub(crate) fn reset_indices(&self) {
        for a in [
            &self.sq_head,
            &self.sq_tail,
            &self.sq_wr_tail,
            &self.rq_head,
            &self.rq_tail,
        ] {
            a.store(0, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unsignaled_run_retired_by_next_completion() {
        let q = QpShared::new(5, false, 3, 0, None);
        // Three WQEs of 1, 2 and 1 BBs: they end at BBs 0, 2, 3.
        q.record_send_wqe(0, 1, 20);
        q.record_send_wqe(2, 2, 21);
        q.record_send_wqe(3, 3, 22);
        q.publish_sq_head(4);
        assert_eq!(q.retire_sq(5), None, "past the producer index");
        assert_eq!(q.retire_sq(0), None, "nothing to retire");
        assert_eq!(q.retire_sq(2), None, "inside the 2-BB WQE");
        assert_eq!(q.sq_retired(), (0, 0));
        assert_eq!(q.retire_sq(3), Some(21));
        assert_eq!(q.sq_retired(), (3, 2));
        assert_eq!(q.retire_sq(4), Some(22));
        assert_eq!(q.sq_retired(), (4, 3));
        q.reset_indices();
        assert_eq!(q.sq_retired(), (0, 0));
    }

    #[test]
    fn indices_wrap_at_16_bits() {
        let q = QpShared::new(5, false, 0, 0, None);
        for i in 1..=70_000u32 {
            q.record_send_wqe(i - 1, i, i.into());
            q.publish_sq_head(i);
            assert_eq!(q.retire_sq(i as u16), Some(i.into()));
            q.record_recv_wqe(i - 1, (i + 1).into());
            q.publish_rq_head(i);
            assert_eq!(q.retire_rq(i as u16), Some((i + 1).into()));
        }
        assert_eq!(q.sq_retired(), (70_000, 70_000));
        assert_eq!(q.rq_retired(), 70_000);
    }

    #[test]
    fn a_receive_completion_retires_exactly_the_oldest() {
        let q = QpShared::new(5, false, 0, 2, None);
        for i in 0..3 {
            q.record_recv_wqe(i, 100 + u64::from(i));
        }
        q.publish_rq_head(3);
        assert_eq!(q.retire_rq(2), None, "two at once");
        assert_eq!(q.retire_rq(0), None, "none");
        assert_eq!(q.retire_rq(1), Some(100));
        assert_eq!(q.retire_rq(2), Some(101));
        assert_eq!(q.retire_rq(3), Some(102));
        assert_eq!(q.retire_rq(4), None, "past the producer index");
    }

    #[test]
    fn error_marking_spares_reset() {
        let q = QpShared::new(5, false, 0, 0, None);
        q.mark_error(true);
        assert_eq!(q.state(), QpState::Reset);
        q.set_state(QpState::Rts);
        q.mark_error(true);
        assert_eq!(q.state(), QpState::Err);
        let ud = QpShared::new(6, true, 0, 0, None);
        ud.set_state(QpState::Rts);
        ud.mark_error(true);
        assert_eq!(ud.state(), QpState::Sqe, "a UD send error");
        ud.mark_error(false);
        assert_eq!(ud.state(), QpState::Err, "a receive error");
        ud.mark_error(true);
        assert_eq!(ud.state(), QpState::Err, "ERR stays");
    }
}

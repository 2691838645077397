//! Posting work requests: batch-first, one doorbell per call.
//!
//! A call writes every WQE it can, then publishes them once, in the order
//! of rdma-core's mlx5 provider: WQEs, one release fence, the doorbell
//! record, one MMIO doorbell. A request that cannot be posted stops the
//! batch there; the requests before it are still published and rung.

use alloc::format;
use rnic_hw_regs::uar::{RqDoorbell, SqDoorbell, BF_MAX_DS, BF_WQE_BYTES, RQ_DB, SQ_DB};
use rnic_hw_regs::wqe::wqe_bbs;
use rnic_queues::{DbRec, Hal};
use rnic_verbs::{check_post_recv, check_post_send, QpType};

use super::Qp;
use crate::error::{Error, ErrorKind, PostError};
use crate::wqe::{check_recv, plan_send, write_recv, write_send, WqRing};
use rnic_verbs::{RecvWr, SendOp, SendWr};

/// The send queue's producer side.
pub(crate) struct SendQueue {
    ring: WqRing,
    dbrec: DbRec,
    /// Send requests posted (free-running).
    wr_head: u32,
    max_wr: u32,
}

impl SendQueue {
    pub(crate) fn new(ring: WqRing, dbrec: DbRec, max_wr: u32) -> Self {
        Self {
            ring,
            dbrec,
            wr_head: 0,
            max_wr,
        }
    }

    /// Back to empty with a zero doorbell record (the QP is in RESET).
    pub(crate) fn reset(&mut self) {
        self.ring.reset();
        self.wr_head = 0;
        self.dbrec.publish(0);
    }
}

/// The receive queue's producer side.
pub(crate) struct RecvQueue {
    ring: WqRing,
    dbrec: DbRec,
}

impl RecvQueue {
    pub(crate) fn new(ring: WqRing, dbrec: DbRec) -> Self {
        Self { ring, dbrec }
    }

    /// Back to empty with a zero doorbell record (the QP is in RESET).
    pub(crate) fn reset(&mut self) {
        self.ring.reset();
        self.dbrec.publish(0);
    }
}

const SQ_FULL: &str = "send queue full: wait for completions";
const RQ_FULL: &str = "receive queue full: wait for completions";

impl<H: Hal> Qp<H> {
    /// Posts send work requests (`ibv_post_send`).
    ///
    /// Allowed in RTS; in SQD (the requests wait for RTS); in SQE and ERR
    /// (the device flushes them with `WR_FLUSH_ERR`). On a bad request (too many SGEs, inline data too
    /// large or on a READ/atomic, a malformed atomic, unknown flags:
    /// `EINVAL`; queue full: `ENOMEM`) the requests before it are posted
    /// and the error carries its index.
    pub fn post_send(&self, wrs: &[SendWr<'_>]) -> Result<(), PostError> {
        let mut sq = self.sq.lock();
        check_post_send(self.qpn, self.shared.state())
            .map_err(|error| PostError { index: 0, error })?;
        let (tail, wr_tail) = self.shared.sq_retired();
        // The retired index is never ahead of the producer index, so this
        // always succeeds.
        sq.ring.retire_to(tail as u16);
        let mut result = Ok(());
        let start = sq.ring.pi();
        let mut last_ds = 0;
        for (index, wr) in wrs.iter().enumerate() {
            let uc_refused = self.qp_type == QpType::Uc
                && (matches!(wr.op, SendOp::RdmaRead { .. } | SendOp::SendWithInv { .. })
                    || wr.op.is_atomic());
            if uc_refused {
                result = Err(PostError {
                    index,
                    error: Error::invalid(
                        "UC QPs do no RDMA READ, atomics or SEND with invalidate",
                    ),
                });
                break;
            }
            if let SendOp::UdSend { dest, .. } = wr.op {
                if dest.pdn() != self.pd.pdn {
                    result = Err(PostError {
                        index,
                        error: Error::invalid(format!(
                            "the address handle is of PD {}, the QP of PD {}",
                            dest.pdn(),
                            self.pd.pdn
                        )),
                    });
                    break;
                }
            }
            let ds = match plan_send(wr, &self.sq_limits) {
                Ok(ds) => ds,
                Err(error) => {
                    result = Err(PostError { index, error });
                    break;
                }
            };
            let bbs = wqe_bbs(ds) as u32;
            if sq.wr_head.wrapping_sub(wr_tail) >= sq.max_wr || sq.ring.free() < bbs {
                result = Err(PostError {
                    index,
                    error: Error::new(ErrorKind::NoMemory, SQ_FULL),
                });
                break;
            }
            let pi = sq.ring.pi();
            write_send(&mut sq.ring, pi, wr, ds);
            last_ds = ds;
            sq.ring.advance(bbs);
            sq.wr_head = sq.wr_head.wrapping_add(1);
            self.shared
                .record_send_wqe(pi.wrapping_add(bbs - 1), sq.wr_head, wr.wr_id);
        }
        let pi = sq.ring.pi();
        if pi != start {
            self.shared.publish_sq_head(pi);
            // DbRec::publish is the one release store: the WQEs are visible
            // before the record, which is written before the doorbell.
            sq.dbrec.publish(pi);
            let db = SqDoorbell::new().with_qpn(self.qpn).with_pi(pi as u16);
            // One small WQE goes with its doorbell, as a BlueFlame write:
            // the device need not read it, nor the record (spec 8.1).
            let one = pi.wrapping_sub(start) == 1 && last_ds <= BF_MAX_DS;
            let sent = one && {
                let mut block = [0u64; 8];
                block[0] = db.into_bits();
                let wqe = sq.ring.slot(start).cast::<u64>();
                for (i, w) in block[1..=BF_WQE_BYTES / 8].iter_mut().enumerate() {
                    // SAFETY: the slot is one 64-byte-aligned BB of the
                    // ring, which this thread wrote under the SQ lock; the
                    // words read are inside it.
                    *w = unsafe { wqe.add(i).read_volatile() };
                }
                self.pd.ctx.ring_blueflame(self.uar_page, &block)
            };
            if !sent {
                self.pd
                    .ctx
                    .ring_doorbell(self.uar_page, SQ_DB, db.into_bits());
            }
        }
        result
    }

    /// Posts receive work requests (`ibv_post_recv`). Allowed in every
    /// state but RESET; in ERR the device flushes them. Errors as for
    /// [`Qp::post_send`]; a QP on an SRQ has no receive queue (`EINVAL`).
    pub fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        let Some(rq) = &self.rq else {
            return Err(PostError {
                index: 0,
                error: Error::invalid(format!(
                    "QP {} takes its receives from SRQ {:?}: post them there",
                    self.qpn,
                    self.srq_num()
                )),
            });
        };
        let mut rq = rq.lock();
        check_post_recv(self.qpn, self.shared.state())
            .map_err(|error| PostError { index: 0, error })?;
        // The retired index is never ahead of the producer index, so this
        // always succeeds.
        rq.ring.retire_to(self.shared.rq_retired() as u16);
        let mut result = Ok(());
        let start = rq.ring.pi();
        for (index, wr) in wrs.iter().enumerate() {
            if let Err(error) = check_recv(wr, self.cap.max_recv_sge) {
                result = Err(PostError { index, error });
                break;
            }
            if rq.ring.free() == 0 {
                result = Err(PostError {
                    index,
                    error: Error::new(ErrorKind::NoMemory, RQ_FULL),
                });
                break;
            }
            let pi = rq.ring.pi();
            write_recv(&mut rq.ring, pi, wr, 0);
            self.shared.record_recv_wqe(pi, wr.wr_id);
            rq.ring.advance(1);
        }
        let pi = rq.ring.pi();
        if pi != start {
            self.shared.publish_rq_head(pi);
            // DbRec::publish is the one release store: the WQEs are visible
            // before the record, which is written before the doorbell.
            rq.dbrec.publish(pi);
            let db = RqDoorbell::new().with_qpn(self.qpn).with_pi(pi as u16);
            self.pd
                .ctx
                .ring_doorbell(self.uar_page, RQ_DB, db.into_bits());
        }
        result
    }
}

//! Queue pairs: creation, the RESET → INIT → RTR → RTS state machine,
//! query and destruction. Posting is in `post`.

pub(crate) mod attr;
mod post;
mod shared;
mod sizing;

use alloc::format;
use alloc::sync::Arc;

use rnic_hw_regs::cmd::{CmdOpcode, CreateQpIn, CreateQpOut, ModifyQpIn, ObjIn, QpAttrs, NONE};
use rnic_hw_regs::uar::{QP_DBREC_RQ, QP_DBREC_SQ};
use rnic_hw_regs::wqe::SEND_WQE_BB;
use rnic_hw_regs::{le32, le64};
use rnic_queues::{DbRec, DmaRegion, Hal};
use rnic_verbs::provider::QpInit;
use rnic_verbs::{QpAttr, QpCap, QpState, QpType};
use spin::Mutex;

pub(crate) use shared::QpShared;

use self::attr::{from_wire, wire_attrs};
use self::post::{RecvQueue, SendQueue};
use self::sizing::{QpLayout, QueueLimits};
use crate::bringup::DeviceMem;
use crate::context::remove_if_ours;
use crate::context::Context;
use crate::cq::CqShared;
use crate::dma::view;
use crate::error::{DestroyError, Error, ErrorKind, Result};
use crate::pd::{Pd, PdInner};
use crate::srq::{Srq, SrqInner};
use crate::wqe::{SendLimits, WqRing};
use rnic_verbs::{check_modify, ModifyEnv};

/// A queue pair (`struct ibv_qp`): reliable connected, unreliable
/// connected or unreliable datagram.
///
/// `post_send` and `post_recv` may be called from several threads; each
/// queue is protected by its own lock.
pub struct Qp<H: Hal> {
    pd: Arc<PdInner<H>>,
    send_cq: Arc<CqShared<H>>,
    recv_cq: Arc<CqShared<H>>,
    shared: Arc<QpShared>,
    qpn: u32,
    qp_type: QpType,
    uar_page: u32,
    cap: QpCap,
    sq_limits: SendLimits,
    sq: Mutex<SendQueue>,
    /// `None` on an SRQ.
    rq: Option<Mutex<RecvQueue>>,
    /// Kept alive while the QP takes from it.
    srq: Option<Arc<SrqInner<H>>>,
    /// Serializes `modify`; holds the QP's port (0 before INIT).
    port: Mutex<u8>,
    /// Send queue, receive queue and doorbell record; `None` once released.
    mem: Option<DmaRegion>,
}

impl<H: Hal> Pd<H> {
    /// Creates a QP in the RESET state (CREATE_QP).
    pub fn create_qp(&self, init: &QpInit<'_, Context<H>>) -> Result<Qp<H>> {
        let ctx = &self.inner.ctx;
        let caps = &ctx.dev.caps;
        match init.qp_type {
            QpType::Rc => {}
            QpType::Ud if caps.ud => {}
            QpType::Gsi if caps.gsi => {}
            QpType::Uc if caps.uc => {}
            t => {
                return Err(Error::new(
                    ErrorKind::NotSupported,
                    format!("{t:?} QPs are not supported by this device"),
                ))
            }
        }
        for cq in [init.send_cq, init.recv_cq] {
            if !Arc::ptr_eq(&cq.inner.ctx, ctx) {
                return Err(Error::invalid(format!(
                    "CQ {} belongs to another device context",
                    cq.inner.cqn
                )));
            }
        }
        if let Some(srq) = init.srq {
            // An SRQ of another PD is allowed (its own PD checks the
            // receive WQEs' keys), of another context not.
            if !Arc::ptr_eq(&srq.inner.pd.ctx, ctx) {
                return Err(Error::invalid(format!(
                    "SRQ {} belongs to another device context",
                    srq.srq_num()
                )));
            }
        }
        let lim = QueueLimits {
            log_max_wq: caps.log_max_wq,
            max_qp_wr: ctx.attr.max_qp_wr,
            max_sge: caps.max_sge,
            max_inline: caps.max_inline,
            max_wqe_bbs: caps.max_wqe_bbs,
            ud: init.qp_type.is_datagram(),
            srq: init.srq.is_some(),
        };
        let layout = QpLayout::new(&init.cap, &lim)?;
        let hal = ctx.hal();
        let mem = hal
            .dma_alloc(layout.len)
            .map_err(|e| Error::hal(e, "allocating QP queues"))?;
        mem.zero();
        let uar_page = ctx.alloc_uar_page();
        let input = CreateQpIn {
            qp_type: init.qp_type.raw(),
            sq_sig_all: init.sq_sig_all.into(),
            log_rq_stride: layout.log_rq_stride as u8,
            reserved0: 0,
            pdn: le32::from_ne(self.inner.pdn),
            send_cqn: le32::from_ne(init.send_cq.inner.cqn),
            recv_cqn: le32::from_ne(init.recv_cq.inner.cqn),
            srqn: le32::from_ne(init.srq.map_or(NONE, Srq::srq_num)),
            log_sq_bbs: le32::from_ne(layout.log_sq_bbs),
            log_rq_wqes: le32::from_ne(layout.log_rq_wqes),
            max_inline: le32::from_ne(layout.sq.max_inline),
            uar_page: le32::from_ne(uar_page),
            reserved1: le32::from_ne(0),
            sq_iova: le64::from_ne(mem.iova()),
            rq_iova: le64::from_ne(if layout.rq {
                mem.iova() + layout.rq_offset as u64
            } else {
                0
            }),
            dbrec_iova: le64::from_ne(mem.iova() + layout.dbrec_offset as u64),
        };
        let out: CreateQpOut = match ctx.exec(CmdOpcode::CreateQp, &input) {
            Ok(out) => out,
            Err(e) => {
                // SAFETY: from dma_alloc, given to the device only by this
                // command.
                unsafe {
                    ctx.dispose_after_failed_create(
                        DeviceMem::Region(mem),
                        format_args!("creating a QP"),
                        &e,
                    )
                };
                return Err(e);
            }
        };
        let qpn = out.qpn.to_ne() & 0xff_ffff;
        let shared = Arc::new(QpShared::new(
            qpn,
            init.qp_type != QpType::Rc,
            layout.log_sq_bbs,
            layout.log_rq_wqes,
            init.srq.map(|s| Arc::clone(&s.inner.slots)),
        ));
        let send_cq = &init.send_cq.inner;
        let recv_cq = &init.recv_cq.inner;
        let attached = send_cq.attach(&shared).and_then(|()| {
            if Arc::ptr_eq(send_cq, recv_cq) {
                return Ok(());
            }
            recv_cq
                .attach(&shared)
                .inspect_err(|_| send_cq.unattach(&shared))
        });
        if let Err(e) = attached {
            // The device claims a number a live QP has: the new QP cannot
            // be told apart from it, so it is neither used nor destroyed
            // (DESTROY_QP would name both), and the device may use its
            // memory until the reset.
            ctx.orphan(
                DeviceMem::Region(mem),
                format_args!("creating QP {qpn}"),
                &e,
            );
            return Err(e);
        }
        // SAFETY: rings and records point into `mem`, which the Qp owns and
        // frees only when released, after which they are unused.
        let (sq_ring, sq_db, rq) = unsafe {
            let rq = layout.rq.then(|| {
                let rq_mem = view(&mem, layout.rq_offset, layout.rq_len());
                RecvQueue::new(
                    WqRing::new(&rq_mem, layout.log_rq_wqes, 1 << layout.log_rq_stride),
                    DbRec::new(&mem, layout.dbrec_offset + QP_DBREC_RQ),
                )
            });
            (
                WqRing::new(&mem, layout.log_sq_bbs, SEND_WQE_BB),
                DbRec::new(&mem, layout.dbrec_offset + QP_DBREC_SQ),
                rq,
            )
        };
        ctx.qps.write().insert(qpn, Arc::clone(&shared));
        let cap = layout.cap();
        log::debug!(
            "created QP {qpn}: {cap:?}, {} send BBs",
            1u32 << layout.log_sq_bbs
        );
        Ok(Qp {
            pd: Arc::clone(&self.inner),
            send_cq: Arc::clone(&init.send_cq.inner),
            recv_cq: Arc::clone(&init.recv_cq.inner),
            shared,
            qpn,
            qp_type: init.qp_type,
            uar_page,
            cap,
            sq_limits: layout.sq,
            sq: Mutex::new(SendQueue::new(sq_ring, sq_db, cap.max_send_wr)),
            rq: rq.map(Mutex::new),
            srq: init.srq.map(|s| Arc::clone(&s.inner)),
            // The GSI QP is QP1 of port 1 from the start (INIT does not
            // name its port); any other QP gets its port at INIT.
            port: Mutex::new(u8::from(init.qp_type == QpType::Gsi)),
            mem: Some(mem),
        })
    }
}

impl<H: Hal> Qp<H> {
    /// The QP number.
    pub fn qp_num(&self) -> u32 {
        self.qpn
    }

    /// The transport.
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }

    /// The state as the driver knows it: set by `modify` and `query`, and
    /// moved to ERR when an error completion or QP error event is seen.
    pub fn state(&self) -> QpState {
        self.shared.state()
    }

    /// The capacities the QP provides (at least those requested).
    pub fn cap(&self) -> QpCap {
        self.cap
    }

    /// The PD number the QP belongs to.
    pub fn pd_num(&self) -> u32 {
        self.pd.pdn
    }

    /// The send CQ's number.
    pub fn send_cq_num(&self) -> u32 {
        self.send_cq.cqn
    }

    /// The receive CQ's number.
    pub fn recv_cq_num(&self) -> u32 {
        self.recv_cq.cqn
    }

    /// The number of the SRQ its receives come from, if any.
    pub fn srq_num(&self) -> Option<u32> {
        self.srq.as_ref().map(|s| s.slots.srqn)
    }

    /// Modifies the QP (`ibv_modify_qp`): applies the attributes named by
    /// `mask` ([`crate::qp_attr`] bits) and moves it to `attr.qp_state`.
    ///
    /// The libibverbs rules are checked first: the transition must be
    /// legal, the mask must hold every attribute it requires and nothing it
    /// does not allow, and the values must be in range. Moving to RESET
    /// discards all queued work without completions, removes the QP's
    /// completions from its CQs, and restarts its queues.
    pub fn modify(&self, attr: &QpAttr, mask: u32) -> Result<()> {
        let ctx = &self.pd.ctx;
        let mut port = self.port.lock();
        let env = ModifyEnv {
            dev: &ctx.attr,
            ports: &ctx.ports,
            cur: self.shared.state(),
            port: *port,
            qp_type: self.qp_type,
        };
        let m = check_modify(attr, mask, &env)?;
        let input = ModifyQpIn {
            qpn: le32::from_ne(self.qpn),
            attr_mask: le32::from_ne(m.mask),
            attrs: wire_attrs(attr, m.mask, m.next, m.port),
        };
        ctx.exec::<_, ()>(CmdOpcode::ModifyQp, &input)?;
        *port = m.port;
        if m.next == QpState::Reset {
            self.reset_queues();
        }
        self.shared.set_state(m.next);
        log::debug!("QP {}: {:?} -> {:?}", self.qpn, env.cur, m.next);
        Ok(())
    }

    /// Restarts both queues after the device moved the QP to RESET.
    fn reset_queues(&self) {
        let mut sq = self.sq.lock();
        let mut rq = self.rq.as_ref().map(|q| q.lock());
        self.send_cq.clean(self.qpn);
        if !Arc::ptr_eq(&self.send_cq, &self.recv_cq) {
            self.recv_cq.clean(self.qpn);
        }
        sq.reset();
        if let Some(rq) = rq.as_mut() {
            rq.reset();
        }
        self.shared.reset_indices();
    }

    /// Reads the QP's attributes and state from the device (QUERY_QP) and
    /// updates [`Qp::state`].
    pub fn query(&self) -> Result<QpAttr> {
        let input = ObjIn {
            id: le32::from_ne(self.qpn),
        };
        let out: QpAttrs = self.pd.ctx.exec(CmdOpcode::QueryQp, &input)?;
        let attr = from_wire(&out, self.cap)?;
        self.shared.set_state(attr.qp_state);
        Ok(attr)
    }

    /// Reads this QP's counters (QUERY_COUNTERS).
    pub fn query_counters(&self) -> Result<crate::Counters> {
        crate::Counters::query(&self.pd.ctx, rnic_hw_regs::counters::scope::QP, self.qpn)
    }

    /// Destroys the QP (DESTROY_QP).
    ///
    /// If the device refuses, or never gets the command, the QP is handed
    /// back. If the outcome is unknown (a timeout), the QP is gone
    /// ([`DestroyError::object`] is `None`): DESTROY_QP is not sent again,
    /// since the device gives a destroyed QP's number to the next QP
    /// created and a retry could destroy that one. Its queues are kept
    /// until the context is closed (the device may still use them), and
    /// its CQs keep the number's entry so that a new QP given the number
    /// first removes the completions the old one may still write.
    // Handing the QP back by value is the point; destroy is a cold path.
    #[allow(clippy::result_large_err)]
    pub fn destroy(mut self) -> Result<(), DestroyError<Self>> {
        match self.release() {
            Ok(()) => Ok(()),
            Err(e) if self.mem.is_some() => DestroyError::hand_back(self, Err(e)),
            Err(e) => Err(DestroyError::gone(e)),
        }
    }

    /// Destroys the QP and frees its queues. On a refusal (or a command not
    /// issued) the QP keeps its memory; when the outcome is unknown the
    /// memory is kept until shutdown and the QP is left released.
    fn release(&mut self) -> Result<()> {
        let Some(mem) = self.mem.take() else {
            return Ok(());
        };
        let ctx = &self.pd.ctx;
        let input = ObjIn {
            id: le32::from_ne(self.qpn),
        };
        // Before the command: once the device destroys the QP, a QP created
        // with its number may attach to the CQs at any time.
        self.shared.set_destroyed(true);
        if let Err(e) = ctx.exec::<_, ()>(CmdOpcode::DestroyQp, &input) {
            if e.outcome_unknown() {
                // The QP may still exist, or its number may already be a
                // new QP's: only what is still ours is touched, and the CQ
                // entries stay (see `CqShared::abandon`).
                self.send_cq.abandon(&self.shared);
                if !Arc::ptr_eq(&self.send_cq, &self.recv_cq) {
                    self.recv_cq.abandon(&self.shared);
                }
                remove_if_ours(&ctx.qps, self.qpn, &self.shared);
                ctx.orphan(
                    DeviceMem::Region(mem),
                    format_args!("destroying QP {}", self.qpn),
                    &e,
                );
            } else {
                self.shared.set_destroyed(false);
                self.mem = Some(mem);
            }
            return Err(e);
        }
        #[cfg(test)]
        ctx.after_destroy(CmdOpcode::DestroyQp, self.qpn);
        // From here the device may give the number to a new QP, which other
        // threads register: forget only what is still ours.
        self.send_cq.detach(&self.shared);
        if !Arc::ptr_eq(&self.send_cq, &self.recv_cq) {
            self.recv_cq.detach(&self.shared);
        }
        remove_if_ours(&ctx.qps, self.qpn, &self.shared);
        // SAFETY: from dma_alloc, and the QP using it is destroyed.
        unsafe { ctx.hal().dma_free(mem) };
        log::debug!("destroyed QP {}", self.qpn);
        Ok(())
    }
}

impl<H: Hal> Drop for Qp<H> {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            if let Some(mem) = self.mem.take() {
                self.pd.ctx.orphan(
                    DeviceMem::Region(mem),
                    format_args!("dropping QP {}", self.qpn),
                    &e,
                );
            }
        }
    }
}

//! Completion queues: creation, batched polling, arming, and removing a
//! QP's completions when the QP is reset or destroyed.

use alloc::format;
use alloc::sync::Arc;
use core::sync::atomic::{fence, AtomicU8, Ordering};

use rnic_hw_regs::cmd::{CmdOpcode, CreateCqIn, CreateCqOut, ObjIn};
use rnic_hw_regs::cqe::{Cqe, CqeOwner, CQE_OWNER_OFFSET, CQE_SIZE};
use rnic_hw_regs::uar::{CqArmCmd, CqDoorbell, CQ_DB};
use rnic_hw_regs::verbs::WcStatus;
use rnic_hw_regs::{le32, le64, owner_bit};
use rnic_queues::{ConsumerRing, DbRec, DmaRegion, Hal};
use spin::Mutex;

use crate::context::{Context, Shared};
use crate::dma::view;
use crate::error::{DestroyError, Error, ErrorKind, Result};
use crate::qp::QpShared;
use crate::wc::WorkCompletion;

/// A completion queue (`struct ibv_cq`).
///
/// QPs completing into it keep it alive: dropping the `Cq` while they
/// exist defers its destruction until the last one is gone.
pub struct Cq<H: Hal> {
    pub(crate) inner: Arc<CqShared<H>>,
}

/// Arm state the event queue updates: the sequence number of the next arm.
pub(crate) struct CqArm {
    pub(crate) sn: AtomicU8,
}

/// The device-side CQ, shared by the handle and the QPs using it.
pub(crate) struct CqShared<H: Hal> {
    pub(crate) ctx: Arc<Shared<H>>,
    pub(crate) cqn: u32,
    log_size: u32,
    uar_page: u32,
    arm: Arc<CqArm>,
    poll: Mutex<CqPoll>,
    /// View of the CQE ring, for rewriting entries when cleaning.
    ring_mem: DmaRegion,
    /// The CQE ring and doorbell record; `None` once released.
    mem: Option<DmaRegion>,
}

/// The consumer state, locked for a poll batch.
struct CqPoll {
    ring: ConsumerRing<Cqe>,
    dbrec: DbRec,
    /// The QP of the last completion (mlx5's `cur_rsc`).
    cache: Option<Arc<QpShared>>,
    /// An error found after completions were already returned, reported
    /// by the next poll.
    pending: Option<Error>,
}

impl<H: Hal> Context<H> {
    /// Creates a CQ with room for at least `cqe` completions (CREATE_CQ).
    pub fn create_cq(&self, cqe: u32) -> Result<Cq<H>> {
        let sh = &self.shared;
        let max = 1u32 << sh.dev.caps.log_max_cqe;
        if cqe == 0 || cqe > max {
            return Err(Error::invalid(format!(
                "CQ size {cqe} is outside 1..={max}"
            )));
        }
        let log_size = cqe.next_power_of_two().trailing_zeros();
        let ring_bytes = CQE_SIZE << log_size;
        let hal = sh.hal();
        // The doorbell record follows the ring in the same allocation.
        let mem = hal
            .dma_alloc(ring_bytes + CQE_SIZE)
            .map_err(|e| Error::hal(e, "allocating a CQ"))?;
        mem.zero();
        let uar_page = sh.alloc_uar_page();
        let input = CreateCqIn {
            log_size: le32::from_ne(log_size),
            uar_page: le32::from_ne(uar_page),
            eqn: le32::from_ne(0),
            reserved: le32::from_ne(0),
            buf_iova: le64::from_ne(mem.iova()),
            dbrec_iova: le64::from_ne(mem.iova() + ring_bytes as u64),
        };
        let out: CreateCqOut = match sh.exec(CmdOpcode::CreateCq, &input) {
            Ok(out) => out,
            Err(e) => {
                // SAFETY: from dma_alloc; the device refused the CQ.
                unsafe { hal.dma_free(mem) };
                return Err(e);
            }
        };
        let cqn = out.cqn.to_ne();
        // SAFETY: the ring, record and view point into `mem`, which the
        // CqShared owns and frees only when it is released, after which
        // they are unused.
        let (ring, dbrec, ring_mem) = unsafe {
            (
                ConsumerRing::new(&mem, log_size),
                DbRec::new(&mem, ring_bytes),
                view(&mem, 0, ring_bytes),
            )
        };
        let arm = Arc::new(CqArm {
            sn: AtomicU8::new(0),
        });
        sh.cqs.write().insert(cqn, Arc::clone(&arm));
        log::debug!("created CQ {cqn} of {} entries", 1u32 << log_size);
        Ok(Cq {
            inner: Arc::new(CqShared {
                ctx: Arc::clone(sh),
                cqn,
                log_size,
                uar_page,
                arm,
                poll: Mutex::new(CqPoll {
                    ring,
                    dbrec,
                    cache: None,
                    pending: None,
                }),
                ring_mem,
                mem: Some(mem),
            }),
        })
    }
}

impl<H: Hal> Cq<H> {
    /// The CQ number.
    pub fn cq_num(&self) -> u32 {
        self.inner.cqn
    }

    /// Number of completions the CQ holds.
    pub fn cqe(&self) -> u32 {
        1 << self.inner.log_size
    }

    /// Takes up to `wc.len()` completions (`ibv_poll_cq`); returns how many
    /// were written to the front of `wc`.
    ///
    /// Each completion retires the WQEs it covers on its QP: a send
    /// completion also retires the unsignaled WQEs before it. The consumer
    /// index is published once per batch.
    ///
    /// Errors with [`ErrorKind::Io`] if a completion contradicts the
    /// driver's queue accounting (a device error); the completions before
    /// it are returned first, and the error by the next call.
    pub fn poll(&self, wc: &mut [WorkCompletion]) -> Result<usize> {
        let cq = &*self.inner;
        let mut guard = cq.poll.lock();
        let p = &mut *guard;
        if let Some(e) = p.pending.take() {
            return Err(e);
        }
        let start = p.ring.ci();
        let mut n = 0;
        let mut result = Ok(());
        while n < wc.len() {
            let Some(cqe) = p.ring.pop() else { break };
            let w = WorkCompletion::from_cqe(&cqe);
            wc[n] = w;
            n += 1;
            if let Err(e) = cq.retire(&mut p.cache, &cqe, &w) {
                result = Err(e);
                break;
            }
        }
        if p.ring.ci() != start {
            // DbRec::publish fences: the entries are read before the device
            // may reuse their slots.
            p.dbrec.publish(p.ring.ci());
        }
        match result {
            Ok(()) => Ok(n),
            Err(e) if n > 0 => {
                p.pending = Some(e);
                Ok(n)
            }
            Err(e) => Err(e),
        }
    }

    /// Requests a completion event (`ibv_req_notify_cq`): the device writes
    /// a [`crate::EventType::Completion`] event for this CQ when the next
    /// completion arrives (or the next solicited or error completion, with
    /// `solicited_only`). One event per arm; read it with
    /// [`Context::poll_event`] before arming again.
    pub fn arm(&self, solicited_only: bool) {
        let cq = &*self.inner;
        let ci = cq.poll.lock().ring.ci();
        let cmd = if solicited_only {
            CqArmCmd::Solicited
        } else {
            CqArmCmd::Next
        };
        let db = CqDoorbell::new()
            .with_cqn(cq.cqn)
            .with_cmd(cmd as u8)
            .with_sn(cq.arm.sn.load(Ordering::Relaxed) & 3)
            .with_ci(ci & 0xff_ffff);
        cq.ctx.ring_doorbell(cq.uar_page, CQ_DB, db.into_bits());
    }

    /// Destroys the CQ (DESTROY_CQ). A CQ that QPs still use is busy; on
    /// any failure the CQ is handed back.
    pub fn destroy(mut self) -> Result<(), DestroyError<Self>> {
        let Some(inner) = Arc::get_mut(&mut self.inner) else {
            let error = Error::new(
                ErrorKind::Busy,
                format!("CQ {} is still used by queue pairs", self.inner.cqn),
            );
            return Err(DestroyError {
                object: self,
                error,
            });
        };
        match inner.release() {
            Ok(()) => Ok(()),
            Err(error) => Err(DestroyError {
                object: self,
                error,
            }),
        }
    }
}

impl<H: Hal> CqShared<H> {
    /// Retires the WQEs a completion covers on its QP.
    fn retire(
        &self,
        cache: &mut Option<Arc<QpShared>>,
        cqe: &Cqe,
        wc: &WorkCompletion,
    ) -> Result<()> {
        let qpn = wc.qp_num;
        if cache.as_ref().map_or(true, |q| q.qpn != qpn) {
            *cache = self.ctx.qps.read().get(&qpn).cloned();
        }
        let Some(qp) = cache.as_deref() else {
            log::warn!("CQ {}: completion for unknown QP {qpn}", self.cqn);
            return Ok(());
        };
        if wc.status != WcStatus::Success {
            qp.mark_error();
        }
        let counter = cqe.wqe_counter.to_ne();
        let is_send = cqe.flags.is_send();
        let ok = if is_send {
            qp.retire_sq(counter)
        } else {
            qp.retire_rq(counter)
        };
        if ok {
            Ok(())
        } else {
            Err(Error::new(
                ErrorKind::Io,
                format!(
                    "CQ {}: {} completion of QP {qpn} has wqe_counter {counter}, outside its \
                     outstanding WQEs",
                    self.cqn,
                    if is_send { "send" } else { "receive" }
                ),
            ))
        }
    }

    /// Removes every completion of QP `qpn` from the CQ (mlx5's
    /// `__mlx5_cq_clean`), after the QP was reset or destroyed: the device
    /// writes no more for it, and its queue indices start over.
    pub(crate) fn clean(&self, qpn: u32) {
        let mut guard = self.poll.lock();
        let p = &mut *guard;
        if p.cache.as_ref().is_some_and(|q| q.qpn == qpn) {
            p.cache = None;
        }
        let size = 1u32 << self.log_size;
        let off = |i: u32| (i & (size - 1)) as usize * CQE_SIZE;
        let ci = p.ring.ci();
        let mut prod = ci;
        while prod.wrapping_sub(ci) < size {
            let owner: CqeOwner = self.ring_mem.read(off(prod) + CQE_OWNER_OFFSET);
            if owner.owner() != owner_bit(prod, self.log_size) {
                break;
            }
            prod = prod.wrapping_add(1);
        }
        // Acquire: the device wrote these entries' bodies before their
        // owner words.
        fence(Ordering::Acquire);
        // Slide the other QPs' completions towards the producer end over
        // the removed ones, keeping each slot's owner word.
        let mut freed = 0u32;
        let mut i = prod;
        while i != ci {
            i = i.wrapping_sub(1);
            let cqe: Cqe = self.ring_mem.read(off(i));
            if cqe.qpn.to_ne() & 0xff_ffff == qpn {
                freed += 1;
            } else if freed > 0 {
                let dst = i.wrapping_add(freed);
                let owner: CqeOwner = self.ring_mem.read(off(dst) + CQE_OWNER_OFFSET);
                self.ring_mem.write(off(dst), Cqe { owner, ..cqe });
            }
        }
        if freed > 0 {
            for _ in 0..freed {
                p.ring.pop();
            }
            // DbRec::publish fences: the slots are reread before the device
            // may reuse them.
            p.dbrec.publish(p.ring.ci());
            log::debug!("CQ {}: removed {freed} completion(s) of QP {qpn}", self.cqn);
        }
    }

    fn release(&mut self) -> Result<()> {
        let Some(mem) = self.mem.take() else {
            return Ok(());
        };
        let input = ObjIn {
            id: le32::from_ne(self.cqn),
        };
        if let Err(e) = self.ctx.exec::<_, ()>(CmdOpcode::DestroyCq, &input) {
            self.mem = Some(mem);
            return Err(e);
        }
        self.ctx.cqs.write().remove(&self.cqn);
        // SAFETY: from dma_alloc, and the CQ using it is destroyed.
        unsafe { self.ctx.hal().dma_free(mem) };
        Ok(())
    }
}

impl<H: Hal> Drop for CqShared<H> {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            log::error!(
                "dropping CQ {}: {e}; leaking its memory, which the device may still use",
                self.cqn
            );
        }
    }
}

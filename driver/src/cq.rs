//! Completion queues: creation, batched polling, arming, and removing a
//! QP's completions when the QP is reset or destroyed.

use alloc::format;
use alloc::sync::Arc;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicBool, AtomicU8, Ordering};

use rnic_hw_regs::cmd::{CmdOpcode, CreateCqIn, CreateCqOut, ObjIn, ResizeCqIn};
use rnic_hw_regs::cqe::{Cqe, CqeOwner, CQE_OWNER_OFFSET, CQE_SIZE};
use rnic_hw_regs::uar::{CqArmCmd, CqDoorbell, CQ_DB};
use rnic_hw_regs::{le32, le64};
use rnic_queues::{ConsumerRing, DbRec, DmaRegion, Hal};
use rnic_verbs::WcStatus;
use spin::Mutex;

use crate::bringup::{ring_bytes, DeviceMem};
use crate::channel::{ChannelInner, CompChannel, EventCounts};
use crate::context::{remove_if_ours, Context, ContextCore};
use crate::dma::view;
use crate::error::{DestroyError, Error, ErrorKind, Result};
use crate::qp::QpShared;
use crate::srq::SrqSlots;
use rnic_verbs::WorkCompletion;

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
    /// DESTROY_CQ was sent and not refused: the device may have given the
    /// number to a new CQ.
    destroyed: AtomicBool,
}

/// Largest CQ, log2 of its entries: the ring's consumer index is 24 bits.
const LOG_MAX_CQ: u8 = 23;

/// The device-side CQ, shared by the handle and the QPs using it.
pub(crate) struct CqShared<H: Hal> {
    pub(crate) ctx: Arc<ContextCore<H>>,
    pub(crate) cqn: u32,
    /// The channel its completion events go to (EQ 0 without one).
    channel: Option<Arc<ChannelInner<H>>>,
    events: EventCounts,
    uar_page: u32,
    arm: Arc<CqArm>,
    poll: Mutex<CqPoll>,
}

/// The consumer state, locked for a poll batch (and a resize).
struct CqPoll {
    ring: ConsumerRing<Cqe>,
    dbrec: DbRec,
    /// View of the CQE ring, for rewriting entries when cleaning.
    ring_mem: DmaRegion,
    /// The CQE ring and doorbell record; `None` once released.
    mem: Option<DmaRegion>,
    /// The QPs completing into the CQ.
    qps: QpTable,
    /// An error found after completions were already returned, reported
    /// by the next poll.
    pending: Option<Error>,
}

/// The QPs completing into one CQ, by number, so the poller finds a
/// completion's QP without touching context-wide state. QPs enter when
/// created and leave when destroyed; the poll lock guards the table.
#[derive(Default)]
struct QpTable {
    /// Sorted by QP number, numbers unique.
    qps: Vec<Arc<QpShared>>,
    /// Index of the QP found last (mlx5's `cur_rsc`); checked against the
    /// number on use, so a stale index only costs a search.
    last: usize,
}

impl QpTable {
    fn search(&self, qpn: u32) -> Result<usize, usize> {
        self.qps.binary_search_by_key(&qpn, |q| q.qpn)
    }

    /// The QP of number `qpn`, if the table has one.
    fn get(&self, qpn: u32) -> Option<&Arc<QpShared>> {
        self.search(qpn).ok().map(|i| &self.qps[i])
    }

    fn find(&mut self, qpn: u32) -> Option<&QpShared> {
        if self.qps.get(self.last).map_or(true, |q| q.qpn != qpn) {
            self.last = self.search(qpn).ok()?;
        }
        self.qps.get(self.last).map(|q| &**q)
    }

    /// Adds `qp`, replacing an entry of the same number (a QP whose number
    /// the device reused while its destruction was being finished).
    fn insert(&mut self, qp: Arc<QpShared>) {
        match self.search(qp.qpn) {
            Ok(i) => self.qps[i] = qp,
            Err(i) => self.qps.insert(i, qp),
        }
    }

    /// Removes `qp` if its number still maps to it; false if the number
    /// maps to a newer QP or to none.
    fn remove(&mut self, qp: &Arc<QpShared>) -> bool {
        match self.search(qp.qpn) {
            Ok(i) if Arc::ptr_eq(&self.qps[i], qp) => {
                self.qps.remove(i);
                true
            }
            _ => false,
        }
    }
}

impl<H: Hal> Context<H> {
    /// Creates a CQ with room for at least `cqe` completions (CREATE_CQ),
    /// whose completion events go to EQ 0 ([`Context::poll_event`]).
    pub fn create_cq(&self, cqe: u32) -> Result<Cq<H>> {
        self.create_cq_with(cqe, None, 0)
    }

    /// Creates a CQ (`ibv_create_cq`) whose completion events go to
    /// `channel` (EQ 0 without one). `comp_vector` must be below
    /// [`Context::num_comp_vectors`] (or 0); the channel's vector is the
    /// one its events raise.
    pub fn create_cq_with(
        &self,
        cqe: u32,
        channel: Option<&CompChannel<H>>,
        comp_vector: u32,
    ) -> Result<Cq<H>> {
        let sh = &self.shared;
        if comp_vector >= self.num_comp_vectors().max(1) {
            return Err(Error::invalid(format!(
                "completion vector {comp_vector} is not below {}",
                self.num_comp_vectors().max(1)
            )));
        }
        if let Some(ch) = channel {
            if !Arc::ptr_eq(&ch.inner.ctx, sh) {
                return Err(Error::invalid(
                    "the completion channel belongs to another device context",
                ));
            }
        }
        let (log_size, ring_bytes, mem) = cq_memory(sh, cqe)?;
        let uar_page = sh.alloc_uar_page();
        let input = CreateCqIn {
            log_size: le32::from_ne(log_size),
            uar_page: le32::from_ne(uar_page),
            eqn: le32::from_ne(channel.map_or(0, |c| c.inner.eqn)),
            reserved: le32::from_ne(0),
            buf_iova: le64::from_ne(mem.iova()),
            dbrec_iova: le64::from_ne(mem.iova() + ring_bytes as u64),
        };
        let out: CreateCqOut = match sh.exec(CmdOpcode::CreateCq, &input) {
            Ok(out) => out,
            Err(e) => {
                // SAFETY: from dma_alloc, given to the device only by this
                // command.
                unsafe {
                    sh.dispose_after_failed_create(
                        DeviceMem::Region(mem),
                        format_args!("creating a CQ"),
                        &e,
                    )
                };
                return Err(e);
            }
        };
        let cqn = out.cqn.to_ne() & 0xff_ffff;
        let live = sh
            .cqs
            .read()
            .get(&cqn)
            .is_some_and(|a| !a.destroyed.load(Ordering::Acquire));
        if live {
            // The device claims a number a live CQ has: the new CQ cannot
            // be told apart from it (events, DESTROY_CQ), so it is neither
            // used nor destroyed, and the device may use its memory until
            // the reset.
            let e = Error::new(
                ErrorKind::Io,
                format!("the device created a CQ with number {cqn}, which a live CQ has"),
            );
            sh.orphan(
                DeviceMem::Region(mem),
                format_args!("creating CQ {cqn}"),
                &e,
            );
            return Err(e);
        }
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
            destroyed: AtomicBool::new(false),
        });
        sh.cqs.write().insert(cqn, Arc::clone(&arm));
        log::debug!("created CQ {cqn} of {} entries", 1u32 << log_size);
        let cq = Cq {
            inner: Arc::new(CqShared {
                ctx: Arc::clone(sh),
                cqn,
                channel: channel.map(|c| Arc::clone(&c.inner)),
                events: EventCounts::default(),
                uar_page,
                arm,
                poll: Mutex::new(CqPoll {
                    ring,
                    dbrec,
                    ring_mem,
                    mem: Some(mem),
                    qps: QpTable::default(),
                    pending: None,
                }),
            }),
        };
        if let Some(ch) = channel {
            // Refused, the CQ is destroyed again as it drops.
            ch.inner.attach(&cq.inner)?;
        }
        Ok(cq)
    }
}

/// The memory of a CQ of at least `cqe` entries: log2 of its entries, the
/// ring's bytes (the doorbell record follows the ring), and the zeroed
/// region.
fn cq_memory<H: Hal>(sh: &ContextCore<H>, cqe: u32) -> Result<(u32, usize, DmaRegion)> {
    // The CAP field has 5 bits, and a CQ's 24-bit consumer index allows
    // 2^23 entries at most, whatever a device claims.
    let max = 1u32 << sh.dev.caps.log_max_cqe.min(LOG_MAX_CQ);
    if cqe == 0 || cqe > max {
        return Err(Error::invalid(format!(
            "CQ size {cqe} is outside 1..={max}"
        )));
    }
    // cqe <= max <= 2^31: the power of two fits.
    let log_size = cqe.next_power_of_two().trailing_zeros();
    let Some((ring_bytes, len)) =
        ring_bytes(CQE_SIZE, log_size).and_then(|r| Some((r, r.checked_add(CQE_SIZE)?)))
    else {
        return Err(Error::new(
            ErrorKind::NoMemory,
            format!("a CQ of {cqe} entries does not fit in the address space"),
        ));
    };
    let mem = sh
        .hal()
        .dma_alloc(len)
        .map_err(|e| Error::hal(e, "allocating a CQ"))?;
    mem.zero();
    Ok((log_size, ring_bytes, mem))
}

impl<H: Hal> Cq<H> {
    /// Resizes the CQ to hold at least `cqe` completions (`ibv_resize_cq`,
    /// RESIZE_CQ); the completions not yet polled move with it, so a size
    /// below their number is `EINVAL`.
    pub fn resize(&self, cqe: u32) -> Result<()> {
        let cq = &*self.inner;
        let sh = &cq.ctx;
        let mut p = cq.poll.lock();
        let (log_size, ring_bytes, mem) = cq_memory(sh, cqe)?;
        // SAFETY: the ring, record and view point into `mem`, which the
        // CqPoll owns from here on and frees only when it is released.
        let (ring, dbrec, ring_mem) = unsafe {
            (
                p.ring.moved_to(&mem, log_size),
                DbRec::new(&mem, ring_bytes),
                view(&mem, 0, ring_bytes),
            )
        };
        // The new record starts at the consumer index, which stays (the
        // poll lock is held).
        dbrec.publish(p.ring.ci());
        let input = ResizeCqIn {
            cqn: le32::from_ne(cq.cqn),
            log_size: le32::from_ne(log_size),
            buf_iova: le64::from_ne(mem.iova()),
            dbrec_iova: le64::from_ne(mem.iova() + ring_bytes as u64),
        };
        if let Err(e) = sh.exec::<_, ()>(CmdOpcode::ResizeCq, &input) {
            // SAFETY: from dma_alloc, given to the device only by this
            // command.
            unsafe {
                sh.dispose_after_failed_create(
                    DeviceMem::Region(mem),
                    format_args!("resizing CQ {}", cq.cqn),
                    &e,
                )
            };
            return Err(e);
        }
        p.ring = ring;
        p.dbrec = dbrec;
        p.ring_mem = ring_mem;
        if let Some(old) = p.mem.replace(mem) {
            // SAFETY: from dma_alloc; the device moved to the new ring.
            unsafe { sh.hal().dma_free(old) };
        }
        log::debug!("CQ {}: resized to {} entries", cq.cqn, 1u32 << log_size);
        Ok(())
    }

    /// The CQ number.
    pub fn cq_num(&self) -> u32 {
        self.inner.cqn
    }

    /// The context the CQ belongs to (`ibv_cq.context`).
    pub fn context(&self) -> Context<H> {
        Context {
            shared: self.inner.ctx.clone(),
        }
    }

    /// Number of completions the CQ holds.
    pub fn cqe(&self) -> u32 {
        self.inner.poll.lock().ring.size()
    }

    /// Takes up to `wc.len()` completions (`ibv_poll_cq`); returns how many
    /// were written to the front of `wc`.
    ///
    /// Each completion retires the WQEs it covers on its QP: a send
    /// completion also retires the unsignaled WQEs before it. The consumer
    /// index is published once per batch.
    ///
    /// A poll that finds nothing calls [`Hal::poll_empty`] once and looks
    /// again: a program's wait loop is a busy wait on the CQ's owner bits,
    /// and a platform whose device needs the waiting thread's CPU (an
    /// emulated NIC on a machine with few cores) runs it there, so a
    /// program that spins on its CQ never starves the NIC that must write
    /// the completion. On hardware the call does nothing.
    ///
    /// Errors with [`ErrorKind::Io`] if a completion contradicts the
    /// driver's queue accounting (a device error); the completions before
    /// it are returned first, and the error by the next call.
    pub fn poll(&self, wc: &mut [WorkCompletion]) -> Result<usize> {
        let n = self.take(wc)?;
        if n > 0 || wc.is_empty() {
            return Ok(n);
        }
        self.inner.ctx.hal().poll_empty();
        self.take(wc)
    }

    /// One look at the ring for up to `wc.len()` completions.
    fn take(&self, wc: &mut [WorkCompletion]) -> Result<usize> {
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
            let mut w = crate::wc::from_cqe(&cqe);
            // A completion the accounting refuses is an error, never a
            // completion; the work request ID is the driver's own.
            match cq.retire(&mut p.qps, &cqe, &w) {
                Ok(wr_id) => w.wr_id = wr_id,
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
            wc[n] = w;
            n += 1;
        }
        if p.ring.ci() != start {
            // DbRec::publish is a release store: the entries are read before
            // the device may reuse their slots.
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

    /// Acknowledges `n` completion events taken with
    /// [`CompChannel::get_cq_event`] (`ibv_ack_cq_events`); more than
    /// were taken and not yet acknowledged is `EINVAL`.
    pub fn ack_events(&self, n: u32) -> Result<()> {
        self.inner.events.ack(n)
    }

    /// Destroys the CQ (DESTROY_CQ). A CQ that QPs still use, or with
    /// completion events not acknowledged, is busy.
    ///
    /// If the device refuses, or never gets the command, the CQ is handed
    /// back. If the outcome is unknown (a timeout), the CQ is gone
    /// ([`DestroyError::object`] is `None`): DESTROY_CQ is not sent again,
    /// since its number may by then belong to a new CQ, and its memory is
    /// kept until the context is closed (the device may still write to it).
    pub fn destroy(mut self) -> Result<(), DestroyError<Self>> {
        let unacked = self.inner.events.unacked();
        // The channel's weak reference would keep `get_mut` from seeing
        // the CQ as unshared: it is dropped for the attempt, and restored
        // if the CQ stays.
        let channel = self.inner.channel.clone();
        if let Some(ch) = &channel {
            ch.detach(self.inner.cqn, Arc::as_ptr(&self.inner));
        }
        let result = match Arc::get_mut(&mut self.inner) {
            _ if unacked > 0 => Err(Error::new(
                ErrorKind::Busy,
                format!(
                    "CQ {} has {unacked} completion events not acknowledged",
                    self.inner.cqn
                ),
            )),
            Some(inner) => inner.release(),
            None => Err(Error::new(
                ErrorKind::Busy,
                format!(
                    "CQ {} is still used by queue pairs (or held by a completion event)",
                    self.inner.cqn
                ),
            )),
        };
        let kept = self.inner.poll.lock().mem.is_some();
        if let Some(ch) = channel.filter(|_| result.is_err() && kept) {
            // Never refused: the CQ had its place.
            let _ = ch.attach(&self.inner);
        }
        match result {
            Err(e) if !kept => Err(DestroyError::gone(e)),
            result => DestroyError::hand_back(self, result),
        }
    }
}

impl<H: Hal> CqShared<H> {
    /// Notes a completion event taken from its channel: the next arm
    /// carries the next sequence number.
    pub(crate) fn event_taken(&self) {
        self.arm.sn.fetch_add(1, Ordering::Relaxed);
        self.events.take();
    }

    /// Retires the WQEs a completion covers on its QP and returns the
    /// work request ID of the one it completes.
    fn retire(&self, qps: &mut QpTable, cqe: &Cqe, wc: &WorkCompletion) -> Result<u64> {
        let qpn = wc.qp_num;
        let Some(qp) = qps.find(qpn) else {
            return Err(Error::new(
                ErrorKind::Io,
                format!(
                    "CQ {}: a completion for QP {qpn}, which has no queue on this CQ",
                    self.cqn
                ),
            ));
        };
        let counter = cqe.wqe_counter.to_ne();
        let is_send = cqe.flags.is_send();
        let retired = if is_send {
            qp.retire_sq(counter)
        } else {
            qp.retire_rq(counter)
        };
        if let Some(wr_id) = retired {
            if wc.status != WcStatus::Success {
                qp.mark_error(is_send);
            }
            Ok(wr_id)
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

    /// Routes the completions of `qp`, just created, to its state.
    ///
    /// The device gives a number to a new QP as soon as the QP that had it
    /// is destroyed, possibly before that QP's owner has cleaned this CQ of
    /// its completions: if the table still has a QP of the number, its
    /// completions are removed first, so they are never taken for the new
    /// QP's (which has none yet). That QP must have been destroyed (or its
    /// destruction's outcome be unknown); if it was not, the device gave
    /// out a number in use, and the new QP is refused with
    /// [`ErrorKind::Io`] rather than take over the live QP's completions.
    pub(crate) fn attach(&self, qp: &Arc<QpShared>) -> Result<()> {
        let mut p = self.poll.lock();
        if let Some(old) = p.qps.get(qp.qpn) {
            if !old.destroyed() {
                log::error!(
                    "CQ {}: the device gave QP number {} to a new QP while the QP that has \
                     it is not destroyed",
                    self.cqn,
                    qp.qpn
                );
                return Err(Error::new(
                    ErrorKind::Io,
                    format!(
                        "the device created a QP with number {}, which a live QP of CQ {} has",
                        qp.qpn, self.cqn
                    ),
                ));
            }
            let srq = old.srq.clone();
            self.clean_locked(&mut p, qp.qpn, srq.as_deref());
        }
        p.qps.insert(Arc::clone(qp));
        Ok(())
    }

    /// Whether completions of QP `qpn` are routed to a QP.
    #[cfg(test)]
    pub(crate) fn routes(&self, qpn: u32) -> bool {
        self.poll.lock().qps.get(qpn).is_some()
    }

    /// Undoes [`CqShared::attach`] of `qp`, a QP being refused that has no
    /// completions.
    pub(crate) fn unattach(&self, qp: &Arc<QpShared>) {
        self.poll.lock().qps.remove(qp);
    }

    /// Stops routing completions to `qp`, destroyed, and removes its
    /// completions. If its number already went to a newer QP, that QP's
    /// [`CqShared::attach`] removed them, and the completions of the number
    /// are now the new QP's: nothing is done.
    pub(crate) fn detach(&self, qp: &Arc<QpShared>) {
        let mut p = self.poll.lock();
        if p.qps.remove(qp) {
            self.clean_locked(&mut p, qp.qpn, qp.srq.as_deref());
        }
    }

    /// Removes the completions of `qp`, whose destruction has an unknown
    /// outcome, if its number is still its own here; its table entry
    /// stays, so that a new QP given the number cleans the completions the
    /// old one may still write before taking it over.
    pub(crate) fn abandon(&self, qp: &Arc<QpShared>) {
        let mut p = self.poll.lock();
        if p.qps.get(qp.qpn).is_some_and(|q| Arc::ptr_eq(q, qp)) {
            self.clean_locked(&mut p, qp.qpn, qp.srq.as_deref());
        }
    }

    /// Removes every completion of QP `qpn` from the CQ after the QP was
    /// reset: the device writes no more for it, and its queue indices start
    /// over.
    pub(crate) fn clean(&self, qpn: u32) {
        let mut p = self.poll.lock();
        let srq = p.qps.get(qpn).and_then(|q| q.srq.clone());
        self.clean_locked(&mut p, qpn, srq.as_deref());
    }

    /// Removes every completion of QP `qpn` (mlx5's `__mlx5_cq_clean`).
    /// The receive completions of a QP on `srq` give their slots back to
    /// it: nobody will poll them.
    fn clean_locked(&self, p: &mut CqPoll, qpn: u32, srq: Option<&SrqSlots>) {
        let size = p.ring.size();
        let off = |i: u32| (i & (size - 1)) as usize * CQE_SIZE;
        let ci = p.ring.ci();
        let mut prod = ci;
        // `ready` loads each owner word with acquire: the bodies read below
        // were written before it.
        while prod.wrapping_sub(ci) < size && p.ring.ready(prod) {
            prod = prod.wrapping_add(1);
        }
        // Slide the other QPs' completions towards the producer end over
        // the removed ones, keeping each slot's owner word.
        let mut freed = 0u32;
        let mut i = prod;
        while i != ci {
            i = i.wrapping_sub(1);
            let cqe: Cqe = p.ring_mem.read(off(i));
            if cqe.qpn.to_ne() & 0xff_ffff == qpn {
                freed += 1;
                if let Some(srq) = srq.filter(|_| !cqe.flags.is_send()) {
                    if srq.retire(cqe.wqe_counter.to_ne()).is_none() {
                        log::warn!(
                            "CQ {}: a removed completion of QP {qpn} names no outstanding \
                             WQE of SRQ {}",
                            self.cqn,
                            srq.srqn
                        );
                    }
                }
            } else if freed > 0 {
                let dst = i.wrapping_add(freed);
                let owner: CqeOwner = p.ring_mem.read(off(dst) + CQE_OWNER_OFFSET);
                p.ring_mem.write(off(dst), Cqe { owner, ..cqe });
            }
        }
        if freed > 0 {
            for _ in 0..freed {
                p.ring.pop();
            }
            // DbRec::publish is a release store: the slots are rewritten
            // before the device may reuse them.
            p.dbrec.publish(p.ring.ci());
            log::debug!("CQ {}: removed {freed} completion(s) of QP {qpn}", self.cqn);
        }
    }

    fn release(&mut self) -> Result<()> {
        let Some(mem) = self.poll.get_mut().mem.take() else {
            return Ok(());
        };
        let input = ObjIn {
            id: le32::from_ne(self.cqn),
        };
        // Before the command: once the device destroys the CQ, a CQ
        // created with its number may be registered at any time.
        self.arm.destroyed.store(true, Ordering::Release);
        if let Err(e) = self.ctx.exec::<_, ()>(CmdOpcode::DestroyCq, &input) {
            if !e.outcome_unknown() {
                self.arm.destroyed.store(false, Ordering::Release);
            }
            if e.outcome_unknown() {
                // Never asked again: the number may go to a new CQ.
                remove_if_ours(&self.ctx.cqs, self.cqn, &self.arm);
                self.ctx.orphan(
                    DeviceMem::Region(mem),
                    format_args!("destroying CQ {}", self.cqn),
                    &e,
                );
            } else {
                self.poll.get_mut().mem = Some(mem);
            }
            return Err(e);
        }
        #[cfg(test)]
        self.ctx.after_destroy(CmdOpcode::DestroyCq, self.cqn);
        remove_if_ours(&self.ctx.cqs, self.cqn, &self.arm);
        if let Some(ch) = &self.channel {
            ch.detach(self.cqn, self);
        }
        // SAFETY: from dma_alloc, and the CQ using it is destroyed.
        unsafe { self.ctx.hal().dma_free(mem) };
        log::debug!("destroyed CQ {}", self.cqn);
        Ok(())
    }
}

impl<H: Hal> Drop for CqShared<H> {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            if let Some(mem) = self.poll.get_mut().mem.take() {
                self.ctx.orphan(
                    DeviceMem::Region(mem),
                    format_args!("dropping CQ {}", self.cqn),
                    &e,
                );
            }
        }
    }
}

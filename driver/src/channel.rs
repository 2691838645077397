//! Completion channels (`struct ibv_comp_channel`): each on a completion
//! event queue and an interrupt vector of its own, with the vector's
//! eventfd as the channel's pollable fd. Vector 0 carries command
//! completion and the fatal state, the next one EQ 0; every other vector
//! is a completion vector, and a channel takes a free one.
//!
//! The channel's EQ is kept armed whenever the driver has taken every
//! event from it, so the fd is readable exactly when an event may be
//! waiting: the first event after an arm raises the vector (the eventfd
//! becomes readable), and the stale readiness is taken just before the
//! next arm.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::sync::{Arc, Weak};
use core::sync::atomic::{AtomicU32, Ordering};

use rnic_hw_regs::cmd::{CmdOpcode, CreateEqIn, CreateEqOut, ObjIn};
use rnic_hw_regs::eqe::{Eqe, EventType, EQE_SIZE};
use rnic_hw_regs::uar::{EqArmDoorbell, EQ_DB};
use rnic_hw_regs::{le32, le64};
use rnic_queues::{ConsumerRing, DmaRegion, Hal, HalError};
use spin::{Mutex, RwLock};

use crate::bringup::{ring_bytes, DeviceMem};
use crate::context::{Context, ContextCore};
use crate::cq::{Cq, CqShared};
use crate::error::{DestroyError, Error, ErrorKind, Result};

/// log2 of a channel's EQ entries: one event at most per CQ on it is
/// outstanding (a CQ is armed again only after its event is taken), so
/// this is also the most CQs a channel takes.
const LOG_EQ: u8 = 12;
/// Longest sleep between two looks at the EQ: another thread waiting on
/// the same vector may take the interrupt.
const SLEEP_NS: u64 = 1_000_000;

/// A completion channel: where the completion events of the CQs created
/// with it arrive ([`Context::create_cq_with`]), to be taken with
/// [`CompChannel::get_cq_event`], blocking or after `poll` on
/// [`CompChannel::fd`].
///
/// Its CQs keep it alive: dropping it while they exist defers its
/// destruction until the last one is gone.
pub struct CompChannel<H: Hal> {
    pub(crate) inner: Arc<ChannelInner<H>>,
}

/// The device-side channel, shared by the handle and its CQs.
pub(crate) struct ChannelInner<H: Hal> {
    pub(crate) ctx: Arc<ContextCore<H>>,
    pub(crate) eqn: u32,
    vector: u16,
    uar_page: u32,
    ring: Mutex<ConsumerRing<Eqe>>,
    /// Its CQs by number.
    cqs: RwLock<BTreeMap<u32, Weak<CqShared<H>>>>,
    /// The EQ ring; `None` once released.
    mem: Option<DmaRegion>,
}

impl<H: Hal> Context<H> {
    /// Creates a completion channel (`ibv_create_comp_channel`): a
    /// completion EQ (CREATE_EQ) on the next completion vector.
    pub fn create_comp_channel(&self) -> Result<CompChannel<H>> {
        let sh = &self.shared;
        let caps = &sh.dev.caps;
        if caps.max_eq == 0 {
            return Err(Error::new(
                ErrorKind::NotSupported,
                "this device has no completion event queues",
            ));
        }
        let vector = sh.claim_vector()?;
        let result = self.channel_on(vector);
        if result.is_err() {
            sh.free_vector(vector);
        }
        result
    }

    fn channel_on(&self, vector: u16) -> Result<CompChannel<H>> {
        let sh = &self.shared;
        let caps = &sh.dev.caps;
        let log = LOG_EQ.min(caps.log_max_eq);
        let len = ring_bytes(EQE_SIZE, log.into()).unwrap_or(usize::MAX);
        let hal = sh.hal();
        let mem = hal
            .dma_alloc(len)
            .map_err(|e| Error::hal(e, "allocating a completion channel"))?;
        mem.zero();
        let uar_page = sh.alloc_uar_page();
        let input = CreateEqIn {
            log_size: le32::from_ne(log.into()),
            vector: le32::from_ne(vector.into()),
            uar_page: le32::from_ne(uar_page),
            reserved: le32::from_ne(0),
            buf_iova: le64::from_ne(mem.iova()),
        };
        let out: CreateEqOut = match sh.exec(CmdOpcode::CreateEq, &input) {
            Ok(out) => out,
            Err(e) => {
                // SAFETY: from dma_alloc, given to the device only by this
                // command.
                unsafe {
                    sh.dispose_after_failed_create(
                        DeviceMem::Region(mem),
                        format_args!("creating a completion channel"),
                        &e,
                    )
                };
                return Err(e);
            }
        };
        let eqn = out.eqn.to_ne() & 0xff_ffff;
        // SAFETY: the ring views `mem`, which the ChannelInner owns and
        // frees only when released, after which the ring is unused.
        let ring = unsafe { ConsumerRing::new(&mem, log.into()) };
        let inner = ChannelInner {
            ctx: Arc::clone(sh),
            eqn,
            vector,
            uar_page,
            ring: Mutex::new(ring),
            cqs: RwLock::new(BTreeMap::new()),
            mem: Some(mem),
        };
        inner.arm(0);
        log::debug!("created completion channel on EQ {eqn}, vector {vector}");
        Ok(CompChannel {
            inner: Arc::new(inner),
        })
    }

    /// Completion vectors (`ibv_context.num_comp_vectors`): how many
    /// completion channels can exist at once.
    pub fn num_comp_vectors(&self) -> u32 {
        self.shared.dev.caps.comp_vectors().len() as u32
    }
}

impl<H: Hal> CompChannel<H> {
    /// A file descriptor that is readable when an event may be waiting
    /// (`ibv_comp_channel.fd`), for `poll` or `epoll`; `None` where the
    /// platform has no interrupts (then only blocking in
    /// [`CompChannel::get_cq_event`] works, by polling).
    pub fn fd(&self) -> Option<i32> {
        self.inner.ctx.hal().irq_eventfd(self.inner.vector)
    }

    /// The interrupt vector the channel's EQ raises.
    pub fn vector(&self) -> u16 {
        self.inner.vector
    }

    /// Waits up to `timeout_ns` for the next completion event
    /// (`ibv_get_cq_event`) and returns the CQ it is for; `Ok(None)` on
    /// timeout (0: only an event already there). Each event taken must be
    /// acknowledged with [`Cq::ack_events`] before the CQ can be
    /// destroyed. The CQ must be armed again ([`Cq::arm`]) for its next
    /// event. A signal handler that runs in the waiting thread ends the
    /// wait with
    /// [`ErrorKind::Interrupted`](crate::ErrorKind::Interrupted).
    pub fn get_cq_event(&self, timeout_ns: u64) -> Result<Option<Cq<H>>> {
        let ch = &*self.inner;
        let hal = ch.ctx.hal();
        let start = hal.now_ns();
        let mut irq = true;
        loop {
            if let Some(cq) = ch.take()? {
                return Ok(Some(cq));
            }
            let elapsed = hal.now_ns().saturating_sub(start);
            if elapsed >= timeout_ns {
                return Ok(None);
            }
            if !irq {
                hal.relax();
                continue;
            }
            match hal.wait_irq(ch.vector, (timeout_ns - elapsed).min(SLEEP_NS)) {
                Ok(_) => {}
                Err(HalError::Unsupported) => irq = false,
                Err(e) => return Err(Error::hal(e, "waiting for a completion channel")),
            }
            // An inline device does its work in the threads that use it.
            hal.relax();
        }
    }

    /// Destroys the channel (DESTROY_EQ). A channel that CQs still use is
    /// busy. If the device refuses, or never gets the command, the channel
    /// is handed back; if the outcome is unknown, it is gone and its
    /// memory kept until the context is closed.
    pub fn destroy(mut self) -> Result<(), DestroyError<Self>> {
        let result = match Arc::get_mut(&mut self.inner) {
            Some(inner) => inner.release(),
            None => Err(Error::new(
                ErrorKind::Busy,
                format!("completion channel of EQ {} still has CQs", self.inner.eqn),
            )),
        };
        match result {
            Err(e) if self.inner.mem.is_none() => Err(DestroyError::gone(e)),
            result => DestroyError::hand_back(self, result),
        }
    }
}

impl<H: Hal> ChannelInner<H> {
    /// Writes the EQ's consumer index and, with `arm`, asks for the
    /// interrupt of the next event.
    fn doorbell(&self, ci: u32, arm: bool) {
        let db = EqArmDoorbell::new()
            .with_eqn(self.eqn)
            .with_arm(arm)
            .with_ci(ci & 0xff_ffff);
        self.ctx.ring_doorbell(self.uar_page, EQ_DB, db.into_bits());
    }

    /// Arms the EQ at consumer index `ci` after taking the readiness left
    /// by an earlier interrupt, so the fd turns readable only for events
    /// past `ci` (the device interrupts at once if there are some).
    fn arm(&self, ci: u32) {
        let _ = self.ctx.hal().wait_irq(self.vector, 0);
        self.doorbell(ci, true);
    }

    /// Takes the next event, if any, and returns its CQ; arms the EQ once
    /// it has none left.
    fn take(&self) -> Result<Option<Cq<H>>> {
        let mut ring = self.ring.lock();
        loop {
            let Some(eqe) = ring.pop() else {
                self.arm(ring.ci());
                // An event written just before the arm raised the vector:
                // it is taken by the next call.
                return Ok(None);
            };
            self.doorbell(ring.ci(), false);
            let cqn = eqe.obj.to_ne();
            if EventType::from_raw(eqe.word.event_type()) != Some(EventType::Completion) {
                log::warn!(
                    "EQ {}: skipping an event of type {} (obj {cqn}): not a completion",
                    self.eqn,
                    eqe.word.event_type()
                );
                continue;
            }
            let Some(cq) = self.cqs.read().get(&cqn).and_then(Weak::upgrade) else {
                log::warn!(
                    "EQ {}: completion event for CQ {cqn}, not one of its CQs",
                    self.eqn
                );
                continue;
            };
            if ring.peek().is_none() {
                self.arm(ring.ci());
            }
            cq.event_taken();
            return Ok(Some(Cq { inner: cq }));
        }
    }

    /// Routes the events of `cq`, just created on this channel, to it;
    /// refused (`ENOMEM`) if the channel has as many CQs as its EQ holds
    /// events.
    pub(crate) fn attach(&self, cq: &Arc<CqShared<H>>) -> Result<()> {
        let mut cqs = self.cqs.write();
        cqs.retain(|_, w| w.strong_count() > 0);
        if cqs.len() >= self.ring.lock().size() as usize {
            return Err(Error::new(
                ErrorKind::NoMemory,
                format!("completion channel of EQ {} has its most CQs", self.eqn),
            ));
        }
        cqs.insert(cq.cqn, Arc::downgrade(cq));
        Ok(())
    }

    /// Forgets `cq`, destroyed, unless its number already went to a new
    /// CQ of the channel.
    pub(crate) fn detach(&self, cqn: u32, cq: *const CqShared<H>) {
        let mut cqs = self.cqs.write();
        if cqs.get(&cqn).is_some_and(|w| w.as_ptr() == cq) {
            cqs.remove(&cqn);
        }
    }

    fn release(&mut self) -> Result<()> {
        let Some(mem) = self.mem.take() else {
            return Ok(());
        };
        let input = ObjIn {
            id: le32::from_ne(self.eqn),
        };
        if let Err(e) = self.ctx.exec::<_, ()>(CmdOpcode::DestroyEq, &input) {
            if e.outcome_unknown() {
                self.ctx.orphan(
                    DeviceMem::Region(mem),
                    format_args!("destroying EQ {}", self.eqn),
                    &e,
                );
            } else {
                self.mem = Some(mem);
            }
            return Err(e);
        }
        // SAFETY: from dma_alloc, and the EQ using it is destroyed.
        unsafe { self.ctx.hal().dma_free(mem) };
        self.ctx.free_vector(self.vector);
        log::debug!("destroyed completion channel of EQ {}", self.eqn);
        Ok(())
    }
}

impl<H: Hal> Drop for ChannelInner<H> {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            if let Some(mem) = self.mem.take() {
                self.ctx.orphan(
                    DeviceMem::Region(mem),
                    format_args!("dropping EQ {}", self.eqn),
                    &e,
                );
            }
        }
    }
}

/// Completion events a CQ has had taken and acknowledged.
#[derive(Default)]
pub(crate) struct EventCounts {
    taken: AtomicU32,
    acked: AtomicU32,
}

impl EventCounts {
    pub(crate) fn take(&self) {
        self.taken.fetch_add(1, Ordering::AcqRel);
    }

    /// Acknowledges `n` events; refused beyond those taken.
    pub(crate) fn ack(&self, n: u32) -> Result<()> {
        let taken = self.taken.load(Ordering::Acquire);
        self.acked
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |a| {
                (taken.wrapping_sub(a) >= n).then(|| a.wrapping_add(n))
            })
            .map(drop)
            .map_err(|a| {
                Error::invalid(format!(
                    "acknowledging {n} completion events with {} unacknowledged",
                    taken.wrapping_sub(a)
                ))
            })
    }

    /// Events taken and not yet acknowledged.
    pub(crate) fn unacked(&self) -> u32 {
        self.taken
            .load(Ordering::Acquire)
            .wrapping_sub(self.acked.load(Ordering::Acquire))
    }
}

//! The asynchronous event queue (EQ 0): QP and CQ errors, port changes and
//! completion events of armed CQs.

use core::sync::atomic::Ordering;

use rnic_hw_regs::bar0::{self, EqDoorbell};
use rnic_hw_regs::eqe::{Eqe, EventType};
use rnic_hw_regs::pci::BAR_REGS;
use rnic_queues::{ConsumerRing, DmaRegion, Hal, HalError};

use alloc::sync::{Arc, Weak};
use alloc::vec::Vec;

use crate::context::{Context, ContextCore};
use crate::error::{Error, Result};

/// An event read from the event queue (`struct ibv_async_event`, plus the
/// completion events a completion channel would deliver).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AsyncEvent {
    /// What happened.
    pub event_type: EventType,
    /// The object: a CQN, QPN or port number, depending on the type.
    pub obj: u32,
    /// For QP events, a [`crate::Syndrome`] value naming the cause.
    pub syndrome: u32,
}

/// EQ 0's consumer side.
pub(crate) struct EventQueue {
    ring: ConsumerRing<Eqe>,
    /// Keeps the ring's memory described; owned by the device handle.
    _mem: DmaRegion,
}

impl EventQueue {
    pub(crate) fn new(mem: DmaRegion, log_size: u32) -> Self {
        // SAFETY: `mem` views memory the device handle frees only after
        // this queue is gone.
        let ring = unsafe { ConsumerRing::new(&mem, log_size) };
        Self { ring, _mem: mem }
    }
}

/// Whom an event is for.
enum Owner {
    /// The context owning the object it names.
    Object,
    /// Every context (the port, the device).
    All,
    /// Nobody.
    Nobody,
}

fn owner(ty: EventType) -> Owner {
    match ty {
        EventType::CmdDone => Owner::Nobody,
        EventType::PortActive
        | EventType::PortErr
        | EventType::GidChange
        | EventType::DeviceFatal => Owner::All,
        _ => Owner::Object,
    }
}

impl<H: Hal> ContextCore<H> {
    /// Whether the object `ev` names is this context's.
    fn owns(&self, ev: &AsyncEvent) -> bool {
        match ev.event_type {
            EventType::Completion | EventType::CqError => self.cqs.read().contains_key(&ev.obj),
            EventType::SrqLimitReached | EventType::SrqErr => self.srqs.read().contains(&ev.obj),
            _ => self.qps.read().contains_key(&ev.obj),
        }
    }

    /// What taking `ev` does to this context's driver state: a completion
    /// event advances its CQ's arm sequence number, a QP error event marks
    /// the QP in error.
    fn note(&self, ev: &AsyncEvent) {
        match ev.event_type {
            EventType::Completion => {
                if let Some(arm) = self.cqs.read().get(&ev.obj) {
                    arm.sn.fetch_add(1, Ordering::Relaxed);
                }
            }
            EventType::QpFatal | EventType::QpReqErr | EventType::QpAccessErr => {
                if let Some(qp) = self.qps.read().get(&ev.obj) {
                    qp.mark_error(false);
                }
            }
            _ => {}
        }
        log::debug!("context {}: event {ev:?}", self.uid);
    }
}

impl<H: Hal> Context<H> {
    /// Takes the next event of this context, if there is one.
    ///
    /// The device has one asynchronous event queue: an event is this
    /// context's if it names one of its objects (port and device events
    /// are every context's); events of other contexts of the device taken
    /// here wait for those contexts. Completion events advance the CQ's
    /// arm sequence number (so the next [`crate::Cq::arm`] is not taken
    /// for a stale one); QP error events mark the QP as being in the error
    /// state. Command-completion events are consumed silently. Call this
    /// regularly: the device drops events when the queue is full.
    pub fn poll_event(&self) -> Option<AsyncEvent> {
        let sh = &*self.shared;
        if let Some(ev) = sh.pending.lock().pop_front() {
            return Some(ev);
        }
        loop {
            let ev = {
                let mut eq = sh.dev.eq.lock();
                let eqe = eq.ring.pop()?;
                let db = EqDoorbell::new().with_ci(eq.ring.ci() & 0xff_ffff);
                sh.dev
                    .hal
                    .mmio_write32(BAR_REGS, bar0::EQ_DB, db.into_bits().to_ne());
                let raw = eqe.word.event_type();
                let Some(event_type) = EventType::from_raw(raw) else {
                    log::warn!("skipping an event of unknown type {raw}");
                    continue;
                };
                AsyncEvent {
                    event_type,
                    obj: eqe.obj.to_ne(),
                    syndrome: eqe.syndrome.to_ne(),
                }
            };
            let everyone = match owner(ev.event_type) {
                Owner::Nobody => continue,
                Owner::All => true,
                Owner::Object => false,
            };
            let mut ours = everyone || sh.owns(&ev);
            let others: Vec<Arc<ContextCore<H>>> = sh
                .dev
                .contexts
                .lock()
                .iter()
                .filter_map(Weak::upgrade)
                .filter(|c| !Arc::ptr_eq(c, &self.shared))
                .collect();
            for other in others {
                if everyone || (!ours && other.owns(&ev)) {
                    other.note(&ev);
                    other.pending.lock().push_back(ev);
                    let hook = other.queued.lock().clone();
                    if let Some(h) = hook {
                        h();
                    }
                    ours |= everyone;
                }
            }
            if ours {
                sh.note(&ev);
                return Some(ev);
            }
            log::debug!("event {ev:?} of no open context dropped");
        }
    }
    /// Runs `hook` whenever another context's [`Context::poll_event`]
    /// queues an event of this one here (the event queue's interrupt came
    /// and went for that context): a context that waits on a descriptor
    /// of its own raises it there.
    pub fn on_event_queued(&self, hook: crate::context::EventHook) {
        *self.shared.queued.lock() = Some(hook);
    }

    /// Whether events of this context that another context took off the
    /// device's queue wait here.
    pub fn has_queued_events(&self) -> bool {
        !self.shared.pending.lock().is_empty()
    }

    /// A file descriptor (the platform's eventfd of the event queue's
    /// interrupt vector) that turns readable when an event arrives after
    /// [`Context::arm_events`] (`ibv_context.async_fd`), for `poll` or
    /// `epoll`; `None` where the platform has no interrupts. It is the
    /// device's, for every context: events of this context that another
    /// context took off the queue wait in this one without raising it
    /// ([`Context::on_event_queued`] tells of them).
    pub fn event_fd(&self) -> Option<i32> {
        let hal = &self.shared.dev.hal;
        hal.irq_eventfd(self.shared.dev.caps.async_vector())
    }

    /// Asks for the event queue's interrupt at its next event, after
    /// taking the readiness an earlier one left on [`Context::event_fd`]:
    /// the fd turns readable for events not yet taken (at once if one is
    /// waiting). Call it when [`Context::poll_event`] found none.
    pub fn arm_events(&self) {
        let dev = &self.shared.dev;
        let _ = dev.hal.wait_irq(dev.caps.async_vector(), 0);
        let ci = dev.eq.lock().ring.ci();
        let db = EqDoorbell::new().with_ci(ci & 0xff_ffff).with_arm(true);
        dev.hal
            .mmio_write32(BAR_REGS, bar0::EQ_DB, db.into_bits().to_ne());
    }

    /// Waits up to `timeout_ns` for the next event: `Ok(None)` on timeout.
    ///
    /// Sleeps on the event queue's interrupt where the platform supports
    /// interrupts, and spins otherwise. A signal handler that runs in the
    /// waiting thread ends the wait with
    /// [`ErrorKind::Interrupted`](crate::ErrorKind::Interrupted).
    pub fn wait_event(&self, timeout_ns: u64) -> Result<Option<AsyncEvent>> {
        let hal = &self.shared.dev.hal;
        let start = hal.now_ns();
        let mut irq = true;
        loop {
            if let Some(ev) = self.poll_event() {
                return Ok(Some(ev));
            }
            let elapsed = hal.now_ns().saturating_sub(start);
            if elapsed >= timeout_ns {
                return Ok(None);
            }
            if !irq {
                hal.relax();
                continue;
            }
            let ci = self.shared.dev.eq.lock().ring.ci();
            let db = EqDoorbell::new().with_ci(ci & 0xff_ffff).with_arm(true);
            hal.mmio_write32(BAR_REGS, bar0::EQ_DB, db.into_bits().to_ne());
            // An event written between the poll above and the arm raised no
            // interrupt: look again before sleeping.
            if let Some(ev) = self.poll_event() {
                return Ok(Some(ev));
            }
            // In slices: another context's thread may take the interrupt of
            // an event it then leaves for this one.
            let slice = (timeout_ns - elapsed).min(1_000_000);
            match hal.wait_irq(self.shared.dev.caps.async_vector(), slice) {
                Ok(_) => {}
                Err(HalError::Unsupported) => irq = false,
                Err(e) => return Err(Error::hal(e, "waiting for the event queue interrupt")),
            }
        }
    }
}

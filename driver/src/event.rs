//! The asynchronous event queue (EQ 0): QP and CQ errors, port changes and
//! completion events of armed CQs.

use core::sync::atomic::Ordering;

use rnic_hw_regs::bar0::{self, EqDoorbell};
use rnic_hw_regs::eqe::{Eqe, EventType};
use rnic_hw_regs::pci::BAR_REGS;
use rnic_queues::{ConsumerRing, DmaRegion, Hal, HalError};

use crate::context::Context;
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

impl<H: Hal> Context<H> {
    /// Takes the next event from the event queue, if there is one.
    ///
    /// Completion events advance the CQ's arm sequence number (so the next
    /// [`crate::Cq::arm`] is not taken for a stale one); QP error events
    /// mark the QP as being in the error state. Command-completion events
    /// are consumed silently. Call this regularly: the device drops events
    /// when the queue is full.
    pub fn poll_event(&self) -> Option<AsyncEvent> {
        let sh = &*self.shared;
        let mut eq = sh.dev.eq.lock();
        loop {
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
            let ev = AsyncEvent {
                event_type,
                obj: eqe.obj.to_ne(),
                syndrome: eqe.syndrome.to_ne(),
            };
            match event_type {
                EventType::CmdDone => continue,
                EventType::Completion => {
                    if let Some(arm) = sh.cqs.read().get(&ev.obj) {
                        arm.sn.fetch_add(1, Ordering::Relaxed);
                    }
                }
                EventType::QpFatal | EventType::QpReqErr | EventType::QpAccessErr => {
                    if let Some(qp) = sh.qps.read().get(&ev.obj) {
                        qp.mark_error(false);
                    }
                    log::debug!("QP event {ev:?}");
                }
                _ => log::debug!("event {ev:?}"),
            }
            return Some(ev);
        }
    }

    /// Waits up to `timeout_ns` for the next event: `Ok(None)` on timeout.
    ///
    /// Sleeps on the event queue's interrupt where the platform supports
    /// interrupts, and spins otherwise.
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
            match hal.wait_irq(self.shared.dev.caps.async_vector(), timeout_ns - elapsed) {
                Ok(_) => {}
                Err(HalError::Unsupported) => irq = false,
                Err(e) => return Err(Error::hal(e, "waiting for the event queue interrupt")),
            }
        }
    }
}

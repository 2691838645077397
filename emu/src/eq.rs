//! Event queues: EQ 0 (asynchronous events, configured through BAR 0) and
//! the completion EQs of CREATE_EQ: event writing, consumer index and
//! arming.

use std::ptr::NonNull;

use rnic_hw_regs::bar0::{EqDoorbell, FatalSyndrome, IntrCause};
use rnic_hw_regs::eqe::{Eqe, EqeWord, EventType, EQE_SIZE};
use rnic_hw_regs::le32;
use rnic_hw_regs::uar::EqArmDoorbell;
use rnic_queues::device::{ring_full, ring_pending, write_entry};
use rnic_queues::owner_bit;

use crate::iommu::{DmaRange, Iommu};
use crate::regs;
use crate::state::Dev;

/// EQ and CQ indices are 24 bits wide.
const INDEX_BITS: u32 = 24;

/// An event queue: EQ 0, or a completion EQ.
#[derive(Debug)]
pub(crate) struct EventQueue {
    ring: DmaRange,
    log_size: u8,
    vector: u16,
    /// Free-running producer index.
    pi: u32,
    /// Driver's consumer index from `EQ_DB`.
    ci: u32,
    armed: bool,
}

impl EventQueue {
    pub(crate) fn new(ring: DmaRange, log_size: u8, vector: u16) -> Self {
        Self {
            ring,
            log_size,
            vector,
            pi: 0,
            ci: 0,
            armed: false,
        }
    }
}

/// Why an event was not written.
enum Unwritten {
    /// The EQ is full: the event is dropped.
    Full,
    /// The EQ's memory is not mapped.
    Fault,
}

/// Writes an event into `eq`; returns whether to interrupt (the EQ was
/// armed, and the arm is consumed).
fn write(eq: &mut EventQueue, iommu: &Iommu, eqe: &Eqe) -> Result<bool, Unwritten> {
    if ring_full(eq.pi, eq.ci, eq.log_size as u32, INDEX_BITS) {
        return Err(Unwritten::Full);
    }
    let slot = (eq.pi & ((1 << eq.log_size) - 1)) as usize * EQE_SIZE;
    let p = eq.ring.at(iommu, slot, EQE_SIZE).ok_or(Unwritten::Fault)?;
    let owner = owner_bit(eq.pi, eq.log_size as u32);
    match NonNull::new(p.0) {
        // SAFETY: the slot is EQE_SIZE bytes inside a live mapping (translated
        // under the device lock); the ring base is page aligned, so the slot
        // is aligned for Eqe.
        Some(slot) if slot.as_ptr() as usize % align_of::<Eqe>() == 0 => unsafe {
            write_entry(slot, eqe, owner)
        },
        _ => return Err(Unwritten::Fault),
    }
    eq.pi = eq.pi.wrapping_add(1);
    Ok(std::mem::replace(&mut eq.armed, false))
}

fn eqe(ty: EventType, obj: u32, syndrome: u32) -> Eqe {
    Eqe {
        word: EqeWord::new().with_event_type(ty.raw()),
        obj: le32::from_ne(obj),
        syndrome: le32::from_ne(syndrome),
        ..Eqe::default()
    }
}

/// Writes an event into EQ 0. A full EQ drops the event; an EQ whose memory
/// was unmapped is a fatal device error.
pub(crate) fn post(dev: &mut Dev, ty: EventType, obj: u32, syndrome: u32) {
    let Some(eq) = dev.eq.as_mut() else {
        log::debug!("event {ty:?} on {obj} dropped: no event queue");
        return;
    };
    let index = eq.pi;
    match write(eq, &dev.iommu, &eqe(ty, obj, syndrome)) {
        Ok(interrupt) => {
            log::debug!("event {ty:?} obj {obj} syndrome {syndrome} at eq index {index}");
            if interrupt {
                let vector = eq.vector;
                regs::raise_cause(dev, IntrCause::new().with_async_eq(true), vector);
            }
        }
        Err(Unwritten::Full) => log::warn!("event {ty:?} on {obj} dropped: event queue full"),
        Err(Unwritten::Fault) => regs::fatal(dev, FatalSyndrome::EqDma),
    }
}

/// Writes CQ `cqn`'s completion event into event queue `eqn`: EQ 0, or a
/// completion EQ, which interrupts on its own vector (no `INTR_CAUSE` bit)
/// when armed. A completion EQ whose memory faults is a fatal error, as EQ
/// 0's is.
pub(crate) fn post_completion(dev: &mut Dev, eqn: u32, cqn: u32) {
    if eqn == 0 {
        return post(dev, EventType::Completion, cqn, 0);
    }
    let Some(ceq) = dev.objs.eqs.get_mut(eqn) else {
        return;
    };
    match write(&mut ceq.eq, &dev.iommu, &eqe(EventType::Completion, cqn, 0)) {
        Ok(interrupt) => {
            log::trace!("EQ {eqn}: completion event of CQ {cqn}");
            if interrupt {
                dev.irq.raise(ceq.eq.vector);
            }
        }
        Err(Unwritten::Full) => {
            log::warn!("EQ {eqn}: completion event of CQ {cqn} dropped: event queue full")
        }
        Err(Unwritten::Fault) => regs::fatal(dev, FatalSyndrome::EqDma),
    }
}

/// A completion EQ's `EQ_DB` on doorbell page `page`: consumer index
/// update and optional arm, as EQ 0's `EQ_DB` register.
pub(crate) fn arm_doorbell(dev: &mut Dev, page: u32, db: EqArmDoorbell) {
    let eqn = db.eqn();
    let Some(ceq) = dev.objs.eqs.get_mut(eqn) else {
        log::warn!("EQ_DB for unknown EQ {eqn} ignored");
        return;
    };
    if ceq.uar_page != page {
        log::warn!(
            "EQ_DB for EQ {eqn} on page {page}, not its page {}: ignored",
            ceq.uar_page
        );
        return;
    }
    let eq = &mut ceq.eq;
    eq.ci = db.ci() & ((1 << INDEX_BITS) - 1);
    if db.arm() {
        if ring_pending(eq.pi, eq.ci, INDEX_BITS) != 0 {
            dev.irq.raise(eq.vector);
        } else {
            eq.armed = true;
        }
    }
}

/// An `EQ_DB` write: consumer index update and optional arm. Arming while
/// events past the consumer index exist interrupts at once, so an event
/// written between the driver's last poll and its arm is not missed.
pub(crate) fn doorbell(dev: &mut Dev, v: u32) {
    if !dev.running() {
        log::warn!("EQ_DB {v:#x} ignored: device not running");
        return;
    }
    let Some(eq) = dev.eq.as_mut() else {
        log::warn!("EQ_DB {v:#x} ignored: no event queue");
        return;
    };
    let db = EqDoorbell::from_bits(le32::from_ne(v));
    eq.ci = db.ci();
    if db.arm() {
        if ring_pending(eq.pi, eq.ci, INDEX_BITS) != 0 {
            let vector = eq.vector;
            regs::raise_cause(dev, IntrCause::new().with_async_eq(true), vector);
        } else {
            eq.armed = true;
        }
    }
}

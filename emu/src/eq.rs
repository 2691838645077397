//! The asynchronous event queue (EQ 0): event writing, consumer index and
//! arming.

use std::ptr::NonNull;

use rnic_hw_regs::bar0::{EqDoorbell, FatalSyndrome, IntrCause};
use rnic_hw_regs::eqe::{Eqe, EqeWord, EventType, EQE_SIZE};
use rnic_hw_regs::{le32, owner_bit};
use rnic_queues::device::{ring_full, ring_pending, write_entry};

use crate::iommu::DmaRange;
use crate::regs;
use crate::state::State;

/// EQ and CQ indices are 24 bits wide.
const INDEX_BITS: u32 = 24;

/// EQ 0, configured through BAR 0.
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

/// Writes an event into EQ 0. A full EQ drops the event; an EQ whose memory
/// was unmapped is a fatal device error.
pub(crate) fn post(st: &mut State, ty: EventType, obj: u32, syndrome: u32) {
    let Some(eq) = st.eq.as_mut() else {
        log::debug!("event {ty:?} on {obj} dropped: no event queue");
        return;
    };
    if ring_full(eq.pi, eq.ci, eq.log_size as u32, INDEX_BITS) {
        log::warn!("event {ty:?} on {obj} dropped: event queue full");
        return;
    }
    let slot = (eq.pi & ((1 << eq.log_size) - 1)) as usize * EQE_SIZE;
    let Some(p) = eq.ring.at(&st.iommu, slot, EQE_SIZE) else {
        return regs::fatal(st, FatalSyndrome::EqDma);
    };
    let eqe = Eqe {
        word: EqeWord::new().with_event_type(ty.raw()),
        obj: le32::from_ne(obj),
        syndrome: le32::from_ne(syndrome),
        ..Eqe::default()
    };
    let owner = owner_bit(eq.pi, eq.log_size as u32);
    match NonNull::new(p.0) {
        // SAFETY: the slot is EQE_SIZE bytes inside a live mapping (translated
        // under the device lock); the ring base is page aligned, so the slot
        // is aligned for Eqe.
        Some(slot) if slot.as_ptr() as usize % align_of::<Eqe>() == 0 => unsafe {
            write_entry(slot, &eqe, owner)
        },
        _ => return regs::fatal(st, FatalSyndrome::EqDma),
    }
    log::debug!(
        "event {ty:?} obj {obj} syndrome {syndrome} at eq index {}",
        eq.pi
    );
    eq.pi = eq.pi.wrapping_add(1);
    if eq.armed {
        eq.armed = false;
        let vector = eq.vector;
        regs::raise_cause(st, IntrCause::new().with_async_eq(true), vector);
    }
}

/// An `EQ_DB` write: consumer index update and optional arm. Arming while
/// events past the consumer index exist interrupts at once, so an event
/// written between the driver's last poll and its arm is not missed.
pub(crate) fn doorbell(st: &mut State, v: u32) {
    if !st.running() {
        log::warn!("EQ_DB {v:#x} ignored: device not running");
        return;
    }
    let Some(eq) = st.eq.as_mut() else {
        log::warn!("EQ_DB {v:#x} ignored: no event queue");
        return;
    };
    let db = EqDoorbell::from_bits(le32::from_ne(v));
    eq.ci = db.ci();
    if db.arm() {
        if ring_pending(eq.pi, eq.ci, INDEX_BITS) != 0 {
            let vector = eq.vector;
            regs::raise_cause(st, IntrCause::new().with_async_eq(true), vector);
        } else {
            eq.armed = true;
        }
    }
}

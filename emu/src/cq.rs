//! Completion queues: CQE writing, overrun detection, arming and completion
//! events.

use std::ptr::NonNull;

use rnic_hw_regs::cqe::{Cqe, Syndrome, CQE_SIZE};
use rnic_hw_regs::eqe::EventType;
use rnic_hw_regs::le32;
use rnic_hw_regs::uar::{CqArmCmd, CqDoorbell};
use rnic_queues::device::{ring_full, ring_pending, write_entry};
use rnic_queues::owner_bit;
use rnic_verbs::WcStatus;

use crate::eq;
use crate::state::Dev;

/// CQ indices are 24 bits wide.
const INDEX_BITS: u32 = 24;

/// Why a CQE could not be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct CqFailed;

/// Writes `cqe` into CQ `cqn`.
///
/// Fails if the CQ does not exist, is in the error state, is full (overrun)
/// or its memory is unmapped; the last two put the CQ in the error state and
/// report a `CqError` event. The caller moves the completing QP to the error
/// state.
pub(crate) fn write(dev: &mut Dev, cqn: u32, cqe: &Cqe) -> Result<(), CqFailed> {
    let Some(cq) = dev.objs.cqs.get_mut(cqn) else {
        return Err(CqFailed);
    };
    if cq.error {
        return Err(CqFailed);
    }
    let log = cq.log_size as u32;
    // The consumer index last read from the doorbell record is a lower bound
    // of the driver's: the record is read again (with its acquire fence)
    // only when the ring looks full from it, not once per CQE.
    if ring_full(cq.pi, cq.ci_seen, log, INDEX_BITS) {
        let Some(ci) = cq.dbrec.read_index(&dev.iommu, 0) else {
            log::warn!("CQ {cqn}: doorbell record unmapped; CQ in error");
            return Err(fail(dev, cqn));
        };
        cq.ci_seen = ci;
        if ring_full(cq.pi, ci, log, INDEX_BITS) {
            log::warn!("CQ {cqn}: overrun (pi {}, ci {ci}); CQ in error", cq.pi);
            return Err(fail(dev, cqn));
        }
    }
    let slot = (cq.pi & ((1 << log) - 1)) as usize * CQE_SIZE;
    let ptr = cq
        .buf
        .at(&dev.iommu, slot, CQE_SIZE)
        .and_then(|p| NonNull::new(p.0));
    let ptr = match ptr {
        Some(p) if p.as_ptr() as usize % align_of::<Cqe>() == 0 => p,
        _ => {
            log::warn!("CQ {cqn}: CQE write faulted; CQ in error");
            return Err(fail(dev, cqn));
        }
    };
    // SAFETY: the slot is CQE_SIZE bytes inside a live mapping (translated
    // under the device lock) and aligned for Cqe (checked above).
    unsafe { write_entry(ptr, cqe, owner_bit(cq.pi, log)) };
    let index = cq.pi;
    cq.pi = cq.pi.wrapping_add(1);
    let notable = cqe.flags.solicited() || cqe.status != WcStatus::Success.raw();
    if notable {
        cq.last_solicited = Some(index);
    }
    let fire = match cq.arm {
        Some(CqArmCmd::Next) => true,
        Some(CqArmCmd::Solicited) => notable,
        None => false,
    };
    if let Some(eqn) = cq.eqn.filter(|_| fire) {
        cq.arm = None;
        eq::post_completion(dev, eqn, cqn);
    }
    Ok(())
}

fn fail(dev: &mut Dev, cqn: u32) -> CqFailed {
    if let Some(cq) = dev.objs.cqs.get_mut(cqn) {
        cq.error = true;
        cq.arm = None;
    }
    eq::post(dev, EventType::CqError, cqn, Syndrome::CqError as u32);
    CqFailed
}

/// A `CQ_DB` write on doorbell page `page`: arm CQ `cqn` for one
/// completion event. The arm sequence number is accepted and not checked:
/// doorbells reach the model in order, so an arm is never stale.
pub(crate) fn arm(dev: &mut Dev, page: u32, db: CqDoorbell) {
    let cqn = db.cqn();
    let Some(cq) = dev.objs.cqs.get_mut(cqn) else {
        log::warn!("CQ_DB for unknown CQ {cqn} ignored");
        return;
    };
    if cq.uar_page != page {
        log::warn!(
            "CQ_DB for CQ {cqn} on page {page}, not its page {}: ignored",
            cq.uar_page
        );
        return;
    }
    let cmd = match db.cmd() {
        0 => CqArmCmd::Next,
        1 => CqArmCmd::Solicited,
        other => {
            log::warn!("CQ_DB for CQ {cqn} with unknown command {other} ignored");
            return;
        }
    };
    let Some(eqn) = cq.eqn.filter(|_| !cq.error) else {
        return;
    };
    // CQEs already written at or past the driver's consumer index count.
    let unpolled = ring_pending(cq.pi, db.ci(), INDEX_BITS);
    let fire = match cmd {
        CqArmCmd::Next => unpolled != 0,
        CqArmCmd::Solicited => cq
            .last_solicited
            .is_some_and(|s| ring_pending(cq.pi, s, INDEX_BITS) <= unpolled),
    };
    if fire {
        cq.arm = None;
        eq::post_completion(dev, eqn, cqn);
    } else {
        cq.arm = Some(cmd);
    }
}

/// Builds a CQE with the fields every completion has.
pub(crate) fn cqe(
    wr_id: u64,
    qpn: u32,
    wqe_counter: u32,
    opcode: u8,
    status: WcStatus,
    syndrome: u32,
) -> Cqe {
    Cqe {
        wr_id: rnic_hw_regs::le64::from_ne(wr_id),
        qpn: le32::from_ne(qpn),
        wqe_counter: rnic_hw_regs::le16::from_ne(wqe_counter as u16),
        opcode,
        status: status.raw(),
        vendor_err: le32::from_ne(syndrome),
        ..Cqe::default()
    }
}

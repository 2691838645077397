//! Shared receive queues on the data path: taking a WQE for a QP, the
//! limit event, the SRQ doorbell, and what a QP on an SRQ gives back when
//! it leaves service.
//!
//! An SRQ's WQEs are a list through its ring's slots: each names the slot
//! of the next. A QP on an SRQ takes the WQE at the head of the list when
//! a message needs one (while fewer are taken than the doorbell record
//! counts posted), and the head moves to the slot it names at once: the
//! WQE is the QP's from then on (other QPs take the next ones), held until
//! its message completes. Its completion carries its slot plus one in
//! `wqe_counter`, and software may reuse the slot as soon as it has it,
//! whatever WQEs posted before it are still held.

use rnic_hw_regs::cqe::Syndrome;
use rnic_hw_regs::eqe::EventType;
use rnic_hw_regs::uar::WqDoorbell;
use rnic_queues::device::ring_pending;
use rnic_verbs::{WcOpcode, WcStatus};

use crate::iommu::Iommu;
use crate::objects::Qp;
use crate::objects::Srq;
use crate::qp::WQ_INDEX_BITS;
use crate::state::Dev;
use crate::wqe::{self, RecvError, RecvWqe};
use crate::{cq, eq};

/// Why an SRQ gave no WQE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TakeError {
    /// None is posted: receiver not ready.
    Empty,
    /// The SRQ is in error (its doorbell record or ring failed; the
    /// syndrome says how).
    Broken(Syndrome),
    /// The WQE at the consumer index is malformed; it is taken (held by
    /// the QP) so that its completion reports the error.
    Malformed { wr_id: u64, index: u32 },
}

/// Reads the SRQ's producer index from its doorbell record and returns
/// how many WQEs it publishes past the consumer index; `Err` if the
/// record is unmapped or more than the ring size ahead (as for a QP's
/// record, [`crate::qp::published`]).
fn published(srq: &mut Srq, iommu: &Iommu) -> Result<u32, Syndrome> {
    let Some(pi) = srq.dbrec.read_index(iommu, 0) else {
        return Err(Syndrome::DmaFault);
    };
    let pending = ring_pending(pi, srq.ci, WQ_INDEX_BITS);
    if pending > 1 << srq.log_wqes {
        return Err(Syndrome::BadWqe);
    }
    srq.pi = srq.ci.wrapping_add(pending);
    Ok(pending)
}

/// WQEs known to be posted and not yet taken.
fn known(srq: &Srq) -> u32 {
    ring_pending(srq.pi, srq.ci, WQ_INDEX_BITS)
}

/// Puts SRQ `srqn` in error with an `SrqErr` event (once).
fn fail(dev: &mut Dev, srqn: u32, syn: Syndrome) {
    let Some(srq) = dev.objs.srqs.get_mut(srqn) else {
        return;
    };
    if !srq.error {
        log::warn!("SRQ {srqn}: {syn:?}: no more WQEs are given out");
        srq.error = true;
        eq::post(dev, EventType::SrqErr, srqn, syn as u32);
    }
}

/// Takes the WQE at the head of SRQ `srqn`'s list into `w` and returns its
/// slot. The doorbell record is read only once the WQEs known from it
/// are taken, and again when the limit may have been crossed: fewer WQEs
/// left than the armed limit raises `SrqLimitReached` and disarms it.
pub(crate) fn take(dev: &mut Dev, srqn: u32, w: &mut RecvWqe) -> Result<u32, TakeError> {
    let max_sge = dev.cfg.max_sge;
    let Some(srq) = dev.objs.srqs.get_mut(srqn) else {
        return Err(TakeError::Broken(Syndrome::BadWqe));
    };
    if srq.error {
        return Err(TakeError::Broken(Syndrome::BadWqe));
    }
    if known(srq) == 0 {
        match published(srq, &dev.iommu) {
            Ok(0) => return Err(TakeError::Empty),
            Ok(_) => {}
            Err(syn) => {
                fail(dev, srqn, syn);
                return Err(TakeError::Broken(syn));
            }
        }
    }
    let mask = (1u32 << srq.log_wqes) - 1;
    let slot = srq.next_slot & mask;
    let r = wqe::fetch_recv(w, &mut srq.buf, &dev.iommu, slot, srq.log_stride, max_sge);
    if let Err(RecvError::Fault) = r {
        fail(dev, srqn, Syndrome::DmaFault);
        return Err(TakeError::Broken(Syndrome::DmaFault));
    }
    // The list goes on at the slot this WQE names (a malformed WQE's
    // header was read too).
    srq.next_slot = w.next & mask;
    srq.ci = srq.ci.wrapping_add(1);
    let index = slot;
    if srq.limit > 0 && known(srq) < srq.limit {
        // The record may publish more than was known.
        let left = published(srq, &dev.iommu);
        if let Ok(left) = left {
            if left < srq.limit {
                log::debug!(
                    "SRQ {srqn}: {left} WQEs left, below the limit {}",
                    srq.limit
                );
                srq.limit = 0;
                eq::post(dev, EventType::SrqLimitReached, srqn, 0);
            }
        } else if let Err(syn) = left {
            // The WQE taken stays good; the next take finds the error.
            fail(dev, srqn, syn);
        }
    }
    match r {
        Err(RecvError::Malformed(wr_id)) => Err(TakeError::Malformed { wr_id, index }),
        _ => Ok(index),
    }
}

/// An SRQ doorbell on page `page`: the producer index is checked at once
/// (a malformed or unmapped record puts the SRQ in error). Requesters that
/// met receiver-not-ready retry on their own RNR timers, as on the wire.
pub(crate) fn doorbell(dev: &mut Dev, page: u32, db: WqDoorbell) {
    let srqn = db.qpn();
    let Some(srq) = dev.objs.srqs.get_mut(srqn) else {
        log::warn!("SRQ doorbell for unknown SRQ {srqn} ignored");
        return;
    };
    if srq.uar_page != page || srq.error {
        log::warn!("SRQ doorbell for SRQ {srqn} on page {page} ignored");
        return;
    }
    if let Err(syn) = published(srq, &dev.iommu) {
        fail(dev, srqn, syn);
    }
}

/// Completes the SRQ WQE `qp` holds, if any, with `WR_FLUSH_ERR`
/// (`REM_ABORT_ERR` if a message was filling it): the QP leaves service
/// (error, reset or destruction) and the WQE, taken from the SRQ, goes
/// back to software through its completion.
pub(crate) fn flush_held(qp: &mut Qp, dev: &mut Dev) {
    let (status, syndrome) = if crate::qp::receiving(qp) {
        crate::qp::ABORTED
    } else {
        (WcStatus::WrFlushErr, Syndrome::Flushed)
    };
    let Some(index) = qp.resp.srq_held.take() else {
        return;
    };
    qp.resp.msg = None;
    let wr_id = qp.resp.rwqe.as_ref().map_or(0, |w| w.wr_id);
    let c = cq::cqe(
        wr_id,
        qp.qpn,
        index.wrapping_add(1),
        WcOpcode::Recv.raw(),
        status,
        syndrome as u32,
    );
    let cqn = qp.recv_cqn;
    let _ = cq::write(dev, cqn, &c);
}

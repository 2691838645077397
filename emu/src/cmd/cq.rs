//! CREATE_CQ, DESTROY_CQ and RESIZE_CQ.

use rnic_hw_regs::cmd::*;
use rnic_hw_regs::cqe::{Cqe, CQE_SIZE};
use rnic_hw_regs::{le32, PAGE_SIZE};

use super::{check, fail, off, CmdResult};
use crate::iommu::{from_bytes, to_bytes, DmaRange};
use crate::objects::Cq;
use crate::state::State;

pub(super) fn create(
    st: &mut State,
    uid: u32,
    input: &[u8; CMD_IN_SIZE],
    out: &mut [u8; CMD_OUT_SIZE],
) -> CmdResult {
    let i: CreateCqIn = from_bytes(input);
    let log = i.log_size.to_ne();
    check(
        log <= st.dev.cfg.log_max_cqe as u32,
        CmdStatus::BadParam,
        off!(CreateCqIn, log_size),
    )?;
    let page = i.uar_page.to_ne();
    check(
        st.dev.page_usable(page, uid),
        CmdStatus::BadParam,
        off!(CreateCqIn, uar_page),
    )?;
    let eqn = Some(i.eqn.to_ne()).filter(|&n| n != NONE);
    check(
        eqn.map_or(true, |n| n == 0 || st.dev.objs.eqs.owned(n, uid)),
        CmdStatus::BadResource,
        off!(CreateCqIn, eqn),
    )?;
    check(
        i.reserved.to_ne() == 0,
        CmdStatus::BadParam,
        off!(CreateCqIn, reserved),
    )?;
    let buf_iova = i.buf_iova.to_ne();
    check(
        buf_iova % PAGE_SIZE as u64 == 0,
        CmdStatus::BadParam,
        off!(CreateCqIn, buf_iova),
    )?;
    let buf = DmaRange::new(&st.dev.iommu, buf_iova, CQE_SIZE << log)
        .ok_or(fail(CmdStatus::BadDma, off!(CreateCqIn, buf_iova)))?;
    let dbrec_iova = i.dbrec_iova.to_ne();
    check(
        dbrec_iova % 8 == 0,
        CmdStatus::BadParam,
        off!(CreateCqIn, dbrec_iova),
    )?;
    let dbrec = DmaRange::new(&st.dev.iommu, dbrec_iova, 8)
        .ok_or(fail(CmdStatus::BadDma, off!(CreateCqIn, dbrec_iova)))?;
    let cqn = st
        .dev
        .objs
        .cqs
        .free_number()
        .ok_or(fail(CmdStatus::NoResources, 0))?;
    st.dev.objs.cqs.insert(
        cqn,
        uid,
        Cq {
            log_size: log as u8,
            uar_page: page,
            eqn,
            buf,
            dbrec,
            pi: 0,
            ci_seen: 0,
            error: false,
            arm: None,
            last_solicited: None,
            users: 0,
        },
    );
    if let Some(ceq) = eqn.and_then(|n| st.dev.objs.eqs.get_mut(n)) {
        ceq.users += 1;
    }
    log::debug!("CQ {cqn}: 2^{log} CQEs at {buf_iova:#x}, events to EQ {eqn:?}");
    to_bytes(
        &CreateCqOut {
            cqn: le32::from_ne(cqn),
        },
        out,
    );
    Ok(())
}

pub(super) fn destroy(st: &mut State, uid: u32, input: &[u8; CMD_IN_SIZE]) -> CmdResult {
    let i: ObjIn = from_bytes(input);
    let cqn = i.id.to_ne();
    let cq = st
        .dev
        .objs
        .cqs
        .get(cqn)
        .filter(|_| st.dev.objs.cqs.owned(cqn, uid))
        .ok_or(fail(CmdStatus::BadResource, off!(ObjIn, id)))?;
    check(cq.users == 0, CmdStatus::Busy, off!(ObjIn, id))?;
    if let Some(cq) = st.dev.objs.cqs.remove(cqn) {
        if let Some(ceq) = cq.eqn.and_then(|n| st.dev.objs.eqs.get_mut(n)) {
            ceq.users -= 1;
        }
    }
    Ok(())
}

/// RESIZE_CQ: the CQ moves to a new ring and doorbell record. The CQEs not
/// yet consumed (from the consumer index in the old record) move to their
/// indices in the new ring, with the owner bits of the new size; every
/// other slot of it reads as not yet written for the next index it will
/// hold.
pub(super) fn resize(st: &mut State, uid: u32, input: &[u8; CMD_IN_SIZE]) -> CmdResult {
    use rnic_queues::device::{ring_pending, write_entry};
    use rnic_queues::owner_bit;
    use CmdStatus::{BadDma, BadParam};
    let i: ResizeCqIn = from_bytes(input);
    let cqn = i.cqn.to_ne();
    check(
        st.dev.objs.cqs.owned(cqn, uid),
        CmdStatus::BadResource,
        off!(ResizeCqIn, cqn),
    )?;
    let log = i.log_size.to_ne();
    check(
        log <= st.dev.cfg.log_max_cqe as u32,
        BadParam,
        off!(ResizeCqIn, log_size),
    )?;
    let buf_iova = i.buf_iova.to_ne();
    check(
        buf_iova % PAGE_SIZE as u64 == 0,
        BadParam,
        off!(ResizeCqIn, buf_iova),
    )?;
    let mut buf = DmaRange::new(&st.dev.iommu, buf_iova, CQE_SIZE << log)
        .ok_or(fail(BadDma, off!(ResizeCqIn, buf_iova)))?;
    let dbrec_iova = i.dbrec_iova.to_ne();
    check(dbrec_iova % 8 == 0, BadParam, off!(ResizeCqIn, dbrec_iova))?;
    let dbrec = DmaRange::new(&st.dev.iommu, dbrec_iova, 8)
        .ok_or(fail(BadDma, off!(ResizeCqIn, dbrec_iova)))?;
    let Some(cq) = st.dev.objs.cqs.get_mut(cqn) else {
        return Err(fail(CmdStatus::Internal, 0));
    };
    let ci = cq
        .dbrec
        .read_index(&st.dev.iommu, 0)
        .ok_or(fail(BadDma, off!(ResizeCqIn, cqn)))?;
    let unpolled = ring_pending(cq.pi, ci, 24);
    check(
        unpolled <= 1 << cq.log_size && unpolled <= 1 << log,
        BadParam,
        off!(ResizeCqIn, log_size),
    )?;
    let (old_mask, new_mask) = ((1u32 << cq.log_size) - 1, (1u32 << log) - 1);
    for k in 0..=new_mask {
        let idx = ci.wrapping_add(k);
        let entry = if k < unpolled {
            let e: Option<Cqe> = cq
                .buf
                .read(&st.dev.iommu, (idx & old_mask) as usize * CQE_SIZE);
            e.ok_or(fail(BadDma, off!(ResizeCqIn, cqn)))?
        } else {
            Cqe::default()
        };
        // A slot past the unconsumed ones holds the wrong owner bit for
        // its next index: it reads as not yet written.
        let owner = owner_bit(idx, log) == (k < unpolled);
        let at = (idx & new_mask) as usize * CQE_SIZE;
        let slot = buf
            .at(&st.dev.iommu, at, CQE_SIZE)
            .and_then(|p| std::ptr::NonNull::new(p.0))
            .filter(|p| p.as_ptr() as usize % align_of::<Cqe>() == 0)
            .ok_or(fail(BadDma, off!(ResizeCqIn, buf_iova)))?;
        // SAFETY: CQE_SIZE bytes inside a live mapping (translated under
        // the device lock), aligned for Cqe (checked); the driver does not
        // read the new ring before the command completes.
        unsafe { write_entry(slot, &entry, owner) };
    }
    cq.buf = buf;
    cq.dbrec = dbrec;
    cq.log_size = log as u8;
    cq.ci_seen = ci;
    log::debug!("CQ {cqn}: resized to 2^{log} CQEs, {unpolled} moved");
    Ok(())
}

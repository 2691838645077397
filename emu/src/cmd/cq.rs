//! CREATE_CQ and DESTROY_CQ.

use rnic_hw_regs::cmd::*;
use rnic_hw_regs::cqe::CQE_SIZE;
use rnic_hw_regs::{le32, PAGE_SIZE};

use super::{check, fail, off, CmdResult};
use crate::iommu::{from_bytes, to_bytes, DmaRange};
use crate::objects::Cq;
use crate::state::State;

pub(super) fn create(
    st: &mut State,
    input: &[u8; CMD_IN_SIZE],
    out: &mut [u8; CMD_OUT_SIZE],
) -> CmdResult {
    let i: CreateCqIn = from_bytes(input);
    let log = i.log_size.to_ne();
    check(
        log <= st.cfg.log_max_cqe as u32,
        CmdStatus::BadParam,
        off!(CreateCqIn, log_size),
    )?;
    let page = i.uar_page.to_ne();
    check(
        page < st.cfg.uar_pages,
        CmdStatus::BadParam,
        off!(CreateCqIn, uar_page),
    )?;
    let eqn = Some(i.eqn.to_ne()).filter(|&n| n != NONE);
    check(
        eqn.map_or(true, |n| n == 0 || st.objs.eqs.get(n).is_some()),
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
    let buf = DmaRange::new(&st.iommu, buf_iova, CQE_SIZE << log)
        .ok_or(fail(CmdStatus::BadDma, off!(CreateCqIn, buf_iova)))?;
    let dbrec_iova = i.dbrec_iova.to_ne();
    check(
        dbrec_iova % 8 == 0,
        CmdStatus::BadParam,
        off!(CreateCqIn, dbrec_iova),
    )?;
    let dbrec = DmaRange::new(&st.iommu, dbrec_iova, 8)
        .ok_or(fail(CmdStatus::BadDma, off!(CreateCqIn, dbrec_iova)))?;
    let cqn = st
        .objs
        .cqs
        .free_number()
        .ok_or(fail(CmdStatus::NoResources, 0))?;
    st.objs.cqs.insert(
        cqn,
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
    if let Some(ceq) = eqn.and_then(|n| st.objs.eqs.get_mut(n)) {
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

pub(super) fn destroy(st: &mut State, input: &[u8; CMD_IN_SIZE]) -> CmdResult {
    let i: ObjIn = from_bytes(input);
    let cqn = i.id.to_ne();
    let cq = st
        .objs
        .cqs
        .get(cqn)
        .ok_or(fail(CmdStatus::BadResource, off!(ObjIn, id)))?;
    check(cq.users == 0, CmdStatus::Busy, off!(ObjIn, id))?;
    if let Some(cq) = st.objs.cqs.remove(cqn) {
        if let Some(ceq) = cq.eqn.and_then(|n| st.objs.eqs.get_mut(n)) {
            ceq.users -= 1;
        }
    }
    Ok(())
}

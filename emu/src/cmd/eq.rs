//! CREATE_EQ and DESTROY_EQ: completion event queues.

use rnic_hw_regs::cmd::*;
use rnic_hw_regs::eqe::EQE_SIZE;
use rnic_hw_regs::{le32, PAGE_SIZE};

use super::{check, fail, off, CmdResult};
use crate::eq::EventQueue;
use crate::iommu::{from_bytes, to_bytes, DmaRange};
use crate::objects::CompEq;
use crate::state::State;

pub(super) fn create(
    st: &mut State,
    uid: u32,
    input: &[u8; CMD_IN_SIZE],
    out: &mut [u8; CMD_OUT_SIZE],
) -> CmdResult {
    use CmdStatus::{BadDma, BadParam};
    let i: CreateEqIn = from_bytes(input);
    let c = &st.dev.cfg;
    let log = i.log_size.to_ne();
    check(
        log <= c.log_max_eq as u32,
        BadParam,
        off!(CreateEqIn, log_size),
    )?;
    let vector = i.vector.to_ne();
    check(
        vector < c.msix_vectors as u32,
        BadParam,
        off!(CreateEqIn, vector),
    )?;
    let page = i.uar_page.to_ne();
    check(
        st.dev.page_usable(page, uid),
        BadParam,
        off!(CreateEqIn, uar_page),
    )?;
    check(
        i.reserved.to_ne() == 0,
        BadParam,
        off!(CreateEqIn, reserved),
    )?;
    let iova = i.buf_iova.to_ne();
    check(
        iova % PAGE_SIZE as u64 == 0,
        BadParam,
        off!(CreateEqIn, buf_iova),
    )?;
    let ring = DmaRange::new(&st.dev.iommu, iova, EQE_SIZE << log)
        .ok_or(fail(BadDma, off!(CreateEqIn, buf_iova)))?;
    let eqn = st
        .dev
        .objs
        .eqs
        .free_number()
        .ok_or(fail(CmdStatus::NoResources, 0))?;
    st.dev.objs.eqs.insert(
        eqn,
        uid,
        CompEq {
            eq: EventQueue::new(ring, log as u8, vector as u16),
            uar_page: page,
            users: 0,
        },
    );
    log::debug!("EQ {eqn}: 2^{log} EQEs, vector {vector}");
    to_bytes(
        &CreateEqOut {
            eqn: le32::from_ne(eqn),
        },
        out,
    );
    Ok(())
}

pub(super) fn destroy(st: &mut State, uid: u32, input: &[u8; CMD_IN_SIZE]) -> CmdResult {
    let i: ObjIn = from_bytes(input);
    let eqn = i.id.to_ne();
    let ceq = st
        .dev
        .objs
        .eqs
        .get(eqn)
        .filter(|_| st.dev.objs.eqs.owned(eqn, uid))
        .ok_or(fail(CmdStatus::BadResource, off!(ObjIn, id)))?;
    check(ceq.users == 0, CmdStatus::Busy, off!(ObjIn, id))?;
    st.dev.objs.eqs.remove(eqn);
    Ok(())
}

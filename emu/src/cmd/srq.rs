//! CREATE_SRQ, DESTROY_SRQ, MODIFY_SRQ and QUERY_SRQ.

use rnic_hw_regs::cmd::*;
use rnic_hw_regs::wqe::{MAX_LOG_RQ_STRIDE, MIN_LOG_RQ_STRIDE, SEG_SIZE};
use rnic_hw_regs::{le32, PAGE_SIZE};
use rnic_queues::device::ring_pending;

use super::{check, fail, off, CmdResult};
use crate::iommu::{from_bytes, to_bytes, DmaRange};
use crate::objects::Srq;
use crate::qp::WQ_INDEX_BITS;
use crate::state::State;

pub(super) fn create(
    st: &mut State,
    uid: u32,
    input: &[u8; CMD_IN_SIZE],
    out: &mut [u8; CMD_OUT_SIZE],
) -> CmdResult {
    use CmdStatus::{BadDma, BadParam, BadResource};
    let i: CreateSrqIn = from_bytes(input);
    let c = &st.dev.cfg;
    let pdn = i.pdn.to_ne();
    check(
        st.dev.objs.pds.owned(pdn, uid),
        BadResource,
        off!(CreateSrqIn, pdn),
    )?;
    let log_wqes = i.log_wqes.to_ne();
    check(
        log_wqes <= c.log_max_wq as u32,
        BadParam,
        off!(CreateSrqIn, log_wqes),
    )?;
    let log_stride = i.log_stride.to_ne();
    check(
        (MIN_LOG_RQ_STRIDE as u32..=MAX_LOG_RQ_STRIDE as u32).contains(&log_stride),
        BadParam,
        off!(CreateSrqIn, log_stride),
    )?;
    let limit = i.srq_limit.to_ne();
    check(
        limit <= 1 << log_wqes,
        BadParam,
        off!(CreateSrqIn, srq_limit),
    )?;
    let page = i.uar_page.to_ne();
    check(
        st.dev.page_usable(page, uid),
        BadParam,
        off!(CreateSrqIn, uar_page),
    )?;
    check(
        i.reserved.to_ne() == 0,
        BadParam,
        off!(CreateSrqIn, reserved),
    )?;
    let buf = ring(
        st,
        i.buf_iova.to_ne(),
        log_wqes,
        log_stride,
        off!(CreateSrqIn, buf_iova),
    )?;
    let dbrec_iova = i.dbrec_iova.to_ne();
    check(dbrec_iova % 4 == 0, BadParam, off!(CreateSrqIn, dbrec_iova))?;
    let dbrec = DmaRange::new(&st.dev.iommu, dbrec_iova, 4)
        .ok_or(fail(BadDma, off!(CreateSrqIn, dbrec_iova)))?;
    let srqn = st
        .dev
        .objs
        .srqs
        .free_number()
        .ok_or(fail(CmdStatus::NoResources, 0))?;
    st.dev.objs.srqs.insert(
        srqn,
        uid,
        Srq {
            pdn,
            log_wqes: log_wqes as u8,
            log_stride: log_stride as u8,
            uar_page: page,
            buf,
            dbrec,
            ci: 0,
            next_slot: 0,
            pi: 0,
            limit,
            error: false,
            users: 0,
        },
    );
    if let Some(pd) = st.dev.objs.pds.get_mut(pdn) {
        pd.users += 1;
    }
    log::debug!("SRQ {srqn}: pd {pdn}, 2^{log_wqes} WQEs of 2^{log_stride} bytes");
    to_bytes(
        &CreateSrqOut {
            srqn: le32::from_ne(srqn),
        },
        out,
    );
    Ok(())
}

/// The ring of `2^log_wqes` WQEs of `2^log_stride` bytes at `iova`.
fn ring(
    st: &State,
    iova: u64,
    log_wqes: u32,
    log_stride: u32,
    field: usize,
) -> Result<DmaRange, super::CmdError> {
    check(iova % PAGE_SIZE as u64 == 0, CmdStatus::BadParam, field)?;
    DmaRange::new(&st.dev.iommu, iova, 1 << (log_wqes + log_stride))
        .ok_or(fail(CmdStatus::BadDma, field))
}

pub(super) fn destroy(st: &mut State, uid: u32, input: &[u8; CMD_IN_SIZE]) -> CmdResult {
    let i: ObjIn = from_bytes(input);
    let srqn = i.id.to_ne();
    let srq = st
        .dev
        .objs
        .srqs
        .get(srqn)
        .filter(|_| st.dev.objs.srqs.owned(srqn, uid))
        .ok_or(fail(CmdStatus::BadResource, off!(ObjIn, id)))?;
    check(srq.users == 0, CmdStatus::Busy, off!(ObjIn, id))?;
    if let Some(srq) = st.dev.objs.srqs.remove(srqn) {
        if let Some(pd) = st.dev.objs.pds.get_mut(srq.pdn) {
            pd.users -= 1;
        }
    }
    Ok(())
}

/// MODIFY_SRQ: a new limit arms the limit event (0 disarms it); a resize
/// moves the SRQ to a new ring, which holds the WQEs not yet taken at the
/// same indices, and must hold all of them.
pub(super) fn modify(st: &mut State, uid: u32, input: &[u8; CMD_IN_SIZE]) -> CmdResult {
    use CmdStatus::BadParam;
    let i: ModifySrqIn = from_bytes(input);
    let srqn = i.srqn.to_ne();
    check(
        st.dev.objs.srqs.owned(srqn, uid),
        CmdStatus::BadResource,
        off!(ModifySrqIn, srqn),
    )?;
    let mask = i.attr_mask.to_ne();
    check(
        mask != 0 && mask & !(srq_attr::MAX_WR | srq_attr::LIMIT) == 0,
        BadParam,
        off!(ModifySrqIn, attr_mask),
    )?;
    let log_max_wq = st.dev.cfg.log_max_wq as u32;
    let Some(srq) = st.dev.objs.srqs.get_mut(srqn) else {
        return Err(fail(CmdStatus::Internal, 0));
    };
    let mut log_wqes = srq.log_wqes as u32;
    let mut new_buf = None;
    if mask & srq_attr::MAX_WR != 0 {
        log_wqes = i.log_wqes.to_ne();
        check(
            log_wqes <= log_max_wq,
            BadParam,
            off!(ModifySrqIn, log_wqes),
        )?;
        // Every WQE posted and not yet taken must fit the new ring: the
        // record is read now, so none published is left behind.
        let pi = srq.dbrec.read_index(&st.dev.iommu, 0).unwrap_or(srq.pi);
        let mut posted = ring_pending(pi, srq.ci, WQ_INDEX_BITS);
        if posted > 1 << srq.log_wqes {
            posted = ring_pending(srq.pi, srq.ci, WQ_INDEX_BITS);
        }
        check(
            posted <= 1 << log_wqes,
            BadParam,
            off!(ModifySrqIn, log_wqes),
        )?;
        let log_stride = srq.log_stride as u32;
        new_buf = Some(ring(
            st,
            i.buf_iova.to_ne(),
            log_wqes,
            log_stride,
            off!(ModifySrqIn, buf_iova),
        )?);
    }
    let limit = i.srq_limit.to_ne();
    if mask & srq_attr::LIMIT != 0 {
        check(
            limit <= 1 << log_wqes,
            BadParam,
            off!(ModifySrqIn, srq_limit),
        )?;
    }
    let Some(srq) = st.dev.objs.srqs.get_mut(srqn) else {
        return Err(fail(CmdStatus::Internal, 0));
    };
    if let Some(buf) = new_buf {
        srq.buf = buf;
        srq.log_wqes = log_wqes as u8;
        log::debug!("SRQ {srqn}: resized to 2^{log_wqes} WQEs");
    }
    if mask & srq_attr::LIMIT != 0 {
        srq.limit = limit;
    }
    Ok(())
}

pub(super) fn query(
    st: &mut State,
    uid: u32,
    input: &[u8; CMD_IN_SIZE],
    out: &mut [u8; CMD_OUT_SIZE],
) -> CmdResult {
    let i: ObjIn = from_bytes(input);
    let srqn = i.id.to_ne();
    let srq = st
        .dev
        .objs
        .srqs
        .get(srqn)
        .filter(|_| st.dev.objs.srqs.owned(srqn, uid))
        .ok_or(fail(CmdStatus::BadResource, off!(ObjIn, id)))?;
    let stride_sges = (1u32 << srq.log_stride) / SEG_SIZE as u32 - 1;
    to_bytes(
        &QuerySrqOut {
            max_wr: le32::from_ne(1 << srq.log_wqes),
            max_sge: le32::from_ne(stride_sges.min(st.dev.cfg.max_sge as u32)),
            srq_limit: le32::from_ne(srq.limit),
            reserved: le32::from_ne(0),
        },
        out,
    );
    Ok(())
}

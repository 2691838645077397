//! CREATE_QP, MODIFY_QP, QUERY_QP and DESTROY_QP.

use rnic_hw_regs::cmd::*;
use rnic_hw_regs::wqe::{MAX_LOG_RQ_STRIDE, MIN_LOG_RQ_STRIDE, SEND_WQE_BB};
use rnic_hw_regs::{le32, PAGE_SIZE};
use rnic_verbs::{access, qp_attr, qp_transition, Mtu, QpState, QpType, GSI_QKEY};

use super::{check, fail, off, CmdError, CmdResult};
use crate::counters::Counters;
use crate::iommu::{from_bytes, to_bytes, DmaRange};
use crate::objects::Qp;
use crate::port::Path;
use crate::state::State;
use crate::transport::{QpTimers, ReqState, RespState};

/// QP numbers and PSNs are 24 bits wide.
const MAX_24: u32 = (1 << 24) - 1;

/// The general services QP's number (IBA 13.5.2).
pub(crate) const GSI_QPN: u32 = 1;

pub(super) fn create(
    st: &mut State,
    uid: u32,
    input: &[u8; CMD_IN_SIZE],
    out: &mut [u8; CMD_OUT_SIZE],
) -> CmdResult {
    use CmdStatus::{BadDma, BadParam, BadResource};
    let i: CreateQpIn = from_bytes(input);
    let c = &st.dev.cfg;
    let qp_type = QpType::from_raw(i.qp_type).ok_or(fail(BadParam, off!(CreateQpIn, qp_type)))?;
    check(i.sq_sig_all <= 1, BadParam, off!(CreateQpIn, sq_sig_all))?;
    // A QP on an SRQ has no receive queue: its fields are 0.
    let srqn = Some(i.srqn.to_ne()).filter(|&n| n != NONE);
    let stride = i.log_rq_stride;
    check(
        if srqn.is_some() {
            stride == 0
        } else {
            (MIN_LOG_RQ_STRIDE..=MAX_LOG_RQ_STRIDE).contains(&stride)
        },
        BadParam,
        off!(CreateQpIn, log_rq_stride),
    )?;
    check(i.reserved0 == 0, BadParam, off!(CreateQpIn, reserved0))?;
    let pdn = i.pdn.to_ne();
    check(
        st.dev.objs.pds.owned(pdn, uid),
        BadResource,
        off!(CreateQpIn, pdn),
    )?;
    let send_cqn = i.send_cqn.to_ne();
    check(
        st.dev.objs.cqs.owned(send_cqn, uid),
        BadResource,
        off!(CreateQpIn, send_cqn),
    )?;
    let recv_cqn = i.recv_cqn.to_ne();
    check(
        st.dev.objs.cqs.owned(recv_cqn, uid),
        BadResource,
        off!(CreateQpIn, recv_cqn),
    )?;
    let recv_pdn = match srqn {
        Some(n) => {
            let srq = st
                .dev
                .objs
                .srqs
                .get(n)
                .filter(|_| st.dev.objs.srqs.owned(n, uid));
            srq.ok_or(fail(BadResource, off!(CreateQpIn, srqn)))?.pdn
        }
        None => pdn,
    };
    let log_sq = i.log_sq_bbs.to_ne();
    check(
        log_sq <= c.log_max_wq as u32,
        BadParam,
        off!(CreateQpIn, log_sq_bbs),
    )?;
    let log_rq = i.log_rq_wqes.to_ne();
    check(
        log_rq <= c.log_max_wq as u32 && (srqn.is_none() || log_rq == 0),
        BadParam,
        off!(CreateQpIn, log_rq_wqes),
    )?;
    let max_inline = i.max_inline.to_ne();
    check(
        max_inline <= c.max_inline,
        BadParam,
        off!(CreateQpIn, max_inline),
    )?;
    let page = i.uar_page.to_ne();
    check(
        st.dev.page_usable(page, uid),
        BadParam,
        off!(CreateQpIn, uar_page),
    )?;
    check(
        i.reserved1.to_ne() == 0,
        BadParam,
        off!(CreateQpIn, reserved1),
    )?;
    let map = |iova: u64, len: usize, align: u64, field: usize| -> Result<DmaRange, CmdError> {
        check(iova % align == 0, BadParam, field)?;
        DmaRange::new(&st.dev.iommu, iova, len).ok_or(fail(BadDma, field))
    };
    let page_align = PAGE_SIZE as u64;
    let sq = map(
        i.sq_iova.to_ne(),
        SEND_WQE_BB << log_sq,
        page_align,
        off!(CreateQpIn, sq_iova),
    )?;
    let rq = if srqn.is_some() {
        check(i.rq_iova.to_ne() == 0, BadParam, off!(CreateQpIn, rq_iova))?;
        map(0, 0, page_align, off!(CreateQpIn, rq_iova))?
    } else {
        map(
            i.rq_iova.to_ne(),
            1 << (log_rq + stride as u32),
            page_align,
            off!(CreateQpIn, rq_iova),
        )?
    };
    let dbrec = map(i.dbrec_iova.to_ne(), 8, 8, off!(CreateQpIn, dbrec_iova))?;
    // The GSI QP is QPN 1, one per port; any other takes a free number.
    let qpn = if qp_type == QpType::Gsi {
        check(
            st.qps.get(GSI_QPN).is_none(),
            CmdStatus::Busy,
            off!(CreateQpIn, qp_type),
        )?;
        GSI_QPN
    } else {
        st.qps
            .free_number()
            .ok_or(fail(CmdStatus::NoResources, 0))?
    };
    let qp = Qp {
        qpn,
        qp_type,
        sqd_notify: false,
        drained: false,
        comm_est: false,
        pdn,
        srqn,
        recv_pdn,
        send_cqn,
        recv_cqn,
        sq_sig_all: i.sq_sig_all == 1,
        log_sq_bbs: log_sq as u8,
        log_rq_wqes: log_rq as u8,
        log_rq_stride: stride,
        max_inline,
        uar_page: page,
        sq,
        rq,
        dbrec,
        state: QpState::Reset,
        attrs: QpAttrs::default(),
        sq_ci: 0,
        sq_fetch: 0,
        bf: None,
        rq_ci: 0,
        sq_pi: 0,
        rq_pi: 0,
        kicked: false,
        path: None,
        req: ReqState::default(),
        resp: RespState::default(),
        timers: QpTimers::default(),
        counters: Counters::default(),
    };
    if qpn == GSI_QPN {
        st.qps.insert_reserved(qpn, uid, qp);
    } else {
        st.qps.insert(qpn, uid, qp);
    }
    adjust_users(st, pdn, send_cqn, recv_cqn, srqn, true);
    log::debug!(
        "QP {qpn} ({qp_type:?}): pd {pdn}, send CQ {send_cqn}, recv CQ {recv_cqn}, \
         2^{log_sq} BBs, {}",
        match srqn {
            Some(n) => format!("SRQ {n}"),
            None => format!("2^{log_rq} recvs"),
        }
    );
    to_bytes(
        &CreateQpOut {
            qpn: le32::from_ne(qpn),
        },
        out,
    );
    Ok(())
}

/// Counts a QP in (or out of) its PD, CQs and SRQ.
fn adjust_users(
    st: &mut State,
    pdn: u32,
    send_cqn: u32,
    recv_cqn: u32,
    srqn: Option<u32>,
    add: bool,
) {
    let step = |n: &mut u32| *n = if add { *n + 1 } else { *n - 1 };
    if let Some(pd) = st.dev.objs.pds.get_mut(pdn) {
        step(&mut pd.users);
    }
    if let Some(srq) = srqn.and_then(|n| st.dev.objs.srqs.get_mut(n)) {
        step(&mut srq.users);
    }
    for cqn in [send_cqn, recv_cqn] {
        if let Some(cq) = st.dev.objs.cqs.get_mut(cqn) {
            step(&mut cq.users);
        }
    }
}

/// Offset of a `QpAttrs` field in the MODIFY_QP input.
macro_rules! attr {
    ($f:ident) => {
        off!(ModifyQpIn, attrs) + off!(QpAttrs, $f)
    };
}

/// Offset of an `AddressVector` field in the MODIFY_QP input.
macro_rules! av {
    ($f:ident) => {
        attr!(ah) + off!(AddressVector, $f)
    };
}

/// Mask bits of attributes this device does not implement (alternate path
/// migration) or that are never valid in MODIFY_QP.
const UNSUPPORTED: u32 = qp_attr::ALT_PATH | qp_attr::PATH_MIG_STATE | qp_attr::CAP;
/// Every mask bit libibverbs defines up to `DEST_QPN`.
const KNOWN: u32 = (qp_attr::DEST_QPN << 1) - 1;

pub(super) fn modify(st: &mut State, uid: u32, input: &[u8; CMD_IN_SIZE]) -> CmdResult {
    use CmdStatus::{BadParam, BadState};
    let i: ModifyQpIn = from_bytes(input);
    let qpn = i.qpn.to_ne();
    let qp = st
        .qps
        .get(qpn)
        .filter(|_| st.qps.owned(qpn, uid))
        .ok_or(fail(CmdStatus::BadResource, off!(ModifyQpIn, qpn)))?;
    let mask = i.attr_mask.to_ne();
    let a = &i.attrs;
    check(
        mask & !KNOWN == 0 && mask & UNSUPPORTED == 0,
        BadParam,
        off!(ModifyQpIn, attr_mask),
    )?;
    let cur = qp.state;
    let next = if mask & qp_attr::STATE != 0 {
        QpState::from_raw(a.qp_state).ok_or(fail(BadParam, attr!(qp_state)))?
    } else {
        cur
    };
    if mask & qp_attr::CUR_STATE != 0 {
        check(
            QpState::from_raw(a.cur_qp_state) == Some(cur),
            BadState,
            attr!(cur_qp_state),
        )?;
    }
    let qp_type = qp.qp_type;
    let t = qp_transition(qp_type, cur, next).ok_or(fail(BadState, attr!(qp_state)))?;
    check(
        mask & t.required == t.required && mask & !(t.required | t.optional) == 0,
        BadParam,
        off!(ModifyQpIn, attr_mask),
    )?;
    let has = |bit: u32| mask & bit != 0;
    let max_rd = st.dev.cfg.max_rd_atomic;
    let values: [(u32, bool, usize); 17] = [
        // The GSI QP takes MADs only, whose Q_Key is the well-known one.
        (
            qp_attr::QKEY,
            qp_type != QpType::Gsi || a.qkey.to_ne() == GSI_QKEY,
            attr!(qkey),
        ),
        (
            qp_attr::ACCESS_FLAGS,
            a.qp_access_flags.to_ne() & !access::QP_SUPPORTED == 0,
            attr!(qp_access_flags),
        ),
        // One P_Key table entry.
        (
            qp_attr::PKEY_INDEX,
            a.pkey_index.to_ne() == 0,
            attr!(pkey_index),
        ),
        (qp_attr::PORT, a.port_num == 1, attr!(port_num)),
        (
            qp_attr::PATH_MTU,
            Mtu::from_raw(a.path_mtu).is_some(),
            attr!(path_mtu),
        ),
        (qp_attr::TIMEOUT, a.timeout <= 31, attr!(timeout)),
        (qp_attr::RETRY_CNT, a.retry_cnt <= 7, attr!(retry_cnt)),
        (qp_attr::RNR_RETRY, a.rnr_retry <= 7, attr!(rnr_retry)),
        (
            qp_attr::MIN_RNR_TIMER,
            a.min_rnr_timer <= 31,
            attr!(min_rnr_timer),
        ),
        (qp_attr::RQ_PSN, a.rq_psn.to_ne() <= MAX_24, attr!(rq_psn)),
        (qp_attr::SQ_PSN, a.sq_psn.to_ne() <= MAX_24, attr!(sq_psn)),
        (
            qp_attr::MAX_QP_RD_ATOMIC,
            a.max_rd_atomic <= max_rd,
            attr!(max_rd_atomic),
        ),
        (
            qp_attr::MAX_DEST_RD_ATOMIC,
            a.max_dest_rd_atomic <= max_rd,
            attr!(max_dest_rd_atomic),
        ),
        (
            qp_attr::DEST_QPN,
            a.dest_qp_num.to_ne() <= MAX_24,
            attr!(dest_qp_num),
        ),
        (
            qp_attr::EN_SQD_ASYNC_NOTIFY,
            a.en_sqd_async_notify <= 1,
            attr!(en_sqd_async_notify),
        ),
        // Each must be 0, and names its own offset when it is not.
        (0xFFFF_FFFF, a.sq_draining == 0, attr!(sq_draining)),
        (0xFFFF_FFFF, a.reserved == [0; 2], attr!(reserved)),
    ];
    for (bit, ok, field) in values {
        if has(bit) {
            check(ok, BadParam, field)?;
        }
    }
    if has(qp_attr::AV) {
        check_av(st, &a.ah)?;
    }
    let Some(qp) = st.qps.get_mut(qpn) else {
        return Err(fail(CmdStatus::Internal, 0));
    };
    apply(&mut qp.attrs, a, mask);
    log::debug!("QP {qpn}: {cur:?} -> {next:?} (mask {mask:#x})");
    match next {
        QpState::Err => crate::qp::to_err(qp, &mut st.dev, None),
        QpState::Reset => crate::qp::to_reset(qp, &mut st.dev),
        _ => {
            let attrs = qp.attrs;
            if next == QpState::Sqd && cur != QpState::Sqd {
                qp.sqd_notify = has(qp_attr::EN_SQD_ASYNC_NOTIFY) && a.en_sqd_async_notify == 1;
                qp.drained = false;
            }
            qp.state = next;
            if has(qp_attr::RQ_PSN) {
                qp.resp.epsn = attrs.rq_psn.to_ne();
                qp.resp.ack_psn = qp.resp.epsn;
            }
            if has(qp_attr::SQ_PSN) {
                let psn = attrs.sq_psn.to_ne();
                qp.req.next_psn = psn;
                qp.req.unacked = psn;
                qp.req.frontier = psn;
            }
            if has(qp_attr::RETRY_CNT) {
                qp.req.retry_left = attrs.retry_cnt;
            }
            if has(qp_attr::RNR_RETRY) {
                qp.req.rnr_left = attrs.rnr_retry;
            }
            if !qp_type.is_datagram() && (has(qp_attr::AV) || has(qp_attr::DEST_QPN)) {
                let sgid = st.dev.gids[attrs.ah.sgid_index as usize].gid;
                qp.path = Path::new(sgid, &attrs.ah, qpn, attrs.dest_qp_num.to_ne());
            }
            if next == QpState::Rts {
                // WQEs posted before RTS (or during SQD or SQE) wait for it.
                st.dev.kick(qp);
            }
            if next == QpState::Sqd {
                crate::qp::check_drained(qp, &mut st.dev);
            }
        }
    }
    Ok(())
}

fn check_av(st: &State, av: &AddressVector) -> CmdResult {
    use CmdStatus::BadParam;
    // RoCE always carries a GRH.
    check(av.is_global == 1, BadParam, av!(is_global))?;
    let sgid = st.dev.gids.get(av.sgid_index as usize).filter(|g| g.valid);
    check(sgid.is_some(), BadParam, av!(sgid_index))?;
    // Source and destination are both IPv4 (IPv4-mapped GIDs) or both
    // IPv6.
    let same_version = sgid.is_some_and(|g| {
        let v4 = |gid: &[u8; 16]| {
            matches!(
                crate::wire::ip::IpAddress::from_gid(*gid),
                crate::wire::ip::IpAddress::V4(_)
            )
        };
        v4(&g.gid) == v4(&av.dgid)
    });
    check(same_version, BadParam, av!(dgid))?;
    check(av.flow_label.to_ne() < 1 << 20, BadParam, av!(flow_label))?;
    // 0 stands for the QP's port.
    check(av.port_num <= 1, BadParam, av!(port_num))
}

/// Copies the attributes selected by `mask` from `a` into `q`.
fn apply(q: &mut QpAttrs, a: &QpAttrs, mask: u32) {
    use qp_attr::*;
    let has = |bit: u32| mask & bit != 0;
    if has(ACCESS_FLAGS) {
        q.qp_access_flags = a.qp_access_flags;
    }
    if has(PKEY_INDEX) {
        q.pkey_index = a.pkey_index;
    }
    if has(PORT) {
        q.port_num = a.port_num;
    }
    if has(QKEY) {
        q.qkey = a.qkey;
    }
    if has(AV) {
        q.ah = a.ah;
    }
    if has(PATH_MTU) {
        q.path_mtu = a.path_mtu;
    }
    if has(TIMEOUT) {
        q.timeout = a.timeout;
    }
    if has(RETRY_CNT) {
        q.retry_cnt = a.retry_cnt;
    }
    if has(RNR_RETRY) {
        q.rnr_retry = a.rnr_retry;
    }
    if has(RQ_PSN) {
        q.rq_psn = a.rq_psn;
    }
    if has(MAX_QP_RD_ATOMIC) {
        q.max_rd_atomic = a.max_rd_atomic;
    }
    if has(MIN_RNR_TIMER) {
        q.min_rnr_timer = a.min_rnr_timer;
    }
    if has(SQ_PSN) {
        q.sq_psn = a.sq_psn;
    }
    if has(MAX_DEST_RD_ATOMIC) {
        q.max_dest_rd_atomic = a.max_dest_rd_atomic;
    }
    if has(DEST_QPN) {
        q.dest_qp_num = a.dest_qp_num;
    }
}

pub(super) fn query(
    st: &mut State,
    uid: u32,
    input: &[u8; CMD_IN_SIZE],
    out: &mut [u8; CMD_OUT_SIZE],
) -> CmdResult {
    let i: ObjIn = from_bytes(input);
    let qpn = i.id.to_ne();
    let qp = st
        .qps
        .get(qpn)
        .filter(|_| st.qps.owned(qpn, uid))
        .ok_or(fail(CmdStatus::BadResource, off!(ObjIn, id)))?;
    let o = QpAttrs {
        qp_state: qp.state.raw(),
        cur_qp_state: qp.state.raw(),
        en_sqd_async_notify: qp.sqd_notify.into(),
        sq_draining: (qp.state == QpState::Sqd && !qp.drained).into(),
        ..qp.attrs
    };
    to_bytes(&o, out);
    Ok(())
}

pub(super) fn destroy(st: &mut State, uid: u32, input: &[u8; CMD_IN_SIZE]) -> CmdResult {
    let i: ObjIn = from_bytes(input);
    let qpn = i.id.to_ne();
    check(
        st.qps.owned(qpn, uid),
        CmdStatus::BadResource,
        off!(ObjIn, id),
    )?;
    // An SRQ WQE it holds is the SRQ's: its completion gives it back.
    if let Some((qp, dev)) = st.parts(qpn) {
        crate::srq::flush_held(qp, dev);
    }
    crate::mw::release_qp(&mut st.dev, qpn);
    // A fault its queued writes left is not a later QP's of that number.
    if let Some(p) = st.dev.iommu.process() {
        p.forget(qpn);
    }
    if let Some(qp) = st.qps.remove(qpn) {
        adjust_users(st, qp.pdn, qp.send_cqn, qp.recv_cqn, qp.srqn, false);
    }
    Ok(())
}

//! Queue pairs: `ibv_create_qp`, `ibv_modify_qp`, `ibv_query_qp`,
//! `ibv_destroy_qp` (posting is in `post`).

use rnic_verbs::provider::{ProtectionDomain, QpInit, QueuePair};
use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void};

use crate::any::AnyQp;
use rnic_verbs::{access, qp_attr, Mtu, QpAttr, QpCap, QpState, QpType};

use crate::abi::{
    IbvAhAttr, IbvContext, IbvGid, IbvGlobalRoute, IbvPd, IbvQp, IbvQpAttr, IbvQpCap, IbvQpEx,
    IbvQpInitAttr, IbvQpInitAttrEx,
};
use crate::cq::live_cq;
use crate::errno;
use crate::live::Live;
use crate::pd::live_pd;

/// A QP: the `struct ibv_qp_ex` programs see (a `struct ibv_qp` at its
/// start), first.
#[repr(C)]
pub(crate) struct Qp {
    ibv: IbvQpEx,
    qp: Option<AnyQp>,
    /// `init_attr.sq_sig_all`, for `ibv_query_qp`.
    sq_sig_all: c_int,
    /// Made by `ibv_create_qp_ex` with send operations: its work-request
    /// interface is for programs to use (`ibv_qp_to_qp_ex`).
    ex: bool,
    /// The requests its work-request interface is building; used by the
    /// one thread posting on the QP, as libibverbs requires.
    pub wr: UnsafeCell<crate::qp_ex::Builder>,
}

/// The live QP `qp` points to, with its driver QP.
fn live_qp(qp: *mut IbvQp) -> Option<(&'static mut Qp, &'static AnyQp)> {
    if !QPS.contains(qp) {
        return None;
    }
    // SAFETY: a live QP came from Box::into_raw in ibv_create_qp and is
    // freed only after it leaves the list; libibverbs programs do not
    // modify or query a QP while destroying it.
    let q = unsafe { &mut *qp.cast::<Qp>() };
    // SAFETY: as above; the driver QP lives in the same box.
    let d = unsafe { (*qp.cast::<Qp>()).qp.as_ref()? };
    Some((q, d))
}

fn cap_of(c: QpCap) -> IbvQpCap {
    IbvQpCap {
        max_send_wr: c.max_send_wr,
        max_recv_wr: c.max_recv_wr,
        max_send_sge: c.max_send_sge,
        max_recv_sge: c.max_recv_sge,
        max_inline_data: c.max_inline_data,
    }
}

static QPS: Live = Live::new();

/// The driver's QP behind `qp`, unchecked: for the data path, whose
/// callers have read the context through the pointer already.
///
/// # Safety
///
/// `qp` is a QP of this library, not destroyed while the result is used.
pub(crate) unsafe fn driver_qp(qp: *mut IbvQp) -> Option<&'static AnyQp> {
    // SAFETY: the caller's promise.
    unsafe { (*qp.cast::<Qp>()).qp.as_ref() }
}

/// The driver's QP behind the live QP `qp`.
pub(crate) fn live_driver_qp(qp: *mut IbvQp) -> Option<&'static AnyQp> {
    live_qp(qp).map(|(_, d)| d)
}

/// The live QP of `context` whose number is `qpn`.
pub(crate) fn qp_by_num(context: *mut IbvContext, qpn: u32) -> Option<*mut IbvQp> {
    // SAFETY: the list's QPs are live boxes (read under its lock).
    QPS.find(|p: *mut IbvQp| unsafe { (*p).qp_num == qpn && (*p).context == context })
}

/// Counts an asynchronous event of `qp` acknowledged, if it is live.
pub(crate) fn ack_async(qp: *mut IbvQp) {
    // SAFETY: live, and kept so by the list's lock while this runs.
    QPS.with(qp, |p| unsafe { (*p).events_completed += 1 });
}

/// `ibv_create_qp`: an RC, UC or UD QP in RESET, on `qp_init_attr->srq`
/// if not NULL, its capacities (at least those asked) written back to
/// `qp_init_attr->cap`. NULL with `errno`: `EINVAL` for a PD, CQ or SRQ
/// that is not live, a NULL attribute pointer or an unknown type;
/// `EOPNOTSUPP` for an XRC or raw packet QP; the driver's for capacities
/// beyond the device's (`EINVAL`) or no QP left (`ENOMEM`).
///
/// # Safety
///
/// `qp_init_attr` is NULL or points to a `struct ibv_qp_init_attr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_qp(
    pd: *mut IbvPd,
    qp_init_attr: *mut IbvQpInitAttr,
) -> *mut IbvQp {
    if qp_init_attr.is_null() {
        return errno::fail(libc::EINVAL);
    }
    // SAFETY: non-NULL, and a struct ibv_qp_init_attr by the caller's
    // promise.
    new_qp(pd, unsafe { &mut *qp_init_attr }, false, false)
}

/// `rnic_create_gsi_qp` (rnic's own, version `RNIC_PRIVATE_1.0`): the
/// device's general services QP, QP1, which libibverbs has no type for
/// (the kernel owns it): what rnic's drop-in librdmacm speaks the
/// communication manager through. `qp_init_attr` as for
/// [`ibv_create_qp`], its type `IBV_QPT_UD` (else `EINVAL`); the QP is
/// UD to the program, at QP number 1. NULL with `errno` as
/// [`ibv_create_qp`], or `EBUSY` if the device's GSI QP exists.
///
/// # Safety
///
/// As [`ibv_create_qp`].
#[no_mangle]
pub unsafe extern "C" fn rnic_create_gsi_qp(
    pd: *mut IbvPd,
    qp_init_attr: *mut IbvQpInitAttr,
) -> *mut IbvQp {
    if qp_init_attr.is_null() {
        return errno::fail(libc::EINVAL);
    }
    // SAFETY: as in `ibv_create_qp`.
    let init = unsafe { &mut *qp_init_attr };
    if init.qp_type != 4 {
        return errno::fail(libc::EINVAL);
    }
    new_qp(pd, init, false, true)
}

/// A QP as [`ibv_create_qp`] makes it; `ex`: with its work-request
/// interface open to the program; `gsi`: the general services QP.
fn new_qp(pd: *mut IbvPd, init: &mut IbvQpInitAttr, ex: bool, gsi: bool) -> *mut IbvQp {
    let Some(p) = live_pd(pd) else {
        return errno::fail(libc::EINVAL);
    };
    let (Some(scq), Some(rcq)) = (live_cq(init.send_cq), live_cq(init.recv_cq)) else {
        return errno::fail(libc::EINVAL);
    };
    let srq = if init.srq.is_null() {
        None
    } else {
        match crate::srq::live_srq(init.srq.cast()) {
            Some(Some(s)) => Some(s),
            _ => return errno::fail(libc::EINVAL),
        }
    };
    let qp_type = match init.qp_type {
        2 => QpType::Rc,
        3 => QpType::Uc,
        4 if gsi => QpType::Gsi,
        4 => QpType::Ud,
        // Raw packet, XRC send and receive, driver-specific.
        8 | 9 | 10 | 0xff => return errno::fail(libc::EOPNOTSUPP),
        _ => return errno::fail(libc::EINVAL),
    };
    let (Some(driver_pd), Some(send_cq), Some(recv_cq)) = (p.pd.as_ref(), scq, rcq) else {
        return errno::fail(libc::EINVAL);
    };
    let c = init.cap;
    let attr = QpInit {
        send_cq,
        recv_cq,
        srq,
        cap: QpCap {
            max_send_wr: c.max_send_wr,
            max_recv_wr: c.max_recv_wr,
            max_send_sge: c.max_send_sge,
            max_recv_sge: c.max_recv_sge,
            max_inline_data: c.max_inline_data,
        },
        qp_type,
        sq_sig_all: init.sq_sig_all != 0,
    };
    match driver_pd.create_qp(&attr) {
        Ok(qp) => {
            init.cap = cap_of(qp.cap());
            let ibv = IbvQp {
                context: p.ibv.context,
                qp_context: init.qp_context,
                pd,
                send_cq: init.send_cq,
                recv_cq: init.recv_cq,
                srq: init.srq,
                handle: qp.qp_num(),
                qp_num: qp.qp_num(),
                state: 0,
                qp_type: init.qp_type,
                // SAFETY: zeroed is PTHREAD_MUTEX_INITIALIZER and
                // PTHREAD_COND_INITIALIZER on glibc.
                mutex: unsafe { std::mem::zeroed() },
                // SAFETY: as above.
                cond: unsafe { std::mem::zeroed() },
                events_completed: 0,
            };
            let q = Box::into_raw(Box::new(Qp {
                ibv: crate::qp_ex::interface(ibv),
                qp: Some(qp),
                sq_sig_all: init.sq_sig_all,
                ex,
                wr: UnsafeCell::new(crate::qp_ex::Builder::default()),
            }));
            QPS.add(q);
            q.cast()
        }
        Err(e) => errno::fail(e.errno()),
    }
}

/// `ibv_destroy_qp`: 0, or an `errno` value (`EINVAL` for a pointer that
/// is not a live QP; the driver's if the device refuses, and the QP
/// stays).
///
/// # Safety
///
/// None beyond what the C signature implies: the pointer is checked.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_qp(qp: *mut IbvQp) -> c_int {
    // SAFETY: every live QP is a Box<Qp> (ibv_create_qp).
    unsafe { QPS.destroy(qp.cast::<Qp>(), |o| &mut o.qp, AnyQp::destroy) }
}

/// `ibv_modify_qp`: the fields of `attr` that `attr_mask` names
/// (`IBV_QP_*`), as the driver's `modify` takes them. 0, or an `errno`
/// value: `EINVAL` for a QP that is not live, a NULL `attr`, an unknown
/// state or MTU, or what the driver refuses (a transition the QP cannot
/// make, attributes missing or out of range); `EOPNOTSUPP` for the
/// alternate path, path migration and rate limits. Access flags other
/// than `IBV_ACCESS_REMOTE_*` are ignored, as the kernel ignores them.
///
/// # Safety
///
/// `attr` is NULL or points to a `struct ibv_qp_attr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_modify_qp(
    qp: *mut IbvQp,
    attr: *mut IbvQpAttr,
    attr_mask: c_int,
) -> c_int {
    let Some((q, driver)) = live_qp(qp) else {
        return libc::EINVAL;
    };
    if attr.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: non-NULL, and a struct ibv_qp_attr by the caller's promise.
    let a = unsafe { &*attr };
    let mask = attr_mask as u32;
    // IBV_QP_ALT_PATH, IBV_QP_PATH_MIG_STATE, IBV_QP_RATE_LIMIT.
    if mask & ((1 << 14) | (1 << 18) | (1 << 25)) != 0 {
        return libc::EOPNOTSUPP;
    }
    let state = |v: c_int| u8::try_from(v).ok().and_then(QpState::from_raw);
    // The states are read only where the mask names them.
    let qp_state = match state(a.qp_state) {
        Some(s) => s,
        None if mask & qp_attr::STATE == 0 => QpState::Reset,
        None => return libc::EINVAL,
    };
    let cur_qp_state = match state(a.cur_qp_state) {
        Some(s) => s,
        None if mask & qp_attr::CUR_STATE == 0 => QpState::Reset,
        None => return libc::EINVAL,
    };
    let path_mtu = if mask & qp_attr::PATH_MTU != 0 {
        match u8::try_from(a.path_mtu).ok().and_then(Mtu::from_raw) {
            Some(m) => Some(m),
            None => return libc::EINVAL,
        }
    } else {
        None
    };
    let g = &a.ah_attr.grh;
    let mut d = QpAttr {
        qp_state,
        cur_qp_state,
        path_mtu,
        // As in the kernel, flags other than the remote ones mean nothing
        // to a QP and are ignored: perftest passes IBV_ACCESS_LOCAL_WRITE.
        qp_access_flags: a.qp_access_flags & access::QP_SUPPORTED,
        pkey_index: a.pkey_index,
        port_num: a.port_num,
        qkey: a.qkey,
        min_rnr_timer: a.min_rnr_timer,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        sq_psn: a.sq_psn,
        rq_psn: a.rq_psn,
        dest_qp_num: a.dest_qp_num,
        en_sqd_async_notify: a.en_sqd_async_notify != 0,
        ..QpAttr::default()
    };
    d.ah_attr.dgid = g.dgid.raw;
    d.ah_attr.flow_label = crate::ah::flow_label(g.flow_label);
    d.ah_attr.sgid_index = g.sgid_index;
    d.ah_attr.hop_limit = g.hop_limit;
    d.ah_attr.traffic_class = g.traffic_class;
    d.ah_attr.sl = a.ah_attr.sl;
    d.ah_attr.port_num = a.ah_attr.port_num;
    d.ah_attr.is_global = a.ah_attr.is_global != 0;
    match driver.modify(&d, mask) {
        Ok(()) => {
            if mask & qp_attr::STATE != 0 {
                q.ibv.qp_base.state = a.qp_state;
            }
            0
        }
        Err(e) => e.errno(),
    }
}

/// `ibv_query_qp`: the QP's attributes into `attr` and its creation
/// attributes into `init_attr` (every field, whatever `attr_mask` asks).
/// 0, or an `errno` value (`EINVAL` for a QP that is not live or a NULL
/// pointer).
///
/// # Safety
///
/// `attr` and `init_attr` are NULL or point to their structures.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_qp(
    qp: *mut IbvQp,
    attr: *mut IbvQpAttr,
    attr_mask: c_int,
    init_attr: *mut IbvQpInitAttr,
) -> c_int {
    let _ = attr_mask;
    let Some((q, driver)) = live_qp(qp) else {
        return libc::EINVAL;
    };
    if attr.is_null() || init_attr.is_null() {
        return libc::EINVAL;
    }
    let a = match driver.query() {
        Ok(a) => a,
        Err(e) => return e.errno(),
    };
    let h = a.ah_attr;
    let out = IbvQpAttr {
        qp_state: a.qp_state.raw().into(),
        cur_qp_state: a.qp_state.raw().into(),
        path_mtu: a.path_mtu.map_or(0, |m| m.raw().into()),
        // IBV_MIG_MIGRATED: no alternate path.
        path_mig_state: 0,
        qkey: a.qkey,
        rq_psn: a.rq_psn,
        sq_psn: a.sq_psn,
        dest_qp_num: a.dest_qp_num,
        qp_access_flags: a.qp_access_flags,
        cap: cap_of(a.cap),
        ah_attr: IbvAhAttr {
            grh: IbvGlobalRoute {
                dgid: IbvGid { raw: h.dgid },
                flow_label: h.flow_label,
                sgid_index: h.sgid_index,
                hop_limit: h.hop_limit,
                traffic_class: h.traffic_class,
            },
            dlid: 0,
            sl: h.sl,
            src_path_bits: 0,
            static_rate: 0,
            is_global: h.is_global.into(),
            port_num: h.port_num,
        },
        alt_ah_attr: IbvAhAttr::default(),
        pkey_index: a.pkey_index,
        alt_pkey_index: 0,
        en_sqd_async_notify: a.en_sqd_async_notify.into(),
        sq_draining: a.sq_draining.into(),
        max_rd_atomic: a.max_rd_atomic,
        max_dest_rd_atomic: a.max_dest_rd_atomic,
        min_rnr_timer: a.min_rnr_timer,
        port_num: a.port_num,
        timeout: a.timeout,
        retry_cnt: a.retry_cnt,
        rnr_retry: a.rnr_retry,
        alt_port_num: 0,
        alt_timeout: 0,
        rate_limit: 0,
    };
    q.ibv.qp_base.state = out.qp_state;
    let init = IbvQpInitAttr {
        qp_context: q.ibv.qp_base.qp_context,
        send_cq: q.ibv.qp_base.send_cq,
        recv_cq: q.ibv.qp_base.recv_cq,
        srq: q.ibv.qp_base.srq,
        cap: cap_of(a.cap),
        qp_type: q.ibv.qp_base.qp_type,
        sq_sig_all: q.sq_sig_all,
    };
    // SAFETY: both non-NULL, and their structures by the caller's promise.
    unsafe {
        attr.write(out);
        init_attr.write(init);
    }
    0
}

/// `ibv_qp_to_qp_ex` (`IBVERBS_1.6`): the QP's `struct ibv_qp_ex` if
/// `ibv_create_qp_ex` made it with send operations; NULL otherwise (as
/// libibverbs answers), and for a pointer that is not a live QP.
#[no_mangle]
pub extern "C" fn ibv_qp_to_qp_ex(qp: *mut IbvQp) -> *mut IbvQpEx {
    match live_qp(qp) {
        Some((q, _)) if q.ex => qp.cast(),
        _ => std::ptr::null_mut(),
    }
}

/// `IBV_QP_INIT_ATTR_PD`, `_CREATE_FLAGS`, `_SEND_OPS_FLAGS`, and all
/// the mask's bits (the rest: XRC domain, TSO, RSS).
const QP_ATTR_PD: u32 = 1 << 0;
const QP_ATTR_CREATE_FLAGS: u32 = 1 << 2;
const QP_ATTR_SEND_OPS_FLAGS: u32 = 1 << 6;
const QP_ATTR_ALL: u32 = (1 << 7) - 1;

/// The context's `create_qp_ex` (the header's inline `ibv_create_qp_ex`):
/// a QP as [`ibv_create_qp`] makes it on the PD the mask names, with the
/// work-request interface (`ibv_qp_to_qp_ex`, `ibv_wr_*`) when it asks
/// for send operations. NULL with `errno`: `EINVAL` for no PD, a PD of
/// another context or unknown mask bits; `EOPNOTSUPP` for an XRC domain,
/// TSO, RSS, creation flags, and the TSO and atomic-write operations; as
/// [`ibv_create_qp`] otherwise.
///
/// # Safety
///
/// `attr` is NULL or points to a `struct ibv_qp_init_attr_ex`.
pub(crate) unsafe extern "C" fn create_qp_ex(
    context: *mut IbvContext,
    attr: *mut IbvQpInitAttrEx,
) -> *mut IbvQp {
    if attr.is_null() {
        return errno::fail(libc::EINVAL);
    }
    // SAFETY: non-NULL, and the structure by the caller's promise.
    let a = unsafe { &*attr };
    let mask = a.comp_mask;
    if mask & !QP_ATTR_ALL != 0 || mask & QP_ATTR_PD == 0 {
        return errno::fail(libc::EINVAL);
    }
    let others = QP_ATTR_ALL & !(QP_ATTR_PD | QP_ATTR_CREATE_FLAGS | QP_ATTR_SEND_OPS_FLAGS);
    let flags = mask & QP_ATTR_CREATE_FLAGS != 0 && a.create_flags != 0;
    let ops = if mask & QP_ATTR_SEND_OPS_FLAGS != 0 {
        a.send_ops_flags
    } else {
        0
    };
    if mask & others != 0 || flags || ops & !crate::qp_ex::SEND_OPS != 0 {
        return errno::fail(libc::EOPNOTSUPP);
    }
    match live_pd(a.pd) {
        Some(p) if p.ibv.context == context => {}
        _ => return errno::fail(libc::EINVAL),
    }
    let pd = a.pd;
    // SAFETY: the structure starts with the fields of a struct
    // ibv_qp_init_attr, and its bytes are all readable (the other
    // structure's tail padding is `comp_mask`, only read); `a` is not
    // used again.
    let init = unsafe { &mut *attr.cast::<IbvQpInitAttr>() };
    new_qp(pd, init, mask & QP_ATTR_SEND_OPS_FLAGS != 0, false)
}

/// `ibv_attach_mcast`: joining a UD QP to a multicast group.
/// `EOPNOTSUPP`: rnic devices have no multicast groups (`max_mcast_grp`
/// is 0), as libibverbs answers for a device without the operation.
#[no_mangle]
pub extern "C" fn ibv_attach_mcast(_qp: *mut IbvQp, _gid: *const c_void, _lid: u16) -> c_int {
    libc::EOPNOTSUPP
}

/// `ibv_detach_mcast`: `EOPNOTSUPP`, as [`ibv_attach_mcast`].
#[no_mangle]
pub extern "C" fn ibv_detach_mcast(_qp: *mut IbvQp, _gid: *const c_void, _lid: u16) -> c_int {
    libc::EOPNOTSUPP
}

/// `ibv_query_ece`: the QP's enhanced connection establishment options,
/// a vendor's extension of the CM exchange. `EOPNOTSUPP`: rnic has none
/// (librdmacm takes that as "no options").
#[no_mangle]
pub extern "C" fn ibv_query_ece(_qp: *mut IbvQp, _ece: *mut c_void) -> c_int {
    libc::EOPNOTSUPP
}

/// `ibv_set_ece`: `EOPNOTSUPP` (returned and in `errno`), as
/// [`ibv_query_ece`].
#[no_mangle]
pub extern "C" fn ibv_set_ece(_qp: *mut IbvQp, _ece: *mut c_void) -> c_int {
    errno::set(libc::EOPNOTSUPP);
    libc::EOPNOTSUPP
}

/// `ibv_query_qp_data_in_order`: 0, no promise that a message's data is
/// written in order (libibverbs' answer for a device that makes none);
/// programs then wait for the completion rather than the last byte.
#[no_mangle]
pub extern "C" fn ibv_query_qp_data_in_order(_qp: *mut IbvQp, _op: c_int, _flags: u32) -> c_int {
    0
}

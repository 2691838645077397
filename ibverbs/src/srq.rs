//! Shared receive queues: `ibv_create_srq`, `ibv_modify_srq`,
//! `ibv_query_srq`, `ibv_destroy_srq`, and the context's `post_srq_recv`.

use rnic_verbs::provider::{ProtectionDomain, SharedReceiveQueue};
use std::ffi::c_int;

use crate::any::AnySrq;
use rnic_verbs::SrqAttr;

use crate::abi::{
    IbvContext, IbvPd, IbvRecvWr, IbvSrq, IbvSrqAttr, IbvSrqInitAttr, IbvSrqInitAttrEx,
};
use crate::errno;
use crate::live::Live;
use crate::pd::live_pd;
use crate::post::post_recv_list;

/// An SRQ: the `struct ibv_srq` programs see, first.
#[repr(C)]
struct Srq {
    ibv: IbvSrq,
    srq: Option<AnySrq>,
}

static SRQS: Live = Live::new();

/// The live SRQ of `context` whose number is `srqn`.
pub(crate) fn srq_by_num(context: *mut IbvContext, srqn: u32) -> Option<*mut IbvSrq> {
    // SAFETY: the list's SRQs are live boxes (read under its lock).
    SRQS.find(|p: *mut IbvSrq| unsafe { (*p).handle == srqn && (*p).context == context })
}

/// Counts an asynchronous event of `srq` acknowledged, if it is live.
pub(crate) fn ack_async(srq: *mut IbvSrq) {
    // SAFETY: live, and kept so by the list's lock while this runs.
    SRQS.with(srq, |p| unsafe { (*p).events_completed += 1 });
}

/// The driver's SRQ behind the live SRQ `srq` (`None` inside: being
/// destroyed).
pub(crate) fn live_srq(srq: *mut IbvSrq) -> Option<Option<&'static AnySrq>> {
    // SAFETY: a live SRQ came from Box::into_raw in ibv_create_srq and is
    // freed only after it leaves the list.
    SRQS.contains(srq)
        .then(|| unsafe { (*srq.cast::<Srq>()).srq.as_ref() })
}

fn attr_of(a: SrqAttr) -> IbvSrqAttr {
    IbvSrqAttr {
        max_wr: a.max_wr,
        max_sge: a.max_sge,
        srq_limit: a.srq_limit,
    }
}

/// `ibv_create_srq`: an SRQ of at least the asked capacities, written
/// back to `srq_init_attr->attr`. NULL with `errno` (`EINVAL` for a PD
/// that is not live or a NULL attribute pointer; the driver's: beyond the
/// device's limits, none left, a device without SRQs).
///
/// # Safety
///
/// `srq_init_attr` is NULL or points to a `struct ibv_srq_init_attr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_srq(
    pd: *mut IbvPd,
    srq_init_attr: *mut IbvSrqInitAttr,
) -> *mut IbvSrq {
    let Some(p) = live_pd(pd) else {
        return errno::fail(libc::EINVAL);
    };
    let Some(driver_pd) = p.pd.as_ref() else {
        return errno::fail(libc::EINVAL);
    };
    if srq_init_attr.is_null() {
        return errno::fail(libc::EINVAL);
    }
    // SAFETY: non-NULL, and the structure by the caller's promise.
    let init = unsafe { &mut *srq_init_attr };
    let want = SrqAttr {
        max_wr: init.attr.max_wr,
        max_sge: init.attr.max_sge,
        srq_limit: init.attr.srq_limit,
    };
    match driver_pd.create_srq(&want) {
        Ok(srq) => {
            init.attr = attr_of(srq.attr());
            let ibv = IbvSrq {
                context: p.ibv.context,
                srq_context: init.srq_context,
                pd,
                handle: srq.srq_num(),
                // SAFETY: zeroed is PTHREAD_MUTEX_INITIALIZER and
                // PTHREAD_COND_INITIALIZER on glibc.
                mutex: unsafe { std::mem::zeroed() },
                // SAFETY: as above.
                cond: unsafe { std::mem::zeroed() },
                events_completed: 0,
            };
            let s = Box::into_raw(Box::new(Srq {
                ibv,
                srq: Some(srq),
            }));
            SRQS.add(s);
            s.cast()
        }
        Err(e) => errno::fail(e.errno()),
    }
}

/// `ibv_modify_srq`: the limit or size `srq_attr_mask` names
/// (`IBV_SRQ_MAX_WR`, `IBV_SRQ_LIMIT`). 0, or an `errno` value.
///
/// # Safety
///
/// `srq_attr` is NULL or points to a `struct ibv_srq_attr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_modify_srq(
    srq: *mut IbvSrq,
    srq_attr: *mut IbvSrqAttr,
    srq_attr_mask: c_int,
) -> c_int {
    let (Some(Some(driver)), false) = (live_srq(srq), srq_attr.is_null()) else {
        return libc::EINVAL;
    };
    // SAFETY: non-NULL, and the structure by the caller's promise.
    let a = unsafe { &*srq_attr };
    let attr = SrqAttr {
        max_wr: a.max_wr,
        max_sge: a.max_sge,
        srq_limit: a.srq_limit,
    };
    match driver.modify(&attr, srq_attr_mask as u32) {
        Ok(()) => 0,
        Err(e) => e.errno(),
    }
}

/// `ibv_query_srq`: its attributes. 0, or an `errno` value.
///
/// # Safety
///
/// `srq_attr` is NULL or points to a writable `struct ibv_srq_attr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_srq(srq: *mut IbvSrq, srq_attr: *mut IbvSrqAttr) -> c_int {
    let (Some(Some(driver)), false) = (live_srq(srq), srq_attr.is_null()) else {
        return libc::EINVAL;
    };
    match driver.query() {
        Ok(a) => {
            // SAFETY: non-NULL, and writable by the caller's promise.
            unsafe { srq_attr.write(attr_of(a)) };
            0
        }
        Err(e) => e.errno(),
    }
}

/// `ibv_destroy_srq`: 0, or an `errno` value (`EINVAL` for a pointer that
/// is not a live SRQ; `EBUSY` while QPs use it, and the SRQ stays).
///
/// # Safety
///
/// None beyond what the C signature implies: the pointer is checked.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_srq(srq: *mut IbvSrq) -> c_int {
    // SAFETY: every live SRQ is a Box<Srq> (ibv_create_srq).
    unsafe { SRQS.destroy(srq.cast::<Srq>(), |o| &mut o.srq, AnySrq::destroy) }
}

/// The context's `post_srq_recv` (the header's inline
/// `ibv_post_srq_recv`): posts the list `wr`, in order. 0, or an `errno`
/// value with `*bad_wr` the first request not posted.
///
/// # Safety
///
/// `srq` is an SRQ of this library; `wr` is a valid list; `bad_wr` is
/// NULL or writable.
pub(crate) unsafe extern "C" fn post_srq_recv(
    srq: *mut IbvSrq,
    wr: *mut IbvRecvWr,
    bad_wr: *mut *mut IbvRecvWr,
) -> c_int {
    // SAFETY: the caller's promise: one of our SRQs, alive while used.
    let Some(driver) = (unsafe { &*srq.cast::<Srq>() }).srq.as_ref() else {
        return libc::EINVAL;
    };
    // SAFETY: the caller's promise, passed on.
    unsafe { post_recv_list(wr, bad_wr, |r| driver.post_recv(r)) }
}

/// `IBV_SRQ_INIT_ATTR_TYPE`, `_PD`, and all the mask's bits.
const SRQ_ATTR_TYPE: u32 = 1 << 0;
const SRQ_ATTR_PD: u32 = 1 << 1;
const SRQ_ATTR_ALL: u32 = (1 << 5) - 1;

/// The context's `create_srq_ex` (the header's inline
/// `ibv_create_srq_ex`): a basic SRQ as [`ibv_create_srq`] makes it, on
/// the PD the mask names. NULL with `errno`: `EINVAL` for no PD, a PD of
/// another context or unknown mask bits; `EOPNOTSUPP` for XRC and
/// tag-matching SRQs; as [`ibv_create_srq`] otherwise.
///
/// # Safety
///
/// `attr` is NULL or points to a `struct ibv_srq_init_attr_ex`.
pub(crate) unsafe extern "C" fn create_srq_ex(
    context: *mut IbvContext,
    attr: *mut IbvSrqInitAttrEx,
) -> *mut IbvSrq {
    if attr.is_null() {
        return errno::fail(libc::EINVAL);
    }
    // SAFETY: non-NULL, and the structure by the caller's promise.
    let a = unsafe { &mut *attr };
    if a.comp_mask & !SRQ_ATTR_ALL != 0 || a.comp_mask & SRQ_ATTR_PD == 0 {
        return errno::fail(libc::EINVAL);
    }
    if a.comp_mask & SRQ_ATTR_TYPE != 0 && a.srq_type != 0 {
        return errno::fail(libc::EOPNOTSUPP);
    }
    match live_pd(a.pd) {
        Some(p) if p.ibv.context == context => {}
        _ => return errno::fail(libc::EINVAL),
    }
    // SAFETY: `struct ibv_srq_init_attr` is the structure's first part.
    unsafe { ibv_create_srq(a.pd, attr.cast::<IbvSrqInitAttr>()) }
}

/// The context's `get_srq_num` (the header's inline `ibv_get_srq_num`):
/// the SRQ's number. 0, or `EINVAL` for an SRQ that is not live or a NULL
/// `srq_num`.
///
/// # Safety
///
/// `srq_num` is NULL or points to a writable `uint32_t`.
pub(crate) unsafe extern "C" fn get_srq_num(srq: *mut IbvSrq, srq_num: *mut u32) -> c_int {
    if srq_num.is_null() || !SRQS.contains(srq) {
        return libc::EINVAL;
    }
    // SAFETY: live (checked above), and `srq_num` writable by the
    // caller's promise.
    unsafe { *srq_num = (*srq).handle };
    0
}

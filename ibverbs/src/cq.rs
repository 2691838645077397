//! Completion queues: `ibv_create_cq`, `ibv_resize_cq`, `ibv_destroy_cq`,
//! and the context's `poll_cq` and `req_notify_cq`, which the header's
//! inline `ibv_poll_cq` and `ibv_req_notify_cq` call.

use rnic_verbs::provider::{CompletionQueue, Provider};
use std::cell::UnsafeCell;
use std::ffi::{c_int, c_void};

use crate::any::AnyCq;
use rnic_verbs::WorkCompletion;

use crate::abi::{IbvContext, IbvCq, IbvCqEx, IbvCqInitAttrEx, IbvWc};
use crate::context::open_context;
use crate::errno;
use crate::live::Live;

/// A CQ: the `struct ibv_cq_ex` programs see (a `struct ibv_cq` at its
/// start), first; then the driver's CQ and the completion the extended
/// polling interface made current.
#[repr(C)]
struct Cq {
    ibv: IbvCqEx,
    cq: Option<AnyCq>,
    /// Written by `start_poll` and `next_poll` only: one thread polls a
    /// CQ through this interface at a time, as libibverbs requires.
    current: UnsafeCell<IbvWc>,
}

static CQS: Live = Live::new();

/// The live CQ of `context` whose number is `cqn`.
pub(crate) fn cq_by_num(context: *mut IbvContext, cqn: u32) -> Option<*mut IbvCq> {
    // SAFETY: the list's CQs are live boxes (read under its lock).
    CQS.find(|p: *mut IbvCq| unsafe { (*p).handle == cqn && (*p).context == context })
}

/// Counts an asynchronous event of `cq` acknowledged, if it is live.
pub(crate) fn ack_async(cq: *mut IbvCq) {
    // SAFETY: live, and kept so by the list's lock while this runs.
    CQS.with(cq, |p| unsafe { (*p).async_events_completed += 1 });
}

/// The driver's CQ behind the live CQ `cq` (`None` inside: being
/// destroyed).
pub(crate) fn live_cq(cq: *mut IbvCq) -> Option<Option<&'static AnyCq>> {
    // SAFETY: a live CQ came from Box::into_raw in ibv_create_cq and is
    // freed only after it leaves the list.
    CQS.contains(cq)
        .then(|| unsafe { (*cq.cast::<Cq>()).cq.as_ref() })
}

/// Completions converted per call to the driver's poll.
const POLL_BATCH: usize = 8;

/// `ibv_create_cq`: a CQ of at least `cqe` entries, its completion events
/// on `channel` (if not NULL) from vector `comp_vector`. NULL with
/// `errno`: `EINVAL` for a context that is not open, a channel that is
/// not live, a negative `cqe` or vector; the driver's (`EINVAL` beyond the
/// device's largest CQ or vectors, `ENOMEM`).
///
/// # Safety
///
/// None beyond what the C signature implies: the context is checked.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_cq(
    context: *mut IbvContext,
    cqe: c_int,
    cq_context: *mut c_void,
    channel: *mut c_void,
    comp_vector: c_int,
) -> *mut IbvCq {
    let (Ok(n), Ok(vector)) = (u32::try_from(cqe), u32::try_from(comp_vector)) else {
        return errno::fail(libc::EINVAL);
    };
    new_cq(context, n, cq_context, channel, vector)
}

/// A CQ as [`ibv_create_cq`] makes it, its extended polling interface
/// filled too.
fn new_cq(
    context: *mut IbvContext,
    cqe: u32,
    cq_context: *mut c_void,
    channel: *mut c_void,
    vector: u32,
) -> *mut IbvCq {
    let Some(c) = open_context(context) else {
        return errno::fail(libc::EINVAL);
    };
    let ch = if channel.is_null() {
        None
    } else {
        match crate::channel::live_channel(channel.cast()) {
            Some(ch) => Some(ch),
            None => {
                return errno::fail(libc::EINVAL);
            }
        }
    };
    match c.ctx.create_cq(cqe, ch, vector) {
        Ok(cq) => {
            let base = IbvCq {
                context,
                channel,
                cq_context,
                handle: cq.cq_num(),
                cqe: cq.cqe().min(c_int::MAX as u32) as c_int,
                // SAFETY: zeroed is PTHREAD_MUTEX_INITIALIZER and
                // PTHREAD_COND_INITIALIZER on glibc.
                mutex: unsafe { std::mem::zeroed() },
                // SAFETY: as above.
                cond: unsafe { std::mem::zeroed() },
                comp_events_completed: 0,
                async_events_completed: 0,
            };
            let p = Box::into_raw(Box::new(Cq {
                ibv: crate::cq_ex::interface(base),
                cq: Some(cq),
                // SAFETY: plain integers: zero is valid.
                current: UnsafeCell::new(unsafe { std::mem::zeroed() }),
            }));
            CQS.add(p);
            p.cast()
        }
        Err(e) => errno::fail(e.errno()),
    }
}

/// `ibv_destroy_cq`: 0, or an `errno` value (`EINVAL` for a pointer that
/// is not a live CQ; `EBUSY` while QPs use it, and the CQ stays).
///
/// # Safety
///
/// None beyond what the C signature implies: the pointer is checked.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_cq(cq: *mut IbvCq) -> c_int {
    // SAFETY: every live CQ is a Box<Cq> (ibv_create_cq).
    unsafe { CQS.destroy(cq.cast::<Cq>(), |o| &mut o.cq, AnyCq::destroy) }
}

/// `ibv_resize_cq`: makes the CQ hold at least `cqe` completions (the
/// ones not yet polled move with it) and sets `cq->cqe` to its new size.
/// 0, or an `errno` value: `EINVAL` for a pointer that is not a live CQ,
/// a negative `cqe`, or the driver's refusal (fewer entries than
/// completions waiting, more than the device's largest CQ).
///
/// # Safety
///
/// None beyond what the C signature implies: the pointer is checked.
#[no_mangle]
pub unsafe extern "C" fn ibv_resize_cq(cq: *mut IbvCq, cqe: c_int) -> c_int {
    let (Some(Some(driver)), Ok(n)) = (live_cq(cq), u32::try_from(cqe)) else {
        return libc::EINVAL;
    };
    match driver.resize(n) {
        Ok(()) => {
            // SAFETY: live (checked above), so a box of ours; `cqe` is the
            // program's to read, and this call's to write.
            unsafe { (*cq).cqe = driver.cqe().min(c_int::MAX as u32) as c_int };
            0
        }
        Err(e) => e.errno(),
    }
}

/// The context's `poll_cq` (reached through the header's inline
/// `ibv_poll_cq`): up to `num_entries` completions into `wc`. Their
/// number, or -1 with `errno` (`EINVAL` for a negative count or a NULL
/// `wc`; the driver's error, such as a CQ in error).
///
/// # Safety
///
/// `cq` is a CQ of this library (the inline caller has read its context
/// through it), and `wc` points to `num_entries` writable entries.
pub(crate) unsafe extern "C" fn poll_cq(
    cq: *mut IbvCq,
    num_entries: c_int,
    wc: *mut IbvWc,
) -> c_int {
    if num_entries < 0 || (wc.is_null() && num_entries > 0) {
        errno::set(libc::EINVAL);
        return -1;
    }
    // SAFETY: the caller's promise: one of our CQs, alive while it is used.
    let Some(driver) = (unsafe { &*cq.cast::<Cq>() }).cq.as_ref() else {
        errno::set(libc::EINVAL);
        return -1;
    };
    let mut got = 0usize;
    let mut batch = [WorkCompletion::default(); POLL_BATCH];
    while got < num_entries as usize {
        let want = (num_entries as usize - got).min(POLL_BATCH);
        let n = match driver.poll(&mut batch[..want]) {
            Ok(n) => n,
            Err(e) if got == 0 => {
                errno::set(e.errno());
                return -1;
            }
            Err(_) => break,
        };
        for (i, w) in batch[..n].iter().enumerate() {
            // SAFETY: `got + i < num_entries`, inside the caller's array.
            unsafe { wc.add(got + i).write(convert(w)) };
        }
        got += n;
        if n < want {
            break;
        }
    }
    got as c_int
}

/// The context's `req_notify_cq` (the header's inline
/// `ibv_req_notify_cq`): arms the CQ for its next completion event
/// (solicited ones only if `solicited_only`). 0, or an `errno` value.
///
/// # Safety
///
/// As for [`poll_cq`].
pub(crate) unsafe extern "C" fn req_notify_cq(cq: *mut IbvCq, solicited_only: c_int) -> c_int {
    // SAFETY: the caller's promise, as for poll_cq.
    match (unsafe { &*cq.cast::<Cq>() }).cq.as_ref() {
        Some(driver) => {
            driver.arm(solicited_only != 0);
            0
        }
        None => libc::EINVAL,
    }
}

pub(crate) fn convert(w: &WorkCompletion) -> IbvWc {
    IbvWc {
        wr_id: w.wr_id,
        status: w.status.raw().into(),
        opcode: w.opcode.raw().into(),
        vendor_err: w.vendor_err,
        byte_len: w.byte_len,
        // The union holds the immediate data in network byte order, or the
        // invalidated rkey in host byte order.
        imm_data: w
            .invalidated_rkey()
            .unwrap_or_else(|| w.imm_data.map_or(0, u32::from_ne_bytes)),
        qp_num: w.qp_num,
        src_qp: w.src_qp,
        wc_flags: w.flags,
        pkey_index: w.pkey_index,
        slid: w.slid,
        sl: w.sl,
        dlid_path_bits: 0,
    }
}

/// `ibv_ack_cq_events`: counts `nevents` completion events of `cq` as
/// acknowledged (`ibv_destroy_cq` of a CQ on a channel waits for them in
/// libibverbs). A pointer that is not a live CQ is ignored.
///
/// # Safety
///
/// None beyond what the C signature implies: the pointer is checked.
#[no_mangle]
pub unsafe extern "C" fn ibv_ack_cq_events(cq: *mut IbvCq, nevents: u32) {
    if !CQS.contains(cq) {
        return;
    }
    // Events the driver counts too: a CQ with events not acknowledged
    // cannot be destroyed.
    if let Some(Some(driver)) = live_cq(cq) {
        let _ = driver.ack_events(nevents);
    }
    // SAFETY: a live CQ's box; its mutex and condition were initialised
    // when it was made and are used only through these calls.
    unsafe {
        let c = &mut *cq;
        libc::pthread_mutex_lock(&mut c.mutex);
        c.comp_events_completed = c.comp_events_completed.wrapping_add(nevents);
        libc::pthread_cond_signal(&mut c.cond);
        libc::pthread_mutex_unlock(&mut c.mutex);
    }
}

/// `IBV_WC_EX_WITH_*` the interface can read: byte length, immediate
/// data, QP number, source QP, SLID, SL, DLID path bits. Timestamps,
/// VLANs, flow tags and tag matching are not kept.
const WC_EX_SUPPORTED: u64 = (1 << 7) - 1;
/// `IBV_CQ_INIT_ATTR_MASK_FLAGS` and `_PD`.
const CQ_ATTR_FLAGS: u32 = 1 << 0;
const CQ_ATTR_PD: u32 = 1 << 1;
/// `IBV_CREATE_CQ_ATTR_SINGLE_THREADED`: a promise, which changes nothing
/// here.
const CQ_SINGLE_THREADED: u32 = 1 << 0;

/// The context's `create_cq_ex` (the header's inline `ibv_create_cq_ex`):
/// a CQ as [`ibv_create_cq`] makes it, whose `struct ibv_cq_ex` polling
/// interface is filled. NULL with `errno`: `EOPNOTSUPP` for completion
/// fields the interface does not keep (timestamps, VLAN, flow tag, tag
/// matching), a parent domain or flags other than single-threaded;
/// `EINVAL` for a NULL `attr` or unknown mask bits; as [`ibv_create_cq`]
/// otherwise.
///
/// # Safety
///
/// `attr` is NULL or points to a `struct ibv_cq_init_attr_ex`.
pub(crate) unsafe extern "C" fn create_cq_ex(
    context: *mut IbvContext,
    attr: *mut IbvCqInitAttrEx,
) -> *mut IbvCqEx {
    if attr.is_null() {
        return errno::fail(libc::EINVAL);
    }
    // SAFETY: non-NULL, and the structure by the caller's promise.
    let a = unsafe { &*attr };
    if a.comp_mask & !(CQ_ATTR_FLAGS | CQ_ATTR_PD) != 0 {
        return errno::fail(libc::EINVAL);
    }
    let flags = if a.comp_mask & CQ_ATTR_FLAGS != 0 {
        a.flags
    } else {
        0
    };
    let pd = a.comp_mask & CQ_ATTR_PD != 0 && !a.parent_domain.is_null();
    if a.wc_flags & !WC_EX_SUPPORTED != 0 || flags & !CQ_SINGLE_THREADED != 0 || pd {
        return errno::fail(libc::EOPNOTSUPP);
    }
    new_cq(
        context,
        a.cqe,
        a.cq_context,
        a.channel.cast(),
        a.comp_vector,
    )
    .cast()
}

/// The current completion of the extended polling interface of `cq`.
///
/// # Safety
///
/// `cq` is a live CQ of this library.
pub(crate) unsafe fn current(cq: *mut IbvCqEx) -> *mut IbvWc {
    // SAFETY: the caller's promise.
    unsafe { (*cq.cast::<Cq>()).current.get() }
}

/// The driver's CQ behind `cq`, unchecked, for the polling calls.
///
/// # Safety
///
/// `cq` is a live CQ of this library.
pub(crate) unsafe fn driver_cq(cq: *mut IbvCqEx) -> Option<&'static AnyCq> {
    // SAFETY: the caller's promise.
    unsafe { (*cq.cast::<Cq>()).cq.as_ref() }
}

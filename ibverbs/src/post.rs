//! Posting work requests: the context's `post_send` and `post_recv`,
//! which the header's inline `ibv_post_send` and `ibv_post_recv` call,
//! and the SRQ's receive lists.
//!
//! A list goes to the driver in batches of up to [`BATCH`] requests, one
//! doorbell each. The program's gather lists are handed over as they are
//! (rnic-driver's `Sge` is laid out as `struct ibv_sge`); so is the
//! inline data of a request with one gather entry, which is most of them.

use rnic_verbs::provider::QueuePair;
use std::ffi::c_int;

use crate::any::AnyQp;
use rnic_verbs::{send_flags, Payload, PostError, RecvWr, RemoteAddr, SendOp, SendWr, Sge};
use static_assertions::const_assert_eq;

use crate::abi::{IbvQp, IbvRecvWr, IbvSendWr, IbvSge};
use crate::qp::driver_qp;

/// Requests per driver call, and so per doorbell.
pub(crate) const BATCH: usize = 32;
/// SGEs one request may carry here (the device allows fewer).
const MAX_SGE: usize = 64;
/// Inline bytes one request may carry here (a QP allows fewer).
pub(crate) const MAX_INLINE: usize = 1024;
/// `IBV_SEND_INLINE`.
pub(crate) const SEND_INLINE: u32 = 1 << 3;

const_assert_eq!(size_of::<Sge>(), size_of::<IbvSge>());
const_assert_eq!(
    std::mem::offset_of!(Sge, addr),
    std::mem::offset_of!(IbvSge, addr)
);
const_assert_eq!(
    std::mem::offset_of!(Sge, length),
    std::mem::offset_of!(IbvSge, length)
);
const_assert_eq!(
    std::mem::offset_of!(Sge, lkey),
    std::mem::offset_of!(IbvSge, lkey)
);

/// The program's list of `n` SGEs at `list`, as the driver's; `None` if
/// too many or NULL.
///
/// # Safety
///
/// `list` points to `n` entries if `n > 0`, valid for `'a`.
unsafe fn sges<'a>(list: *const IbvSge, n: c_int) -> Option<&'a [Sge]> {
    let n = usize::try_from(n).ok().filter(|&n| n <= MAX_SGE)?;
    if n == 0 {
        return Some(&[]);
    }
    if list.is_null() {
        return None;
    }
    // SAFETY: the caller's promise: `n` entries; Sge and IbvSge have one
    // layout (asserted above).
    Some(unsafe { std::slice::from_raw_parts(list.cast::<Sge>(), n) })
}

/// The inline bytes of the gather list `list`: the one entry's bytes where
/// they are, or several gathered into `buf`. `EINVAL` past
/// [`MAX_INLINE`] (or `buf`).
///
/// # Safety
///
/// The entries' bytes are readable at their addresses (inline data needs
/// no MR), valid for `'a`.
pub(crate) unsafe fn inline_bytes<'a>(list: &[Sge], buf: &'a mut [u8]) -> Result<&'a [u8], c_int> {
    let total: u64 = list.iter().map(|s| u64::from(s.length)).sum();
    if total > MAX_INLINE as u64 || (list.len() > 1 && total > buf.len() as u64) {
        return Err(libc::EINVAL);
    }
    match list {
        [] => Ok(&[]),
        // SAFETY: the caller's promise.
        [one] => Ok(unsafe { bytes(one) }),
        _ => {
            let mut n = 0;
            for s in list {
                // SAFETY: the caller's promise.
                let b = unsafe { bytes(s) };
                buf[n..n + b.len()].copy_from_slice(b);
                n += b.len();
            }
            Ok(&buf[..n])
        }
    }
}

/// The bytes an SGE names.
///
/// # Safety
///
/// They are readable, valid for `'a`.
unsafe fn bytes<'a>(s: &Sge) -> &'a [u8] {
    if s.length == 0 {
        return &[];
    }
    // SAFETY: the caller's promise.
    unsafe { std::slice::from_raw_parts(s.addr as *const u8, s.length as usize) }
}

/// The driver's operation for `w`, or an `errno` value.
///
/// # Safety
///
/// `w` is a send request as libibverbs defines it.
unsafe fn op_of(qp: &AnyQp, w: &IbvSendWr) -> Result<SendOp, c_int> {
    // SAFETY: the union's member follows the opcode, as libibverbs reads
    // it; all members are plain data.
    let (rdma, atomic, ud) = unsafe { (w.wr.rdma, w.wr.atomic, w.wr.ud) };
    let remote = RemoteAddr {
        addr: rdma.remote_addr,
        rkey: rdma.rkey,
    };
    let imm = w.imm_data.to_ne_bytes();
    if qp.qp_type().is_datagram() {
        let imm = match w.opcode {
            2 => None,
            3 => Some(imm),
            _ => return Err(libc::EINVAL),
        };
        let dest =
            crate::ah::ud_dest(ud.ah.cast(), ud.remote_qpn, ud.remote_qkey).ok_or(libc::EINVAL)?;
        return Ok(SendOp::UdSend { dest, imm });
    }
    let atomic_remote = RemoteAddr {
        addr: atomic.remote_addr,
        rkey: atomic.rkey,
    };
    Ok(match w.opcode {
        0 => SendOp::RdmaWrite { remote },
        1 => SendOp::RdmaWriteWithImm { remote, imm },
        2 => SendOp::Send,
        3 => SendOp::SendWithImm { imm },
        4 => SendOp::RdmaRead { remote },
        5 => SendOp::AtomicCmpAndSwp {
            remote: atomic_remote,
            compare: atomic.compare_add,
            swap: atomic.swap,
        },
        6 => SendOp::AtomicFetchAndAdd {
            remote: atomic_remote,
            add: atomic.compare_add,
        },
        7 => SendOp::LocalInv { rkey: w.imm_data },
        // SAFETY: a BIND_MW request's member.
        8 => crate::mw::bind_op(unsafe { &w.ext.bind_mw })?,
        9 => SendOp::SendWithInv { rkey: w.imm_data },
        _ => return Err(libc::EINVAL),
    })
}

/// Posts `wrs` (the requests at `ptrs`), one doorbell. 0, or the `errno`
/// value with `*bad_wr` the first request not posted.
///
/// # Safety
///
/// `bad_wr` is NULL or writable.
unsafe fn flush<T>(
    post: impl Fn(&[T]) -> Result<(), PostError>,
    wrs: &[T],
    ptrs: &[*mut T::C],
    bad_wr: *mut *mut T::C,
) -> c_int
where
    T: Listed,
{
    if wrs.is_empty() {
        return 0;
    }
    match post(wrs) {
        Ok(()) => 0,
        Err(e) => {
            // SAFETY: the caller's promise.
            unsafe { set_bad(bad_wr, ptrs[e.index.min(ptrs.len() - 1)]) };
            e.error.errno()
        }
    }
}

/// A driver request type and the C request it comes from.
trait Listed {
    type C;
}
impl Listed for SendWr<'_> {
    type C = IbvSendWr;
}
impl Listed for RecvWr<'_> {
    type C = IbvRecvWr;
}

/// `*bad_wr = p`, if `bad_wr` is not NULL.
///
/// # Safety
///
/// `bad_wr` is NULL or writable.
unsafe fn set_bad<C>(bad_wr: *mut *mut C, p: *mut C) {
    if !bad_wr.is_null() {
        // SAFETY: the caller's promise.
        unsafe { *bad_wr = p };
    }
}

const NO_SEND: SendWr<'static> = SendWr {
    wr_id: 0,
    op: SendOp::Send,
    payload: Payload::Sgl(&[]),
    flags: 0,
};

/// The context's `post_send` (the header's inline `ibv_post_send`): posts
/// the list `wr`, in order. 0, or an `errno` value with `*bad_wr` the
/// first request not posted (those before it are): `EINVAL` for an
/// unknown opcode or flag, too many SGEs or inline bytes, a UD send whose
/// AH is not live or whose opcode is not a SEND, a bind of a window or MR
/// that is not live, or what the driver refuses; `ENOMEM` when the send
/// queue is full.
///
/// # Safety
///
/// `qp` is a QP of this library (the inline caller has read its context
/// through it); `wr` is a valid list as libibverbs defines it, its
/// buffers readable; `bad_wr` is NULL or writable.
pub(crate) unsafe extern "C" fn post_send(
    qp: *mut IbvQp,
    wr: *mut IbvSendWr,
    bad_wr: *mut *mut IbvSendWr,
) -> c_int {
    // SAFETY: the caller's promise: one of our QPs, alive while used.
    let Some(driver) = (unsafe { driver_qp(qp) }) else {
        return libc::EINVAL;
    };
    let post = |w: &[SendWr<'_>]| driver.post_send(w);
    let mut wrs = [NO_SEND; BATCH];
    let mut ptrs = [std::ptr::null_mut(); BATCH];
    let mut n = 0;
    let mut cur = wr;
    while !cur.is_null() {
        // SAFETY: the caller's promise: a valid list.
        let w = unsafe { &*cur };
        // Inline data gathered from several entries goes in a batch of its
        // own, with its buffer.
        let gathers = w.send_flags & SEND_INLINE != 0 && w.num_sge > 1;
        if n == BATCH || (gathers && n > 0) {
            // SAFETY: the caller's promise.
            let code = unsafe { flush(post, &wrs[..n], &ptrs[..n], bad_wr) };
            if code != 0 {
                return code;
            }
            n = 0;
        }
        let code = if gathers {
            let mut buf = [0u8; MAX_INLINE];
            // SAFETY: the caller's promise: its SGEs and buffers.
            match unsafe { send_wr(driver, w, &mut buf) } {
                // SAFETY: the caller's promise.
                Ok(s) => unsafe { flush(post, &[s], &[cur], bad_wr) },
                Err(code) => code,
            }
        } else {
            // SAFETY: the caller's promise: its SGEs and buffers; with one
            // entry at most, inline data is read where it is.
            match unsafe { send_wr(driver, w, &mut [0; 0]) } {
                Ok(s) => {
                    wrs[n] = s;
                    ptrs[n] = cur;
                    n += 1;
                    0
                }
                Err(code) => {
                    // SAFETY: the caller's promise.
                    let first = unsafe { flush(post, &wrs[..n], &ptrs[..n], bad_wr) };
                    if first != 0 {
                        return first;
                    }
                    code
                }
            }
        };
        if code != 0 {
            // SAFETY: the caller's promise.
            unsafe { set_bad(bad_wr, cur) };
            return code;
        }
        cur = w.next;
    }
    // SAFETY: the caller's promise.
    unsafe { flush(post, &wrs[..n], &ptrs[..n], bad_wr) }
}

/// The driver's request for `w`; inline data from several entries is
/// gathered into `gathered`.
///
/// # Safety
///
/// As for [`post_send`], for `w`, whose buffers stay valid for `'a`.
unsafe fn send_wr<'a>(
    qp: &AnyQp,
    w: &IbvSendWr,
    gathered: &'a mut [u8],
) -> Result<SendWr<'a>, c_int> {
    if w.send_flags & !(send_flags::ALL | SEND_INLINE) != 0 {
        return Err(libc::EINVAL);
    }
    // SAFETY: the caller's promise.
    let list = unsafe { sges(w.sg_list, w.num_sge) }.ok_or(libc::EINVAL)?;
    // SAFETY: the caller's promise.
    let op = unsafe { op_of(qp, w) }?;
    let payload = if w.send_flags & SEND_INLINE != 0 {
        // SAFETY: the caller's promise: inline data is readable at the
        // SGEs' addresses.
        Payload::Inline(unsafe { inline_bytes(list, gathered) }?)
    } else {
        Payload::Sgl(list)
    };
    Ok(SendWr {
        wr_id: w.wr_id,
        op,
        payload,
        flags: w.send_flags & send_flags::ALL,
    })
}

/// The context's `post_recv` (the header's inline `ibv_post_recv`): posts
/// the list `wr`, in order. 0, or an `errno` value with `*bad_wr` the
/// first request not posted: `EINVAL` for too many SGEs or what the
/// driver refuses; `ENOMEM` when the receive queue is full.
///
/// # Safety
///
/// `qp` is a QP of this library; `wr` is a valid list as libibverbs
/// defines it; `bad_wr` is NULL or writable.
pub(crate) unsafe extern "C" fn post_recv(
    qp: *mut IbvQp,
    wr: *mut IbvRecvWr,
    bad_wr: *mut *mut IbvRecvWr,
) -> c_int {
    // SAFETY: the caller's promise: one of our QPs, alive while used.
    let Some(driver) = (unsafe { driver_qp(qp) }) else {
        return libc::EINVAL;
    };
    // SAFETY: the caller's promise, passed on.
    unsafe { post_recv_list(wr, bad_wr, |r| driver.post_recv(r)) }
}

const NO_RECV: RecvWr<'static> = RecvWr {
    wr_id: 0,
    sg_list: &[],
};

/// Posts the receive list `wr` with `post`, in batches, in order. 0, or
/// an `errno` value with `*bad_wr` the first request not posted (`EINVAL`
/// for too many SGEs; `post`'s error).
///
/// # Safety
///
/// `wr` is a valid list as libibverbs defines it; `bad_wr` is NULL or
/// writable.
pub(crate) unsafe fn post_recv_list(
    wr: *mut IbvRecvWr,
    bad_wr: *mut *mut IbvRecvWr,
    post: impl Fn(&[RecvWr<'_>]) -> Result<(), PostError>,
) -> c_int {
    let mut wrs = [NO_RECV; BATCH];
    let mut ptrs = [std::ptr::null_mut(); BATCH];
    let mut n = 0;
    let mut cur = wr;
    while !cur.is_null() {
        if n == BATCH {
            // SAFETY: the caller's promise.
            let code = unsafe { flush(&post, &wrs[..n], &ptrs[..n], bad_wr) };
            if code != 0 {
                return code;
            }
            n = 0;
        }
        // SAFETY: the caller's promise: a valid list.
        let w = unsafe { &*cur };
        // SAFETY: as above: its SGEs, valid during this call.
        let Some(list) = (unsafe { sges(w.sg_list, w.num_sge) }) else {
            // SAFETY: the caller's promise.
            let first = unsafe { flush(&post, &wrs[..n], &ptrs[..n], bad_wr) };
            if first != 0 {
                return first;
            }
            // SAFETY: the caller's promise.
            unsafe { set_bad(bad_wr, cur) };
            return libc::EINVAL;
        };
        wrs[n] = RecvWr {
            wr_id: w.wr_id,
            sg_list: list,
        };
        ptrs[n] = cur;
        n += 1;
        cur = w.next;
    }
    // SAFETY: the caller's promise.
    unsafe { flush(&post, &wrs[..n], &ptrs[..n], bad_wr) }
}

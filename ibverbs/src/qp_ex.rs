//! The work-request interface of `struct ibv_qp_ex`: the `wr_*` entries
//! the header's inline `ibv_wr_start`, `ibv_wr_send`, `ibv_wr_set_sge`,
//! `ibv_wr_complete` and the rest call. Requests are built between
//! `wr_start` and `wr_complete` (or `wr_abort`), then posted as one list,
//! a doorbell per [`BATCH`] requests.
//!
//! Each operation starts a request with the QP's `wr_id` and `wr_flags`;
//! the `wr_set_*` calls that follow give it its data (copied: the
//! program's SGE lists and inline buffers are its own again when a call
//! returns) and, on UD, its destination. A request the device cannot take
//! makes `wr_complete` fail with its `errno` value and post nothing.

use rnic_verbs::provider::QueuePair;
use std::ffi::{c_int, c_void};
use std::ops::Range;

use rnic_verbs::{send_flags, Payload, RemoteAddr, SendOp, SendWr, Sge};

use crate::abi::{IbvAh, IbvDataBuf, IbvMw, IbvMwBindInfo, IbvQp, IbvQpEx, IbvSge, WrBindMw};
use crate::post::{inline_bytes, BATCH, MAX_INLINE, SEND_INLINE};
use crate::qp::{driver_qp, Qp};

/// `IBV_QP_EX_WITH_*` served: RDMA WRITE (with immediate), SEND (with
/// immediate, with invalidate), RDMA READ, both atomics, local
/// invalidate, memory-window bind. Not TSO, not atomic write.
pub(crate) const SEND_OPS: u64 = 0x3ff;

/// A request being built.
#[derive(Debug, Clone)]
struct Pending {
    wr_id: u64,
    flags: u32,
    op: SendOp,
    data: Data,
}

/// Where a pending request's data is, in its builder.
#[derive(Debug, Clone, Default)]
enum Data {
    #[default]
    None,
    Sgl(Range<usize>),
    Inline(Range<usize>),
}

/// The requests a QP's interface is building; its buffers keep their
/// room from one list to the next.
#[derive(Debug, Default)]
pub(crate) struct Builder {
    reqs: Vec<Pending>,
    sges: Vec<Sge>,
    inline: Vec<u8>,
    /// The first error of this list: `wr_complete` returns it.
    error: c_int,
    started: bool,
}

impl Builder {
    fn clear(&mut self) {
        self.reqs.clear();
        self.sges.clear();
        self.inline.clear();
        self.error = 0;
    }

    fn fail(&mut self, e: c_int) {
        if self.error == 0 {
            self.error = e;
        }
    }

    /// Starts a request of `op`.
    fn push(&mut self, wr_id: u64, flags: u32, op: SendOp) {
        if !self.started {
            return self.fail(libc::EINVAL);
        }
        if flags & !(send_flags::ALL | SEND_INLINE) != 0 {
            self.fail(libc::EINVAL);
        }
        self.reqs.push(Pending {
            wr_id,
            flags,
            op,
            data: Data::None,
        });
    }

    /// The request being built, if one is.
    fn last(&mut self) -> Option<&mut Pending> {
        let r = self.reqs.last_mut();
        if r.is_none() {
            self.error = if self.error == 0 {
                libc::EINVAL
            } else {
                self.error
            };
        }
        r
    }

    fn set_sges(&mut self, list: &[Sge]) {
        let start = self.sges.len();
        self.sges.extend_from_slice(list);
        let end = self.sges.len();
        if let Some(r) = self.last() {
            r.data = Data::Sgl(start..end);
        }
    }

    /// Copies the inline `bufs`.
    fn set_inline(&mut self, bufs: &[(*const u8, usize)]) {
        let total: usize = bufs.iter().map(|b| b.1).sum();
        if total > MAX_INLINE {
            return self.fail(libc::EINVAL);
        }
        let start = self.inline.len();
        for &(p, n) in bufs {
            if n > 0 {
                // SAFETY: the program's promise (the caller's): `n`
                // readable bytes at `p`.
                self.inline
                    .extend_from_slice(unsafe { std::slice::from_raw_parts(p, n) });
            }
        }
        let end = self.inline.len();
        if let Some(r) = self.last() {
            r.data = Data::Inline(start..end);
        }
    }

    /// The driver's request for `r`, its data in this builder.
    fn wr(&self, r: &Pending) -> SendWr<'_> {
        let payload = match &r.data {
            Data::None => Payload::Sgl(&[]),
            Data::Sgl(g) => Payload::Sgl(&self.sges[g.clone()]),
            Data::Inline(g) => Payload::Inline(&self.inline[g.clone()]),
        };
        SendWr {
            wr_id: r.wr_id,
            op: r.op,
            payload,
            flags: r.flags & send_flags::ALL,
        }
    }
}

/// The QP's builder.
///
/// # Safety
///
/// `qp` is a live QP of this library, posted on by this thread alone.
unsafe fn builder<'a>(qp: *mut IbvQpEx) -> &'a mut Builder {
    // SAFETY: the caller's promise.
    unsafe { &mut *(*qp.cast::<Qp>()).wr.get() }
}

/// Starts a request of `op` with the QP's `wr_id` and `wr_flags`.
///
/// # Safety
///
/// As for [`builder`].
unsafe fn start(qp: *mut IbvQpEx, op: SendOp) {
    // SAFETY: the caller's promise.
    let (wr_id, flags) = unsafe { ((*qp).wr_id, (*qp).wr_flags) };
    // SAFETY: the caller's promise.
    unsafe { builder(qp) }.push(wr_id, flags, op);
}

/// The `struct ibv_qp_ex` of a QP whose `struct ibv_qp` is `base`.
pub(crate) fn interface(base: IbvQp) -> IbvQpEx {
    IbvQpEx {
        qp_base: base,
        comp_mask: 0,
        wr_id: 0,
        wr_flags: 0,
        wr_atomic_cmp_swp: wr_atomic_cmp_swp as *mut c_void,
        wr_atomic_fetch_add: wr_atomic_fetch_add as *mut c_void,
        wr_bind_mw: wr_bind_mw as *mut c_void,
        wr_local_inv: wr_local_inv as *mut c_void,
        wr_rdma_read: wr_rdma_read as *mut c_void,
        wr_rdma_write: wr_rdma_write as *mut c_void,
        wr_rdma_write_imm: wr_rdma_write_imm as *mut c_void,
        wr_send: wr_send as *mut c_void,
        wr_send_imm: wr_send_imm as *mut c_void,
        wr_send_inv: wr_send_inv as *mut c_void,
        wr_send_tso: wr_unsupported as *mut c_void,
        wr_set_ud_addr: wr_set_ud_addr as *mut c_void,
        wr_set_xrc_srqn: wr_unsupported as *mut c_void,
        wr_set_inline_data: wr_set_inline_data as *mut c_void,
        wr_set_inline_data_list: wr_set_inline_data_list as *mut c_void,
        wr_set_sge: wr_set_sge as *mut c_void,
        wr_set_sge_list: wr_set_sge_list as *mut c_void,
        wr_start: wr_start as *mut c_void,
        wr_complete: wr_complete as *mut c_void,
        wr_abort: wr_abort as *mut c_void,
        wr_atomic_write: wr_unsupported as *mut c_void,
    }
}

/// Defines `wr_*` operations that start a request of one operation.
macro_rules! operations {
    ($($name:ident($($arg:ident: $ty:ty),*) => $op:expr;)*) => {$(
        #[doc = concat!("`", stringify!($name), "`: starts a request of that operation.")]
        ///
        /// # Safety
        ///
        /// `qp` is a QP of this library, posted on by this thread alone.
        unsafe extern "C" fn $name(qp: *mut IbvQpEx, $($arg: $ty),*) {
            // SAFETY: the caller's promise.
            unsafe { start(qp, $op) }
        }
    )*};
}

operations! {
    wr_atomic_cmp_swp(rkey: u32, remote_addr: u64, compare: u64, swap: u64) =>
        SendOp::AtomicCmpAndSwp { remote: RemoteAddr { addr: remote_addr, rkey }, compare, swap };
    wr_atomic_fetch_add(rkey: u32, remote_addr: u64, add: u64) =>
        SendOp::AtomicFetchAndAdd { remote: RemoteAddr { addr: remote_addr, rkey }, add };
    wr_local_inv(invalidate_rkey: u32) => SendOp::LocalInv { rkey: invalidate_rkey };
    wr_rdma_read(rkey: u32, remote_addr: u64) =>
        SendOp::RdmaRead { remote: RemoteAddr { addr: remote_addr, rkey } };
    wr_rdma_write(rkey: u32, remote_addr: u64) =>
        SendOp::RdmaWrite { remote: RemoteAddr { addr: remote_addr, rkey } };
    wr_rdma_write_imm(rkey: u32, remote_addr: u64, imm: u32) =>
        SendOp::RdmaWriteWithImm { remote: RemoteAddr { addr: remote_addr, rkey }, imm: imm.to_ne_bytes() };
    wr_send() => SendOp::Send;
    wr_send_imm(imm: u32) => SendOp::SendWithImm { imm: imm.to_ne_bytes() };
    wr_send_inv(invalidate_rkey: u32) => SendOp::SendWithInv { rkey: invalidate_rkey };
}

/// `wr_bind_mw`: starts the bind of window `mw` to `bind_info` under
/// `rkey` (a type 2 window's next key; see `post_send`'s
/// `IBV_WR_BIND_MW`). A window or MR that is not live, or a key of
/// another index, fails the list with `EINVAL`.
///
/// # Safety
///
/// As for the operations; `bind_info` is NULL or points to a `struct
/// ibv_mw_bind_info`.
unsafe extern "C" fn wr_bind_mw(
    qp: *mut IbvQpEx,
    mw: *mut IbvMw,
    rkey: u32,
    bind_info: *const IbvMwBindInfo,
) {
    if bind_info.is_null() {
        // SAFETY: the caller's promise.
        return unsafe { builder(qp) }.fail(libc::EINVAL);
    }
    let w = WrBindMw {
        mw: mw.cast(),
        rkey,
        // SAFETY: non-NULL, and the structure by the caller's promise.
        bind_info: unsafe { *bind_info },
    };
    match crate::mw::bind_op(&w) {
        // SAFETY: the caller's promise.
        Ok(op) => unsafe { start(qp, op) },
        Err(e) => {
            // The request still counts, so that the next set_* calls are
            // its.
            // SAFETY: the caller's promise.
            unsafe { start(qp, SendOp::Send) };
            // SAFETY: the caller's promise.
            unsafe { builder(qp) }.fail(e);
        }
    }
}

/// `wr_set_ud_addr`: the UD destination of the request being built (a
/// SEND, with immediate or not). An AH that is not live, or another
/// operation, fails the list with `EINVAL`.
///
/// # Safety
///
/// As for the operations.
unsafe extern "C" fn wr_set_ud_addr(
    qp: *mut IbvQpEx,
    ah: *mut IbvAh,
    remote_qpn: u32,
    remote_qkey: u32,
) {
    // SAFETY: the caller's promise.
    let b = unsafe { builder(qp) };
    let Some(dest) = crate::ah::ud_dest(ah, remote_qpn, remote_qkey) else {
        return b.fail(libc::EINVAL);
    };
    let Some(r) = b.last() else {
        return;
    };
    let imm = match r.op {
        SendOp::Send => None,
        SendOp::SendWithImm { imm } => Some(imm),
        _ => return b.fail(libc::EINVAL),
    };
    r.op = SendOp::UdSend { dest, imm };
}

/// `wr_set_sge`: the request's gather (or scatter) list is one entry.
///
/// # Safety
///
/// As for the operations.
unsafe extern "C" fn wr_set_sge(qp: *mut IbvQpEx, lkey: u32, addr: u64, length: u32) {
    // SAFETY: the caller's promise.
    unsafe { builder(qp) }.set_sges(&[Sge { addr, length, lkey }]);
}

/// `wr_set_sge_list`: the request's list is `sg_list`'s `num_sge`
/// entries, copied.
///
/// # Safety
///
/// As for the operations; `sg_list` points to `num_sge` entries.
unsafe extern "C" fn wr_set_sge_list(qp: *mut IbvQpEx, num_sge: usize, sg_list: *const IbvSge) {
    // SAFETY: the caller's promise.
    let b = unsafe { builder(qp) };
    if num_sge > 0 && sg_list.is_null() {
        return b.fail(libc::EINVAL);
    }
    let list: Vec<Sge> = (0..num_sge)
        .map(|i| {
            // SAFETY: the caller's promise: `num_sge` entries.
            let s = unsafe { *sg_list.add(i) };
            Sge {
                addr: s.addr,
                length: s.length,
                lkey: s.lkey,
            }
        })
        .collect();
    b.set_sges(&list);
}

/// `wr_set_inline_data`: the request carries `length` bytes at `addr`,
/// copied now. More than [`MAX_INLINE`] fails the list with `EINVAL`.
///
/// # Safety
///
/// As for the operations; `length` bytes are readable at `addr`.
unsafe extern "C" fn wr_set_inline_data(qp: *mut IbvQpEx, addr: *const c_void, length: usize) {
    // SAFETY: the caller's promise.
    unsafe { builder(qp) }.set_inline(&[(addr.cast(), length)]);
}

/// `wr_set_inline_data_list`: as [`wr_set_inline_data`], for the
/// `num_buf` buffers of `buf_list`, in order.
///
/// # Safety
///
/// As for the operations; `buf_list` points to `num_buf` readable
/// buffers.
unsafe extern "C" fn wr_set_inline_data_list(
    qp: *mut IbvQpEx,
    num_buf: usize,
    buf_list: *const IbvDataBuf,
) {
    // SAFETY: the caller's promise.
    let b = unsafe { builder(qp) };
    if num_buf > 0 && buf_list.is_null() {
        return b.fail(libc::EINVAL);
    }
    let bufs: Vec<(*const u8, usize)> = (0..num_buf)
        // SAFETY: the caller's promise: `num_buf` entries.
        .map(|i| unsafe { *buf_list.add(i) })
        .map(|d| (d.addr.cast_const().cast(), d.length))
        .collect();
    b.set_inline(&bufs);
}

/// `wr_send_tso`, `wr_set_xrc_srqn`, `wr_atomic_write`: operations rnic
/// does not serve (`ibv_create_qp_ex` refuses QPs that ask for them): the
/// list fails with `EOPNOTSUPP`.
///
/// # Safety
///
/// As for the operations.
unsafe extern "C" fn wr_unsupported(qp: *mut IbvQpEx) {
    // SAFETY: the caller's promise.
    unsafe { builder(qp) }.fail(libc::EOPNOTSUPP);
}

/// `wr_start`: begins a list.
///
/// # Safety
///
/// As for the operations.
unsafe extern "C" fn wr_start(qp: *mut IbvQpEx) {
    // SAFETY: the caller's promise.
    let b = unsafe { builder(qp) };
    b.clear();
    b.started = true;
}

/// `wr_abort`: drops the list.
///
/// # Safety
///
/// As for the operations.
unsafe extern "C" fn wr_abort(qp: *mut IbvQpEx) {
    // SAFETY: the caller's promise.
    let b = unsafe { builder(qp) };
    b.clear();
    b.started = false;
}

/// `wr_complete`: posts the list. 0, or an `errno` value: the first error
/// a call of the list met (then nothing is posted), `EINVAL` without
/// `wr_start`, or the driver's (the requests before the one it refused
/// are posted: `ENOMEM` for a full send queue).
///
/// # Safety
///
/// As for the operations.
unsafe extern "C" fn wr_complete(qp: *mut IbvQpEx) -> c_int {
    // SAFETY: the caller's promise.
    let b = unsafe { builder(qp) };
    let code = if !b.started {
        libc::EINVAL
    } else if b.error != 0 {
        b.error
    } else {
        // SAFETY: the caller's promise.
        match unsafe { driver_qp(qp.cast()) } {
            None => libc::EINVAL,
            Some(driver) => post(b, |w| driver.post_send(w).map_err(|e| e.error.errno())),
        }
    };
    b.clear();
    b.started = false;
    code
}

/// Posts `b`'s requests with `post`, [`BATCH`] at a time, inline data
/// longer than a request may carry refused on the way.
fn post(b: &Builder, post: impl Fn(&[SendWr<'_>]) -> Result<(), c_int>) -> c_int {
    const NONE: SendWr<'static> = SendWr {
        wr_id: 0,
        op: SendOp::Send,
        payload: Payload::Sgl(&[]),
        flags: 0,
    };
    for chunk in b.reqs.chunks(BATCH) {
        let mut wrs = [NONE; BATCH];
        for (w, r) in wrs.iter_mut().zip(chunk) {
            *w = b.wr(r);
            // An inline request's bytes are checked against the limit
            // when they are set; a gather list given with the inline flag
            // is read now, as post_send reads it.
            if let (Payload::Sgl(list), true) = (w.payload, r.flags & SEND_INLINE != 0) {
                // SAFETY: the program's promise for inline data: readable
                // at the SGEs' addresses (one entry; several are refused
                // without a buffer to gather them in).
                match unsafe { inline_bytes(list, &mut []) } {
                    Ok(bytes) => w.payload = Payload::Inline(bytes),
                    Err(e) => return e,
                }
            }
        }
        if let Err(e) = post(&wrs[..chunk.len()]) {
            return e;
        }
    }
    0
}

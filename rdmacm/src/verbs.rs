//! The verbs librdmacm uses, from the drop-in `libibverbs.so.1` it is
//! linked with (or, in its own tests, any libibverbs), and the calls
//! `infiniband/verbs.h` makes inline through a context's operations.

use std::ffi::{c_int, c_void};

use rnic_verbs_abi::{
    IbvAh, IbvAhAttr, IbvCompChannel, IbvContext, IbvCq, IbvDevice, IbvDeviceAttr, IbvGid, IbvMr,
    IbvPd, IbvPortAttr, IbvQp, IbvQpAttr, IbvQpInitAttr, IbvRecvWr, IbvSendWr, IbvWc, OP_POLL_CQ,
    OP_POST_RECV, OP_POST_SEND, OP_REQ_NOTIFY_CQ,
};

#[link(name = "ibverbs")]
extern "C" {
    pub fn ibv_get_device_list(num: *mut c_int) -> *mut *mut IbvDevice;
    pub fn ibv_free_device_list(list: *mut *mut IbvDevice);
    pub fn ibv_open_device(device: *mut IbvDevice) -> *mut IbvContext;
    pub fn ibv_query_gid(ctx: *mut IbvContext, port: u8, index: c_int, gid: *mut IbvGid) -> c_int;
    pub fn ibv_query_port(ctx: *mut IbvContext, port: u8, attr: *mut IbvPortAttr) -> c_int;
    pub fn ibv_query_device(ctx: *mut IbvContext, attr: *mut IbvDeviceAttr) -> c_int;
    pub fn ibv_alloc_pd(ctx: *mut IbvContext) -> *mut IbvPd;
    pub fn ibv_create_comp_channel(ctx: *mut IbvContext) -> *mut IbvCompChannel;
    pub fn ibv_create_cq(
        ctx: *mut IbvContext,
        cqe: c_int,
        cq_context: *mut c_void,
        channel: *mut IbvCompChannel,
        comp_vector: c_int,
    ) -> *mut IbvCq;
    pub fn ibv_destroy_comp_channel(channel: *mut IbvCompChannel) -> c_int;
    pub fn ibv_destroy_cq(cq: *mut IbvCq) -> c_int;
    pub fn ibv_get_cq_event(
        channel: *mut IbvCompChannel,
        cq: *mut *mut IbvCq,
        cq_context: *mut *mut c_void,
    ) -> c_int;
    pub fn ibv_ack_cq_events(cq: *mut IbvCq, n: u32);
    pub fn ibv_reg_mr(pd: *mut IbvPd, addr: *mut c_void, len: usize, access: c_int) -> *mut IbvMr;
    pub fn ibv_create_qp(pd: *mut IbvPd, attr: *mut IbvQpInitAttr) -> *mut IbvQp;
    pub fn ibv_destroy_qp(qp: *mut IbvQp) -> c_int;
    pub fn ibv_modify_qp(qp: *mut IbvQp, attr: *mut IbvQpAttr, mask: c_int) -> c_int;
    pub fn ibv_create_ah(pd: *mut IbvPd, attr: *mut IbvAhAttr) -> *mut IbvAh;
}

/// The drop-in libibverbs' `rnic_create_gsi_qp`, looked up when first
/// needed: another libibverbs has none (NULL then, `ENOSYS`).
pub fn create_gsi_qp(pd: *mut IbvPd, attr: *mut IbvQpInitAttr) -> *mut IbvQp {
    type F = unsafe extern "C" fn(*mut IbvPd, *mut IbvQpInitAttr) -> *mut IbvQp;
    // SAFETY: dlsym with a NUL-terminated name; RTLD_DEFAULT searches the
    // program's scope.
    let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"rnic_create_gsi_qp".as_ptr()) };
    if f.is_null() {
        // SAFETY: errno of this thread.
        unsafe { *libc::__errno_location() = libc::ENOSYS };
        return std::ptr::null_mut();
    }
    // SAFETY: rnic's libibverbs defines it with this signature.
    let f: F = unsafe { std::mem::transmute::<*mut c_void, F>(f) };
    // SAFETY: the caller's pointers, as ibv_create_qp takes them.
    unsafe { f(pd, attr) }
}

/// Entry `op` of the operations of the context `ctx`.
///
/// # Safety
///
/// `ctx` is a live context.
unsafe fn op(ctx: *mut IbvContext, op: usize) -> *mut c_void {
    // SAFETY: the caller's promise.
    unsafe { (*ctx).ops[op] }
}

/// `ibv_post_send`.
///
/// # Safety
///
/// `qp` is live and `wr` a valid list.
pub unsafe fn post_send(qp: *mut IbvQp, wr: *mut IbvSendWr) -> c_int {
    type F = unsafe extern "C" fn(*mut IbvQp, *mut IbvSendWr, *mut *mut IbvSendWr) -> c_int;
    let mut bad = std::ptr::null_mut();
    // SAFETY: the slot holds the provider's post_send.
    unsafe {
        let f: F = std::mem::transmute::<*mut c_void, F>(op((*qp).context, OP_POST_SEND));
        f(qp, wr, &mut bad)
    }
}

/// `ibv_post_recv`.
///
/// # Safety
///
/// `qp` is live and `wr` a valid list.
pub unsafe fn post_recv(qp: *mut IbvQp, wr: *mut IbvRecvWr) -> c_int {
    type F = unsafe extern "C" fn(*mut IbvQp, *mut IbvRecvWr, *mut *mut IbvRecvWr) -> c_int;
    let mut bad = std::ptr::null_mut();
    // SAFETY: the slot holds the provider's post_recv.
    unsafe {
        let f: F = std::mem::transmute::<*mut c_void, F>(op((*qp).context, OP_POST_RECV));
        f(qp, wr, &mut bad)
    }
}

/// `ibv_poll_cq`.
///
/// # Safety
///
/// `cq` is live and `wc` holds `n` entries.
pub unsafe fn poll_cq(cq: *mut IbvCq, n: c_int, wc: *mut IbvWc) -> c_int {
    type F = unsafe extern "C" fn(*mut IbvCq, c_int, *mut IbvWc) -> c_int;
    // SAFETY: the slot holds the provider's poll_cq.
    unsafe {
        let f: F = std::mem::transmute::<*mut c_void, F>(op((*cq).context, OP_POLL_CQ));
        f(cq, n, wc)
    }
}

/// `ibv_req_notify_cq`.
///
/// # Safety
///
/// `cq` is live.
pub unsafe fn req_notify_cq(cq: *mut IbvCq, solicited: c_int) -> c_int {
    type F = unsafe extern "C" fn(*mut IbvCq, c_int) -> c_int;
    // SAFETY: the slot holds the provider's req_notify_cq.
    unsafe {
        let f: F = std::mem::transmute::<*mut c_void, F>(op((*cq).context, OP_REQ_NOTIFY_CQ));
        f(cq, solicited)
    }
}

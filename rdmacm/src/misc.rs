//! The rest of librdmacm's interface: event names, the device list,
//! options, and what rnic does not serve yet, which fails with the error
//! librdmacm gives where a kernel lacks it (`ENOSYS`) and never touches
//! the program's memory.

use std::ffi::{c_char, c_int, c_void};

use rnic_verbs_abi::IbvContext;

use crate::abi::{event, RdmaAddrinfo, RdmaCmId, RAI_NUMERICHOST, RAI_PASSIVE};
use crate::cm::cm;
use crate::errno;

/// `rdma_event_str`: the name of an event type.
#[no_mangle]
pub extern "C" fn rdma_event_str(ev: c_int) -> *const c_char {
    let s: &'static std::ffi::CStr = match ev {
        event::ADDR_RESOLVED => c"RDMA_CM_EVENT_ADDR_RESOLVED",
        event::ADDR_ERROR => c"RDMA_CM_EVENT_ADDR_ERROR",
        event::ROUTE_RESOLVED => c"RDMA_CM_EVENT_ROUTE_RESOLVED",
        event::ROUTE_ERROR => c"RDMA_CM_EVENT_ROUTE_ERROR",
        event::CONNECT_REQUEST => c"RDMA_CM_EVENT_CONNECT_REQUEST",
        event::CONNECT_RESPONSE => c"RDMA_CM_EVENT_CONNECT_RESPONSE",
        event::CONNECT_ERROR => c"RDMA_CM_EVENT_CONNECT_ERROR",
        event::UNREACHABLE => c"RDMA_CM_EVENT_UNREACHABLE",
        event::REJECTED => c"RDMA_CM_EVENT_REJECTED",
        event::ESTABLISHED => c"RDMA_CM_EVENT_ESTABLISHED",
        event::DISCONNECTED => c"RDMA_CM_EVENT_DISCONNECTED",
        event::DEVICE_REMOVAL => c"RDMA_CM_EVENT_DEVICE_REMOVAL",
        event::MULTICAST_JOIN => c"RDMA_CM_EVENT_MULTICAST_JOIN",
        event::MULTICAST_ERROR => c"RDMA_CM_EVENT_MULTICAST_ERROR",
        event::ADDR_CHANGE => c"RDMA_CM_EVENT_ADDR_CHANGE",
        event::TIMEWAIT_EXIT => c"RDMA_CM_EVENT_TIMEWAIT_EXIT",
        _ => c"UNKNOWN EVENT",
    };
    s.as_ptr()
}

/// `rdma_get_devices`: a NULL-terminated array of the contexts
/// librdmacm opened, one per device (`num_devices` their count if not
/// NULL).
///
/// # Safety
///
/// `num_devices` is NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_devices(num_devices: *mut c_int) -> *mut *mut IbvContext {
    let mut st = cm().lock();
    st.open_all();
    let mut v: Vec<*mut IbvContext> = st.ports.iter().map(|p| p.ctx).collect();
    if !num_devices.is_null() {
        // SAFETY: checked, writable by the caller's promise.
        unsafe { *num_devices = v.len() as c_int };
    }
    v.push(std::ptr::null_mut());
    Box::into_raw(v.into_boxed_slice()).cast()
}

/// `rdma_free_devices`: frees an array of [`rdma_get_devices`].
///
/// # Safety
///
/// `list` came from [`rdma_get_devices`].
#[no_mangle]
pub unsafe extern "C" fn rdma_free_devices(list: *mut *mut IbvContext) {
    if list.is_null() {
        return;
    }
    let mut n = 0;
    // SAFETY: NULL-terminated.
    while !unsafe { *list.add(n) }.is_null() {
        n += 1;
    }
    // SAFETY: the boxed slice of n + 1 entries made above.
    drop(unsafe { Box::from_raw(std::ptr::slice_from_raw_parts_mut(list, n + 1)) });
}

/// `rdma_set_option`: the ID options (type of service, address reuse,
/// IPv6 only, ACK timeout) are taken and change nothing here; the IB
/// path option fails with `ENOSYS`.
#[no_mangle]
pub extern "C" fn rdma_set_option(
    _id: *mut RdmaCmId,
    level: c_int,
    optname: c_int,
    _optval: *mut c_void,
    _optlen: usize,
) -> c_int {
    match (level, optname) {
        (0, 0..=3) => 0,
        _ => errno::fail(libc::ENOSYS),
    }
}

/// Symbols of librdmacm rnic does not serve yet: each fails with
/// `ENOSYS` (-1, or NULL where it returns a pointer).
macro_rules! unserved {
    ($($name:ident),* $(,)?) => {$(
        #[doc = concat!("`", stringify!($name), "`: not served yet (`ENOSYS`).")]
        #[no_mangle]
        pub extern "C" fn $name() -> c_int {
            errno::fail(libc::ENOSYS)
        }
    )*};
}

unserved!(
    rdma_create_qp_ex,
    rdma_create_srq,
    rdma_create_srq_ex,
    rdma_destroy_srq,
    rdma_join_multicast,
    rdma_join_multicast_ex,
    rdma_leave_multicast,
    rdma_migrate_id,
    rdma_notify,
    rdma_set_local_ece,
    rdma_get_remote_ece,
    rdma_reject_ece,
    rsocket,
    rbind,
    rlisten,
    raccept,
    rconnect,
    rshutdown,
    rclose,
    rrecv,
    rrecvfrom,
    rrecvmsg,
    rsend,
    rsendto,
    rsendmsg,
    rread,
    rreadv,
    rwrite,
    rwritev,
    rpoll,
    rselect,
    rgetpeername,
    rgetsockname,
    rsetsockopt,
    rgetsockopt,
    rfcntl,
    riomap,
    riounmap,
    riowrite,
);

/// `rdma_getaddrinfo`: the address of `node` and `service` (IPv4 or
/// IPv6, of the family `hints` ask, as `getaddrinfo` resolves them) as a
/// destination, or with `RAI_PASSIVE`
/// in `hints` as a source (the wildcard without `node`), for the QP type
/// and port space of `hints` (RC and `RDMA_PS_TCP` by default). 0, or a
/// `getaddrinfo` error code (`EAI_*`).
///
/// # Safety
///
/// `node` and `service` are NULL or C strings; `hints` NULL or a
/// `struct rdma_addrinfo`; `res` writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_getaddrinfo(
    node: *const c_char,
    service: *const c_char,
    hints: *const RdmaAddrinfo,
    res: *mut *mut RdmaAddrinfo,
) -> c_int {
    if res.is_null() || (node.is_null() && service.is_null()) {
        return libc::EAI_NONAME;
    }
    // SAFETY: NULL or the caller's hints.
    let h = unsafe { hints.as_ref() };
    let flags = h.map_or(0, |h| h.ai_flags);
    let passive = flags & RAI_PASSIVE != 0;
    // SAFETY: all-zero is valid `struct addrinfo` hints.
    let mut ah: libc::addrinfo = unsafe { std::mem::zeroed() };
    ah.ai_family = match h.map_or(0, |h| h.ai_family) {
        f @ (libc::AF_INET | libc::AF_INET6) => f,
        _ => libc::AF_UNSPEC,
    };
    ah.ai_socktype = libc::SOCK_STREAM;
    if passive {
        ah.ai_flags |= libc::AI_PASSIVE;
    }
    if flags & RAI_NUMERICHOST != 0 {
        ah.ai_flags |= libc::AI_NUMERICHOST;
    }
    let mut ai: *mut libc::addrinfo = std::ptr::null_mut();
    // SAFETY: C strings or NULL, valid hints, a result pointer to write.
    let r = unsafe { libc::getaddrinfo(node, service, &ah, &mut ai) };
    if r != 0 {
        return r;
    }
    // SAFETY: getaddrinfo succeeded: `ai` is a list of at least one,
    // whose address is `ai_addrlen` bytes of an IPv4 or IPv6 one.
    let (family, addr, len) = unsafe {
        let a = &*ai;
        (
            a.ai_family,
            boxed_addr(a.ai_addr, a.ai_addrlen),
            a.ai_addrlen,
        )
    };
    // SAFETY: the list getaddrinfo made.
    unsafe { libc::freeaddrinfo(ai) };
    let mut rai = Box::new(RdmaAddrinfo {
        ai_flags: flags,
        ai_family: family,
        ai_qp_type: h.map_or(0, |h| h.ai_qp_type),
        ai_port_space: h.map_or(0, |h| h.ai_port_space),
        ai_src_len: 0,
        ai_dst_len: 0,
        ai_src_addr: std::ptr::null_mut(),
        ai_dst_addr: std::ptr::null_mut(),
        ai_src_canonname: std::ptr::null_mut(),
        ai_dst_canonname: std::ptr::null_mut(),
        ai_route_len: 0,
        ai_route: std::ptr::null_mut(),
        ai_connect_len: 0,
        ai_connect: std::ptr::null_mut(),
        ai_next: std::ptr::null_mut(),
    });
    if rai.ai_qp_type == 0 {
        rai.ai_qp_type = 2;
    }
    if rai.ai_port_space == 0 {
        rai.ai_port_space = c_int::from(rnic_cm::cma::port_space::TCP);
    }
    if passive {
        rai.ai_src_addr = addr;
        rai.ai_src_len = len;
    } else {
        rai.ai_dst_addr = addr;
        rai.ai_dst_len = len;
        // A source the hints name goes with it.
        if let Some(src) = h.filter(|h| !h.ai_src_addr.is_null() && h.ai_src_len == len) {
            // SAFETY: the hints' source address, of the destination's size.
            rai.ai_src_addr = unsafe { boxed_addr(src.ai_src_addr, len) };
            rai.ai_src_len = len;
        }
    }
    // SAFETY: checked writable.
    unsafe { *res = Box::into_raw(rai) };
    0
}

/// A copy of the `len` bytes of `sa` (at most an IPv6 address's) in a
/// box that holds either family, which `rdma_freeaddrinfo` frees.
///
/// # Safety
///
/// `sa` points to `len` readable bytes.
unsafe fn boxed_addr(sa: *const libc::sockaddr, len: libc::socklen_t) -> *mut libc::sockaddr {
    // SAFETY: all-zero is a valid socket address.
    let mut b: Box<libc::sockaddr_in6> = Box::new(unsafe { std::mem::zeroed() });
    let n = (len as usize).min(std::mem::size_of::<libc::sockaddr_in6>());
    // SAFETY: `n` bytes readable (the caller's promise) into a box of at
    // least `n`.
    unsafe {
        std::ptr::copy_nonoverlapping(
            sa.cast::<u8>(),
            (&mut *b as *mut libc::sockaddr_in6).cast::<u8>(),
            n,
        )
    };
    Box::into_raw(b).cast()
}

/// `rdma_freeaddrinfo`: frees a list [`rdma_getaddrinfo`] made.
///
/// # Safety
///
/// `res` is NULL or from [`rdma_getaddrinfo`].
#[no_mangle]
pub unsafe extern "C" fn rdma_freeaddrinfo(res: *mut RdmaAddrinfo) {
    let mut p = res;
    while !p.is_null() {
        // SAFETY: a node we made.
        let rai = unsafe { Box::from_raw(p) };
        for a in [rai.ai_src_addr, rai.ai_dst_addr] {
            if !a.is_null() {
                // SAFETY: an address `boxed_addr` made.
                drop(unsafe { Box::from_raw(a.cast::<libc::sockaddr_in6>()) });
            }
        }
        p = rai.ai_next;
    }
}

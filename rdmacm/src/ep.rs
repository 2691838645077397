//! Endpoints, librdmacm's synchronous shortcut (`rdma_create_ep`,
//! `rdma_get_request`, `rdma_destroy_ep`): an ID made without a channel,
//! bound or resolved from an `rdma_getaddrinfo` result, with its QP (and
//! CQs) made at once; a passive endpoint keeps the QP attributes and makes
//! a QP like them for each connection request it hands out.

use std::ffi::c_int;

use rnic_verbs_abi::{IbvPd, IbvQpInitAttr};

use crate::abi::{event, RdmaAddrinfo, RdmaCmId, RAI_PASSIVE};
use crate::cm::cm;
use crate::errno;
use crate::id::{
    complete, is_sync, rdma_bind_addr, rdma_create_id, rdma_create_qp, rdma_destroy_id,
    rdma_destroy_qp, rdma_resolve_addr, rdma_resolve_route,
};

/// What a passive endpoint keeps: the QP attributes and PD of
/// `rdma_create_ep`.
#[derive(Debug)]
pub(crate) struct Endpoint {
    attr: IbvQpInitAttr,
    pd: *mut IbvPd,
}

/// How long an endpoint waits to resolve an address or route (as
/// librdmacm's 2 s).
const RESOLVE_MS: c_int = 2000;

/// `rdma_create_ep`: a synchronous ID from `res`: bound (passive) or with
/// its address and route resolved, and, for an active one with
/// `qp_init_attr`, its QP (and CQs if the attributes name none). 0, or -1
/// with `errno`.
///
/// # Safety
///
/// `id` is writable; `res` an `rdma_getaddrinfo` result; `pd` NULL or a
/// PD; `qp_init_attr` NULL or QP attributes.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_ep(
    id: *mut *mut RdmaCmId,
    res: *mut RdmaAddrinfo,
    pd: *mut IbvPd,
    qp_init_attr: *mut IbvQpInitAttr,
) -> c_int {
    // SAFETY: the caller's result, if not NULL.
    let Some(r) = (unsafe { res.as_ref() }) else {
        return errno::fail(libc::EINVAL);
    };
    if id.is_null() {
        return errno::fail(libc::EINVAL);
    }
    // SAFETY: NULL or the caller's attributes: the QP is of the result's
    // type, as librdmacm makes it.
    if let Some(a) = unsafe { qp_init_attr.as_mut() } {
        a.qp_type = r.ai_qp_type;
    }
    let mut p = std::ptr::null_mut();
    // SAFETY: a new synchronous ID.
    if unsafe {
        rdma_create_id(
            std::ptr::null_mut(),
            &mut p,
            std::ptr::null_mut(),
            r.ai_port_space,
        )
    } != 0
    {
        return -1;
    }
    let made = if r.ai_flags & RAI_PASSIVE != 0 {
        // SAFETY: the new ID and the result's source address.
        let bound = unsafe { rdma_bind_addr(p, r.ai_src_addr) };
        // SAFETY: NULL or the caller's attributes, plain data.
        if let (0, Some(a)) = (bound, unsafe { qp_init_attr.as_ref() }) {
            let mut st = cm().lock();
            if let Some(s) = st.ids.get_mut(&(p as usize)) {
                // SAFETY: a bitwise copy of a C structure of plain fields.
                let attr = unsafe { std::ptr::read(a) };
                s.ep = Some(Box::new(Endpoint { attr, pd }));
            }
        }
        bound
    } else {
        // SAFETY: the new ID and the result's addresses.
        unsafe {
            let ok = rdma_resolve_addr(p, r.ai_src_addr, r.ai_dst_addr, RESOLVE_MS) == 0
                && rdma_resolve_route(p, RESOLVE_MS) == 0
                && (qp_init_attr.is_null() || rdma_create_qp(p, pd, qp_init_attr) == 0);
            if ok {
                0
            } else {
                -1
            }
        }
    };
    if made != 0 {
        let e = std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EINVAL);
        // SAFETY: the ID made above, which nothing else holds.
        unsafe { rdma_destroy_id(p) };
        return errno::fail(e);
    }
    // SAFETY: checked writable.
    unsafe { *id = p };
    0
}

/// `rdma_get_request`: waits for a connection request on a synchronous
/// listener; the new ID (itself synchronous, its event kept in
/// `id->event`) gets a QP like the endpoint's if it was made with one.
///
/// # Safety
///
/// `listen` is a live synchronous listening ID; `id` writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_request(listen: *mut RdmaCmId, id: *mut *mut RdmaCmId) -> c_int {
    if id.is_null() || !is_sync(listen) {
        return errno::fail(libc::EINVAL);
    }
    if let Err(e) = complete(listen, event::CONNECT_REQUEST) {
        return errno::fail(e);
    }
    // SAFETY: the listener's kept event, a connection request.
    let (new, ev) = unsafe {
        (
            (*(*listen).event).id,
            std::mem::replace(&mut (*listen).event, std::ptr::null_mut()),
        )
    };
    // The new ID waits on a channel of its own, the request kept as its
    // event.
    let ch = crate::channel::rdma_create_event_channel();
    if ch.is_null() {
        return -1;
    }
    let ep = {
        let mut st = cm().lock();
        if let Some(s) = st.ids.get_mut(&(new as usize)) {
            s.sync = true;
        }
        st.ids
            .get(&(listen as usize))
            .and_then(|s| s.ep.as_ref())
            // SAFETY: a bitwise copy of a C structure of plain fields.
            .map(|e| (unsafe { std::ptr::read(&e.attr) }, e.pd))
    };
    // SAFETY: the new ID, not yet the program's; the event is ours.
    unsafe {
        (*new).channel = ch;
        (*new).event = ev;
    }
    if let Some((mut attr, pd)) = ep {
        // SAFETY: the new ID and attributes like the endpoint's.
        if unsafe { rdma_create_qp(new, pd, &mut attr) } != 0 {
            let e = std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EINVAL);
            // SAFETY: the new ID, refused: nothing else holds it.
            unsafe { rdma_destroy_id(new) };
            return errno::fail(e);
        }
    }
    // SAFETY: checked writable.
    unsafe { *id = new };
    0
}

/// `rdma_destroy_ep`: frees the endpoint's QP (and the CQs made with it)
/// and the ID.
///
/// # Safety
///
/// `id` is a live ID.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_ep(id: *mut RdmaCmId) {
    // SAFETY: the caller's live ID.
    unsafe {
        rdma_destroy_qp(id);
        rdma_destroy_id(id);
    }
}

//! Communication identifiers and what a program does with them: bind,
//! resolve, make a QP, connect, listen, accept, reject, disconnect,
//! destroy. Connections are RC (`RDMA_PS_TCP`, `RDMA_PS_IB`), datagram
//! services UD (`RDMA_PS_UDP`, resolved by SIDR); the address is IPv4 (an
//! IPv4-mapped GID of the device's port 1).

use std::ffi::{c_int, c_void};

use rnic_cm::cma::{self, CmaHdr};
use rnic_cm::manager::{ConnectParams, Gid};
use rnic_cm::path::PathRepr;
use rnic_cm::rep::RepRepr;
use rnic_cm::req::{transport, ReqRepr};
use rnic_verbs_abi::{IbvPd, IbvQp, IbvQpAttr, IbvQpInitAttr};

use crate::abi::{
    event, IbvSaPathRec, RdmaAddr, RdmaCmId, RdmaConnParam, RdmaEventChannel, RdmaIbAddr,
    RdmaRoute, RDMA_UDP_QKEY,
};
use crate::cm::{cm, deliver, event_for, random_psn, to_error, IdState, Phase, State};
use crate::errno;
use crate::port::{is_ipv4, sgid_index, Port};
use crate::verbs;

/// IBV_QPT_RC.
const QPT_RC: c_int = 2;
/// IBV_QPT_UD.
pub(crate) const QPT_UD: c_int = 4;
/// How long the other side's CM takes to answer, as rdma_cm says
/// (`CMA_CM_RESPONSE_TIMEOUT`: 4.096 µs · 2^20, about 4.3 s).
const CM_RESPONSE_TIMEOUT: u8 = 20;
/// Times a REQ is sent again (`CMA_MAX_CM_RETRIES`).
const MAX_CM_RETRIES: u8 = 15;
/// The QPs' local ACK timeout (4.096 µs · 2^19, about 2.1 s), the
/// kernel's on RoCE.
const ACK_TIMEOUT: u8 = 19;

/// A new ID on `channel` (all else zero).
pub(crate) fn new_id(
    channel: *mut RdmaEventChannel,
    context: *mut c_void,
    ps: c_int,
) -> *mut RdmaCmId {
    // SAFETY: every field of the C structure is a pointer, an integer or
    // a socket address, for which all-zero is valid (NULL, 0, AF_UNSPEC).
    let mut id: Box<RdmaCmId> = Box::new(unsafe { std::mem::zeroed() });
    id.channel = channel;
    id.context = context;
    id.ps = ps;
    id.qp_type = QPT_RC;
    Box::into_raw(id)
}

/// Writes an IP address (16 bytes, IPv4 in the last 4) and a port into
/// `sa`, keeping its port if `port` is `None`.
pub(crate) fn set_addr(
    sa: &mut libc::sockaddr_storage,
    ip_version: u8,
    addr: &[u8; 16],
    port: Option<u16>,
) {
    let keep = port_of(sa);
    let port = port.unwrap_or(keep);
    if ip_version == 4 {
        // SAFETY: a sockaddr_storage holds a sockaddr_in.
        let sin = unsafe { &mut *(sa as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
        sin.sin_family = libc::AF_INET as libc::sa_family_t;
        sin.sin_port = port.to_be();
        sin.sin_addr.s_addr = u32::from_ne_bytes(addr[12..].try_into().expect("4 bytes"));
    } else {
        // SAFETY: a sockaddr_storage holds a sockaddr_in6.
        let sin6 =
            unsafe { &mut *(sa as *mut libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
        sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
        sin6.sin6_port = port.to_be();
        sin6.sin6_addr.s6_addr = *addr;
    }
}

/// The port of a socket address (0 for none).
fn port_of(sa: &libc::sockaddr_storage) -> u16 {
    match c_int::from(sa.ss_family) {
        // SAFETY: an AF_INET address is a sockaddr_in.
        libc::AF_INET => u16::from_be(unsafe {
            (*(sa as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>()).sin_port
        }),
        // SAFETY: an AF_INET6 address is a sockaddr_in6.
        libc::AF_INET6 => u16::from_be(unsafe {
            (*(sa as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>()).sin6_port
        }),
        _ => 0,
    }
}

/// The GID a socket address names: the IPv4-mapped GID of an IPv4
/// address, an IPv6 address as it is (the wildcards `::ffff:0.0.0.0` and
/// `::`); `None` for another family or NULL.
fn gid_of(sa: *const libc::sockaddr) -> Option<Gid> {
    if sa.is_null() {
        return None;
    }
    // SAFETY: a socket address of at least a family.
    match c_int::from(unsafe { (*sa).sa_family }) {
        libc::AF_INET => {
            // SAFETY: an AF_INET address is a sockaddr_in.
            let sin = unsafe { &*sa.cast::<libc::sockaddr_in>() };
            Some(mapped(sin.sin_addr.s_addr.to_ne_bytes()))
        }
        libc::AF_INET6 => {
            // SAFETY: an AF_INET6 address is a sockaddr_in6.
            Some(unsafe { (*sa.cast::<libc::sockaddr_in6>()).sin6_addr.s6_addr })
        }
        _ => None,
    }
}

/// The port of a socket address `gid_of` read.
fn sa_port(sa: *const libc::sockaddr) -> u16 {
    // SAFETY: `gid_of` checked the family; both keep the port at the same
    // offset, read through the family's own structure.
    unsafe {
        if c_int::from((*sa).sa_family) == libc::AF_INET {
            u16::from_be((*sa.cast::<libc::sockaddr_in>()).sin_port)
        } else {
            u16::from_be((*sa.cast::<libc::sockaddr_in6>()).sin6_port)
        }
    }
}

/// Whether `g` is a wildcard address (`0.0.0.0` or `::`).
fn is_any(g: &Gid) -> bool {
    *g == mapped([0; 4]) || *g == [0; 16]
}

/// 4 or 6: the IP version of an address as a GID.
pub(crate) fn ip_version(g: &Gid) -> u8 {
    if is_ipv4(g) {
        4
    } else {
        6
    }
}

/// The IPv4-mapped GID of `ip`.
fn mapped(ip: [u8; 4]) -> Gid {
    let mut g = [0u8; 16];
    g[10..12].fill(0xff);
    g[12..].copy_from_slice(&ip);
    g
}

/// An address in rdma_cm's header: IPv4 in the last 4 bytes, the rest
/// zero, as the kernel writes it; IPv6 as it is.
fn cma_addr(g: &Gid) -> [u8; 16] {
    if is_ipv4(g) {
        let mut a = [0; 16];
        a[12..].copy_from_slice(&g[12..]);
        a
    } else {
        *g
    }
}

/// The path record from port `p` to `dgid`.
pub(crate) fn path_record(p: &Port, dgid: Gid) -> IbvSaPathRec {
    let mut r = IbvSaPathRec {
        dlid: 0xffff,
        slid: 0xffff,
        hop_limit: 64,
        reversible: 1,
        numb_path: 1,
        pkey: 0xffffu16.to_be(),
        mtu_selector: 2,
        mtu: p.mtu,
        rate_selector: 2,
        rate: 0,
        packet_life_time_selector: 2,
        packet_life_time: ACK_TIMEOUT - 1,
        ..IbvSaPathRec::default()
    };
    r.dgid.raw = dgid;
    r.sgid.raw = p.sgid_for(&dgid);
    r
}

/// The other side of a connection, for the QP's transitions.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Remote {
    /// Its QP.
    pub qpn: u32,
    /// The starting PSN its REQ or REP carried: the PSN it expects first,
    /// so the one our QP sends from (each side sends from the PSN the
    /// other's message names, as the kernel's CM does: the captures of
    /// tests/vectors/cm show it).
    pub psn: u32,
    /// Its port's GID.
    pub gid: Gid,
    /// The path MTU (`enum ibv_mtu`).
    pub mtu: u8,
    /// READs and atomics our QP answers at once.
    pub dest_rd_atomic: u8,
    /// READs and atomics our QP has outstanding.
    pub rd_atomic: u8,
    /// RNR retries.
    pub rnr_retry: u8,
    /// Transport retries.
    pub retry: u8,
}

/// Brings `id`'s QP (in INIT) to RTS towards `r`, expecting PSN `psn`
/// first and sending from the one the other side's message named;
/// `Err(errno)` if a transition fails. A missing QP is left to the
/// program (`rdma_init_qp_attr`).
pub(crate) fn qp_to_rts(id: *mut RdmaCmId, r: &Remote, psn: u32) -> Result<(), c_int> {
    // SAFETY: a live ID.
    let qp = unsafe { (*id).qp };
    if qp.is_null() {
        return Ok(());
    }
    let modify = |a: &mut IbvQpAttr, mask: c_int| {
        // SAFETY: a live QP and attributes.
        if unsafe { verbs::ibv_modify_qp(qp, a, mask) } != 0 {
            Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EINVAL))
        } else {
            Ok(())
        }
    };
    // INIT again: the remote access the connection allows.
    let mut a = IbvQpAttr {
        qp_state: 1,
        qp_access_flags: access(r.dest_rd_atomic),
        ..IbvQpAttr::default()
    };
    modify(&mut a, 1 | 1 << 3)?;
    let mut a = IbvQpAttr {
        qp_state: 2,
        path_mtu: r.mtu.into(),
        dest_qp_num: r.qpn,
        rq_psn: psn,
        max_dest_rd_atomic: r.dest_rd_atomic,
        min_rnr_timer: 12,
        ..IbvQpAttr::default()
    };
    a.ah_attr.is_global = 1;
    a.ah_attr.port_num = 1;
    a.ah_attr.dlid = 0;
    a.ah_attr.grh.dgid.raw = r.gid;
    a.ah_attr.grh.sgid_index = sgid_index(&r.gid);
    a.ah_attr.grh.hop_limit = 64;
    // STATE, AV, PATH_MTU, RQ_PSN, MAX_DEST_RD_ATOMIC, MIN_RNR_TIMER,
    // DEST_QPN.
    modify(
        &mut a,
        1 | 1 << 7 | 1 << 8 | 1 << 12 | 1 << 17 | 1 << 15 | 1 << 20,
    )?;
    let mut a = IbvQpAttr {
        qp_state: 3,
        sq_psn: r.psn,
        timeout: ACK_TIMEOUT,
        retry_cnt: r.retry.min(7),
        rnr_retry: r.rnr_retry.min(7),
        max_rd_atomic: r.rd_atomic,
        ..IbvQpAttr::default()
    };
    // STATE, TIMEOUT, RETRY_CNT, RNR_RETRY, SQ_PSN, MAX_QP_RD_ATOMIC.
    modify(&mut a, 1 | 1 << 9 | 1 << 10 | 1 << 11 | 1 << 16 | 1 << 13)
}

/// Remote access of a connection whose QP answers `dest_rd_atomic`
/// READs and atomics: writes always, reads and atomics if any (the
/// kernel's `cm_init_qp_init_attr`).
fn access(dest_rd_atomic: u8) -> u32 {
    let write = 2;
    if dest_rd_atomic > 0 {
        write | 4 | 8
    } else {
        write
    }
}

/// Runs `f` on `id`'s state under the lock; `EINVAL` if `id` is not ours.
fn with_id<T>(
    id: *mut RdmaCmId,
    f: impl FnOnce(&mut State, &mut IdState) -> Result<T, c_int>,
) -> Result<T, c_int> {
    let mut st = cm().lock();
    let Some(mut s) = st.ids.remove(&(id as usize)) else {
        return Err(libc::EINVAL);
    };
    let r = f(&mut st, &mut s);
    st.ids.insert(id as usize, s);
    r
}

/// 0, or -1 with `errno` set to `e`.
fn result(r: Result<(), c_int>) -> c_int {
    match r {
        Ok(()) => 0,
        Err(e) => errno::fail(e),
    }
}

/// `rdma_create_id`: a new ID on `channel` in port space `ps`.
///
/// # Safety
///
/// `id` is writable; `channel` is NULL or a live channel.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_id(
    channel: *mut RdmaEventChannel,
    id: *mut *mut RdmaCmId,
    context: *mut c_void,
    ps: c_int,
) -> c_int {
    if id.is_null() {
        return errno::fail(libc::EINVAL);
    }
    // Without a channel, a synchronous ID: a channel of its own, on which
    // its calls wait for their events.
    let sync = channel.is_null();
    let channel = if sync {
        let ch = crate::channel::rdma_create_event_channel();
        if ch.is_null() {
            return -1;
        }
        ch
    } else {
        channel
    };
    if !matches!(
        ps as u16,
        cma::port_space::TCP | cma::port_space::IB | cma::port_space::UDP
    ) {
        // IPoIB's port space is not served.
        return errno::fail(libc::EPROTONOSUPPORT);
    }
    let p = new_id(channel, context, ps);
    if ps as u16 == cma::port_space::UDP {
        // SAFETY: the new ID, ours alone.
        unsafe { (*p).qp_type = QPT_UD };
    }
    cm().lock().ids.insert(
        p as usize,
        IdState {
            psn: random_psn(),
            sync,
            ..IdState::default()
        },
    );
    // SAFETY: checked writable.
    unsafe { *id = p };
    0
}

/// `rdma_destroy_id`: ends what the ID does (a connection is
/// disconnected, a request rejected, a listener stops) and frees it.
///
/// # Safety
///
/// `id` is NULL or a live ID, whose events are all acknowledged.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_id(id: *mut RdmaCmId) -> c_int {
    let cm = cm();
    let mut st = cm.lock();
    let Some(s) = st.ids.remove(&(id as usize)) else {
        return errno::fail(libc::EINVAL);
    };
    if let (Some(port), Some(comm)) = (s.port, s.comm_id) {
        st.conns.remove(&(port, comm));
    }
    s.leave(&mut st.ports, cm.now());
    if let Some(sid) = s.service_id {
        st.listeners.retain(|_, v| *v != id as usize);
        let still = st.listeners.keys().any(|(_, k)| *k == sid);
        if !still {
            for p in &mut st.ports {
                p.manager.unlisten(sid);
            }
        }
    }
    drop(st);
    cm.kick();
    if s.sync {
        // SAFETY: the ID is ours; its kept event, if any, is one of ours,
        // and its channel its own.
        unsafe {
            if !(*id).event.is_null() {
                crate::channel::rdma_ack_cm_event((*id).event);
            }
            crate::channel::rdma_destroy_event_channel((*id).channel);
        }
    }
    // SAFETY: ours, and gone from the state: nothing else holds it.
    drop(unsafe { Box::from_raw(id) });
    drop(s.path);
    0
}

/// Whether `id` is synchronous.
pub(crate) fn is_sync(id: *mut RdmaCmId) -> bool {
    cm().lock().ids.get(&(id as usize)).is_some_and(|s| s.sync)
}

/// A synchronous ID's wait: the next event on its channel, kept in
/// `id->event` (the one kept before acknowledged); `Err(errno)` unless it
/// is `want` with status 0.
pub(crate) fn complete(id: *mut RdmaCmId, want: c_int) -> Result<(), c_int> {
    let mut ev = std::ptr::null_mut();
    // SAFETY: a live ID and its channel; `ev` to write.
    if unsafe { crate::channel::rdma_get_cm_event((*id).channel, &mut ev) } != 0 {
        return Err(std::io::Error::last_os_error()
            .raw_os_error()
            .unwrap_or(libc::EIO));
    }
    // SAFETY: the event just taken; the ID's old one is ours to free.
    let (ty, status) = unsafe {
        let old = std::mem::replace(&mut (*id).event, ev);
        if !old.is_null() {
            crate::channel::rdma_ack_cm_event(old);
        }
        ((*ev).event, (*ev).status)
    };
    match (ty == want, status) {
        (true, 0) => Ok(()),
        (true, s) if s < 0 => Err(-s),
        _ => Err(match ty {
            event::REJECTED => libc::ECONNREFUSED,
            event::UNREACHABLE => libc::ENETUNREACH,
            _ => libc::EPROTO,
        }),
    }
}

/// For a synchronous ID, waits for `want` after a call that succeeded.
fn finish(id: *mut RdmaCmId, r: c_int, want: c_int) -> c_int {
    if r != 0 || !is_sync(id) {
        return r;
    }
    result(complete(id, want))
}

/// `rdma_bind_addr`: binds `id` to a local address (a device's, or the
/// wildcard) and port (0: one is chosen).
///
/// # Safety
///
/// `id` is a live ID; `addr` a socket address.
#[no_mangle]
pub unsafe extern "C" fn rdma_bind_addr(id: *mut RdmaCmId, addr: *mut libc::sockaddr) -> c_int {
    let Some(g) = gid_of(addr) else {
        return errno::fail(if addr.is_null() {
            libc::EINVAL
        } else {
            libc::EAFNOSUPPORT
        });
    };
    let port = sa_port(addr);
    result(with_id(id, |st, s| {
        st.open_all();
        let dev = if is_any(&g) {
            None
        } else {
            Some(st.port_with(&g).ok_or(libc::EADDRNOTAVAIL)?)
        };
        s.port = dev;
        let port = if port == 0 { ephemeral() } else { port };
        // SAFETY: a live ID, under the lock.
        unsafe {
            set_addr(&mut (*id).route.addr.src, ip_version(&g), &g, Some(port));
            if let Some(d) = dev {
                (*id).verbs = st.ports[d].ctx;
                (*id).pd = st.ports[d].pd;
                (*id).port_num = 1;
                (*id).route.addr.ibaddr.sgid.raw = g;
            }
        }
        Ok(())
    }))
}

/// An ephemeral port.
fn ephemeral() -> u16 {
    32768 + (random_psn() % 28232) as u16
}

/// `rdma_resolve_addr`: chooses the device to reach `dst` (IPv4, or
/// IPv6 through the port's link-local GID) from: the one bound, the one
/// with address `src` if given, the one that is `dst`, for IPv4 one on
/// `dst`'s /24, else the first; event `ADDR_RESOLVED`.
///
/// # Safety
///
/// `id` is a live ID; `src` NULL or a socket address; `dst` one.
#[no_mangle]
pub unsafe extern "C" fn rdma_resolve_addr(
    id: *mut RdmaCmId,
    src: *mut libc::sockaddr,
    dst: *mut libc::sockaddr,
    _timeout_ms: c_int,
) -> c_int {
    let Some(dgid) = gid_of(dst) else {
        return errno::fail(if dst.is_null() {
            libc::EINVAL
        } else {
            libc::EAFNOSUPPORT
        });
    };
    let dst_port = sa_port(dst);
    let sgid = gid_of(src).filter(|g| !is_any(g));
    if sgid.is_some_and(|g| ip_version(&g) != ip_version(&dgid)) {
        return errno::fail(libc::EINVAL);
    }
    let r = with_id(id, |st, s| {
        st.open_all();
        let port = match (s.port, sgid) {
            (Some(p), _) => p,
            (None, Some(g)) => st.port_with(&g).ok_or(libc::EADDRNOTAVAIL)?,
            (None, None) => st
                .port_with(&dgid)
                .or_else(|| {
                    let net = |g: &Gid| is_ipv4(g) && g[..15] == dgid[..15];
                    st.ports.iter().position(|p| net(&p.gid))
                })
                .or(if st.ports.is_empty() { None } else { Some(0) })
                .ok_or(libc::ENODEV)?,
        };
        s.port = Some(port);
        s.phase = Phase::AddrResolved;
        let p = &st.ports[port];
        let sgid = p.sgid_for(&dgid);
        // SAFETY: a live ID, under the lock.
        unsafe {
            let i = &mut *id;
            i.verbs = p.ctx;
            i.pd = p.pd;
            i.port_num = 1;
            let keep = port_of(&i.route.addr.src);
            let v = ip_version(&dgid);
            let sport = if keep == 0 { ephemeral() } else { keep };
            set_addr(&mut i.route.addr.src, v, &sgid, Some(sport));
            set_addr(&mut i.route.addr.dst, v, &dgid, Some(dst_port));
            i.route.addr.ibaddr = RdmaIbAddr {
                pkey: 0xffffu16.to_be(),
                ..RdmaIbAddr::default()
            };
            i.route.addr.ibaddr.sgid.raw = sgid;
            i.route.addr.ibaddr.dgid.raw = dgid;
        }
        Ok(())
    });
    if let Err(e) = r {
        return errno::fail(e);
    }
    deliver(id, event_for(id, event::ADDR_RESOLVED, 0));
    finish(id, 0, event::ADDR_RESOLVED)
}

/// `rdma_resolve_route`: the path to the resolved address (one record:
/// the two GIDs, the port's MTU); event `ROUTE_RESOLVED`.
///
/// # Safety
///
/// `id` is a live ID.
#[no_mangle]
pub unsafe extern "C" fn rdma_resolve_route(id: *mut RdmaCmId, _timeout_ms: c_int) -> c_int {
    let r = with_id(id, |st, s| {
        let port = s
            .port
            .filter(|_| s.phase == Phase::AddrResolved)
            .ok_or(libc::EINVAL)?;
        // SAFETY: a live ID, under the lock.
        let dgid = unsafe { (*id).route.addr.ibaddr.dgid.raw };
        *s.path = path_record(&st.ports[port], dgid);
        s.phase = Phase::RouteResolved;
        // SAFETY: as above; the record lives in the state as long as the
        // ID.
        unsafe {
            (*id).route.path_rec = &mut *s.path;
            (*id).route.num_paths = 1;
        }
        Ok(())
    });
    if let Err(e) = r {
        return errno::fail(e);
    }
    deliver(id, event_for(id, event::ROUTE_RESOLVED, 0));
    finish(id, 0, event::ROUTE_RESOLVED)
}

/// `rdma_create_qp`: an RC QP for the ID (on `pd`, or the device's own
/// PD if NULL), in INIT.
///
/// # Safety
///
/// `id` is a live ID bound to a device; `pd` NULL or a PD of that
/// device; `attr` a `struct ibv_qp_init_attr`.
#[no_mangle]
pub unsafe extern "C" fn rdma_create_qp(
    id: *mut RdmaCmId,
    pd: *mut IbvPd,
    attr: *mut IbvQpInitAttr,
) -> c_int {
    if attr.is_null() {
        return errno::fail(libc::EINVAL);
    }
    let r = with_id(id, |st, s| {
        let port = s.port.ok_or(libc::EINVAL)?;
        let pd = if pd.is_null() { st.ports[port].pd } else { pd };
        // SAFETY: the caller's attributes.
        let a = unsafe { &mut *attr };
        if a.qp_type != QPT_RC && a.qp_type != QPT_UD {
            return Err(libc::EOPNOTSUPP);
        }
        let ud = a.qp_type == QPT_UD;
        if a.send_cq.is_null() || a.recv_cq.is_null() {
            // CQs of the ID's own, each with a completion channel, as
            // librdmacm makes them (rdma_get_send_comp and
            // rdma_get_recv_comp wait on them).
            // SAFETY: a live ID, under the lock; the device's context.
            unsafe {
                let i = &mut *id;
                for (n, cq, ch) in [
                    (a.cap.max_send_wr, &mut i.send_cq, &mut i.send_cq_channel),
                    (a.cap.max_recv_wr, &mut i.recv_cq, &mut i.recv_cq_channel),
                ] {
                    *ch = verbs::ibv_create_comp_channel(i.verbs);
                    *cq = verbs::ibv_create_cq(i.verbs, n.max(1) as c_int, id.cast(), *ch, 0);
                    if ch.is_null() || cq.is_null() {
                        return Err(libc::ENOMEM);
                    }
                }
                a.send_cq = i.send_cq;
                a.recv_cq = i.recv_cq;
            }
            s.own_cqs = true;
        }
        // SAFETY: a live PD and attributes.
        let qp = unsafe { verbs::ibv_create_qp(pd, a) };
        if qp.is_null() {
            return Err(std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::ENOMEM));
        }
        let mut init = IbvQpAttr {
            qp_state: 1,
            pkey_index: 0,
            port_num: 1,
            qp_access_flags: access(0),
            qkey: RDMA_UDP_QKEY,
            ..IbvQpAttr::default()
        };
        // STATE, PKEY_INDEX, PORT, and ACCESS_FLAGS (RC) or QKEY (UD).
        let mask = 1 | 1 << 4 | 1 << 5 | if ud { 1 << 6 } else { 1 << 3 };
        // SAFETY: a live QP; a UD QP goes on to RTR and RTS, as rdma_cm
        // takes it (a datagram QP needs nobody to send).
        let up = unsafe {
            verbs::ibv_modify_qp(qp, &mut init, mask) == 0
                && (!ud || {
                    let mut a = IbvQpAttr {
                        qp_state: 2,
                        ..IbvQpAttr::default()
                    };
                    verbs::ibv_modify_qp(qp, &mut a, 1) == 0 && {
                        a.qp_state = 3;
                        a.sq_psn = s.psn;
                        verbs::ibv_modify_qp(qp, &mut a, 1 | 1 << 16) == 0
                    }
                })
        };
        if !up {
            let e = std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EINVAL);
            // SAFETY: ours, unused.
            unsafe { verbs::ibv_destroy_qp(qp) };
            return Err(e);
        }
        // SAFETY: a live ID, under the lock.
        unsafe {
            (*id).qp = qp;
            (*id).pd = pd;
        }
        Ok(())
    });
    result(r)
}

/// `rdma_destroy_qp`.
///
/// # Safety
///
/// `id` is a live ID.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_qp(id: *mut RdmaCmId) {
    let mut st = cm().lock();
    // SAFETY: a live ID, under the lock.
    let qp: *mut IbvQp = unsafe { std::mem::replace(&mut (*id).qp, std::ptr::null_mut()) };
    if !qp.is_null() {
        // SAFETY: the ID's QP, no longer reachable through it.
        unsafe { verbs::ibv_destroy_qp(qp) };
    }
    let own = st
        .ids
        .get_mut(&(id as usize))
        .is_some_and(|s| std::mem::take(&mut s.own_cqs));
    if own {
        // SAFETY: the CQs and channels rdma_create_qp made for the ID,
        // which no QP uses any more.
        unsafe {
            let i = &mut *id;
            for cq in [&mut i.send_cq, &mut i.recv_cq] {
                verbs::ibv_destroy_cq(std::mem::replace(cq, std::ptr::null_mut()));
            }
            for ch in [&mut i.send_cq_channel, &mut i.recv_cq_channel] {
                verbs::ibv_destroy_comp_channel(std::mem::replace(ch, std::ptr::null_mut()));
            }
        }
    }
}

/// `RDMA_MAX_RESP_RES` and `RDMA_MAX_INIT_DEPTH`: as many as may be.
const RDMA_MAX: u8 = 0xff;

/// A count of READs and atomics the program gave (`asked`), or, without
/// parameters or with `RDMA_MAX`, `default`; at most `max`.
fn resources(p: &Params, asked: u8, default: u8, max: u8) -> u8 {
    let n = if p.defaults || asked == RDMA_MAX {
        default
    } else {
        asked
    };
    n.min(max)
}

/// The parameters of `param`, or rdma_cm's defaults.
fn conn_param(param: *mut RdmaConnParam) -> Params {
    // SAFETY: NULL or the caller's parameters.
    match unsafe { param.as_ref() } {
        Some(&conn) => Params {
            conn,
            defaults: false,
        },
        None => Params {
            conn: RdmaConnParam {
                private_data: std::ptr::null(),
                private_data_len: 0,
                responder_resources: RDMA_MAX,
                initiator_depth: RDMA_MAX,
                flow_control: 0,
                retry_count: 7,
                rnr_retry_count: 7,
                srq: 0,
                qp_num: 0,
            },
            defaults: true,
        },
    }
}

/// A program's connection parameters, and whether it gave none.
struct Params {
    conn: RdmaConnParam,
    defaults: bool,
}

impl std::ops::Deref for Params {
    type Target = RdmaConnParam;

    fn deref(&self) -> &RdmaConnParam {
        &self.conn
    }
}

/// The private data of `p`.
fn private(p: &RdmaConnParam) -> &[u8] {
    if p.private_data.is_null() {
        return &[];
    }
    // SAFETY: the program's `private_data_len` bytes.
    unsafe { std::slice::from_raw_parts(p.private_data.cast::<u8>(), p.private_data_len.into()) }
}

/// `rdma_connect`: sends the REQ of a route-resolved ID; the REP brings
/// the QP to RTS and the RTU out, and event `ESTABLISHED` (or
/// `REJECTED`, `UNREACHABLE`).
///
/// # Safety
///
/// `id` is a live ID; `param` NULL or connection parameters.
#[no_mangle]
pub unsafe extern "C" fn rdma_connect(id: *mut RdmaCmId, param: *mut RdmaConnParam) -> c_int {
    let p = conn_param(param);
    let cm = cm();
    let r = with_id(id, |st, s| {
        let port = s
            .port
            .filter(|_| s.phase == Phase::RouteResolved)
            .ok_or(libc::EINVAL)?;
        // SAFETY: a live ID, under the lock.
        let (qp, src, dst_sa, ps) = unsafe {
            (
                (*id).qp,
                (*id).route.addr.src,
                (*id).route.addr.dst,
                (*id).ps,
            )
        };
        let qpn = if qp.is_null() {
            p.qp_num
        } else {
            // SAFETY: the ID's live QP.
            unsafe { (*qp).qp_num }
        };
        let user = private(&p);
        if user.len() > rnic_cm::req::PRIVATE_DATA_LEN - cma::HEADER_LEN {
            return Err(libc::EINVAL);
        }
        let dst_port = port_of(&dst_sa);
        let mut private_data = [0u8; rnic_cm::req::PRIVATE_DATA_LEN];
        let (sgid, dgid) = (s.path.sgid.raw, s.path.dgid.raw);
        CmaHdr {
            ip_version: ip_version(&dgid),
            src_port: port_of(&src),
            src_addr: cma_addr(&sgid),
            dst_addr: cma_addr(&dgid),
        }
        .emit(&mut private_data);
        private_data[cma::HEADER_LEN..cma::HEADER_LEN + user.len()].copy_from_slice(user);
        // SAFETY: a live ID, under the lock.
        if unsafe { (*id).qp_type } == QPT_UD {
            // A datagram "connection" is the service's QP and Q_Key, asked
            // with a SIDR REQ (IBA 12.11).
            let now = cm.now();
            let pt = &mut st.ports[port];
            let (comm, out) = pt.manager.sidr_request(
                now,
                s.path.dgid.raw,
                cma::service_id(ps as u16, dst_port),
                &private_data,
                rnic_cm::manager::timeout_ns(CM_RESPONSE_TIMEOUT),
                MAX_CM_RETRIES,
            );
            pt.send(&out);
            s.comm_id = Some(comm);
            s.phase = Phase::Connecting;
            st.conns.insert((port, comm), id as usize);
            return Ok(());
        }
        let path = &s.path;
        let (max_resp, max_init) = st.ports[port].max_rd_atomic;
        let resp = resources(&p, p.responder_resources, max_resp, max_resp);
        let init = resources(&p, p.initiator_depth, max_init, max_init);
        let req = ReqRepr {
            local_comm_id: 0,
            vendor_id: 0,
            service_id: cma::service_id(ps as u16, dst_port),
            local_ca_guid: 0,
            local_qkey: 0,
            local_qpn: qpn,
            responder_resources: resp,
            local_eecn: 0,
            initiator_depth: init,
            remote_eecn: 0,
            remote_cm_response_timeout: CM_RESPONSE_TIMEOUT,
            transport: transport::RC,
            end_to_end_flow_control: p.flow_control != 0,
            starting_psn: s.psn,
            local_cm_response_timeout: CM_RESPONSE_TIMEOUT,
            retry_count: p.retry_count.min(7),
            pkey: 0xffff,
            path_mtu: path.mtu,
            rdc_exists: false,
            rnr_retry_count: p.rnr_retry_count.min(7),
            max_cm_retries: MAX_CM_RETRIES,
            srq: p.srq != 0,
            extended_transport: 0,
            primary: PathRepr {
                local_lid: 0xffff,
                remote_lid: 0xffff,
                local_gid: path.sgid.raw,
                remote_gid: path.dgid.raw,
                flow_label: 0,
                packet_rate: 0,
                traffic_class: 0,
                hop_limit: 64,
                sl: 0,
                subnet_local: false,
                local_ack_timeout: ACK_TIMEOUT,
            },
            alternate: PathRepr::default(),
            sap_supported: false,
            private_data,
        };
        let now = cm.now();
        let pt = &mut st.ports[port];
        let (comm, out) = pt.manager.connect(
            now,
            ConnectParams {
                service_id: req.service_id,
                to: path.dgid.raw,
                req,
            },
        );
        pt.send(&out);
        s.comm_id = Some(comm);
        s.phase = Phase::Connecting;
        s.resources = (resp, init);
        st.conns.insert((port, comm), id as usize);
        Ok(())
    });
    cm.kick();
    finish(id, result(r), event::ESTABLISHED)
}

/// `rdma_listen`: takes connection requests for the ID's port (on its
/// device, or every device if bound to the wildcard).
///
/// # Safety
///
/// `id` is a live, bound ID.
#[no_mangle]
pub unsafe extern "C" fn rdma_listen(id: *mut RdmaCmId, _backlog: c_int) -> c_int {
    let r = with_id(id, |st, s| {
        // SAFETY: a live ID, under the lock.
        let (src, ps) = unsafe { ((*id).route.addr.src, (*id).ps) };
        let port = port_of(&src);
        if port == 0 {
            return Err(libc::EINVAL);
        }
        let sid = cma::service_id(ps as u16, port);
        let ports: Vec<usize> = match s.port {
            Some(p) => vec![p],
            None => (0..st.ports.len()).collect(),
        };
        if ports.iter().any(|p| st.listeners.contains_key(&(*p, sid))) {
            return Err(libc::EADDRINUSE);
        }
        log::debug!("rdmacm: listening for {sid:#x} on ports {ports:?}");
        for p in ports {
            let _ = st.ports[p].manager.listen(sid);
            st.listeners.insert((p, sid), id as usize);
        }
        s.service_id = Some(sid);
        s.phase = Phase::Listening;
        Ok(())
    });
    result(r)
}

/// `rdma_accept`: accepts a connection request: the ID's QP goes to RTS
/// and the REP out; event `ESTABLISHED` when the RTU comes.
///
/// # Safety
///
/// `id` is a live ID of a connection request; `param` NULL or
/// connection parameters.
#[no_mangle]
pub unsafe extern "C" fn rdma_accept(id: *mut RdmaCmId, param: *mut RdmaConnParam) -> c_int {
    let p = conn_param(param);
    let cm = cm();
    let r = with_id(id, |st, s| {
        let (Some(port), Some(comm)) = (s.port, s.comm_id) else {
            return Err(libc::EINVAL);
        };
        if s.phase != Phase::Requested {
            return Err(libc::EINVAL);
        }
        let user = private(&p);
        // SAFETY: a live ID, under the lock.
        let (qp, ud) = unsafe { ((*id).qp, (*id).qp_type == QPT_UD) };
        if ud {
            let qpn = if qp.is_null() {
                p.qp_num
            } else {
                // SAFETY: the ID's live QP.
                unsafe { (*qp).qp_num }
            };
            let pt = &mut st.ports[port];
            let out = pt
                .manager
                .sidr_reply(
                    comm,
                    rnic_cm::sidr::status::SUCCESS,
                    qpn,
                    RDMA_UDP_QKEY,
                    user,
                )
                .map_err(|_| libc::EINVAL)?;
            pt.send(&out);
            s.comm_id = None;
            s.phase = Phase::Connected;
            return Ok(());
        }
        let Some(req) = s.req.as_ref() else {
            return Err(libc::EINVAL);
        };
        if user.len() > rnic_cm::rep::PRIVATE_DATA_LEN {
            return Err(libc::EINVAL);
        }
        // Without a choice of its own, the listener answers as many READs
        // as the requester will have outstanding, and has outstanding as
        // many as it answers, each within the device's limits.
        let (max_resp, max_init) = st.ports[port].max_rd_atomic;
        let resp = resources(&p, p.responder_resources, req.initiator_depth, max_resp);
        let init = resources(&p, p.initiator_depth, req.responder_resources, max_init);
        let qpn = if qp.is_null() {
            p.qp_num
        } else {
            // SAFETY: the ID's live QP.
            unsafe { (*qp).qp_num }
        };
        let remote = Remote {
            qpn: req.local_qpn,
            psn: req.starting_psn,
            gid: req.primary.local_gid,
            mtu: s.path.mtu,
            dest_rd_atomic: resp,
            rd_atomic: init.min(req.responder_resources),
            rnr_retry: p.rnr_retry_count,
            retry: req.retry_count,
        };
        qp_to_rts(id, &remote, s.psn)?;
        s.remote = Some(remote);
        let mut private_data = [0u8; rnic_cm::rep::PRIVATE_DATA_LEN];
        private_data[..user.len()].copy_from_slice(user);
        let rep = RepRepr {
            local_comm_id: 0,
            remote_comm_id: 0,
            local_qkey: 0,
            local_qpn: qpn,
            local_eecn: 0,
            starting_psn: s.psn,
            vendor_id: 0,
            responder_resources: resp,
            initiator_depth: init,
            target_ack_delay: 0,
            failover_accepted: 0,
            end_to_end_flow_control: p.flow_control != 0,
            rnr_retry_count: p.rnr_retry_count.min(7),
            srq: p.srq != 0,
            local_ca_guid: 0,
            private_data,
        };
        let now = cm.now();
        let pt = &mut st.ports[port];
        let out = pt
            .manager
            .accept(now, comm, rep)
            .map_err(|_| libc::EINVAL)?;
        pt.send(&out);
        s.phase = Phase::Accepting;
        Ok(())
    });
    cm.kick();
    // A datagram service's accept is its SIDR REP: nothing comes back.
    // SAFETY: a live ID.
    if unsafe { (*id).qp_type } == QPT_UD {
        return result(r);
    }
    finish(id, result(r), event::ESTABLISHED)
}

/// `rdma_reject`: refuses a connection request, with private data.
///
/// # Safety
///
/// `id` is a live ID of a connection request; `data` holds `len` bytes.
#[no_mangle]
pub unsafe extern "C" fn rdma_reject(id: *mut RdmaCmId, data: *const c_void, len: u8) -> c_int {
    let user = if data.is_null() {
        &[][..]
    } else {
        // SAFETY: the caller's `len` bytes.
        unsafe { std::slice::from_raw_parts(data.cast::<u8>(), len.into()) }
    };
    let r = with_id(id, |st, s| {
        let (Some(port), Some(comm)) = (s.port, s.comm_id) else {
            return Err(libc::EINVAL);
        };
        let pt = &mut st.ports[port];
        // SAFETY: a live ID, under the lock.
        let out = if unsafe { (*id).qp_type } == QPT_UD {
            pt.manager
                .sidr_reply(comm, rnic_cm::sidr::status::REJECT, 0, 0, user)
                .map_err(|_| libc::EINVAL)?
        } else {
            pt.manager
                .reject(comm, rnic_cm::rej::reason::CONSUMER_DEFINED, user)
                .map_err(|_| libc::EINVAL)?
        };
        pt.send(&out);
        st.conns.remove(&(port, comm));
        s.comm_id = None;
        s.phase = Phase::Idle;
        Ok(())
    });
    result(r)
}

/// `rdma_disconnect`: the QP goes to the error state and, if connected,
/// the DREQ out; event `DISCONNECTED` when answered. Disconnecting an ID
/// the other side disconnected already is not an error.
///
/// # Safety
///
/// `id` is a live ID.
#[no_mangle]
pub unsafe extern "C" fn rdma_disconnect(id: *mut RdmaCmId) -> c_int {
    let cm = cm();
    let r = with_id(id, |st, s| {
        to_error(id);
        let (Some(port), Some(comm)) = (s.port, s.comm_id) else {
            return Err(libc::EINVAL);
        };
        if matches!(s.phase, Phase::Connected | Phase::Accepting) {
            let now = cm.now();
            let pt = &mut st.ports[port];
            if let Ok(out) = pt.manager.disconnect(now, comm, &[]) {
                pt.send(&out);
            }
        }
        Ok(())
    });
    cm.kick();
    result(r)
}

/// `rdma_get_src_port`: the ID's local port.
///
/// # Safety
///
/// `id` is a live ID.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_src_port(id: *mut RdmaCmId) -> u16 {
    // SAFETY: a live ID.
    unsafe { port_of(&(*id).route.addr.src).to_be() }
}

/// `rdma_get_dst_port`: the ID's remote port.
///
/// # Safety
///
/// `id` is a live ID.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_dst_port(id: *mut RdmaCmId) -> u16 {
    // SAFETY: a live ID.
    unsafe { port_of(&(*id).route.addr.dst).to_be() }
}

/// The sizes the tests check, kept by the compiler too.
const _: () = {
    assert!(std::mem::size_of::<RdmaAddr>() == 296);
    assert!(std::mem::size_of::<RdmaRoute>() == 312);
};

/// `rdma_init_qp_attr`: the attributes (and mask) that take a QP of the
/// program's own to `qp_attr->qp_state` for the ID's connection: INIT
/// (port, P_Key, remote access or the Q_Key), RTR (the other side's QP,
/// PSN and path), RTS (the ID's PSN, timers, READ depth), as the kernel's
/// `rdma_init_qp_attr` computes them.
///
/// # Safety
///
/// `id` is a live ID; `qp_attr` and `qp_attr_mask` are writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_init_qp_attr(
    id: *mut RdmaCmId,
    qp_attr: *mut IbvQpAttr,
    qp_attr_mask: *mut c_int,
) -> c_int {
    if qp_attr.is_null() || qp_attr_mask.is_null() {
        return errno::fail(libc::EINVAL);
    }
    // SAFETY: checked, writable by the caller's promise.
    let (a, mask) = unsafe { (&mut *qp_attr, &mut *qp_attr_mask) };
    let r = with_id(id, |st, s| {
        let port = s.port.ok_or(libc::EINVAL)?;
        // SAFETY: a live ID, under the lock.
        let ud = unsafe { (*id).qp_type } == QPT_UD;
        // Before the accept, what a passive ID would agree to.
        let remote = s.remote.or_else(|| {
            let req = s.req.as_ref()?;
            let (max_resp, max_init) = st.ports[port].max_rd_atomic;
            Some(Remote {
                qpn: req.local_qpn,
                psn: req.starting_psn,
                gid: req.primary.local_gid,
                mtu: s.path.mtu,
                dest_rd_atomic: req.initiator_depth.min(max_resp),
                rd_atomic: req.responder_resources.min(max_init),
                rnr_retry: req.rnr_retry_count,
                retry: req.retry_count,
            })
        });
        let state = a.qp_state;
        *a = IbvQpAttr {
            qp_state: state,
            ..IbvQpAttr::default()
        };
        match (state, ud, remote) {
            (1, true, _) => {
                a.port_num = 1;
                a.qkey = RDMA_UDP_QKEY;
                *mask = 1 | 1 << 4 | 1 << 5 | 1 << 6;
            }
            (1, false, r) => {
                a.port_num = 1;
                a.qp_access_flags = access(r.map_or(0, |r| r.dest_rd_atomic));
                *mask = 1 | 1 << 4 | 1 << 5 | 1 << 3;
            }
            (2, true, _) => *mask = 1,
            (3, true, _) => {
                a.sq_psn = s.psn;
                *mask = 1 | 1 << 16;
            }
            (2, false, Some(r)) => {
                a.path_mtu = r.mtu.into();
                a.dest_qp_num = r.qpn;
                a.rq_psn = s.psn;
                a.max_dest_rd_atomic = r.dest_rd_atomic;
                a.min_rnr_timer = 12;
                a.ah_attr.is_global = 1;
                a.ah_attr.port_num = 1;
                a.ah_attr.grh.dgid.raw = r.gid;
                a.ah_attr.grh.sgid_index = sgid_index(&r.gid);
                a.ah_attr.grh.hop_limit = 64;
                *mask = 1 | 1 << 7 | 1 << 8 | 1 << 12 | 1 << 17 | 1 << 15 | 1 << 20;
            }
            (3, false, Some(r)) => {
                a.sq_psn = r.psn;
                a.timeout = ACK_TIMEOUT;
                a.retry_cnt = r.retry.min(7);
                a.rnr_retry = r.rnr_retry.min(7);
                a.max_rd_atomic = r.rd_atomic;
                *mask = 1 | 1 << 9 | 1 << 10 | 1 << 11 | 1 << 16 | 1 << 13;
            }
            _ => return Err(libc::EINVAL),
        }
        Ok(())
    });
    result(r)
}

/// `rdma_establish`: an active ID without a QP, whose program readied its
/// own QP after `CONNECT_RESPONSE`, completes the connection: the RTU
/// goes out.
///
/// # Safety
///
/// `id` is a live ID.
#[no_mangle]
pub unsafe extern "C" fn rdma_establish(id: *mut RdmaCmId) -> c_int {
    let r = with_id(id, |st, s| {
        let (Some(port), Some(comm)) = (s.port, s.comm_id) else {
            return Err(libc::EINVAL);
        };
        if s.phase != Phase::Responded {
            return Err(libc::EINVAL);
        }
        let pt = &mut st.ports[port];
        let out = pt.manager.ready(comm, &[]).map_err(|_| libc::EINVAL)?;
        pt.send(&out);
        s.phase = Phase::Connected;
        Ok(())
    });
    result(r)
}

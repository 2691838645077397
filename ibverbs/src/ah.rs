//! Address handles: `ibv_create_ah`, `ibv_destroy_ah`, the UD
//! destinations of `post_send`, and the AH back to a received message's
//! sender (`ibv_init_ah_from_wc`, `ibv_create_ah_from_wc`).

use rnic_verbs::provider::{AddressHandle, ProtectionDomain};
use std::ffi::c_int;
use std::sync::atomic::{AtomicU32, Ordering};

use crate::any::AnyAh;
use rnic_verbs::{AhAttr, UdDest};

use crate::abi::{IbvAh, IbvAhAttr, IbvContext, IbvPd, IbvWc};
use crate::context::{find_gid_index, open_context};
use crate::errno;
use crate::live::Live;
use crate::pd::live_pd;

/// An AH: the `struct ibv_ah` programs see, first.
#[repr(C)]
struct Ah {
    ibv: IbvAh,
    ah: AnyAh,
}

static AHS: Live = Live::new();

/// The driver's view of `struct ibv_ah_attr` (RoCE has no LID: the GRH
/// is the path).
pub(crate) fn ah_attr(a: &IbvAhAttr) -> AhAttr {
    let g = &a.grh;
    AhAttr {
        dgid: g.dgid.raw,
        flow_label: flow_label(g.flow_label),
        sgid_index: g.sgid_index,
        hop_limit: g.hop_limit,
        traffic_class: g.traffic_class,
        sl: a.sl,
        port_num: a.port_num,
        is_global: a.is_global != 0,
        ..AhAttr::default()
    }
}

/// The 20 bits of a flow label that a GRH carries. Programs pass wider
/// values (UCX passes `0xffffffff`), which kernel providers take and
/// mask, as rxe does when it derives the UDP source port: so does this.
pub(crate) fn flow_label(raw: u32) -> u32 {
    raw & 0xf_ffff
}

/// The UD destination of a send request through the live AH `ah`.
pub(crate) fn ud_dest(ah: *mut IbvAh, remote_qpn: u32, remote_qkey: u32) -> Option<UdDest> {
    if !AHS.contains(ah) {
        return None;
    }
    // SAFETY: a live AH came from Box::into_raw in ibv_create_ah and is
    // freed only after it leaves the list; programs do not destroy an AH
    // that a request they are posting names.
    Some(
        unsafe { &*ah.cast::<Ah>() }
            .ah
            .dest(remote_qpn, remote_qkey),
    )
}

/// `ibv_create_ah`: NULL with `errno` (`EINVAL` for a PD that is not
/// live, a NULL `attr`, or what the driver refuses: no GRH on RoCE, an
/// unused source GID).
///
/// # Safety
///
/// `attr` is NULL or points to a `struct ibv_ah_attr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah(pd: *mut IbvPd, attr: *mut IbvAhAttr) -> *mut IbvAh {
    let Some(driver_pd) = live_pd(pd).and_then(|p| p.pd.as_ref()) else {
        return errno::fail(libc::EINVAL);
    };
    if attr.is_null() {
        return errno::fail(libc::EINVAL);
    }
    // SAFETY: non-NULL, and a struct ibv_ah_attr by the caller's promise.
    let a = ah_attr(unsafe { &*attr });
    match driver_pd.create_ah(&a) {
        Ok(ah) => {
            static NEXT: AtomicU32 = AtomicU32::new(1);
            let ibv = IbvAh {
                // SAFETY: live_pd checked it above.
                context: unsafe { (*pd).context },
                pd,
                handle: NEXT.fetch_add(1, Ordering::Relaxed),
            };
            let p = Box::into_raw(Box::new(Ah { ibv, ah }));
            AHS.add(p);
            p.cast()
        }
        Err(e) => {
            log::debug!("ibv_create_ah: {e}");
            errno::fail(e.errno())
        }
    }
}

/// `ibv_destroy_ah`: 0, or `EINVAL` for a pointer that is not a live AH.
///
/// # Safety
///
/// None beyond what the C signature implies: the pointer is checked.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_ah(ah: *mut IbvAh) -> c_int {
    if !AHS.remove(ah) {
        return libc::EINVAL;
    }
    // SAFETY: it was live, so it came from Box::into_raw, and it left the
    // list: this thread alone holds it.
    drop(unsafe { Box::from_raw(ah.cast::<Ah>()) });
    0
}

/// `IBV_WC_GRH`: the receive buffer starts with the sender's GRH.
const WC_GRH: u32 = 1;

/// The IP version of a received GRH (libibverbs' reading of it): 4 for
/// 20 bytes and a 20-byte IPv4 header whose checksum holds, as RoCE v2
/// NICs place an IPv4 packet's header; else 6 for an IPv6 header.
fn grh_version(grh: &[u8; 40]) -> Option<u8> {
    let ip4 = &grh[20..];
    if grh[0] >> 4 != 6 {
        return (ip4[0] >> 4 == 4).then_some(4);
    }
    if ip4[0] & 0xf != 5 {
        return Some(6);
    }
    // The ones' complement sum over a header whose checksum is right is
    // 0xffff.
    let mut sum: u32 = ip4
        .chunks(2)
        .map(|w| u32::from(u16::from_be_bytes([w[0], w[1]])))
        .sum();
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    Some(if sum == 0xffff { 4 } else { 6 })
}

/// The IPv4-mapped GID of an IPv4 address.
fn mapped(ipv4: &[u8]) -> [u8; 16] {
    let mut g = [0u8; 16];
    g[10] = 0xff;
    g[11] = 0xff;
    g[12..].copy_from_slice(&ipv4[..4]);
    g
}

/// `ibv_init_ah_from_wc`: the address vector back to the sender of the
/// UD message `wc` received on port `port_num`, whose buffer began with
/// the GRH `grh` (read only when `wc` has `IBV_WC_GRH`). 0, or -1 with
/// `errno`: `EINVAL` for a context that is not open, a NULL pointer, a
/// multicast destination or a GRH sent to no GID of the port;
/// `EPROTONOSUPPORT` for a GRH that is neither IPv4 nor IPv6.
///
/// # Safety
///
/// `wc` and `grh` are NULL or point to a `struct ibv_wc` and the 40
/// bytes of a `struct ibv_grh`; `ah_attr` is NULL or points to writable
/// memory for a `struct ibv_ah_attr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_init_ah_from_wc(
    context: *mut IbvContext,
    port_num: u8,
    wc: *const IbvWc,
    grh: *const [u8; 40],
    ah_attr: *mut IbvAhAttr,
) -> c_int {
    let fail = |e| {
        errno::set(e);
        -1
    };
    let Some(c) = open_context(context) else {
        return fail(libc::EINVAL);
    };
    if wc.is_null() || ah_attr.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: non-NULL, and a struct ibv_wc by the caller's promise.
    let wc = unsafe { &*wc };
    let mut a = IbvAhAttr {
        dlid: wc.slid,
        sl: wc.sl,
        src_path_bits: wc.dlid_path_bits,
        port_num,
        ..IbvAhAttr::default()
    };
    if wc.wc_flags & WC_GRH != 0 {
        if grh.is_null() {
            return fail(libc::EINVAL);
        }
        // SAFETY: non-NULL, and 40 bytes by the caller's promise.
        let grh = unsafe { &*grh };
        let flow = u32::from_be_bytes([grh[0], grh[1], grh[2], grh[3]]);
        a.grh.flow_label = flow & 0xf_ffff;
        a.is_global = 1;
        // (the GID the sender sent to, the sender's GID, hop limit, class)
        let (to, from, hop_limit, class) = match grh_version(grh) {
            Some(4) => {
                let ip = &grh[20..];
                // Class D: a multicast group, which is in no GID table.
                if ip[16] >> 4 == 0xe {
                    return fail(libc::EINVAL);
                }
                (mapped(&ip[16..20]), mapped(&ip[12..16]), ip[8], ip[1])
            }
            Some(_) => {
                let mut to = [0u8; 16];
                to.copy_from_slice(&grh[24..40]);
                if to[0] == 0xff {
                    return fail(libc::EINVAL);
                }
                // RoCE v2 carries UDP after the IPv6 header.
                if grh[6] != libc::IPPROTO_UDP as u8 {
                    return fail(libc::EPROTONOSUPPORT);
                }
                let mut from = [0u8; 16];
                from.copy_from_slice(&grh[8..24]);
                (to, from, grh[7], (flow >> 20) as u8)
            }
            None => return fail(libc::EPROTONOSUPPORT),
        };
        let Some(index) = find_gid_index(c, port_num, &to) else {
            return fail(libc::EINVAL);
        };
        a.grh.dgid.raw = from;
        a.grh.sgid_index = index;
        a.grh.hop_limit = hop_limit;
        a.grh.traffic_class = class;
    }
    // SAFETY: non-NULL, and writable by the caller's promise.
    unsafe { ah_attr.write(a) };
    0
}

/// `ibv_create_ah_from_wc`: an AH back to the sender of `wc`
/// ([`ibv_init_ah_from_wc`], then [`ibv_create_ah`]). NULL with `errno`
/// as those give it.
///
/// # Safety
///
/// As for [`ibv_init_ah_from_wc`].
#[no_mangle]
pub unsafe extern "C" fn ibv_create_ah_from_wc(
    pd: *mut IbvPd,
    wc: *const IbvWc,
    grh: *const [u8; 40],
    port_num: u8,
) -> *mut IbvAh {
    let Some(p) = live_pd(pd) else {
        return errno::fail(libc::EINVAL);
    };
    let mut a = IbvAhAttr::default();
    // SAFETY: the caller's promise, passed on; `a` is writable.
    if unsafe { ibv_init_ah_from_wc(p.ibv.context, port_num, wc, grh, &mut a) } != 0 {
        return std::ptr::null_mut();
    }
    // SAFETY: `a` is a struct ibv_ah_attr.
    unsafe { ibv_create_ah(pd, &mut a) }
}

//! Address handles: `ibv_create_ah`, `ibv_destroy_ah`, and the UD
//! destinations of `post_send`.

use std::ffi::c_int;
use std::sync::atomic::{AtomicU32, Ordering};

use rnic_driver::{Ah as DriverAh, AhAttr, UdDest};
use rnic_emu::EmuHal;

use crate::abi::{IbvAh, IbvAhAttr, IbvPd};
use crate::errno;
use crate::live::Live;
use crate::pd::live_pd;

/// An AH: the `struct ibv_ah` programs see, first.
#[repr(C)]
struct Ah {
    ibv: IbvAh,
    ah: DriverAh<EmuHal>,
}

static AHS: Live = Live::new();

/// The driver's view of `struct ibv_ah_attr` (RoCE has no LID: the GRH
/// is the path).
pub(crate) fn ah_attr(a: &IbvAhAttr) -> AhAttr {
    let g = &a.grh;
    AhAttr {
        dgid: g.dgid.raw,
        flow_label: g.flow_label,
        sgid_index: g.sgid_index,
        hop_limit: g.hop_limit,
        traffic_class: g.traffic_class,
        sl: a.sl,
        port_num: a.port_num,
        is_global: a.is_global != 0,
        ..AhAttr::default()
    }
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
    let fail = |e| {
        errno::set(e);
        std::ptr::null_mut()
    };
    let Some(driver_pd) = live_pd(pd).and_then(|p| p.pd.as_ref()) else {
        return fail(libc::EINVAL);
    };
    if attr.is_null() {
        return fail(libc::EINVAL);
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
        Err(e) => fail(e.errno()),
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

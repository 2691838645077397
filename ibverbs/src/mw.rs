//! Memory windows: the context's `alloc_mw`, `bind_mw` and `dealloc_mw`
//! (the header's inline `ibv_alloc_mw`, `ibv_bind_mw`, `ibv_dealloc_mw`),
//! and the type 2 binds of `post_send` (`IBV_WR_BIND_MW`).

use rnic_verbs::provider::{MemoryWindow, ProtectionDomain};
use std::ffi::c_int;

use crate::any::AnyMw;
use rnic_verbs::{MwType, SendOp};

use crate::abi::{IbvMw, IbvMwBind, IbvPd, IbvQp, WrBindMw};
use crate::errno;
use crate::live::Live;
use crate::pd::{live_mr, live_pd};
use crate::qp::live_driver_qp;

/// A window: the `struct ibv_mw` programs see, first.
#[repr(C)]
struct Mw {
    ibv: IbvMw,
    mw: Option<AnyMw>,
}

static MWS: Live = Live::new();

/// The driver's window behind the live window `mw`.
fn live_mw(mw: *mut IbvMw) -> Option<&'static AnyMw> {
    // SAFETY: a live window came from Box::into_raw in alloc_mw and is
    // freed only after it leaves the list.
    MWS.contains(mw)
        .then(|| unsafe { (*mw.cast::<Mw>()).mw.as_ref() })
        .flatten()
}

/// The context's `alloc_mw`: an unbound window of type 1 or 2 on `pd`.
/// NULL with `errno`: `EINVAL` for a PD that is not live or another
/// type; the driver's (`ENOMEM`: no key left).
///
/// # Safety
///
/// None beyond what the C signature implies: the pointer is checked.
pub(crate) unsafe extern "C" fn alloc_mw(pd: *mut IbvPd, mw_type: c_int) -> *mut IbvMw {
    let Some(p) = live_pd(pd) else {
        return errno::fail(libc::EINVAL);
    };
    let Some(driver) = p.pd.as_ref() else {
        return errno::fail(libc::EINVAL);
    };
    let ty = match mw_type {
        1 => MwType::Type1,
        2 => MwType::Type2,
        _ => return errno::fail(libc::EINVAL),
    };
    match driver.alloc_mw(ty) {
        Ok(mw) => {
            let ibv = IbvMw {
                context: p.ibv.context,
                pd,
                rkey: mw.rkey(),
                handle: mw.rkey(),
                mw_type,
            };
            let m = Box::into_raw(Box::new(Mw { ibv, mw: Some(mw) }));
            MWS.add(m);
            m.cast()
        }
        Err(e) => errno::fail(e.errno()),
    }
}

/// The context's `dealloc_mw`: 0, or an `errno` value (`EINVAL` for a
/// pointer that is not a live window; the driver's, and it stays).
///
/// # Safety
///
/// None beyond what the C signature implies: the pointer is checked.
pub(crate) unsafe extern "C" fn dealloc_mw(mw: *mut IbvMw) -> c_int {
    // SAFETY: every live window is a Box<Mw> (alloc_mw).
    unsafe { MWS.destroy(mw.cast::<Mw>(), |o| &mut o.mw, AnyMw::destroy) }
}

/// The context's `bind_mw` (`ibv_bind_mw`, after the header's own checks):
/// posts the bind of type 1 window `mw` to `bind->bind_info` on `qp` and
/// sets `mw->rkey` to the window's new rkey. 0, or an `errno` value:
/// `EINVAL` for a QP, window or MR that is not live (a NULL MR too: unbind
/// with a zero length on the MR), flags or access the driver refuses;
/// `ENOMEM` when the send queue is full. The device checks the rest when
/// it executes the bind (`IBV_WC_MW_BIND_ERR`).
///
/// # Safety
///
/// `bind` is NULL or points to a `struct ibv_mw_bind`.
pub(crate) unsafe extern "C" fn bind_mw(
    qp: *mut IbvQp,
    mw: *mut IbvMw,
    bind: *mut IbvMwBind,
) -> c_int {
    let (Some(q), Some(w)) = (live_driver_qp(qp), live_mw(mw)) else {
        return libc::EINVAL;
    };
    if bind.is_null() {
        return libc::EINVAL;
    }
    // SAFETY: non-NULL, and a struct ibv_mw_bind by the caller's promise.
    let b = unsafe { *bind };
    let Some(mr) = live_mr(b.bind_info.mr) else {
        return libc::EINVAL;
    };
    let info = &b.bind_info;
    match q.bind_mw(
        w,
        mr,
        (info.addr, info.length, info.mw_access_flags),
        b.wr_id,
        b.send_flags,
    ) {
        Ok(rkey) => {
            // SAFETY: live (checked above): a box of ours; `rkey` is the
            // program's to read and this call's to write.
            unsafe { (*mw).rkey = rkey };
            0
        }
        Err(e) => e.error.errno(),
    }
}

/// The driver's operation for a type 2 bind request of `post_send`
/// (`IBV_WR_BIND_MW`): `b.rkey` is the window's new rkey, its index the
/// window's (IBA 10.6.7.2.2: the program chooses the key byte, usually
/// with `ibv_inc_rkey`). `EINVAL` for a window or MR that is not live, or
/// another index.
pub(crate) fn bind_op(b: &WrBindMw) -> Result<SendOp, c_int> {
    let mw = live_mw(b.mw.cast()).ok_or(libc::EINVAL)?;
    let mr = live_mr(b.bind_info.mr).ok_or(libc::EINVAL)?;
    if b.rkey & !0xff != mw.rkey() & !0xff {
        return Err(libc::EINVAL);
    }
    let info = &b.bind_info;
    let bind = mw
        .bind_wr_keyed(
            mr,
            (info.addr, info.length, info.mw_access_flags),
            b.rkey as u8,
        )
        .map_err(|e| e.errno())?;
    Ok(SendOp::BindMw { bind })
}

//! Protection domains and memory regions: `ibv_alloc_pd`,
//! `ibv_dealloc_pd`, `ibv_reg_mr`, `ibv_dereg_mr`.

use rnic_verbs::provider::{MemoryRegion, ProtectionDomain, Provider};
use std::ffi::{c_int, c_void};
use std::ptr::NonNull;

use crate::any::{AnyMr, AnyPd};

use crate::abi::{IbvContext, IbvMr, IbvPd};
use crate::context::open_context;
use crate::errno;
use crate::live::Live;

/// A PD: the `struct ibv_pd` programs see, first. The driver's PD is
/// taken out only while it is being deallocated.
#[repr(C)]
pub(crate) struct Pd {
    pub ibv: IbvPd,
    pub pd: Option<AnyPd>,
}

/// An MR: the `struct ibv_mr` programs see, first.
#[repr(C)]
struct Mr {
    ibv: IbvMr,
    mr: Option<AnyMr>,
}

/// `IBV_ACCESS_OPTIONAL_RANGE`, bits 20 to 29: access flags a device may
/// ignore.
const ACCESS_OPTIONAL_RANGE: u32 = ((1 << 30) - 1) & !((1 << 20) - 1);

static PDS: Live = Live::new();
static MRS: Live = Live::new();

/// The driver's MR behind the live MR `mr`.
pub(crate) fn live_mr(mr: *mut IbvMr) -> Option<&'static AnyMr> {
    // SAFETY: a live MR came from Box::into_raw in ibv_reg_mr and is freed
    // only after it leaves the list.
    MRS.contains(mr)
        .then(|| unsafe { (*mr.cast::<Mr>()).mr.as_ref() })
        .flatten()
}

/// The live PD `pd` points to.
pub(crate) fn live_pd(pd: *mut IbvPd) -> Option<&'static Pd> {
    // SAFETY: a live PD came from Box::into_raw in ibv_alloc_pd and is
    // freed only after it leaves the list.
    PDS.contains(pd).then(|| unsafe { &*pd.cast::<Pd>() })
}

/// `ibv_alloc_pd`: NULL with `errno` (`EINVAL` for a context that is not
/// open, else the driver's: `ENOMEM` when the device has no PD left).
///
/// # Safety
///
/// None beyond what the C signature implies: the pointer is checked.
#[no_mangle]
pub unsafe extern "C" fn ibv_alloc_pd(context: *mut IbvContext) -> *mut IbvPd {
    let Some(c) = open_context(context) else {
        return errno::fail(libc::EINVAL);
    };
    match c.ctx.alloc_pd() {
        Ok(pd) => {
            let ibv = IbvPd {
                context,
                handle: pd.pd_num(),
            };
            let p = Box::into_raw(Box::new(Pd { ibv, pd: Some(pd) }));
            PDS.add(p);
            p.cast()
        }
        Err(e) => errno::fail(e.errno()),
    }
}

/// `ibv_dealloc_pd`: 0, or an `errno` value: `EINVAL` for a pointer that
/// is not a live PD, `EBUSY` while MRs or QPs use it (the PD stays).
///
/// # Safety
///
/// None beyond what the C signature implies: the pointer is checked.
#[no_mangle]
pub unsafe extern "C" fn ibv_dealloc_pd(pd: *mut IbvPd) -> c_int {
    // SAFETY: every live PD is a Box<Pd> (ibv_alloc_pd).
    unsafe { PDS.destroy(pd.cast::<Pd>(), |o| &mut o.pd, AnyPd::destroy) }
}

/// `ibv_reg_mr`: registers `length` bytes at `addr` with `access`
/// (`IBV_ACCESS_*`). NULL with `errno`: `EINVAL` for a PD that is not
/// live, a NULL `addr` with a nonzero length or flags the device does not
/// implement; the driver's otherwise.
///
/// # Safety
///
/// As in libibverbs: the memory stays valid until the MR is deregistered.
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr(
    pd: *mut IbvPd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> *mut IbvMr {
    let Some(p) = live_pd(pd) else {
        return errno::fail(libc::EINVAL);
    };
    let Some(ptr) = NonNull::new(addr.cast::<u8>()) else {
        return errno::fail(libc::EINVAL);
    };
    let Some(driver) = p.pd.as_ref() else {
        return errno::fail(libc::EINVAL);
    };
    // Optional flags (relaxed ordering and the like) may be ignored.
    let access = access as u32 & !ACCESS_OPTIONAL_RANGE;
    // SAFETY: the caller's promise: the memory stays valid until the MR
    // is deregistered (its box owns the driver's MR).
    match unsafe { driver.reg_mr(ptr, length, access) } {
        Ok(mr) => {
            let ibv = IbvMr {
                context: p.ibv.context,
                pd,
                addr,
                length,
                handle: mr.lkey(),
                lkey: mr.lkey(),
                rkey: mr.rkey(),
            };
            let m = Box::into_raw(Box::new(Mr { ibv, mr: Some(mr) }));
            MRS.add(m);
            m.cast()
        }
        Err(e) => errno::fail(e.errno()),
    }
}

/// `ibv_reg_mr_iova2` (`IBVERBS_1.8`, which the header's inline
/// `ibv_reg_mr` calls unless its flags are a compile-time constant): as
/// [`ibv_reg_mr`], for `iova == addr`; another `iova` gets NULL with
/// `errno` `EOPNOTSUPP` (rnic's MRs are addressed by the virtual address
/// they were registered at).
///
/// # Safety
///
/// As for [`ibv_reg_mr`].
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova2(
    pd: *mut IbvPd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: u32,
) -> *mut IbvMr {
    if iova != addr as u64 {
        return errno::fail(libc::EOPNOTSUPP);
    }
    // SAFETY: the caller's promise, passed on.
    unsafe { ibv_reg_mr(pd, addr, length, access as c_int) }
}

/// `ibv_dereg_mr`: 0, or an `errno` value (`EINVAL` for a pointer that is
/// not a live MR; the driver's if the device refuses, and the MR stays).
///
/// # Safety
///
/// None beyond what the C signature implies: the pointer is checked.
#[no_mangle]
pub unsafe extern "C" fn ibv_dereg_mr(mr: *mut IbvMr) -> c_int {
    // SAFETY: every live MR is a Box<Mr> (ibv_reg_mr).
    unsafe { MRS.destroy(mr.cast::<Mr>(), |o| &mut o.mr, AnyMr::destroy) }
}

/// `ibv_reg_mr_iova` (`IBVERBS_1.7`): [`ibv_reg_mr_iova2`] with `int`
/// access flags.
///
/// # Safety
///
/// As for [`ibv_reg_mr`].
#[no_mangle]
pub unsafe extern "C" fn ibv_reg_mr_iova(
    pd: *mut IbvPd,
    addr: *mut c_void,
    length: usize,
    iova: u64,
    access: c_int,
) -> *mut IbvMr {
    // SAFETY: the caller's promise, passed on.
    unsafe { ibv_reg_mr_iova2(pd, addr, length, iova, access as u32) }
}

/// `IBV_REREG_MR_CHANGE_TRANSLATION`, `_PD`, `_ACCESS`.
const REREG_TRANSLATION: c_int = 1;
const REREG_PD: c_int = 2;
const REREG_ACCESS: c_int = 4;
/// `IBV_REREG_MR_ERR_INPUT` and `IBV_REREG_MR_ERR_CMD`.
const REREG_ERR_INPUT: c_int = -1;
const REREG_ERR_CMD: c_int = -4;

/// `ibv_rereg_mr`: moves the MR to `length` bytes at `addr`
/// (`IBV_REREG_MR_CHANGE_TRANSLATION`), to `pd` (`_CHANGE_PD`) and/or to
/// `access` (`_CHANGE_ACCESS`); its keys stay. 0, or with `errno`:
/// `IBV_REREG_MR_ERR_INPUT` (`EINVAL`) for an MR or PD that is not live,
/// unknown flags, a translation without memory or access flags without
/// `_CHANGE_ACCESS`; `IBV_REREG_MR_ERR_CMD` with the driver's `errno`
/// when the device refuses (a translation already made stays made).
///
/// # Safety
///
/// With `_CHANGE_TRANSLATION`, as for [`ibv_reg_mr`]: the new memory
/// stays valid until the MR is deregistered or moved again.
#[no_mangle]
pub unsafe extern "C" fn ibv_rereg_mr(
    mr: *mut IbvMr,
    flags: c_int,
    pd: *mut IbvPd,
    addr: *mut c_void,
    length: usize,
    access: c_int,
) -> c_int {
    let input = |e| {
        errno::set(e);
        REREG_ERR_INPUT
    };
    if !MRS.contains(mr) {
        return input(libc::EINVAL);
    }
    // SAFETY: a live MR came from Box::into_raw in ibv_reg_mr; the
    // program does not use an MR it is reregistering elsewhere.
    let m = unsafe { &mut *mr.cast::<Mr>() };
    let Some(driver) = m.mr.as_mut() else {
        return input(libc::EINVAL);
    };
    let translation = NonNull::new(addr.cast::<u8>()).filter(|_| length > 0);
    if flags & !(REREG_TRANSLATION | REREG_PD | REREG_ACCESS) != 0
        || (flags & REREG_TRANSLATION != 0 && translation.is_none())
        || (access != 0 && flags & REREG_ACCESS == 0)
    {
        return input(libc::EINVAL);
    }
    let new_pd = if flags & REREG_PD != 0 {
        match live_pd(pd).and_then(|p| p.pd.as_ref()) {
            Some(p) => Some(p),
            None => return input(libc::EINVAL),
        }
    } else {
        None
    };
    let cmd = |e: rnic_driver::Error| {
        errno::set(e.errno());
        REREG_ERR_CMD
    };
    if let (true, Some(ptr)) = (flags & REREG_TRANSLATION != 0, translation) {
        // SAFETY: the caller's promise for the new memory.
        if let Err(e) = unsafe { driver.rereg_memory(ptr, length) } {
            return cmd(e);
        }
        m.ibv.addr = addr;
        m.ibv.length = length;
    }
    let new_access = (flags & REREG_ACCESS != 0).then_some(access as u32 & !ACCESS_OPTIONAL_RANGE);
    if new_pd.is_some() || new_access.is_some() {
        if let Err(e) = driver.rereg(new_pd, new_access) {
            return cmd(e);
        }
    }
    if new_pd.is_some() {
        m.ibv.pd = pd;
    }
    0
}

/// `ibv_reg_dmabuf_mr` (`IBVERBS_1.12`): an MR over a dma-buf, memory
/// another kernel driver exports. NULL with `errno` `EOPNOTSUPP`: rnic
/// devices reach only the process's own memory.
#[no_mangle]
pub extern "C" fn ibv_reg_dmabuf_mr(
    _pd: *mut IbvPd,
    _offset: u64,
    _length: usize,
    _iova: u64,
    _fd: c_int,
    _access: c_int,
) -> *mut IbvMr {
    errno::fail(libc::EOPNOTSUPP)
}

/// Imports of objects another process shares through a kernel context
/// (`ibv_import_pd`, `ibv_import_mr`, `ibv_import_dm`): NULL with `errno`
/// `EOPNOTSUPP`, since rnic objects belong to their process.
macro_rules! no_import {
    ($($name:ident),*) => {$(
        #[doc = concat!("`", stringify!($name), "`: NULL with `errno` `EOPNOTSUPP`.")]
        #[no_mangle]
        pub extern "C" fn $name(_owner: *mut c_void, _handle: u32) -> *mut c_void {
            errno::fail(libc::EOPNOTSUPP)
        }
    )*};
}
no_import!(ibv_import_pd, ibv_import_mr, ibv_import_dm);

/// `ibv_unimport_pd`, `ibv_unimport_mr`, `ibv_unimport_dm`: nothing was
/// imported, so nothing is released.
macro_rules! no_unimport {
    ($($name:ident),*) => {$(
        #[doc = concat!("`", stringify!($name), "`: nothing to release.")]
        #[no_mangle]
        pub extern "C" fn $name(_object: *mut c_void) {}
    )*};
}
no_unimport!(ibv_unimport_pd, ibv_unimport_mr, ibv_unimport_dm);

//! Memory windows: binding (a `BIND_MW` WQE), invalidation (`LOCAL_INV`,
//! a SEND with invalidate), unbinding (deallocation, the QP of a type 2
//! window leaving service), and what a window's rkey reaches.

use rnic_hw_regs::cqe::Syndrome;
use rnic_hw_regs::wqe::BindSeg;
use rnic_verbs::access;

use crate::objects::Binding;
use crate::state::Dev;

/// Binds the window of `seg.mw_rkey` as `seg` says, for QP `qpn` of PD
/// `pdn` (IBA 10.6.7: C10-72 to C10-75, o10-36.2, o10-37.2); the syndrome
/// of the first check that fails, nothing changed. A type 1 window is
/// rebound (a zero length unbinds it); a type 2 window must be free, and
/// becomes this QP's.
pub(crate) fn bind(dev: &mut Dev, qpn: u32, pdn: u32, seg: &BindSeg) -> Result<(), Syndrome> {
    let (mw_key, new_key) = (seg.mw_rkey.to_ne(), seg.new_rkey.to_ne());
    let (mr_key, acc) = (seg.mr_lkey.to_ne(), seg.access.to_ne());
    let (va, len) = (seg.va.to_ne(), seg.length.to_ne());
    let mw = dev.objs.mrs.get_mw(mw_key).ok_or(Syndrome::BadRkey)?;
    if mw.pdn != pdn {
        return Err(Syndrome::PdMismatch);
    }
    if new_key >> 8 != mw_key >> 8 {
        return Err(Syndrome::BadRkey);
    }
    if acc & !access::MW_SUPPORTED != 0 {
        return Err(Syndrome::AccessDenied);
    }
    let mw_type = mw.mw_type;
    if mw_type == 2 && (mw.bound.is_some() || len == 0) {
        // A bound type 2 window is invalidated, not rebound; binding it
        // to nothing is no bind.
        return Err(Syndrome::BadRkey);
    }
    if len > 0 {
        let mr = dev.objs.mrs.get_mut(mr_key).ok_or(Syndrome::BadLkey)?;
        if mr.pdn != pdn {
            return Err(Syndrome::PdMismatch);
        }
        let remote_writes = access::REMOTE_WRITE | access::REMOTE_ATOMIC;
        if mr.access & access::MW_BIND == 0
            || (acc & remote_writes != 0 && mr.access & access::LOCAL_WRITE == 0)
        {
            return Err(Syndrome::AccessDenied);
        }
        let inside = va >= mr.va && va.checked_add(len).is_some_and(|e| e <= mr.va + mr.len);
        if !inside {
            return Err(Syndrome::OutOfBounds);
        }
    }
    unbind(dev, mw_key);
    if len > 0 {
        if let Some(mr) = dev.objs.mrs.get_mut(mr_key) {
            mr.windows += 1;
        }
        if let Some(mw) = dev.objs.mrs.get_mw(mw_key) {
            mw.bound = Some(Binding {
                mr_key,
                va,
                len,
                access: acc,
                qpn: (mw_type == 2).then_some(qpn),
            });
        }
    }
    dev.objs.mrs.rekey(mw_key, new_key);
    log::debug!("MW {mw_key:#x} -> {new_key:#x}: bound to MR {mr_key:#x} {va:#x}+{len:#x}");
    Ok(())
}

/// Invalidates the type 2 window of `rkey` (it becomes free). By `LOCAL_INV`
/// (`remote` false) it must be in the poster's PD `pdn`; by a SEND with
/// invalidate (`remote` true), bound to the receiving QP `qpn`.
pub(crate) fn invalidate(
    dev: &mut Dev,
    qpn: u32,
    pdn: u32,
    rkey: u32,
    remote: bool,
) -> Result<(), Syndrome> {
    let mw = dev.objs.mrs.get_mw(rkey).ok_or(Syndrome::BadRkey)?;
    let Some(b) = mw.bound.filter(|_| mw.mw_type == 2) else {
        return Err(Syndrome::BadRkey);
    };
    let ours = if remote {
        b.qpn == Some(qpn)
    } else {
        mw.pdn == pdn
    };
    if !ours {
        return Err(Syndrome::PdMismatch);
    }
    unbind(dev, rkey);
    log::debug!("MW {rkey:#x} invalidated");
    Ok(())
}

/// Unbinds the window of `rkey`, if bound.
pub(crate) fn unbind(dev: &mut Dev, rkey: u32) {
    let Some(b) = dev.objs.mrs.get_mw(rkey).and_then(|mw| mw.bound.take()) else {
        return;
    };
    if let Some(mr) = dev.objs.mrs.get_mut(b.mr_key) {
        mr.windows -= 1;
    }
}

/// Frees every type 2 window bound to QP `qpn`, which leaves service
/// (reset or destroyed): no later QP of its number may use them.
pub(crate) fn release_qp(dev: &mut Dev, qpn: u32) {
    for key in dev.objs.mrs.windows_of(qpn) {
        unbind(dev, key);
    }
}

/// The MR (its key) a remote access of `len` bytes at `raddr` needing
/// `need` reaches through the window of `rkey`, for QP `qpn` of PD `pdn`:
/// the window must be bound, in the QP's PD (type 1) or bound to the QP
/// (type 2), grant `need`, and cover the range.
pub(crate) fn reach(
    dev: &mut Dev,
    qpn: u32,
    pdn: u32,
    rkey: u32,
    raddr: u64,
    len: u64,
    need: u32,
) -> Result<u32, Syndrome> {
    let mw = dev.objs.mrs.get_mw(rkey).ok_or(Syndrome::BadRkey)?;
    let b = mw.bound.ok_or(Syndrome::BadRkey)?;
    let ours = match mw.mw_type {
        1 => mw.pdn == pdn,
        _ => b.qpn == Some(qpn),
    };
    if !ours {
        return Err(Syndrome::PdMismatch);
    }
    if b.access & need != need {
        return Err(Syndrome::AccessDenied);
    }
    let inside = raddr >= b.va && raddr.checked_add(len).is_some_and(|e| e <= b.va + b.len);
    if !inside {
        return Err(Syndrome::OutOfBounds);
    }
    Ok(b.mr_key)
}

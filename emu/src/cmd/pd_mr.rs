//! CREATE_PD, DESTROY_PD, REG_MR, DEREG_MR, REREG_MR, ALLOC_MW and
//! DEALLOC_MW.

use rnic_hw_regs::cmd::*;
use rnic_hw_regs::le32;
use rnic_verbs::access;

use super::{check, fail, off, CmdResult};
use crate::iommu::{from_bytes, to_bytes, DmaRange};
use crate::objects::{Keyed, Mr, Mw, Pd};
use crate::state::State;

pub(super) fn create_pd(st: &mut State, uid: u32, out: &mut [u8; CMD_OUT_SIZE]) -> CmdResult {
    let pdn = st
        .dev
        .objs
        .pds
        .free_number()
        .ok_or(fail(CmdStatus::NoResources, 0))?;
    st.dev.objs.pds.insert(pdn, uid, Pd::default());
    to_bytes(
        &CreatePdOut {
            pdn: le32::from_ne(pdn),
        },
        out,
    );
    Ok(())
}

pub(super) fn destroy_pd(st: &mut State, uid: u32, input: &[u8; CMD_IN_SIZE]) -> CmdResult {
    let i: ObjIn = from_bytes(input);
    let pdn = i.id.to_ne();
    let pd = st
        .dev
        .objs
        .pds
        .get(pdn)
        .filter(|_| st.dev.objs.pds.owned(pdn, uid))
        .ok_or(fail(CmdStatus::BadResource, off!(ObjIn, id)))?;
    check(pd.users == 0, CmdStatus::Busy, off!(ObjIn, id))?;
    st.dev.objs.pds.remove(pdn);
    Ok(())
}

/// Checks MR access flags: supported, and remote write or atomic access
/// only with local write (the verbs rule).
fn valid_access(acc: u32) -> bool {
    let needs_local_write = access::REMOTE_WRITE | access::REMOTE_ATOMIC;
    acc & !access::MR_SUPPORTED == 0
        && (acc & needs_local_write == 0 || acc & access::LOCAL_WRITE != 0)
}

/// The translation `va .. va + len` at `iova`, checked (`field` of each
/// value given for its errors).
fn translation(
    st: &State,
    (va, len, iova): (u64, u64, u64),
    fields: [usize; 3],
) -> Result<DmaRange, super::CmdError> {
    check(
        va.checked_add(len).is_some(),
        CmdStatus::BadParam,
        fields[0],
    )?;
    check(
        len <= st.dev.cfg.max_mr_size,
        CmdStatus::BadParam,
        fields[1],
    )?;
    check(
        iova.checked_add(len).is_some(),
        CmdStatus::BadParam,
        fields[2],
    )?;
    let size = usize::try_from(len).map_err(|_| fail(CmdStatus::BadParam, fields[1]))?;
    DmaRange::new_any(&st.dev.iommu, iova, size).ok_or(fail(CmdStatus::BadDma, fields[2]))
}

pub(super) fn reg_mr(
    st: &mut State,
    uid: u32,
    input: &[u8; CMD_IN_SIZE],
    out: &mut [u8; CMD_OUT_SIZE],
) -> CmdResult {
    let i: RegMrIn = from_bytes(input);
    let pdn = i.pdn.to_ne();
    check(
        st.dev.objs.pds.owned(pdn, uid),
        CmdStatus::BadResource,
        off!(RegMrIn, pdn),
    )?;
    let acc = i.access.to_ne();
    check(
        valid_access(acc),
        CmdStatus::BadParam,
        off!(RegMrIn, access),
    )?;
    let (va, len, iova) = (i.va.to_ne(), i.length.to_ne(), i.iova.to_ne());
    let dma = translation(
        st,
        (va, len, iova),
        [
            off!(RegMrIn, va),
            off!(RegMrIn, length),
            off!(RegMrIn, iova),
        ],
    )?;
    let mr = Mr {
        pdn,
        access: acc,
        va,
        len,
        dma,
        windows: 0,
    };
    let key = st
        .dev
        .objs
        .mrs
        .insert(uid, Keyed::Mr(mr))
        .ok_or(fail(CmdStatus::NoResources, 0))?;
    if let Some(pd) = st.dev.objs.pds.get_mut(pdn) {
        pd.users += 1;
    }
    log::debug!("MR {key:#x}: pd {pdn}, va {va:#x}+{len:#x} at iova {iova:#x}, access {acc:#x}");
    let o = RegMrOut {
        lkey: le32::from_ne(key),
        rkey: le32::from_ne(key),
    };
    to_bytes(&o, out);
    Ok(())
}

/// DEREG_MR: an MR with windows bound to it is busy.
pub(super) fn dereg_mr(st: &mut State, uid: u32, input: &[u8; CMD_IN_SIZE]) -> CmdResult {
    let i: ObjIn = from_bytes(input);
    let key = i.id.to_ne();
    check(
        st.dev.objs.mrs.owned(key, uid),
        CmdStatus::BadResource,
        off!(ObjIn, id),
    )?;
    let mr = st
        .dev
        .objs
        .mrs
        .get_mut(key)
        .ok_or(fail(CmdStatus::BadResource, off!(ObjIn, id)))?;
    check(mr.windows == 0, CmdStatus::Busy, off!(ObjIn, id))?;
    let pdn = mr.pdn;
    st.dev.objs.mrs.remove(key);
    if let Some(pd) = st.dev.objs.pds.get_mut(pdn) {
        pd.users -= 1;
    }
    Ok(())
}

/// REREG_MR: the MR keeps its keys and takes a new translation, PD and/or
/// access; every value is checked before anything changes. An MR with
/// windows bound to it is busy.
pub(super) fn rereg_mr(st: &mut State, uid: u32, input: &[u8; CMD_IN_SIZE]) -> CmdResult {
    use rnic_hw_regs::cmd::rereg;
    let i: ReregMrIn = from_bytes(input);
    let key = i.lkey.to_ne();
    check(
        st.dev.objs.mrs.owned(key, uid),
        CmdStatus::BadResource,
        off!(ReregMrIn, lkey),
    )?;
    let mr = st
        .dev
        .objs
        .mrs
        .get_mut(key)
        .ok_or(fail(CmdStatus::BadResource, off!(ReregMrIn, lkey)))?;
    check(mr.windows == 0, CmdStatus::Busy, off!(ReregMrIn, lkey))?;
    let old_pdn = mr.pdn;
    let flags = i.flags.to_ne();
    let all = rereg::TRANSLATION | rereg::PD | rereg::ACCESS;
    check(
        flags != 0 && flags & !all == 0,
        CmdStatus::BadParam,
        off!(ReregMrIn, flags),
    )?;
    let pdn = if flags & rereg::PD != 0 {
        let pdn = i.pdn.to_ne();
        check(
            st.dev.objs.pds.owned(pdn, uid),
            CmdStatus::BadResource,
            off!(ReregMrIn, pdn),
        )?;
        pdn
    } else {
        old_pdn
    };
    let acc = i.access.to_ne();
    if flags & rereg::ACCESS != 0 {
        check(
            valid_access(acc),
            CmdStatus::BadParam,
            off!(ReregMrIn, access),
        )?;
    }
    let dma = if flags & rereg::TRANSLATION != 0 {
        let t = (i.va.to_ne(), i.length.to_ne(), i.iova.to_ne());
        let fields = [
            off!(ReregMrIn, va),
            off!(ReregMrIn, length),
            off!(ReregMrIn, iova),
        ];
        Some((t, translation(st, t, fields)?))
    } else {
        None
    };
    let Some(mr) = st.dev.objs.mrs.get_mut(key) else {
        return Err(fail(CmdStatus::Internal, 0));
    };
    if flags & rereg::ACCESS != 0 {
        mr.access = acc;
    }
    if let Some(((va, len, _), dma)) = dma {
        mr.va = va;
        mr.len = len;
        mr.dma = dma;
    }
    mr.pdn = pdn;
    if pdn != old_pdn {
        if let Some(pd) = st.dev.objs.pds.get_mut(old_pdn) {
            pd.users -= 1;
        }
        if let Some(pd) = st.dev.objs.pds.get_mut(pdn) {
            pd.users += 1;
        }
    }
    log::debug!("MR {key:#x}: reregistered (flags {flags:#x})");
    Ok(())
}

/// ALLOC_MW: an unbound window of type 1 or 2 in a PD.
pub(super) fn alloc_mw(
    st: &mut State,
    uid: u32,
    input: &[u8; CMD_IN_SIZE],
    out: &mut [u8; CMD_OUT_SIZE],
) -> CmdResult {
    let i: AllocMwIn = from_bytes(input);
    let pdn = i.pdn.to_ne();
    check(
        st.dev.objs.pds.owned(pdn, uid),
        CmdStatus::BadResource,
        off!(AllocMwIn, pdn),
    )?;
    let mw_type = i.mw_type.to_ne();
    check(
        mw_type == 1 || mw_type == 2,
        CmdStatus::BadParam,
        off!(AllocMwIn, mw_type),
    )?;
    let mw = Mw {
        pdn,
        mw_type: mw_type as u8,
        bound: None,
    };
    let rkey = st
        .dev
        .objs
        .mrs
        .insert(uid, Keyed::Mw(mw))
        .ok_or(fail(CmdStatus::NoResources, 0))?;
    if let Some(pd) = st.dev.objs.pds.get_mut(pdn) {
        pd.users += 1;
    }
    log::debug!("MW {rkey:#x}: type {mw_type}, pd {pdn}");
    to_bytes(
        &AllocMwOut {
            rkey: le32::from_ne(rkey),
        },
        out,
    );
    Ok(())
}

/// DEALLOC_MW: a bound window is unbound first.
pub(super) fn dealloc_mw(st: &mut State, uid: u32, input: &[u8; CMD_IN_SIZE]) -> CmdResult {
    let i: ObjIn = from_bytes(input);
    let key = i.id.to_ne();
    let mine = st.dev.objs.mrs.owned(key, uid);
    check(
        mine && st.dev.objs.mrs.get_mw(key).is_some(),
        CmdStatus::BadResource,
        off!(ObjIn, id),
    )?;
    crate::mw::unbind(&mut st.dev, key);
    if let Some(Keyed::Mw(mw)) = st.dev.objs.mrs.remove(key) {
        if let Some(pd) = st.dev.objs.pds.get_mut(mw.pdn) {
            pd.users -= 1;
        }
    }
    Ok(())
}

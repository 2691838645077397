//! ALLOC_UCTX and DEALLOC_UCTX: user contexts, each with doorbell pages of
//! its own and objects no other context's commands see.

use rnic_hw_regs::cmd::*;
use rnic_hw_regs::le32;

use super::{check, fail, off, CmdResult};
use crate::iommu::{from_bytes, to_bytes};
use crate::objects::{Keyed, Uctx};
use crate::state::State;

pub(super) fn alloc(
    st: &mut State,
    uid: u32,
    input: &[u8; CMD_IN_SIZE],
    out: &mut [u8; CMD_OUT_SIZE],
) -> CmdResult {
    let i: AllocUctxIn = from_bytes(input);
    // Contexts open contexts only from uid 0 (the device's owner).
    check(uid == 0, CmdStatus::BadParam, 0)?;
    let n = i.uar_pages.to_ne();
    check(
        n >= 1 && n <= st.dev.cfg.uar_pages,
        CmdStatus::BadParam,
        off!(AllocUctxIn, uar_pages),
    )?;
    // The lowest run of `n` pages no context has.
    let mut run = 0;
    let first = st.dev.page_owner.iter().position(|&o| {
        run = if o == 0 { run + 1 } else { 0 };
        run == n
    });
    let first = first.map(|end| end as u32 + 1 - n);
    let (Some(first), Some(uid)) = (first, st.dev.uctxs.free_number()) else {
        return Err(fail(CmdStatus::NoResources, 0));
    };
    st.dev.uctxs.insert(uid, 0, Uctx);
    st.dev.page_owner[first as usize..(first + n) as usize].fill(uid);
    log::debug!("user context {uid}: doorbell pages {first}..{}", first + n);
    to_bytes(
        &AllocUctxOut {
            uid: le32::from_ne(uid),
            uar_first: le32::from_ne(first),
            uar_count: le32::from_ne(n),
        },
        out,
    );
    Ok(())
}

/// DEALLOC_UCTX: every object of the context goes (as DESTROY_* would
/// take them, users first), then its pages.
pub(super) fn dealloc(st: &mut State, caller: u32, input: &[u8; CMD_IN_SIZE]) -> CmdResult {
    let i: ObjIn = from_bytes(input);
    let uid = i.id.to_ne();
    // Issued by uid 0 or by that context itself.
    check(
        uid != 0 && st.dev.uctxs.get(uid).is_some() && (caller == 0 || caller == uid),
        CmdStatus::BadResource,
        off!(ObjIn, id),
    )?;
    for qpn in st.qps.numbers_of(uid) {
        if let Some((qp, dev)) = st.parts(qpn) {
            crate::srq::flush_held(qp, dev);
        }
        crate::mw::release_qp(&mut st.dev, qpn);
        st.qps.remove(qpn);
    }
    for n in st.dev.objs.srqs.numbers_of(uid) {
        st.dev.objs.srqs.remove(n);
    }
    for n in st.dev.objs.cqs.numbers_of(uid) {
        st.dev.objs.cqs.remove(n);
    }
    for n in st.dev.objs.eqs.numbers_of(uid) {
        st.dev.objs.eqs.remove(n);
    }
    for key in st.dev.objs.mrs.keys_of(uid) {
        if let Some(Keyed::Mw(_)) = st.dev.objs.mrs.get_keyed(key) {
            crate::mw::unbind(&mut st.dev, key);
        }
    }
    for key in st.dev.objs.mrs.keys_of(uid) {
        st.dev.objs.mrs.remove(key);
    }
    for n in st.dev.objs.pds.numbers_of(uid) {
        st.dev.objs.pds.remove(n);
    }
    st.dev.uctxs.remove(uid);
    st.dev
        .page_owner
        .iter_mut()
        .filter(|o| **o == uid)
        .for_each(|o| *o = 0);
    log::debug!("user context {uid} closed");
    Ok(())
}

//! CREATE_PD, DESTROY_PD, REG_MR and DEREG_MR.

use rnic_hw_regs::cmd::*;
use rnic_hw_regs::le32;
use rnic_hw_regs::verbs::access;

use super::{check, fail, off, CmdResult};
use crate::iommu::{from_bytes, to_bytes, DmaRange};
use crate::objects::{Mr, Pd};
use crate::state::State;

pub(super) fn create_pd(st: &mut State, out: &mut [u8; CMD_OUT_SIZE]) -> CmdResult {
    let pdn = st
        .objs
        .pds
        .free_number()
        .ok_or(fail(CmdStatus::NoResources, 0))?;
    st.objs.pds.insert(pdn, Pd::default());
    to_bytes(
        &CreatePdOut {
            pdn: le32::from_ne(pdn),
        },
        out,
    );
    Ok(())
}

pub(super) fn destroy_pd(st: &mut State, input: &[u8; CMD_IN_SIZE]) -> CmdResult {
    let i: ObjIn = from_bytes(input);
    let pdn = i.id.to_ne();
    let pd = st
        .objs
        .pds
        .get(pdn)
        .ok_or(fail(CmdStatus::BadResource, off!(ObjIn, id)))?;
    check(pd.users == 0, CmdStatus::Busy, off!(ObjIn, id))?;
    st.objs.pds.remove(pdn);
    Ok(())
}

pub(super) fn reg_mr(
    st: &mut State,
    input: &[u8; CMD_IN_SIZE],
    out: &mut [u8; CMD_OUT_SIZE],
) -> CmdResult {
    let i: RegMrIn = from_bytes(input);
    let pdn = i.pdn.to_ne();
    check(
        st.objs.pds.get(pdn).is_some(),
        CmdStatus::BadResource,
        off!(RegMrIn, pdn),
    )?;
    let acc = i.access.to_ne();
    let needs_local_write = access::REMOTE_WRITE | access::REMOTE_ATOMIC;
    // Verbs rule: remote write or atomic access requires local write.
    let ok = acc & !access::MR_SUPPORTED == 0
        && (acc & needs_local_write == 0 || acc & access::LOCAL_WRITE != 0);
    check(ok, CmdStatus::BadParam, off!(RegMrIn, access))?;
    let (va, len, iova) = (i.va.to_ne(), i.length.to_ne(), i.iova.to_ne());
    check(
        va.checked_add(len).is_some(),
        CmdStatus::BadParam,
        off!(RegMrIn, va),
    )?;
    check(
        len <= st.cfg.max_mr_size,
        CmdStatus::BadParam,
        off!(RegMrIn, length),
    )?;
    check(
        iova.checked_add(len).is_some(),
        CmdStatus::BadParam,
        off!(RegMrIn, iova),
    )?;
    let size =
        usize::try_from(len).map_err(|_| fail(CmdStatus::BadParam, off!(RegMrIn, length)))?;
    let dma =
        DmaRange::new(&st.iommu, iova, size).ok_or(fail(CmdStatus::BadDma, off!(RegMrIn, iova)))?;
    let mr = Mr {
        pdn,
        access: acc,
        va,
        len,
        dma,
    };
    let key = st
        .objs
        .mrs
        .insert(mr)
        .ok_or(fail(CmdStatus::NoResources, 0))?;
    if let Some(pd) = st.objs.pds.get_mut(pdn) {
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

pub(super) fn dereg_mr(st: &mut State, input: &[u8; CMD_IN_SIZE]) -> CmdResult {
    let i: ObjIn = from_bytes(input);
    let mr = st
        .objs
        .mrs
        .remove(i.id.to_ne())
        .ok_or(fail(CmdStatus::BadResource, off!(ObjIn, id)))?;
    if let Some(pd) = st.objs.pds.get_mut(mr.pdn) {
        pd.users -= 1;
    }
    Ok(())
}

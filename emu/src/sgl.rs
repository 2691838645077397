//! Scatter/gather lists: resolving keys to host memory through the MR table
//! and the IOMMU, and copying between host memory and packet buffers.

use rnic_hw_regs::cqe::Syndrome;
use rnic_hw_regs::wqe::DataSeg;

use crate::iommu::{HostPtr, Iommu};
use crate::objects::{Mr, MrTable};
use crate::wqe::sge_len;

/// A host memory range the device may access.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Seg {
    pub ptr: HostPtr,
    pub len: usize,
}

impl Seg {
    pub(crate) const EMPTY: Seg = Seg {
        ptr: HostPtr(std::ptr::null_mut()),
        len: 0,
    };
}

/// Host memory of `addr .. addr + len` in `mr`, checking bounds.
pub(crate) fn mr_range(mr: &mut Mr, iommu: &Iommu, addr: u64, len: u64) -> Result<Seg, Syndrome> {
    let inside = addr >= mr.va
        && addr
            .checked_add(len)
            .is_some_and(|end| end <= mr.va + mr.len);
    if !inside {
        return Err(Syndrome::OutOfBounds);
    }
    if len == 0 {
        return Ok(Seg::EMPTY);
    }
    let off = (addr - mr.va) as usize;
    let ptr = mr
        .dma
        .at(iommu, off, len as usize)
        .ok_or(Syndrome::DmaFault)?;
    Ok(Seg {
        ptr,
        len: len as usize,
    })
}

/// Resolves a local key: the MR must exist, belong to PD `pdn`, grant
/// `need` access, and contain the range.
pub(crate) fn resolve(
    mrs: &mut MrTable,
    iommu: &Iommu,
    pdn: u32,
    key: u32,
    addr: u64,
    len: u64,
    need: u32,
) -> Result<Seg, Syndrome> {
    let mr = mrs.get_mut(key).ok_or(Syndrome::BadLkey)?;
    if mr.pdn != pdn {
        return Err(Syndrome::PdMismatch);
    }
    if mr.access & need != need {
        return Err(Syndrome::AccessDenied);
    }
    mr_range(mr, iommu, addr, len)
}

/// The memory a QP's local keys reach: the MR table, the IOMMU and the
/// QP's PD.
pub(crate) struct Keys<'a> {
    pub mrs: &'a mut MrTable,
    pub iommu: &'a Iommu,
    pub pdn: u32,
}

/// Walks the bytes `offset .. offset + len` of the list `sges`, resolving
/// each piece with `need` access and handing it to `f` with its position
/// in those `len` bytes. Only the SGEs the range reaches are resolved.
fn walk(
    k: Keys<'_>,
    sges: impl IntoIterator<Item = DataSeg>,
    offset: u64,
    len: usize,
    need: u32,
    mut f: impl FnMut(Seg, usize),
) -> Result<(), Syndrome> {
    let mut skip = offset;
    let mut done = 0usize;
    for s in sges {
        if done == len {
            break;
        }
        let n = sge_len(&s);
        if skip >= n {
            skip -= n;
            continue;
        }
        let take = ((n - skip) as usize).min(len - done);
        let seg = resolve(
            k.mrs,
            k.iommu,
            k.pdn,
            s.lkey.to_ne(),
            s.addr.to_ne().wrapping_add(skip),
            take as u64,
            need,
        )?;
        f(seg, done);
        done += take;
        skip = 0;
    }
    if done < len {
        // The message reaches past the list: the callers check lengths
        // first, so this is a list shorter than it said.
        return Err(Syndrome::OutOfBounds);
    }
    Ok(())
}

/// Copies bytes `offset .. offset + dst.len()` of the gather list `sges`
/// into `dst`.
pub(crate) fn gather(
    k: Keys<'_>,
    sges: impl IntoIterator<Item = DataSeg>,
    offset: u64,
    dst: &mut [u8],
) -> Result<(), Syndrome> {
    let len = dst.len();
    walk(k, sges, offset, len, 0, |seg, at| {
        copy_out(seg, &mut dst[at..at + seg.len])
    })
}

/// Copies `src` into bytes `offset ..` of the scatter list `sges`, which
/// needs `need` access.
pub(crate) fn scatter(
    k: Keys<'_>,
    sges: impl IntoIterator<Item = DataSeg>,
    offset: u64,
    src: &[u8],
    need: u32,
) -> Result<(), Syndrome> {
    walk(k, sges, offset, src.len(), need, |seg, at| {
        copy_in(seg, &src[at..at + seg.len])
    })
}

/// Copies `src` (exactly `seg.len` bytes) into host memory `seg`.
pub(crate) fn copy_in(seg: Seg, src: &[u8]) {
    let n = seg.len.min(src.len());
    // SAFETY: `seg` lies inside a live mapping translated under the device
    // lock, which is held; `src` is a packet buffer of the device's own,
    // never host memory of the same mapping.
    unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), seg.ptr.0, n) };
}

/// Copies host memory `seg` into `dst` (exactly `seg.len` bytes).
pub(crate) fn copy_out(seg: Seg, dst: &mut [u8]) {
    let n = seg.len.min(dst.len());
    // SAFETY: as in `copy_in`, the other way round.
    unsafe { std::ptr::copy_nonoverlapping(seg.ptr.0, dst.as_mut_ptr(), n) };
}

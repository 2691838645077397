//! Scatter/gather lists: resolving keys to host memory through the MR table
//! and the IOMMU, and copying between lists.

use rnic_hw_regs::cqe::Syndrome;

use crate::iommu::{HostPtr, Iommu};
use crate::objects::{Mr, MrTable};

/// Most segments in one list: a send WQE holds at most 31 data segments.
pub(crate) const MAX_SEGS: usize = 32;

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

/// A list of host memory ranges, stored inline (no allocation per WQE).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Sgl {
    segs: [Seg; MAX_SEGS],
    n: usize,
}

impl Default for Sgl {
    fn default() -> Self {
        Self {
            segs: [Seg::EMPTY; MAX_SEGS],
            n: 0,
        }
    }
}

impl Sgl {
    /// Appends a segment; callers never exceed [`MAX_SEGS`] (WQE decoding
    /// bounds the segment count).
    pub(crate) fn push(&mut self, seg: Seg) {
        self.segs[self.n] = seg;
        self.n += 1;
    }

    /// Empties the list (for reuse: nothing is re-initialized).
    pub(crate) fn clear(&mut self) {
        self.n = 0;
    }

    pub(crate) fn segs(&self) -> &[Seg] {
        &self.segs[..self.n]
    }
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

/// Copies `len` bytes from the start of `src` into the start of `dst`; both
/// lists hold at least `len` bytes.
pub(crate) fn copy(src: &[Seg], dst: &[Seg], len: usize) {
    let (mut si, mut so, mut di, mut dof) = (0, 0, 0, 0);
    let mut left = len;
    while left > 0 {
        let (s, d) = (src[si], dst[di]);
        let n = left.min(s.len - so).min(d.len - dof);
        // SAFETY: both ranges lie inside segments translated under the
        // device lock (or a local buffer of the caller's); `copy` allows the
        // overlap a loopback transfer within one buffer can have.
        unsafe { std::ptr::copy(s.ptr.0.add(so), d.ptr.0.add(dof), n) };
        left -= n;
        so += n;
        dof += n;
        if so == s.len {
            si += 1;
            so = 0;
        }
        if dof == d.len {
            di += 1;
            dof = 0;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(buf: &mut [u8]) -> Seg {
        Seg {
            ptr: HostPtr(buf.as_mut_ptr()),
            len: buf.len(),
        }
    }

    #[test]
    fn copy_across_uneven_segments() {
        let mut a: Vec<u8> = (0..10).collect();
        let mut b: Vec<u8> = (10..17).collect();
        let (mut x, mut y, mut z) = ([0u8; 4], [0u8; 9], [0u8; 8]);
        let src = [seg(&mut a), seg(&mut b)];
        let dst = [seg(&mut x), seg(&mut y), seg(&mut z)];
        copy(&src, &dst, 16);
        assert_eq!(x, [0, 1, 2, 3]);
        assert_eq!(y, [4, 5, 6, 7, 8, 9, 10, 11, 12]);
        assert_eq!(z, [13, 14, 15, 0, 0, 0, 0, 0]);
    }
}

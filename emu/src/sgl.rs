//! Scatter/gather lists: resolving keys to host memory through the MR table
//! and the IOMMU, and copying between host memory and packet buffers.

use rnic_hw_regs::cqe::Syndrome;
use rnic_hw_regs::wqe::DataSeg;
use rnic_hw_regs::PAGE_SIZE;

use crate::iommu::{HostPtr, Iommu, Target};
use crate::objects::{Mr, MrTable};
use crate::wqe::sge_len;

/// A memory range the device may access.
#[derive(Debug, Clone)]
pub(crate) struct Seg {
    pub at: Target,
    pub len: usize,
}

impl Seg {
    pub(crate) const EMPTY: Seg = Seg {
        at: Target::Host(HostPtr(std::ptr::null_mut())),
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
    let at = mr
        .dma
        .target(iommu, off, len as usize)
        .ok_or(Syndrome::DmaFault)?;
    Ok(Seg {
        at,
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
    mut f: impl FnMut(&Seg, usize, u64) -> Result<(), Syndrome>,
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
        f(&seg, done, n - skip)?;
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
/// into `dst`; `rest` bytes of the list, from `offset` on, will be
/// wanted (the rest of the message), which another process's memory
/// reads ahead.
pub(crate) fn gather(
    k: Keys<'_>,
    sges: impl IntoIterator<Item = DataSeg>,
    offset: u64,
    dst: &mut [u8],
    rest: u64,
) -> Result<(), Syndrome> {
    let len = dst.len();
    walk(k, sges, offset, len, 0, |seg, at, sge_left| {
        let ahead = sge_left.min(rest.saturating_sub(at as u64));
        copy_out(seg, &mut dst[at..at + seg.len], ahead)
    })
}

/// Copies `src` into bytes `offset ..` of the scatter list `sges`, which
/// needs `need` access. With `queue_for` a QP, the bytes are a packet of
/// that QP's message whose completion comes later: another process's
/// memory is written with the packets that continue it, at the latest
/// when the message completes ([`flush`]); else at once.
pub(crate) fn scatter(
    k: Keys<'_>,
    sges: impl IntoIterator<Item = DataSeg>,
    offset: u64,
    src: &[u8],
    need: u32,
    queue_for: Option<u32>,
) -> Result<(), Syndrome> {
    walk(k, sges, offset, src.len(), need, |seg, at, _| {
        copy_in(seg, &src[at..at + seg.len], queue_for)
    })
}

/// Writes what packets of QP `qpn` queued for another process's memory,
/// before their message completes: a failure of any is the message's.
pub(crate) fn flush(iommu: &Iommu, qpn: u32) -> Result<(), Syndrome> {
    iommu.process().map_or(Ok(()), |p| p.flush(qpn))
}

/// Copies `src` (exactly `seg.len` bytes) into memory `seg`: host memory
/// at once; another process's memory at once, or with `queue_for` a QP
/// queued as [`scatter`] says. Another process's memory may fault
/// (`DmaFault`).
pub(crate) fn copy_in(seg: &Seg, src: &[u8], queue_for: Option<u32>) -> Result<(), Syndrome> {
    let n = seg.len.min(src.len());
    match (&seg.at, queue_for) {
        (Target::Host(p), _) => {
            copy_to_host(*p, &src[..n]);
            Ok(())
        }
        (Target::Process(mem, addr, _), None) => mem.write(*addr, &src[..n]),
        (Target::Process(mem, addr, _), Some(qpn)) => mem.write_later(qpn, *addr, &src[..n]),
    }
}

/// Copies memory `seg` into `dst` (exactly `seg.len` bytes), as
/// [`copy_in`] does the other way, where `ahead` bytes from `seg`'s start
/// will be wanted: another process's memory reads them at once (within
/// its mapping).
pub(crate) fn copy_out(seg: &Seg, dst: &mut [u8], ahead: u64) -> Result<(), Syndrome> {
    let n = seg.len.min(dst.len());
    match &seg.at {
        Target::Host(p) => {
            copy_from_host(*p, &mut dst[..n]);
            Ok(())
        }
        Target::Process(mem, addr, end) => {
            // At least the rest of the page: small messages from one
            // buffer, as a stream of them sends, cost one call a step.
            let page_end = (*addr | (PAGE_SIZE as u64 - 1)).saturating_add(1);
            let limit = addr.saturating_add(ahead).max(page_end).min(*end);
            mem.read(*addr, &mut dst[..n], limit)
        }
    }
}

/// Copies `src` into host memory at `p`, inside a live mapping.
///
/// The application may touch these bytes meanwhile: both sides access
/// them only atomically (relaxed byte atomics, `rnic_queues::shared`; the
/// driver's `Mr::read`/`write` too), so neither is a data race.
fn copy_to_host(p: HostPtr, src: &[u8]) {
    // SAFETY: `p .. p + src.len()` lies inside a live mapping translated
    // under the device lock, which is held; shared bytes are accessed only
    // atomically; `src` is a frame or device buffer, not guest memory.
    unsafe { rnic_queues::shared::copy_to_shared(p.0, src) }
}

/// Copies host memory at `p` into `dst`, as [`copy_to_host`] does the
/// other way.
fn copy_from_host(p: HostPtr, dst: &mut [u8]) {
    // SAFETY: as in `copy_to_host`, for reads.
    unsafe { rnic_queues::shared::copy_from_shared(p.0, dst) }
}

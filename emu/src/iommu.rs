//! The emulated IOMMU: the only way the device model reaches host memory.
//!
//! Every mapping is an IOVA range backed by host memory, created by
//! `EmuHal::dma_alloc` (memory the model allocates) or `EmuHal::dma_map`
//! (caller memory), or by another process's memory (`EmuHal::map_process`:
//! a vfio-user client's own buffers, reached through the kernel). Rings,
//! doorbell records and every other structure the device reads in place
//! must be host memory; memory regions may be either. IOVAs are handed out
//! from [`IOVA_BASE`] upwards, page aligned (a `dma_map` keeps the
//! caller's offset within the page), are never reused, and are separated
//! by an unmapped guard page, so a stale or overrunning device access
//! misses instead of landing in other memory.
//!
//! The device caches translations of the ranges it uses on every operation
//! (queue buffers, doorbell records, MRs) in a [`DmaRange`]; the IOMMU's
//! generation counter, bumped on every unmap, invalidates those caches.

use std::alloc::{alloc_zeroed, Layout};
use std::collections::BTreeMap;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;

use rnic_hw_regs::PAGE_SIZE;
use rnic_queues::{HalError, Pod};

use crate::procmem::ProcessMemory;

/// First IOVA handed out.
pub const IOVA_BASE: u64 = 0x1_0000_0000;
const PAGE: u64 = PAGE_SIZE as u64;

/// A host address the device may access (the result of a translation).
///
/// It is only dereferenced while the device state lock is held, and the
/// mapping it came from can only be removed under that same lock.
#[derive(Debug, Clone, Copy)]
pub(crate) struct HostPtr(pub(crate) *mut u8);

// SAFETY: a HostPtr is a plain address; every access through it happens
// under the device state lock, which also serializes unmapping.
unsafe impl Send for HostPtr {}

impl HostPtr {
    /// The address `off` bytes further.
    pub(crate) fn add(self, off: usize) -> HostPtr {
        HostPtr(self.0.wrapping_add(off))
    }
}

/// Where the bytes of an IOVA range are.
#[derive(Debug, Clone)]
pub(crate) enum Target {
    /// Host memory of this process.
    Host(HostPtr),
    /// Another process's memory at this virtual address, in a mapping
    /// that ends at the second.
    Process(Arc<ProcessMemory>, u64, u64),
}

impl Target {
    /// The bytes `off` further.
    fn add(&self, off: usize) -> Target {
        match self {
            Target::Host(p) => Target::Host(p.add(off)),
            Target::Process(m, a, end) => {
                Target::Process(m.clone(), a.wrapping_add(off as u64), *end)
            }
        }
    }
}

#[derive(Debug)]
struct Mapping {
    at: Target,
    len: usize,
    /// Set for memory the IOMMU allocated itself (`dma_alloc`).
    owned: Option<Layout>,
}

/// The IOVA → host translation table.
#[derive(Debug)]
pub(crate) struct Iommu {
    maps: BTreeMap<u64, Mapping>,
    next: u64,
    gen: u64,
    /// The process whose memory was last mapped (a vfio-user client's).
    process: Option<Arc<ProcessMemory>>,
}

impl Iommu {
    pub(crate) fn new() -> Self {
        Self {
            maps: BTreeMap::new(),
            next: IOVA_BASE,
            gen: 1,
            process: None,
        }
    }

    /// The process whose memory the device reaches, if any: its reads
    /// ahead and writes behind are settled around each step.
    pub(crate) fn process(&self) -> Option<&Arc<ProcessMemory>> {
        self.process.as_ref()
    }

    /// Generation counter: changes whenever a mapping disappears.
    pub(crate) fn gen(&self) -> u64 {
        self.gen
    }

    /// Whether any mapping covers a byte of `start .. end`.
    fn overlaps(&self, start: u64, end: u64) -> bool {
        let before = self.maps.range(..start).next_back();
        before.is_some_and(|(&s, m)| s + m.len as u64 > start)
            || self.maps.range(start..end).next().is_some()
    }

    /// Reserves IOVA space for `len` bytes starting `offset` bytes into a
    /// page, for host memory at `host`.
    fn reserve(&mut self, offset: u64, len: usize, host: *mut u8) -> Result<u64, HalError> {
        let span = (offset + len as u64).div_ceil(PAGE).max(1) * PAGE;
        let mut base = self.next;
        // An IOVA equal to the host address would hide a driver that hands
        // host pointers to the device; skip a page in that (unlikely) case.
        if base + offset == host as u64 {
            base += PAGE;
        }
        // Past any range a platform mapped at an address of its choosing,
        // with a guard page on either side.
        while self.overlaps(base.saturating_sub(PAGE), base.saturating_add(span + PAGE)) {
            let (&s, m) = self
                .maps
                .range(..base.saturating_add(span + PAGE))
                .next_back()
                .ok_or(HalError::NoIova)?;
            base = (s + m.len as u64)
                .checked_next_multiple_of(PAGE)
                .and_then(|e| e.checked_add(PAGE))
                .ok_or(HalError::NoIova)?;
        }
        // One unmapped guard page after every mapping.
        let next = base
            .checked_add(span)
            .and_then(|e| e.checked_add(PAGE))
            .ok_or(HalError::NoIova)?;
        self.next = next;
        Ok(base + offset)
    }

    /// Allocates `len` bytes of zeroed, page-aligned host memory and maps it.
    pub(crate) fn alloc(&mut self, len: usize) -> Result<(NonNull<u8>, u64), HalError> {
        let size = len
            .max(1)
            .checked_next_multiple_of(PAGE_SIZE)
            .ok_or(HalError::NoMemory)?;
        let layout = Layout::from_size_align(size, PAGE_SIZE).map_err(|_| HalError::NoMemory)?;
        // SAFETY: the layout has a non-zero size.
        let host = unsafe { alloc_zeroed(layout) };
        let host = NonNull::new(host).ok_or(HalError::NoMemory)?;
        let iova = match self.reserve(0, size, host.as_ptr()) {
            Ok(iova) => iova,
            Err(e) => {
                // SAFETY: allocated just above with this layout, never shared.
                unsafe { std::alloc::dealloc(host.as_ptr(), layout) };
                return Err(e);
            }
        };
        self.maps.insert(
            iova,
            Mapping {
                at: Target::Host(HostPtr(host.as_ptr())),
                len: size,
                owned: Some(layout),
            },
        );
        log::trace!("iommu: alloc {size:#x} bytes at iova {iova:#x}");
        Ok((host, iova))
    }

    /// Unmaps and frees memory from [`Iommu::alloc`].
    pub(crate) fn free(&mut self, iova: u64, host: NonNull<u8>) -> Result<(), HalError> {
        match self.maps.get(&iova) {
            Some(Mapping {
                at: Target::Host(p),
                owned: Some(_),
                ..
            }) if p.0 == host.as_ptr() => {}
            _ => return Err(HalError::NotMapped),
        }
        let m = self.maps.remove(&iova).ok_or(HalError::NotMapped)?;
        self.gen += 1;
        if let (Some(layout), Target::Host(p)) = (m.owned, m.at) {
            // SAFETY: the memory came from alloc_zeroed with this layout; the
            // mapping is gone and the generation bump invalidates every cached
            // translation, so the device can no longer reach it.
            unsafe { std::alloc::dealloc(p.0, layout) };
        }
        log::trace!("iommu: free iova {iova:#x}");
        Ok(())
    }

    /// Maps caller memory `host .. host + len`.
    pub(crate) fn map(&mut self, host: NonNull<u8>, len: usize) -> Result<u64, HalError> {
        let offset = host.as_ptr() as u64 % PAGE;
        let iova = self.reserve(offset, len, host.as_ptr())?;
        self.maps.insert(
            iova,
            Mapping {
                at: Target::Host(HostPtr(host.as_ptr())),
                len,
                owned: None,
            },
        );
        log::trace!("iommu: map {len:#x} bytes at iova {iova:#x}");
        Ok(iova)
    }

    /// Maps caller memory `host .. host + len` at `iova`, an address the
    /// platform chose (a vfio-user client's `DMA_MAP`); refused if it
    /// overlaps a mapping or wraps.
    pub(crate) fn map_at(
        &mut self,
        iova: u64,
        host: NonNull<u8>,
        len: usize,
    ) -> Result<(), HalError> {
        self.insert_at(iova, Target::Host(HostPtr(host.as_ptr())), len)
    }

    /// Maps `len` bytes of another process's memory, from virtual address
    /// `addr`, at `iova`; refused as [`Iommu::map_at`] refuses.
    pub(crate) fn map_process(
        &mut self,
        iova: u64,
        mem: Arc<ProcessMemory>,
        addr: u64,
        len: usize,
    ) -> Result<(), HalError> {
        let end = addr.checked_add(len as u64).ok_or(HalError::NoIova)?;
        self.process = Some(mem.clone());
        self.insert_at(iova, Target::Process(mem, addr, end), len)
    }

    fn insert_at(&mut self, iova: u64, at: Target, len: usize) -> Result<(), HalError> {
        let end = iova.checked_add(len as u64).ok_or(HalError::NoIova)?;
        if len == 0 || self.overlaps(iova, end) {
            return Err(HalError::NoIova);
        }
        self.maps.insert(
            iova,
            Mapping {
                at,
                len,
                owned: None,
            },
        );
        log::trace!("iommu: map {len:#x} bytes at the given iova {iova:#x}");
        Ok(())
    }

    /// Removes a mapping made by [`Iommu::map`] or [`Iommu::map_at`].
    pub(crate) fn unmap(&mut self, iova: u64, len: usize) -> Result<(), HalError> {
        match self.maps.get(&iova) {
            Some(m) if m.owned.is_none() && m.len == len => {}
            _ => return Err(HalError::NotMapped),
        }
        self.maps.remove(&iova);
        self.gen += 1;
        log::trace!("iommu: unmap iova {iova:#x}");
        Ok(())
    }

    /// Translates `iova .. iova + len`, which must lie inside one mapping
    /// of host memory.
    pub(crate) fn translate(&self, iova: u64, len: usize) -> Option<HostPtr> {
        match self.target(iova, len)? {
            Target::Host(p) => Some(p),
            Target::Process(..) => None,
        }
    }

    /// Where `iova .. iova + len` is, which must lie inside one mapping.
    pub(crate) fn target(&self, iova: u64, len: usize) -> Option<Target> {
        let (&start, m) = self.maps.range(..=iova).next_back()?;
        let off = iova - start;
        let end = off.checked_add(len as u64)?;
        if end > m.len as u64 {
            return None;
        }
        Some(m.at.add(off as usize))
    }
}

impl Drop for Iommu {
    fn drop(&mut self) {
        // Memory from dma_alloc that the driver never freed is leaked, not
        // freed: a DmaRegion stays valid until dma_free by the Hal contract,
        // and its holder may still use it after the last Hal handle is gone.
        let leaked: usize = self
            .maps
            .values()
            .filter(|m| m.owned.is_some())
            .map(|m| m.len)
            .sum();
        if leaked != 0 {
            log::debug!("iommu: {leaked} bytes of DMA memory never freed; leaking them");
        }
    }
}

/// A device-side range of IOVA space with a cached translation.
///
/// The translation is redone only when the IOMMU generation changed since it
/// was cached, so the hot path costs one comparison.
#[derive(Debug)]
pub(crate) struct DmaRange {
    iova: u64,
    len: usize,
    at: Target,
    gen: u64,
}

impl DmaRange {
    /// Translates the range now; `None` if it is not mapped. An empty range
    /// needs no mapping: nothing is ever accessed through it.
    pub(crate) fn new(iommu: &Iommu, iova: u64, len: usize) -> Option<Self> {
        let at = if len == 0 {
            Target::Host(HostPtr(std::ptr::null_mut()))
        } else {
            Target::Host(iommu.translate(iova, len)?)
        };
        Some(Self {
            iova,
            len,
            at,
            gen: iommu.gen(),
        })
    }

    /// Like [`DmaRange::new`], but the range may be another process's
    /// memory too: a memory region's, which the device only copies to and
    /// from ([`DmaRange::target`]).
    pub(crate) fn new_any(iommu: &Iommu, iova: u64, len: usize) -> Option<Self> {
        let at = if len == 0 {
            Target::Host(HostPtr(std::ptr::null_mut()))
        } else {
            iommu.target(iova, len)?
        };
        Some(Self {
            iova,
            len,
            at,
            gen: iommu.gen(),
        })
    }

    /// Where byte `off .. off + len` of the range is, `None` if that is
    /// outside the range or the range is no longer mapped.
    pub(crate) fn target(&mut self, iommu: &Iommu, off: usize, len: usize) -> Option<Target> {
        if off.checked_add(len)? > self.len {
            return None;
        }
        if self.gen != iommu.gen() && self.len != 0 {
            self.at = iommu.target(self.iova, self.len)?;
            self.gen = iommu.gen();
        }
        Some(self.at.add(off))
    }

    /// Host address of byte `off .. off + len` of the range, `None` if that
    /// is outside the range, the range is no longer mapped, or it is not
    /// host memory.
    pub(crate) fn at(&mut self, iommu: &Iommu, off: usize, len: usize) -> Option<HostPtr> {
        match self.target(iommu, off, len)? {
            Target::Host(p) => Some(p),
            Target::Process(..) => None,
        }
    }

    /// Reads a plain-data `T` at byte `off` (a descriptor: a WQE segment).
    pub(crate) fn read<T: Pod>(&mut self, iommu: &Iommu, off: usize) -> Option<T> {
        let p = self.at(iommu, off, size_of::<T>())?;
        // SAFETY: the bytes are inside a live mapping (translated under the
        // device lock); `T: Pod` is valid for any bit pattern. A plain
        // unaligned copy: the driver handed these bytes over through a
        // doorbell record read with acquire ordering (`read_index`) and does
        // not write them again until the device completes them.
        Some(unsafe { p.0.cast::<T>().read_unaligned() })
    }

    /// Reads the little-endian index (a doorbell record word) at byte `off`
    /// with one atomic acquire load. `None` if it is unmapped or not 4-byte
    /// aligned (a DMA fault: the driver chose the address).
    pub(crate) fn read_index(&mut self, iommu: &Iommu, off: usize) -> Option<u32> {
        let p = self.at(iommu, off, 4)?;
        if p.0 as usize % 4 != 0 {
            return None;
        }
        // SAFETY: inside a live mapping (translated under the device lock)
        // and 4-byte aligned (checked); the driver accesses doorbell records
        // only atomically (`DbRec`) while the device uses them.
        let word = unsafe { AtomicU32::from_ptr(p.0.cast::<u32>()) };
        // Acquire: the driver wrote the entries this index covers (or
        // finished reading the ones it frees) before publishing it.
        Some(u32::from_le(word.load(Ordering::Acquire)))
    }
}

/// Reads a `T` from the start of `bytes`.
pub(crate) fn from_bytes<T: Pod>(bytes: &[u8]) -> T {
    assert!(
        bytes.len() >= size_of::<T>(),
        "buffer shorter than the type"
    );
    // SAFETY: `bytes` holds at least size_of::<T>() bytes (checked) and any
    // bit pattern is a valid T (Pod); the read is unaligned.
    unsafe { bytes.as_ptr().cast::<T>().read_unaligned() }
}

/// Writes `v` to the start of `bytes`.
pub(crate) fn to_bytes<T: Pod>(v: &T, bytes: &mut [u8]) {
    assert!(
        bytes.len() >= size_of::<T>(),
        "buffer shorter than the type"
    );
    // SAFETY: both ranges hold size_of::<T>() bytes and are distinct borrows;
    // `T: Pod` has no padding, so every byte copied is initialised.
    unsafe {
        std::ptr::copy_nonoverlapping(
            (v as *const T).cast::<u8>(),
            bytes.as_mut_ptr(),
            size_of::<T>(),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mapping_at_a_chosen_iova_refuses_overlaps_and_moves_the_allocator_past_it() {
        let mut m = Iommu::new();
        let mut buf = vec![0u8; 3 * 4096];
        let host = NonNull::new(buf.as_mut_ptr()).unwrap();
        m.map_at(IOVA_BASE, host, 2 * 4096).unwrap();
        assert_eq!(
            m.translate(IOVA_BASE + 4096, 8).unwrap().0,
            buf[4096..].as_mut_ptr()
        );
        for (iova, len) in [(IOVA_BASE + 4095, 2), (IOVA_BASE - 1, 2), (IOVA_BASE, 1)] {
            assert_eq!(
                m.map_at(iova, host, len),
                Err(HalError::NoIova),
                "{iova:#x}"
            );
        }
        assert_eq!(
            m.map_at(u64::MAX - 1, host, 4),
            Err(HalError::NoIova),
            "wraps"
        );
        assert_eq!(
            m.map_at(IOVA_BASE + 2 * 4096, host, 0),
            Err(HalError::NoIova)
        );
        m.map_at(IOVA_BASE + 2 * 4096, host, 4096).unwrap();
        // The allocator's next IOVA was taken: it goes past, after a guard.
        let (_, iova) = m.alloc(100).unwrap();
        assert!(iova >= IOVA_BASE + 4 * 4096, "{iova:#x}");
        m.unmap(IOVA_BASE, 2 * 4096).unwrap();
        assert!(m.translate(IOVA_BASE, 1).is_none());
    }

    #[test]
    fn alloc_translate_free() {
        let mut m = Iommu::new();
        let (host, iova) = m.alloc(100).unwrap();
        assert_eq!(iova % PAGE, 0);
        assert!(iova >= IOVA_BASE);
        assert_ne!(iova, host.as_ptr() as u64);
        assert_eq!(
            m.translate(iova + 10, 20).unwrap().0,
            host.as_ptr().wrapping_add(10)
        );
        // The whole page is mapped, not a byte more.
        assert!(m.translate(iova, 4096).is_some());
        assert!(m.translate(iova, 4097).is_none());
        assert!(m.translate(iova - 1, 1).is_none());
        let mut r = DmaRange::new(&m, iova, 64).unwrap();
        assert!(r.at(&m, 0, 64).is_some());
        assert!(r.at(&m, 1, 64).is_none(), "outside the cached range");
        m.free(iova, host).unwrap();
        assert!(m.translate(iova, 1).is_none());
        assert!(r.at(&m, 0, 8).is_none(), "cache must see the unmap");
        assert_eq!(m.free(iova, host), Err(HalError::NotMapped));
    }

    #[test]
    fn map_keeps_page_offset_and_exact_length() {
        let mut m = Iommu::new();
        let mut buf = vec![0u8; 256];
        let p = NonNull::new(buf.as_mut_ptr().wrapping_add(3)).unwrap();
        let iova = m.map(p, 100).unwrap();
        assert_eq!(iova % PAGE, p.as_ptr() as u64 % PAGE);
        assert!(m.translate(iova, 100).is_some());
        assert!(m.translate(iova, 101).is_none());
        assert_eq!(m.unmap(iova, 99), Err(HalError::NotMapped));
        m.unmap(iova, 100).unwrap();
        assert!(m.translate(iova, 1).is_none());
        let second = m.map(p, 100).unwrap();
        assert_ne!(second, iova, "IOVAs are never reused");
    }
}

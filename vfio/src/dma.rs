//! DMA address space management: pool memory and callers' buffers mapped
//! into the IOMMU at IOVAs from the allocator.

use std::collections::BTreeMap;
use std::mem::ManuallyDrop;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use crate::container::Container;
use crate::error::VfioError;
use crate::iova::IovaAllocator;
use crate::pool::{DmaPool, HugePages, PoolBlock, HUGE_PAGE_SIZE};

/// What maps and unmaps IOVA ranges: the VFIO container, or a fake in tests.
pub(crate) trait IommuMapper {
    /// Maps `vaddr .. vaddr + len` at `iova`.
    ///
    /// # Safety
    ///
    /// As [`Container::map_dma`].
    unsafe fn map(&self, vaddr: usize, iova: u64, len: u64) -> Result<(), VfioError>;
    /// Unmaps exactly a range mapped before.
    fn unmap(&self, iova: u64, len: u64) -> Result<(), VfioError>;
}

impl IommuMapper for Arc<Container> {
    unsafe fn map(&self, vaddr: usize, iova: u64, len: u64) -> Result<(), VfioError> {
        // SAFETY: forwarded contract.
        unsafe { self.map_dma(vaddr, iova, len) }
    }
    fn unmap(&self, iova: u64, len: u64) -> Result<(), VfioError> {
        self.unmap_dma(iova, len)
    }
}

#[derive(Debug)]
enum Origin {
    /// Memory from the pool, returned to it when unmapped.
    Pool(PoolBlock),
    /// The caller's memory (`Hal::dma_map`).
    User,
}

#[derive(Debug)]
struct Mapping {
    /// Page-aligned start of the mapped memory.
    vaddr: usize,
    /// Mapped length (whole pages).
    len: u64,
    origin: Origin,
}

/// Counters of a DMA space, for diagnostics and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DmaStats {
    /// Live IOMMU mappings (pool allocations and mapped buffers).
    pub mappings: usize,
    /// Bytes of IOVA space still free.
    pub iova_free: u64,
    /// Bytes the pool holds from the kernel.
    pub pool_reserved: usize,
    /// Bytes of pool memory in use.
    pub pool_used: usize,
    /// Bytes leaked because an unmap failed (never reused).
    pub leaked: u64,
    /// Bytes of IOVA space retired: unmapped, but never handed out again
    /// because the device may still hold a reference to it.
    pub retired: u64,
}

/// The DMA side of a device: pinned pool, IOVA allocator, live mappings.
#[derive(Debug)]
pub(crate) struct DmaSpace<M: IommuMapper> {
    mapper: M,
    pool: DmaPool,
    iova: IovaAllocator,
    maps: BTreeMap<u64, Mapping>,
    page: u64,
    huge_iommu_pages: bool,
    leaked: u64,
    retired: u64,
}

impl<M: IommuMapper> DmaSpace<M> {
    /// A DMA space over `ranges` (inclusive) of IOVA, at most `limit`,
    /// with IOMMU page sizes `page_sizes` (bitmap).
    pub(crate) fn new(
        mapper: M,
        hugepages: HugePages,
        ranges: &[(u64, u64)],
        page_sizes: u64,
        limit: u64,
    ) -> Self {
        let pool = DmaPool::new(hugepages);
        let iommu_page = if page_sizes == 0 {
            4096
        } else {
            1u64 << page_sizes.trailing_zeros()
        };
        let page = (pool.page_size() as u64).max(iommu_page);
        Self {
            mapper,
            pool,
            iova: IovaAllocator::new(ranges, page, limit),
            maps: BTreeMap::new(),
            page,
            huge_iommu_pages: page_sizes & HUGE_PAGE_SIZE as u64 != 0,
            leaked: 0,
            retired: 0,
        }
    }

    pub(crate) fn stats(&self) -> DmaStats {
        DmaStats {
            mappings: self.maps.len(),
            iova_free: self.iova.free_bytes(),
            pool_reserved: self.pool.reserved_bytes(),
            pool_used: self.pool.used_bytes(),
            leaked: self.leaked,
            retired: self.retired,
        }
    }

    /// Narrows the IOVA space to `ranges` (inclusive), as reported after
    /// another group joined the container. Live mappings are inside them:
    /// the kernel refuses a group whose reserved regions overlap one.
    pub(crate) fn restrict_iova(&mut self, ranges: &[(u64, u64)]) {
        self.iova.restrict(ranges);
    }

    /// Allocates zeroed pool memory and maps it; returns (vaddr, iova, len).
    /// The length is rounded up to whole IOMMU pages, and the memory is
    /// aligned to them, as `VFIO_IOMMU_MAP_DMA` requires.
    pub(crate) fn alloc(&mut self, len: usize) -> Result<(NonNull<u8>, u64, usize), VfioError> {
        let page = self.page as usize;
        let len = len
            .max(1)
            .checked_next_multiple_of(page)
            .ok_or(VfioError::NoIova {
                len: len as u64,
                limit: u64::MAX,
            })?;
        let block = self.pool.alloc_aligned(len, page)?;
        let blen = block.len() as u64;
        let align =
            if self.huge_iommu_pages && block.huge_aligned() && blen >= HUGE_PAGE_SIZE as u64 {
                HUGE_PAGE_SIZE as u64
            } else {
                self.page
            };
        let iova = match self.iova.alloc(blen, align) {
            Ok(i) => i,
            Err(e) => {
                self.pool.free(block);
                return Err(e);
            }
        };
        let vaddr = block.ptr();
        // SAFETY: the block is pool memory that stays mapped in this
        // process until it is unmapped here (free/drop) and returned to the
        // pool; nothing else uses it meanwhile.
        if let Err(e) = unsafe { self.mapper.map(vaddr.as_ptr() as usize, iova, blen) } {
            self.pool.free(block);
            let _ = self.iova.free(iova, blen);
            return Err(e);
        }
        log::trace!("dma_alloc {blen:#x} bytes at {vaddr:p} iova {iova:#x}");
        let len = block.len();
        self.maps.insert(
            iova,
            Mapping {
                vaddr: vaddr.as_ptr() as usize,
                len: blen,
                origin: Origin::Pool(block),
            },
        );
        Ok((vaddr, iova, len))
    }

    /// Unmaps and frees memory from [`DmaSpace::alloc`].
    pub(crate) fn free(&mut self, iova: u64, vaddr: NonNull<u8>) -> Result<(), VfioError> {
        match self.maps.get(&iova) {
            Some(m)
                if matches!(m.origin, Origin::Pool(_)) && m.vaddr == vaddr.as_ptr() as usize => {}
            _ => return Err(VfioError::NotMapped { iova, len: 0 }),
        }
        let m = self.maps.remove(&iova).expect("checked above");
        self.release(iova, m)
    }

    /// Maps the caller's `vaddr .. vaddr + len`; returns the IOVA of
    /// `vaddr` (same offset within its page).
    ///
    /// # Safety
    ///
    /// As `Hal::dma_map`.
    pub(crate) unsafe fn map_user(
        &mut self,
        vaddr: NonNull<u8>,
        len: usize,
    ) -> Result<u64, VfioError> {
        let addr = vaddr.as_ptr() as usize;
        let page = self.page as usize;
        let start = addr & !(page - 1);
        let end = addr
            .checked_add(len.max(1))
            .and_then(|e| e.checked_add(page - 1))
            .ok_or(VfioError::NoIova {
                len: len as u64,
                limit: u64::MAX,
            })?
            & !(page - 1);
        let mlen = (end - start) as u64;
        let iova = self.iova.alloc(mlen, self.page)?;
        // SAFETY: the caller keeps the memory valid until dma_unmap and
        // accepts device access to it (this function's contract); the
        // rounding to whole pages only widens the device's reach to the
        // rest of those pages, which the IOMMU cannot map any finer.
        if let Err(e) = unsafe { self.mapper.map(start, iova, mlen) } {
            let _ = self.iova.free(iova, mlen);
            return Err(e);
        }
        self.maps.insert(
            iova,
            Mapping {
                vaddr: start,
                len: mlen,
                origin: Origin::User,
            },
        );
        log::trace!(
            "dma_map {len:#x} bytes at {vaddr:p} iova {:#x}",
            iova + (addr - start) as u64
        );
        Ok(iova + (addr - start) as u64)
    }

    /// Unmaps a range from [`DmaSpace::map_user`].
    pub(crate) fn unmap_user(&mut self, iova: u64, len: usize) -> Result<(), VfioError> {
        let (start, m) = self.take_user(iova, len)?;
        self.release(start, m)
    }

    /// Unmaps a range from [`DmaSpace::map_user`] whose IOVAs the device may
    /// still reference: the memory is cut off, and the IOVA range is never
    /// allocated again, so the stale reference can reach nothing else.
    pub(crate) fn retire_user(&mut self, iova: u64, len: usize) -> Result<(), VfioError> {
        let (start, m) = self.take_user(iova, len)?;
        if let Err(e) = self.mapper.unmap(start, m.len) {
            log::error!(
                "unmap of retired iova {start:#x} len {:#x} failed ({e})",
                m.len
            );
            self.leaked += m.len;
            return Err(e);
        }
        self.retired += m.len;
        Ok(())
    }

    /// Removes the [`DmaSpace::map_user`] mapping of `iova .. iova + len`
    /// from the table.
    fn take_user(&mut self, iova: u64, len: usize) -> Result<(u64, Mapping), VfioError> {
        let start = iova & !(self.page - 1);
        let want = (iova - start + len.max(1) as u64).div_ceil(self.page) * self.page;
        match self.maps.get(&start) {
            Some(m) if matches!(m.origin, Origin::User) && m.len == want => {}
            _ => {
                return Err(VfioError::NotMapped {
                    iova,
                    len: len as u64,
                })
            }
        }
        let m = self.maps.remove(&start).expect("checked above");
        Ok((start, m))
    }

    fn release(&mut self, iova: u64, m: Mapping) -> Result<(), VfioError> {
        if let Err(e) = self.mapper.unmap(iova, m.len) {
            // The device may still reach this memory: never reuse it or its
            // IOVA. Pool memory stays allocated until the pool is dropped.
            log::error!(
                "unmap of iova {iova:#x} len {:#x} failed ({e}); leaking it",
                m.len
            );
            self.leaked += m.len;
            // `m` (with its pool block) is not given back to the pool, so the
            // block is never handed out again, and its chunk is never
            // unmapped from the process (the pool leaks it on drop).
            return Err(e);
        }
        self.iova
            .free(iova, m.len)
            .expect("a live mapping's IOVA range is allocated");
        if let Origin::Pool(block) = m.origin {
            self.pool.free(block);
        }
        Ok(())
    }
}

impl<M: IommuMapper> Drop for DmaSpace<M> {
    fn drop(&mut self) {
        // Take every mapping out of the IOMMU, so the device cannot reach
        // the memory any more. Pool blocks still mapped were never given
        // back with dma_free: a DmaRegion may still point at them, so they
        // are not returned to the pool, whose drop then leaks their chunks
        // instead of unmapping memory that is still in use.
        let maps = std::mem::take(&mut self.maps);
        let mut held = (0usize, 0u64);
        for (iova, m) in maps {
            if let Err(e) = self.mapper.unmap(iova, m.len) {
                // Closing the container removes it in the kernel anyway.
                log::error!("unmap of iova {iova:#x} len {:#x} at close: {e}", m.len);
            }
            if let Origin::Pool(_) = m.origin {
                held.0 += 1;
                held.1 += m.len;
            }
        }
        if held.0 > 0 {
            log::warn!(
                "{} DMA allocation(s) of {} KiB not freed before their VfioHal was dropped; \
                 unmapped from the IOMMU, their memory left to whoever still holds it",
                held.0,
                held.1 / 1024
            );
        }
    }
}

/// A DMA space shared by the [`crate::VfioHal`]s of one container, with the
/// options it was made with.
#[derive(Debug)]
pub(crate) struct SharedDma {
    space: ManuallyDrop<Mutex<DmaSpace<Arc<Container>>>>,
    container: Arc<Container>,
    pub(crate) hugepages: HugePages,
    pub(crate) dma_limit: u64,
}

impl SharedDma {
    /// The DMA space of `container`: the one its other `VfioHal`s use, or
    /// a new one. A space being torn down (its last `VfioHal` dropping) is
    /// waited for, so that a new one never allocates an IOVA the old one
    /// still has mapped.
    pub(crate) fn of(
        container: &Arc<Container>,
        hugepages: HugePages,
        dma_limit: u64,
    ) -> Result<Arc<Self>, VfioError> {
        loop {
            let mut slot = container.dma_slot();
            let found = slot.as_ref().map(Weak::upgrade);
            match found {
                Some(Some(shared)) => {
                    // Unlocked before `shared` may be dropped: dropping the
                    // last one takes the slot's lock.
                    drop(slot);
                    if shared.hugepages != hugepages || shared.dma_limit != dma_limit {
                        return Err(VfioError::Unsupported {
                            what: format!(
                                "a VfioHal with hugepages {hugepages:?} and dma_limit \
                                 {dma_limit:#x} in a container whose DMA space (shared by the \
                                 VfioHals of its devices) was made with hugepages {:?} and \
                                 dma_limit {:#x}; open every device of the container with the \
                                 same options (the smallest DMA limit of them)",
                                shared.hugepages, shared.dma_limit
                            ),
                        });
                    }
                    // A group that joined the container since may have
                    // narrowed the valid IOVA ranges.
                    if let Some(info) = container.iommu_info() {
                        shared.lock().restrict_iova(&info.iova_ranges);
                    }
                    return Ok(shared);
                }
                Some(None) => {
                    drop(slot);
                    std::thread::yield_now();
                }
                None => {
                    let info = container
                        .iommu_info()
                        .ok_or_else(|| VfioError::Unsupported {
                            what: "DMA in a container with no group attached (no IOMMU set)".into(),
                        })?;
                    let space = DmaSpace::new(
                        Arc::clone(container),
                        hugepages,
                        &info.iova_ranges,
                        info.page_sizes,
                        dma_limit,
                    );
                    let shared = Arc::new(Self {
                        space: ManuallyDrop::new(Mutex::new(space)),
                        container: Arc::clone(container),
                        hugepages,
                        dma_limit,
                    });
                    *slot = Some(Arc::downgrade(&shared));
                    return Ok(shared);
                }
            }
        }
    }

    /// The space, locked.
    pub(crate) fn lock(&self) -> MutexGuard<'_, DmaSpace<Arc<Container>>> {
        self.space.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl Drop for SharedDma {
    fn drop(&mut self) {
        // SAFETY: dropped once, here, and never used after.
        unsafe { ManuallyDrop::drop(&mut self.space) };
        // Only now, with every mapping gone, may a new space be made.
        *self.container.dma_slot() = None;
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::pool::tests::LOCKED;

    /// Records map and unmap calls; fails the next call when told to.
    #[derive(Debug, Default)]
    pub(crate) struct FakeIommu {
        pub(crate) live: Mutex<BTreeMap<u64, (usize, u64)>>,
        pub(crate) fail_next: Mutex<Option<i32>>,
    }

    impl FakeIommu {
        fn take_failure(&self) -> Result<(), VfioError> {
            match self.fail_next.lock().unwrap().take() {
                Some(errno) => Err(VfioError::ioctl(
                    "fake",
                    std::io::Error::from_raw_os_error(errno),
                )),
                None => Ok(()),
            }
        }
    }

    impl IommuMapper for Arc<FakeIommu> {
        unsafe fn map(&self, vaddr: usize, iova: u64, len: u64) -> Result<(), VfioError> {
            self.take_failure()?;
            assert_eq!(vaddr % 4096, 0);
            assert_eq!(iova % 4096, 0);
            assert_eq!(len % 4096, 0);
            let mut live = self.live.lock().unwrap();
            assert!(
                live.range(..iova + len)
                    .next_back()
                    .map_or(true, |(&i, &(_, l))| i + l <= iova),
                "IOVA overlap"
            );
            live.insert(iova, (vaddr, len));
            Ok(())
        }
        fn unmap(&self, iova: u64, len: u64) -> Result<(), VfioError> {
            self.take_failure()?;
            let mut live = self.live.lock().unwrap();
            match live.remove(&iova) {
                Some((_, l)) if l == len => Ok(()),
                _ => Err(VfioError::NotMapped { iova, len }),
            }
        }
    }

    const RANGES: [(u64, u64); 2] = [(0, 0xfedf_ffff), (0xfef0_0000, 0x7f_ffff_ffff)];

    fn space(fake: &Arc<FakeIommu>) -> DmaSpace<Arc<FakeIommu>> {
        DmaSpace::new(
            Arc::clone(fake),
            HugePages::Never,
            &RANGES,
            0x4020_1000, // 4 KiB, 2 MiB, 1 GiB
            (1 << 28) - 1,
        )
    }

    #[test]
    fn alloc_maps_zeroed_memory_and_free_releases_it() {
        let _g = LOCKED.lock().unwrap_or_else(|e| e.into_inner());
        let fake = Arc::new(FakeIommu::default());
        let mut d = space(&fake);
        let iova_free = d.stats().iova_free;
        let (p, iova, len) = d.alloc(5000).unwrap();
        assert_eq!(len, 8192);
        assert!(iova >= 4096 && iova + 8192 <= 1 << 28);
        assert_eq!(
            fake.live.lock().unwrap().get(&iova),
            Some(&(p.as_ptr() as usize, 8192))
        );
        // SAFETY: `p` is 8 KiB of live pool memory.
        let bytes = unsafe { std::slice::from_raw_parts(p.as_ptr(), 8192) };
        assert!(bytes.iter().all(|&b| b == 0));
        assert_eq!(d.stats().mappings, 1);
        assert!(matches!(
            d.free(iova, NonNull::dangling()),
            Err(VfioError::NotMapped { .. })
        ));
        d.free(iova, p).unwrap();
        assert!(fake.live.lock().unwrap().is_empty(), "unmapped");
        let s = d.stats();
        assert_eq!((s.mappings, s.iova_free, s.pool_used), (0, iova_free, 0));
        // The IOVA and the memory are reused.
        let (p2, iova2, _) = d.alloc(100).unwrap();
        assert_eq!((p2, iova2), (p, iova));
        d.free(iova2, p2).unwrap();
    }

    #[test]
    fn user_buffers_keep_their_page_offset() {
        let fake = Arc::new(FakeIommu::default());
        let mut d = space(&fake);
        let buf = vec![0u8; 3 * 4096];
        let base = buf.as_ptr() as usize;
        let at = base.div_ceil(4096) * 4096 + 100; // 100 bytes into a page
        let ptr = NonNull::new(at as *mut u8).unwrap();
        // SAFETY: `buf` outlives the mapping (unmapped below).
        let iova = unsafe { d.map_user(ptr, 4096) }.unwrap();
        assert_eq!(iova % 4096, 100);
        let live = fake.live.lock().unwrap().clone();
        assert_eq!(
            live.get(&(iova - 100)),
            Some(&(at - 100, 8192)),
            "spans two pages"
        );
        assert!(matches!(
            d.unmap_user(iova, 100),
            Err(VfioError::NotMapped { .. })
        ));
        assert!(d.unmap_user(iova + 4096, 4096).is_err());
        d.unmap_user(iova, 4096).unwrap();
        assert!(fake.live.lock().unwrap().is_empty());
        assert!(d.unmap_user(iova, 4096).is_err(), "already unmapped");
        drop(buf);
    }

    #[test]
    fn retired_user_ranges_are_unmapped_and_never_reused() {
        let fake = Arc::new(FakeIommu::default());
        let mut d = space(&fake);
        let buf = vec![0u8; 2 * 4096];
        let at = (buf.as_ptr() as usize).div_ceil(4096) * 4096;
        let ptr = NonNull::new(at as *mut u8).unwrap();
        let before = d.stats().iova_free;
        // SAFETY: `buf` outlives the mapping (retired below).
        let iova = unsafe { d.map_user(ptr, 4096) }.unwrap();
        d.retire_user(iova, 4096).unwrap();
        assert!(fake.live.lock().unwrap().is_empty(), "device cut off");
        let s = d.stats();
        assert_eq!((s.retired, s.iova_free), (4096, before - 4096));
        assert!(d.unmap_user(iova, 4096).is_err(), "no longer mapped");
        // Mapping the same memory again gets a different IOVA.
        // SAFETY: as above.
        let again = unsafe { d.map_user(ptr, 4096) }.unwrap();
        assert_ne!(again, iova);
        d.unmap_user(again, 4096).unwrap();
        drop(buf);
    }

    #[test]
    fn failures_release_or_quarantine_resources() {
        let _g = LOCKED.lock().unwrap_or_else(|e| e.into_inner());
        let fake = Arc::new(FakeIommu::default());
        let mut d = space(&fake);
        let iova_free = d.stats().iova_free;

        // A failed map gives back the IOVA and the pool memory.
        *fake.fail_next.lock().unwrap() = Some(libc::ENOMEM);
        assert!(d.alloc(4096).is_err());
        let s = d.stats();
        assert_eq!((s.mappings, s.iova_free, s.pool_used), (0, iova_free, 0));

        // A failed unmap leaks the memory and its IOVA rather than reuse
        // what the device may still reach.
        let (p, iova, len) = d.alloc(4096).unwrap();
        *fake.fail_next.lock().unwrap() = Some(libc::EIO);
        assert!(d.free(iova, p).is_err());
        let s = d.stats();
        assert_eq!(s.leaked, len as u64);
        assert_eq!(s.iova_free, iova_free - 4096);
        let (p2, iova2, _) = d.alloc(4096).unwrap();
        assert_ne!(p2, p);
        assert_ne!(iova2, iova);
        d.free(iova2, p2).unwrap();
        // The quarantined block keeps its chunk (the first, `p` at its
        // start) mapped past the drop; give it back to stay under
        // RLIMIT_MEMLOCK in this test process.
        drop(d);
        // SAFETY: nothing uses the chunk any more; the pool forgot it.
        let rc = unsafe { libc::munmap(p.as_ptr().cast(), HUGE_PAGE_SIZE) };
        assert_eq!(rc, 0);
    }

    #[test]
    fn drop_unmaps_everything_and_returns_freed_memory() {
        let _g = LOCKED.lock().unwrap_or_else(|e| e.into_inner());
        let before = crate::pool::tests::vm_locked_kib();
        let fake = Arc::new(FakeIommu::default());
        let mut d = space(&fake);
        let (p, iova, _) = d.alloc(4096).unwrap();
        let buf = vec![0u8; 4096];
        // SAFETY: `buf` outlives `d`.
        unsafe { d.map_user(NonNull::new(buf.as_ptr() as *mut u8).unwrap(), 4096) }.unwrap();
        d.free(iova, p).unwrap();
        assert_eq!(fake.live.lock().unwrap().len(), 1);
        drop(d);
        assert!(fake.live.lock().unwrap().is_empty());
        assert_eq!(
            crate::pool::tests::vm_locked_kib(),
            before,
            "pool memory back"
        );
    }

    /// A region the caller still holds when the space is dropped (a
    /// `DmaRegion` outliving its `VfioHal`) is taken out of the IOMMU but
    /// stays mapped in the process.
    #[test]
    fn drop_keeps_memory_still_held() {
        let _g = LOCKED.lock().unwrap_or_else(|e| e.into_inner());
        let before = crate::pool::tests::vm_locked_kib();
        let fake = Arc::new(FakeIommu::default());
        let mut d = space(&fake);
        let (p, _, _) = d.alloc(4096).unwrap();
        let (q, _, qlen) = d.alloc(3 << 20).unwrap();
        assert_eq!(qlen, 3 << 20);
        // SAFETY: both are live pool memory, at least a page each.
        unsafe {
            p.as_ptr().cast::<u32>().write(0xdead_beef);
            q.as_ptr().add(qlen - 4).cast::<u32>().write(0x0bad_f00d);
        }
        assert_eq!(fake.live.lock().unwrap().len(), 2);
        drop(d);
        assert!(
            fake.live.lock().unwrap().is_empty(),
            "the device can no longer reach them"
        );
        // SAFETY: their chunks were leaked, not unmapped: still readable.
        unsafe {
            assert_eq!(p.as_ptr().cast::<u32>().read(), 0xdead_beef);
            assert_eq!(q.as_ptr().add(qlen - 4).cast::<u32>().read(), 0x0bad_f00d);
        }
        // Give the two leaked chunks (2 and 4 MiB, each block at the start
        // of its own) back, to stay under RLIMIT_MEMLOCK in this process.
        // SAFETY: nothing uses them any more; the pool forgot them.
        unsafe {
            assert_eq!(libc::munmap(p.as_ptr().cast(), HUGE_PAGE_SIZE), 0);
            assert_eq!(libc::munmap(q.as_ptr().cast(), 2 * HUGE_PAGE_SIZE), 0);
        }
        assert_eq!(crate::pool::tests::vm_locked_kib(), before);
    }

    #[test]
    fn lengths_round_to_iommu_pages() {
        let _g = LOCKED.lock().unwrap_or_else(|e| e.into_inner());
        let fake = Arc::new(FakeIommu::default());
        // An IOMMU whose smallest page is 64 KiB (a 4 KiB-page host).
        let mut d = DmaSpace::new(
            Arc::clone(&fake),
            HugePages::Never,
            &RANGES,
            0x1_0000,
            1 << 40,
        );
        let (p, iova, len) = d.alloc(100).unwrap();
        assert_eq!(len, 64 << 10);
        assert_eq!(p.as_ptr() as usize % (64 << 10), 0);
        assert_eq!(iova % (64 << 10), 0);
        assert_eq!(
            fake.live.lock().unwrap().get(&iova),
            Some(&(p.as_ptr() as usize, 64 << 10))
        );
        d.free(iova, p).unwrap();
    }

    #[test]
    fn exhausting_the_iova_limit() {
        let _g = LOCKED.lock().unwrap_or_else(|e| e.into_inner());
        let fake = Arc::new(FakeIommu::default());
        // 64 KiB of IOVA space (minus page 0).
        let mut d = DmaSpace::new(Arc::clone(&fake), HugePages::Never, &RANGES, 0x1000, 0xffff);
        let mut held = Vec::new();
        for _ in 0..15 {
            held.push(d.alloc(4096).unwrap());
        }
        let e = d.alloc(4096).unwrap_err();
        assert!(matches!(e, VfioError::NoIova { limit: 0xffff, .. }), "{e}");
        assert_eq!(
            d.stats().pool_used,
            15 * 4096,
            "the failed alloc gave its memory back"
        );
        let (p, iova, _) = held.pop().unwrap();
        d.free(iova, p).unwrap();
        held.push(d.alloc(4096).unwrap());
        for (p, iova, _) in held {
            d.free(iova, p).unwrap();
        }
    }
}

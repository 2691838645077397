//! A pool of pinned memory for DMA.
//!
//! The pool grows in chunks of at least 2 MiB. A chunk is a private
//! anonymous mapping of 2 MiB hugepages (from the kernel's hugetlbfs pool,
//! `MAP_HUGETLB | MAP_HUGE_2MB`) where those are reserved, and otherwise
//! ordinary 4 KiB pages locked in memory with `mlock`. Either way the pages
//! are faulted in at once (`MAP_POPULATE`) and excluded from `fork`
//! (`MADV_DONTFORK`), as a child's copy-on-write would otherwise move a
//! page the device writes to. Blocks are handed out page-aligned and
//! zeroed. Chunks are returned to the kernel when the pool is dropped (or
//! by [`DmaPool::trim`]), except a chunk that still has a block handed
//! out: the pool cannot know that no one uses that block any more, so it
//! leaks the chunk (never unmaps it) and logs a warning.
//!
//! The pool only provides memory; the VFIO layer maps each block into the
//! IOMMU (which pins it again) for as long as it is allocated.

use std::fs;
use std::ptr::NonNull;

use memmap2::{Advice, MmapOptions, MmapRaw};

use crate::error::{memlock_may_limit, VfioError};
use crate::iova::RangeAllocator;

/// The size of a hugepage, and the pool's minimum chunk size.
pub const HUGE_PAGE_SIZE: usize = 2 << 20;

/// Whether the pool uses 2 MiB hugepages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HugePages {
    /// Use hugepages when the kernel has free ones, else locked 4 KiB pages.
    #[default]
    Prefer,
    /// Use hugepages only; fail with [`VfioError::NoHugePages`] without.
    Require,
    /// Never use hugepages: locked 4 KiB pages only.
    Never,
}

/// What a chunk of pool memory is made of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Backing {
    /// 2 MiB hugepages (never swapped, physically contiguous per page).
    HugePages,
    /// 4 KiB pages locked with `mlock`.
    LockedPages,
}

/// A block of pool memory: page-aligned, zeroed when handed out.
#[derive(Debug, PartialEq, Eq)]
pub struct PoolBlock {
    addr: usize,
    len: usize,
    chunk: usize,
    offset: usize,
    backing: Backing,
}

impl PoolBlock {
    /// The first byte.
    pub fn ptr(&self) -> NonNull<u8> {
        NonNull::new(self.addr as *mut u8).expect("pool blocks are never at address 0")
    }

    /// Length in bytes (a whole number of pages).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the block is empty (never: blocks are at least a page).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// What the block's memory is made of.
    pub fn backing(&self) -> Backing {
        self.backing
    }

    /// Whether the block starts on a 2 MiB boundary of hugepage memory, so
    /// the IOMMU can map it with 2 MiB pages if its IOVA is aligned too.
    pub fn huge_aligned(&self) -> bool {
        self.backing == Backing::HugePages && self.addr % HUGE_PAGE_SIZE == 0
    }
}

#[derive(Debug)]
struct Chunk {
    mem: MmapRaw,
    backing: Backing,
    /// The free parts, as absolute addresses (so alignments are of
    /// addresses, whatever the chunk's own alignment).
    free: RangeAllocator,
}

impl Chunk {
    fn base(&self) -> usize {
        self.mem.as_mut_ptr() as usize
    }

    /// Bytes handed out and not given back.
    fn used(&self) -> usize {
        self.mem.len() - self.free.free_bytes() as usize
    }
}

/// A growable pool of pinned, zeroed, page-aligned DMA memory.
#[derive(Debug)]
pub struct DmaPool {
    policy: HugePages,
    page: usize,
    chunks: Vec<Option<Chunk>>,
    fell_back: bool,
}

impl DmaPool {
    /// An empty pool; memory is taken from the kernel on the first
    /// allocation.
    pub fn new(policy: HugePages) -> Self {
        Self {
            policy,
            page: page_size(),
            chunks: Vec::new(),
            fell_back: false,
        }
    }

    /// The host page size.
    pub fn page_size(&self) -> usize {
        self.page
    }

    /// Allocates `len` bytes (rounded up to whole pages) of zeroed memory,
    /// page-aligned (2 MiB-aligned when it is at least 2 MiB of hugepage
    /// memory).
    pub fn alloc(&mut self, len: usize) -> Result<PoolBlock, VfioError> {
        self.alloc_aligned(len, self.page)
    }

    /// As [`DmaPool::alloc`], with the block's address aligned to `align`
    /// too (a power of two; for an IOMMU whose pages are larger than the
    /// host's).
    pub fn alloc_aligned(&mut self, len: usize, align: usize) -> Result<PoolBlock, VfioError> {
        let too_big = || VfioError::Unsupported {
            what: format!("a DMA allocation of {len:#x} bytes aligned to {align:#x}"),
        };
        let align = align
            .max(self.page)
            .checked_next_power_of_two()
            .ok_or_else(too_big)?;
        let len = len
            .max(1)
            .checked_next_multiple_of(self.page)
            .ok_or_else(too_big)?;
        // Hugepage memory is aligned to 2 MiB so that the IOMMU can map it
        // with 2 MiB pages; ordinary locked pages gain nothing from it.
        let align_in = |c: &Chunk| {
            if c.backing == Backing::HugePages && len >= HUGE_PAGE_SIZE {
                align.max(HUGE_PAGE_SIZE)
            } else {
                align
            }
        };
        for (i, slot) in self.chunks.iter_mut().enumerate() {
            if let Some(c) = slot {
                if let Some(addr) = c.free.alloc(len as u64, align_in(c) as u64) {
                    return Ok(Self::hand_out(i, c, addr as usize, len));
                }
            }
        }
        // A chunk's base is only page-aligned (2 MiB for hugepages): leave
        // room to align the block inside it.
        let size = len
            .checked_add(align - self.page)
            .and_then(|s| s.checked_next_multiple_of(HUGE_PAGE_SIZE))
            .ok_or_else(too_big)?;
        let chunk = self.new_chunk(size)?;
        let i = match self.chunks.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                self.chunks.push(None);
                self.chunks.len() - 1
            }
        };
        let c = self.chunks[i].insert(chunk);
        let addr = c
            .free
            .alloc(len as u64, align_in(c) as u64)
            .expect("a fresh chunk fits the block it was sized for");
        Ok(Self::hand_out(i, c, addr as usize, len))
    }

    fn hand_out(index: usize, c: &Chunk, addr: usize, len: usize) -> PoolBlock {
        // SAFETY: `addr .. addr + len` lies inside the chunk's mapping (the
        // range allocator only hands out parts of it), which is readable
        // and writable, and no other block overlaps it.
        unsafe { std::ptr::write_bytes(addr as *mut u8, 0, len) };
        PoolBlock {
            addr,
            len,
            chunk: index,
            offset: addr - c.base(),
            backing: c.backing,
        }
    }

    /// Returns a block to the pool.
    ///
    /// # Panics
    ///
    /// If the block did not come from this pool or was already freed.
    pub fn free(&mut self, block: PoolBlock) {
        let c = self
            .chunks
            .get_mut(block.chunk)
            .and_then(Option::as_mut)
            .expect("PoolBlock freed into a pool it does not belong to");
        assert_eq!(
            c.base() + block.offset,
            block.addr,
            "PoolBlock freed into a pool it does not belong to"
        );
        let ok = c
            .free
            .add(block.addr as u64, (block.addr + block.len) as u64);
        assert!(ok, "PoolBlock at {:#x} freed twice", block.addr);
    }

    /// Returns chunks with no block in use to the kernel.
    pub fn trim(&mut self) {
        for slot in &mut self.chunks {
            if slot.as_ref().is_some_and(|c| c.used() == 0) {
                *slot = None;
            }
        }
    }

    /// Bytes of memory the pool holds (in use or free).
    pub fn reserved_bytes(&self) -> usize {
        self.chunks.iter().flatten().map(|c| c.mem.len()).sum()
    }

    /// Bytes handed out and not yet freed.
    pub fn used_bytes(&self) -> usize {
        self.chunks.iter().flatten().map(Chunk::used).sum()
    }

    fn new_chunk(&mut self, size: usize) -> Result<Chunk, VfioError> {
        if self.policy != HugePages::Never {
            match MmapOptions::new()
                .len(size)
                .huge(Some(21))
                .populate()
                .map_anon()
            {
                Ok(m) => {
                    log::debug!("DMA pool: {} KiB chunk of 2 MiB hugepages", size / 1024);
                    return Self::finish_chunk(m.into(), Backing::HugePages, size);
                }
                Err(e) => {
                    let (total, free) = hugepage_counts();
                    if self.policy == HugePages::Require {
                        log::error!("hugepage mmap of {size:#x} bytes failed: {e}");
                        return Err(VfioError::NoHugePages {
                            wanted: size,
                            total,
                            free,
                        });
                    }
                    if !self.fell_back {
                        self.fell_back = true;
                        log::info!(
                            "DMA pool: no 2 MiB hugepages ({e}; HugePages_Total {total}, \
                             HugePages_Free {free}); using locked 4 KiB pages"
                        );
                    }
                }
            }
        }
        let m = MmapOptions::new()
            .len(size)
            .populate()
            .map_anon()
            .map_err(|e| VfioError::io(format!("mmap of {size} bytes for the DMA pool"), e))?;
        let raw = MmapRaw::from(m);
        if let Err(e) = raw.lock() {
            log::error!("mlock of {size} bytes failed: {e}");
            return Err(match e.raw_os_error() {
                // Over RLIMIT_MEMLOCK is ENOMEM (EPERM with a limit of 0);
                // without a limit in force it is something else.
                Some(libc::ENOMEM | libc::EPERM) if memlock_may_limit() => VfioError::memlock(size),
                _ => VfioError::io(format!("mlock of {size} bytes of DMA pool memory"), e),
            });
        }
        log::debug!("DMA pool: {} KiB chunk of locked pages", size / 1024);
        Self::finish_chunk(raw, Backing::LockedPages, size)
    }

    fn finish_chunk(mem: MmapRaw, backing: Backing, size: usize) -> Result<Chunk, VfioError> {
        mem.advise(Advice::DontFork)
            .map_err(|e| VfioError::io("madvise(MADV_DONTFORK) on DMA pool memory", e))?;
        let mut free = RangeAllocator::default();
        let base = mem.as_mut_ptr() as u64;
        free.add(base, base + size as u64);
        Ok(Chunk { mem, backing, free })
    }
}

impl Drop for DmaPool {
    fn drop(&mut self) {
        for c in self.chunks.drain(..).flatten() {
            let used = c.used();
            if used == 0 {
                continue; // unmapped (and unlocked) by MmapRaw's drop
            }
            // A block of it is still handed out (or quarantined after a
            // failed IOMMU unmap): whoever holds it may still read or write
            // it, so the memory must stay mapped.
            log::warn!(
                "DMA pool dropped while {used} bytes of its {} KiB chunk at {:#x} are still \
                 allocated (a DMA region outlives its VfioHal, or an IOMMU unmap failed); \
                 leaking the chunk rather than unmap memory that may still be in use",
                c.mem.len() / 1024,
                c.base()
            );
            std::mem::forget(c.mem);
        }
    }
}

/// The host's base page size.
pub(crate) fn page_size() -> usize {
    // SAFETY: sysconf has no memory-safety preconditions.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if p > 0 {
        p as usize
    } else {
        4096
    }
}

/// `HugePages_Total` and `HugePages_Free` from /proc/meminfo.
pub fn hugepage_counts() -> (u64, u64) {
    let info = fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let field = |name: &str| {
        info.lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    (field("HugePages_Total:"), field("HugePages_Free:"))
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Tests that lock memory or count locked memory run one at a time.
    pub(crate) static LOCKED: Mutex<()> = Mutex::new(());

    /// `VmLck` of this process in KiB.
    pub(crate) fn vm_locked_kib() -> u64 {
        fs::read_to_string("/proc/self/status")
            .unwrap()
            .lines()
            .find_map(|l| l.strip_prefix("VmLck:"))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
            .unwrap()
    }

    fn bytes(b: &PoolBlock) -> &[u8] {
        // SAFETY: the block is live pool memory of `len` bytes, only read
        // here while no one writes it.
        unsafe { std::slice::from_raw_parts(b.ptr().as_ptr(), b.len()) }
    }

    #[test]
    fn locked_pages_when_hugepages_are_not_wanted() {
        let _g = LOCKED.lock().unwrap_or_else(|e| e.into_inner());
        let before = vm_locked_kib();
        let mut pool = DmaPool::new(HugePages::Never);
        let a = pool.alloc(100).unwrap();
        assert_eq!(a.backing(), Backing::LockedPages);
        assert_eq!(a.len(), pool.page_size());
        assert_eq!(a.ptr().as_ptr() as usize % pool.page_size(), 0);
        assert!(bytes(&a).iter().all(|&b| b == 0));
        assert_eq!(pool.reserved_bytes(), HUGE_PAGE_SIZE);
        assert!(vm_locked_kib() >= before + (HUGE_PAGE_SIZE / 1024) as u64);
        pool.free(a);
        drop(pool);
        assert_eq!(
            vm_locked_kib(),
            before,
            "dropping the pool unlocks its memory"
        );
    }

    #[test]
    fn a_chunk_with_a_block_in_use_outlives_the_pool() {
        let _g = LOCKED.lock().unwrap_or_else(|e| e.into_inner());
        let before = vm_locked_kib();
        let mut pool = DmaPool::new(HugePages::Never);
        let a = pool.alloc(4096).unwrap();
        let b = pool.alloc(HUGE_PAGE_SIZE).unwrap(); // a chunk of its own
        pool.free(b);
        let p = a.ptr().as_ptr();
        // SAFETY: `a` is live pool memory of a page.
        unsafe { p.cast::<u32>().write(0x1234_5678) };
        drop(pool);
        // SAFETY: the pool leaked the chunk holding `a` instead of
        // unmapping it: the page is still mapped and holds what was written.
        assert_eq!(unsafe { p.cast::<u32>().read() }, 0x1234_5678);
        assert_eq!(
            vm_locked_kib(),
            before + (HUGE_PAGE_SIZE / 1024) as u64,
            "only the chunk in use is kept (and stays locked)"
        );
        // Give the leaked chunk back so that this test process stays under
        // RLIMIT_MEMLOCK: `a` was its first block, at the chunk's start.
        // SAFETY: nothing uses the chunk any more; the pool forgot it.
        assert_eq!(unsafe { libc::munmap(p.cast(), HUGE_PAGE_SIZE) }, 0);
        assert_eq!(vm_locked_kib(), before);
    }

    #[test]
    fn aligned_blocks() {
        let _g = LOCKED.lock().unwrap_or_else(|e| e.into_inner());
        let mut pool = DmaPool::new(HugePages::Never);
        let page = pool.page_size();
        let small = pool.alloc(1).unwrap();
        // As for an IOMMU with 64 KiB pages on a 4 KiB-page host.
        let a = pool.alloc_aligned(1, 64 << 10).unwrap();
        assert_eq!(a.ptr().as_ptr() as usize % (64 << 10), 0);
        assert_eq!(a.len(), page, "the length is rounded to host pages only");
        // A block as large as a chunk still fits a fresh one when aligned.
        let big = pool.alloc_aligned(HUGE_PAGE_SIZE, 1 << 20).unwrap();
        assert_eq!(big.ptr().as_ptr() as usize % (1 << 20), 0);
        assert!(pool.alloc_aligned(usize::MAX - page, page).is_err());
        for b in [small, a, big] {
            pool.free(b);
        }
        assert_eq!(pool.used_bytes(), 0);
    }

    #[test]
    fn prefer_falls_back_to_locked_pages_without_hugepages() {
        let _g = LOCKED.lock().unwrap_or_else(|e| e.into_inner());
        let (_, free) = hugepage_counts();
        let mut pool = DmaPool::new(HugePages::Prefer);
        let a = pool.alloc(8192).unwrap();
        if free == 0 {
            assert_eq!(a.backing(), Backing::LockedPages);
            assert!(pool.fell_back);
        } else {
            assert_eq!(a.backing(), Backing::HugePages);
        }
        pool.free(a);
    }

    #[test]
    fn require_without_hugepages_names_the_fix() {
        let (_, free) = hugepage_counts();
        if free > 0 {
            return; // this machine has hugepages; the error cannot happen
        }
        let mut pool = DmaPool::new(HugePages::Require);
        let e = pool.alloc(4096).unwrap_err();
        assert!(matches!(e, VfioError::NoHugePages { .. }), "{e}");
        assert!(e.to_string().contains("nr_hugepages"), "{e}");
    }

    #[test]
    fn blocks_are_disjoint_zeroed_and_reused() {
        let _g = LOCKED.lock().unwrap_or_else(|e| e.into_inner());
        let mut pool = DmaPool::new(HugePages::Never);
        let page = pool.page_size();
        let a = pool.alloc(page).unwrap();
        let b = pool.alloc(3 * page).unwrap();
        let (pa, pb) = (a.ptr().as_ptr() as usize, b.ptr().as_ptr() as usize);
        assert!(pa + a.len() <= pb || pb + b.len() <= pa, "blocks overlap");
        // SAFETY: `a` is live pool memory of at least one page.
        unsafe { std::ptr::write_bytes(a.ptr().as_ptr(), 0xab, a.len()) };
        let a_addr = pa;
        pool.free(a);
        assert_eq!(pool.used_bytes(), 3 * page);
        let c = pool.alloc(page).unwrap();
        assert_eq!(c.ptr().as_ptr() as usize, a_addr, "freed block is reused");
        assert!(bytes(&c).iter().all(|&x| x == 0), "reused block is zeroed");

        // A block larger than a chunk gets a chunk of its own.
        let big = pool.alloc(HUGE_PAGE_SIZE + page).unwrap();
        assert_eq!(big.len(), HUGE_PAGE_SIZE + page);
        assert_eq!(pool.reserved_bytes(), 3 * HUGE_PAGE_SIZE);
        pool.free(big);
        pool.trim();
        assert_eq!(
            pool.reserved_bytes(),
            HUGE_PAGE_SIZE,
            "trim drops the empty chunk"
        );
        pool.free(b);
        pool.free(c);
        pool.trim();
        assert_eq!(pool.reserved_bytes(), 0);
    }

    #[test]
    #[should_panic(expected = "freed twice")]
    fn double_free_panics() {
        let _g = LOCKED.lock().unwrap_or_else(|e| e.into_inner());
        let mut pool = DmaPool::new(HugePages::Never);
        let a = pool.alloc(1).unwrap();
        let forged = PoolBlock {
            addr: a.addr,
            len: a.len,
            chunk: a.chunk,
            offset: a.offset,
            backing: a.backing,
        };
        pool.free(a);
        pool.free(forged);
    }
}

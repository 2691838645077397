//! The platform trait.

use core::fmt;
use core::ptr::NonNull;

use crate::DmaRegion;

/// Why a platform operation failed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HalError {
    /// No memory for a DMA allocation.
    NoMemory,
    /// No IOVA space left, or the range is not allowed by the IOMMU.
    NoIova,
    /// The address range is not mapped (unmap of an unknown range).
    NotMapped,
    /// The platform cannot do this (for example, interrupts on a platform
    /// without them).
    Unsupported,
    /// An operating system call failed with this errno.
    Os(i32),
    /// A wait ended early because a signal handler ran in the waiting
    /// thread (`EINTR` from `poll(2)`). Not a failure: a caller waiting on
    /// the program's behalf reports it, any other waits again.
    Interrupted,
}

impl fmt::Display for HalError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::NoMemory => f.write_str("out of DMA memory"),
            Self::NoIova => f.write_str("no IOVA space for the mapping"),
            Self::NotMapped => f.write_str("address range is not mapped for DMA"),
            Self::Unsupported => f.write_str("operation not supported by this platform"),
            Self::Os(e) => write!(f, "operating system error {e}"),
            Self::Interrupted => f.write_str("interrupted by a signal handler"),
        }
    }
}

/// The platform a driver runs on: DMA memory, BAR access, interrupts, time.
///
/// The driver reaches the device only through this trait. It is implemented
/// by the kernel VFIO backend (real BARs mapped with `mmap`, DMA through the
/// IOMMU) and by the device model (an emulated IOMMU and register file).
///
/// # Safety
///
/// Implementations must guarantee that:
/// - a [`DmaRegion`] returned by [`Hal::dma_alloc`] is valid for reads and
///   writes of `len` bytes, zeroed, page-aligned, not aliased by any other
///   allocation, and that the device reaches exactly those bytes at IOVAs
///   `iova .. iova + len` until [`Hal::dma_free`];
/// - after [`Hal::dma_map`] returns `Ok(iova)`, the device reaches the
///   caller's bytes at `iova .. iova + len` until [`Hal::dma_unmap`] (an
///   IOMMU maps whole pages, so the rest of the first and last page may be
///   reachable too: callers that care map page-aligned buffers); after
///   `dma_unmap`/`dma_free` returns, the device can no longer reach them, and
///   an IOVA is handed out again only after its old mapping is gone;
/// - after [`Hal::dma_unmap_retired`] returns `Ok`, the device can no longer
///   reach the caller's bytes, and no IOVA of the pages the mapping covered
///   is ever handed out again (by `dma_map` or `dma_alloc`) for as long as
///   the platform lives;
/// - BAR accesses never touch memory outside the BAR;
/// - an `mmio_write*` is ordered after every store to DMA memory that the
///   calling thread made before it (Linux `writel` semantics): a driver that
///   wrote a doorbell record and then rings the doorbell needs no further
///   barrier. On x86 uncached stores already behave so; elsewhere the
///   implementation issues the store barrier.
pub unsafe trait Hal: Send + Sync {
    /// Allocates `len` bytes (rounded up to whole pages) of zeroed DMA
    /// memory, page-aligned in both virtual and IOVA space, and maps it for
    /// the device.
    fn dma_alloc(&self, len: usize) -> Result<DmaRegion, HalError>;

    /// Unmaps and frees a region from [`Hal::dma_alloc`].
    ///
    /// # Safety
    ///
    /// `region` came from `dma_alloc` on this platform, and the device has
    /// been told to stop using it (the object owning it is destroyed).
    unsafe fn dma_free(&self, region: DmaRegion);

    /// Maps the caller's memory `vaddr .. vaddr + len` for device access and
    /// returns its IOVA. The range is contiguous in IOVA space.
    ///
    /// # Safety
    ///
    /// The memory must stay valid (not freed, not moved) until
    /// [`Hal::dma_unmap`], and the caller accepts that the device may read and
    /// write it concurrently until then.
    unsafe fn dma_map(&self, vaddr: NonNull<u8>, len: usize) -> Result<u64, HalError>;

    /// Removes a mapping made by [`Hal::dma_map`].
    ///
    /// # Safety
    ///
    /// `iova` and `len` are exactly those of an earlier `dma_map` that has not
    /// been unmapped.
    unsafe fn dma_unmap(&self, iova: u64, len: usize) -> Result<(), HalError>;

    /// Removes a mapping made by [`Hal::dma_map`] whose IOVA range the
    /// device may still reference (an object the device failed to destroy
    /// points at it): the caller's memory is cut off now, and the IOVA range
    /// is never handed out again, so the stale reference can never reach
    /// another buffer. After `Ok` the mapping is gone (no `dma_unmap`
    /// follows) and the caller may free the memory; after an error it is
    /// left as it was.
    ///
    /// The default returns [`HalError::Unsupported`]: a platform that may
    /// reuse an unmapped IOVA cannot retire one. Platforms that can (that
    /// never reuse IOVAs, or can set a range aside for good) override it. A
    /// driver on a platform that cannot must keep the mapping, and the
    /// caller's memory, until the device is reset.
    ///
    /// # Safety
    ///
    /// `iova` and `len` are exactly those of an earlier `dma_map` that has not
    /// been unmapped.
    unsafe fn dma_unmap_retired(&self, iova: u64, len: usize) -> Result<(), HalError> {
        let _ = (iova, len);
        Err(HalError::Unsupported)
    }

    /// Reads a 32-bit register of BAR `bar` at byte `offset`.
    fn mmio_read32(&self, bar: u8, offset: usize) -> u32;

    /// Writes a 32-bit register of BAR `bar` at byte `offset`.
    fn mmio_write32(&self, bar: u8, offset: usize, value: u32);

    /// Writes a 64-bit register (a doorbell) of BAR `bar` at byte `offset`
    /// with one 64-bit store.
    fn mmio_write64(&self, bar: u8, offset: usize, value: u64);

    /// Writes the 64 bytes `block` (little-endian words) to BAR `bar` at
    /// byte `offset`, 64-byte aligned, as one burst the device receives
    /// whole: a BlueFlame write (write-combined on hardware, mlx5's BF).
    /// `Err(HalError::Unsupported)` where the platform cannot (the
    /// default): the caller rings the doorbell instead. Ordered as
    /// [`Hal::mmio_write64`] is.
    fn mmio_write_block(&self, bar: u8, offset: usize, block: &[u64; 8]) -> Result<(), HalError> {
        let _ = (bar, offset, block);
        Err(HalError::Unsupported)
    }

    /// Monotonic time in nanoseconds, for timeouts.
    fn now_ns(&self) -> u64;

    /// Waits up to `timeout_ns` for interrupt `vector`. Returns `Ok(true)` if
    /// it fired, `Ok(false)` on timeout. One wait takes every firing since
    /// the last (as a read of an eventfd does); a timeout of 0 only takes
    /// a firing already pending. A signal handler that runs in the waiting
    /// thread ends the wait with [`HalError::Interrupted`], so that a
    /// program's own wait (`ibv_get_cq_event`) can return `EINTR` as a
    /// `read` of the kernel's event file does.
    fn wait_irq(&self, vector: u16, timeout_ns: u64) -> Result<bool, HalError> {
        let _ = (vector, timeout_ns);
        Err(HalError::Unsupported)
    }

    /// A file descriptor (an eventfd) that is readable while interrupt
    /// `vector` has fired and no [`Hal::wait_irq`] has taken it, for a
    /// program to `poll` or `epoll` on; `None` where the platform has none.
    fn irq_eventfd(&self, vector: u16) -> Option<i32> {
        let _ = vector;
        None
    }

    /// BAR `bar`'s address on the device's bus, where the platform knows it
    /// (a device told where its own doorbell pages are, as PVRDMA's
    /// `uar_pfn` is); `None` otherwise (the default).
    fn bar_address(&self, bar: u8) -> Option<u64> {
        let _ = bar;
        None
    }

    /// Called in busy-wait loops (spinning on a status register or an owner
    /// bit); a platform may yield the CPU here.
    fn relax(&self) {
        core::hint::spin_loop();
    }

    /// Called when a poll of a completion queue found nothing: the program
    /// spins on the CQ's owner bits, and a platform whose device needs the
    /// waiting thread's CPU (an emulated NIC on a machine with few cores)
    /// may run it here. Hardware needs nothing (the default).
    fn poll_empty(&self) {}
}

//! [`VfioHal`]: the driver's platform trait over a real device.

use std::ptr::NonNull;
use std::sync::{Arc, MutexGuard};

use rnic_queues::{DmaRegion, Hal, HalError};

use crate::container::Container;
use crate::device::{IrqKind, Paths, VfioDevice};
use crate::dma::{DmaSpace, DmaStats, SharedDma};
use crate::error::VfioError;
use crate::pool::HugePages;

/// Which interrupts [`VfioHal`] enables at open.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum IrqMode {
    /// MSI-X (up to 32 vectors) if the device has it, else one MSI vector,
    /// else none.
    #[default]
    Auto,
    /// No interrupts: `wait_irq` reports `Unsupported` and the driver
    /// polls.
    None,
    /// This many MSI vectors.
    Msi(u32),
    /// This many MSI-X vectors.
    Msix(u32),
}

/// How [`VfioHal`] opens and sets up a device.
#[derive(Debug, Clone)]
pub struct VfioOptions {
    /// Where sysfs and the VFIO nodes are.
    pub paths: Paths,
    /// Whether the DMA pool uses 2 MiB hugepages.
    pub hugepages: HugePages,
    /// The highest IOVA the device can address (its DMA mask), inclusive.
    pub dma_limit: u64,
    /// Which interrupts to enable.
    pub irqs: IrqMode,
    /// Whether to enable bus mastering (DMA) at open.
    pub bus_master: bool,
}

impl Default for VfioOptions {
    fn default() -> Self {
        Self {
            paths: Paths::default(),
            hugepages: HugePages::Prefer,
            dma_limit: u64::MAX,
            irqs: IrqMode::Auto,
            bus_master: true,
        }
    }
}

impl VfioOptions {
    /// Limits IOVAs to a DMA mask of `bits` bits (e.g. 28 for QEMU's edu).
    pub fn dma_mask_bits(mut self, bits: u32) -> Self {
        self.dma_limit = if bits >= 64 {
            u64::MAX
        } else {
            (1u64 << bits) - 1
        };
        self
    }

    /// Sets the hugepage policy.
    pub fn hugepages(mut self, policy: HugePages) -> Self {
        self.hugepages = policy;
        self
    }

    /// Sets the interrupt mode.
    pub fn irqs(mut self, mode: IrqMode) -> Self {
        self.irqs = mode;
        self
    }
}

/// The platform trait over a device opened through VFIO: DMA memory from a
/// pinned pool mapped through the IOMMU, BARs mapped into the process,
/// interrupts on eventfds, `CLOCK_MONOTONIC` time.
///
/// The `VfioHal`s of the devices of one container (the functions of one
/// IOMMU group, for example, which [`VfioHal::open`] puts in one container)
/// share its IOMMU address space: one DMA pool and IOVA space, so an
/// allocation of one is reachable by the others' devices too (as the IOMMU
/// cannot isolate devices of one group anyway). They must be opened with
/// the same `hugepages` and `dma_limit`. When the last of them is dropped,
/// every DMA mapping is removed from the IOMMU and the pool's memory goes
/// back to the kernel, except memory of allocations not freed with
/// `dma_free`: a [`DmaRegion`] may outlive its `VfioHal`, so that memory
/// stays mapped in the process (leaked, with a warning).
#[derive(Debug)]
pub struct VfioHal {
    // Fields drop in order: the DMA space (if this is its last VfioHal)
    // unmaps everything, then the device (and so possibly the container)
    // is closed.
    dma: Arc<SharedDma>,
    dev: VfioDevice,
}

impl VfioHal {
    /// Opens the device at `addr` with default options.
    pub fn open(addr: &str) -> Result<Self, VfioError> {
        Self::open_with(addr, &VfioOptions::default())
    }

    /// Opens the device at `addr`: in the container of its IOMMU group if
    /// this process has the group open already, else in a new container.
    pub fn open_with(addr: &str, opts: &VfioOptions) -> Result<Self, VfioError> {
        let dev = VfioDevice::open_with(addr, &opts.paths)?;
        Self::new(dev, opts)
    }

    /// Sets up an opened device: bus mastering, interrupts, the DMA space
    /// (the container's, shared with its other `VfioHal`s).
    ///
    /// Fails with [`VfioError::BarNotMappable`] if a memory BAR of the
    /// device could not be mmapped: the driver's 64-bit doorbell writes
    /// need a mapped BAR. (I/O port BARs are never mapped; they are
    /// reached with pread/pwrite and take 32-bit accesses only.)
    pub fn new(dev: VfioDevice, opts: &VfioOptions) -> Result<Self, VfioError> {
        for i in 0..6 {
            if let Some(reason) = dev.bar(i).and_then(|b| b.unmapped_reason()) {
                return Err(VfioError::BarNotMappable {
                    addr: dev.address(),
                    bar: i,
                    reason: reason.to_string(),
                });
            }
        }
        let dma = SharedDma::of(dev.container(), opts.hugepages, opts.dma_limit)?;
        if opts.bus_master {
            dev.set_bus_master(true)?;
        }
        let count = |k| dev.irq_info(k).map_or(0, |q| q.count);
        match opts.irqs {
            IrqMode::None => {}
            IrqMode::Msi(n) => {
                dev.enable_irqs(IrqKind::Msi, n)?;
            }
            IrqMode::Msix(n) => {
                dev.enable_irqs(IrqKind::Msix, n)?;
            }
            IrqMode::Auto if count(IrqKind::Msix) > 0 => {
                dev.enable_irqs(IrqKind::Msix, count(IrqKind::Msix).min(32))?;
            }
            IrqMode::Auto if count(IrqKind::Msi) > 0 => {
                dev.enable_irqs(IrqKind::Msi, 1)?;
            }
            IrqMode::Auto => log::info!("{}: no MSI or MSI-X; interrupts off", dev.address()),
        }
        Ok(Self { dma, dev })
    }

    /// The device.
    pub fn device(&self) -> &VfioDevice {
        &self.dev
    }

    /// Counters of the DMA space (shared with the container's other
    /// `VfioHal`s).
    pub fn dma_stats(&self) -> DmaStats {
        self.lock().stats()
    }

    fn lock(&self) -> MutexGuard<'_, DmaSpace<Arc<Container>>> {
        self.dma.lock()
    }
}

impl Drop for VfioHal {
    fn drop(&mut self) {
        // Stop the device's DMA before its memory is unmapped.
        if let Err(e) = self.dev.set_bus_master(false) {
            log::warn!("{}: clearing bus master on close: {e}", self.dev.address());
        }
    }
}

/// Orders every earlier store to (DMA) memory before the MMIO store that
/// follows, as Linux's `writel` does.
///
/// On x86 a compiler fence is enough: VFIO maps BARs uncached (UC), x86
/// never reorders a store with earlier stores (TSO), and a UC store is not
/// issued until the earlier write-back stores are globally visible, so the
/// device cannot see the doorbell before the descriptors. Only the compiler
/// must be kept from moving the stores, which the fence does (Linux's x86
/// `writel` is likewise a plain `mov` with a "memory" clobber). On weakly
/// ordered CPUs a real barrier is needed, the one Linux's `writel` uses.
#[inline(always)]
fn store_barrier_before_mmio() {
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    std::sync::atomic::compiler_fence(std::sync::atomic::Ordering::SeqCst);
    #[cfg(target_arch = "aarch64")]
    // SAFETY: a barrier instruction; touches no memory or registers.
    unsafe {
        core::arch::asm!("dmb oshst", options(nostack, preserves_flags))
    };
    #[cfg(any(target_arch = "riscv64", target_arch = "riscv32"))]
    // SAFETY: a barrier instruction; touches no memory or registers.
    unsafe {
        core::arch::asm!("fence w,o", options(nostack, preserves_flags))
    };
    #[cfg(not(any(
        target_arch = "x86",
        target_arch = "x86_64",
        target_arch = "aarch64",
        target_arch = "riscv64",
        target_arch = "riscv32"
    )))]
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

fn hal_err(e: VfioError, what: &str) -> HalError {
    log::error!("{what}: {e}");
    HalError::from(&e)
}

// SAFETY: dma_alloc returns zeroed page-aligned pool memory that no other
// allocation overlaps, mapped by VFIO_IOMMU_MAP_DMA at exactly
// `iova .. iova + len`; an IOVA range is handed out again only after
// VFIO_IOMMU_UNMAP_DMA of its previous mapping succeeded (on failure the
// memory and IOVA are quarantined, never reused), so the device cannot reach
// a new owner's memory through an old mapping (a driver must not free what
// the device may still use: the trait's dma_free precondition);
// dma_unmap_retired unmaps and never frees the IOVA range; the memory
// of a region stays valid even if the VfioHal is dropped first (its pool
// chunk is then leaked, never unmapped from the process, though the IOMMU
// mapping is removed); dma_map maps the pages of the caller's range (the
// IOMMU's granularity is a page, so the rest of the first and last page is
// reachable too); BAR accesses are bounds-checked by MmioRegion or the
// pread path; mmio_write* issue the store barrier above before the store,
// and mmio_write64 is one 64-bit store because VfioHal::new refuses a
// memory BAR that is not mmapped (the pread path would split it).
unsafe impl Hal for VfioHal {
    fn dma_alloc(&self, len: usize) -> Result<DmaRegion, HalError> {
        let (vaddr, iova, len) = self
            .lock()
            .alloc(len)
            .map_err(|e| hal_err(e, "dma_alloc"))?;
        // SAFETY: `len` bytes at `vaddr` are pool memory, valid for reads
        // and writes until dma_free returns them to the pool; if the
        // VfioHal is dropped first, the pool leaks (never unmaps) the chunk
        // holding them, so they stay valid for as long as the region lives.
        Ok(unsafe { DmaRegion::new(vaddr, iova, len) })
    }

    unsafe fn dma_free(&self, region: DmaRegion) {
        if let Err(e) = self.lock().free(region.iova(), region.vaddr()) {
            log::error!("dma_free of iova {:#x}: {e}", region.iova());
        }
    }

    unsafe fn dma_map(&self, vaddr: NonNull<u8>, len: usize) -> Result<u64, HalError> {
        // SAFETY: forwarded contract (memory valid until dma_unmap, device
        // access accepted).
        unsafe { self.lock().map_user(vaddr, len) }.map_err(|e| hal_err(e, "dma_map"))
    }

    unsafe fn dma_unmap(&self, iova: u64, len: usize) -> Result<(), HalError> {
        self.lock()
            .unmap_user(iova, len)
            .map_err(|e| hal_err(e, "dma_unmap"))
    }

    unsafe fn dma_unmap_retired(&self, iova: u64, len: usize) -> Result<(), HalError> {
        self.lock()
            .retire_user(iova, len)
            .map_err(|e| hal_err(e, "dma_unmap_retired"))
    }

    fn mmio_read32(&self, bar: u8, offset: usize) -> u32 {
        self.dev.read32(bar, offset)
    }

    fn mmio_write32(&self, bar: u8, offset: usize, value: u32) {
        store_barrier_before_mmio();
        self.dev.write32(bar, offset, value)
    }

    fn mmio_write64(&self, bar: u8, offset: usize, value: u64) {
        store_barrier_before_mmio();
        self.dev.write64(bar, offset, value)
    }

    fn now_ns(&self) -> u64 {
        crate::irq::now_ns()
    }

    fn wait_irq(&self, vector: u16, timeout_ns: u64) -> Result<bool, HalError> {
        self.dev.wait_irq(vector, timeout_ns).map_err(|e| match e {
            VfioError::Unsupported { .. } => HalError::Unsupported,
            e if e.errno() == Some(libc::EINTR) => HalError::Interrupted,
            e => hal_err(e, "wait_irq"),
        })
    }

    /// The BAR's bus address, from the function's configuration space.
    fn bar_address(&self, bar: u8) -> Option<u64> {
        self.dev.bar_address(bar).ok()
    }

    /// The vector's VFIO eventfd, valid while the device's interrupts stay
    /// enabled.
    fn irq_eventfd(&self, vector: u16) -> Option<i32> {
        use std::os::fd::{AsFd, AsRawFd};
        let irqs = self.dev.irqs()?;
        let fd = irqs.eventfd(vector.into())?.as_fd().as_raw_fd();
        Some(fd)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `rnic-driver` runs over VFIO unchanged: its entry point accepts a
    /// `VfioHal` (checked at compile time).
    #[allow(dead_code)]
    fn driver_opens_over_vfio(
        hal: VfioHal,
    ) -> Result<rnic_driver::Context<VfioHal>, rnic_driver::Error> {
        rnic_driver::Context::open(hal)
    }

    #[test]
    fn options() {
        let o = VfioOptions::default().dma_mask_bits(28);
        assert_eq!(o.dma_limit, 0x0fff_ffff);
        assert_eq!(VfioOptions::default().dma_mask_bits(64).dma_limit, u64::MAX);
        assert_eq!(VfioOptions::default().irqs, IrqMode::Auto);
    }

    #[test]
    fn open_without_vfio_explains() {
        // This host has no VFIO (or the address is absent): the error names
        // the fix either way.
        let e = VfioHal::open("0000:ff:1f.7").unwrap_err();
        let m = e.to_string();
        assert!(m.contains("0000:ff:1f.7"), "{m}");
        let e = VfioHal::open("not-an-address").unwrap_err();
        assert!(e.to_string().contains("lspci -D"), "{e}");
    }
}

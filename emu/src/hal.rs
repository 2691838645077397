//! [`EmuHal`]: the platform trait implemented on the device model.

use std::os::fd::OwnedFd;
use std::ptr::NonNull;
use std::sync::Arc;

use rnic_queues::{DmaRegion, Hal, HalError};

use crate::{EmuDevice, ExecMode, ProcessMemory};

/// A driver's handle on an [`EmuDevice`]: DMA memory through the emulated
/// IOMMU, BAR access to the register file and doorbells, interrupts and
/// time. Cheap to clone; the device lives while any handle does.
#[derive(Debug, Clone)]
pub struct EmuHal {
    dev: Arc<EmuDevice>,
}

impl EmuHal {
    pub(crate) fn new(dev: Arc<EmuDevice>) -> Self {
        Self { dev }
    }

    /// The device behind this handle.
    pub fn device(&self) -> &Arc<EmuDevice> {
        &self.dev
    }

    /// Maps `host .. host + len` at `iova`, an address the platform chose
    /// (a vfio-user client's `DMA_MAP`). Refused (`NoIova`) if the range
    /// is empty, wraps or overlaps a mapping.
    ///
    /// # Safety
    ///
    /// The memory must stay valid for reads and writes by the device until
    /// [`EmuHal::unmap_at`] of the same range returns.
    pub unsafe fn map_at(&self, iova: u64, host: NonNull<u8>, len: usize) -> Result<(), HalError> {
        self.dev.shared().lock().dev.iommu.map_at(iova, host, len)
    }

    /// Maps `len` bytes of another process's memory, from its virtual
    /// address `addr`, at `iova` (a vfio-user client's `DMA_MAP` without a
    /// file): the device copies to and from it through `mem`. Only memory
    /// regions may use such a mapping; a ring or doorbell record placed
    /// there is a DMA fault. Refused as [`EmuHal::map_at`] refuses.
    pub fn map_process(
        &self,
        iova: u64,
        mem: Arc<ProcessMemory>,
        addr: u64,
        len: usize,
    ) -> Result<(), HalError> {
        let mut st = self.dev.shared().lock();
        st.dev.iommu.map_process(iova, mem, addr, len)
    }

    /// Removes a mapping of [`EmuHal::map_at`] or [`EmuHal::map_process`]:
    /// when it returns, the device can no longer reach the memory.
    pub fn unmap_at(&self, iova: u64, len: usize) -> Result<(), HalError> {
        let mut st = self.dev.shared().lock();
        // Writes queued for the memory land before it goes.
        if let Some(p) = st.dev.iommu.process() {
            p.settle();
        }
        st.dev.iommu.unmap(iova, len)
    }

    /// Signals `fd` (an eventfd) on every raise of MSI-X `vector` as well,
    /// or stops with `None`: a platform's client waits on its own eventfds,
    /// as VFIO's `SET_IRQS` asks.
    pub fn forward_irq(&self, vector: u16, fd: Option<OwnedFd>) -> Result<(), HalError> {
        self.dev.shared().irq.forward(vector, fd)
    }
}

// SAFETY: dma_alloc returns fresh zeroed page-aligned memory of its own
// allocation, mapped at IOVAs no other mapping uses; the device reaches host
// memory only through IOMMU translations made under the device lock, which
// dma_free/dma_unmap also take before removing a mapping (and bump the
// generation that invalidates cached translations), so nothing is reachable
// after they return; the IOMMU never hands out an IOVA twice, so a range
// unmapped by dma_unmap_retired is never reused; BAR accesses only touch the
// model's register file.
unsafe impl Hal for EmuHal {
    fn dma_alloc(&self, len: usize) -> Result<DmaRegion, HalError> {
        let (host, iova) = self.dev.shared().lock().dev.iommu.alloc(len)?;
        // SAFETY: `host` is a fresh allocation of at least `len` bytes that
        // stays valid until dma_free (it is leaked, never freed, otherwise).
        Ok(unsafe { DmaRegion::new(host, iova, len) })
    }

    unsafe fn dma_free(&self, region: DmaRegion) {
        let r = self
            .dev
            .shared()
            .lock()
            .dev
            .iommu
            .free(region.iova(), region.vaddr());
        if r.is_err() {
            log::error!(
                "dma_free of a region not from dma_alloc (iova {:#x})",
                region.iova()
            );
        }
    }

    unsafe fn dma_map(&self, vaddr: NonNull<u8>, len: usize) -> Result<u64, HalError> {
        self.dev.shared().lock().dev.iommu.map(vaddr, len)
    }

    unsafe fn dma_unmap(&self, iova: u64, len: usize) -> Result<(), HalError> {
        self.dev.shared().lock().dev.iommu.unmap(iova, len)
    }

    /// The IOMMU never hands an IOVA out twice, so unmapping retires it.
    unsafe fn dma_unmap_retired(&self, iova: u64, len: usize) -> Result<(), HalError> {
        // SAFETY: forwarded contract (exactly an earlier dma_map, not yet
        // unmapped).
        unsafe { self.dma_unmap(iova, len) }
    }

    fn mmio_read32(&self, bar: u8, offset: usize) -> u32 {
        self.dev.shared().read32(bar, offset)
    }

    fn mmio_write32(&self, bar: u8, offset: usize, value: u32) {
        self.dev.shared().write32(bar, offset, value)
    }

    fn mmio_write64(&self, bar: u8, offset: usize, value: u64) {
        self.dev.shared().write64(bar, offset, value)
    }

    fn mmio_write_block(&self, bar: u8, offset: usize, block: &[u64; 8]) -> Result<(), HalError> {
        self.dev.shared().write_block(bar, offset, block);
        Ok(())
    }

    fn now_ns(&self) -> u64 {
        self.dev.shared().now_ns()
    }

    fn wait_irq(&self, vector: u16, timeout_ns: u64) -> Result<bool, HalError> {
        // A thread that sleeps no longer runs the NIC: its worker does.
        if timeout_ns > 0 && self.dev.mode() == ExecMode::Thread {
            self.dev.shared().unlend();
        }
        self.dev.shared().irq.wait(vector, timeout_ns)
    }

    fn irq_eventfd(&self, vector: u16) -> Option<i32> {
        self.dev.shared().irq.eventfd(vector)
    }

    /// The waiting thread lends itself to the device: frames that arrived,
    /// doorbells rung and timers that fell due run now, in this thread
    /// (in thread mode unless the device worker is running the NIC), so
    /// that a thread waiting for a completion never keeps the NIC that
    /// makes it from a core.
    fn relax(&self) {
        self.dev.poll();
    }

    /// Thread mode: the thread that found its CQ empty lends itself to the
    /// device, as in [`Hal::relax`]. Inline: nothing; an inline NIC runs in
    /// the threads that ring it and that call [`Hal::relax`] or
    /// [`EmuDevice::poll`], and a program driving one chooses when (two
    /// threads each running one inline NIC on every empty poll would drive
    /// its send queue past the other's receives).
    fn poll_empty(&self) {
        if self.dev.mode() == ExecMode::Thread {
            self.dev.poll();
        }
    }
}

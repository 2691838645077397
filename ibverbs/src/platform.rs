//! The platform an rnic device of this library runs on: an emulated NIC
//! in the process, a real rnic bound to vfio-pci, or one that rnicd serves
//! over vfio-user. One `Hal` over all three, so that every object of the
//! library is rnic-driver's over [`Platform`].

use std::ptr::NonNull;

use rnic_emu::EmuHal;
use rnic_queues::{DmaRegion, Hal, HalError};
use rnic_vfio::VfioHal;
use rnic_vfio_user::VfioUserHal;

/// The platform of one open device.
pub(crate) enum Platform {
    /// The emulated NIC's platform.
    Emu(EmuHal),
    /// A real device through VFIO.
    Vfio(Box<VfioHal>),
    /// A device another process serves over vfio-user (rnicd).
    VfioUser(Box<VfioUserHal>),
}

/// Calls `$m` on the platform inside.
macro_rules! each {
    ($self:ident, $h:ident => $e:expr) => {
        match $self {
            Platform::Emu($h) => $e,
            Platform::Vfio($h) => $e,
            Platform::VfioUser($h) => $e,
        }
    };
}

// SAFETY: every call goes to the platform inside, which keeps the trait's
// promises (EmuHal, VfioHal and VfioUserHal are all Hal implementations).
unsafe impl Hal for Platform {
    fn dma_alloc(&self, len: usize) -> Result<DmaRegion, HalError> {
        each!(self, h => h.dma_alloc(len))
    }

    unsafe fn dma_free(&self, region: DmaRegion) {
        // SAFETY: the caller's promise, passed on to the same platform.
        each!(self, h => unsafe { h.dma_free(region) })
    }

    unsafe fn dma_map(&self, vaddr: NonNull<u8>, len: usize) -> Result<u64, HalError> {
        // SAFETY: the caller's promise, passed on.
        each!(self, h => unsafe { h.dma_map(vaddr, len) })
    }

    unsafe fn dma_unmap(&self, iova: u64, len: usize) -> Result<(), HalError> {
        // SAFETY: the caller's promise, passed on.
        each!(self, h => unsafe { h.dma_unmap(iova, len) })
    }

    unsafe fn dma_unmap_retired(&self, iova: u64, len: usize) -> Result<(), HalError> {
        // SAFETY: the caller's promise, passed on.
        each!(self, h => unsafe { h.dma_unmap_retired(iova, len) })
    }

    fn mmio_read32(&self, bar: u8, offset: usize) -> u32 {
        each!(self, h => h.mmio_read32(bar, offset))
    }

    fn mmio_write32(&self, bar: u8, offset: usize, value: u32) {
        each!(self, h => h.mmio_write32(bar, offset, value))
    }

    fn mmio_write64(&self, bar: u8, offset: usize, value: u64) {
        each!(self, h => h.mmio_write64(bar, offset, value))
    }

    fn mmio_write_block(&self, bar: u8, offset: usize, block: &[u64; 8]) -> Result<(), HalError> {
        each!(self, h => h.mmio_write_block(bar, offset, block))
    }

    fn now_ns(&self) -> u64 {
        each!(self, h => h.now_ns())
    }

    fn wait_irq(&self, vector: u16, timeout_ns: u64) -> Result<bool, HalError> {
        each!(self, h => h.wait_irq(vector, timeout_ns))
    }

    fn irq_eventfd(&self, vector: u16) -> Option<i32> {
        each!(self, h => h.irq_eventfd(vector))
    }

    fn bar_address(&self, bar: u8) -> Option<u64> {
        each!(self, h => h.bar_address(bar))
    }

    fn relax(&self) {
        each!(self, h => h.relax())
    }

    fn poll_empty(&self) {
        each!(self, h => h.poll_empty())
    }
}

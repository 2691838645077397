//! The kernel VFIO backend of rnic: [`VfioHal`] implements the driver's
//! platform trait ([`rnic_queues::Hal`]) over a real PCI device bound to
//! Linux's `vfio-pci`, so `rnic-driver` runs on hardware unchanged.
//!
//! ```no_run
//! use rnic_queues::Hal;
//! use rnic_vfio::{VfioHal, VfioOptions};
//!
//! # fn main() -> Result<(), rnic_vfio::VfioError> {
//! let hal = VfioHal::open_with("0000:3b:00.0", &VfioOptions::default())?;
//! let id = hal.mmio_read32(0, 0);
//! let buf = hal.dma_alloc(4096).expect("DMA memory");
//! println!("id {id:#x}, buffer at IOVA {:#x}", buf.iova());
//! // SAFETY: the device was never given this buffer.
//! unsafe { hal.dma_free(buf) };
//! # Ok(())
//! # }
//! ```
//!
//! The layers, each usable on its own:
//!
//! - [`Sysfs`] and [`PciAddress`]: what the kernel says about a device (its
//!   driver, IOMMU group, the group's other devices), read under a
//!   configurable root so the diagnostics are testable.
//! - [`Container`]: `/dev/vfio/vfio`, one IOMMU address space (type 1 v2,
//!   else type 1): valid IOVA ranges from the `VFIO_IOMMU_GET_INFO`
//!   capability chain, `VFIO_IOMMU_MAP_DMA` / `UNMAP_DMA`.
//! - [`VfioDevice`]: a device opened through its group (in the container
//!   that already holds the group, if this process has it open): regions
//!   and IRQ info, memory BARs mapped with `memmap2` (I/O port BARs reached
//!   with pread/pwrite, 32-bit accesses only), config space, bus mastering,
//!   `VFIO_DEVICE_RESET`, MSI and MSI-X on eventfds ([`EventFd`]).
//! - [`IovaAllocator`] and [`DmaPool`]: device addresses inside the
//!   IOMMU's valid ranges and the device's DMA mask; pinned memory from
//!   2 MiB hugepages or `mlock`ed pages, returned to the kernel on drop
//!   (except chunks with memory still handed out, which are leaked rather
//!   than unmapped under their holder).
//!
//! The [`VfioHal`]s of the devices of one container share its DMA space.
//!
//! Every error ([`VfioError`]) says how to fix it: the device is bound to
//! another driver (and the sysfs commands to rebind it), the group is not
//! viable (and which devices share it), there is no IOMMU, no permission on
//! `/dev/vfio/N`, no hugepages, RLIMIT_MEMLOCK too low (and its value).
//!
//! Only the container/group interface is implemented, the one kernels
//! without `CONFIG_IOMMUFD` (Debian 12's 6.1, Debian 13's 6.12) have; the
//! iommufd and VFIO cdev interface (`/dev/iommu`,
//! `/dev/vfio/devices/vfioN`) is not. See `docs/vfio.md` for setting a
//! machine up.
#![deny(missing_docs)]

mod container;
mod device;
mod dma;
mod error;
mod hal;
mod ioctl;
mod iova;
mod irq;
mod pool;
mod sysfs;
#[cfg(test)]
mod testutil;

pub use container::{Container, Group, IommuInfo, IommuType};
pub use device::{
    Bar, IrqInfo, IrqKind, Paths, RegionInfo, VfioDevice, PCI_COMMAND, PCI_COMMAND_MASTER,
    PCI_COMMAND_MEMORY,
};
pub use dma::DmaStats;
pub use error::{memlock_limit, rebind_commands, VfioError};
pub use hal::{IrqMode, VfioHal, VfioOptions};
pub use iova::IovaAllocator;
pub use irq::{now_ns, EventFd, IrqVectors};
pub use pool::{hugepage_counts, Backing, DmaPool, HugePages, PoolBlock, HUGE_PAGE_SIZE};
pub use sysfs::{GroupMember, PciAddress, Sysfs};

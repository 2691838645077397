//! PCI identity of the rnic device.

/// PCI vendor ID (from the range QEMU reserves for experimental devices).
pub const VENDOR_ID: u16 = 0x1b36;
/// PCI device ID of the rnic RDMA NIC.
pub const DEVICE_ID: u16 = 0x10f1;
/// PCI class code: network controller (0x02), "other" subclass (0x80).
pub const CLASS_CODE: u32 = 0x02_80_00;
/// Revision ID of this version of the interface.
pub const REVISION: u8 = 1;

/// BAR holding the control registers (see [`crate::bar0`]); 64-bit, 16 KiB.
pub const BAR_REGS: u8 = 0;
/// Size of the register BAR in bytes.
pub const BAR_REGS_SIZE: usize = 16 * 1024;
/// BAR holding the doorbell pages (see [`crate::uar`]); 64-bit, prefetchable
/// off, `UAR_PAGES * 4 KiB`.
pub const BAR_DOORBELL: u8 = 2;
/// MSI-X vector 0: command completion and the fatal state (`INTR_CAUSE`),
/// and EQ 0 when `EQ_CTRL.vector` names it.
pub const MSIX_ASYNC_VECTOR: u16 = 0;

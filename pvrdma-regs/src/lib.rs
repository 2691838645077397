//! Register, command and descriptor layouts of VMware's paravirtual RDMA
//! adapter (PVRDMA, PCI 15ad:0820): the interface vSphere gives a VM and
//! QEMU 7.2 emulates as `-device pvrdma`.
//!
//! The interface is defined by VMware's C headers (Linux's
//! `pvrdma_dev_api.h`, `pvrdma_verbs.h`, `vmw_pvrdma-abi.h` and
//! `pvrdma_ring.h`, in `headers/`); this crate is their single Rust
//! implementation. Every layout is a `#[repr(C)]` struct with its size and
//! field offsets asserted at compile time, and `tests/layout.rs` checks
//! them against the C compiler's reading of those headers. Every layout
//! that crosses DMA memory implements [`rnic_queues::Pod`] beside its
//! definition.
//!
//! The device is little-endian (its guests are x86): multi-byte fields are
//! [`le16`], [`le32`] and [`le64`]; GIDs and MAC addresses are byte arrays
//! in network order.
//!
//! - [`bar1`]: the register BAR; [`uar`]: the doorbell pages of BAR 2.
//! - [`dsr`]: the device-shared region the driver hands over at bring-up.
//! - [`cmd`]: the command and response slots and every command.
//! - [`wqe`], [`cqe`]: work and completion queue entries, and the
//!   asynchronous event and CQ-notification entries.
//! - [`ring`]: the state page of the producer/consumer index rings.
#![no_std]
#![deny(missing_docs)]

pub mod bar1;
pub mod cmd;
pub mod cqe;
pub mod dsr;
pub mod ring;
pub mod uar;
pub mod wqe;

pub use endian_num::{le16, le32, le64};

/// PCI vendor ID: VMware.
pub const PCI_VENDOR_ID: u16 = 0x15ad;
/// PCI device ID of the PVRDMA function.
pub const PCI_DEVICE_ID: u16 = 0x0820;

/// Size of a page the device reaches through a page directory, and of a
/// UAR page.
pub const PAGE_SIZE: usize = 4096;

/// Index of each BAR (`enum pvrdma_pci_resource`).
pub mod bar {
    /// BAR 0: the MSI-X table and PBA.
    pub const MSIX: u8 = 0;
    /// BAR 1: the registers ([`crate::bar1`]).
    pub const REG: u8 = 1;
    /// BAR 2: the UAR (doorbell) pages ([`crate::uar`]).
    pub const UAR: u8 = 2;
}

//! Register, command and descriptor layouts of the rnic RDMA device.
//!
//! This crate is the single implementation of `docs/device-spec.md`: every
//! register offset, command layout, work-queue entry, completion-queue entry
//! and event-queue entry the driver and the device model exchange. Each
//! layout is a `#[repr(C)]` struct whose size and field offsets are checked at
//! compile time with `static_assertions`.
//!
//! Byte order is carried by the types: every multi-byte integer field is an
//! [`le16`], [`le32`] or [`le64`] (little-endian on every host), and the few
//! fields that the wire defines in network order (GIDs, MAC addresses,
//! immediate data, GUIDs) are byte arrays. Bit-packed words are
//! `bitfield-struct` types whose in-memory representation is little-endian.
//!
//! Every layout that crosses DMA memory implements [`rnic_queues::Pod`]
//! beside its definition (the CQE and EQE also [`rnic_queues::OwnedEntry`]),
//! so the rings of `rnic-queues` carry it without knowing the device.
#![no_std]
#![deny(missing_docs)]

pub mod bar0;
pub mod cmd;
pub mod counters;
pub mod cqe;
pub mod eqe;
pub mod pci;
pub mod uar;
pub mod wqe;

pub use endian_num::{le16, le32, le64};

/// Size of a device page: doorbell pages, queue buffer alignment, command
/// queue alignment.
pub const PAGE_SIZE: usize = 4096;

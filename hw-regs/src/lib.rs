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
#![no_std]
#![deny(missing_docs)]

pub mod bar0;
pub mod cmd;
pub mod counters;
pub mod cqe;
pub mod eqe;
pub mod pci;
pub mod uar;
pub mod verbs;
pub mod wqe;

pub use endian_num::{le16, le32, le64};

/// Size of a device page: doorbell pages, queue buffer alignment, command
/// queue alignment.
pub const PAGE_SIZE: usize = 4096;

/// The phase ("owner") bit a producer writes into the entry at free-running
/// index `index` of a ring of `1 << log_size` entries.
///
/// The device writes `1` on the first pass over a zeroed ring, `0` on the
/// second, and so on; a consumer whose free-running consumer index is `ci`
/// owns the entry iff its owner bit equals `owner_bit(ci, log_size)`. A zeroed
/// ring therefore starts out with no valid entries.
#[inline]
pub const fn owner_bit(index: u32, log_size: u32) -> bool {
    (index >> log_size) & 1 == 0
}

#[cfg(test)]
mod tests {
    use super::owner_bit;

    #[test]
    fn owner_bit_flips_every_pass() {
        assert!(owner_bit(0, 2));
        assert!(owner_bit(3, 2));
        assert!(!owner_bit(4, 2));
        assert!(!owner_bit(7, 2));
        assert!(owner_bit(8, 2));
    }
}

//! Rings, doorbell records, barriers and the platform trait of rnic.
//!
//! This crate sits below both the driver and the device model: it defines
//! [`Hal`], the platform a driver runs on (DMA memory, BAR access,
//! interrupts, time), and the rings that live in DMA memory:
//!
//! - [`ProducerRing`]: the producer side of a work queue or the command
//!   queue; the driver writes entries, then publishes its producer index.
//! - [`ConsumerRing`]: the consumer side of a CQ or EQ, driven by owner
//!   (phase) bits the device writes.
//! - [`IndexRing`]: a ring whose producer tail and consumer head are two
//!   indices in a state page (PVRDMA's queues), either side's view.
//! - [`write_page_dir`]: a two-level page directory, for a device that
//!   takes memory by page list.
//! - [`DbRec`]: a doorbell record, a 32-bit index in host memory the device
//!   reads.
//! - [`device`]: the device's half of the owner-bit protocol, for device
//!   models and fake devices.
//! - [`shared`]: copies of bytes another party may touch at once (an MR's
//!   payload), race-free and at memcpy speed.
//! - [`Pod`]: the plain-data types that may be copied to and from DMA
//!   memory; each device's layouts implement it beside their structs, with
//!   [`pod_struct!`] and [`pod_bitfield!`].
//!
//! It knows no device's formats: a device's layouts (rnic's are
//! `rnic-hw-regs`) build on it.
//!
//! Descriptor bodies and payload are copied with volatile or plain memory
//! accesses; the words that hand them over (owner bits, the command owner
//! byte, doorbell records) are accessed only atomically, with acquire loads
//! and release stores, so the hand-over is race-free even when the device is
//! a thread of the same process. Each ordering point carries its reason.
#![no_std]
#![deny(missing_docs)]

pub mod device;
mod dma;
mod hal;
mod index_ring;
mod mmio;
mod page_dir;
mod pod;
mod ring;
pub mod shared;

pub use dma::{DbRec, DmaRegion};
pub use hal::{Hal, HalError};
pub use index_ring::{IndexError, IndexRing};
pub use mmio::MmioRegion;
pub use page_dir::{tables_for, write_page_dir, PageDirError, PAGE_DIR_ENTRIES};
pub use pod::Pod;
#[doc(hidden)]
pub use pod::{pod_field, pod_size};
pub use ring::{owner_bit, ConsumerRing, OwnedEntry, ProducerRing};

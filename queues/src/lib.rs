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
//! - [`DbRec`]: a doorbell record, a 32-bit index in host memory the device
//!   reads.
//! - [`device`]: the device's half of the owner-bit protocol, for device
//!   models and fake devices.
//!
//! Every access to DMA memory is volatile, and every ordering point is an
//! explicit fence with the reason beside it.
#![no_std]
#![deny(missing_docs)]

pub mod device;
mod dma;
mod hal;
mod mmio;
mod ring;

pub use dma::{DbRec, DmaRegion};
pub use hal::{Hal, HalError};
pub use mmio::MmioRegion;
pub use ring::{ConsumerRing, OwnedEntry, ProducerRing};

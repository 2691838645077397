//! A userspace driver for VMware's paravirtual RDMA adapter (PVRDMA, PCI
//! 15ad:0820), the second device behind rnic's verbs core.
//!
//! Like rnic's own driver it reaches the device only through
//! [`rnic_queues::Hal`]: BAR 1 registers, BAR 2 doorbells, DMA memory and
//! the three MSI-X vectors. [`Device::open`] brings the device up as
//! Linux's `pvrdma_pci_probe` does (the device-shared region, the command
//! and response slots, the async event and CQ-notification rings by page
//! directory, activation), and [`Device::exec`] runs one command at a
//! time through the slots, checking every response it takes: its cookie,
//! its `ack`, the error byte and the error register. Errors are the verbs
//! core's ([`rnic_verbs::Error`]); a refusal carries the device's numbers
//! (the opcode, the errno it answered, the error register).
//!
//! Over the channel: user contexts ([`Uc`], each with its UAR page),
//! protection domains ([`Pd`]), memory regions ([`Mr`]: the caller's
//! pages mapped and listed by page directory) and completion queues
//! ([`Cq`]: pages by page directory, polled from the state page's ring,
//! armed through the UAR) and queue pairs ([`Qp`]: RC and UD, made,
//! modified and destroyed, with SENDs and receives posted through their
//! rings and doorbells). The verbs core over all of them, with the IBA
//! state machine and attribute checks, comes with the provider seam
//! (issue 17).
#![no_std]
#![deny(missing_docs)]

extern crate alloc;

mod cmd;
mod context;
mod cq;
mod device;
mod mr;
mod post;
pub mod provider;
mod qp;
mod queue_mem;
mod ring;
mod srq;

pub use context::{Pd, Uc, UAR_PAGES};
pub use cq::{Cq, MAX_CQE};
pub use device::{Device, CMD_TIMEOUT_NS};
pub use mr::Mr;
pub use qp::{Qp, QpInit, MAX_SGE, MAX_WR};
pub use srq::Srq;

#[cfg(test)]
mod tests;

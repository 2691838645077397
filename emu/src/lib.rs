//! Emulated rnic RDMA device: a software NIC behind the same register and
//! DMA interface as the hardware, with a RoCEv2 port on a wire.
//!
//! [`EmuDevice`] implements the device specification (`hw-regs` layouts,
//! `docs/device-spec.md`): the BAR 0 register file, the command queue, the
//! BAR 2 doorbell pages, CQs and the asynchronous event queue, and the RC
//! transport, whose packets leave port 1 as RoCEv2 frames on a
//! [`net::Wire`]. A driver reaches it only through [`EmuHal`], its
//! implementation of [`rnic_queues::Hal`]: register reads and writes, and
//! DMA memory that the device reaches only through an emulated IOMMU. A NIC
//! reaches another only through frames on a wire.
//!
//! ```
//! use rnic_emu::{EmuConfig, EmuDevice, ExecMode};
//! use rnic_hw_regs::bar0;
//! use rnic_queues::Hal;
//!
//! let dev = EmuDevice::new(EmuConfig::default(), ExecMode::Inline);
//! let hal = dev.hal();
//! assert_eq!(hal.mmio_read32(0, bar0::ID), bar0::MAGIC);
//! ```
//!
//! The work a register or doorbell write triggers, and what frames and
//! timers bring, runs either in the writing thread ([`ExecMode::Inline`])
//! or on a device worker, a thread shared by the process's NICs
//! ([`ExecMode::Thread`]); both behave identically.
//! [`EmuDevice::builder`] picks the wire ([`net::Loopback`] by default,
//! [`net::Switch`] ports, [`net::UdpWire`]) and the clock ([`Clock`], or a
//! [`VirtualClock`] that tests advance by hand).
//!
//! # Model notes
//!
//! Where the specification leaves a choice, the model does this:
//!
//! - The transport follows Linux rxe where the IBA leaves room: at most
//!   128 PSNs outstanding, an ACK requested every 64 packets of a long
//!   message, one go-back-N rewind per loss, a WRITE with immediate taking
//!   its receive WQE at its last packet, ACKs coalesced over what arrives
//!   before the responder's next turn. `max_rd_atomic` 0 acts as 1.
//! - Each QP sends at most 16 packets per turn, so a busy QP cannot starve
//!   the others, commands or a reset.
//! - The requester reads a WQE's gather list as it builds each packet (and
//!   again for a retransmission), as hardware does.
//! - Producer indices are read from a doorbell record on each SQ/RQ
//!   doorbell and otherwise only once the WQEs already known from it are
//!   consumed; a CQ's consumer index only when the CQ looks full from the
//!   last value read. A producer index more than the ring size ahead of the
//!   consumer index is a malformed record (`QpFatal` / `BadWqe`); the flush
//!   then covers the WQEs up to the last index accepted.
//! - An error reported by an error CQE raises no async event (as on rxe and
//!   mlx5). Errors no CQE can report do: `QpFatal` when a doorbell record or
//!   the receive queue cannot be read, a doorbell record is malformed, a CQE
//!   cannot be written, or the responder's memory faults during an RDMA
//!   operation that consumes no receive WQE; `QpAccessErr` for responder
//!   rkey errors and `QpReqErr` for invalid requests (IB responder class C
//!   errors). A MODIFY_QP to ERR raises none.
//! - The requester's CQE `vendor_err` reflects the NAK code it received
//!   (the responder's own syndrome does not cross the wire).
//! - A receive WQE's SGEs are checked only as far as the message reaches;
//!   a zero-length RDMA WRITE/READ checks no rkey (InfiniBand rule).
//! - Arming a CQ that already holds CQEs past the arm's consumer index (or,
//!   for solicited arms, a solicited or error CQE there) fires at once; the
//!   arm sequence number is not checked, since doorbells arrive in order.
//! - `INTR_CAUSE.cmd_done` is set per command but raises the async vector
//!   only when it becomes set; no `CmdDone` EQEs are written.
//! - Queue configuration registers are ignored while the device is enabled
//!   or resetting. DMA memory never freed by the driver is leaked when the
//!   device goes away, since a `DmaRegion` stays valid until `dma_free`.
//! - A panic inside the model makes the device fatal (`Internal`) rather
//!   than unwinding into the driver.
//!
//! Modules, one concern each: `config`, `device` (locking, steps, the
//! inline driver, a worker's turn at a NIC, BAR dispatch), `worker`, `hal`, `iommu`,
//! `irq`, `regs` (BAR 0), `cmdq` and `cmd` (commands), `objects`
//! (PD/MR/CQ/SRQ/QP tables), `cq` and `eq` (CQE/EQE writers), `qp` (state
//! side effects, flush), `srq` (taking from shared receive queues), `wqe`
//! (WQE decoding), `sgl` (keys to host memory),
//! `counters`, `clock`, `port` (paths, neighbours, receive checks),
//! `transport` (requester, completer, responder, timers), and the public
//! [`wire`] (formats), [`net`] (wires and middleware) and [`pcap`].

mod clock;
mod cmd;
mod cmdq;
mod config;
mod counters;
mod cq;
mod device;
mod eq;
mod hal;
mod iommu;
mod irq;
mod mw;
pub mod net;
mod objects;
pub mod pcap;
mod port;
mod posted;
mod procmem;
mod qp;
mod regs;
mod sgl;
mod srq;
mod state;
mod transport;
pub mod wire;
mod worker;
mod wqe;

pub use clock::{Clock, VirtualClock};
pub use config::{ConfigError, EmuConfig, ExecMode};
pub use device::{BuildError, EmuBuilder, EmuDevice, RunStats};
pub use hal::EmuHal;
pub use iommu::IOVA_BASE;
pub use posted::PostedWrites;
pub use procmem::ProcessMemory;
pub use worker::WorkerStats;

//! Emulated rnic RDMA device: a software NIC behind the same register and
//! DMA interface as the hardware.
//!
//! [`EmuDevice`] implements the device specification (`hw-regs` layouts,
//! `docs/device-spec.md`): the BAR 0 register file, the command queue, the
//! BAR 2 doorbell pages, CQs and the asynchronous event queue, and an RC
//! data path that loops requests back to QPs of the same device through
//! port 1. A driver reaches it only through [`EmuHal`], its implementation
//! of [`rnic_queues::Hal`]: register reads and writes, and DMA memory that
//! the device reaches only through an emulated IOMMU.
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
//! The work a register or doorbell write triggers runs either synchronously
//! in the writing thread ([`ExecMode::Inline`]) or on a device thread
//! ([`ExecMode::Thread`]); both behave identically.
//!
//! # Model notes
//!
//! Where the specification leaves a choice, the model does this:
//!
//! - Every WQE executes to completion before the next starts, so fences and
//!   outstanding-READ limits are trivially honoured.
//! - Receiver-not-ready with `rnr_retry` 1..=7 stalls the send queue at the
//!   WQE. There is no RNR timer: the WQE is retried only on an event that
//!   can change the answer, when the responder's RQ doorbell leaves receive
//!   WQEs available or the responder leaves RTR/RTS or is destroyed. The
//!   requester's own SQ doorbells do not retry (new WQEs queue behind the
//!   stalled one), nor does an RQ doorbell that publishes nothing. Stalled
//!   requesters retry in the order they last stalled, so a retry meets RNR
//!   again only when another requester took the receive WQEs first; each
//!   such retry counts, and after `rnr_retry` of them (1..=6) the WQE
//!   completes `RNR_RETRY_EXC_ERR`, while 7 retries without limit. A stall
//!   nothing ends lasts forever. Timed retries belong to the RC wire
//!   transport.
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
//!   operation that consumes no receive WQE; `QpAccessErr` for responder rkey errors and `QpReqErr` for
//!   misaligned atomics and READs/atomics to a responder without
//!   `max_dest_rd_atomic` (IB responder class C errors). A MODIFY_QP to ERR
//!   raises none.
//! - The requester's CQE `vendor_err` carries the responder's syndrome for
//!   access and invalid-request NAKs, and `RemoteError` (or `DmaFault`) for
//!   remote operational errors.
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
//!
//! Modules, one concern each: `config`, `device` (locking, thread, BAR
//! dispatch), `hal`, `iommu`, `irq`, `regs` (BAR 0), `cmdq` and `cmd`
//! (commands), `objects` (PD/MR/CQ/QP tables), `cq` and `eq` (CQE/EQE
//! writers), `qp` (state side effects, flush), `wqe` (WQE decoding), `sgl`
//! (keys to host memory), `requester`, `op` (request/response messages),
//! `port` (loopback delivery) and `responder`.

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
pub mod net;
mod objects;
pub mod pcap;
mod port;
mod qp;
mod regs;
mod sgl;
mod state;
mod transport;
pub mod wire;
mod wqe;

pub use clock::{Clock, VirtualClock};
pub use config::{ConfigError, EmuConfig, ExecMode};
pub use device::{BuildError, EmuBuilder, EmuDevice};
pub use hal::EmuHal;
pub use iommu::IOVA_BASE;

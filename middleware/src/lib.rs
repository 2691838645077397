//! `rnic-middleware`: `Hal` middleware, in the spirit of smoltcp's phy
//! middleware: a platform wrapped around any platform (the device model's
//! or VFIO's) to observe the driver-device boundary.
//!
//! - [`TraceHal`] records every BAR access, command, WQE, CQE and event,
//!   decoded with the device's layouts, on a [`Timeline`] that frames and
//!   the peer's NIC can share, to `log` and to [`trace::Sink`]s (a
//!   JSON-lines file for `rnic-trace`, memory for tests).
//! - [`FaultHal`] injects faults: registers that read wrong, command
//!   timeouts, failed DMA allocations and mappings, and faults of the
//!   device's own interface (failed commands, wrong responses, corrupt
//!   CQEs).
//!
//! Both are generic over the device's [`Boundary`]: [`Rnic`] (the
//! default) or [`Pvrdma`].

pub mod boundary;
pub mod decode;
pub mod fault;
pub mod pvrdma;
pub mod rnic;
pub mod trace;

pub use boundary::Boundary;
pub use fault::{FaultHal, FaultHandle, Faults, Injected};
pub use pvrdma::{Pvrdma, PvrdmaFaults};
pub use rnic::{CqeFault, Rnic, RnicFaults};
pub use trace::{Event, JsonLines, Lane, Memory, Print, Sink, Timeline, TraceHal};

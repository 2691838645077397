//! `rnic-middleware`: `Hal` middleware, in the spirit of smoltcp's phy
//! middleware: a platform wrapped around any platform (the device model's
//! or VFIO's) to observe the driver-device boundary.
//!
//! - [`TraceHal`] records every BAR access, command, WQE, CQE and EQE,
//!   decoded with hw-regs, on a [`Timeline`] that frames and the peer's
//!   NIC can share, to `log` and to [`trace::Sink`]s (a JSON-lines file
//!   for `rnic-trace`, memory for tests).
//! - [`FaultHal`] injects faults: registers that read wrong, command
//!   timeouts, failed DMA allocations and mappings, failed commands and
//!   numbers already in use, corrupt or out-of-range CQEs.

pub mod decode;
pub mod fault;
mod shadow;
pub mod trace;

pub use fault::{CqeFault, FaultHal, FaultHandle, Faults, Injected};
pub use trace::{Event, JsonLines, Lane, Memory, Print, Sink, Timeline, TraceHal};

//! The device-independent verbs core of rnic.
//!
//! What every device's driver shares, whatever its registers and formats:
//! the verbs enumerations and flags with libibverbs' values; the
//! attributes, work requests and completions providers take and give; the
//! QP state machine, the checks of a modify's attributes and the states
//! that take work requests; and the
//! errors, as libibverbs reports them (an errno, a
//! message, and whether the device refused, never executed or may still
//! execute a command), with no device's types in them. A device's driver (a
//! provider: rnic's in `rnic-driver`, PVRDMA's) builds its errors from
//! these and keeps its own decoding of a refusal's numbers.
#![no_std]
#![deny(missing_docs)]

extern crate alloc;

mod attr;
mod enums;
mod error;
mod event;
mod modify;
mod post;
pub mod provider;
mod qp;
mod srq;
mod transition;
mod wc;
mod wr;

pub use attr::{DeviceAttr, Gid, PortAttr};
pub use enums::{
    access, qp_attr, GidType, LinkLayer, Mtu, PortState, QpState, QpType, WcOpcode, WcStatus,
    WrOpcode, GSI_QKEY,
};
pub use error::{DestroyError, Error, ErrorKind, PostError, Refusal, Result};
pub use event::{AsyncEvent, EventElement, EventType};
pub use modify::{check_ah, check_modify, Modify, ModifyEnv};
pub use post::{check_post_recv, check_post_send};
pub use qp::{AhAttr, QpAttr, QpCap};
pub use srq::{srq_mask, SrqAttr};
pub use transition::{qp_transition, Transition};
pub use wc::{wc_flags, WorkCompletion};
pub use wr::{
    send_flags, MwBind, MwType, Payload, RecvWr, RemoteAddr, SendOp, SendWr, Sge, UdDest,
};

//! Event queue entries.
//!
//! EQ 0, configured through BAR 0, receives asynchronous events and
//! completion events. It is a ring of `1 << log_size` 64-byte [`Eqe`]s with
//! the same owner-bit protocol as a CQ (see [`crate::cqe`]): the device writes
//! bytes 0..60, then the [`EqeOwner`] word. The driver reports its consumer
//! index through `EQ_DB`; the device never overwrites an entry the driver has
//! not consumed: when the EQ is full, the event is dropped.

use bitfield_struct::bitfield;
use endian_num::le32;
use static_assertions::{assert_eq_size, const_assert_eq};

use rnic_queues::wire_enum;

/// Size of an EQE.
pub const EQE_SIZE: usize = 64;

wire_enum! {
    /// Event types, with the `enum ibv_event_type` each maps to.
    EventType: u8 {
        /// A CQE was written to an armed CQ (completion channel event);
        /// `obj` is the CQN.
        Completion = 0,
        /// `IBV_EVENT_CQ_ERR`: the CQ overran; `obj` is the CQN.
        CqError = 1,
        /// `IBV_EVENT_QP_FATAL`: the QP moved to the error state because of a
        /// local error; `obj` is the QPN.
        QpFatal = 2,
        /// `IBV_EVENT_QP_REQ_ERR`: the QP's responder saw an invalid request.
        QpReqErr = 3,
        /// `IBV_EVENT_QP_ACCESS_ERR`: the QP's responder saw an access error.
        QpAccessErr = 4,
        /// `IBV_EVENT_COMM_EST`: first packet received in RTR.
        CommEst = 5,
        /// `IBV_EVENT_SQ_DRAINED`.
        SqDrained = 6,
        /// `IBV_EVENT_QP_LAST_WQE_REACHED`: a QP on an SRQ entered the
        /// error state and takes no more WQEs from it; `obj` is the QPN.
        QpLastWqeReached = 7,
        /// `IBV_EVENT_PORT_ACTIVE`; `obj` is the port number.
        PortActive = 8,
        /// `IBV_EVENT_PORT_ERR`; `obj` is the port number.
        PortErr = 9,
        /// `IBV_EVENT_DEVICE_FATAL`.
        DeviceFatal = 10,
        /// A command completed; `obj` is the command queue index.
        CmdDone = 11,
        /// `IBV_EVENT_GID_CHANGE`: SET_GID changed an entry of the port's
        /// GID table; `obj` is the port number.
        GidChange = 12,
        /// `IBV_EVENT_SRQ_LIMIT_REACHED`: fewer WQEs than the SRQ's limit
        /// remain; the limit is disarmed. `obj` is the SRQN.
        SrqLimitReached = 13,
        /// `IBV_EVENT_SRQ_ERR`: the SRQ's doorbell record or ring cannot be
        /// used; it gives out no more WQEs. `obj` is the SRQN.
        SrqErr = 14,
    }
}

/// First word of an EQE.
#[bitfield(u32, repr = le32, from = le32::from_ne, into = le32::to_ne)]
pub struct EqeWord {
    /// [`EventType`] value.
    #[bits(8)]
    pub event_type: u8,
    /// Sub-type, reserved, zero.
    #[bits(8)]
    pub sub_type: u8,
    #[bits(16)]
    __: u16,
}

/// Last word of an EQE, written last.
#[bitfield(u32, repr = le32, from = le32::from_ne, into = le32::to_ne)]
pub struct EqeOwner {
    /// Owner (phase) bit.
    pub owner: bool,
    #[bits(31)]
    __: u32,
}

/// An event queue entry.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Eqe {
    /// Type.
    pub word: EqeWord,
    /// The object the event is about (CQN, QPN, port, command index).
    pub obj: le32,
    /// Detail: a [`crate::cqe::Syndrome`] for QP events.
    pub syndrome: le32,
    /// Reserved, zero.
    pub reserved: [le32; 12],
    /// Owner word, written last.
    pub owner: EqeOwner,
}

/// Offset of [`Eqe::owner`].
pub const EQE_OWNER_OFFSET: usize = 60;

assert_eq_size!(Eqe, [u8; EQE_SIZE]);
assert_eq_size!(EqeWord, u32);
const_assert_eq!(core::mem::offset_of!(Eqe, obj), 4);
const_assert_eq!(core::mem::offset_of!(Eqe, syndrome), 8);
const_assert_eq!(core::mem::offset_of!(Eqe, owner), EQE_OWNER_OFFSET);

// Plain data for DMA memory: every field listed, so padding fails the build.
rnic_queues::pod_bitfield!(EqeWord: le32, EqeOwner: le32);
rnic_queues::pod_struct! {
    Eqe { word, obj, syndrome, reserved, owner }
}

// SAFETY: Eqe's last word, at EQE_OWNER_OFFSET (asserted above), is the
// EqeOwner word whose bit 0 is the owner bit.
unsafe impl rnic_queues::OwnedEntry for Eqe {
    const OWNER_OFFSET: usize = EQE_OWNER_OFFSET;
}

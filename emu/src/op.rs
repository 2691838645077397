//! The messages exchanged between a requester and a responder.
//!
//! These are the transport-level operations a RoCEv2 wire would carry as
//! packets (a request with its payload, and an ACK, READ response, atomic
//! ACK or NAK back). The loopback [`crate::port`] hands them over
//! directly; a later wire transport can serialize them without touching the
//! requester or responder logic.

use rnic_hw_regs::cqe::Syndrome;

use crate::sgl::Seg;

/// Request operations (the RC request opcode families).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReqOp {
    Send,
    SendImm,
    Write,
    WriteImm,
    Read,
    CmpSwap,
    FetchAdd,
}

impl ReqOp {
    /// Carries a remote address and key (RETH/AtomicETH).
    pub(crate) fn has_raddr(self) -> bool {
        !matches!(self, ReqOp::Send | ReqOp::SendImm)
    }

    /// Is an atomic operation.
    pub(crate) fn is_atomic(self) -> bool {
        matches!(self, ReqOp::CmpSwap | ReqOp::FetchAdd)
    }

    /// Carries a payload from the requester (SEND, WRITE).
    pub(crate) fn has_payload(self) -> bool {
        matches!(
            self,
            ReqOp::Send | ReqOp::SendImm | ReqOp::Write | ReqOp::WriteImm
        )
    }
}

/// One request message.
pub(crate) struct Request<'a> {
    pub op: ReqOp,
    pub src_qpn: u32,
    pub dest_qpn: u32,
    /// Payload (SEND/WRITE), in the requester's memory.
    pub payload: &'a [Seg],
    /// Message length: the payload's, or the bytes to READ.
    pub len: u64,
    pub raddr: u64,
    pub rkey: u32,
    /// Immediate data, network order.
    pub imm: [u8; 4],
    pub solicited: bool,
    /// Swap value (compare and swap) or addend (fetch and add).
    pub swap_add: u64,
    /// Compare value (compare and swap).
    pub compare: u64,
}

/// NAK codes (the AETH syndromes a responder can send).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Nak {
    /// Receiver not ready: no receive WQE.
    Rnr,
    /// Invalid request (message too long for the receive buffer, misaligned
    /// atomic).
    InvalidRequest,
    /// Remote access error (rkey, bounds, access rights).
    RemoteAccess,
    /// Remote operational error (the responder failed locally).
    RemoteOp,
}

/// The responder's answer.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Response {
    /// The request was executed.
    Ack,
    /// READ response data, in the responder's memory.
    Read(Seg),
    /// Atomic ACK with the original value.
    Atomic(u64),
    /// Refused. The syndrome is a model extension beyond the wire's NAK
    /// code; it ends up in the requester's CQE `vendor_err`.
    Nak(Nak, Syndrome),
    /// No answer: the destination QP does not exist or does not receive. A
    /// real requester would time out and exhaust its retries.
    Timeout,
}

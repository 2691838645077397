//! The Reliable Connected transport (IBA chapter 9, RoCEv2 annex A17),
//! structured like Linux rxe: three state machines per QP.
//!
//! - [`requester`]: turns send WQEs into request packets: 24-bit PSNs,
//!   segmentation by path MTU, a window of outstanding PSNs, the
//!   `max_rd_atomic` limit, fences, ACK requests; resends from a PSN when
//!   the completer rewinds it (go-back-N).
//! - [`completer`]: takes the responses (ACKs, NAKs, READ responses,
//!   atomic ACKs), completes WQEs in order (coalesced and implicit ACKs),
//!   runs the retransmit and RNR timers, and fails a WQE when its retries
//!   run out.
//! - [`responder`]: takes the requests: expected PSN and opcode sequence
//!   (as [`sequence`] says), duplicates (as [`replay`] says: both functions
//!   of the QP's responder state and the packet, unit-tested with
//!   hand-built packets),
//!   sequence and RNR NAKs, receive WQEs consumed across a message,
//!   RDMA WRITE, READ responses, atomics with their replay cache, ACK
//!   coalescing, and the NAKs of class C errors.
//!
//! Each machine works on one QP and the rest of the device,
//! `(qp: &mut Qp, dev: &mut Dev, ..)`: it queues what it sends on
//! `dev.port`, writes completions through `dev`, and changes only its own
//! QP, so that the `testbed` (tests only) runs it on one QP and a `Dev`.
//!
//! [`timers`] keeps every deadline of the device on one heap against the
//! device clock. [`ud`] is the Unreliable Datagram transport on the same
//! per-QP state: one packet per message, no ACKs, no retries; [`uc`] the
//! Unreliable Connected responder (its requester is the RC one, sending
//! each packet once and completing a WQE with its last packet).

pub(crate) mod completer;
pub(crate) mod replay;
pub(crate) mod requester;
pub(crate) mod responder;
pub(crate) mod sequence;
#[cfg(test)]
pub(crate) mod testbed;
pub(crate) mod timers;
pub(crate) mod uc;
pub(crate) mod ud;

use std::collections::VecDeque;

use rnic_hw_regs::cqe::Syndrome;
use rnic_verbs::{Mtu, WcStatus};

use crate::wqe::{RecvWqe, SendWqe};

/// Most PSNs a requester has outstanding (sent and not acknowledged), as
/// rxe's `RXE_MAX_UNACKED_PSNS`.
pub(crate) const MAX_UNACKED_PSNS: u32 = 128;

/// The requester asks for an ACK at least once every this many packets of
/// a long message (rxe's `RXE_MAX_PKT_PER_ACK`), so that the window keeps
/// moving.
pub(crate) const MAX_PKTS_PER_ACK: u32 = 64;

/// Packets one QP sends in one turn, so that a busy QP cannot starve the
/// others, commands or a reset.
pub(crate) const QUANTUM: u32 = 16;

/// Bytes in a path MTU code.
pub(crate) fn mtu_bytes(code: u8) -> u32 {
    match Mtu::from_raw(code) {
        Some(m) => 128 << m.raw(),
        // MODIFY_QP validates the code; an unset one is the smallest.
        None => 256,
    }
}

/// The local ACK timeout of a `timeout` code: 4.096 µs × 2^code, none for
/// 0.
pub(crate) fn ack_timeout_ns(code: u8) -> Option<u64> {
    (code != 0).then(|| 4096u64 << code.min(31))
}

/// Packets of a `len`-byte message at `mtu` bytes per packet (one for an
/// empty message).
pub(crate) fn packets(len: u64, mtu: u32) -> u32 {
    len.div_ceil(mtu as u64).max(1) as u32
}

/// The operation of a send WQE, as the transport sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ReqOp {
    Send,
    SendImm,
    /// SEND with invalidate (RC).
    SendInv,
    /// Memory window bind: executed by the requester, no packet.
    BindMw,
    /// Local invalidate: executed by the requester, no packet.
    LocalInv,
    Write,
    WriteImm,
    Read,
    CmpSwap,
    FetchAdd,
}

impl ReqOp {
    /// Carries a remote address and key (RETH/AtomicETH).
    pub(crate) fn has_raddr(self) -> bool {
        !matches!(
            self,
            ReqOp::Send | ReqOp::SendImm | ReqOp::SendInv | ReqOp::BindMw | ReqOp::LocalInv
        )
    }

    /// Is done by the requester itself, sending nothing.
    pub(crate) fn is_local(self) -> bool {
        matches!(self, ReqOp::BindMw | ReqOp::LocalInv)
    }

    /// Is an atomic operation.
    pub(crate) fn is_atomic(self) -> bool {
        matches!(self, ReqOp::CmpSwap | ReqOp::FetchAdd)
    }

    /// Is a READ or an atomic: counted against `max_rd_atomic`, completed
    /// only by its response, and what a fence waits for.
    pub(crate) fn is_rd_atomic(self) -> bool {
        matches!(self, ReqOp::Read | ReqOp::CmpSwap | ReqOp::FetchAdd)
    }
}

/// A send WQE the requester has taken from the send queue and not yet
/// completed.
#[derive(Debug)]
pub(crate) struct Inflight {
    /// A copy of the WQE (the slot stays the driver's until completion,
    /// but the device never reads it again: inline data lives here), in a
    /// buffer from `State::wqe_pool`, so that moving it copies a pointer.
    pub wqe: Box<SendWqe>,
    pub op: ReqOp,
    pub wr_id: u64,
    /// Completion opcode.
    pub wc_opcode: u8,
    pub signaled: bool,
    /// Message length (READ: bytes to read).
    pub len: u64,
    /// First PSN.
    pub first_psn: u32,
    /// PSNs the WQE takes (a READ: one per response packet).
    pub npkts: u32,
    /// Packets sent in the current pass (a READ or atomic: 1 once its
    /// request is out).
    pub sent: u32,
    /// READ response packets received, in order.
    pub recv: u32,
    /// A local error found when the WQE was taken or a packet built; it
    /// completes with it once every earlier WQE has completed.
    pub error: Option<(WcStatus, Syndrome)>,
}

impl Inflight {
    /// Request packets to send for this WQE in a full pass.
    pub(crate) fn to_send(&self) -> u32 {
        if self.op.is_rd_atomic() {
            1
        } else {
            self.npkts
        }
    }

    /// The last PSN of the WQE.
    pub(crate) fn last_psn(&self) -> u32 {
        crate::wire::bth::psn_add(self.first_psn, self.npkts - 1)
    }
}

/// The requester and completer state of a QP.
#[derive(Debug, Default)]
pub(crate) struct ReqState {
    /// PSN of the next WQE taken from the send queue.
    pub next_psn: u32,
    /// The oldest PSN not acknowledged; `next_psn` when nothing is
    /// outstanding.
    pub unacked: u32,
    /// The PSN after the highest one sent so far: packets below it that
    /// are sent again are retransmissions.
    pub frontier: u32,
    /// WQEs taken and not completed, in send queue order.
    pub inflight: VecDeque<Inflight>,
    /// Index in `inflight` of the WQE whose packets go out next.
    pub send_at: usize,
    /// Retries left before `RETRY_EXC_ERR` (reset on progress).
    pub retry_left: u8,
    /// RNR retries left before `RNR_RETRY_EXC_ERR` (reset on progress; 7
    /// retries forever).
    pub rnr_left: u8,
    /// READs and atomics in `inflight`.
    pub rd_atomic: u8,
    /// The PSN of the RNR NAK whose wait (`QpTimers::rnr`) is running, or
    /// last ran.
    pub rnr_psn: Option<u32>,
    /// A rewind is under way: until progress clears it, NAKs and
    /// out-of-order responses start no other (rxe's `started_retry`).
    pub retrying: bool,
    /// Packets sent since the last ACK request.
    pub noack: u32,
}

/// A message the responder is in the middle of.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum InMsg {
    /// A SEND: the receive WQE at the RQ consumer index is taken
    /// (`RespState::rwqe`), `got` bytes placed.
    Send { got: u64 },
    /// An RDMA WRITE to `va` (`dma_len` bytes, checked against `rkey` at
    /// its first packet), `got` bytes written.
    Write {
        va: u64,
        rkey: u32,
        dma_len: u64,
        got: u64,
    },
}

/// READ responses the responder still has to send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ReadJob {
    /// PSN of the next response packet.
    pub psn: u32,
    /// Response packets left, this one included.
    pub left: u32,
    /// Whether the next packet is the first of the response.
    pub first: bool,
    /// Address of the next packet's data.
    pub va: u64,
    pub rkey: u32,
    /// Bytes left to send.
    pub bytes: u64,
    /// The MSN the response's AETHs carry.
    pub msn: u32,
}

/// The responder state of a QP.
#[derive(Debug, Default)]
pub(crate) struct RespState {
    /// Expected PSN.
    pub epsn: u32,
    /// Message sequence number: messages completed (24 bits).
    pub msn: u32,
    /// A sequence-error NAK was sent for the current gap.
    pub nak_sent: bool,
    /// UC: the message in progress lost a packet or was refused; packets
    /// are dropped until the next one starts.
    pub drop_msg: bool,
    pub msg: Option<InMsg>,
    /// The receive WQE a SEND in progress fills (the buffer stays once
    /// allocated).
    pub rwqe: Option<Box<RecvWqe>>,
    /// On an SRQ: the index of the WQE taken from it into `rwqe` and not
    /// yet completed (a UC message that lost a packet leaves it for the
    /// next message, as a receive queue's WQE stays at its index).
    pub srq_held: Option<u32>,
    /// The PSN after the last SEND, WRITE or atomic packet executed: a
    /// duplicate SEND or WRITE is acknowledged at the PSN before it, never
    /// at a READ's (rxe's `ack_psn`), so that the ACK does not complete a
    /// READ whose response the requester still waits for.
    pub ack_psn: u32,
    /// Answers to send, in PSN order.
    pub out: VecDeque<responder::Out>,
    /// The last `max_dest_rd_atomic` READs and atomics executed, for
    /// answering their duplicates (IBA 9.7.5.1.2: the responder's
    /// resources).
    pub resources: VecDeque<RdAtomic>,
}

/// A READ or atomic the responder executed, kept to answer its
/// duplicates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RdAtomic {
    /// A READ of `len` bytes at `va` under `rkey`, answered at PSNs
    /// `first_psn..=last_psn`. A duplicate must ask for a part of it,
    /// from one of those PSNs.
    Read {
        first_psn: u32,
        last_psn: u32,
        va: u64,
        len: u64,
        rkey: u32,
    },
    /// An atomic at `psn` that found `orig`: a duplicate is answered with
    /// it, never executed again.
    Atomic { psn: u32, orig: u64 },
}

/// The deadlines of a QP, against the device clock.
#[derive(Debug, Default, Clone, Copy)]
pub(crate) struct QpTimers {
    /// Retransmit (local ACK timeout).
    pub retx: Option<u64>,
    /// The end of an RNR NAK's wait: the requester sends nothing before.
    pub rnr: Option<u64>,
    /// Ask the neighbour again.
    pub resolve: Option<u64>,
    /// The earliest deadline queued on the device's heap for this QP.
    pub queued: Option<u64>,
}

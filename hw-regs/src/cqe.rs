//! Completion queue entries.
//!
//! A CQ is a ring of `1 << log_size` 64-byte [`Cqe`]s in host memory, zeroed
//! by the driver before CREATE_CQ. The device writes each CQE in two steps:
//! bytes 0..60, then (after a release fence) the [`CqeOwner`] word with the
//! owner bit [`rnic_queues::owner_bit`] of its producer index. The driver owns the
//! entry at its consumer index `ci` once that entry's owner bit equals
//! `owner_bit(ci, log_size)`, and must read the rest of the entry only after
//! an acquire fence.
//!
//! Before writing a CQE the device reads the CQ's doorbell record; if the CQ
//! is full (producer index − consumer index = size) the CQ overruns: the CQE is
//! dropped, the CQ enters the error state, a `CqError` event is reported, and
//! every QP that then tries to complete on that CQ moves to the error state.

use bitfield_struct::bitfield;
use endian_num::{le16, le32, le64};
use static_assertions::{assert_eq_size, const_assert_eq};

use rnic_queues::wire_enum;

/// Size of a CQE.
pub const CQE_SIZE: usize = 64;

/// Completion flags.
#[bitfield(u32, repr = le32, from = le32::from_ne, into = le32::to_ne)]
pub struct CqeFlags {
    /// `imm` holds immediate data (`IBV_WC_WITH_IMM`).
    pub with_imm: bool,
    /// `imm` holds an invalidated rkey (`IBV_WC_WITH_INV`).
    pub with_inv: bool,
    /// A GRH is present in the first 40 bytes of the receive buffer
    /// (`IBV_WC_GRH`; UD only).
    pub grh: bool,
    /// The message had the solicited event bit set.
    pub solicited: bool,
    /// The CQE completes a send queue WQE (otherwise a receive queue WQE).
    pub is_send: bool,
    #[bits(27)]
    __: u32,
}

/// Last word of a CQE, written last.
#[bitfield(u32, repr = le32, from = le32::from_ne, into = le32::to_ne)]
pub struct CqeOwner {
    /// Owner (phase) bit.
    pub owner: bool,
    #[bits(31)]
    __: u32,
}

/// A completion queue entry.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Cqe {
    /// The work request ID from the WQE.
    pub wr_id: le64,
    /// Bytes transferred: received message length (receive), bytes read
    /// (RDMA READ), 8 (atomics), 0 otherwise.
    pub byte_len: le32,
    /// Immediate data, or invalidated rkey, in network byte order.
    pub imm: [u8; 4],
    /// Local QP number (low 24 bits).
    pub qpn: le32,
    /// Source QP number (low 24 bits): the requester's QP for a receive
    /// completion, 0 for a send completion.
    pub src_qp: le32,
    /// The queue's consumer index just past the completed WQE: for a send
    /// CQE, in BBs; for a receive CQE, in WQEs. All WQEs of that queue before
    /// it are complete.
    pub wqe_counter: le16,
    /// `rnic_verbs::WcOpcode` value.
    pub opcode: u8,
    /// `rnic_verbs::WcStatus` value.
    pub status: u8,
    /// Device-specific detail for an error status: a [`Syndrome`] value.
    pub vendor_err: le32,
    /// Completion flags.
    pub flags: CqeFlags,
    /// P_Key index (UD).
    pub pkey_index: le16,
    /// Source LID (0 on RoCE).
    pub slid: le16,
    /// On a UD receive, what the RoCEv2 annex (A17.4.5.1) asks a UD CQE
    /// to tell: the packet's network header type, in the encoding of
    /// ConnectX's CQE that programs (UCX) read from `ibv_wc.sl` ([`SL_ROCE_V2_IPV4`],
    /// [`SL_ROCE_V2_IPV6`]); an untagged RoCE wire carries no service level.
    /// 0 on other CQEs.
    pub sl: u8,
    /// Reserved, zero.
    pub reserved0: [u8; 3],
    /// Reserved, zero.
    pub reserved: [le32; 4],
    /// Owner word, written last.
    pub owner: CqeOwner,
}

wire_enum! {
    /// Values of [`Cqe::vendor_err`]: which check produced an error status.
    Syndrome: u32 {
        /// No error.
        None = 0,
        /// The WQE's opcode is unknown or not valid for the QP type.
        BadOpcode = 1,
        /// The WQE is malformed (`ds` or `wqe_index` wrong, too many SGEs).
        BadWqe = 2,
        /// An lkey names no MR.
        BadLkey = 3,
        /// The MR's PD differs from the QP's.
        PdMismatch = 4,
        /// The address range lies outside the MR.
        OutOfBounds = 5,
        /// The MR lacks the access right the operation needs.
        AccessDenied = 6,
        /// An rkey names no MR (remote check).
        BadRkey = 7,
        /// The receive buffer is too small for the incoming message.
        RecvTooSmall = 8,
        /// The destination QP does not exist or is not in a receiving state
        /// (device 1.0; over a wire the requester sees a timeout,
        /// [`Syndrome::RetryExceeded`]).
        BadDestQp = 9,
        /// The destination QP does not allow the remote operation.
        QpAccessDenied = 10,
        /// An atomic's remote address is not 8-byte aligned.
        Misaligned = 11,
        /// DMA to or from host memory failed IOMMU translation.
        DmaFault = 12,
        /// The message exceeds the maximum message size.
        TooLong = 13,
        /// The QP entered the error state; the WQE was flushed.
        Flushed = 14,
        /// The peer ran out of receive WQEs and the RNR retry count ran out.
        RnrExceeded = 15,
        /// The peer's receive queue reported an error.
        RemoteError = 16,
        /// The CQ overran or its buffer could not be written.
        CqError = 17,
        /// An RDMA READ or atomic reached a responder whose
        /// `max_dest_rd_atomic` is 0.
        NoRdAtomic = 18,
        /// The responder NAKed the request as invalid (IBA NAK code 1).
        RemoteInvalidRequest = 19,
        /// The responder NAKed a remote access error (NAK code 2).
        RemoteAccess = 20,
        /// No response within the local ACK timeout, `retry_cnt` times.
        RetryExceeded = 21,
        /// A response the outstanding request cannot have (its opcode or
        /// length).
        BadResponse = 22,
        /// The responder NAKed an invalid RD request (NAK code 4).
        RemoteInvalidRd = 23,
        /// The device entered the fatal state with the WQE outstanding
        /// (`FATAL_ERR`).
        DeviceFatal = 24,
        /// The message the receive WQE was receiving was cut off when its
        /// QP left service (`REM_ABORT_ERR`).
        Aborted = 25,
    }
}

/// Offset of [`Cqe::owner`].
pub const CQE_OWNER_OFFSET: usize = 60;

assert_eq_size!(Cqe, [u8; CQE_SIZE]);
assert_eq_size!(CqeFlags, u32);
assert_eq_size!(CqeOwner, u32);
const_assert_eq!(core::mem::offset_of!(Cqe, byte_len), 8);
const_assert_eq!(core::mem::offset_of!(Cqe, imm), 12);
const_assert_eq!(core::mem::offset_of!(Cqe, qpn), 16);
const_assert_eq!(core::mem::offset_of!(Cqe, src_qp), 20);
const_assert_eq!(core::mem::offset_of!(Cqe, wqe_counter), 24);
const_assert_eq!(core::mem::offset_of!(Cqe, opcode), 26);
const_assert_eq!(core::mem::offset_of!(Cqe, status), 27);
const_assert_eq!(core::mem::offset_of!(Cqe, vendor_err), 28);
const_assert_eq!(core::mem::offset_of!(Cqe, flags), 32);
const_assert_eq!(core::mem::offset_of!(Cqe, pkey_index), 36);
const_assert_eq!(core::mem::offset_of!(Cqe, slid), 38);
const_assert_eq!(core::mem::offset_of!(Cqe, sl), 40);

/// [`Cqe::sl`] of a UD receive of a RoCEv2 packet over IPv4: bit 3, a UDP
/// header; bits 2:0, L3 header type 2 (IPv4).
pub const SL_ROCE_V2_IPV4: u8 = 0x8 | 0x2;
/// [`Cqe::sl`] of a UD receive of a RoCEv2 packet over IPv6: bit 3, a UDP
/// header; bits 2:0, L3 header type 1 (IPv6).
pub const SL_ROCE_V2_IPV6: u8 = 0x8 | 0x1;
const_assert_eq!(core::mem::offset_of!(Cqe, owner), CQE_OWNER_OFFSET);

// Plain data for DMA memory: every field listed, so padding fails the build.
rnic_queues::pod_bitfield!(CqeFlags: le32, CqeOwner: le32);
rnic_queues::pod_struct! {
    Cqe {
        wr_id, byte_len, imm, qpn, src_qp, wqe_counter, opcode, status, vendor_err, flags,
        pkey_index, slid, sl, reserved0, reserved, owner,
    }
}

// SAFETY: Cqe's last word, at CQE_OWNER_OFFSET (asserted above), is the
// CqeOwner word whose bit 0 is the owner bit.
unsafe impl rnic_queues::OwnedEntry for Cqe {
    const OWNER_OFFSET: usize = CQE_OWNER_OFFSET;
}

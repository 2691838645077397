//! Work queue entries (`vmw_pvrdma-abi.h`).
//!
//! A send WQE is an 80-byte header, [`SqWqeCtrl`] followed at
//! [`SQ_WQE_WR_OFFSET`] by the opcode's part of its `wr` union
//! ([`RdmaWr`], [`AtomicWr`], [`FastRegWr`] or [`UdWr`]), then
//! `num_sge` [`Sge`]s; a receive WQE is a [`RqWqeHdr`] and its SGEs. The
//! driver sizes each queue's stride as a power of two that holds the header
//! and its queue's largest SGE count.

use endian_num::{le32, le64};
use rnic_queues::wire_enum;
use static_assertions::{assert_eq_size, const_assert_eq};

/// Bytes of a send WQE's header, its `wr` union included
/// (`sizeof(struct pvrdma_sq_wqe_hdr)`); its SGEs follow.
pub const SQ_WQE_HDR_SIZE: usize = 80;
/// Offset of the `wr` union in a send WQE.
pub const SQ_WQE_WR_OFFSET: usize = 32;

wire_enum! {
    /// Send opcodes (`enum pvrdma_wr_opcode`).
    WrOpcode: u32 {
        /// RDMA WRITE.
        RdmaWrite = 0,
        /// RDMA WRITE with immediate.
        RdmaWriteWithImm = 1,
        /// SEND.
        Send = 2,
        /// SEND with immediate.
        SendWithImm = 3,
        /// RDMA READ.
        RdmaRead = 4,
        /// Atomic compare and swap.
        AtomicCmpAndSwp = 5,
        /// Atomic fetch and add.
        AtomicFetchAndAdd = 6,
        /// Large send offload.
        Lso = 7,
        /// SEND with invalidate.
        SendWithInv = 8,
        /// RDMA READ with invalidate.
        RdmaReadWithInv = 9,
        /// Local invalidate.
        LocalInv = 10,
        /// Fast-register an MR.
        FastRegMr = 11,
        /// Masked compare and swap.
        MaskedAtomicCmpAndSwp = 12,
        /// Masked fetch and add.
        MaskedAtomicFetchAndAdd = 13,
        /// Bind a memory window.
        BindMw = 14,
        /// Register a signature MR.
        RegSigMr = 15,
    }
}

/// `send_flags` bits (`enum pvrdma_send_flags`: libibverbs' values).
pub mod send_flags {
    /// Wait for earlier READs and atomics first.
    pub const FENCE: u32 = 1 << 0;
    /// Complete with a CQE.
    pub const SIGNALED: u32 = 1 << 1;
    /// Solicited event.
    pub const SOLICITED: u32 = 1 << 2;
    /// The payload is in the WQE.
    pub const INLINE: u32 = 1 << 3;
    /// IP checksum offload.
    pub const IP_CSUM: u32 = 1 << 4;
}

/// A scatter/gather element (`struct pvrdma_sge`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Sge {
    /// Virtual address within the MR.
    pub addr: le64,
    /// Bytes.
    pub length: le32,
    /// The MR's local key.
    pub lkey: le32,
}

/// A receive WQE's header (`struct pvrdma_rq_wqe_hdr`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct RqWqeHdr {
    /// The work request ID.
    pub wr_id: le64,
    /// SGEs that follow.
    pub num_sge: le32,
    /// Reserved.
    pub total_len: le32,
}

/// The first 32 bytes of a send WQE's header (`struct
/// pvrdma_sq_wqe_hdr` up to its `wr` union).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct SqWqeCtrl {
    /// The work request ID.
    pub wr_id: le64,
    /// SGEs that follow the header.
    pub num_sge: le32,
    /// Reserved.
    pub total_len: le32,
    /// A [`WrOpcode`] value.
    pub opcode: le32,
    /// [`send_flags`] bits.
    pub send_flags: le32,
    /// Immediate data (network order, as libibverbs gives it), or the
    /// rkey to invalidate.
    pub ex: le32,
    /// Reserved.
    pub reserved: le32,
}

/// `wr.rdma`: RDMA WRITE and READ.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct RdmaWr {
    /// Remote virtual address.
    pub remote_addr: le64,
    /// Remote key.
    pub rkey: le32,
    /// Reserved.
    pub reserved: [u8; 4],
}

/// `wr.atomic`: compare and swap, fetch and add.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct AtomicWr {
    /// Remote virtual address (8-byte aligned).
    pub remote_addr: le64,
    /// The value to compare with, or to add.
    pub compare_add: le64,
    /// The value to swap in.
    pub swap: le64,
    /// Remote key.
    pub rkey: le32,
    /// Reserved.
    pub reserved: le32,
}

/// `wr.fast_reg`: fast-register an MR.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct FastRegWr {
    /// The region's first address.
    pub iova_start: le64,
    /// DMA address of the page list's page directory.
    pub pl_pdir_dma: le64,
    /// log2 of the page size.
    pub page_shift: le32,
    /// Pages in the list.
    pub page_list_len: le32,
    /// Bytes.
    pub length: le32,
    /// Access flags.
    pub access_flags: le32,
    /// The key to register under.
    pub rkey: le32,
    /// Reserved.
    pub reserved: le32,
}

/// A UD address vector (`struct pvrdma_av`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Av {
    /// Port number (bits 31:24) and PD handle (23:0).
    pub port_pd: le32,
    /// Service level (31:28), traffic class (27:20), flow label (19:0).
    pub sl_tclass_flowlabel: le32,
    /// Destination GID.
    pub dgid: [u8; 16],
    /// Source path bits.
    pub src_path_bits: u8,
    /// Index of the source GID.
    pub gid_index: u8,
    /// Static rate.
    pub stat_rate: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Destination MAC address.
    pub dmac: [u8; 6],
    /// Reserved.
    pub reserved: [u8; 6],
}

/// `wr.ud`: a UD send's destination.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct UdWr {
    /// Destination QP number.
    pub remote_qpn: le32,
    /// Destination Q_Key.
    pub remote_qkey: le32,
    /// The address.
    pub av: Av,
}

assert_eq_size!(Sge, [u8; 16]);
assert_eq_size!(RqWqeHdr, [u8; 16]);
assert_eq_size!(SqWqeCtrl, [u8; SQ_WQE_WR_OFFSET]);
assert_eq_size!(RdmaWr, [u8; 16]);
assert_eq_size!(AtomicWr, [u8; 32]);
assert_eq_size!(FastRegWr, [u8; 40]);
assert_eq_size!(Av, [u8; 40]);
assert_eq_size!(UdWr, [u8; SQ_WQE_HDR_SIZE - SQ_WQE_WR_OFFSET]);
const_assert_eq!(core::mem::offset_of!(SqWqeCtrl, opcode), 16);
const_assert_eq!(core::mem::offset_of!(SqWqeCtrl, ex), 24);
const_assert_eq!(core::mem::offset_of!(Av, dmac), 28);
const_assert_eq!(core::mem::offset_of!(UdWr, av), 8);

// Plain data for DMA memory: every field listed, so padding fails the build.
rnic_queues::pod_struct! {
    Sge { addr, length, lkey }
    RqWqeHdr { wr_id, num_sge, total_len }
    SqWqeCtrl { wr_id, num_sge, total_len, opcode, send_flags, ex, reserved }
    RdmaWr { remote_addr, rkey, reserved }
    AtomicWr { remote_addr, compare_add, swap, rkey, reserved }
    FastRegWr {
        iova_start, pl_pdir_dma, page_shift, page_list_len, length, access_flags, rkey, reserved,
    }
    Av {
        port_pd, sl_tclass_flowlabel, dgid, src_path_bits, gid_index, stat_rate, hop_limit, dmac,
        reserved,
    }
    UdWr { remote_qpn, remote_qkey, av }
}

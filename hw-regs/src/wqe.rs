//! Work queue entries.
//!
//! A send WQE is one to [`MAX_SEND_WQE_BBS`] 64-byte basic blocks (BBs) of the
//! send queue, made of 16-byte segments in this order:
//!
//! 1. a [`CtrlSeg`];
//! 2. for RDMA WRITE, RDMA READ and atomics, a [`RaddrSeg`]; for UD sends
//!    a [`DatagramSeg`] instead;
//! 3. for atomics, an [`AtomicSeg`];
//! 4. either `n` [`DataSeg`]s (a gather list; for RDMA READ and atomics, the
//!    scatter list the response lands in), or one inline block when
//!    [`CtrlWord::inline`] is set: an [`InlineHdr`] followed directly by the
//!    payload bytes, padded to a 16-byte boundary.
//!
//! [`CtrlWord::ds`] counts the WQE's 16-byte segments including the control
//! segment; the WQE occupies `ceil(ds / 4)` BBs and the next WQE starts at the
//! following BB. A WQE may wrap from the last BB of the ring to the first.
//!
//! A receive WQE is one slot of `1 << log_rq_stride` bytes: a
//! [`RecvWqeHdr`] followed by `sge_count` [`DataSeg`]s.

use bitfield_struct::bitfield;
use endian_num::{le32, le64};
use static_assertions::{assert_eq_size, const_assert_eq};

/// Size of a send queue basic block.
pub const SEND_WQE_BB: usize = 64;
/// Size of one WQE segment.
pub const SEG_SIZE: usize = 16;
/// Largest send WQE, in basic blocks.
pub const MAX_SEND_WQE_BBS: usize = 8;
/// Largest value of [`CtrlWord::ds`].
pub const MAX_SEND_WQE_DS: usize = MAX_SEND_WQE_BBS * SEND_WQE_BB / SEG_SIZE;
/// Smallest receive WQE stride (log2 bytes): a header and one SGE.
pub const MIN_LOG_RQ_STRIDE: u8 = 5;
/// Largest receive WQE stride (log2 bytes).
pub const MAX_LOG_RQ_STRIDE: u8 = 9;
/// Bit set in [`InlineHdr::byte_count`] to mark an inline block.
pub const INLINE_MARK: u32 = 1 << 31;

/// First word of the control segment.
#[bitfield(u32, repr = le32, from = le32::from_ne, into = le32::to_ne)]
pub struct CtrlWord {
    /// [`crate::verbs::WrOpcode`] value.
    #[bits(8)]
    pub opcode: u8,
    /// Generate a CQE on successful completion (`IBV_SEND_SIGNALED`). Errors
    /// always generate one.
    pub signaled: bool,
    /// Set the solicited event bit in the message (`IBV_SEND_SOLICITED`).
    pub solicited: bool,
    /// Wait for prior RDMA READ and atomic WQEs to complete before starting
    /// (`IBV_SEND_FENCE`).
    pub fence: bool,
    /// The payload is inline in the WQE (`IBV_SEND_INLINE`).
    pub inline: bool,
    #[bits(4)]
    __: u8,
    /// Number of 16-byte segments in the WQE, including this one.
    #[bits(8)]
    pub ds: u8,
    /// Low 8 bits of the WQE's producer index (its first BB), which the device
    /// checks to catch a stale or torn WQE.
    #[bits(8)]
    pub wqe_index: u8,
}

/// Control segment: the first 16 bytes of every send WQE.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CtrlSeg {
    /// Opcode, flags and size.
    pub word: CtrlWord,
    /// Immediate data in network byte order (`*_WITH_IMM`), or the rkey to
    /// invalidate in network byte order (`SEND_WITH_INV`, `LOCAL_INV`).
    pub imm: [u8; 4],
    /// The work request ID, echoed in the CQE.
    pub wr_id: le64,
}

/// Remote address segment.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct RaddrSeg {
    /// Remote virtual address.
    pub raddr: le64,
    /// Remote key.
    pub rkey: le32,
    /// Reserved, zero.
    pub reserved: le32,
}

/// Memory window bind segment (`BIND_MW`): two 16-byte segments after the
/// control segment.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct BindSeg {
    /// The window's current rkey.
    pub mw_rkey: le32,
    /// Its rkey once bound: the same index, the key byte the consumer
    /// chose.
    pub new_rkey: le32,
    /// The MR the window is bound to.
    pub mr_lkey: le32,
    /// Remote access the window grants ([`crate::verbs::access`]
    /// `REMOTE_*`).
    pub access: le32,
    /// Start virtual address of the window.
    pub va: le64,
    /// Length in bytes (0 unbinds a type 1 window).
    pub length: le64,
}

/// Atomic segment.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct AtomicSeg {
    /// Swap value (compare and swap) or addend (fetch and add).
    pub swap_add: le64,
    /// Compare value (compare and swap); zero for fetch and add.
    pub compare: le64,
}

/// Data segment: one scatter/gather entry.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DataSeg {
    /// Length in bytes; 0 means 2^31 bytes (the largest message), as on
    /// mlx5, so drivers leave zero-length SGEs out of a WQE.
    pub byte_count: le32,
    /// Local key of the MR holding the buffer.
    pub lkey: le32,
    /// Virtual address of the buffer in the MR's address space.
    pub addr: le64,
}

/// Header of an inline block: 4 bytes, followed by the payload.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct InlineHdr {
    /// [`INLINE_MARK`] | payload length in bytes.
    pub byte_count: le32,
}

/// Datagram segment: the address vector of a UD send WQE, following the
/// control segment (device 1.2).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct DatagramSeg {
    /// Destination QP number (low 24 bits).
    pub dest_qpn: le32,
    /// Q_Key of the destination QP, as the work request gives it: one with
    /// the high bit set stands for the sending QP's own Q_Key (IBA 10.2.5).
    pub qkey: le32,
    /// Destination GID, network byte order.
    pub dgid: [u8; 16],
    /// Destination MAC, network byte order.
    pub dmac: [u8; 6],
    /// Source GID table index.
    pub sgid_index: u8,
    /// Hop limit (IP TTL).
    pub hop_limit: u8,
    /// Traffic class (IP DSCP/ECN).
    pub traffic_class: u8,
    /// Service level.
    pub sl: u8,
    /// Reserved, zero.
    pub reserved0: [u8; 2],
    /// Flow label (low 20 bits).
    pub flow_label: le32,
    /// Reserved, zero.
    pub reserved1: [u8; 8],
}

/// Header of a receive WQE.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct RecvWqeHdr {
    /// The work request ID, echoed in the CQE.
    pub wr_id: le64,
    /// Number of [`DataSeg`]s that follow.
    pub sge_count: le32,
    /// In an SRQ, the slot whose WQE the device takes after this one (low
    /// 16 bits): the SRQ's WQEs are a list through its ring's slots, so
    /// that software reuses a slot as soon as its WQE completes, in any
    /// order. Zero in a receive queue.
    pub next: le32,
}

/// Number of BBs a send WQE of `ds` segments occupies.
pub const fn wqe_bbs(ds: usize) -> usize {
    ds.div_ceil(SEND_WQE_BB / SEG_SIZE)
}

assert_eq_size!(CtrlWord, u32);
assert_eq_size!(CtrlSeg, [u8; SEG_SIZE]);
assert_eq_size!(RaddrSeg, [u8; SEG_SIZE]);
assert_eq_size!(AtomicSeg, [u8; SEG_SIZE]);
assert_eq_size!(DataSeg, [u8; SEG_SIZE]);
assert_eq_size!(RecvWqeHdr, [u8; SEG_SIZE]);
assert_eq_size!(InlineHdr, u32);
assert_eq_size!(DatagramSeg, [u8; 3 * SEG_SIZE]);
assert_eq_size!(BindSeg, [u8; 2 * SEG_SIZE]);
const_assert_eq!(core::mem::offset_of!(BindSeg, va), 16);
const_assert_eq!(core::mem::offset_of!(DatagramSeg, dgid), 8);
const_assert_eq!(core::mem::offset_of!(DatagramSeg, dmac), 24);
const_assert_eq!(core::mem::offset_of!(DatagramSeg, flow_label), 36);
const_assert_eq!(core::mem::offset_of!(CtrlSeg, imm), 4);
const_assert_eq!(core::mem::offset_of!(CtrlSeg, wr_id), 8);
const_assert_eq!(core::mem::offset_of!(RaddrSeg, rkey), 8);
const_assert_eq!(core::mem::offset_of!(AtomicSeg, compare), 8);
const_assert_eq!(core::mem::offset_of!(DataSeg, lkey), 4);
const_assert_eq!(core::mem::offset_of!(DataSeg, addr), 8);
const_assert_eq!(core::mem::offset_of!(RecvWqeHdr, sge_count), 8);
const_assert_eq!(MAX_SEND_WQE_DS, 32);

// Plain data for DMA memory: every field listed, so padding fails the build.
rnic_queues::pod_bitfield!(CtrlWord: le32);
rnic_queues::pod_struct! {
    CtrlSeg { word, imm, wr_id }
    RaddrSeg { raddr, rkey, reserved }
    AtomicSeg { swap_add, compare }
    DataSeg { byte_count, lkey, addr }
    BindSeg { mw_rkey, new_rkey, mr_lkey, access, va, length }
    InlineHdr { byte_count }
    RecvWqeHdr { wr_id, sge_count, next }
    DatagramSeg {
        dest_qpn, qkey, dgid, dmac, sgid_index, hop_limit, traffic_class, sl, reserved0,
        flow_label, reserved1,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ctrl_word_bytes() {
        let w = CtrlWord::new()
            .with_opcode(2) // IBV_WR_SEND
            .with_signaled(true)
            .with_inline(true)
            .with_ds(3)
            .with_wqe_index(0x7f);
        assert_eq!(w.into_bits().to_le_bytes(), [0x02, 0x09, 0x03, 0x7f]);
    }

    #[test]
    fn bb_rounding() {
        assert_eq!(wqe_bbs(1), 1);
        assert_eq!(wqe_bbs(4), 1);
        assert_eq!(wqe_bbs(5), 2);
        assert_eq!(wqe_bbs(32), 8);
    }
}

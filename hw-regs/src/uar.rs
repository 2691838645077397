//! BAR 2: doorbell pages ("UARs"), and the doorbell records the device reads
//! from host memory.
//!
//! BAR 2 holds `CAP_UAR_PAGES` pages of 4 KiB. Each queue is bound to one page
//! when it is created, so independent software contexts never share a page.
//! Within a page the doorbells are 64-bit registers written with one aligned
//! 64-bit store (reads return 0).
//!
//! Ringing a send queue is, in this order: write the WQEs; release fence;
//! write the new producer index into the QP's doorbell record; write
//! [`SqDoorbell`] to the page. The device reads producer indices from the
//! doorbell record (the MMIO write only names the queue), so several posts may
//! share one doorbell write.

use bitfield_struct::bitfield;
use endian_num::le32;
use static_assertions::{assert_eq_size, const_assert_eq};

use crate::PAGE_SIZE;

/// Size of one doorbell page.
pub const UAR_PAGE_SIZE: usize = PAGE_SIZE;
/// Offset of [`SqDoorbell`] within a doorbell page.
pub const SQ_DB: usize = 0x000;
/// Offset of [`RqDoorbell`] within a doorbell page.
pub const RQ_DB: usize = 0x008;
/// Offset of [`CqDoorbell`] within a doorbell page.
pub const CQ_DB: usize = 0x010;
/// Offset of the SRQ doorbell within a doorbell page: a [`WqDoorbell`] whose
/// `qpn` field holds the SRQ number (device 1.1 has no SRQs and ignores it).
pub const SRQ_DB: usize = 0x018;
/// Offset of [`EqArmDoorbell`] within a doorbell page (completion EQs made
/// by CREATE_EQ; device 1.1 has none and ignores it).
pub const EQ_DB: usize = 0x020;
/// Offset of the BlueFlame register within a doorbell page (from version
/// 1.4, when `CAP_DEV.bf`): one 64-byte write of an SQ doorbell and the
/// send WQE it announces, [`BF_SIZE`] bytes.
pub const BF: usize = 0x100;
/// Bytes of one BlueFlame write: the [`SqDoorbell`] (8), then the first
/// [`BF_WQE_BYTES`] of the WQE.
pub const BF_SIZE: usize = 64;
/// WQE bytes a BlueFlame write carries: WQEs of at most [`BF_MAX_DS`]
/// segments go whole.
pub const BF_WQE_BYTES: usize = 48;
/// Segments of a WQE a BlueFlame write carries whole.
pub const BF_MAX_DS: usize = BF_WQE_BYTES / 16;

/// Work queue doorbell, the layout of both [`SQ_DB`] and [`RQ_DB`]: the
/// QP's queue has new WQEs up to the producer index in its doorbell record.
#[bitfield(u64)]
pub struct WqDoorbell {
    /// QP number.
    #[bits(24)]
    pub qpn: u32,
    #[bits(8)]
    __: u8,
    /// Producer index the driver just published (low 16 bits), for tracing;
    /// the doorbell record is authoritative.
    #[bits(16)]
    pub pi: u16,
    #[bits(16)]
    __: u16,
}

/// Send queue doorbell ([`SQ_DB`]): the device runs the send queue.
pub type SqDoorbell = WqDoorbell;

/// Receive queue doorbell ([`RQ_DB`]). The device reads receive producer
/// indices from the doorbell record whenever it needs a receive WQE; this
/// write makes it read the record now (and flushes a QP in the error
/// state).
pub type RqDoorbell = WqDoorbell;

/// Completion queue doorbell: request a completion event.
#[bitfield(u64)]
pub struct CqDoorbell {
    /// CQ number.
    #[bits(24)]
    pub cqn: u32,
    /// [`CqArmCmd`] value.
    #[bits(2)]
    pub cmd: u8,
    /// Arm sequence number (2 bits), reserved for drivers that arm from
    /// several threads; the device does not interpret it in this version.
    #[bits(2)]
    pub sn: u8,
    #[bits(4)]
    __: u8,
    /// Consumer index at the time of arming: an event fires for the first
    /// CQE written at or past this index.
    pub ci: u32,
}

/// Completion EQ doorbell: consumer index update and re-arm, as `EQ_DB` of
/// BAR 0 does for EQ 0.
#[bitfield(u64)]
pub struct EqArmDoorbell {
    /// EQ number.
    #[bits(24)]
    pub eqn: u32,
    /// Arm: raise the EQ's vector for the next EQE written past `ci`.
    pub arm: bool,
    #[bits(7)]
    __: u8,
    /// Driver's free-running consumer index (low 24 bits significant).
    pub ci: u32,
}

/// Commands in [`CqDoorbell::cmd`].
#[repr(u8)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CqArmCmd {
    /// Event on the next CQE of any kind.
    Next = 0,
    /// Event on the next solicited or error CQE.
    Solicited = 1,
}

/// A QP's doorbell record in host memory (8 bytes, 8-byte aligned), written
/// by the driver and read by the device.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct QpDbRec {
    /// Receive queue producer index, free-running, in WQEs (low 16 bits
    /// significant).
    pub rq_pi: le32,
    /// Send queue producer index, free-running, in 64-byte basic blocks (low
    /// 16 bits significant).
    pub sq_pi: le32,
}

/// A CQ's doorbell record in host memory (8 bytes, 8-byte aligned), written
/// by the driver and read by the device.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CqDbRec {
    /// Consumer index: free-running count of CQEs the driver has consumed
    /// (low 24 bits significant). The device uses it to detect overrun.
    pub ci: le32,
    /// Reserved, zero.
    pub reserved: le32,
}

/// Offset of [`QpDbRec::rq_pi`].
pub const QP_DBREC_RQ: usize = 0;
/// Offset of [`QpDbRec::sq_pi`].
pub const QP_DBREC_SQ: usize = 4;

const_assert_eq!(core::mem::offset_of!(QpDbRec, rq_pi), QP_DBREC_RQ);
const_assert_eq!(core::mem::offset_of!(QpDbRec, sq_pi), QP_DBREC_SQ);
const_assert_eq!(core::mem::offset_of!(CqDbRec, ci), 0);
assert_eq_size!(QpDbRec, u64);
assert_eq_size!(CqDbRec, u64);
assert_eq_size!(WqDoorbell, u64);
assert_eq_size!(CqDoorbell, u64);
assert_eq_size!(EqArmDoorbell, u64);
static_assertions::const_assert!(EQ_DB + 8 <= BF);
static_assertions::const_assert!(BF % BF_SIZE == 0 && BF + BF_SIZE <= UAR_PAGE_SIZE);
static_assertions::const_assert!(8 + BF_WQE_BYTES <= BF_SIZE);
static_assertions::const_assert_eq!(BF_MAX_DS, 3);

// Plain data for DMA memory: every field listed, so padding fails the build.
rnic_queues::pod_struct! {
    QpDbRec { rq_pi, sq_pi }
    CqDbRec { ci, reserved }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn doorbell_bit_positions() {
        let d = SqDoorbell::new().with_qpn(0x12_3456).with_pi(0xabcd);
        assert_eq!(d.into_bits(), 0x0000_abcd_0012_3456);
        let c = CqDoorbell::new()
            .with_cqn(5)
            .with_cmd(CqArmCmd::Solicited as u8)
            .with_sn(2)
            .with_ci(9);
        assert_eq!(c.into_bits(), (9u64 << 32) | (2 << 26) | (1 << 24) | 5);
    }
}

//! BAR 0: identification, capabilities, control and status, command queue,
//! asynchronous event queue and interrupt registers.
//!
//! All registers are 32 bits wide, little-endian, and must be accessed with
//! naturally aligned 32-bit reads and writes. 64-bit registers (the IOVAs) are
//! written as two 32-bit halves, low half first; the device latches the value
//! when the high half is written.

use bitfield_struct::bitfield;
use endian_num::le32;
use static_assertions::{assert_eq_size, const_assert_eq};

use rnic_queues::wire_enum;

/// `ID` (RO): reads [`MAGIC`].
pub const ID: usize = 0x000;
/// `VERSION` (RO): a [`Version`] word.
pub const VERSION: usize = 0x004;
/// `CAP_DEV` (RO): a [`DevCaps`] word.
pub const CAP_DEV: usize = 0x008;
/// `CAP_MAX_QP` (RO): number of QP numbers, including the two reserved ones.
pub const CAP_MAX_QP: usize = 0x010;
/// `CAP_MAX_CQ` (RO): number of completion queues.
pub const CAP_MAX_CQ: usize = 0x014;
/// `CAP_MAX_MR` (RO): number of memory regions.
pub const CAP_MAX_MR: usize = 0x018;
/// `CAP_MAX_PD` (RO): number of protection domains.
pub const CAP_MAX_PD: usize = 0x01C;
/// `CAP_QUEUE` (RO): a [`QueueCaps`] word.
pub const CAP_QUEUE: usize = 0x020;
/// `CAP_UAR_PAGES` (RO): number of 4 KiB doorbell pages in BAR 2.
pub const CAP_UAR_PAGES: usize = 0x024;
/// `CAP_MAX_SRQ` (RO): number of shared receive queues (0 without
/// `CAP_DEV.srq`).
pub const CAP_MAX_SRQ: usize = 0x028;
/// `CAP_MAX_EQ` (RO): number of completion event queues `CREATE_EQ` can
/// create, besides EQ 0.
pub const CAP_MAX_EQ: usize = 0x02C;
/// `CAP_MSIX` (RO): number of MSI-X vectors (1..=2048).
pub const CAP_MSIX: usize = 0x030;
/// `CTRL` (RW): a [`Ctrl`] word.
pub const CTRL: usize = 0x040;
/// `STATUS` (RO): a [`Status`] word.
pub const STATUS: usize = 0x044;
/// `FATAL_SYNDROME` (RO): a [`FatalSyndrome`] code, valid while
/// `STATUS.fatal` is set.
pub const FATAL_SYNDROME: usize = 0x048;
/// `CMDQ_BASE_LO` (RW): bits 31:0 of the command queue IOVA (4 KiB aligned).
pub const CMDQ_BASE_LO: usize = 0x050;
/// `CMDQ_BASE_HI` (RW): bits 63:32 of the command queue IOVA.
pub const CMDQ_BASE_HI: usize = 0x054;
/// `CMDQ_CTRL` (RW): a [`CmdqCtrl`] word.
pub const CMDQ_CTRL: usize = 0x058;
/// `CMDQ_DB` (WO): command queue doorbell; the value is the driver's
/// free-running producer index (low 16 bits significant).
pub const CMDQ_DB: usize = 0x05C;
/// `EQ_BASE_LO` (RW): bits 31:0 of the asynchronous event queue IOVA.
pub const EQ_BASE_LO: usize = 0x060;
/// `EQ_BASE_HI` (RW): bits 63:32 of the asynchronous event queue IOVA.
pub const EQ_BASE_HI: usize = 0x064;
/// `EQ_CTRL` (RW): an [`EqCtrl`] word.
pub const EQ_CTRL: usize = 0x068;
/// `EQ_DB` (WO): an [`EqDoorbell`] word: consumer index update and re-arm.
pub const EQ_DB: usize = 0x06C;
/// `INTR_CAUSE` (RW1C): an [`IntrCause`] word; writing 1 clears a bit.
pub const INTR_CAUSE: usize = 0x070;
/// `INTR_MASK` (RW): an [`IntrCause`] word; a set bit masks that cause.
pub const INTR_MASK: usize = 0x074;

/// Value of the `ID` register: the bytes `"RNIC"` read as a little-endian
/// 32-bit word.
pub const MAGIC: u32 = u32::from_le_bytes(*b"RNIC");

/// The register file as a struct, so offsets are checked against the
/// constants above.
#[repr(C)]
#[allow(missing_docs)]
pub struct Bar0 {
    pub id: le32,
    pub version: le32,
    pub cap_dev: le32,
    _r0: le32,
    pub cap_max_qp: le32,
    pub cap_max_cq: le32,
    pub cap_max_mr: le32,
    pub cap_max_pd: le32,
    pub cap_queue: le32,
    pub cap_uar_pages: le32,
    pub cap_max_srq: le32,
    pub cap_max_eq: le32,
    pub cap_msix: le32,
    _r1: [le32; 3],
    pub ctrl: le32,
    pub status: le32,
    pub fatal_syndrome: le32,
    _r2: le32,
    pub cmdq_base_lo: le32,
    pub cmdq_base_hi: le32,
    pub cmdq_ctrl: le32,
    pub cmdq_db: le32,
    pub eq_base_lo: le32,
    pub eq_base_hi: le32,
    pub eq_ctrl: le32,
    pub eq_db: le32,
    pub intr_cause: le32,
    pub intr_mask: le32,
}

const_assert_eq!(core::mem::offset_of!(Bar0, version), VERSION);
const_assert_eq!(core::mem::offset_of!(Bar0, cap_dev), CAP_DEV);
const_assert_eq!(core::mem::offset_of!(Bar0, cap_max_qp), CAP_MAX_QP);
const_assert_eq!(core::mem::offset_of!(Bar0, cap_max_cq), CAP_MAX_CQ);
const_assert_eq!(core::mem::offset_of!(Bar0, cap_max_mr), CAP_MAX_MR);
const_assert_eq!(core::mem::offset_of!(Bar0, cap_max_pd), CAP_MAX_PD);
const_assert_eq!(core::mem::offset_of!(Bar0, cap_queue), CAP_QUEUE);
const_assert_eq!(core::mem::offset_of!(Bar0, cap_uar_pages), CAP_UAR_PAGES);
const_assert_eq!(core::mem::offset_of!(Bar0, cap_max_srq), CAP_MAX_SRQ);
const_assert_eq!(core::mem::offset_of!(Bar0, cap_max_eq), CAP_MAX_EQ);
const_assert_eq!(core::mem::offset_of!(Bar0, cap_msix), CAP_MSIX);
const_assert_eq!(core::mem::offset_of!(Bar0, ctrl), CTRL);
const_assert_eq!(core::mem::offset_of!(Bar0, status), STATUS);
const_assert_eq!(core::mem::offset_of!(Bar0, fatal_syndrome), FATAL_SYNDROME);
const_assert_eq!(core::mem::offset_of!(Bar0, cmdq_base_lo), CMDQ_BASE_LO);
const_assert_eq!(core::mem::offset_of!(Bar0, cmdq_base_hi), CMDQ_BASE_HI);
const_assert_eq!(core::mem::offset_of!(Bar0, cmdq_ctrl), CMDQ_CTRL);
const_assert_eq!(core::mem::offset_of!(Bar0, cmdq_db), CMDQ_DB);
const_assert_eq!(core::mem::offset_of!(Bar0, eq_base_lo), EQ_BASE_LO);
const_assert_eq!(core::mem::offset_of!(Bar0, eq_base_hi), EQ_BASE_HI);
const_assert_eq!(core::mem::offset_of!(Bar0, eq_ctrl), EQ_CTRL);
const_assert_eq!(core::mem::offset_of!(Bar0, eq_db), EQ_DB);
const_assert_eq!(core::mem::offset_of!(Bar0, intr_cause), INTR_CAUSE);
const_assert_eq!(core::mem::offset_of!(Bar0, intr_mask), INTR_MASK);
const_assert_eq!(core::mem::size_of::<Bar0>(), 0x078);

/// `VERSION`: interface version implemented by the device.
#[bitfield(u32, repr = le32, from = le32::from_ne, into = le32::to_ne)]
pub struct Version {
    /// Minor version: compatible additions.
    #[bits(16)]
    pub minor: u16,
    /// Major version: a driver refuses a major version it does not know.
    #[bits(16)]
    pub major: u16,
}

/// Major interface version described by this crate.
pub const VERSION_MAJOR: u16 = 1;
/// Minor interface version described by this crate.
pub const VERSION_MINOR: u16 = 5;

/// `CAP_DEV`: device-wide capabilities.
#[bitfield(u32, repr = le32, from = le32::from_ne, into = le32::to_ne)]
pub struct DevCaps {
    /// Number of physical ports (1..=15).
    #[bits(4)]
    pub num_ports: u8,
    /// log2 of the largest message size.
    #[bits(6)]
    pub log_max_msg: u8,
    /// log2 of the command queue's maximum number of entries.
    #[bits(5)]
    pub log_max_cmdq: u8,
    /// log2 of the event queue's maximum number of entries.
    #[bits(5)]
    pub log_max_eq: u8,
    /// The device implements atomic operations (`ATOMIC_HCA` semantics).
    pub atomics: bool,
    /// The device implements shared receive queues.
    pub srq: bool,
    /// The device implements UD QPs.
    pub ud: bool,
    /// The device implements UC QPs.
    pub uc: bool,
    /// The device takes BlueFlame writes ([`crate::uar::BF`], from version
    /// 1.4).
    pub bf: bool,
    /// The device has the general services QP, QP1 (`qp_type` GSI, from
    /// version 1.5).
    pub gsi: bool,
    #[bits(6)]
    __: u8,
}

/// `CAP_QUEUE`: per-queue limits.
#[bitfield(u32, repr = le32, from = le32::from_ne, into = le32::to_ne)]
pub struct QueueCaps {
    /// log2 of the maximum work queue depth (SQ in 64-byte basic blocks, RQ in
    /// WQEs).
    #[bits(5)]
    pub log_max_wq: u8,
    /// log2 of the maximum number of CQEs in one CQ.
    #[bits(5)]
    pub log_max_cqe: u8,
    /// Maximum scatter/gather entries in one WQE.
    #[bits(6)]
    pub max_sge: u8,
    /// Maximum inline data in one send WQE, in 16-byte units.
    #[bits(6)]
    pub max_inline_16: u8,
    /// Maximum size of one send WQE in 64-byte basic blocks.
    #[bits(4)]
    pub max_wqe_bbs: u8,
    #[bits(6)]
    __: u8,
}

/// `CTRL`: device control.
#[bitfield(u32, repr = le32, from = le32::from_ne, into = le32::to_ne)]
pub struct Ctrl {
    /// Write 1 to reset the device: every object is destroyed, DMA stops, all
    /// registers return to their reset values and `STATUS.ready` drops until
    /// the reset completes. Self-clearing.
    pub reset: bool,
    /// Set to start the device once the command queue is configured; clear to
    /// stop it. Takes effect when `STATUS.enabled` follows.
    pub enable: bool,
    #[bits(30)]
    __: u32,
}

/// `STATUS`: device status.
#[bitfield(u32, repr = le32, from = le32::from_ne, into = le32::to_ne)]
pub struct Status {
    /// Reset is complete; configuration registers may be written.
    pub ready: bool,
    /// The device is running and executes commands.
    pub enabled: bool,
    /// The device hit an unrecoverable error: see `FATAL_SYNDROME`. Only a
    /// reset leaves this state.
    pub fatal: bool,
    #[bits(29)]
    __: u32,
}

/// `CMDQ_CTRL`: command queue configuration, written before `CTRL.enable`.
#[bitfield(u32, repr = le32, from = le32::from_ne, into = le32::to_ne)]
pub struct CmdqCtrl {
    /// log2 of the number of 512-byte command entries.
    #[bits(5)]
    pub log_size: u8,
    #[bits(27)]
    __: u32,
}

/// `EQ_CTRL`: asynchronous event queue (EQ 0) configuration.
#[bitfield(u32, repr = le32, from = le32::from_ne, into = le32::to_ne)]
pub struct EqCtrl {
    /// log2 of the number of 64-byte EQEs.
    #[bits(5)]
    pub log_size: u8,
    #[bits(3)]
    __: u8,
    /// MSI-X vector raised when an EQE is written while the EQ is armed.
    #[bits(11)]
    pub vector: u16,
    #[bits(12)]
    __: u16,
    /// The EQ is configured; the device writes EQEs into it.
    pub enable: bool,
}

/// `EQ_DB`: event queue consumer index and arm.
#[bitfield(u32, repr = le32, from = le32::from_ne, into = le32::to_ne)]
pub struct EqDoorbell {
    /// Driver's free-running consumer index (low 24 bits).
    #[bits(24)]
    pub ci: u32,
    #[bits(7)]
    __: u8,
    /// Arm: raise the interrupt for the next EQE written past `ci`.
    pub arm: bool,
}

/// `INTR_CAUSE` / `INTR_MASK`: interrupt causes.
#[bitfield(u32, repr = le32, from = le32::from_ne, into = le32::to_ne)]
pub struct IntrCause {
    /// An EQE was written to the armed asynchronous EQ.
    pub async_eq: bool,
    /// A command completed.
    pub cmd_done: bool,
    /// `STATUS.fatal` was set.
    pub fatal: bool,
    #[bits(29)]
    __: u32,
}

wire_enum! {
    /// Codes in `FATAL_SYNDROME`.
    FatalSyndrome: u32 {
        /// No fatal error.
        None = 0,
        /// The command queue was enabled with an IOVA the IOMMU does not map.
        CmdqDma = 1,
        /// The event queue was enabled with an IOVA the IOMMU does not map.
        EqDma = 2,
        /// Invalid configuration (size out of range, unaligned base).
        BadConfig = 3,
        /// Internal error in the device.
        Internal = 4,
    }
}

assert_eq_size!(Version, u32);
assert_eq_size!(DevCaps, u32);
assert_eq_size!(QueueCaps, u32);
assert_eq_size!(Ctrl, u32);
assert_eq_size!(Status, u32);
assert_eq_size!(CmdqCtrl, u32);
assert_eq_size!(EqCtrl, u32);
assert_eq_size!(EqDoorbell, u32);
assert_eq_size!(IntrCause, u32);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_are_little_endian() {
        let v = Version::new().with_major(1).with_minor(2);
        assert_eq!(v.into_bits().to_le_bytes(), [2, 0, 1, 0]);
        let c = Ctrl::new().with_enable(true);
        assert_eq!(c.into_bits().to_le_bytes(), [2, 0, 0, 0]);
        let e = EqCtrl::new()
            .with_log_size(6)
            .with_vector(3)
            .with_enable(true);
        assert_eq!(e.into_bits().to_le_bytes(), [0x06, 0x03, 0x00, 0x80]);
    }

    #[test]
    fn magic_reads_rnic() {
        assert_eq!(MAGIC.to_le_bytes(), *b"RNIC");
    }
}

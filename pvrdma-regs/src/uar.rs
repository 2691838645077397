//! BAR 2: UAR pages, one 4 KiB page per user context (CREATE_UC names it
//! by page frame). Each doorbell is a 32-bit write at its offset in the
//! page; the low 24 bits name the queue by its handle.

/// Offset of the QP doorbell: [`HANDLE_MASK`] bits of the QP handle, with
/// [`QP_SEND`] or [`QP_RECV`].
pub const QP_DB: usize = 0;
/// Offset of the CQ doorbell: the CQ handle, with [`CQ_ARM`],
/// [`CQ_ARM_SOL`] or [`CQ_POLL`].
pub const CQ_DB: usize = 4;
/// Offset of the SRQ doorbell: the SRQ handle, with [`SRQ_RECV`].
pub const SRQ_DB: usize = 8;

/// The bits of a doorbell that hold a queue's handle.
pub const HANDLE_MASK: u32 = 0x00ff_ffff;
/// QP doorbell: the send queue has new WQEs.
pub const QP_SEND: u32 = 1 << 30;
/// QP doorbell: the receive queue has new WQEs.
pub const QP_RECV: u32 = 1 << 31;
/// CQ doorbell: arm for solicited completions only.
pub const CQ_ARM_SOL: u32 = 1 << 29;
/// CQ doorbell: arm for the next completion.
pub const CQ_ARM: u32 = 1 << 30;
/// CQ doorbell: the driver has taken entries (its consumer head moved).
pub const CQ_POLL: u32 = 1 << 31;
/// SRQ doorbell: the SRQ has new WQEs.
pub const SRQ_RECV: u32 = 1 << 30;

//! Fetching and decoding work queue entries from host memory.

use rnic_hw_regs::cqe::Syndrome;
use rnic_hw_regs::uar::BF_WQE_BYTES;
use rnic_hw_regs::wqe::*;
use rnic_verbs::{QpType, WcOpcode, WcStatus, WrOpcode};

use crate::iommu::{from_bytes, DmaRange, Iommu};
use crate::objects::Qp;
use crate::transport::ReqOp;

/// Largest send WQE in bytes.
const MAX_WQE_BYTES: usize = MAX_SEND_WQE_BBS * SEND_WQE_BB;

/// A send WQE copied out of the send queue. One buffer serves every WQE of
/// a doorbell, so nothing is initialized or moved per WQE.
#[derive(Debug)]
pub(crate) struct SendWqe {
    buf: [u8; MAX_WQE_BYTES],
    pub ctrl: CtrlSeg,
    /// Basic blocks the WQE occupies.
    pub bbs: u32,
    /// The QP's transport: on UD a [`DatagramSeg`] follows the control
    /// segment, and each transport allows its own opcodes.
    pub qp_type: QpType,
}

impl Default for SendWqe {
    fn default() -> Self {
        Self {
            buf: [0; MAX_WQE_BYTES],
            ctrl: CtrlSeg::default(),
            bbs: 0,
            qp_type: QpType::Rc,
        }
    }
}

/// A send WQE that cannot be executed: what its error completion says.
#[derive(Debug, Clone, Copy)]
pub(crate) struct WqeError {
    pub wr_id: u64,
    /// Basic blocks to retire (at least 1).
    pub bbs: u32,
    pub opcode: u8,
    pub status: WcStatus,
    pub syndrome: Syndrome,
}

/// Payload of a decoded send WQE.
pub(crate) enum Data<'a> {
    /// Data segments (gather list, or the scatter list of a READ/atomic):
    /// `n * 16` bytes of [`DataSeg`]s.
    Sges(&'a [u8]),
    /// Inline payload bytes.
    Inline(&'a [u8]),
}

/// A decoded send WQE.
pub(crate) struct Decoded<'a> {
    pub op: ReqOp,
    /// A memory window bind's segment.
    pub bind: BindSeg,
    /// The address vector of a UD send.
    pub datagram: Option<DatagramSeg>,
    pub raddr: RaddrSeg,
    pub atomic: AtomicSeg,
    pub data: Data<'a>,
}

impl Data<'_> {
    /// The data segments, in order (none for inline data).
    pub(crate) fn sges(&self) -> impl Iterator<Item = DataSeg> + '_ {
        let bytes = match self {
            Data::Sges(b) => *b,
            Data::Inline(_) => &[],
        };
        bytes.chunks_exact(SEG_SIZE).map(from_bytes::<DataSeg>)
    }
}

/// The completion opcode reported for a send WQE of raw opcode `op`.
pub(crate) fn wc_opcode(op: u8) -> u8 {
    match WrOpcode::from_raw(op) {
        Some(WrOpcode::RdmaWrite | WrOpcode::RdmaWriteWithImm) => WcOpcode::RdmaWrite,
        Some(WrOpcode::RdmaRead) => WcOpcode::RdmaRead,
        Some(WrOpcode::AtomicCmpAndSwp) => WcOpcode::CompSwap,
        Some(WrOpcode::AtomicFetchAndAdd) => WcOpcode::FetchAdd,
        Some(WrOpcode::LocalInv) => WcOpcode::LocalInv,
        Some(WrOpcode::BindMw) => WcOpcode::BindMw,
        Some(WrOpcode::Send | WrOpcode::SendWithImm | WrOpcode::SendWithInv) | None => {
            WcOpcode::Send
        }
    }
    .raw()
}

/// Copies the send WQE at the QP's fetch index out of the send queue into
/// `w`. `pending` is the number of BBs the driver has published past it.
pub(crate) fn fetch(
    w: &mut SendWqe,
    qp: &mut Qp,
    iommu: &Iommu,
    pending: u32,
    max_wqe_bbs: u8,
) -> Result<(), WqeError> {
    let size = 1u32 << qp.log_sq_bbs;
    let ring_bytes = (size as usize) * SEND_WQE_BB;
    let ci = qp.sq_fetch;
    let start = (ci & (size - 1)) as usize * SEND_WQE_BB;
    // A WQE a BlueFlame write delivered for this BB is taken from there,
    // whole, instead of the ring.
    let bf = qp.bf.take().filter(|b| b.index == ci);
    let ring_ctrl = match &bf {
        Some(b) => Some(from_bytes::<CtrlSeg>(&b.bytes)),
        None => qp.sq.read::<CtrlSeg>(iommu, start),
    };
    let Some(ctrl) = ring_ctrl else {
        return Err(WqeError {
            wr_id: 0,
            bbs: 1,
            opcode: 0,
            status: WcStatus::LocProtErr,
            syndrome: Syndrome::DmaFault,
        });
    };
    let ds = ctrl.word.ds() as usize;
    let bbs = wqe_bbs(ds) as u32;
    let err = |syndrome| WqeError {
        wr_id: ctrl.wr_id.to_ne(),
        bbs: bbs.clamp(1, pending.min(size)),
        opcode: wc_opcode(ctrl.word.opcode()),
        status: WcStatus::LocQpOpErr,
        syndrome,
    };
    if ds == 0
        || ds > MAX_SEND_WQE_DS
        || bbs > max_wqe_bbs as u32
        || bbs > size
        || bbs > pending
        || ctrl.word.wqe_index() != ci as u8
    {
        log::debug!(
            "QP {}: malformed WQE at {ci}: ds {ds}, wqe_index {}",
            qp.qpn,
            ctrl.word.wqe_index()
        );
        return Err(err(Syndrome::BadWqe));
    }
    w.ctrl = ctrl;
    w.bbs = bbs;
    w.qp_type = qp.qp_type;
    let len = ds * SEG_SIZE;
    if let Some(b) = bf.filter(|_| len <= BF_WQE_BYTES) {
        w.buf[..len].copy_from_slice(&b.bytes[..len]);
        return Ok(());
    }
    // A WQE may wrap from the last BB of the ring to the first.
    let first = len.min(ring_bytes - start);
    let fault = || WqeError {
        status: WcStatus::LocProtErr,
        ..err(Syndrome::DmaFault)
    };
    let p = qp.sq.at(iommu, start, first).ok_or_else(fault)?;
    // SAFETY: `first` bytes inside a live mapping (translated under the
    // device lock) into a distinct local buffer of at least `len` bytes.
    unsafe { std::ptr::copy_nonoverlapping(p.0, w.buf.as_mut_ptr(), first) };
    if first < len {
        let p = qp.sq.at(iommu, 0, len - first).ok_or_else(fault)?;
        // SAFETY: as above; `first + (len - first)` bytes fit the buffer.
        unsafe { std::ptr::copy_nonoverlapping(p.0, w.buf.as_mut_ptr().add(first), len - first) };
    }
    Ok(())
}

impl SendWqe {
    /// Decodes the opcode and segments. `max_inline` is the QP's inline
    /// limit, `max_sge` the device's.
    pub(crate) fn decode(
        &self,
        max_inline: u32,
        max_sge: u8,
    ) -> Result<Decoded<'_>, (WcStatus, Syndrome)> {
        let word = self.ctrl.word;
        let bad = Err((WcStatus::LocQpOpErr, Syndrome::BadWqe));
        let op = match WrOpcode::from_raw(word.opcode()) {
            Some(WrOpcode::Send) => ReqOp::Send,
            Some(WrOpcode::SendWithImm) => ReqOp::SendImm,
            Some(WrOpcode::RdmaWrite) => ReqOp::Write,
            Some(WrOpcode::RdmaWriteWithImm) => ReqOp::WriteImm,
            Some(WrOpcode::RdmaRead) => ReqOp::Read,
            Some(WrOpcode::AtomicCmpAndSwp) => ReqOp::CmpSwap,
            Some(WrOpcode::AtomicFetchAndAdd) => ReqOp::FetchAdd,
            Some(WrOpcode::SendWithInv) => ReqOp::SendInv,
            Some(WrOpcode::BindMw) => ReqOp::BindMw,
            Some(WrOpcode::LocalInv) => ReqOp::LocalInv,
            None => return Err((WcStatus::LocQpOpErr, Syndrome::BadOpcode)),
        };
        // UD carries SENDs only; UC SENDs, WRITEs and the local
        // operations; only RC has SEND with invalidate.
        let ud = self.qp_type.is_datagram();
        if (ud && !matches!(op, ReqOp::Send | ReqOp::SendImm))
            || (self.qp_type == QpType::Uc && (op.is_rd_atomic() || op == ReqOp::SendInv))
        {
            return Err((WcStatus::LocQpOpErr, Syndrome::BadOpcode));
        }
        let ds = word.ds() as usize;
        let segs = &self.buf[..ds * SEG_SIZE];
        let mut at = SEG_SIZE;
        let mut datagram = None;
        if ud {
            if ds < 4 {
                return bad;
            }
            let d: DatagramSeg = from_bytes(&segs[at..]);
            if d.reserved0 != [0; 2] || d.reserved1 != [0; 8] {
                return bad;
            }
            datagram = Some(d);
            at += 3 * SEG_SIZE;
        }
        let mut bind = BindSeg::default();
        if op.is_local() {
            // No payload: a bind has its segment, an invalidate none.
            let want = if op == ReqOp::BindMw { 3 } else { 1 };
            if ds != want || word.inline() {
                return bad;
            }
            if op == ReqOp::BindMw {
                bind = from_bytes(&segs[at..]);
            }
            return Ok(Decoded {
                op,
                bind,
                datagram,
                raddr: RaddrSeg::default(),
                atomic: AtomicSeg::default(),
                data: Data::Sges(&[]),
            });
        }
        let mut raddr = RaddrSeg::default();
        let mut atomic = AtomicSeg::default();
        if op.has_raddr() {
            if ds < 2 {
                return bad;
            }
            raddr = from_bytes(&segs[at..]);
            at += SEG_SIZE;
        }
        if op.is_atomic() {
            if ds < 3 {
                return bad;
            }
            atomic = from_bytes(&segs[at..]);
            at += SEG_SIZE;
        }
        let rest = &segs[at..];
        let data = if word.inline() {
            // READ and atomics land in local memory: inline makes no sense.
            if matches!(op, ReqOp::Read) || op.is_atomic() || rest.len() < 4 {
                return bad;
            }
            let count = u32::from_le_bytes([rest[0], rest[1], rest[2], rest[3]]);
            let len = count & !INLINE_MARK;
            if count & INLINE_MARK == 0
                || len > max_inline
                || (4 + len as usize).div_ceil(SEG_SIZE) * SEG_SIZE != rest.len()
            {
                return bad;
            }
            Data::Inline(&rest[4..4 + len as usize])
        } else {
            if rest.len() / SEG_SIZE > max_sge as usize {
                return bad;
            }
            Data::Sges(rest)
        };
        if op.is_atomic() {
            let mut sges = data.sges();
            let one_8_byte_sge = matches!(
                (sges.next(), sges.next()),
                (Some(s), None) if s.byte_count.to_ne() == 8
            );
            if !one_8_byte_sge {
                return bad;
            }
        }
        Ok(Decoded {
            op,
            bind,
            datagram,
            raddr,
            atomic,
            data,
        })
    }
}

/// A receive WQE: its work request ID and scatter list. One buffer, kept by
/// the responder, serves every receive: nothing is initialized per WQE.
#[derive(Debug)]
pub(crate) struct RecvWqe {
    pub wr_id: u64,
    /// The header's `next` (an SRQ's list).
    pub next: u32,
    sges: [DataSeg; MAX_SEND_WQE_DS],
    n: usize,
}

impl Default for RecvWqe {
    fn default() -> Self {
        Self {
            wr_id: 0,
            next: 0,
            sges: [DataSeg::default(); MAX_SEND_WQE_DS],
            n: 0,
        }
    }
}

impl RecvWqe {
    /// The scatter list.
    pub(crate) fn sges(&self) -> &[DataSeg] {
        &self.sges[..self.n]
    }
}

/// Why a receive WQE cannot be used.
#[derive(Debug, Clone, Copy)]
pub(crate) enum RecvError {
    /// The receive queue memory is not mapped.
    Fault,
    /// `sge_count` does not fit the stride or exceeds `max_sge`; carries the
    /// work request ID.
    Malformed(u64),
}

/// Copies the receive WQE in slot `slot` (of `1 << log_stride` bytes) of
/// `ring` into `w`: the header, then the whole scatter list in one copy.
pub(crate) fn fetch_recv(
    w: &mut RecvWqe,
    ring: &mut DmaRange,
    iommu: &Iommu,
    slot: u32,
    log_stride: u8,
    max_sge: u8,
) -> Result<(), RecvError> {
    let stride = 1usize << log_stride;
    let at = slot as usize * stride;
    let hdr: RecvWqeHdr = ring.read(iommu, at).ok_or(RecvError::Fault)?;
    let wr_id = hdr.wr_id.to_ne();
    w.next = hdr.next.to_ne();
    let n = hdr.sge_count.to_ne() as usize;
    // (The stride already bounds `n` below the array's length; the
    // explicit check keeps the copy below in bounds whatever it is.)
    if n > max_sge as usize || n > MAX_SEND_WQE_DS || SEG_SIZE + n * SEG_SIZE > stride {
        return Err(RecvError::Malformed(wr_id));
    }
    let len = n * SEG_SIZE;
    let p = ring.at(iommu, at + SEG_SIZE, len).ok_or(RecvError::Fault)?;
    // SAFETY: `len` bytes inside a live mapping (translated under the device
    // lock) into a distinct array of `MAX_SEND_WQE_DS >= n` (checked above)
    // `DataSeg`s: plain little-endian integers, valid for any bit pattern.
    unsafe { std::ptr::copy_nonoverlapping(p.0, w.sges.as_mut_ptr().cast::<u8>(), len) };
    w.wr_id = wr_id;
    w.n = n;
    Ok(())
}

/// Length of a data segment: 0 means 2^31 bytes.
pub(crate) fn sge_len(s: &DataSeg) -> u64 {
    match s.byte_count.to_ne() {
        0 => 1 << 31,
        n => n as u64,
    }
}

//! Encoding work requests into send and receive WQEs.
//!
//! Checking a request ([`plan_send`], [`check_recv`]) is separate from
//! writing it, so a post can test queue space with the exact WQE size
//! before touching the ring. Segments are the `hw-regs` segment structs,
//! each stored as two 64-bit words; inline payload is packed into
//! little-endian words in registers.

use alloc::format;
use rnic_hw_regs::wqe::{
    AtomicSeg, BindSeg, CtrlSeg, CtrlWord, DataSeg, DatagramSeg, InlineHdr, RaddrSeg, RecvWqeHdr,
    INLINE_MARK, SEG_SIZE, SEND_WQE_BB,
};
use rnic_hw_regs::{le32, le64};
use rnic_queues::{DmaRegion, Pod, ProducerRing};
use rnic_verbs::WrOpcode;

use crate::error::{Error, Result};
use rnic_verbs::{send_flags, Payload, RecvWr, SendOp, SendWr, Sge, UdDest};

/// Largest scatter/gather entry; a `DataSeg` encodes it as 0.
pub(crate) const MAX_SGE_LEN: u32 = 1 << 31;
/// Size of an inline block's header.
pub(crate) const INLINE_HDR: usize = core::mem::size_of::<InlineHdr>();

/// What a QP's send queue accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SendLimits {
    pub(crate) max_sge: u32,
    pub(crate) max_inline: u32,
    /// A UD QP: it takes [`SendOp::UdSend`] only, and nothing else does.
    pub(crate) ud: bool,
}

fn check_sgl(sgl: &[Sge], max: u32, queue: &str) -> Result<usize> {
    if sgl.len() > max as usize {
        return Err(Error::invalid(format!(
            "{} scatter/gather entries exceed the {queue} limit of {max}",
            sgl.len()
        )));
    }
    let mut used = 0;
    for (i, sge) in sgl.iter().enumerate() {
        if sge.length > MAX_SGE_LEN {
            return Err(Error::invalid(format!(
                "scatter/gather entry {i} is {} bytes, more than 2^31",
                sge.length
            )));
        }
        used += usize::from(sge.length != 0);
    }
    Ok(used)
}

/// Checks a send request and returns its WQE size in 16-byte segments.
pub(crate) fn plan_send(wr: &SendWr<'_>, lim: &SendLimits) -> Result<usize> {
    if wr.flags & !send_flags::ALL != 0 {
        return Err(Error::invalid(format!(
            "unknown send flags {:#x}",
            wr.flags & !send_flags::ALL
        )));
    }
    let op = &wr.op;
    let ud = matches!(op, SendOp::UdSend { .. });
    if ud != lim.ud {
        return Err(Error::invalid(if lim.ud {
            "a UD QP takes UdSend work requests only"
        } else {
            "UdSend is for UD QPs"
        }));
    }
    if op.is_local() {
        if !matches!(wr.payload, Payload::Sgl(&[])) {
            return Err(Error::invalid(format!("{op:?} carries no payload")));
        }
        return Ok(if matches!(op, SendOp::BindMw { .. }) {
            1 + BIND_SEGS
        } else {
            1
        });
    }
    let body = match wr.payload {
        Payload::Sgl(sgl) => {
            let used = check_sgl(sgl, lim.max_sge, "QP's max_send_sge")?;
            if op.is_atomic() && (sgl.len() != 1 || sgl[0].length != 8) {
                return Err(Error::invalid(
                    "an atomic operation takes exactly one 8-byte scatter entry for the result",
                ));
            }
            used
        }
        Payload::Inline(data) => {
            if !op.allows_inline() {
                return Err(Error::invalid(format!(
                    "inline data is only valid for SEND and RDMA WRITE, not {op:?}"
                )));
            }
            if data.len() > lim.max_inline as usize {
                return Err(Error::invalid(format!(
                    "{} bytes of inline data exceed the QP's max_inline_data of {}",
                    data.len(),
                    lim.max_inline
                )));
            }
            (INLINE_HDR + data.len()).div_ceil(SEG_SIZE)
        }
    };
    let header = if ud {
        1 + DATAGRAM_SEGS
    } else {
        1 + usize::from(op.remote().is_some()) + usize::from(op.is_atomic())
    };
    Ok(header + body)
}

/// A work queue ring: a [`ProducerRing`] (index accounting) plus direct
/// 16-byte segment stores into its slots, so encoding a WQE costs no
/// division and no copy through a stack struct.
pub(crate) struct WqRing {
    ring: ProducerRing,
    stride: usize,
}

impl WqRing {
    /// A ring of `1 << log_size` slots of `stride` bytes at the start of
    /// `region`.
    ///
    /// # Safety
    ///
    /// `region` must outlive the ring.
    pub(crate) unsafe fn new(region: &DmaRegion, log_size: u32, stride: usize) -> Self {
        assert!(
            region.vaddr().as_ptr() as usize % 8 == 0 && stride % SEG_SIZE == 0,
            "work queue must be 8-byte aligned with 16-byte multiple slots"
        );
        // SAFETY: the caller keeps `region` alive as long as the ring.
        let ring = unsafe { ProducerRing::new(region, log_size, stride) };
        Self { ring, stride }
    }

    /// Writes a 16-byte segment, two little-endian words, at byte `off`
    /// (a multiple of 16) of the slot of index `idx`.
    #[inline]
    fn put(&mut self, idx: u32, off: usize, lo: u64, hi: u64) {
        self.put_words(idx, off, [lo.to_le(), hi.to_le()]);
    }

    /// Writes the 16-byte segment `seg` (a `hw-regs` layout) at byte `off`
    /// of the slot of index `idx`.
    #[inline]
    fn put_seg<T: Pod>(&mut self, idx: u32, off: usize, seg: T) {
        self.put_words(idx, off, seg_words(seg));
    }

    /// Stores two words holding a segment's bytes in memory order.
    #[inline]
    fn put_words(&mut self, idx: u32, off: usize, words: [u64; 2]) {
        assert!(off + SEG_SIZE <= self.stride, "segment outside its slot");
        let p = self.ring.slot(idx).as_ptr().cast::<u64>();
        // SAFETY: `slot` points at a slot of `stride` bytes inside the
        // ring's live region (ProducerRing::new, WqRing::new); `off + 16 <=
        // stride` (checked) keeps both words in it, and the 8-byte aligned
        // base with 16-byte multiple strides and offsets aligns them.
        unsafe {
            p.byte_add(off).write_volatile(words[0]);
            p.byte_add(off + 8).write_volatile(words[1]);
        }
    }
}

/// The bytes of a 16-byte segment as two words in memory order, so a
/// segment is built with its `hw-regs` type and stored with two stores.
#[inline]
fn seg_words<T: Pod>(seg: T) -> [u64; 2] {
    const { assert!(core::mem::size_of::<T>() == SEG_SIZE) };
    // SAFETY: `T` is 16 bytes (checked above) of plain data with no padding
    // (Pod), so all 16 bytes are initialised and any bit pattern is a
    // valid `[u64; 2]`; transmute_copy reads unaligned.
    unsafe { core::mem::transmute_copy(&seg) }
}

/// Segments of a [`BindSeg`].
const BIND_SEGS: usize = core::mem::size_of::<BindSeg>() / SEG_SIZE;

/// Segments of a [`DatagramSeg`].
const DATAGRAM_SEGS: usize = core::mem::size_of::<DatagramSeg>() / SEG_SIZE;

/// The datagram segment of a UD send to `d`, as the words of its three
/// segments in memory order.
fn datagram_words(d: &UdDest) -> [[u64; 2]; DATAGRAM_SEGS] {
    let ah = d.ah();
    let seg = DatagramSeg {
        dest_qpn: le32::from_ne(d.remote_qpn),
        qkey: le32::from_ne(d.remote_qkey),
        dgid: ah.dgid,
        dmac: ah.dmac,
        sgid_index: ah.sgid_index,
        hop_limit: ah.hop_limit,
        traffic_class: ah.traffic_class,
        sl: ah.sl,
        reserved0: [0; 2],
        flow_label: le32::from_ne(ah.flow_label),
        reserved1: [0; 8],
    };
    const { assert!(core::mem::size_of::<DatagramSeg>() == DATAGRAM_SEGS * SEG_SIZE) };
    // SAFETY: `DatagramSeg` is 48 bytes (checked above) of plain data with
    // no padding (Pod), so every byte is initialised and any bit pattern is
    // valid for the array; transmute_copy reads unaligned.
    unsafe { core::mem::transmute_copy(&seg) }
}

/// A data segment for `sge` (never zero-length: those are left out).
#[inline]
fn data_seg(sge: &Sge) -> DataSeg {
    DataSeg {
        // 2^31 is encoded as 0.
        byte_count: le32::from_ne(sge.length & !MAX_SGE_LEN),
        lkey: le32::from_ne(sge.lkey),
        addr: le64::from_ne(sge.addr),
    }
}

impl core::ops::Deref for WqRing {
    type Target = ProducerRing;
    fn deref(&self) -> &ProducerRing {
        &self.ring
    }
}

impl core::ops::DerefMut for WqRing {
    fn deref_mut(&mut self) -> &mut ProducerRing {
        &mut self.ring
    }
}

/// Segments of one send WQE, written in order from its first BB.
struct SendSegs<'r> {
    ring: &'r mut WqRing,
    idx: u32,
    seg: usize,
}

impl SendSegs<'_> {
    /// Where the next segment goes: its BB index and byte offset in the BB.
    #[inline]
    fn next(&mut self) -> (u32, usize) {
        let per_bb = SEND_WQE_BB / SEG_SIZE;
        let at = (
            self.idx.wrapping_add((self.seg / per_bb) as u32),
            (self.seg % per_bb) * SEG_SIZE,
        );
        self.seg += 1;
        at
    }

    /// Appends a segment of inline payload, two little-endian words.
    #[inline]
    fn put(&mut self, lo: u64, hi: u64) {
        let (bb, off) = self.next();
        self.ring.put(bb, off, lo, hi);
    }

    /// Appends a `hw-regs` segment.
    #[inline]
    fn seg<T: Pod>(&mut self, seg: T) {
        let (bb, off) = self.next();
        self.ring.put_seg(bb, off, seg);
    }
}

/// The 8 bytes of `data` from `start`, zero past its end, as a
/// little-endian word.
#[inline]
fn word(data: &[u8], start: usize) -> u64 {
    if let Some(b) = data.get(start..start + 8) {
        let mut w = [0; 8];
        w.copy_from_slice(b);
        return u64::from_le_bytes(w);
    }
    // Assembled in a register: a copy through a stack buffer would stall
    // on store forwarding.
    data.get(start..).map_or(0, |rest| {
        rest.iter()
            .enumerate()
            .fold(0, |w, (i, &b)| w | u64::from(b) << (8 * i))
    })
}

/// Writes the send WQE of `wr` (checked by [`plan_send`], `ds` segments)
/// at BB index `idx`, wrapping around the ring end. The ring's slots are
/// `SEND_WQE_BB` bytes.
pub(crate) fn write_send(ring: &mut WqRing, idx: u32, wr: &SendWr<'_>, ds: usize) {
    debug_assert_eq!(ring.stride, SEND_WQE_BB);
    let (opcode, imm) = match wr.op {
        SendOp::Send => (WrOpcode::Send, [0; 4]),
        SendOp::SendWithImm { imm } => (WrOpcode::SendWithImm, imm),
        SendOp::RdmaWrite { .. } => (WrOpcode::RdmaWrite, [0; 4]),
        SendOp::RdmaWriteWithImm { imm, .. } => (WrOpcode::RdmaWriteWithImm, imm),
        SendOp::RdmaRead { .. } => (WrOpcode::RdmaRead, [0; 4]),
        SendOp::AtomicCmpAndSwp { .. } => (WrOpcode::AtomicCmpAndSwp, [0; 4]),
        SendOp::AtomicFetchAndAdd { .. } => (WrOpcode::AtomicFetchAndAdd, [0; 4]),
        SendOp::UdSend { imm: None, .. } => (WrOpcode::Send, [0; 4]),
        SendOp::UdSend { imm: Some(imm), .. } => (WrOpcode::SendWithImm, imm),
        // The rkey to invalidate travels in the immediate data's place.
        SendOp::SendWithInv { rkey } => (WrOpcode::SendWithInv, rkey.to_be_bytes()),
        SendOp::LocalInv { rkey } => (WrOpcode::LocalInv, rkey.to_be_bytes()),
        SendOp::BindMw { .. } => (WrOpcode::BindMw, [0; 4]),
    };
    let word0 = CtrlWord::new()
        .with_opcode(opcode.raw())
        .with_signaled(wr.flags & send_flags::SIGNALED != 0)
        .with_solicited(wr.flags & send_flags::SOLICITED != 0)
        .with_fence(wr.flags & send_flags::FENCE != 0)
        .with_inline(matches!(wr.payload, Payload::Inline(_)))
        .with_ds(ds as u8)
        .with_wqe_index(idx as u8);
    let mut w = SendSegs { ring, idx, seg: 0 };
    w.seg(CtrlSeg {
        word: word0,
        imm,
        wr_id: le64::from_ne(wr.wr_id),
    });
    if let SendOp::UdSend { dest, .. } = wr.op {
        for words in datagram_words(&dest) {
            let (bb, off) = w.next();
            w.ring.put_words(bb, off, words);
        }
    }
    if let SendOp::BindMw { bind } = wr.op {
        let seg = BindSeg {
            mw_rkey: le32::from_ne(bind.mw_rkey),
            new_rkey: le32::from_ne(bind.new_rkey),
            mr_lkey: le32::from_ne(bind.mr_lkey),
            access: le32::from_ne(bind.access),
            va: le64::from_ne(bind.addr),
            length: le64::from_ne(bind.length),
        };
        const { assert!(core::mem::size_of::<BindSeg>() == BIND_SEGS * SEG_SIZE) };
        // SAFETY: `BindSeg` is 32 bytes (checked above) of plain data with
        // no padding (Pod), so every byte is initialised and any bit
        // pattern is valid for the array; transmute_copy reads unaligned.
        let words: [[u64; 2]; BIND_SEGS] = unsafe { core::mem::transmute_copy(&seg) };
        for words in words {
            let (bb, off) = w.next();
            w.ring.put_words(bb, off, words);
        }
    }
    if let Some(remote) = wr.op.remote() {
        w.seg(RaddrSeg {
            raddr: le64::from_ne(remote.addr),
            rkey: le32::from_ne(remote.rkey),
            reserved: le32::from_ne(0),
        });
    }
    let atomic = |swap_add: u64, compare: u64| AtomicSeg {
        swap_add: le64::from_ne(swap_add),
        compare: le64::from_ne(compare),
    };
    match wr.op {
        SendOp::AtomicCmpAndSwp { compare, swap, .. } => w.seg(atomic(swap, compare)),
        SendOp::AtomicFetchAndAdd { add, .. } => w.seg(atomic(add, 0)),
        _ => {}
    }
    match wr.payload {
        Payload::Sgl(sgl) => {
            for sge in sgl.iter().filter(|s| s.length != 0) {
                w.seg(data_seg(sge));
            }
        }
        Payload::Inline(data) => {
            // The block is the 4-byte header, the bytes, zero padding to a
            // segment boundary; segment j holds data[16j - 4 .. 16j + 12].
            let hdr = INLINE_MARK | data.len() as u32;
            let first = word(data, 0) & 0xffff_ffff;
            w.put(u64::from(hdr) | first << 32, word(data, 4));
            let mut start = SEG_SIZE - INLINE_HDR;
            while start < data.len() {
                w.put(word(data, start), word(data, start + 8));
                start += SEG_SIZE;
            }
        }
    }
    debug_assert_eq!(w.seg, ds);
}

/// Checks a receive request against the QP's `max_recv_sge`.
pub(crate) fn check_recv(wr: &RecvWr<'_>, max_sge: u32) -> Result<()> {
    check_sgl(wr.sg_list, max_sge, "QP's max_recv_sge").map(drop)
}

/// Writes the receive WQE of `wr` (checked by [`check_recv`] against a
/// `max_recv_sge` that fits the slot) into slot index `idx`; `next` is
/// the slot an SRQ's device takes after it (0 in a receive queue).
pub(crate) fn write_recv(ring: &mut WqRing, idx: u32, wr: &RecvWr<'_>, next: u32) {
    let mut n = 0u32;
    for sge in wr.sg_list.iter().filter(|s| s.length != 0) {
        n += 1;
        ring.put_seg(idx, SEG_SIZE * n as usize, data_seg(sge));
    }
    ring.put_seg(
        idx,
        0,
        RecvWqeHdr {
            wr_id: le64::from_ne(wr.wr_id),
            sge_count: le32::from_ne(n),
            next: le32::from_ne(next),
        },
    );
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec;
    use std::vec::Vec;

    use core::ptr::NonNull;

    use rnic_hw_regs::wqe::{AtomicSeg, CtrlSeg, DataSeg, RaddrSeg, RecvWqeHdr};
    use rnic_hw_regs::{le32, le64};

    use super::*;
    use crate::error::ErrorKind;
    use rnic_verbs::RemoteAddr;

    const LIM: SendLimits = SendLimits {
        max_sge: 4,
        max_inline: 64,
        ud: false,
    };

    fn raw<T: Copy>(v: &T) -> Vec<u8> {
        // SAFETY: the WQE segments are plain data of exactly their size.
        unsafe {
            core::slice::from_raw_parts((v as *const T).cast::<u8>(), core::mem::size_of::<T>())
        }
        .to_vec()
    }

    /// A send queue of `1 << log` BBs over a heap buffer.
    struct Sq {
        buf: Vec<u64>,
        ring: WqRing,
    }

    impl Sq {
        fn new(log: u32) -> Self {
            let mut buf = vec![0xa5a5_a5a5_a5a5_a5a5u64; (SEND_WQE_BB << log) / 8];
            let len = buf.len() * 8;
            let ptr = NonNull::new(buf.as_mut_ptr().cast::<u8>()).unwrap();
            // SAFETY: `buf` lives (and does not move: its heap block stays)
            // as long as the ring, both being fields of the same Sq.
            let ring = unsafe { WqRing::new(&DmaRegion::new(ptr, 0x1000, len), log, SEND_WQE_BB) };
            Self { buf, ring }
        }

        fn bytes(&self) -> Vec<u8> {
            self.buf.iter().flat_map(|w| w.to_ne_bytes()).collect()
        }

        /// Plans and writes `wr` at `idx`; returns the WQE's bytes, read
        /// back from the ring (unwrapped).
        fn post(&mut self, idx: u32, wr: &SendWr<'_>) -> Vec<u8> {
            let ds = plan_send(wr, &LIM).unwrap();
            write_send(&mut self.ring, idx, wr, ds);
            let all = self.bytes();
            let start = (idx as usize % (all.len() / SEND_WQE_BB)) * SEND_WQE_BB;
            all.iter()
                .cycle()
                .skip(start)
                .take(ds * SEG_SIZE)
                .copied()
                .collect()
        }
    }

    fn ctrl(op: WrOpcode, ds: u8, idx: u8, imm: [u8; 4], wr_id: u64) -> CtrlSeg {
        CtrlSeg {
            word: CtrlWord::new()
                .with_opcode(op.raw())
                .with_ds(ds)
                .with_wqe_index(idx),
            imm,
            wr_id: le64::from_ne(wr_id),
        }
    }

    fn data(sge: &Sge) -> Vec<u8> {
        raw(&DataSeg {
            byte_count: le32::from_ne(sge.length),
            lkey: le32::from_ne(sge.lkey),
            addr: le64::from_ne(sge.addr),
        })
    }

    fn raddr(r: RemoteAddr) -> Vec<u8> {
        raw(&RaddrSeg {
            raddr: le64::from_ne(r.addr),
            rkey: le32::from_ne(r.rkey),
            reserved: le32::from_ne(0),
        })
    }

    fn inline(payload: &[u8]) -> Vec<u8> {
        let mut v = raw(&InlineHdr {
            byte_count: le32::from_ne(INLINE_MARK | payload.len() as u32),
        });
        v.extend_from_slice(payload);
        v.resize(v.len().next_multiple_of(SEG_SIZE), 0);
        v
    }

    const A: Sge = Sge {
        addr: 0x7f00_0000_1000,
        length: 100,
        lkey: 0x0102,
    };
    const B: Sge = Sge {
        addr: 0x7f00_0000_2000,
        length: 8,
        lkey: 0x0203,
    };
    const ZERO: Sge = Sge {
        addr: 0x9999,
        length: 0,
        lkey: 0x9999,
    };
    const R: RemoteAddr = RemoteAddr {
        addr: 0x5000_0008,
        rkey: 0xabcd,
    };

    fn wr(op: SendOp, payload: Payload<'_>, flags: u32) -> SendWr<'_> {
        SendWr {
            wr_id: 0x1122_3344_5566_7788,
            op,
            payload,
            flags,
        }
    }

    #[test]
    fn send_with_sgl_skips_empty_entries() {
        let mut sq = Sq::new(3);
        let sgl = [A, ZERO, B];
        let got = sq.post(5, &wr(SendOp::Send, Payload::Sgl(&sgl), 0));
        let mut want = raw(&ctrl(WrOpcode::Send, 3, 5, [0; 4], 0x1122_3344_5566_7788));
        want.extend(data(&A));
        want.extend(data(&B));
        assert_eq!(got, want);
    }

    #[test]
    fn send_with_imm_inline_and_flags() {
        let mut sq = Sq::new(3);
        let flags = send_flags::SIGNALED | send_flags::SOLICITED | send_flags::FENCE;
        let op = SendOp::SendWithImm { imm: [9, 8, 7, 6] };
        let got = sq.post(0, &wr(op, Payload::Inline(b"hello"), flags));
        let mut c = ctrl(
            WrOpcode::SendWithImm,
            2,
            0,
            [9, 8, 7, 6],
            0x1122_3344_5566_7788,
        );
        c.word = c
            .word
            .with_signaled(true)
            .with_solicited(true)
            .with_fence(true)
            .with_inline(true);
        let mut want = raw(&c);
        want.extend(inline(b"hello"));
        assert_eq!(got, want);
    }

    #[test]
    fn rdma_write_read_and_write_with_imm() {
        let mut sq = Sq::new(3);
        let sgl = [A];
        let got = sq.post(
            1,
            &wr(SendOp::RdmaWrite { remote: R }, Payload::Sgl(&sgl), 0),
        );
        let mut want = raw(&ctrl(
            WrOpcode::RdmaWrite,
            3,
            1,
            [0; 4],
            0x1122_3344_5566_7788,
        ));
        want.extend(raddr(R));
        want.extend(data(&A));
        assert_eq!(got, want);

        let got = sq.post(
            2,
            &wr(SendOp::RdmaRead { remote: R }, Payload::Sgl(&sgl), 0),
        );
        let mut want = raw(&ctrl(
            WrOpcode::RdmaRead,
            3,
            2,
            [0; 4],
            0x1122_3344_5566_7788,
        ));
        want.extend(raddr(R));
        want.extend(data(&A));
        assert_eq!(got, want);

        let payload = [0x5au8; 28];
        let op = SendOp::RdmaWriteWithImm {
            remote: R,
            imm: [1, 2, 3, 4],
        };
        let got = sq.post(3, &wr(op, Payload::Inline(&payload), 0));
        let mut c = ctrl(
            WrOpcode::RdmaWriteWithImm,
            4,
            3,
            [1, 2, 3, 4],
            0x1122_3344_5566_7788,
        );
        c.word = c.word.with_inline(true);
        let mut want = raw(&c);
        want.extend(raddr(R));
        want.extend(inline(&payload));
        assert_eq!(got, want);
    }

    #[test]
    fn atomics() {
        let mut sq = Sq::new(3);
        let sgl = [B];
        let op = SendOp::AtomicCmpAndSwp {
            remote: R,
            compare: 0x1111,
            swap: 0x2222,
        };
        let got = sq.post(0, &wr(op, Payload::Sgl(&sgl), send_flags::SIGNALED));
        let mut c = ctrl(
            WrOpcode::AtomicCmpAndSwp,
            4,
            0,
            [0; 4],
            0x1122_3344_5566_7788,
        );
        c.word = c.word.with_signaled(true);
        let mut want = raw(&c);
        want.extend(raddr(R));
        want.extend(raw(&AtomicSeg {
            swap_add: le64::from_ne(0x2222),
            compare: le64::from_ne(0x1111),
        }));
        want.extend(data(&B));
        assert_eq!(got, want);

        let op = SendOp::AtomicFetchAndAdd { remote: R, add: 5 };
        let got = sq.post(1, &wr(op, Payload::Sgl(&sgl), 0));
        let mut want = raw(&ctrl(
            WrOpcode::AtomicFetchAndAdd,
            4,
            1,
            [0; 4],
            0x1122_3344_5566_7788,
        ));
        want.extend(raddr(R));
        want.extend(raw(&AtomicSeg {
            swap_add: le64::from_ne(5),
            compare: le64::from_ne(0),
        }));
        want.extend(data(&B));
        assert_eq!(got, want);
    }

    #[test]
    fn wqe_wraps_around_the_ring_end() {
        // 4 BBs; a 2-BB WQE at index 7 (slot 3) continues in slot 0.
        let mut sq = Sq::new(2);
        let sgl = [A, B, A, B];
        let w = wr(SendOp::RdmaWrite { remote: R }, Payload::Sgl(&sgl), 0);
        let got = sq.post(7, &w);
        let mut want = raw(&ctrl(
            WrOpcode::RdmaWrite,
            6,
            7,
            [0; 4],
            0x1122_3344_5566_7788,
        ));
        want.extend(raddr(R));
        for s in &sgl {
            want.extend(data(s));
        }
        assert_eq!(got, want);
        let bytes = sq.bytes();
        assert_eq!(&bytes[192..256], &want[..64]);
        assert_eq!(&bytes[..32], &want[64..]);
        assert!(
            bytes[32..192].iter().all(|&b| b == 0xa5),
            "other BBs untouched"
        );

        // Inline data split by the ring end mid-payload.
        let mut sq = Sq::new(2);
        let payload: Vec<u8> = (0..60).collect();
        let w = wr(SendOp::Send, Payload::Inline(&payload), 0);
        let got = sq.post(3, &w);
        let mut c = ctrl(WrOpcode::Send, 5, 3, [0; 4], 0x1122_3344_5566_7788);
        c.word = c.word.with_inline(true);
        let mut want = raw(&c);
        want.extend(inline(&payload));
        assert_eq!(got, want);
        let bytes = sq.bytes();
        assert_eq!(&bytes[192..256], &want[..64]);
        assert_eq!(&bytes[..16], &want[64..]);
    }

    #[test]
    fn largest_sge_is_encoded_as_zero() {
        let mut sq = Sq::new(3);
        let big = Sge {
            length: MAX_SGE_LEN,
            ..A
        };
        let sgl = [big];
        let got = sq.post(0, &wr(SendOp::Send, Payload::Sgl(&sgl), 0));
        assert_eq!(&got[16..20], &[0, 0, 0, 0]);
    }

    #[test]
    fn bad_requests_are_refused() {
        let kind = |w: SendWr<'_>| plan_send(&w, &LIM).unwrap_err().kind();
        let five = [A; 5];
        assert_eq!(
            kind(wr(SendOp::Send, Payload::Sgl(&five), 0)),
            ErrorKind::InvalidArgument
        );
        let long = [0u8; 65];
        assert_eq!(
            kind(wr(SendOp::Send, Payload::Inline(&long), 0)),
            ErrorKind::InvalidArgument
        );
        let read = SendOp::RdmaRead { remote: R };
        assert_eq!(
            kind(wr(read, Payload::Inline(b"x"), 0)),
            ErrorKind::InvalidArgument
        );
        let faa = SendOp::AtomicFetchAndAdd { remote: R, add: 1 };
        assert_eq!(
            kind(wr(faa, Payload::Sgl(&[A]), 0)),
            ErrorKind::InvalidArgument
        );
        assert_eq!(
            kind(wr(faa, Payload::Sgl(&[B, B]), 0)),
            ErrorKind::InvalidArgument
        );
        assert_eq!(
            kind(wr(faa, Payload::Inline(&[0; 8]), 0)),
            ErrorKind::InvalidArgument
        );
        let huge = Sge {
            length: MAX_SGE_LEN + 1,
            ..A
        };
        assert_eq!(
            kind(wr(SendOp::Send, Payload::Sgl(&[huge]), 0)),
            ErrorKind::InvalidArgument
        );
        assert_eq!(
            kind(wr(SendOp::Send, Payload::Sgl(&[]), 1 << 3)),
            ErrorKind::InvalidArgument
        );
        // Exactly at the limits is fine.
        assert_eq!(
            plan_send(&wr(SendOp::Send, Payload::Sgl(&[A; 4]), 0), &LIM),
            Ok(5)
        );
        assert_eq!(
            plan_send(&wr(SendOp::Send, Payload::Inline(&[0; 64]), 0), &LIM),
            Ok(6)
        );
        assert_eq!(
            plan_send(&wr(SendOp::Send, Payload::Sgl(&[]), 0), &LIM),
            Ok(1)
        );
    }

    #[test]
    fn receive_wqe() {
        let mut buf = vec![u64::MAX; 4 * 8];
        let ptr = NonNull::new(buf.as_mut_ptr().cast::<u8>()).unwrap();
        // SAFETY: `buf` outlives the ring.
        let mut ring = unsafe { WqRing::new(&DmaRegion::new(ptr, 0x1000, 256), 2, 64) };
        let sgl = [A, ZERO, B];
        let w = RecvWr {
            wr_id: 42,
            sg_list: &sgl,
        };
        check_recv(&w, 3).unwrap();
        assert!(check_recv(&w, 2).is_err());
        write_recv(&mut ring, 5, &w, 9);
        let mut want = raw(&RecvWqeHdr {
            wr_id: le64::from_ne(42),
            sge_count: le32::from_ne(2),
            next: le32::from_ne(9),
        });
        want.extend(data(&A));
        want.extend(data(&B));
        let bytes: Vec<u8> = buf.iter().flat_map(|w| w.to_ne_bytes()).collect();
        assert_eq!(&bytes[64..112], &want[..]);
    }
}

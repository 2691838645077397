//! What a `Hal` middleware can know of the rnic device's memory from the
//! calls it passes on: the command queue and EQ 0 (from their base and
//! size registers), and the rings that `CREATE_CQ`, `CREATE_QP`,
//! `CREATE_SRQ` and `CREATE_EQ` placed in the DMA regions. `TraceHal`
//! reads them to decode; `FaultHal` writes them to inject faults.

use std::collections::BTreeMap;
use std::mem::size_of;

use rnic_hw_regs::bar0::{self, EqCtrl};
use rnic_hw_regs::cmd::{
    CmdEntry, CmdHeader, CmdOpcode, CreateCqIn, CreateCqOut, CreateEqIn, CreateEqOut, CreateQpIn,
    CreateQpOut, CreateSrqIn, CreateSrqOut, ObjIn, CMD_IN_SIZE, CMD_OWNER_OFFSET,
    CMD_STATUS_OFFSET, NONE,
};
use rnic_hw_regs::cqe::{Cqe, CQE_SIZE};
use rnic_hw_regs::eqe::{Eqe, EQE_SIZE};
use rnic_hw_regs::le32;
use rnic_hw_regs::wqe::{CtrlSeg, SEND_WQE_BB};
use rnic_queues::owner_bit;
use rnic_verbs::QpType;

use crate::boundary::{Dma, Span};
use crate::decode::read;

/// A QP's queues, from its `CREATE_QP`.
#[derive(Debug)]
struct QpRings {
    ty: Option<QpType>,
    sq: Option<Span>,
    sq_bbs: u32,
    /// Producer index (in basic blocks) up to which WQEs were taken.
    sq_pi: u32,
    rq: RecvRing,
}

/// A receive queue: a QP's own or an SRQ.
#[derive(Debug)]
struct RecvRing {
    ring: Option<Span>,
    wqes: u32,
    stride: usize,
    /// Producer index up to which WQEs were taken.
    pi: u32,
}

impl RecvRing {
    /// The WQEs up to producer index `pi` (low 16 bits) not taken before:
    /// (index, bytes).
    fn take(&mut self, pi: u16) -> Vec<(u32, Vec<u8>)> {
        let Some(ring) = self.ring else {
            return Vec::new();
        };
        let from = self.pi;
        let end = (from & !0xffff) | u32::from(pi);
        let end = if end < from { end + 0x1_0000 } else { end };
        let found = (from..end.min(from + self.wqes))
            .map(|i| {
                let at = (i % self.wqes) as usize * self.stride;
                (i, ring.copy(at, self.stride))
            })
            .collect();
        self.pi = end;
        found
    }
}

/// A ring the device writes entries into, each with an owner bit: a CQ's
/// (from its `CREATE_CQ`) or an EQ's.
#[derive(Debug, Clone, Copy)]
struct OwnedRing {
    ring: Option<Span>,
    log_size: u32,
    /// The next index whose entry has not been taken.
    next: u32,
}

impl OwnedRing {
    /// The entries of `size` bytes, their owner bit at `owner_at`, that
    /// the device wrote since the last call: (index, offset).
    fn take(&mut self, size: usize, owner_at: usize) -> Vec<(u32, usize)> {
        let Some(ring) = self.ring else {
            return Vec::new();
        };
        let mut found = Vec::new();
        loop {
            let at = (self.next as usize % (1usize << self.log_size)) * size;
            let word: le32 = read(&ring.copy(at + owner_at, 4));
            if (word.to_ne() & 1 == 1) != owner_bit(self.next, self.log_size) {
                return found;
            }
            found.push((self.next, at));
            self.next = self.next.wrapping_add(1);
        }
    }
}

/// A command the driver handed over.
pub(crate) struct Handed {
    pub index: u32,
    pub entry: Vec<u8>,
}

/// A command the device handed back.
pub(crate) struct Completed {
    pub index: u32,
    pub op: Option<CmdOpcode>,
    /// The entry as the driver handed it over.
    pub entry: Vec<u8>,
    /// Where it lies.
    pub ring: Span,
}

/// An entry the device wrote to a CQ or an EQ.
pub(crate) struct NewEntry {
    /// The CQN or EQN.
    pub queue: u32,
    pub idx: u32,
    pub ring: Span,
    /// Its offset in the ring.
    pub at: usize,
}

/// The device's memory as the calls show it.
#[derive(Default)]
pub(crate) struct Shadow {
    cmdq_lo: u32,
    cmdq_hi: u32,
    cmdq_log: u32,
    cmdq_pi: u32,
    /// Commands handed over and not yet seen completed.
    pending: Vec<(u32, Option<CmdOpcode>, Vec<u8>)>,
    eq_lo: u32,
    eq_hi: u32,
    qps: BTreeMap<u32, QpRings>,
    srqs: BTreeMap<u32, RecvRing>,
    cqs: BTreeMap<u32, OwnedRing>,
    eqs: BTreeMap<u32, OwnedRing>,
}

impl Shadow {
    /// Where command entry `index` lies.
    pub fn cmd_entry(&self, dma: &Dma, index: u32) -> Option<Span> {
        let base = u64::from(self.cmdq_hi) << 32 | u64::from(self.cmdq_lo);
        let size = size_of::<CmdEntry>();
        let slot = index as usize % (1usize << self.cmdq_log);
        dma.host(base + (slot * size) as u64, size)
    }

    /// Notes a BAR 0 write: the command queue's place, and at `CMDQ_DB`
    /// the commands it hands over.
    pub fn on_bar0_write(&mut self, dma: &Dma, offset: usize, v: u32) -> Vec<Handed> {
        match offset {
            bar0::CMDQ_BASE_LO => self.cmdq_lo = v,
            bar0::CMDQ_BASE_HI => self.cmdq_hi = v,
            bar0::CMDQ_CTRL => self.cmdq_log = v & 0x1f,
            bar0::EQ_BASE_LO => self.eq_lo = v,
            bar0::EQ_BASE_HI => self.eq_hi = v,
            // EQ 0 starts over at index 0 when it is configured.
            bar0::EQ_CTRL => {
                let log = u32::from(EqCtrl::from_bits(le32::from_ne(v)).log_size());
                let base = u64::from(self.eq_hi) << 32 | u64::from(self.eq_lo);
                let eq = OwnedRing {
                    ring: dma.host(base, EQE_SIZE << log),
                    log_size: log,
                    next: 0,
                };
                self.eqs.insert(0, eq);
            }
            _ => {}
        }
        let mut handed = Vec::new();
        if offset != bar0::CMDQ_DB {
            return handed;
        }
        while self.cmdq_pi != v {
            let index = self.cmdq_pi;
            self.cmdq_pi = self.cmdq_pi.wrapping_add(1);
            let Some(ring) = self.cmd_entry(dma, index) else {
                continue;
            };
            let entry = ring.copy(0, ring.len);
            let hdr: CmdHeader = read(&entry);
            let op = CmdOpcode::from_raw(hdr.opcode.to_ne());
            self.pending.push((index, op, entry.clone()));
            handed.push(Handed { index, entry });
        }
        handed
    }

    /// The commands the device has handed back since the last call. The
    /// caller calls [`Shadow::learn`] with each once it is done with it.
    pub fn take_completions(&mut self, dma: &Dma) -> Vec<Completed> {
        let pending = std::mem::take(&mut self.pending);
        let mut done = Vec::new();
        for (index, op, entry) in pending {
            match self.cmd_entry(dma, index) {
                Some(ring) if ring.copy(CMD_OWNER_OFFSET, 1)[0] == 0 => done.push(Completed {
                    index,
                    op,
                    entry,
                    ring,
                }),
                Some(_) => self.pending.push((index, op, entry)),
                None => {}
            }
        }
        done
    }

    /// Notes the objects a completed command made or destroyed: `entry`
    /// as handed over, `done` as handed back.
    pub fn learn(&mut self, dma: &Dma, op: Option<CmdOpcode>, entry: &[u8], done: &[u8]) {
        let hdr = size_of::<CmdHeader>();
        let input = &entry[hdr..];
        let output = &done[hdr + CMD_IN_SIZE..];
        if done[CMD_STATUS_OFFSET] != 0 {
            return;
        }
        match op {
            Some(CmdOpcode::CreateCq) => {
                let i: CreateCqIn = read(input);
                let o: CreateCqOut = read(output);
                let log = i.log_size.to_ne();
                let ring = dma.host(i.buf_iova.to_ne(), CQE_SIZE << log.min(24));
                let cq = OwnedRing {
                    ring,
                    log_size: log,
                    next: 0,
                };
                self.cqs.insert(o.cqn.to_ne(), cq);
            }
            Some(CmdOpcode::CreateQp) => {
                let i: CreateQpIn = read(input);
                let o: CreateQpOut = read(output);
                let sq_bbs = 1u32 << i.log_sq_bbs.to_ne().min(24);
                let rq_wqes = 1u32 << i.log_rq_wqes.to_ne().min(24);
                let stride = 1usize << i.log_rq_stride.min(16);
                let sq = dma.host(i.sq_iova.to_ne(), sq_bbs as usize * SEND_WQE_BB);
                // A QP on an SRQ has no receive queue of its own.
                let rq = (i.srqn.to_ne() == NONE)
                    .then(|| dma.host(i.rq_iova.to_ne(), rq_wqes as usize * stride))
                    .flatten();
                let q = QpRings {
                    ty: QpType::from_raw(i.qp_type),
                    sq,
                    sq_bbs,
                    sq_pi: 0,
                    rq: RecvRing {
                        ring: rq,
                        wqes: rq_wqes,
                        stride,
                        pi: 0,
                    },
                };
                self.qps.insert(o.qpn.to_ne(), q);
            }
            Some(CmdOpcode::CreateSrq) => {
                let i: CreateSrqIn = read(input);
                let o: CreateSrqOut = read(output);
                let wqes = 1u32 << i.log_wqes.to_ne().min(24);
                let stride = 1usize << i.log_stride.to_ne().min(16);
                let srq = RecvRing {
                    ring: dma.host(i.buf_iova.to_ne(), wqes as usize * stride),
                    wqes,
                    stride,
                    pi: 0,
                };
                self.srqs.insert(o.srqn.to_ne(), srq);
            }
            Some(CmdOpcode::CreateEq) => {
                let i: CreateEqIn = read(input);
                let o: CreateEqOut = read(output);
                let log = i.log_size.to_ne().min(24);
                let eq = OwnedRing {
                    ring: dma.host(i.buf_iova.to_ne(), EQE_SIZE << log),
                    log_size: log,
                    next: 0,
                };
                self.eqs.insert(o.eqn.to_ne(), eq);
            }
            Some(CmdOpcode::DestroyCq) => {
                self.cqs.remove(&read::<ObjIn>(input).id.to_ne());
            }
            Some(CmdOpcode::DestroyQp) => {
                self.qps.remove(&read::<ObjIn>(input).id.to_ne());
            }
            Some(CmdOpcode::DestroySrq) => {
                self.srqs.remove(&read::<ObjIn>(input).id.to_ne());
            }
            Some(CmdOpcode::DestroyEq) => {
                self.eqs.remove(&read::<ObjIn>(input).id.to_ne());
            }
            _ => {}
        }
    }

    /// The CQEs the device wrote since the last call, in order per CQ.
    pub fn take_cqes(&mut self) -> Vec<NewEntry> {
        let owner = std::mem::offset_of!(Cqe, owner);
        take(&mut self.cqs, CQE_SIZE, owner)
    }

    /// The EQEs the device wrote since the last call, in order per EQ.
    pub fn take_eqes(&mut self) -> Vec<NewEntry> {
        let owner = std::mem::offset_of!(Eqe, owner);
        take(&mut self.eqs, EQE_SIZE, owner)
    }

    /// The type of QP `qpn`, if known.
    pub fn qp_type(&self, qpn: u32) -> Option<QpType> {
        self.qps.get(&qpn).and_then(|q| q.ty)
    }

    /// The send WQEs of QP `qpn` up to producer index `pi` (low 16 bits,
    /// in basic blocks) not taken before: (index, bytes).
    pub fn send_wqes(&mut self, qpn: u32, pi: u16) -> Vec<(u32, Vec<u8>)> {
        let Some(q) = self.qps.get_mut(&qpn) else {
            return Vec::new();
        };
        let Some(ring) = q.sq else {
            return Vec::new();
        };
        let mut at = q.sq_pi;
        let end = (at & !0xffff) | u32::from(pi);
        let end = if end < at { end + 0x1_0000 } else { end };
        let mut found = Vec::new();
        while at < end && found.len() < 4096 {
            let off = (at % q.sq_bbs) as usize * SEND_WQE_BB;
            let ctrl: CtrlSeg = read(&ring.copy(off, 16));
            let nbb = (usize::from(ctrl.word.ds()) * 16)
                .div_ceil(SEND_WQE_BB)
                .max(1);
            found.push((at, ring.copy(off, nbb * SEND_WQE_BB)));
            at += nbb as u32;
        }
        q.sq_pi = at;
        found
    }

    /// A BlueFlame write published one basic block of QP `qpn`'s SQ.
    pub fn blueflame_taken(&mut self, qpn: u32) {
        if let Some(q) = self.qps.get_mut(&qpn) {
            q.sq_pi = q.sq_pi.wrapping_add(1);
        }
    }

    /// The receive WQEs of QP `qpn` up to producer index `pi` not taken
    /// before: (index, bytes).
    pub fn recv_wqes(&mut self, qpn: u32, pi: u16) -> Vec<(u32, Vec<u8>)> {
        self.qps
            .get_mut(&qpn)
            .map_or_else(Vec::new, |q| q.rq.take(pi))
    }

    /// The receive WQEs of SRQ `srqn` up to producer index `pi` not taken
    /// before: (index, bytes).
    pub fn srq_wqes(&mut self, srqn: u32, pi: u16) -> Vec<(u32, Vec<u8>)> {
        self.srqs
            .get_mut(&srqn)
            .map_or_else(Vec::new, |q| q.take(pi))
    }
}

/// The entries written to the rings of `rings` since the last call.
fn take(rings: &mut BTreeMap<u32, OwnedRing>, size: usize, owner_at: usize) -> Vec<NewEntry> {
    let mut found = Vec::new();
    for (&queue, r) in rings.iter_mut() {
        let Some(ring) = r.ring else { continue };
        for (idx, at) in r.take(size, owner_at) {
            found.push(NewEntry {
                queue,
                idx,
                ring,
                at,
            });
        }
    }
    found
}

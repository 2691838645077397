//! [`TraceHal`]: a `Hal` that records what crosses it, decoded.
//!
//! Wrapped around any platform (the model's or VFIO's), it passes every
//! call on and records an [`Event`] for:
//!
//! - every BAR access: BAR 0 registers by name with their decoded value,
//!   doorbell-page writes as doorbells (`SQ doorbell qpn 2 pi 5`), and
//!   BlueFlame writes with the WQE they carry;
//! - every command the driver hands over (at its `CMDQ_DB` write), with
//!   its decoded input, and its completion, with status and output, when
//!   the device has written it;
//! - every send WQE (at its SQ doorbell) and receive WQE (at its RQ
//!   doorbell), read from the rings that `CREATE_QP` placed;
//! - every CQE the device writes to a ring `CREATE_CQ` placed;
//! - DMA allocations and mappings.
//!
//! A Hal sees only calls: the device's writes (command completions,
//! CQEs) are found by looking at the rings at the driver's next call,
//! which for a waiting driver is its next `now_ns` or `relax`. Events go
//! on a [`Timeline`], which other sources share (a wire tap's frames, the
//! peer's `TraceHal`, the application's notes), and from it to `log`
//! (target `rnic_trace`, level debug) and to its [`Sink`]s.

use std::collections::BTreeMap;
use std::io::Write;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard};

use rnic_hw_regs::bar0;
use rnic_hw_regs::cmd::{
    CmdEntry, CmdOpcode, CreateCqIn, CreateCqOut, CreateQpIn, CreateQpOut, ObjIn, CMD_IN_SIZE,
    CMD_OWNER_OFFSET, CMD_STATUS_OFFSET, NONE,
};
use rnic_hw_regs::cqe::{Cqe, CQE_SIZE};
use rnic_hw_regs::owner_bit;
use rnic_hw_regs::pci::{BAR_DOORBELL, BAR_REGS};
use rnic_hw_regs::uar::{self, WqDoorbell};
use rnic_hw_regs::verbs::QpType;
use rnic_hw_regs::wqe::{CtrlSeg, SEND_WQE_BB};
use rnic_queues::{DmaRegion, Hal, HalError};
use serde::Serialize;

use crate::decode::{self, read, Decoded};

/// Where an event happened, the lanes of a sequence diagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Lane {
    /// What the application says it does ([`Timeline::note`]).
    App,
    /// The driver's own calls: DMA memory, register reads.
    Driver,
    /// Register writes and doorbells: the driver telling the device.
    Doorbell,
    /// What the device wrote: command completions, CQEs.
    Device,
    /// Frames on the NIC's wire.
    Wire,
    /// Everything of the peer's NIC, when both are traced on one
    /// timeline ([`TraceHal::peer`]).
    Peer,
}

/// One recorded event.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Event {
    /// Its order in this trace, from 0.
    pub seq: u64,
    /// Nanoseconds since the timeline began.
    pub t_ns: u64,
    /// Its lane.
    pub lane: Lane,
    /// What it is: `mmio_read`, `mmio_write`, `doorbell`, `blueflame`,
    /// `cmd`, `cmd_done`, `wqe`, `rwqe`, `cqe`, `dma`, `frame`.
    pub kind: &'static str,
    /// The decoded line.
    pub text: String,
    /// Its decoded fields.
    pub fields: Vec<(String, String)>,
    /// Its bytes, in hex (empty for a plain register access).
    pub raw: String,
}

/// Where events go besides `log`.
pub trait Sink: Send + Sync {
    /// Takes one event.
    fn record(&self, e: &Event);
}

/// Keeps every event, for a program or a test to read.
#[derive(Debug, Default)]
pub struct Memory(Mutex<Vec<Event>>);

impl Memory {
    /// The events so far.
    pub fn events(&self) -> Vec<Event> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

impl Sink for Memory {
    fn record(&self, e: &Event) {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(e.clone());
    }
}

/// Writes each event as a line of JSON (`Event`'s fields), for
/// `rnic-trace` and other tools.
pub struct JsonLines<W: Write + Send>(Mutex<W>);

impl<W: Write + Send> JsonLines<W> {
    /// Events go to `w`.
    pub fn new(w: W) -> Self {
        JsonLines(Mutex::new(w))
    }
}

impl<W: Write + Send> Sink for JsonLines<W> {
    fn record(&self, e: &Event) {
        let mut w = self.0.lock().unwrap_or_else(|e| e.into_inner());
        if let Ok(line) = serde_json::to_string(e) {
            // A trace that cannot be written is lost, not the program.
            let _ = writeln!(w, "{line}");
            let _ = w.flush();
        }
    }
}

/// One timeline of events, from any number of sources (the [`TraceHal`]s
/// of one or two NICs, a wire tap, the application's notes), numbered in
/// the order they are recorded.
pub struct Timeline {
    start: std::time::Instant,
    seq: Mutex<u64>,
    sinks: Vec<Arc<dyn Sink>>,
}

impl Timeline {
    /// A timeline whose events go to `log` (target `rnic_trace`, level
    /// debug) and to `sinks`.
    pub fn new(sinks: Vec<Arc<dyn Sink>>) -> Arc<Self> {
        Arc::new(Timeline {
            start: std::time::Instant::now(),
            seq: Mutex::new(0),
            sinks,
        })
    }

    /// Records an event.
    pub fn record(&self, lane: Lane, kind: &'static str, d: Decoded, raw: &[u8]) {
        // The lock orders the events as they are numbered.
        let mut seq = self.seq.lock().unwrap_or_else(|e| e.into_inner());
        let e = Event {
            seq: *seq,
            t_ns: self.start.elapsed().as_nanos() as u64,
            lane,
            kind,
            text: d.text,
            fields: d.fields,
            raw: decode::hex(raw),
        };
        *seq += 1;
        log::debug!(target: "rnic_trace", "{:?} {}", e.lane, e.text);
        for s in &self.sinks {
            s.record(&e);
        }
    }

    /// Records what the application is doing, on its lane.
    pub fn note(&self, text: impl Into<String>) {
        let d = Decoded {
            text: text.into(),
            fields: Vec::new(),
        };
        self.record(Lane::App, "note", d, &[]);
    }

    /// Records a frame of the wire, described by `text` (rnic-emu's
    /// `wire::frame::describe`), with its bytes.
    pub fn frame(&self, tx: bool, text: String, bytes: &[u8]) {
        let d = Decoded {
            text: format!("FRAME {} {text}", if tx { "tx" } else { "rx" }),
            fields: vec![("len".into(), bytes.len().to_string())],
        };
        self.record(Lane::Wire, "frame", d, bytes);
    }
}

/// A ring of DMA memory the trace reads.
#[derive(Debug, Clone, Copy)]
struct Ring {
    /// Host address of the ring's start.
    vaddr: usize,
    /// Its length in bytes.
    len: usize,
}

/// A QP's queues, from its `CREATE_QP`.
#[derive(Debug)]
struct QpRings {
    ty: Option<QpType>,
    sq: Option<Ring>,
    sq_bbs: u32,
    /// Producer index (in basic blocks) up to which WQEs were recorded.
    sq_pi: u32,
    rq: Option<Ring>,
    rq_wqes: u32,
    rq_stride: usize,
    rq_pi: u32,
}

/// A CQ's ring, from its `CREATE_CQ`.
#[derive(Debug, Clone, Copy)]
struct CqRing {
    ring: Option<Ring>,
    log_size: u32,
    /// The next index whose CQE has not been recorded.
    next: u32,
}

/// What the trace knows of the device's memory and objects.
#[derive(Default)]
struct State {
    /// DMA regions by IOVA: (host address, length).
    dma: BTreeMap<u64, (usize, usize)>,
    cmdq_lo: u32,
    cmdq_hi: u32,
    cmdq_log: u32,
    cmdq_pi: u32,
    /// Commands handed over and not yet seen completed: (index, opcode,
    /// the entry as handed over).
    pending: Vec<(u32, Option<CmdOpcode>, Vec<u8>)>,
    qps: BTreeMap<u32, QpRings>,
    cqs: BTreeMap<u32, CqRing>,
}

impl State {
    /// The host address of `len` bytes at `iova`, if they lie in one DMA
    /// region.
    fn host(&self, iova: u64, len: usize) -> Option<Ring> {
        let (&base, &(vaddr, rlen)) = self.dma.range(..=iova).next_back()?;
        let off = usize::try_from(iova - base).ok()?;
        (off.checked_add(len)? <= rlen).then_some(Ring {
            vaddr: vaddr + off,
            len,
        })
    }
}

/// Copies `len` bytes at offset `at` (wrapping) of `ring`.
fn copy(ring: Ring, at: usize, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| {
            let p = ring.vaddr + (at + i) % ring.len;
            // SAFETY: `p` is inside a DMA region the platform handed out
            // and has not freed (regions leave the map at dma_free). The
            // device may be writing it: a volatile byte read sees some
            // value, which only the decoded text depends on.
            unsafe { std::ptr::read_volatile(p as *const u8) }
        })
        .collect()
}

/// A `Hal` that records what crosses it (see the module documentation).
pub struct TraceHal<H: Hal> {
    inner: H,
    state: Mutex<State>,
    timeline: Arc<Timeline>,
    /// The peer's: every event on [`Lane::Peer`].
    peer: bool,
}

impl<H: Hal> TraceHal<H> {
    /// Wraps `inner`, recording on `timeline`.
    pub fn new(inner: H, timeline: Arc<Timeline>) -> Self {
        TraceHal {
            inner,
            state: Mutex::new(State::default()),
            timeline,
            peer: false,
        }
    }

    /// Wraps the peer NIC's `inner`, recording on `timeline`'s peer lane.
    pub fn peer(inner: H, timeline: Arc<Timeline>) -> Self {
        TraceHal {
            peer: true,
            ..Self::new(inner, timeline)
        }
    }

    /// The timeline it records on.
    pub fn timeline(&self) -> &Arc<Timeline> {
        &self.timeline
    }

    /// The platform inside.
    pub fn inner(&self) -> &H {
        &self.inner
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records an event. The state's lock is held: events of this NIC are
    /// recorded in the order they happen.
    fn emit(&self, _st: &mut State, lane: Lane, kind: &'static str, d: Decoded, raw: &[u8]) {
        let lane = if self.peer { Lane::Peer } else { lane };
        self.timeline.record(lane, kind, d, raw);
    }

    /// Records what the device wrote since the last look: completed
    /// commands and new CQEs.
    fn look(&self, st: &mut State) {
        let pending = std::mem::take(&mut st.pending);
        for (index, op, entry) in pending {
            let Some(ring) = self.cmd_entry(st, index) else {
                continue;
            };
            let now = copy(ring, 0, ring.len);
            if now[CMD_OWNER_OFFSET] != 0 {
                st.pending.push((index, op, entry));
                continue;
            }
            self.emit(
                st,
                Lane::Device,
                "cmd_done",
                decode::command_done(&now, index, op),
                &now,
            );
            self.learn(st, op, &entry, &now);
        }
        let cqns: Vec<u32> = st.cqs.keys().copied().collect();
        for cqn in cqns {
            while let Some(&CqRing {
                ring: Some(ring),
                next,
                log_size: log,
            }) = st.cqs.get(&cqn)
            {
                let size = 1usize << log;
                let at = (next as usize % size) * CQE_SIZE;
                let bytes = copy(ring, at, CQE_SIZE);
                let c: Cqe = read(&bytes);
                if c.owner.owner() != owner_bit(next, log) {
                    break;
                }
                let d = decode::cqe(cqn, next, &bytes);
                self.emit(st, Lane::Device, "cqe", d, &bytes);
                if let Some(cq) = st.cqs.get_mut(&cqn) {
                    cq.next = next.wrapping_add(1);
                }
            }
        }
    }

    /// Where command entry `index` lies.
    fn cmd_entry(&self, st: &State, index: u32) -> Option<Ring> {
        let base = u64::from(st.cmdq_hi) << 32 | u64::from(st.cmdq_lo);
        let size = std::mem::size_of::<CmdEntry>();
        let slot = index as usize % (1usize << st.cmdq_log);
        st.host(base + (slot * size) as u64, size)
    }

    /// Notes the objects a completed command made or destroyed.
    fn learn(&self, st: &mut State, op: Option<CmdOpcode>, entry: &[u8], done: &[u8]) {
        use std::mem::size_of;
        let hdr = size_of::<rnic_hw_regs::cmd::CmdHeader>();
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
                let ring = st.host(i.buf_iova.to_ne(), CQE_SIZE << log.min(24));
                st.cqs.insert(
                    o.cqn.to_ne(),
                    CqRing {
                        ring,
                        log_size: log,
                        next: 0,
                    },
                );
            }
            Some(CmdOpcode::CreateQp) => {
                let i: CreateQpIn = read(input);
                let o: CreateQpOut = read(output);
                let sq_bbs = 1u32 << i.log_sq_bbs.to_ne().min(24);
                let rq_wqes = 1u32 << i.log_rq_wqes.to_ne().min(24);
                let stride = 1usize << i.log_rq_stride.min(16);
                let sq = st.host(i.sq_iova.to_ne(), sq_bbs as usize * SEND_WQE_BB);
                // A QP on an SRQ has no receive queue of its own.
                let rq = (i.srqn.to_ne() == NONE)
                    .then(|| st.host(i.rq_iova.to_ne(), rq_wqes as usize * stride))
                    .flatten();
                st.qps.insert(
                    o.qpn.to_ne(),
                    QpRings {
                        ty: QpType::from_raw(i.qp_type),
                        sq,
                        sq_bbs,
                        sq_pi: 0,
                        rq,
                        rq_wqes,
                        rq_stride: stride,
                        rq_pi: 0,
                    },
                );
            }
            Some(CmdOpcode::DestroyCq) => {
                st.cqs.remove(&read::<ObjIn>(input).id.to_ne());
            }
            Some(CmdOpcode::DestroyQp) => {
                st.qps.remove(&read::<ObjIn>(input).id.to_ne());
            }
            _ => {}
        }
    }

    /// Records the send WQEs of QP `qpn` up to producer index `pi` (low
    /// 16 bits, in basic blocks).
    fn send_wqes(&self, st: &mut State, qpn: u32, pi: u16) {
        let Some(q) = st.qps.get(&qpn) else { return };
        let (Some(ring), ty, bbs) = (q.sq, q.ty, q.sq_bbs) else {
            return;
        };
        let mut at = q.sq_pi;
        let end = (at & !0xffff) | u32::from(pi);
        let end = if end < at { end + 0x1_0000 } else { end };
        let mut found = Vec::new();
        while at < end && found.len() < 4096 {
            let off = (at % bbs) as usize * SEND_WQE_BB;
            let ctrl: CtrlSeg = read(&copy(ring, off, 16));
            let nbb = (usize::from(ctrl.word.ds()) * 16)
                .div_ceil(SEND_WQE_BB)
                .max(1);
            let bytes = copy(ring, off, nbb * SEND_WQE_BB);
            found.push((at, bytes));
            at += nbb as u32;
        }
        if let Some(q) = st.qps.get_mut(&qpn) {
            q.sq_pi = at;
        }
        for (idx, bytes) in found {
            self.emit(
                st,
                Lane::Doorbell,
                "wqe",
                decode::send_wqe(qpn, idx, ty, &bytes),
                &bytes,
            );
        }
    }

    /// Records the receive WQEs of QP `qpn` up to producer index `pi`.
    fn recv_wqes(&self, st: &mut State, qpn: u32, pi: u16) {
        let Some(q) = st.qps.get(&qpn) else { return };
        let (Some(ring), n, stride) = (q.rq, q.rq_wqes, q.rq_stride) else {
            return;
        };
        let from = q.rq_pi;
        let end = (from & !0xffff) | u32::from(pi);
        let end = if end < from { end + 0x1_0000 } else { end };
        let found: Vec<(u32, Vec<u8>)> = (from..end.min(from + n))
            .map(|i| (i, copy(ring, (i % n) as usize * stride, stride)))
            .collect();
        if let Some(q) = st.qps.get_mut(&qpn) {
            q.rq_pi = end;
        }
        for (idx, bytes) in found {
            let d = decode::recv_wqe(&format!("qpn {qpn}"), idx, &bytes);
            self.emit(st, Lane::Doorbell, "rwqe", d, &bytes);
        }
    }

    fn write(&self, bar: u8, offset: usize, value: u64, width: u8) {
        let mut st = self.state();
        self.look(&mut st);
        if bar == BAR_REGS {
            let v = value as u32;
            match offset {
                bar0::CMDQ_BASE_LO => st.cmdq_lo = v,
                bar0::CMDQ_BASE_HI => st.cmdq_hi = v,
                bar0::CMDQ_CTRL => st.cmdq_log = v & 0x1f,
                _ => {}
            }
            self.emit(
                &mut st,
                Lane::Doorbell,
                "mmio_write",
                decode::bar0_access(offset, v, true),
                &[],
            );
            if offset == bar0::CMDQ_DB {
                while st.cmdq_pi != v {
                    let index = st.cmdq_pi;
                    st.cmdq_pi = st.cmdq_pi.wrapping_add(1);
                    let Some(ring) = self.cmd_entry(&st, index) else {
                        continue;
                    };
                    let entry = copy(ring, 0, ring.len);
                    let (op, d) = decode::command(&entry, index);
                    self.emit(&mut st, Lane::Doorbell, "cmd", d, &entry[..64]);
                    st.pending.push((index, op, entry));
                }
            }
            return;
        }
        if bar == BAR_DOORBELL && width == 8 {
            let d = decode::doorbell(offset, value);
            self.emit(&mut st, Lane::Doorbell, "doorbell", d, &value.to_le_bytes());
            let db = WqDoorbell::from_bits(value);
            match offset % uar::UAR_PAGE_SIZE {
                uar::SQ_DB => self.send_wqes(&mut st, db.qpn(), db.pi()),
                uar::RQ_DB => self.recv_wqes(&mut st, db.qpn(), db.pi()),
                _ => {}
            }
            return;
        }
        let d = Decoded {
            text: format!("MMIO BAR{bar}+{offset:#x} <- {value:#x}"),
            fields: Vec::new(),
        };
        self.emit(&mut st, Lane::Doorbell, "mmio_write", d, &[]);
    }
}

// SAFETY: every call goes to `inner`, which keeps the trait's promises;
// the trace only reads memory `inner` handed out and has not taken back.
unsafe impl<H: Hal> Hal for TraceHal<H> {
    fn dma_alloc(&self, len: usize) -> Result<DmaRegion, HalError> {
        let r = self.inner.dma_alloc(len)?;
        let mut st = self.state();
        st.dma
            .insert(r.iova(), (r.vaddr().as_ptr() as usize, r.len()));
        let d = Decoded {
            text: format!("DMA alloc {} B at iova {:#x}", r.len(), r.iova()),
            fields: vec![("iova".into(), format!("{:#x}", r.iova()))],
        };
        self.emit(&mut st, Lane::Driver, "dma", d, &[]);
        Ok(r)
    }

    unsafe fn dma_free(&self, region: DmaRegion) {
        let mut st = self.state();
        st.dma.remove(&region.iova());
        let d = Decoded {
            text: format!("DMA free iova {:#x}", region.iova()),
            fields: Vec::new(),
        };
        self.emit(&mut st, Lane::Driver, "dma", d, &[]);
        drop(st);
        // SAFETY: the caller's promise, passed on.
        unsafe { self.inner.dma_free(region) }
    }

    unsafe fn dma_map(&self, vaddr: NonNull<u8>, len: usize) -> Result<u64, HalError> {
        // SAFETY: the caller's promise, passed on.
        let iova = unsafe { self.inner.dma_map(vaddr, len) }?;
        let mut st = self.state();
        let d = Decoded {
            text: format!("DMA map {len} B at iova {iova:#x}"),
            fields: vec![("iova".into(), format!("{iova:#x}"))],
        };
        self.emit(&mut st, Lane::Driver, "dma", d, &[]);
        Ok(iova)
    }

    unsafe fn dma_unmap(&self, iova: u64, len: usize) -> Result<(), HalError> {
        {
            let mut st = self.state();
            let d = Decoded {
                text: format!("DMA unmap {len} B at iova {iova:#x}"),
                fields: Vec::new(),
            };
            self.emit(&mut st, Lane::Driver, "dma", d, &[]);
        }
        // SAFETY: the caller's promise, passed on.
        unsafe { self.inner.dma_unmap(iova, len) }
    }

    unsafe fn dma_unmap_retired(&self, iova: u64, len: usize) -> Result<(), HalError> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.inner.dma_unmap_retired(iova, len) }
    }

    fn mmio_read32(&self, bar: u8, offset: usize) -> u32 {
        let v = self.inner.mmio_read32(bar, offset);
        let mut st = self.state();
        self.look(&mut st);
        if bar == BAR_REGS {
            self.emit(
                &mut st,
                Lane::Driver,
                "mmio_read",
                decode::bar0_access(offset, v, false),
                &[],
            );
        }
        v
    }

    fn mmio_write32(&self, bar: u8, offset: usize, value: u32) {
        // Recorded before it is passed on: the device acts on it at once,
        // and a device that runs in the caller's thread has done so when
        // the call returns.
        self.write(bar, offset, value.into(), 4);
        self.inner.mmio_write32(bar, offset, value);
        self.look(&mut self.state());
    }

    fn mmio_write64(&self, bar: u8, offset: usize, value: u64) {
        self.write(bar, offset, value, 8);
        self.inner.mmio_write64(bar, offset, value);
        self.look(&mut self.state());
    }

    fn mmio_write_block(&self, bar: u8, offset: usize, block: &[u64; 8]) -> Result<(), HalError> {
        {
            let mut st = self.state();
            self.look(&mut st);
            let db = WqDoorbell::from_bits(block[0]);
            let bytes: Vec<u8> = block.iter().flat_map(|w| w.to_le_bytes()).collect();
            let ty = st.qps.get(&db.qpn()).and_then(|q| q.ty);
            let w = decode::send_wqe(
                db.qpn(),
                u32::from(db.pi()).wrapping_sub(1),
                ty,
                &bytes[8..56],
            );
            let d = Decoded {
                text: format!(
                    "MMIO BAR{bar}+{offset:#x} BlueFlame qpn {} pi {}: {}",
                    db.qpn(),
                    db.pi(),
                    w.text
                ),
                fields: w.fields,
            };
            self.emit(&mut st, Lane::Doorbell, "blueflame", d, &bytes);
        }
        let r = self.inner.mmio_write_block(bar, offset, block);
        let mut st = self.state();
        // A refused write published nothing: the driver rings the doorbell
        // for the same WQE.
        if r.is_ok() {
            let qpn = WqDoorbell::from_bits(block[0]).qpn();
            if let Some(q) = st.qps.get_mut(&qpn) {
                q.sq_pi = q.sq_pi.wrapping_add(1);
            }
        }
        self.look(&mut st);
        r
    }

    fn now_ns(&self) -> u64 {
        let t = self.inner.now_ns();
        let mut st = self.state();
        self.look(&mut st);
        t
    }

    fn wait_irq(&self, vector: u16, timeout_ns: u64) -> Result<bool, HalError> {
        let r = self.inner.wait_irq(vector, timeout_ns);
        let mut st = self.state();
        self.look(&mut st);
        r
    }

    fn irq_eventfd(&self, vector: u16) -> Option<i32> {
        self.inner.irq_eventfd(vector)
    }

    fn relax(&self) {
        self.inner.relax();
        let mut st = self.state();
        self.look(&mut st);
    }
}

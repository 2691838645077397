//! [`TraceHal`]: a `Hal` that records what crosses it, decoded.
//!
//! Wrapped around any platform (the model's or VFIO's), it passes every
//! call on and records an [`Event`] for every DMA allocation and mapping,
//! and, decoded by the device's [`Boundary`] ([`Rnic`](crate::Rnic),
//! [`Pvrdma`](crate::Pvrdma)):
//!
//! - every register access by name with its decoded value, doorbell
//!   writes as doorbells (`SQ doorbell qpn 2 pi 5`), and BlueFlame writes
//!   with the WQE they carry;
//! - every command the driver hands over (at its doorbell register), with
//!   its decoded input, and its completion or response, with status and
//!   output, when the device has written it;
//! - every send and receive WQE at its doorbell, read from the rings the
//!   create commands placed;
//! - every CQE and event entry the device writes to those rings.
//!
//! A Hal sees only calls: the device's writes (command completions,
//! CQEs) are found by looking at the rings at the driver's next call,
//! which for a waiting driver is its next `now_ns` or `relax`. Events go
//! on a [`Timeline`], which other sources share (a wire tap's frames, the
//! peer's `TraceHal`, the application's notes), and from it to `log`
//! (target `rnic_trace`, level debug) and to its [`Sink`]s.

use std::io::Write;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard};

use rnic_queues::{DmaRegion, Hal, HalError};
use serde::Serialize;

use crate::boundary::{Boundary, Dma, Seen};
use crate::decode::{self, Decoded};
use crate::rnic::Rnic;

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
    /// `refused` (a BlueFlame write the platform refused), `cmd`,
    /// `cmd_done`, `wqe`, `rwqe`, `cqe`, `eqe`, `dma`, `frame`.
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

/// Prints each event on standard output as it is recorded, indented
/// under the program's own lines: `      | doorbell MMIO BAR2+0x800 SQ
/// doorbell qpn 2 pi 1` (the walkthrough examples' `--registers`).
pub struct Print;

impl Sink for Print {
    fn record(&self, e: &Event) {
        let lane = format!("{:?}", e.lane).to_lowercase();
        println!("      | {lane:<8} {}", e.text);
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

    /// Whether anything takes its events: a sink, or `log` at debug for
    /// target `rnic_trace`. A `TraceHal` on a timeline nobody reads passes
    /// calls on and does nothing else.
    pub fn active(&self) -> bool {
        !self.sinks.is_empty() || log::log_enabled!(target: "rnic_trace", log::Level::Debug)
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

/// A `Hal` that records what crosses it (see the module documentation),
/// decoded as device kind `B` defines it.
pub struct TraceHal<H: Hal, B: Boundary = Rnic> {
    inner: H,
    state: Mutex<State<B>>,
    timeline: Arc<Timeline>,
    /// The peer's: every event on [`Lane::Peer`].
    peer: bool,
    /// Whether the timeline is read ([`Timeline::active`]); if not, calls
    /// are only passed on.
    on: bool,
}

/// What a trace knows: the DMA regions and the device's shadow.
#[derive(Default)]
struct State<B> {
    dma: Dma,
    device: B,
}

impl<H: Hal> TraceHal<H, Rnic> {
    /// Wraps `inner`, an rnic device's platform, recording on `timeline`.
    pub fn new(inner: H, timeline: Arc<Timeline>) -> Self {
        Self::of(inner, timeline)
    }

    /// Wraps the peer NIC's `inner`, recording on `timeline`'s peer lane.
    pub fn peer(inner: H, timeline: Arc<Timeline>) -> Self {
        TraceHal {
            peer: true,
            ..Self::new(inner, timeline)
        }
    }
}

impl<H: Hal, B: Boundary> TraceHal<H, B> {
    /// Wraps `inner`, the platform of a device of kind `B`, recording on
    /// `timeline`: `TraceHal::<_, Pvrdma>::of(vfio, timeline)`.
    pub fn of(inner: H, timeline: Arc<Timeline>) -> Self {
        TraceHal {
            on: timeline.active(),
            inner,
            state: Mutex::new(State::default()),
            timeline,
            peer: false,
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

    fn state(&self) -> MutexGuard<'_, State<B>> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records what was seen. The state's lock is held: events of this
    /// NIC are recorded in the order they happen.
    fn emit(&self, _st: &mut State<B>, seen: Vec<Seen>) {
        for s in seen {
            let lane = if self.peer { Lane::Peer } else { s.lane };
            self.timeline.record(lane, s.kind, s.decoded, &s.raw);
        }
    }

    /// Records one platform event of the driver's.
    fn driver(&self, st: &mut State<B>, text: String, fields: Vec<(String, String)>) {
        let seen = Seen {
            lane: Lane::Driver,
            kind: "dma",
            decoded: Decoded { text, fields },
            raw: Vec::new(),
        };
        self.emit(st, vec![seen]);
    }

    /// Records what the device wrote since the last look.
    fn look(&self, st: &mut State<B>) {
        let mut seen = Vec::new();
        st.device.look(&st.dma, &mut seen);
        self.emit(st, seen);
    }

    fn write(&self, bar: u8, offset: usize, value: u64, width: u8) {
        let mut st = self.state();
        self.look(&mut st);
        let mut seen = Vec::new();
        let State { dma, device } = &mut *st;
        device.write(dma, bar, offset, value, width, &mut seen);
        self.emit(&mut st, seen);
    }
}

// SAFETY: every call goes to `inner`, which keeps the trait's promises;
// the trace only reads memory `inner` handed out and has not taken back.
unsafe impl<H: Hal, B: Boundary> Hal for TraceHal<H, B> {
    fn dma_alloc(&self, len: usize) -> Result<DmaRegion, HalError> {
        if !self.on {
            return self.inner.dma_alloc(len);
        }
        let r = self.inner.dma_alloc(len)?;
        let mut st = self.state();
        st.dma.alloc(&r);
        let text = format!("DMA alloc {} B at iova {:#x}", r.len(), r.iova());
        self.driver(
            &mut st,
            text,
            vec![("iova".into(), format!("{:#x}", r.iova()))],
        );
        Ok(r)
    }

    unsafe fn dma_free(&self, region: DmaRegion) {
        if !self.on {
            // SAFETY: the caller's promise, passed on.
            return unsafe { self.inner.dma_free(region) };
        }
        let mut st = self.state();
        st.dma.free(region.iova());
        let text = format!("DMA free iova {:#x}", region.iova());
        self.driver(&mut st, text, Vec::new());
        drop(st);
        // SAFETY: the caller's promise, passed on.
        unsafe { self.inner.dma_free(region) }
    }

    unsafe fn dma_map(&self, vaddr: NonNull<u8>, len: usize) -> Result<u64, HalError> {
        if !self.on {
            // SAFETY: the caller's promise, passed on.
            return unsafe { self.inner.dma_map(vaddr, len) };
        }
        // SAFETY: the caller's promise, passed on.
        let iova = unsafe { self.inner.dma_map(vaddr, len) }?;
        let mut st = self.state();
        let text = format!("DMA map {len} B at iova {iova:#x}");
        self.driver(&mut st, text, vec![("iova".into(), format!("{iova:#x}"))]);
        Ok(iova)
    }

    unsafe fn dma_unmap(&self, iova: u64, len: usize) -> Result<(), HalError> {
        if !self.on {
            // SAFETY: the caller's promise, passed on.
            return unsafe { self.inner.dma_unmap(iova, len) };
        }
        {
            let mut st = self.state();
            let text = format!("DMA unmap {len} B at iova {iova:#x}");
            self.driver(&mut st, text, Vec::new());
        }
        // SAFETY: the caller's promise, passed on.
        unsafe { self.inner.dma_unmap(iova, len) }
    }

    unsafe fn dma_unmap_retired(&self, iova: u64, len: usize) -> Result<(), HalError> {
        // SAFETY: the caller's promise, passed on.
        let r = unsafe { self.inner.dma_unmap_retired(iova, len) };
        if self.on && r.is_ok() {
            let mut st = self.state();
            let text = format!("DMA retire {len} B at iova {iova:#x}");
            self.driver(&mut st, text, Vec::new());
        }
        r
    }

    fn mmio_read32(&self, bar: u8, offset: usize) -> u32 {
        if !self.on {
            return self.inner.mmio_read32(bar, offset);
        }
        let v = self.inner.mmio_read32(bar, offset);
        let mut st = self.state();
        self.look(&mut st);
        let mut seen = Vec::new();
        let State { dma, device } = &mut *st;
        device.read(dma, bar, offset, v, &mut seen);
        self.emit(&mut st, seen);
        v
    }

    fn mmio_write32(&self, bar: u8, offset: usize, value: u32) {
        if !self.on {
            return self.inner.mmio_write32(bar, offset, value);
        }
        // Recorded before it is passed on: the device acts on it at once,
        // and a device that runs in the caller's thread has done so when
        // the call returns.
        self.write(bar, offset, value.into(), 4);
        self.inner.mmio_write32(bar, offset, value);
        self.look(&mut self.state());
    }

    fn mmio_write64(&self, bar: u8, offset: usize, value: u64) {
        if !self.on {
            return self.inner.mmio_write64(bar, offset, value);
        }
        self.write(bar, offset, value, 8);
        self.inner.mmio_write64(bar, offset, value);
        self.look(&mut self.state());
    }

    fn mmio_write_block(&self, bar: u8, offset: usize, block: &[u64; 8]) -> Result<(), HalError> {
        if !self.on {
            return self.inner.mmio_write_block(bar, offset, block);
        }
        {
            let mut st = self.state();
            self.look(&mut st);
            let mut seen = Vec::new();
            st.device.block(bar, offset, block, None, &mut seen);
            self.emit(&mut st, seen);
        }
        let r = self.inner.mmio_write_block(bar, offset, block);
        let mut st = self.state();
        let mut seen = Vec::new();
        st.device.block(bar, offset, block, Some(&r), &mut seen);
        self.emit(&mut st, seen);
        self.look(&mut st);
        r
    }

    fn now_ns(&self) -> u64 {
        if !self.on {
            return self.inner.now_ns();
        }
        let t = self.inner.now_ns();
        let mut st = self.state();
        self.look(&mut st);
        t
    }

    fn wait_irq(&self, vector: u16, timeout_ns: u64) -> Result<bool, HalError> {
        if !self.on {
            return self.inner.wait_irq(vector, timeout_ns);
        }
        let r = self.inner.wait_irq(vector, timeout_ns);
        let mut st = self.state();
        self.look(&mut st);
        r
    }

    fn irq_eventfd(&self, vector: u16) -> Option<i32> {
        self.inner.irq_eventfd(vector)
    }

    fn bar_address(&self, bar: u8) -> Option<u64> {
        self.inner.bar_address(bar)
    }

    fn relax(&self) {
        self.waited(H::relax);
    }

    fn poll_empty(&self) {
        self.waited(H::poll_empty);
    }
}

impl<H: Hal, B: Boundary> TraceHal<H, B> {
    /// Passes a wait on, then records what the device did meanwhile (an
    /// emulated NIC may run in the waiting thread).
    fn waited(&self, wait: impl FnOnce(&H)) {
        wait(&self.inner);
        if self.on {
            let mut st = self.state();
            self.look(&mut st);
        }
    }
}

//! The device: state lock, execution mode, device thread, and the BAR
//! access entry points.

use std::sync::atomic::{fence, AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::thread::{self, JoinHandle, Thread};
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use rnic_hw_regs::pci::{BAR_DOORBELL, BAR_REGS, BAR_REGS_SIZE};
use rnic_hw_regs::uar::{CqDoorbell, RqDoorbell, SqDoorbell, CQ_DB, RQ_DB, SQ_DB, UAR_PAGE_SIZE};

use crate::irq::IrqLines;
use crate::state::State;
use crate::{cq, qp, regs, requester, EmuConfig, EmuHal, ExecMode};

/// Capacity of the thread-mode work queue.
const QUEUE_DEPTH: usize = 4096;
/// Idle device thread: busy-spin this long after the last work item...
const SPIN: Duration = Duration::from_micros(10);
/// ...then yield the CPU until this long...
const YIELD: Duration = Duration::from_micros(200);
/// ...then sleep in steps of this (a doorbell wakes it early).
const SLEEP: Duration = Duration::from_micros(50);

/// A write that triggers device work.
#[derive(Debug, Clone, Copy)]
enum Work {
    /// A BAR 0 register write.
    Reg(usize, u32),
    /// A BAR 2 doorbell write.
    Doorbell(usize, u64),
}

/// What the device thread and every handle share.
#[derive(Debug)]
pub(crate) struct Shared {
    state: Mutex<State>,
    mode: ExecMode,
    cfg: EmuConfig,
    queue: ArrayQueue<Work>,
    shutdown: AtomicBool,
    /// The device thread is (about to be) parked.
    sleeping: AtomicBool,
    /// The device thread is running (cleared when it exits, even by panic).
    alive: AtomicBool,
    thread: OnceLock<Thread>,
    pub(crate) irq: Arc<IrqLines>,
    epoch: Instant,
}

impl Shared {
    /// Locks the device state. A panic in the model (a bug) poisons the
    /// lock; the state is still consistent enough to keep serving.
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn mode(&self) -> ExecMode {
        self.mode
    }

    /// Nanoseconds since the device was created.
    pub(crate) fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    pub(crate) fn read32(&self, bar: u8, off: usize) -> u32 {
        match bar {
            BAR_REGS if off % 4 == 0 && off < BAR_REGS_SIZE => regs::read(&self.lock(), off),
            // Doorbell pages read as zero.
            BAR_DOORBELL => 0,
            _ => {
                log::warn!("read of BAR {bar} offset {off:#x} ignored");
                0
            }
        }
    }

    pub(crate) fn write32(&self, bar: u8, off: usize, v: u32) {
        if bar != BAR_REGS || off % 4 != 0 || off >= BAR_REGS_SIZE {
            log::warn!("32-bit write {v:#x} to BAR {bar} offset {off:#x} ignored");
            return;
        }
        if !regs::is_work(off) || self.mode == ExecMode::Inline {
            let mut st = self.lock();
            regs::write(&mut st, off, v);
            return;
        }
        if off == rnic_hw_regs::bar0::CTRL {
            // The reset runs on the device thread, but STATUS.ready must drop
            // now, or the driver could see the old ready bit and configure
            // registers the reset then clears.
            regs::begin_reset(&mut self.lock(), v);
        }
        self.push(Work::Reg(off, v));
    }

    pub(crate) fn write64(&self, bar: u8, off: usize, v: u64) {
        let uar_bytes = self.cfg.uar_pages as usize * UAR_PAGE_SIZE;
        if bar != BAR_DOORBELL || off % 8 != 0 || off >= uar_bytes {
            log::warn!("64-bit write {v:#x} to BAR {bar} offset {off:#x} ignored");
            return;
        }
        match self.mode {
            ExecMode::Inline => doorbell(&mut self.lock(), off, v),
            ExecMode::Thread => self.push(Work::Doorbell(off, v)),
        }
    }

    fn push(&self, mut w: Work) {
        while let Err(back) = self.queue.push(w) {
            if !self.alive.load(Ordering::Acquire) {
                log::error!("device thread is gone; {back:?} dropped");
                return;
            }
            w = back;
            thread::yield_now();
        }
        // Pairs with the device thread's fence between announcing sleep and
        // checking the queue: one of the two sides sees the other. It stays
        // even while the thread is busy: skipping it needs to know the
        // thread is not going to sleep, which is the load it orders. (The
        // queue push just before is a locked RMW, so on x86 this fence
        // finds the store buffer drained and costs little.)
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::Relaxed) {
            if let Some(t) = self.thread.get() {
                t.unpark();
            }
        }
    }
}

fn run(st: &mut State, w: Work) {
    match w {
        Work::Reg(off, v) => regs::write(st, off, v),
        Work::Doorbell(off, v) => doorbell(st, off, v),
    }
}

/// A doorbell write at BAR 2 offset `off`.
fn doorbell(st: &mut State, off: usize, v: u64) {
    if !st.running() {
        log::warn!("doorbell {v:#x} at {off:#x} ignored: device not running");
        return;
    }
    let page = (off / UAR_PAGE_SIZE) as u32;
    match off % UAR_PAGE_SIZE {
        SQ_DB => requester::sq_doorbell(st, page, SqDoorbell::from_bits(v)),
        RQ_DB => {
            qp::rq_doorbell(st, page, RqDoorbell::from_bits(v));
            st.run_kicked();
        }
        CQ_DB => cq::arm(st, page, CqDoorbell::from_bits(v)),
        other => log::warn!("doorbell write {v:#x} to undefined page offset {other:#x} ignored"),
    }
}

/// Clears `alive` when the device thread exits, even by a panic.
struct AliveGuard(Arc<Shared>);

impl Drop for AliveGuard {
    fn drop(&mut self) {
        self.0.alive.store(false, Ordering::Release);
    }
}

fn device_thread(shared: Arc<Shared>) {
    let guard = AliveGuard(shared);
    let shared = &guard.0;
    let mut idle_since: Option<Instant> = None;
    loop {
        if let Some(w) = shared.queue.pop() {
            let mut st = shared.lock();
            run(&mut st, w);
            // Drain what queued up meanwhile under the same lock, bounded so
            // that BAR reads and DMA mapping are not starved.
            for _ in 0..64 {
                match shared.queue.pop() {
                    Some(w) => run(&mut st, w),
                    None => break,
                }
            }
            idle_since = None;
            continue;
        }
        if shared.shutdown.load(Ordering::Acquire) {
            return;
        }
        let idle = idle_since.get_or_insert_with(Instant::now).elapsed();
        if idle < SPIN {
            std::hint::spin_loop();
        } else if idle < YIELD {
            thread::yield_now();
        } else {
            shared.sleeping.store(true, Ordering::Relaxed);
            // Pairs with the fence in `push`.
            fence(Ordering::SeqCst);
            if shared.queue.is_empty() && !shared.shutdown.load(Ordering::Acquire) {
                thread::park_timeout(SLEEP);
            }
            shared.sleeping.store(false, Ordering::Relaxed);
        }
    }
}

/// An emulated rnic device: BAR 0 registers, BAR 2 doorbell pages, and DMA
/// through an emulated IOMMU, reached only through [`EmuHal`].
#[derive(Debug)]
pub struct EmuDevice {
    shared: Arc<Shared>,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl EmuDevice {
    /// Creates a device in the reset state (`STATUS.ready` set). In
    /// [`ExecMode::Thread`] this starts the device thread, which stops when
    /// the device is dropped (with the last [`EmuHal`] handle).
    ///
    /// # Panics
    ///
    /// If `config` is invalid (see [`EmuConfig::validate`]) or the device
    /// thread cannot be spawned.
    pub fn new(config: EmuConfig, mode: ExecMode) -> Arc<EmuDevice> {
        if let Err(e) = config.validate() {
            panic!("{e}");
        }
        let irq = Arc::new(IrqLines::default());
        let shared = Arc::new(Shared {
            state: Mutex::new(State::new(config.clone(), irq.clone())),
            mode,
            cfg: config,
            queue: ArrayQueue::new(QUEUE_DEPTH),
            shutdown: AtomicBool::new(false),
            sleeping: AtomicBool::new(false),
            alive: AtomicBool::new(mode == ExecMode::Thread),
            thread: OnceLock::new(),
            irq,
            epoch: Instant::now(),
        });
        let thread = (mode == ExecMode::Thread).then(|| {
            let s = shared.clone();
            let handle = thread::Builder::new()
                .name("rnic-emu".into())
                .spawn(move || device_thread(s))
                .expect("cannot spawn the device thread");
            let _ = shared.thread.set(handle.thread().clone());
            handle
        });
        Arc::new(EmuDevice {
            shared,
            thread: Mutex::new(thread),
        })
    }

    /// A platform handle for a driver.
    pub fn hal(self: &Arc<Self>) -> EmuHal {
        EmuHal::new(self.clone())
    }

    /// The device's configuration.
    pub fn config(&self) -> &EmuConfig {
        &self.shared.cfg
    }

    /// The device's execution mode.
    pub fn mode(&self) -> ExecMode {
        self.shared.mode
    }

    pub(crate) fn shared(&self) -> &Shared {
        &self.shared
    }
}

impl Drop for EmuDevice {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::Release);
        let handle = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(h) = handle {
            h.thread().unpark();
            if h.join().is_err() {
                log::error!("device thread panicked");
            }
        }
    }
}

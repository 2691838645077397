//! The device: its locks, its wire, one step of work, the inline driver,
//! a worker's turn at a NIC, and the BAR access entry points.
//!
//! A step takes the state lock, receives a batch from the wire, runs the
//! work item it was given (a register or doorbell write), then one turn
//! of the device (received frames, due timers, a quantum of every QP with
//! something to send), and hands the frames built to the wire, taking the
//! wire's lock before it lets go of the state's so that frames leave in
//! the order they were built. A wire never takes a device's state lock: it
//! delivers into queues and calls wakers, so no NIC ever calls into
//! another while holding its own state.
//!
//! Inline mode: the thread that writes a register or doorbell runs the
//! step, then every step the frames it sent made runnable, on this or any
//! other inline NIC (a thread-local run list), until nothing is left,
//! [`INLINE_BUDGET`] steps ran, or another thread steps the NIC or waits
//! to with a step of its own (that thread drives the NIC on). Thread
//! mode: a send, receive or SRQ doorbell, or a BlueFlame write, goes to
//! the NIC's latch when it is free (one cache line the worker polls,
//! taken at the start of every step);
//! other doorbells and commands (`CMDQ_DB`) are queued to the NIC's device
//! worker (a thread shared by NICs, [`crate::worker`]), which runs the
//! NIC's steps until nothing is left, at most [`STREAK`] of them between
//! two work items, then takes the next item, so that commands and
//! doorbells are served while a send queue keeps itself busy. A thread
//! waiting on a thread-mode NIC runs its turns too ([`NicCore::lend`]):
//! one note of the NIC's last turn is shared by every runner, and one
//! runner at a time has it. Every other BAR 0 write runs in the writing
//! thread, after everything queued before it, so that register writes
//! take effect in order and a read sees them all, as PCIe orders them.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::fmt;
use std::os::fd::RawFd;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, TryLockError, Weak};
use std::thread;
use std::time::{Duration, Instant};

use crossbeam_queue::ArrayQueue;
use rnic_hw_regs::pci::{BAR_DOORBELL, BAR_REGS, BAR_REGS_SIZE};
use rnic_hw_regs::uar::{
    CqDoorbell, EqArmDoorbell, RqDoorbell, SqDoorbell, WqDoorbell, BF, BF_WQE_BYTES, CQ_DB,
    EQ_DB as UAR_EQ_DB, RQ_DB, SQ_DB, SRQ_DB, UAR_PAGE_SIZE,
};

use crate::clock::Clock;
use crate::irq::IrqLines;
use crate::net::{Frame, Loopback, Tap, Wire};
use crate::posted::PostedWrites;
use crate::state::State;
use crate::transport::requester;
use crate::worker::{self, Core, WorkerStats, LEND_WINDOW};
use crate::{cq, eq, qp, regs, srq, ConfigError, EmuConfig, EmuHal, ExecMode};

/// Capacity of the thread-mode work queue.
const QUEUE_DEPTH: usize = 4096;
/// Frames received per step.
const RX_BATCH: usize = 64;
/// Steps one inline call runs at most (the rest waits for the next call).
pub(crate) const INLINE_BUDGET: u32 = 1 << 16;
/// Steps a worker runs for a NIC between two takes of its doorbell queue
/// at most.
pub(crate) const STREAK: u32 = 4096;
/// Steps one lend runs at most ([`NicCore::lend`]).
const LEND_STEPS: u32 = 64;
/// Lends further apart than this are not one wait.
const LOOK_GAP: Duration = Duration::from_micros(10);
/// A wait (lends with no gap above [`LOOK_GAP`]) this long claims the NIC
/// from its worker for [`LEND_WINDOW`].
const CLAIM_AFTER: Duration = Duration::from_micros(20);

/// Nanoseconds of host time since this process first asked, never 0 (0
/// stands for "never"): the clock of lending, which is the host's even on
/// a device with a virtual clock.
pub(crate) fn host_ns() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    EPOCH.get_or_init(Instant::now).elapsed().as_nanos() as u64 + 1
}

/// A write that triggers device work (in thread mode only doorbells are
/// queued).
#[derive(Debug, Clone, Copy)]
enum Work {
    /// A BAR 0 register write.
    Reg(usize, u32),
    /// A BAR 2 doorbell write.
    Doorbell(usize, u64),
}

/// How a device is told that it has work: frames from its wire, a
/// doorbell, a clock that jumped. Kept apart from [`NicCore`] so that a
/// wire's waker never holds the device itself.
#[derive(Debug)]
struct Notify {
    /// The wire may hold frames.
    rx_pending: AtomicBool,
    /// Inline mode: on some thread's run list.
    scheduled: AtomicBool,
    /// Thread mode: something happened (a doorbell, a register write, a
    /// frame, a clock jump) that the worker's next look at the NIC must
    /// not skip.
    kicked: AtomicBool,
    /// Thread mode: the worker that runs the NIC.
    worker: OnceLock<Arc<Core>>,
    /// Thread mode: when a waiting thread last claimed the NIC
    /// ([`host_ns`]; 0: not lent).
    lent_at: AtomicU64,
    /// When a thread last lent itself, claiming or not (0: never).
    looked_at: AtomicU64,
    /// Since when threads have lent themselves with no gap longer than
    /// [`LOOK_GAP`].
    looking_since: AtomicU64,
    mode: ExecMode,
    /// Inline: frames from other NICs wait for a thread that runs this one.
    poll_mode: bool,
    shared: OnceLock<Weak<NicCore>>,
}

impl Notify {
    fn wake_rx(&self) {
        self.rx_pending.store(true, Ordering::Release);
        self.nudge();
    }

    fn nudge(&self) {
        match self.mode {
            ExecMode::Inline if self.poll_mode => {}
            ExecMode::Inline => schedule(self),
            ExecMode::Thread => {
                self.kicked.store(true, Ordering::Release);
                // A NIC lent to a waiting thread is run by that thread,
                // which sees the kick on its next look.
                if self.lent_at.load(Ordering::Relaxed) != 0 && self.lent(host_ns()) {
                    return;
                }
                if let Some(w) = self.worker.get() {
                    w.wake();
                }
            }
        }
    }

    /// Whether a waiting thread lent itself to the NIC within the last
    /// [`LEND_WINDOW`].
    fn lent(&self, now: u64) -> bool {
        let at = self.lent_at.load(Ordering::Relaxed);
        at != 0 && now.saturating_sub(at) < LEND_WINDOW.as_nanos() as u64
    }
}

/// Inline NICs with work, run by the thread that made them runnable.
#[derive(Default)]
struct RunList {
    driving: bool,
    list: VecDeque<Weak<NicCore>>,
}

thread_local! {
    static RUN: RefCell<RunList> = RefCell::new(RunList::default());
}

fn schedule(n: &Notify) {
    if n.scheduled.swap(true, Ordering::AcqRel) {
        return;
    }
    if let Some(w) = n.shared.get() {
        RUN.with(|r| r.borrow_mut().list.push_back(w.clone()));
    }
}

/// Ends a drive: whatever is still listed waits for a later call.
struct DriveGuard;

impl Drop for DriveGuard {
    fn drop(&mut self) {
        RUN.with(|r| r.borrow_mut().driving = false);
        // Popped one by one, so that the list keeps its buffer: a drive
        // allocates nothing.
        while let Some(w) = RUN.with(|r| r.borrow_mut().list.pop_front()) {
            if let Some(s) = w.upgrade() {
                s.notify.scheduled.store(false, Ordering::Release);
            }
        }
    }
}

/// Runs the listed NICs until none is left or the budget is spent, unless
/// this thread is already doing so further up the stack.
fn run_list() {
    let entered = RUN.with(|r| {
        let mut r = r.borrow_mut();
        !std::mem::replace(&mut r.driving, true)
    });
    if !entered {
        return;
    }
    let _guard = DriveGuard;
    for _ in 0..INLINE_BUDGET {
        let Some(w) = RUN.with(|r| r.borrow_mut().list.pop_front()) else {
            return;
        };
        let Some(s) = w.upgrade() else {
            continue;
        };
        s.notify.scheduled.store(false, Ordering::Release);
        if s.try_step() == Some(true) {
            schedule(&s.notify);
        }
    }
}

/// The port's wire and the vector frames are handed to it in.
struct Link {
    wire: Box<dyn Wire>,
    spare: Vec<Frame>,
}

/// What the device worker and every handle share.
pub(crate) struct NicCore {
    state: Mutex<State>,
    wire: Mutex<Link>,
    mode: ExecMode,
    cfg: EmuConfig,
    clock: Clock,
    queue: ArrayQueue<Work>,
    /// Thread mode: the doorbell register the worker polls, for one send
    /// or receive queue doorbell; the queue takes the others.
    latch: Latch,
    shutdown: AtomicBool,
    notify: Arc<Notify>,
    /// The wire must be polled to learn of frames ([`Wire::polled`]).
    polled_wire: bool,
    /// The wire does not bring back frames sent to the NIC's own MAC, so
    /// the NIC loops them back itself ([`Port::take_hairpin`]).
    hairpin: bool,
    /// The descriptor an idle worker sleeps on for the wire's frames
    /// ([`Wire::wait_fd`]), valid as long as the wire.
    wait_fd: Option<RawFd>,
    /// Doorbell writes through memory ([`EmuBuilder::posted_writes`]).
    posted: Option<Box<dyn PostedWrites>>,
    /// Steps run by threads that lent themselves to the NIC.
    lent_steps: AtomicU64,
    /// Inline: threads waiting for the state lock to run a step of their
    /// own (a doorbell, a register or BlueFlame write, a poll).
    arriving: AtomicU32,
    /// Inline: steps left to another thread ([`RunStats::handovers`]).
    handovers: AtomicU64,
    /// What the NIC's last turn left; held by the runner taking a turn
    /// (the worker or a lending thread), one at a time.
    note: Mutex<Note>,
    /// The earliest deadline of the device's timers and its wire, as the
    /// last step left them (`u64::MAX`: none).
    deadline: AtomicU64,
    pub(crate) irq: Arc<IrqLines>,
    epoch: Instant,
    /// What the device's clock calls when it jumps (held here so that it
    /// lives as long as the device).
    on_clock: OnceLock<Arc<dyn Fn() + Send + Sync>>,
}

impl fmt::Debug for NicCore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NicCore")
            .field("mode", &self.mode)
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

impl NicCore {
    /// Locks the device state. A panic in the model (a bug) poisons the
    /// lock; the state is still consistent enough to keep serving.
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wire(&self) -> MutexGuard<'_, Link> {
        self.wire.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Nanoseconds of host time since the device was created.
    pub(crate) fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    pub(crate) fn read32(&self, bar: u8, off: usize) -> u32 {
        match bar {
            BAR_REGS if off % 4 == 0 && off < BAR_REGS_SIZE => regs::read(&self.lock().dev, off),
            // Doorbell pages read as zero.
            BAR_DOORBELL => 0,
            _ => {
                log::warn!("read of BAR {bar} offset {off:#x} ignored");
                0
            }
        }
    }

    pub(crate) fn write32(self: &Arc<Self>, bar: u8, off: usize, v: u32) {
        if bar != BAR_REGS || off % 4 != 0 || off >= BAR_REGS_SIZE {
            log::warn!("32-bit write {v:#x} to BAR {bar} offset {off:#x} ignored");
            return;
        }
        if !regs::is_work(off) {
            regs::write(&mut self.lock(), off, v);
            return;
        }
        match self.mode {
            ExecMode::Inline => self.drive(Some(Work::Reg(off, v))),
            // A command is queued like a doorbell, and runs when the device
            // has nothing else to do.
            ExecMode::Thread if off == rnic_hw_regs::bar0::CMDQ_DB => {
                self.push(Work::Reg(off, v));
            }
            // Other BAR 0 writes are not queued: each takes effect before
            // the write returns, after everything queued before it, so that
            // a later register write or read sees it done, as PCIe orders
            // them.
            ExecMode::Thread => {
                self.step(Some(Work::Reg(off, v)), Drain::All, Turn::Skip);
                self.notify.nudge();
                run_list();
            }
        }
    }

    pub(crate) fn write64(self: &Arc<Self>, bar: u8, off: usize, v: u64) {
        let uar_bytes = self.cfg.uar_pages as usize * UAR_PAGE_SIZE;
        if bar != BAR_DOORBELL || off % 8 != 0 || off >= uar_bytes {
            log::warn!("64-bit write {v:#x} to BAR {bar} offset {off:#x} ignored");
            return;
        }
        match self.mode {
            ExecMode::Inline => self.drive(Some(Work::Doorbell(off, v))),
            // A send or receive queue's doorbell only points the device
            // at a doorbell record, which is authoritative: it may take
            // the latch, which the device serves before the queue, unless
            // writes wait in the queue. Those were made before it (a CQ
            // armed, then a send posted), and PCIe keeps one CPU's posted
            // writes in order: a completion of the send must see the arm.
            ExecMode::Thread
                if matches!(off % UAR_PAGE_SIZE, SQ_DB | RQ_DB | SRQ_DB)
                    && self.queue.is_empty()
                    && self.latch.put(off, v, None) =>
            {
                self.notify.nudge();
            }
            // A CQ armed means a thread that will sleep until its event:
            // the worker runs the NIC from here on.
            ExecMode::Thread if off % UAR_PAGE_SIZE == CQ_DB => {
                self.unlend();
                self.push(Work::Doorbell(off, v));
            }
            ExecMode::Thread => self.push(Work::Doorbell(off, v)),
        }
    }

    /// A BlueFlame write (spec 8.1): `block` is the SQ doorbell, then the
    /// first bytes of the WQE it announces.
    pub(crate) fn write_block(self: &Arc<Self>, bar: u8, off: usize, block: &[u64; 8]) {
        let uar_bytes = self.cfg.uar_pages as usize * UAR_PAGE_SIZE;
        if bar != BAR_DOORBELL || off % UAR_PAGE_SIZE != BF || off >= uar_bytes {
            log::warn!("64-byte write to BAR {bar} offset {off:#x} ignored");
            return;
        }
        let db = block[0];
        let words: &[u64; BF_WQE_BYTES / 8] = block[1..=BF_WQE_BYTES / 8]
            .try_into()
            .expect("the WQE's words");
        match self.mode {
            ExecMode::Inline => {
                let bf = (off, db, &bf_bytes(words));
                if self.step_with(None, Some(bf), Drain::No, Turn::Run) {
                    schedule(&self.notify);
                }
                run_list();
            }
            // As in `write64`: the latch only while no earlier write waits.
            ExecMode::Thread if self.queue.is_empty() && self.latch.put(off, db, Some(words)) => {
                self.notify.nudge()
            }
            // The latch is taken, or writes wait: an SQ doorbell, and the
            // ring's WQE.
            ExecMode::Thread => self.push(Work::Doorbell(off - BF + SQ_DB, db)),
        }
    }

    fn push(&self, mut w: Work) {
        while let Err(back) = self.queue.push(w) {
            if !self.notify.worker.get().is_some_and(|c| c.alive()) {
                log::error!("device worker is gone; {back:?} dropped");
                return;
            }
            w = back;
            thread::yield_now();
        }
        self.notify.nudge();
    }

    /// Inline mode: runs `work` (none: a poll, a clock jump) and
    /// everything it makes runnable.
    fn drive(self: &Arc<Self>, work: Option<Work>) {
        if self.step(work, Drain::No, Turn::Run) {
            schedule(&self.notify);
        }
        run_list();
    }

    /// Inline mode: a step that goes on from an earlier one, unless another
    /// thread steps the NIC now or waits to ([`NicCore::arriving`]):
    /// `None`, and that thread drives the NIC on, listing it again if its
    /// step leaves work. Two threads on one busy NIC (a sender, and its
    /// receiver reposting) would otherwise each run the other's traffic
    /// for the whole [`INLINE_BUDGET`] before going back to their program,
    /// and the lock, which is not fair, would keep the other waiting as
    /// long.
    fn try_step(&self) -> Option<bool> {
        let st = match self.state.try_lock() {
            Ok(_) if self.arriving.load(Ordering::Acquire) > 0 => None,
            Ok(st) => Some(st),
            Err(TryLockError::Poisoned(e)) => Some(e.into_inner()),
            Err(TryLockError::WouldBlock) => None,
        };
        let Some(st) = st else {
            self.handovers.fetch_add(1, Ordering::Relaxed);
            return None;
        };
        Some(self.guarded(|| self.step_inner(st, None, None, Drain::No, Turn::Run)))
    }

    /// One step (see the module documentation); returns whether the device
    /// has more to do. A panic in the model is caught here: the device
    /// enters the fatal state, which a reset clears.
    fn step(&self, work: Option<Work>, drain: Drain, turn: Turn) -> bool {
        self.step_with(work, None, drain, turn)
    }

    /// [`NicCore::step`], with a BlueFlame write to run first.
    fn step_with(&self, work: Option<Work>, bf: Option<Bf<'_>>, drain: Drain, turn: Turn) -> bool {
        // Inline, every step but those of a run list is a thread's call.
        let own = self.mode == ExecMode::Inline;
        if own {
            self.arriving.fetch_add(1, Ordering::AcqRel);
        }
        let st = self.lock();
        if own {
            self.arriving.fetch_sub(1, Ordering::AcqRel);
        }
        self.guarded(|| self.step_inner(st, work, bf, drain, turn))
    }

    /// Runs a step, catching a panic in the model.
    fn guarded(&self, step: impl FnOnce() -> bool) -> bool {
        catch_unwind(AssertUnwindSafe(step)).unwrap_or_else(|_| {
            log::error!("panic in the device model: device fatal");
            regs::internal_error(&mut self.lock());
            false
        })
    }

    fn step_inner(
        &self,
        mut st: MutexGuard<'_, State>,
        work: Option<Work>,
        bf: Option<Bf<'_>>,
        drain: Drain,
        turn: Turn,
    ) -> bool {
        let now = self.clock.now_ns();
        // What was read ahead of a client's memory may be stale by now.
        if let Some(p) = st.dev.iommu.process() {
            p.new_step();
        }
        let mut rx = std::mem::take(&mut st.dev.port.rx);
        let mut backlog = false;
        let mut wire_deadline;
        {
            let mut link = self.wire();
            let wire = &mut link.wire;
            // Buffers the wire is done with, for the frames of this step.
            st.dev.port.reclaim(wire.as_mut());
            wire.poll(now);
            let up = wire.link_up();
            if up != st.dev.port.link_up {
                st.dev.port.link_up = up;
                log::debug!("port 1: link {}", if up { "up" } else { "down" });
                let ty = if up {
                    rnic_hw_regs::eqe::EventType::PortActive
                } else {
                    rnic_hw_regs::eqe::EventType::PortErr
                };
                crate::eq::post(&mut st.dev, ty, 1, 0);
            }
            if turn == Turn::Run {
                rx.append(&mut st.dev.port.hairpin);
            }
            if turn == Turn::Run
                && self.notify.rx_pending.swap(false, Ordering::AcqRel)
                && wire.recv(&mut rx, RX_BATCH) == RX_BATCH
            {
                backlog = true;
                self.notify.rx_pending.store(true, Ordering::Release);
            }
            wire_deadline = wire.next_deadline();
        }
        let mut had_work = false;
        // Popped under the state lock: work is never taken off the queue by
        // one thread and then overtaken by a register write that another
        // thread makes after queueing it.
        let mut take = match drain {
            Drain::No => 0,
            Drain::Idle | Drain::One => 1,
            Drain::All => QUEUE_DEPTH,
        };
        if let Some((off, v, wqe)) = self.latch.take() {
            match wqe {
                Some(words) => blueflame(&mut st, off, v, &bf_bytes(&words)),
                None => doorbell(&mut st, off, v),
            }
            had_work = true;
            // The doorbell gave the NIC work: queued writes wait for it.
            if drain == Drain::Idle {
                take = 0;
            }
        }
        if let Some((off, v, bytes)) = bf {
            blueflame(&mut st, off, v, bytes);
            had_work = true;
        }
        // Before queued BAR 0 writes: the client made them later.
        if let Some(p) = &self.posted {
            for _ in 0..POSTED_BATCH {
                let Some((off, v)) = p.pop() else { break };
                posted_write(&mut st, off, v);
                had_work = true;
            }
        }
        for _ in 0..take {
            let Some(w) = self.queue.pop() else { break };
            run(&mut st, w);
            had_work = true;
        }
        if let Some(w) = work {
            run(&mut st, w);
            had_work = true;
        }
        let more = match turn {
            Turn::Run => st.turn(&rx, backlog, now),
            Turn::Skip => {
                debug_assert!(rx.is_empty());
                had_work
            }
        };
        st.dev.port.recycle(&mut rx);
        // Nothing of a client's memory is written after the step: its
        // frames (an ACK of the data) leave after this.
        if let Some(p) = st.dev.iommu.process() {
            p.settle();
        }
        if self.hairpin {
            st.dev.port.take_hairpin();
        }
        let looped = !st.dev.port.hairpin.is_empty();
        let timers = st.next_deadline();
        if !st.dev.port.tx.is_empty() || !rx.is_empty() {
            let mut link = self.wire();
            // Buffers the pool has no room for: the wire may hand them to
            // a NIC that sends more than it receives.
            link.wire.spare(&mut rx);
            st.dev.port.rx = rx;
            // The frames go to the link's vector and the link's empty one
            // comes back, so that neither allocates.
            let Link { wire, spare, .. } = &mut *link;
            std::mem::swap(&mut st.dev.port.tx, spare);
            drop(st);
            wire.send(spare);
            spare.clear();
            // Frames sent may wait in the wire (a fault injector's delay).
            wire_deadline = wire.next_deadline();
        } else {
            st.dev.port.rx = rx;
        }
        let d = timers.into_iter().chain(wire_deadline).min();
        self.deadline
            .store(d.unwrap_or(u64::MAX), Ordering::Release);
        more || looped || self.notify.rx_pending.load(Ordering::Acquire) || self.posted_pending()
    }

    /// Whether a doorbell write waits in memory.
    fn posted_pending(&self) -> bool {
        self.posted.as_ref().is_some_and(|p| p.pending())
    }

    /// A turn at this NIC for a runner (the worker, or a lending thread):
    /// takes queued work if the NIC was idle or ran [`STREAK`] steps
    /// without, runs a step, and the inline NICs its frames made
    /// runnable (its steps counted as lent with `lender`). Returns whether
    /// it had anything to do; `None` if another runner has the NIC now.
    pub(crate) fn turn(&self, lender: bool) -> Option<bool> {
        // Never waited for: the runner that has the NIC runs it, and a
        // waiting runner would cost the other a futex wake.
        let mut note = match self.note.try_lock() {
            Ok(n) => n,
            Err(TryLockError::Poisoned(e)) => e.into_inner(),
            Err(TryLockError::WouldBlock) => return None,
        };
        // Checked while busy too: a send queue that feeds itself never
        // lets the device go idle.
        if self.shutdown.load(Ordering::Acquire) {
            note.more = false;
            return Some(false);
        }
        // An idle NIC is skipped for the price of a few loads: nothing
        // queued, nothing received, nothing happened, no timer due. Its
        // step would take its locks and touch its wire for nothing (a
        // worker runs the NICs of a whole process).
        if !note.more && self.idle() {
            note.streak = 0;
            return Some(false);
        }
        let d = if !note.more {
            Drain::Idle
        } else if note.streak >= STREAK {
            Drain::One
        } else {
            Drain::No
        };
        let had_work = self.latch.full() || (d != Drain::No && !self.queue.is_empty());
        note.more = self.step(None, d, Turn::Run);
        if lender {
            self.lent_steps.fetch_add(1, Ordering::Relaxed);
        }
        run_list();
        note.streak = if had_work || !note.more {
            0
        } else {
            note.streak + 1
        };
        Some(had_work || note.more)
    }

    /// Whether a step would find nothing to do: nothing queued, nothing
    /// received, nothing happened, no timer due, and a wire that says when
    /// frames come. Takes the kick it finds.
    fn idle(&self) -> bool {
        let kicked = self.notify.kicked.load(Ordering::Acquire)
            && self.notify.kicked.swap(false, Ordering::AcqRel);
        !kicked
            && !self.polled_wire
            && self.queue.is_empty()
            && !self.latch.full()
            && !self.notify.rx_pending.load(Ordering::Acquire)
            && !self.posted_pending()
            && self.clock.now_ns() < self.deadline.load(Ordering::Acquire)
    }

    /// A waiting thread lends itself to the NIC ([`EmuDevice::poll`] in
    /// thread mode, and so `Hal::relax` in the driver's wait loops and an
    /// empty CQ poll): it runs the NIC's steps until nothing is left (at
    /// most [`LEND_STEPS`]), unless another thread runs one now; once
    /// threads have waited so for [`CLAIM_AFTER`], the lend keeps the
    /// device worker off the NIC for [`LEND_WINDOW`], so that a program
    /// polling for a completion is the NIC that makes it instead of
    /// competing with the worker for a core.
    pub(crate) fn lend(&self) {
        let n = &self.notify;
        let now = host_ns();
        let prev = n.looked_at.swap(now, Ordering::Relaxed);
        let since = if prev == 0 || now.saturating_sub(prev) > LOOK_GAP.as_nanos() as u64 {
            n.looking_since.store(now, Ordering::Relaxed);
            now
        } else {
            n.looking_since.load(Ordering::Relaxed)
        };
        // Only a thread that keeps waiting claims the NIC: one that polls
        // now and then between waits elsewhere (on memory, as perftest's
        // latency tests do) must not keep the worker off it meanwhile.
        if now.saturating_sub(since) >= CLAIM_AFTER.as_nanos() as u64 {
            n.lent_at.store(now, Ordering::Relaxed);
        }
        for _ in 0..LEND_STEPS {
            match self.turn(true) {
                Some(true) => {}
                Some(false) => break,
                None => {
                    // The worker, or another lender, has it now (the
                    // worker lets go once it sees the lend).
                    std::hint::spin_loop();
                    break;
                }
            }
        }
    }

    /// The lending thread goes to sleep: the worker takes the NIC back at
    /// once.
    pub(crate) fn unlend(&self) {
        if self.notify.lent_at.swap(0, Ordering::Relaxed) != 0 {
            if let Some(w) = self.notify.worker.get() {
                w.wake();
            }
        }
    }

    /// After the worker slept: timers may be due, the NIC runs a step
    /// (queued work waits for the NIC to have nothing else to do, as
    /// always).
    pub(crate) fn rouse(&self) {
        self.note.lock().unwrap_or_else(|e| e.into_inner()).more = true;
    }

    /// The worker is awake (it slept, or was about to and found work):
    /// doorbell writes through memory need not wake it.
    pub(crate) fn awake(&self) {
        if let Some(p) = &self.posted {
            p.wake();
        }
    }

    /// Whether a waiting thread has lent itself to the NIC lately.
    pub(crate) fn lent(&self, now: u64) -> bool {
        self.notify.lent(now)
    }

    /// How long until the lender's hold on the NIC ends.
    pub(crate) fn lend_ends(&self, now: u64) -> Duration {
        let at = self.notify.lent_at.load(Ordering::Relaxed);
        let end = at.saturating_add(LEND_WINDOW.as_nanos() as u64);
        Duration::from_nanos(end.saturating_sub(now))
    }

    /// The descriptor an idle worker sleeps on for this NIC's frames.
    pub(crate) fn wait_fd(&self) -> Option<RawFd> {
        self.wait_fd
    }

    /// The descriptor an idle worker sleeps on for doorbell writes through
    /// memory.
    pub(crate) fn posted_fd(&self) -> Option<RawFd> {
        self.posted.as_ref().map(|p| p.wait_fd())
    }

    /// Whether the NIC's wire tells of frames only when looked at.
    pub(crate) fn polled_wire(&self) -> bool {
        self.polled_wire
    }

    /// Whether work from outside waits for the NIC (a doorbell, a command,
    /// frames), not counting timers: what a worker whose sleep ran out
    /// should not find.
    pub(crate) fn waiting(&self) -> bool {
        if !self.queue.is_empty() || self.latch.full() || self.posted_pending() {
            return true;
        }
        self.wire().wire.poll(self.clock.now_ns());
        self.notify.rx_pending.load(Ordering::Acquire)
    }

    /// How long the worker may sleep as far as this NIC is concerned:
    /// `None` if it has work, else up to its earliest deadline on a real
    /// clock (a virtual clock's jump wakes the worker itself).
    pub(crate) fn nap(&self) -> Option<Duration> {
        // Announces the sleep to a posted-write queue first: a write that
        // comes after this wakes the worker, one before is seen here.
        let posted = self.posted.as_ref().is_some_and(|p| p.nap());
        let busy = posted
            || !self.queue.is_empty()
            || self.latch.full()
            || self.notify.kicked.load(Ordering::Acquire)
            || self.notify.rx_pending.load(Ordering::Acquire);
        if busy && !self.shutdown.load(Ordering::Acquire) {
            return None;
        }
        if self.clock.is_virtual() {
            return Some(Duration::MAX);
        }
        Some(match self.deadline.load(Ordering::Acquire) {
            u64::MAX => Duration::MAX,
            d => Duration::from_nanos(d.saturating_sub(self.clock.now_ns())),
        })
    }
}

/// What a NIC's last turn left (see [`NicCore::turn`]).
#[derive(Debug)]
struct Note {
    /// The last step left it more to do.
    more: bool,
    /// Steps run since it last took queued work.
    streak: u32,
}

impl Default for Note {
    /// A NIC not yet looked at: it may have anything to do.
    fn default() -> Self {
        Note {
            more: true,
            streak: STREAK,
        }
    }
}

/// One doorbell write held for the device worker: its offset and value,
/// and a BlueFlame write's WQE, on one cache line. The queue's push costs
/// the ringing thread two lines the worker keeps reading (the queue's tail
/// and a slot), the latch one.
#[derive(Debug, Default)]
#[repr(align(64))]
struct Latch {
    /// 0 (empty), [`WRITING`], or [`FULL`] with the offset in the low 32
    /// bits and [`BLUEFLAME`] if `wqe` holds a WQE.
    tag: AtomicU64,
    value: AtomicU64,
    wqe: [AtomicU64; BF_WQE_BYTES / 8],
}

const _: () = assert!(std::mem::size_of::<Latch>() == 64);

const WRITING: u64 = 1 << 63;
const FULL: u64 = 1 << 62;
const BLUEFLAME: u64 = 1 << 61;

/// A doorbell the latch held: offset, value, and a BlueFlame WQE.
type Latched = (usize, u64, Option<[u64; BF_WQE_BYTES / 8]>);

impl Latch {
    /// Holds the doorbell `v` at `off` (with a BlueFlame write's WQE),
    /// unless another one is held.
    fn put(&self, off: usize, v: u64, wqe: Option<&[u64; BF_WQE_BYTES / 8]>) -> bool {
        let claimed = self
            .tag
            .compare_exchange(0, WRITING, Ordering::Acquire, Ordering::Relaxed);
        if claimed.is_err() {
            return false;
        }
        self.value.store(v, Ordering::Relaxed);
        let mut tag = FULL | off as u64;
        if let Some(words) = wqe {
            for (slot, &w) in self.wqe.iter().zip(words) {
                slot.store(w, Ordering::Relaxed);
            }
            tag |= BLUEFLAME;
        }
        // Release: value and WQE before the tag says they are there.
        self.tag.store(tag, Ordering::Release);
        true
    }

    /// Whether a doorbell is held (or being written).
    fn full(&self) -> bool {
        self.tag.load(Ordering::Acquire) != 0
    }

    /// The doorbell held, if one is (one being written waits for the next
    /// look).
    fn take(&self) -> Option<Latched> {
        // Acquire: pairs with the release in `put`.
        let tag = self.tag.load(Ordering::Acquire);
        if tag & FULL == 0 {
            return None;
        }
        let v = self.value.load(Ordering::Relaxed);
        let wqe = (tag & BLUEFLAME != 0).then(|| {
            let mut words = [0u64; BF_WQE_BYTES / 8];
            for (w, slot) in words.iter_mut().zip(&self.wqe) {
                *w = slot.load(Ordering::Relaxed);
            }
            words
        });
        // Release: read before the next writer may claim it.
        self.tag.store(0, Ordering::Release);
        Some(((tag & 0xffff_ffff) as usize, v, wqe))
    }
}

/// The bytes of a BlueFlame write's WQE, from its little-endian words.
fn bf_bytes(words: &[u64; BF_WQE_BYTES / 8]) -> [u8; BF_WQE_BYTES] {
    let mut b = [0u8; BF_WQE_BYTES];
    for (chunk, w) in b.chunks_exact_mut(8).zip(words) {
        chunk.copy_from_slice(&w.to_le_bytes());
    }
    b
}

/// How much of the work queued to the device worker a step runs first.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Drain {
    No,
    /// One, the NIC having nothing else to do: not if the step takes a
    /// doorbell from the latch, which gives it something.
    Idle,
    /// One, however busy the NIC is ([`STREAK`] steps ran without).
    One,
    All,
}

/// Whether a step runs a turn of the device (frames received, timers, send
/// queues) after its work: an application thread writing a register in
/// thread mode leaves that to the device worker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Turn {
    Run,
    Skip,
}

fn run(st: &mut State, w: Work) {
    match w {
        Work::Reg(off, v) => regs::write(st, off, v),
        Work::Doorbell(off, v) => doorbell(st, off, v),
    }
}

/// A BlueFlame write in inline mode: its offset, SQ doorbell and WQE bytes.
type Bf<'a> = (usize, u64, &'a [u8; BF_WQE_BYTES]);

/// A BlueFlame write at BAR 2 offset `off` (the page's [`BF`]).
fn blueflame(st: &mut State, off: usize, v: u64, bytes: &[u8; BF_WQE_BYTES]) {
    if !st.dev.running() {
        log::warn!("BlueFlame write at {off:#x} ignored: device not running");
        return;
    }
    let page = (off / UAR_PAGE_SIZE) as u32;
    requester::sq_blueflame(st, page, SqDoorbell::from_bits(v), bytes);
}

/// Doorbell writes through memory taken in one step at most: the rest
/// wait for the next, so that one queue does not hold the NIC.
const POSTED_BATCH: usize = 64;

/// A doorbell write that came through memory: checked as a BAR 2 write
/// is ([`NicCore::write64`]), then run.
fn posted_write(st: &mut State, off: u64, v: u64) {
    let uar_bytes = st.dev.cfg.uar_pages as u64 * UAR_PAGE_SIZE as u64;
    if off % 8 != 0 || off >= uar_bytes {
        log::warn!("posted 64-bit write {v:#x} to BAR 2 offset {off:#x} ignored");
        return;
    }
    doorbell(st, off as usize, v);
}

/// A doorbell write at BAR 2 offset `off`.
fn doorbell(st: &mut State, off: usize, v: u64) {
    if !st.dev.running() {
        log::warn!("doorbell {v:#x} at {off:#x} ignored: device not running");
        return;
    }
    let page = (off / UAR_PAGE_SIZE) as u32;
    match off % UAR_PAGE_SIZE {
        SQ_DB => requester::sq_doorbell(st, page, SqDoorbell::from_bits(v)),
        RQ_DB => qp::rq_doorbell(st, page, RqDoorbell::from_bits(v)),
        CQ_DB => cq::arm(&mut st.dev, page, CqDoorbell::from_bits(v)),
        SRQ_DB => srq::doorbell(&mut st.dev, page, WqDoorbell::from_bits(v)),
        UAR_EQ_DB => eq::arm_doorbell(&mut st.dev, page, EqArmDoorbell::from_bits(v)),
        other => log::warn!("doorbell write {v:#x} to undefined page offset {other:#x} ignored"),
    }
}

/// Why a device could not be built.
#[derive(Debug)]
pub enum BuildError {
    /// The configuration is invalid.
    Config(ConfigError),
    /// The capture file `RNIC_PCAP` names could not be created.
    Capture(PathBuf, std::io::Error),
}

impl fmt::Display for BuildError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BuildError::Config(e) => e.fmt(f),
            BuildError::Capture(p, e) => write!(f, "RNIC_PCAP: cannot create {}: {e}", p.display()),
        }
    }
}

impl std::error::Error for BuildError {}

/// Builds an [`EmuDevice`]: its configuration, execution mode, clock and
/// wire.
///
/// ```
/// use rnic_emu::net::Switch;
/// use rnic_emu::{EmuConfig, EmuDevice, ExecMode, VirtualClock};
///
/// let sw = Switch::new();
/// let clock = VirtualClock::new();
/// let a = EmuDevice::builder(EmuConfig::default())
///     .mode(ExecMode::Inline)
///     .clock(clock.clock())
///     .wire(sw.port())
///     .build()
///     .unwrap();
/// # drop(a);
/// ```
pub struct EmuBuilder {
    config: EmuConfig,
    mode: ExecMode,
    poll_mode: bool,
    clock: Clock,
    wire: Option<Box<dyn Wire>>,
    posted: Option<Box<dyn PostedWrites>>,
}

impl fmt::Debug for EmuBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EmuBuilder")
            .field("config", &self.config)
            .field("mode", &self.mode)
            .field("poll_mode", &self.poll_mode)
            .field("clock", &self.clock)
            .field("wire", &self.wire.is_some())
            .field("posted", &self.posted)
            .finish()
    }
}

impl EmuBuilder {
    /// The execution mode (default: [`ExecMode::Thread`]).
    pub fn mode(mut self, mode: ExecMode) -> Self {
        self.mode = mode;
        self
    }

    /// Inline mode: the NIC runs only in the threads that ring its
    /// doorbells or call [`EmuDevice::poll`], as a NIC is driven by its own
    /// poll-mode driver; frames that reach it from other NICs wait for
    /// them (default: `false`, the thread that delivers a frame runs the
    /// NIC it reaches). Each NIC's state then stays with the thread that
    /// owns it, instead of crossing to whichever thread sent to it.
    pub fn poll_mode(mut self, on: bool) -> Self {
        self.poll_mode = on;
        self
    }

    /// The device clock (default: [`Clock::real`]).
    pub fn clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// The port's wire (default: a [`Loopback`]).
    pub fn wire(mut self, wire: impl Wire + 'static) -> Self {
        self.wire = Some(Box::new(wire));
        self
    }

    /// Doorbell writes that come through memory besides BAR 2 writes
    /// (rnicd's posted-write queue), taken on each step; in
    /// [`ExecMode::Thread`] the worker sleeps on the queue's descriptor.
    pub fn posted_writes(mut self, q: impl PostedWrites + 'static) -> Self {
        self.posted = Some(Box::new(q));
        self
    }

    /// Builds the device, in the reset state (`STATUS.ready` set). With
    /// `RNIC_PCAP` set in the environment the port's frames are captured
    /// to a pcap file: in `$RNIC_PCAP/rnic-<MAC>.pcap` if it names a
    /// directory, else to `$RNIC_PCAP` with `{mac}` replaced by the MAC and
    /// `{pid}` by the process ID (a server that forks a child per client).
    /// In [`ExecMode::Thread`] this puts the device on one of the process's
    /// device workers, which it leaves when the device is dropped (with the
    /// last [`EmuHal`] handle); the last device to leave a worker stops it.
    pub fn build(self) -> Result<Arc<EmuDevice>, BuildError> {
        self.config.validate().map_err(BuildError::Config)?;
        let mut wire = self.wire.unwrap_or_else(|| Box::new(Loopback::default()));
        if let Some(p) = std::env::var_os("RNIC_PCAP") {
            let mac: String = self.config.mac.iter().map(|b| format!("{b:02x}")).collect();
            let p = PathBuf::from(p);
            let path = if p.is_dir() {
                p.join(format!("rnic-{mac}.pcap"))
            } else {
                let pid = std::process::id().to_string();
                PathBuf::from(
                    p.to_string_lossy()
                        .replace("{mac}", &mac)
                        .replace("{pid}", &pid),
                )
            };
            let (c, _) = Tap::capture(wire, &path).map_err(|e| BuildError::Capture(path, e))?;
            wire = Box::new(c);
        }
        let notify = Arc::new(Notify {
            rx_pending: AtomicBool::new(false),
            scheduled: AtomicBool::new(false),
            kicked: AtomicBool::new(true),
            worker: OnceLock::new(),
            lent_at: AtomicU64::new(0),
            looked_at: AtomicU64::new(0),
            looking_since: AtomicU64::new(0),
            mode: self.mode,
            poll_mode: self.poll_mode,
            shared: OnceLock::new(),
        });
        let n = notify.clone();
        wire.set_waker(Arc::new(move || n.wake_rx()));
        let wire_polled = wire.polled();
        let hairpin = !wire.reflects();
        let wait_fd = wire.wait_fd();
        let irq = Arc::new(IrqLines::new(self.config.msix_vectors));
        let shared = Arc::new(NicCore {
            state: Mutex::new(State::new(self.config.clone(), irq.clone())),
            wire: Mutex::new(Link {
                wire,
                spare: Vec::new(),
            }),
            mode: self.mode,
            cfg: self.config,
            clock: self.clock,
            queue: ArrayQueue::new(QUEUE_DEPTH),
            latch: Latch::default(),
            shutdown: AtomicBool::new(false),
            notify: notify.clone(),
            polled_wire: wire_polled,
            hairpin,
            wait_fd,
            posted: self.posted,
            lent_steps: AtomicU64::new(0),
            arriving: AtomicU32::new(0),
            handovers: AtomicU64::new(0),
            note: Mutex::new(Note::default()),
            deadline: AtomicU64::new(0),
            irq,
            epoch: Instant::now(),
            on_clock: OnceLock::new(),
        });
        let _ = notify.shared.set(Arc::downgrade(&shared));
        // A virtual clock that jumps runs due timers: inline devices at once
        // in the advancing thread, device workers on their next turn.
        let weak = Arc::downgrade(&shared);
        let on_clock: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
            if let Some(s) = weak.upgrade() {
                match s.mode {
                    ExecMode::Inline => s.drive(None),
                    ExecMode::Thread => s.notify.nudge(),
                }
            }
        });
        shared.clock.on_advance(Arc::downgrade(&on_clock));
        let _ = shared.on_clock.set(on_clock);
        if self.mode == ExecMode::Thread {
            let _ = notify.worker.set(worker::join(&shared));
        }
        Ok(Arc::new(EmuDevice { shared }))
    }
}

/// How a device has been run ([`EmuDevice::run_stats`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RunStats {
    /// Steps run by threads that lent themselves to the NIC while they
    /// waited ([`EmuDevice::poll`] in thread mode).
    pub lent_steps: u64,
    /// Inline: times a thread running on from an earlier step left the
    /// NIC to another thread that was stepping it or came to, and went
    /// back to its program.
    pub handovers: u64,
    /// What the device worker did (shared by the NICs it runs); `None`
    /// in inline mode.
    pub worker: Option<WorkerStats>,
}

/// An emulated rnic device: BAR 0 registers, BAR 2 doorbell pages, DMA
/// through an emulated IOMMU (reached only through [`EmuHal`]), and a
/// RoCEv2 port on a [`Wire`].
#[derive(Debug)]
pub struct EmuDevice {
    shared: Arc<NicCore>,
}

impl EmuDevice {
    /// A device on a [`Loopback`] wire with the host clock.
    ///
    /// # Panics
    ///
    /// If `config` is invalid (see [`EmuConfig::validate`]) or the device
    /// thread cannot be spawned.
    pub fn new(config: EmuConfig, mode: ExecMode) -> Arc<EmuDevice> {
        match Self::builder(config).mode(mode).build() {
            Ok(d) => d,
            Err(e) => panic!("{e}"),
        }
    }

    /// A builder for a device with configuration `config`.
    pub fn builder(config: EmuConfig) -> EmuBuilder {
        EmuBuilder {
            config,
            mode: ExecMode::Thread,
            poll_mode: false,
            clock: Clock::real(),
            wire: None,
            posted: None,
        }
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

    /// The device clock.
    pub fn clock(&self) -> &Clock {
        &self.shared.clock
    }

    /// Lets the device make progress in the calling thread: in inline
    /// mode, runs its due timers and the frames waiting on its wire, and
    /// whatever that makes runnable; in thread mode, lends the thread to
    /// the NIC: it runs the NIC's steps while they have work, unless the
    /// device worker runs one now, and keeps the worker off the NIC while
    /// it goes on lending (see [`RunStats`]).
    pub fn poll(&self) {
        match self.shared.mode {
            ExecMode::Inline => {
                // A poll-mode NIC's wire has said when frames came (a
                // waker or, shared memory, the step's look at its ring):
                // the poller's every call need not take the wire's queue.
                if !self.shared.notify.poll_mode {
                    self.shared.notify.rx_pending.store(true, Ordering::Release);
                }
                self.shared.drive(None);
            }
            ExecMode::Thread => self.shared.lend(),
        }
    }

    /// How the device has been run: steps run by lending threads, and what
    /// its device worker did (thread mode).
    pub fn run_stats(&self) -> RunStats {
        RunStats {
            lent_steps: self.shared.lent_steps.load(Ordering::Relaxed),
            handovers: self.shared.handovers.load(Ordering::Relaxed),
            worker: self.shared.notify.worker.get().map(|w| w.stats()),
        }
    }

    /// Makes the device fail as hardware does on an internal error (a
    /// test's way to pull the plug): it enters the fatal state with the
    /// `Internal` syndrome, reporting a `DeviceFatal` event while its
    /// event queue works, and does nothing more until a reset.
    pub fn inject_internal_error(&self) {
        regs::internal_error(&mut self.shared.lock());
    }

    pub(crate) fn shared(&self) -> &Arc<NicCore> {
        &self.shared
    }
}

impl Drop for EmuDevice {
    fn drop(&mut self) {
        self.shared.shutdown.store(true, Ordering::Release);
        if let Some(w) = self.shared.notify.worker.get() {
            worker::leave(w, &self.shared);
        }
    }
}

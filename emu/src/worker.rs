//! Device workers: the threads that run thread-mode NICs, shared by every
//! NIC of the process so that NICs do not multiply threads.
//!
//! A process has at most [`max_workers`] of them: half its cores (at
//! least one), or `RNIC_EMU_WORKERS`. A new NIC joins a new worker while
//! there are fewer, else the one with the fewest NICs. A worker runs its
//! NICs round robin, one step each per pass, so that a busy NIC never
//! starves another.
//!
//! A NIC that a waiting thread is running ([`NicCore::lend`]: the
//! application polls its CQ) belongs to that thread: the worker leaves it
//! alone, so that the two never take turns at one NIC, and looks again
//! when the thread has not lent itself for [`LEND_WINDOW`] or says it
//! goes to sleep. When none of its NICs has work the worker spins for
//! [`SPIN`] after its last work, never yields, and then sleeps, in
//! `poll(2)` on its bell (an
//! eventfd that a doorbell, a command, a frame from an in-process wire or
//! a clock jump rings while it sleeps) and on the file descriptor of every
//! socket wire of a NIC it runs, until the earliest deadline (a timer, the
//! end of a lender's window, or the next look at a wire that has neither
//! a descriptor nor a waker). A frame or a doorbell therefore wakes it at
//! once; [`WorkerStats`] counts how it slept and woke, and the times a
//! NIC's work waited for the worker's clock. The last NIC to leave a
//! worker stops it.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::thread::{self, JoinHandle, Thread};
use std::time::Duration;

use crate::device::{host_ns, NicCore};

/// How long a thread that lent itself to a NIC keeps it from the worker:
/// longer than the gaps between two looks of a program that polls (its
/// work on one completion), shorter than the wait a peer would notice.
pub(crate) const LEND_WINDOW: Duration = Duration::from_micros(500);
/// Times the worker's look at a NIC that stays lent is put off twice as
/// long as the last: it looks after 1, 2, 4 and then every 8 lending
/// windows, so that a thread that stops looking without sleeping in the
/// driver leaves a socket's frames unattended for at most 8 windows (its
/// doorbells, and frames from in-process wires, wake the worker once the
/// window has passed).
const LOOKS_DOUBLE: u32 = 3;
/// How long the worker spins for more after its last work before it
/// sleeps.
const SPIN: Duration = Duration::from_micros(10);
/// The longest sleep while a NIC's wire can neither wake the worker nor
/// be slept on (a shared-memory ring that nobody polls).
const WIRE_LOOK: Duration = Duration::from_micros(50);

/// What a device worker did: how often it slept and how it woke.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WorkerStats {
    /// Times it went to sleep, none of its NICs having work.
    pub sleeps: u64,
    /// Times an event woke it: its bell (a doorbell, a command, a frame
    /// from an in-process wire, a lender going to sleep) or a socket wire
    /// becoming readable.
    pub woken: u64,
    /// Times its sleep ran out: a timer fell due, a lender's window ended,
    /// or a wire without a file descriptor was due a look.
    pub timeouts: u64,
    /// Of those, times it then found a NIC that nobody lent itself to
    /// with work that no timer explains (a doorbell, a command, frames):
    /// work that waited for the worker's clock instead of waking it (work
    /// whose wake-up raced the timeout, its fd readable by the time the
    /// worker looks, woke it and is not counted).
    pub late: u64,
    /// Of those, times it took back a NIC whose lending thread had
    /// stopped looking for [`LEND_WINDOW`] and found work waiting: a
    /// thread that went on to other work without sleeping in the driver,
    /// or that the host did not run for that long.
    pub takeovers: u64,
}

/// One worker: its NICs and how to wake it.
#[derive(Debug)]
pub(crate) struct Core {
    nics: Mutex<Vec<Weak<NicCore>>>,
    /// Bumped whenever `nics` changes: the worker re-reads the list.
    generation: AtomicU64,
    /// The generation of the list the worker runs: a NIC that leaves waits
    /// until the worker has let go of the list that holds it.
    acked: Line<AtomicU64>,
    /// The worker is (about to be) asleep: read on every doorbell.
    sleeping: Line<AtomicBool>,
    /// The eventfd the worker sleeps on beside its wires.
    bell: OwnedFd,
    stop: AtomicBool,
    /// The worker thread is running (cleared when it exits, even by a
    /// panic).
    alive: AtomicBool,
    thread: OnceLock<Thread>,
    handle: Mutex<Option<JoinHandle<()>>>,
    stats: Counters,
}

#[derive(Debug, Default)]
struct Counters {
    sleeps: AtomicU64,
    woken: AtomicU64,
    timeouts: AtomicU64,
    late: AtomicU64,
    takeovers: AtomicU64,
}

/// A value alone on its cache lines (two, for the adjacent-line
/// prefetcher).
#[derive(Debug, Default)]
#[repr(align(128))]
struct Line<T>(T);

impl<T> std::ops::Deref for Line<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

static POOL: Mutex<Vec<Arc<Core>>> = Mutex::new(Vec::new());

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// Workers a process runs at most: `RNIC_EMU_WORKERS`, else half the
/// cores, at least one.
pub(crate) fn max_workers() -> usize {
    let env = std::env::var("RNIC_EMU_WORKERS").ok();
    match env.and_then(|v| v.parse::<usize>().ok()) {
        Some(n) => n.max(1),
        None => thread::available_parallelism().map_or(1, |n| (n.get() / 2).max(1)),
    }
}

/// A non-blocking eventfd.
fn eventfd() -> OwnedFd {
    // SAFETY: eventfd has no memory arguments.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    assert!(
        fd >= 0,
        "cannot make a device worker's eventfd: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: a new descriptor that nothing else owns.
    unsafe { OwnedFd::from_raw_fd(fd) }
}

/// Adds `nic` to a worker (starting one if the pool has room) and returns
/// it.
pub(crate) fn join(nic: &Arc<NicCore>) -> Arc<Core> {
    let mut pool = lock(&POOL);
    let core = if pool.len() < max_workers() {
        let core = Arc::new(Core {
            nics: Mutex::new(Vec::new()),
            generation: AtomicU64::new(0),
            acked: Line(AtomicU64::new(0)),
            sleeping: Line(AtomicBool::new(false)),
            bell: eventfd(),
            stop: AtomicBool::new(false),
            alive: AtomicBool::new(true),
            thread: OnceLock::new(),
            handle: Mutex::new(None),
            stats: Counters::default(),
        });
        let c = core.clone();
        let handle = thread::Builder::new()
            .name("rnic-emu".into())
            .spawn(move || run(c))
            .expect("cannot spawn a device worker");
        let _ = core.thread.set(handle.thread().clone());
        *lock(&core.handle) = Some(handle);
        pool.push(core.clone());
        core
    } else {
        let least = pool.iter().min_by_key(|c| lock(&c.nics).len());
        least.expect("the pool is full, so not empty").clone()
    };
    lock(&core.nics).push(Arc::downgrade(nic));
    core.generation.fetch_add(1, Ordering::SeqCst);
    drop(pool);
    core.wake();
    core
}

/// Takes `nic` off `core`. When this returns the worker runs it no more
/// and holds no reference to it; the last NIC to leave stops the worker
/// and waits for its thread to exit.
pub(crate) fn leave(core: &Arc<Core>, nic: &NicCore) {
    let mut pool = lock(&POOL);
    let (empty, generation) = {
        let mut nics = lock(&core.nics);
        nics.retain(|w| !std::ptr::eq(w.as_ptr(), nic));
        let g = core.generation.fetch_add(1, Ordering::SeqCst) + 1;
        (nics.is_empty(), g)
    };
    if empty {
        core.stop.store(true, Ordering::SeqCst);
        pool.retain(|c| !Arc::ptr_eq(c, core));
    }
    drop(pool);
    let on_worker = core.thread.get().map(Thread::id) == Some(thread::current().id());
    if on_worker {
        return;
    }
    if empty {
        core.ring();
        if let Some(h) = lock(&core.handle).take() {
            if h.join().is_err() {
                log::error!("device worker panicked");
            }
        }
        return;
    }
    // The pass under way may still run the NIC.
    core.ring();
    while core.acked.load(Ordering::Acquire) < generation && core.alive() {
        thread::yield_now();
    }
}

impl Core {
    /// Wakes the worker if it sleeps.
    pub(crate) fn wake(&self) {
        // Pairs with the worker's fence between announcing sleep and
        // checking for work: one side sees the other.
        fence(Ordering::SeqCst);
        if self.sleeping.load(Ordering::Relaxed) {
            self.ring();
        }
    }

    /// Rings the bell, asleep or not.
    fn ring(&self) {
        let one: u64 = 1;
        // SAFETY: writes the 8 bytes of `one` to the eventfd this core
        // owns. A full counter (EAGAIN) still leaves it readable.
        unsafe {
            libc::write(
                self.bell.as_raw_fd(),
                (&one as *const u64).cast(),
                size_of::<u64>(),
            )
        };
    }

    /// Takes the bell's rings.
    fn hush(&self) {
        let mut n: u64 = 0;
        // SAFETY: reads 8 bytes into `n` from the eventfd this core owns;
        // an empty one fails with EAGAIN and changes nothing.
        unsafe {
            libc::read(
                self.bell.as_raw_fd(),
                (&mut n as *mut u64).cast(),
                size_of::<u64>(),
            )
        };
    }

    /// The worker thread is running.
    pub(crate) fn alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }

    /// What the worker has done so far.
    pub(crate) fn stats(&self) -> WorkerStats {
        let s = &self.stats;
        WorkerStats {
            sleeps: s.sleeps.load(Ordering::Relaxed),
            woken: s.woken.load(Ordering::Relaxed),
            timeouts: s.timeouts.load(Ordering::Relaxed),
            late: s.late.load(Ordering::Relaxed),
            takeovers: s.takeovers.load(Ordering::Relaxed),
        }
    }
}

/// A NIC as the worker runs it. Held strongly, so that a pass touches no
/// reference count (a count shares its line with what doorbells read).
struct Entry {
    nic: Arc<NicCore>,
    /// A waiting thread ran it when the worker last looked.
    lent: bool,
    /// Sleeps in a row that found it lent on waking.
    checks: u32,
}

/// Clears `alive` when the worker exits, even by a panic.
struct AliveGuard(Arc<Core>);

impl Drop for AliveGuard {
    fn drop(&mut self) {
        self.0.alive.store(false, Ordering::Release);
    }
}

fn run(core: Arc<Core>) {
    let guard = AliveGuard(core);
    let core = &guard.0;
    let mut entries: Vec<Entry> = Vec::new();
    let mut seen = u64::MAX;
    let mut fds: Vec<libc::pollfd> = Vec::new();
    let mut worked_at = 0u64;
    loop {
        if core.stop.load(Ordering::Acquire) {
            return;
        }
        let generation = core.generation.load(Ordering::Acquire);
        if generation != seen {
            seen = generation;
            let nics = lock(&core.nics);
            let mut old = std::mem::take(&mut entries);
            entries = nics
                .iter()
                .filter_map(|w| {
                    let at = old
                        .iter()
                        .position(|e| std::ptr::eq(Arc::as_ptr(&e.nic), w.as_ptr()));
                    match at {
                        Some(i) => Some(old.swap_remove(i)),
                        None => w.upgrade().map(|nic| Entry {
                            nic,
                            lent: false,
                            checks: 0,
                        }),
                    }
                })
                .collect();
            drop(nics);
            // The NICs that left go with `old`, before they are told.
            drop(old);
            core.acked.store(generation, Ordering::Release);
        }
        let now = host_ns();
        let mut busy = false;
        for e in &mut entries {
            e.lent = e.nic.lent(now);
            if !e.lent {
                e.checks = 0;
                // A lender that has it now runs it.
                busy |= e.nic.turn(false).unwrap_or(false);
            }
        }
        if busy {
            worked_at = now;
        } else if now.saturating_sub(worked_at) < SPIN.as_nanos() as u64 {
            // Work often comes in bursts: a reply to what was just sent.
            std::hint::spin_loop();
        } else {
            sleep(core, &mut entries, &mut fds);
        }
    }
}

/// Sleeps until an event or the earliest deadline of `entries`, unless
/// one has work after the worker said it sleeps; counts how it woke.
fn sleep(core: &Core, entries: &mut [Entry], fds: &mut Vec<libc::pollfd>) {
    core.sleeping.store(true, Ordering::Relaxed);
    // Pairs with the fence in `Core::wake`: a doorbell rung after this
    // rings the bell, one rung before it is seen by `nap` below.
    fence(Ordering::SeqCst);
    fds.clear();
    fds.push(libc::pollfd {
        fd: core.bell.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    });
    let now = host_ns();
    let mut nap = Some(Duration::MAX);
    for e in entries.iter_mut() {
        let until = if e.lent {
            // A thread that keeps lending is looked in on less and less
            // often: each look is a context switch on a core it needs.
            let extra = LEND_WINDOW * ((1 << e.checks.min(LOOKS_DOUBLE)) - 1);
            e.checks += 1;
            Some(e.nic.lend_ends(now) + extra)
        } else {
            match e.nic.wait_fd() {
                Some(fd) => fds.push(libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                }),
                None if e.nic.polled_wire() => nap = nap.map(|n| n.min(WIRE_LOOK)),
                None => {}
            }
            if let Some(fd) = e.nic.posted_fd() {
                fds.push(libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                });
            }
            e.nic.nap()
        };
        nap = nap.zip(until).map(|(a, b)| a.min(b));
    }
    let stop = core.stop.load(Ordering::Acquire);
    if let Some(nap) = nap.filter(|_| !stop) {
        core.stats.sleeps.fetch_add(1, Ordering::Relaxed);
        let ts = (nap != Duration::MAX).then(|| libc::timespec {
            tv_sec: nap.as_secs().min(i32::MAX as u64) as libc::time_t,
            tv_nsec: nap.subsec_nanos() as libc::c_long,
        });
        let tsp = ts
            .as_ref()
            .map_or(std::ptr::null(), |t| t as *const libc::timespec);
        // SAFETY: `fds` holds `fds.len()` initialised pollfds that outlive
        // the call, and `tsp` is null or points at `ts`; the kernel writes
        // only the pollfds' `revents`.
        let n = unsafe {
            libc::ppoll(
                fds.as_mut_ptr(),
                fds.len() as libc::nfds_t,
                tsp,
                std::ptr::null(),
            )
        };
        if n == 0 {
            core.stats.timeouts.fetch_add(1, Ordering::Relaxed);
            let now = host_ns();
            let (mut late, mut takeover) = (false, false);
            for e in entries
                .iter()
                .filter(|e| !e.nic.lent(now) && e.nic.waiting())
            {
                if e.lent {
                    takeover = true;
                } else {
                    late = true;
                }
            }
            // A frame or doorbell whose wake-up raced the timeout has its
            // fd readable now: that work woke the worker, it did not wait.
            // SAFETY: as for the sleep above, with a zero timeout.
            let raced =
                late && unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 0) } > 0;
            if late && !raced {
                core.stats.late.fetch_add(1, Ordering::Relaxed);
            }
            if takeover {
                core.stats.takeovers.fetch_add(1, Ordering::Relaxed);
            }
        } else if n > 0 {
            core.stats.woken.fetch_add(1, Ordering::Relaxed);
        }
        core.hush();
        core.sleeping.store(false, Ordering::Relaxed);
        // Timers may be due: every NIC runs a step.
        for e in entries.iter().filter(|e| !e.lent) {
            e.nic.rouse();
        }
    }
    core.sleeping.store(false, Ordering::Relaxed);
    for e in entries.iter().filter(|e| !e.lent) {
        e.nic.awake();
    }
}

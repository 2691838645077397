//! Device workers: the threads that run thread-mode NICs, shared by every
//! NIC of the process so that NICs do not multiply spinning threads.
//!
//! A process has at most [`max_workers`] of them: half its cores (at
//! least one), or `RNIC_EMU_WORKERS`. A new NIC joins a new worker while
//! there are fewer, else the one with the fewest NICs. A worker runs its
//! NICs round robin, one step each per pass, so that a busy NIC never
//! starves another; when none has work it spins, then yields, then
//! sleeps until a doorbell, a frame or the earliest timer of its NICs
//! wakes it. The last NIC to leave a worker stops it.

use std::sync::atomic::{fence, AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock, Weak};
use std::thread::{self, JoinHandle, Thread};
use std::time::{Duration, Instant};

use crate::device::{Shared, STREAK};

/// Idle worker: busy-spin this long after the last work...
const SPIN: Duration = Duration::from_micros(10);
/// ...then yield the CPU until this long...
const YIELD: Duration = Duration::from_micros(200);
/// ...then sleep in steps of at most this (a doorbell or a frame wakes it
/// early).
const SLEEP: Duration = Duration::from_micros(50);

/// One worker: its NICs and how to wake it.
#[derive(Debug)]
pub(crate) struct Core {
    nics: Mutex<Vec<Weak<Shared>>>,
    /// Bumped whenever `nics` changes: the worker re-reads the list.
    generation: AtomicU64,
    /// The generation of the list the worker runs: a NIC that leaves waits
    /// until the worker has let go of the list that holds it.
    acked: Line<AtomicU64>,
    /// The worker is (about to be) parked: read on every doorbell.
    sleeping: Line<AtomicBool>,
    stop: AtomicBool,
    /// The worker thread is running (cleared when it exits, even by a
    /// panic).
    alive: AtomicBool,
    thread: OnceLock<Thread>,
    handle: Mutex<Option<JoinHandle<()>>>,
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

/// Adds `nic` to a worker (starting one if the pool has room) and returns
/// it.
pub(crate) fn join(nic: &Arc<Shared>) -> Arc<Core> {
    let mut pool = lock(&POOL);
    let core = if pool.len() < max_workers() {
        let core = Arc::new(Core {
            nics: Mutex::new(Vec::new()),
            generation: AtomicU64::new(0),
            acked: Line(AtomicU64::new(0)),
            sleeping: Line(AtomicBool::new(false)),
            stop: AtomicBool::new(false),
            alive: AtomicBool::new(true),
            thread: OnceLock::new(),
            handle: Mutex::new(None),
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
pub(crate) fn leave(core: &Arc<Core>, nic: &Shared) {
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
        core.wake();
        if let Some(h) = lock(&core.handle).take() {
            h.thread().unpark();
            if h.join().is_err() {
                log::error!("device worker panicked");
            }
        }
        return;
    }
    // The pass under way may still run the NIC.
    core.wake();
    while core.acked.load(Ordering::Acquire) < generation && core.alive() {
        core.wake();
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
            if let Some(t) = self.thread.get() {
                t.unpark();
            }
        }
    }

    /// The worker thread is running.
    pub(crate) fn alive(&self) -> bool {
        self.alive.load(Ordering::Acquire)
    }
}

/// A NIC as the worker runs it. Held strongly, so that a pass touches no
/// reference count (a count shares its line with what doorbells read).
struct Entry {
    nic: Arc<Shared>,
    /// The NIC's last step left it more to do.
    more: bool,
    /// Steps run since it last took queued work.
    streak: u32,
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
    let mut idle_since: Option<Instant> = None;
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
                            more: true,
                            streak: STREAK,
                        }),
                    }
                })
                .collect();
            drop(nics);
            // The NICs that left go with `old`, before they are told.
            drop(old);
            core.acked.store(generation, Ordering::Release);
        }
        let mut busy = false;
        for e in &mut entries {
            busy |= e.nic.work(&mut e.more, &mut e.streak);
        }
        if busy {
            idle_since = None;
            continue;
        }
        let idle = idle_since.get_or_insert_with(Instant::now).elapsed();
        if idle < SPIN {
            std::hint::spin_loop();
        } else if idle < YIELD {
            thread::yield_now();
        } else {
            core.sleeping.store(true, Ordering::Relaxed);
            // Pairs with the fence in `Core::wake`.
            fence(Ordering::SeqCst);
            let mut nap = Some(SLEEP);
            for e in &entries {
                nap = nap.zip(e.nic.nap()).map(|(a, b)| a.min(b));
            }
            let stop = core.stop.load(Ordering::Acquire);
            if let Some(nap) = nap.filter(|_| !stop) {
                thread::park_timeout(nap);
            }
            core.sleeping.store(false, Ordering::Relaxed);
            // Timers may be due: every NIC runs a step.
            for e in &mut entries {
                e.more = true;
                e.streak = STREAK;
            }
        }
    }
}

//! Cores and CPU time: pinning the application threads, and the CPU time
//! a thread has used.

/// Number of cores this process may run on, as it started: a pinned
/// thread (and the threads it spawns) would see only its own core.
pub fn cores() -> usize {
    static CORES: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *CORES.get_or_init(|| std::thread::available_parallelism().map_or(1, |n| n.get()))
}

/// Pins the calling thread to core `core` (modulo the cores there are);
/// a failure only costs precision, so it is logged, not fatal.
pub fn pin(core: usize) {
    let core = core % cores();
    // SAFETY: a zeroed cpu_set_t is a valid empty set; CPU_SET writes
    // inside it; sched_setaffinity reads `size_of::<cpu_set_t>()` bytes.
    let r = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(core, &mut set);
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set)
    };
    if r != 0 {
        log::warn!(
            "pinning to core {core}: {}",
            std::io::Error::last_os_error()
        );
    }
    // SAFETY: no arguments.
    log::debug!("pinned to core {core}, running on {}", unsafe {
        libc::sched_getcpu()
    });
}

/// CPU time the calling thread has used, in nanoseconds.
pub fn thread_ns() -> u64 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut t) };
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

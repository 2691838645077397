//! `errno`, as libibverbs sets it.

use std::ffi::c_int;

/// Sets the calling thread's `errno`.
pub(crate) fn set(e: i32) {
    // SAFETY: `__errno_location` returns the calling thread's errno, valid
    // for the thread's life.
    unsafe { *libc::__errno_location() = e };
}

/// Sets `errno` to `e` and returns NULL: how a verb that returns a pointer
/// fails.
pub(crate) fn fail<T>(e: i32) -> *mut T {
    set(e);
    std::ptr::null_mut()
}

/// Whether a wait that a signal handler interrupted goes on, as the
/// kernel's `read` of libibverbs' event files does after a handler
/// installed with `SA_RESTART`, or fails with `EINTR`, as it does after
/// any other. The drop-in's waits are `poll`s, which the kernel never
/// restarts, and which signal ran is not known: the wait goes on unless
/// some handler of an asynchronous signal lacks `SA_RESTART` (qperf's
/// `SIGALRM`, which ends its tests, has none). Handlers of faults do not
/// count: a fault never interrupts a wait.
pub(crate) fn restarts_after_signal() -> bool {
    const FAULTS: [c_int; 5] = [
        libc::SIGSEGV,
        libc::SIGBUS,
        libc::SIGILL,
        libc::SIGFPE,
        libc::SIGTRAP,
    ];
    (1..=libc::SIGRTMAX())
        .filter(|s| !FAULTS.contains(s))
        .all(|s| {
            // SAFETY: a zeroed sigaction is a valid output buffer; a NULL
            // new action only reads the current one (signals the C
            // library reserves fail, and count as restarting).
            let mut old: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            let rc = unsafe { libc::sigaction(s, std::ptr::null(), &mut old) };
            rc != 0
                || old.sa_sigaction == libc::SIG_DFL
                || old.sa_sigaction == libc::SIG_IGN
                || old.sa_flags & libc::SA_RESTART != 0
        })
}

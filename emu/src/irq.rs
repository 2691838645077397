//! Interrupt lines: what `EmuHal::wait_irq` waits on, and the eventfd of
//! each vector that `EmuHal::irq_eventfd` hands out.
//!
//! A vector is pending from the moment the model raises it (see `regs`
//! and `eq`) until a wait takes it, so a raise between a driver's check
//! and its wait is not lost; one wait takes every raise before it, as a
//! read of an eventfd does (VFIO delivers MSI-X on eventfds). Each vector
//! also has a real eventfd, written on every raise and drained by every
//! wait, so a program can `poll` it.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::{Condvar, Mutex};

use rnic_queues::HalError;
use std::time::{Duration, Instant};

/// The MSI-X vectors of one device.
#[derive(Debug)]
pub(crate) struct IrqLines {
    pending: Mutex<Vec<bool>>,
    cv: Condvar,
    /// One per vector; `None` if the system would not create it.
    fds: Vec<Option<OwnedFd>>,
    /// Eventfds of a platform's client, signalled on every raise too.
    forwards: Mutex<Vec<Option<OwnedFd>>>,
}

/// Adds 1 to eventfd `fd`.
fn signal(fd: &OwnedFd) {
    let one = 1u64;
    // SAFETY: writes the 8 bytes of `one` to a descriptor we hold. A full
    // counter (EAGAIN) is still readable: nothing is lost; a descriptor
    // that is no eventfd fails the write harmlessly.
    let _ = unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
}

/// A non-blocking eventfd.
fn eventfd() -> Option<OwnedFd> {
    // SAFETY: eventfd has no memory arguments; a non-negative result is a
    // new descriptor that nothing else owns.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    // SAFETY: `fd` is a fresh descriptor owned by nobody else.
    (fd >= 0).then(|| unsafe { OwnedFd::from_raw_fd(fd) })
}

impl IrqLines {
    /// `n` vectors, none pending.
    pub(crate) fn new(n: u16) -> Self {
        Self {
            pending: Mutex::new(vec![false; n.into()]),
            cv: Condvar::new(),
            fds: (0..n).map(|_| eventfd()).collect(),
            forwards: Mutex::new((0..n).map(|_| None).collect()),
        }
    }

    /// Signals `fd` on every raise of `vector` from now on (`None`: no
    /// longer); a vector the device does not have is refused.
    pub(crate) fn forward(&self, vector: u16, fd: Option<OwnedFd>) -> Result<(), HalError> {
        let mut f = self.forwards.lock().unwrap_or_else(|e| e.into_inner());
        let slot = f
            .get_mut(usize::from(vector))
            .ok_or(HalError::Unsupported)?;
        *slot = fd;
        Ok(())
    }

    /// Raises `vector` (a vector the device does not have is ignored).
    pub(crate) fn raise(&self, vector: u16) {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        let Some(v) = p.get_mut(usize::from(vector)) else {
            log::warn!("raise of MSI-X vector {vector}, which the device does not have");
            return;
        };
        *v = true;
        if let Some(fd) = &self.fds[usize::from(vector)] {
            signal(fd);
        }
        let f = self.forwards.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(fd) = &f[usize::from(vector)] {
            signal(fd);
        }
        drop(f);
        self.cv.notify_all();
    }

    /// Takes every pending raise of `vector`: its eventfd reads empty.
    fn take(&self, p: &mut [bool], vector: u16) -> bool {
        let i = usize::from(vector);
        let was = std::mem::replace(&mut p[i], false);
        // Raises write the eventfd under the same lock, so it holds a count
        // exactly while the vector is pending: read only then, since a
        // program may have made it blocking (libibverbs' channel fds are).
        if let (true, Some(fd)) = (was, &self.fds[i]) {
            let mut n = 0u64;
            // SAFETY: reads 8 bytes into `n` from an eventfd we own, whose
            // count is not zero.
            let _ = unsafe { libc::read(fd.as_raw_fd(), (&mut n as *mut u64).cast(), 8) };
        }
        was
    }

    /// Waits up to `timeout_ns` for `vector` to be pending and takes it;
    /// `Ok(false)` on timeout or for a vector the device does not have.
    /// The wait is a `ppoll` of the vector's eventfd, so a signal handler
    /// that runs in this thread ends it with [`HalError::Interrupted`]
    /// (a vector without an eventfd waits on the condition variable,
    /// which no signal ends).
    pub(crate) fn wait(&self, vector: u16, timeout_ns: u64) -> Result<bool, HalError> {
        let deadline = Instant::now() + Duration::from_nanos(timeout_ns);
        let i = usize::from(vector);
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        if i >= p.len() {
            return Ok(false);
        }
        loop {
            if self.take(&mut p, vector) {
                return Ok(true);
            }
            let now = Instant::now();
            if now >= deadline {
                return Ok(false);
            }
            match &self.fds[i] {
                Some(fd) => {
                    drop(p);
                    // A raise after the take above left the eventfd
                    // readable: the poll returns at once.
                    poll_readable(fd.as_raw_fd(), deadline - now)?;
                    p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
                }
                None => {
                    p = self
                        .cv
                        .wait_timeout(p, deadline - now)
                        .unwrap_or_else(|e| e.into_inner())
                        .0;
                }
            }
        }
    }

    /// The eventfd of `vector`, if it has one.
    pub(crate) fn eventfd(&self, vector: u16) -> Option<RawFd> {
        self.fds
            .get(usize::from(vector))?
            .as_ref()
            .map(AsRawFd::as_raw_fd)
    }

    /// Drops every pending raise (device reset).
    pub(crate) fn clear(&self) {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        for v in 0..p.len() {
            self.take(&mut p, v as u16);
        }
    }
}

/// Waits up to `timeout` for `fd` to turn readable (`Ok` either way).
fn poll_readable(fd: RawFd, timeout: Duration) -> Result<(), HalError> {
    let ts = libc::timespec {
        tv_sec: timeout.as_secs().min(i32::MAX as u64) as libc::time_t,
        tv_nsec: timeout.subsec_nanos().into(),
    };
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, a valid timespec, no signal mask.
    if unsafe { libc::ppoll(&mut p, 1, &ts, std::ptr::null()) } < 0 {
        let e = std::io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::EINTR) => HalError::Interrupted,
            errno => HalError::Os(errno.unwrap_or(libc::EIO)),
        });
    }
    Ok(())
}

/// Whether `fd` is readable now (for tests of descriptors that say so).
#[cfg(test)]
pub(crate) fn readable(fd: RawFd) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no timeout.
    unsafe { libc::poll(&mut p, 1, 0) == 1 }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_raise_is_pending_until_one_wait_takes_it() {
        let l = IrqLines::new(2);
        let fd = l.eventfd(1).unwrap();
        assert!(!readable(fd));
        l.raise(1);
        l.raise(1);
        assert!(readable(fd));
        assert_eq!(l.wait(0, 0), Ok(false), "another vector");
        assert_eq!(l.wait(1, 0), Ok(true));
        assert!(!readable(fd), "the wait drained the eventfd");
        assert_eq!(
            l.wait(1, 1_000_000),
            Ok(false),
            "both raises taken by one wait"
        );
        l.raise(7);
        assert_eq!(l.wait(7, 0), Ok(false), "no such vector");
        l.raise(1);
        l.clear();
        assert!(!readable(fd));
        assert_eq!(l.wait(1, 0), Ok(false));
    }

    #[test]
    fn a_forwarded_vector_signals_the_client_s_eventfd_too() {
        let l = IrqLines::new(2);
        let client = eventfd().unwrap();
        let raw = client.as_raw_fd();
        // SAFETY: `dup` of a descriptor we hold; the copy is owned by the
        // lines from here on.
        let copy = unsafe { OwnedFd::from_raw_fd(libc::dup(raw)) };
        l.forward(1, Some(copy)).unwrap();
        assert_eq!(l.forward(2, None), Err(HalError::Unsupported));
        l.raise(0);
        assert!(!readable(raw), "another vector");
        l.raise(1);
        assert!(readable(raw));
        l.forward(1, None).unwrap();
        let mut n = 0u64;
        // SAFETY: reads 8 bytes into `n` from the eventfd we hold.
        unsafe { libc::read(raw, (&mut n as *mut u64).cast(), 8) };
        l.raise(1);
        assert!(!readable(raw), "no longer forwarded");
    }

    extern "C" fn on_signal(_: libc::c_int) {}

    #[test]
    fn a_signal_handler_ends_a_wait_and_a_raise_still_wakes_one() {
        let l = std::sync::Arc::new(IrqLines::new(1));
        // SAFETY: installs a handler that does nothing for SIGUSR2, which
        // nothing else in the test program handles; no SA_RESTART.
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as *const () as usize;
            assert_eq!(libc::sigaction(libc::SIGUSR2, &sa, std::ptr::null_mut()), 0);
        }
        let waiter = {
            let l = std::sync::Arc::clone(&l);
            std::thread::spawn(move || l.wait(0, 20_000_000_000))
        };
        // Again until it ends: a signal before the waiter polls ends nothing.
        while !waiter.is_finished() {
            use std::os::unix::thread::JoinHandleExt;
            // SAFETY: the thread has not been joined, so its id is valid.
            unsafe { libc::pthread_kill(waiter.as_pthread_t(), libc::SIGUSR2) };
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(waiter.join().unwrap(), Err(HalError::Interrupted));
        let waiter = {
            let l = std::sync::Arc::clone(&l);
            std::thread::spawn(move || l.wait(0, 20_000_000_000))
        };
        std::thread::sleep(Duration::from_millis(20));
        l.raise(0);
        assert_eq!(waiter.join().unwrap(), Ok(true));
    }
}

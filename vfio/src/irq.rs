//! Interrupts as eventfds.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// An eventfd: the kernel adds to its counter each time the interrupt it is
/// wired to fires.
///
/// Its takers take the count one at a time and only while it is readable,
/// so that a program that made the descriptor blocking (a libibverbs
/// completion channel's fd is) never blocks one of them.
#[derive(Debug)]
pub struct EventFd(OwnedFd, std::sync::Mutex<()>);

impl EventFd {
    /// A new non-blocking, close-on-exec eventfd with count 0.
    pub fn new() -> io::Result<Self> {
        // SAFETY: eventfd has no memory-safety preconditions.
        let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: eventfd returned a new descriptor that nothing else owns.
        Ok(Self(
            unsafe { OwnedFd::from_raw_fd(fd) },
            std::sync::Mutex::new(()),
        ))
    }

    /// Adds 1 to the counter, as an interrupt does.
    pub fn signal(&self) -> io::Result<()> {
        let one = 1u64.to_ne_bytes();
        // SAFETY: writes 8 bytes from a valid buffer to an open fd.
        let n = unsafe { libc::write(self.0.as_raw_fd(), one.as_ptr().cast(), 8) };
        if n == 8 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }

    /// Reads and clears the counter: how many times it fired since the
    /// last read (0 if none).
    pub fn take(&self) -> io::Result<u64> {
        let _one_taker = self.1.lock().unwrap_or_else(|e| e.into_inner());
        let mut pfd = libc::pollfd {
            fd: self.0.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd; a zero timeout returns at once.
        if unsafe { libc::poll(&mut pfd, 1, 0) } <= 0 {
            return Ok(0);
        }
        let mut buf = [0u8; 8];
        // SAFETY: reads at most 8 bytes into a valid 8-byte buffer.
        let n = unsafe { libc::read(self.0.as_raw_fd(), buf.as_mut_ptr().cast(), 8) };
        if n == 8 {
            return Ok(u64::from_ne_bytes(buf));
        }
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::WouldBlock {
            Ok(0)
        } else {
            Err(e)
        }
    }

    /// Waits up to `timeout_ns` for the counter to become non-zero, then
    /// clears it. Returns whether it fired; `EINTR` if a signal handler ran
    /// in this thread meanwhile.
    pub fn wait(&self, timeout_ns: u64) -> io::Result<bool> {
        let start = now_ns();
        loop {
            let left = timeout_ns.saturating_sub(now_ns().saturating_sub(start));
            let ts = libc::timespec {
                tv_sec: (left / 1_000_000_000) as libc::time_t,
                tv_nsec: (left % 1_000_000_000) as libc::c_long,
            };
            let mut pfd = libc::pollfd {
                fd: self.0.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // SAFETY: one valid pollfd, a valid timespec, no signal mask.
            let rc = unsafe { libc::ppoll(&mut pfd, 1, &ts, std::ptr::null()) };
            if rc < 0 {
                // EINTR too: the caller may be waiting on a program's
                // behalf, which then returns EINTR as the kernel would.
                return Err(io::Error::last_os_error());
            }
            if rc > 0 && self.take()? > 0 {
                return Ok(true);
            }
            // Timed out, or another waiter took the count first.
            if left == 0 || now_ns().saturating_sub(start) >= timeout_ns {
                return Ok(false);
            }
        }
    }
}

impl AsFd for EventFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

/// `CLOCK_MONOTONIC` in nanoseconds.
pub fn now_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec through a valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The interrupt vectors enabled on a device: one eventfd per vector.
#[derive(Debug)]
pub struct IrqVectors {
    pub(crate) kind: crate::IrqKind,
    pub(crate) fds: Vec<EventFd>,
}

impl IrqVectors {
    /// Which interrupt type these vectors are.
    pub fn kind(&self) -> crate::IrqKind {
        self.kind
    }

    /// Number of vectors.
    pub fn len(&self) -> usize {
        self.fds.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.fds.is_empty()
    }

    /// The eventfd of `vector`, to wait on with poll/epoll elsewhere.
    pub fn eventfd(&self, vector: usize) -> Option<&EventFd> {
        self.fds.get(vector)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eventfd_wait_fires_and_times_out() {
        let e = EventFd::new().unwrap();
        let t0 = now_ns();
        assert!(!e.wait(20_000_000).unwrap(), "nothing signalled");
        let waited = now_ns() - t0;
        assert!(waited >= 20_000_000, "returned after {waited} ns");

        e.signal().unwrap();
        e.signal().unwrap();
        assert!(e.wait(1_000_000_000).unwrap());
        assert_eq!(e.take().unwrap(), 0, "wait cleared the count");
        assert!(!e.wait(0).unwrap(), "zero timeout polls once");

        // Signalled from another thread while waiting.
        let e = std::sync::Arc::new(e);
        let e2 = std::sync::Arc::clone(&e);
        let t = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(10));
            e2.signal().unwrap();
        });
        assert!(e.wait(5_000_000_000).unwrap());
        t.join().unwrap();
    }

    #[test]
    fn monotonic_clock_moves_forward() {
        let a = now_ns();
        let b = now_ns();
        assert!(b >= a && a > 0);
    }
}

//! A context's `async_fd`, as the kernel gives each context an event file
//! of its own: an epoll instance of the context's over the device's event
//! fd (readable when the device's one event queue has events, of any of
//! its contexts) and an eventfd of the context's own (readable while
//! events of this context that another context took off the queue wait
//! for it). So each context's descriptor wakes for the events it is
//! given, and has flags of its own (`O_NONBLOCK`, as UCX sets on its
//! memory domain's, and not on the context librdmacm opens beside it).

use std::ffi::c_int;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::Arc;

/// The descriptors behind one context's `async_fd`.
pub(crate) struct AsyncFd {
    /// The epoll instance: `async_fd`.
    epoll: OwnedFd,
    /// Readable while events were queued for the context.
    queued: Arc<OwnedFd>,
}

impl AsyncFd {
    /// An `async_fd` over the device's event fd `device_fd`; blocking, as
    /// libibverbs opens it.
    pub(crate) fn new(device_fd: c_int) -> io::Result<AsyncFd> {
        // SAFETY: plain system calls; each result is checked and owned
        // once valid.
        let epoll = unsafe { libc::epoll_create1(libc::EPOLL_CLOEXEC) };
        if epoll < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor just opened, owned by nothing else.
        let epoll = unsafe { OwnedFd::from_raw_fd(epoll) };
        // SAFETY: as above.
        let queued = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if queued < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a descriptor just opened, owned by nothing else.
        let queued = Arc::new(unsafe { OwnedFd::from_raw_fd(queued) });
        for fd in [device_fd, queued.as_raw_fd()] {
            let mut ev = libc::epoll_event {
                events: libc::EPOLLIN as u32,
                u64: fd as u64,
            };
            // SAFETY: `ev` is a valid epoll_event; both descriptors are
            // open (the device's lives as long as the device).
            if unsafe { libc::epoll_ctl(epoll.as_raw_fd(), libc::EPOLL_CTL_ADD, fd, &mut ev) } < 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(AsyncFd { epoll, queued })
    }

    /// The descriptor programs see.
    pub(crate) fn raw(&self) -> c_int {
        self.epoll.as_raw_fd()
    }

    /// What the device runs when it queues an event for this context:
    /// raises the context's eventfd.
    pub(crate) fn raiser(&self) -> Arc<dyn Fn() + Send + Sync> {
        let queued = Arc::clone(&self.queued);
        Arc::new(move || raise(queued.as_raw_fd()))
    }

    /// Raises the context's eventfd (events are still queued for it).
    pub(crate) fn raise(&self) {
        raise(self.queued.as_raw_fd());
    }

    /// Lowers the context's eventfd, before its queue is looked at.
    pub(crate) fn lower(&self) {
        let mut n = 0u64;
        // SAFETY: reads 8 bytes into `n`; a non-blocking eventfd that is
        // not raised fails with EAGAIN, which is what lowered means.
        let _ = unsafe { libc::read(self.queued.as_raw_fd(), (&raw mut n).cast(), 8) };
    }

    /// Waits up to `timeout_ms` for the descriptor to turn readable:
    /// `Err` with `EINTR` when a signal handler ran.
    pub(crate) fn wait(&self, timeout_ms: c_int) -> io::Result<()> {
        let mut p = libc::pollfd {
            fd: self.raw(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        if unsafe { libc::poll(&mut p, 1, timeout_ms) } < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }
}

fn raise(fd: c_int) {
    let one = 1u64;
    // SAFETY: writes 8 bytes from `one` to an eventfd; a counter at its
    // maximum (never, at one per event) fails harmlessly.
    let _ = unsafe { libc::write(fd, (&raw const one).cast(), 8) };
}

//! Event channels: `rdma_create_event_channel`, `rdma_get_cm_event`,
//! `rdma_ack_cm_event`. A channel is a queue of events and an eventfd
//! (semaphore mode) that counts them, so that its `fd` is readable while
//! an event waits, as the kernel's is, and a blocking `rdma_get_cm_event`
//! sleeps in `read` on it (or fails with `EAGAIN` if the program made the
//! fd non-blocking).

use std::collections::VecDeque;
use std::ffi::c_int;
use std::sync::Mutex;

use crate::abi::{RdmaCmEvent, RdmaEventChannel};
use crate::errno;

/// Bytes of private data an event carries at most (a REP's).
pub(crate) const PRIVATE_MAX: usize = 196;

/// An event and the private data its parameters point into, freed when
/// acknowledged.
#[repr(C)]
pub(crate) struct EventBox {
    /// What the program sees (first, so that a pointer to it is one to
    /// the box).
    pub ev: RdmaCmEvent,
    /// The private data.
    pub private: [u8; PRIVATE_MAX],
}

/// A channel (what `struct rdma_event_channel *` points to).
#[repr(C)]
pub(crate) struct Channel {
    ibv: RdmaEventChannel,
    queue: Mutex<VecDeque<Box<EventBox>>>,
}

impl Channel {
    /// Queues `ev` and makes the fd readable.
    pub(crate) fn push(&self, ev: Box<EventBox>) {
        self.queue
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push_back(ev);
        let one: u64 = 1;
        // SAFETY: writes 8 bytes to the channel's eventfd.
        unsafe { libc::write(self.ibv.fd, (&one as *const u64).cast(), 8) };
    }
}

/// The channel `ch` points to, if not NULL.
///
/// # Safety
///
/// `ch` is NULL or a channel [`rdma_create_event_channel`] made and not
/// yet destroyed.
pub(crate) unsafe fn of<'a>(ch: *mut RdmaEventChannel) -> Option<&'a Channel> {
    // SAFETY: the caller's promise; `ibv` is the first field.
    unsafe { ch.cast::<Channel>().as_ref() }
}

/// `rdma_create_event_channel`: a channel, or NULL with `errno`.
#[no_mangle]
pub extern "C" fn rdma_create_event_channel() -> *mut RdmaEventChannel {
    // SAFETY: eventfd has no memory arguments.
    let fd = unsafe { libc::eventfd(0, libc::EFD_SEMAPHORE | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return std::ptr::null_mut();
    }
    Box::into_raw(Box::new(Channel {
        ibv: RdmaEventChannel { fd },
        queue: Mutex::new(VecDeque::new()),
    }))
    .cast()
}

/// `rdma_destroy_event_channel`: closes its fd and frees it (with events
/// not taken).
///
/// # Safety
///
/// `channel` came from [`rdma_create_event_channel`], and no ID uses it.
#[no_mangle]
pub unsafe extern "C" fn rdma_destroy_event_channel(channel: *mut RdmaEventChannel) {
    if channel.is_null() {
        return;
    }
    // SAFETY: the caller's promise: it is ours, and nothing else holds it.
    let ch = unsafe { Box::from_raw(channel.cast::<Channel>()) };
    // SAFETY: the fd is the channel's own.
    unsafe { libc::close(ch.ibv.fd) };
}

/// `rdma_get_cm_event`: the next event of `channel`, waiting for one
/// unless its fd is non-blocking (`EAGAIN`); `EINTR` if a signal handler
/// without `SA_RESTART` ran meanwhile. 0, or -1 with `errno`.
///
/// # Safety
///
/// `channel` came from [`rdma_create_event_channel`]; `event` is writable.
#[no_mangle]
pub unsafe extern "C" fn rdma_get_cm_event(
    channel: *mut RdmaEventChannel,
    event: *mut *mut RdmaCmEvent,
) -> c_int {
    // SAFETY: the caller's promise.
    let Some(ch) = (unsafe { of(channel) }) else {
        return errno::fail(libc::EINVAL);
    };
    if event.is_null() {
        return errno::fail(libc::EINVAL);
    }
    let mut n: u64 = 0;
    // The kernel restarts the read after a handler with SA_RESTART and
    // fails it with EINTR after any other, as librdmacm's write to
    // rdma_cm is.
    // SAFETY: reads 8 bytes into `n`; blocks or not as the program set
    // the fd.
    if unsafe { libc::read(ch.ibv.fd, (&mut n as *mut u64).cast(), 8) } != 8 {
        return errno::fail(
            std::io::Error::last_os_error()
                .raw_os_error()
                .unwrap_or(libc::EIO),
        );
    }
    let Some(ev) = ch
        .queue
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .pop_front()
    else {
        return errno::fail(libc::EAGAIN);
    };
    let p = Box::into_raw(ev);
    // SAFETY: `event` is writable (checked non-NULL; the caller's promise).
    unsafe { *event = p.cast() };
    0
}

/// `rdma_ack_cm_event`: frees an event [`rdma_get_cm_event`] returned.
///
/// # Safety
///
/// `event` came from [`rdma_get_cm_event`] and is not acknowledged yet.
#[no_mangle]
pub unsafe extern "C" fn rdma_ack_cm_event(event: *mut RdmaCmEvent) -> c_int {
    if event.is_null() {
        return errno::fail(libc::EINVAL);
    }
    // SAFETY: it is a box of ours (the caller's promise).
    drop(unsafe { Box::from_raw(event.cast::<EventBox>()) });
    0
}

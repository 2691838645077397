//! Asynchronous events: `ibv_get_async_event`, `ibv_ack_async_event`,
//! and the context's `async_fd`.

use rnic_verbs::provider::Provider;
use std::ffi::{c_int, c_void};

use rnic_verbs::ErrorKind;
use rnic_verbs::EventElement as Element;

use crate::abi::{IbvAsyncEvent, IbvContext};
use crate::context::open_context;
use crate::errno;

/// How long one wait of `ibv_get_async_event` lasts before it looks
/// again.
const WAIT_NS: u64 = 100_000_000;
/// The same, for a wait on `async_fd`.
const WAIT_MS: c_int = 100;

/// `enum ibv_event_type` values of the events acknowledged on an object.
mod ty {
    use rnic_verbs::EventType;
    pub const CQ_ERR: i32 = EventType::CqErr as i32;
    pub const QP_FATAL: i32 = EventType::QpFatal as i32;
    pub const QP_REQ_ERR: i32 = EventType::QpReqErr as i32;
    pub const QP_ACCESS_ERR: i32 = EventType::QpAccessErr as i32;
    pub const COMM_EST: i32 = EventType::CommEst as i32;
    pub const SQ_DRAINED: i32 = EventType::SqDrained as i32;
    pub const PATH_MIG: i32 = EventType::PathMig as i32;
    pub const PATH_MIG_ERR: i32 = EventType::PathMigErr as i32;
    pub const SRQ_ERR: i32 = EventType::SrqErr as i32;
    pub const SRQ_LIMIT_REACHED: i32 = EventType::SrqLimitReached as i32;
    pub const QP_LAST_WQE_REACHED: i32 = EventType::QpLastWqeReached as i32;
}

/// `ibv_get_async_event`: waits for the context's next asynchronous
/// event and gives its type and object (the CQ, QP or SRQ pointer, or the
/// port number). Events of objects destroyed meanwhile are skipped. 0, or
/// -1 with `errno` (`EINVAL` for a context that is not open or a NULL
/// `event`; `EINTR` if a signal handler ran, unless
/// [`errno::restarts_after_signal`]; the driver's error). `context->async_fd` is readable when an
/// event is waiting.
///
/// # Safety
///
/// `event` is NULL or points to a writable `struct ibv_async_event`.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_async_event(
    context: *mut IbvContext,
    event: *mut IbvAsyncEvent,
) -> c_int {
    let fail = |e| {
        errno::set(e);
        -1
    };
    let Some(c) = open_context(context) else {
        return fail(libc::EINVAL);
    };
    if event.is_null() {
        return fail(libc::EINVAL);
    }
    // As for completion events: a non-blocking async_fd makes an empty
    // wait fail with EAGAIN, as libibverbs' read of it does.
    // SAFETY: an open context (checked above): a box of ours.
    let nonblocking = crate::channel::nonblocking(unsafe { (*context).async_fd });
    loop {
        // Lowered before the queue is looked at, raised again if events
        // are left: an event queued meanwhile raises it after.
        if let Some(fd) = &c.events {
            fd.lower();
        }
        let polled = c.ctx.poll_event();
        if let Some(fd) = &c.events {
            if c.ctx.has_queued_events() {
                fd.raise();
            }
        }
        let polled = match polled {
            Ok(None) => {
                // Takes the device fd's readiness, which turns again at
                // once for an event that came meanwhile.
                c.ctx.arm_events();
                if nonblocking {
                    return fail(libc::EAGAIN);
                }
                match &c.events {
                    Some(fd) => fd.wait(WAIT_MS).map(|()| None).map_err(|e| {
                        let kind = if e.raw_os_error() == Some(libc::EINTR) {
                            ErrorKind::Interrupted
                        } else {
                            ErrorKind::Io
                        };
                        rnic_verbs::Error::new(kind, format!("waiting on async_fd: {e}"))
                    }),
                    None => c.ctx.wait_event(WAIT_NS),
                }
            }
            got => got,
        };
        let ev = match polled {
            Ok(Some(ev)) => ev,
            Ok(None) => continue,
            Err(e) if e.kind() == ErrorKind::Interrupted && errno::restarts_after_signal() => {
                continue
            }
            Err(e) => return fail(e.errno()),
        };
        let event_type = c_int::from(ev.event_type.raw());
        let element: *mut c_void = match ev.event_type.element() {
            Element::Cq => match crate::cq::cq_by_num(context, ev.obj) {
                Some(p) => p.cast(),
                None => continue,
            },
            Element::Qp => match crate::qp::qp_by_num(context, ev.obj) {
                Some(p) => p.cast(),
                None => continue,
            },
            Element::Srq => match crate::srq::srq_by_num(context, ev.obj) {
                Some(p) => p.cast(),
                None => continue,
            },
            Element::Port => ev.obj as usize as *mut c_void,
            Element::Device => std::ptr::null_mut(),
        };
        // The fd stays readable only while events are left: the device
        // raises it again at once for those.
        c.ctx.arm_events();
        // SAFETY: non-NULL, and writable by the caller's promise.
        unsafe {
            event.write(IbvAsyncEvent {
                element,
                event_type,
            })
        };
        return 0;
    }
}

/// `ibv_ack_async_event`: counts the event acknowledged on its object
/// (the `events_completed` libibverbs keeps), if that object is still
/// live; an event of a port or the device has nothing to count.
///
/// # Safety
///
/// `event` is NULL or points to a `struct ibv_async_event` that
/// [`ibv_get_async_event`] gave.
#[no_mangle]
pub unsafe extern "C" fn ibv_ack_async_event(event: *mut IbvAsyncEvent) {
    if event.is_null() {
        return;
    }
    // SAFETY: non-NULL, and an event by the caller's promise.
    let ev = unsafe { *event };
    let p = ev.element;
    match ev.event_type {
        ty::CQ_ERR => crate::cq::ack_async(p.cast()),
        ty::QP_FATAL
        | ty::QP_REQ_ERR
        | ty::QP_ACCESS_ERR
        | ty::COMM_EST
        | ty::SQ_DRAINED
        | ty::PATH_MIG
        | ty::PATH_MIG_ERR
        | ty::QP_LAST_WQE_REACHED => crate::qp::ack_async(p.cast()),
        ty::SRQ_ERR | ty::SRQ_LIMIT_REACHED => crate::srq::ack_async(p.cast()),
        _ => {}
    }
}

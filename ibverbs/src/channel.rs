//! Completion channels: `ibv_create_comp_channel`,
//! `ibv_destroy_comp_channel`, `ibv_get_cq_event`.

use rnic_verbs::provider::{CompletionChannel, Provider};
use rnic_verbs::ErrorKind;
use std::ffi::{c_int, c_void};

use crate::any::AnyChannel;

use crate::abi::{IbvCompChannel, IbvContext, IbvCq};
use crate::context::open_context;
use crate::cq::cq_by_num;
use crate::errno;
use crate::live::Live;

/// A channel: the `struct ibv_comp_channel` programs see, first.
#[repr(C)]
struct Channel {
    ibv: IbvCompChannel,
    ch: Option<AnyChannel>,
}

static CHANNELS: Live = Live::new();

/// How long one wait of `ibv_get_cq_event` lasts before it looks again.
const WAIT_NS: u64 = 100_000_000;

/// The driver's channel behind the live channel `ch`.
pub(crate) fn live_channel(ch: *mut IbvCompChannel) -> Option<&'static AnyChannel> {
    // SAFETY: a live channel came from Box::into_raw and is freed only
    // after it leaves the list.
    CHANNELS
        .contains(ch)
        .then(|| unsafe { (*ch.cast::<Channel>()).ch.as_ref() })
        .flatten()
}

/// `ibv_create_comp_channel` (`IBVERBS_1.0`): its `fd` is readable when
/// an event may be waiting. NULL with `errno` (`EINVAL` for a context
/// that is not open; the driver's: no EQ or vector left).
///
/// # Safety
///
/// None beyond what the C signature implies: the context is checked.
#[no_mangle]
pub unsafe extern "C" fn ibv_create_comp_channel(context: *mut IbvContext) -> *mut IbvCompChannel {
    let Some(c) = open_context(context) else {
        return errno::fail(libc::EINVAL);
    };
    match c.ctx.create_comp_channel() {
        Ok(ch) => {
            let fd = ch.fd().unwrap_or(-1);
            make_blocking(fd);
            let ibv = IbvCompChannel {
                context,
                fd,
                refcnt: 0,
            };
            let p = Box::into_raw(Box::new(Channel { ibv, ch: Some(ch) }));
            CHANNELS.add(p);
            p.cast()
        }
        Err(e) => errno::fail(e.errno()),
    }
}

/// `ibv_destroy_comp_channel` (`IBVERBS_1.0`): 0, or an `errno` value
/// (`EINVAL` for a pointer that is not a live channel; `EBUSY` while CQs
/// use it, and it stays).
///
/// # Safety
///
/// None beyond what the C signature implies: the pointer is checked.
#[no_mangle]
pub unsafe extern "C" fn ibv_destroy_comp_channel(channel: *mut IbvCompChannel) -> c_int {
    // SAFETY: every live channel is a Box<Channel> (ibv_create_comp_channel).
    unsafe {
        CHANNELS.destroy(
            channel.cast::<Channel>(),
            |o| &mut o.ch,
            AnyChannel::destroy,
        )
    }
}

/// `ibv_get_cq_event` (`IBVERBS_1.1`): waits for the next completion
/// event of the channel and gives its CQ and that CQ's `cq_context`. 0,
/// or -1 with `errno` (`EINVAL` for a channel that is not live or NULL
/// outputs; `EINTR` if a signal handler ran, unless
/// [`errno::restarts_after_signal`]; the driver's error).
///
/// # Safety
///
/// `cq` and `cq_context` are NULL or writable.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_cq_event(
    channel: *mut IbvCompChannel,
    cq: *mut *mut IbvCq,
    cq_context: *mut *mut c_void,
) -> c_int {
    let fail = |e| {
        errno::set(e);
        -1
    };
    let Some(ch) = live_channel(channel) else {
        return fail(libc::EINVAL);
    };
    if cq.is_null() || cq_context.is_null() {
        return fail(libc::EINVAL);
    }
    // SAFETY: live (checked above): a box of ours.
    let (ch_context, fd) = unsafe { ((*channel).context, (*channel).fd) };
    // On a channel whose fd the program made non-blocking (to poll it),
    // libibverbs' read fails with EAGAIN when no event waits: so does this.
    let wait = if nonblocking(fd) { 0 } else { WAIT_NS };
    loop {
        match ch.get_cq_event(wait) {
            Ok(Some(fired)) => {
                let Some(ours) = cq_by_num(ch_context, fired) else {
                    // Destroyed meanwhile: nothing to report.
                    continue;
                };
                // SAFETY: non-NULL outputs, writable by the caller's
                // promise; `ours` is a live CQ.
                unsafe {
                    *cq = ours;
                    *cq_context = (*ours).cq_context;
                }
                return 0;
            }
            Ok(None) if wait == 0 => return fail(libc::EAGAIN),
            Ok(None) => continue,
            Err(e) if e.kind() == ErrorKind::Interrupted && errno::restarts_after_signal() => {
                continue
            }
            Err(e) => return fail(e.errno()),
        }
    }
}

/// Clears `O_NONBLOCK` on `fd`, an event fd handed to the program: rdma-core's
/// are blocking until the program says otherwise (UCX makes them
/// non-blocking, `ibv_rc_pingpong -e` does not), and [`nonblocking`] then
/// tells which the program wants.
pub(crate) fn make_blocking(fd: c_int) {
    // SAFETY: F_GETFL and F_SETFL read and set the descriptor's flags; a
    // bad descriptor fails both, harmlessly.
    unsafe {
        let flags = libc::fcntl(fd, libc::F_GETFL);
        if flags >= 0 && flags & libc::O_NONBLOCK != 0 {
            libc::fcntl(fd, libc::F_SETFL, flags & !libc::O_NONBLOCK);
        }
    }
}

/// Whether `fd` is open with `O_NONBLOCK`: the program waits for it to
/// turn readable itself, and a call that would read it must not block.
pub(crate) fn nonblocking(fd: c_int) -> bool {
    // SAFETY: F_GETFL reads the descriptor's flags; a bad descriptor
    // fails (-1), which counts as blocking.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    flags >= 0 && flags & libc::O_NONBLOCK != 0
}

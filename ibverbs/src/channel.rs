//! Completion channels: not served yet. The calls exist, because
//! programs bound at load time need them even when they never use a
//! channel (ibv_rc_pingpong without `-e`), and fail as libibverbs does
//! for a device that cannot make one.

use std::ffi::{c_int, c_void};

use crate::abi::{IbvContext, IbvCq};
use crate::errno;

/// `ibv_create_comp_channel` (`IBVERBS_1.0`): NULL with `errno`
/// `EOPNOTSUPP`.
#[no_mangle]
pub extern "C" fn ibv_create_comp_channel(context: *mut IbvContext) -> *mut c_void {
    let _ = context;
    errno::set(libc::EOPNOTSUPP);
    std::ptr::null_mut()
}

/// `ibv_destroy_comp_channel` (`IBVERBS_1.0`): no channel exists, so
/// `EINVAL`.
#[no_mangle]
pub extern "C" fn ibv_destroy_comp_channel(channel: *mut c_void) -> c_int {
    let _ = channel;
    libc::EINVAL
}

/// `ibv_get_cq_event` (`IBVERBS_1.1`): no channel exists, so -1 with
/// `errno` `EINVAL`.
#[no_mangle]
pub extern "C" fn ibv_get_cq_event(
    channel: *mut c_void,
    cq: *mut *mut IbvCq,
    cq_context: *mut *mut c_void,
) -> c_int {
    let _ = (channel, cq, cq_context);
    errno::set(libc::EINVAL);
    -1
}

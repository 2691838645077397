//! librdmacm's error convention: -1 with `errno` set.

use std::ffi::c_int;

/// Sets `errno` to `e` and returns -1.
pub(crate) fn fail(e: c_int) -> c_int {
    // SAFETY: errno of this thread.
    unsafe { *libc::__errno_location() = e };
    -1
}

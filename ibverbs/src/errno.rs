//! `errno`, as libibverbs sets it.

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

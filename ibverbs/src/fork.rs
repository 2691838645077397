//! Fork support: `ibv_fork_init`, `ibv_is_fork_initialized`,
//! `ibv_dontfork_range`, `ibv_dofork_range`.
//!
//! A kernel RDMA device pins the pages it was given, so libibverbs keeps
//! registered memory out of a child's copy-on-write. rnic's device is
//! part of the process and reaches memory through the process's own
//! mapping: after a fork the parent's NIC keeps working on the parent's
//! pages, and nothing needs to be kept from the child. So fork support is
//! "unneeded", as libibverbs says of a kernel that copes by itself.

use std::ffi::{c_int, c_void};

/// `IBV_FORK_UNNEEDED`.
const FORK_UNNEEDED: c_int = 2;

/// `ibv_fork_init`: 0; nothing to prepare.
#[no_mangle]
pub extern "C" fn ibv_fork_init() -> c_int {
    0
}

/// `ibv_is_fork_initialized`: `IBV_FORK_UNNEEDED`.
#[no_mangle]
pub extern "C" fn ibv_is_fork_initialized() -> c_int {
    FORK_UNNEEDED
}

/// `ibv_dontfork_range`: 0; no range needs keeping from a child.
#[no_mangle]
pub extern "C" fn ibv_dontfork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

/// `ibv_dofork_range`: 0, as [`ibv_dontfork_range`].
#[no_mangle]
pub extern "C" fn ibv_dofork_range(_base: *mut c_void, _size: usize) -> c_int {
    0
}

//! The structures of rdma-core 44's `infiniband/verbs.h` that programs
//! see, field for field (the tests compare every size and offset with the
//! header, through a C probe).

use std::ffi::{c_char, c_int, c_void};

/// `IBV_SYSFS_NAME_MAX`.
pub const SYSFS_NAME_MAX: usize = 64;
/// `IBV_SYSFS_PATH_MAX`.
pub const SYSFS_PATH_MAX: usize = 256;

/// `IBV_NODE_CA`.
pub const NODE_CA: c_int = 1;
/// `IBV_TRANSPORT_IB`.
pub const TRANSPORT_IB: c_int = 0;

/// `struct _ibv_device_ops`: two entry points libibverbs no longer calls.
#[repr(C)]
#[derive(Debug)]
pub struct DeviceOps {
    /// `_dummy1`: NULL.
    pub dummy1: *mut c_void,
    /// `_dummy2`: NULL.
    pub dummy2: *mut c_void,
}

/// `struct ibv_device`.
#[repr(C)]
#[derive(Debug)]
pub struct IbvDevice {
    /// `_ops`.
    pub ops: DeviceOps,
    /// `enum ibv_node_type`.
    pub node_type: c_int,
    /// `enum ibv_transport_type`.
    pub transport_type: c_int,
    /// The device's name (`ibv_get_device_name`).
    pub name: [c_char; SYSFS_NAME_MAX],
    /// The uverbs device's name.
    pub dev_name: [c_char; SYSFS_NAME_MAX],
    /// The uverbs device's sysfs path.
    pub dev_path: [c_char; SYSFS_PATH_MAX],
    /// The device's sysfs path.
    pub ibdev_path: [c_char; SYSFS_PATH_MAX],
}

/// Copies `s` into the C string field `dst`, cut to fit with its NUL.
pub(crate) fn set_str(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len() - 1);
    for (d, &b) in dst.iter_mut().zip(&s.as_bytes()[..n]) {
        *d = b as c_char;
    }
    dst[n..].fill(0);
}

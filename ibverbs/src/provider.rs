//! rdma-core's provider interface (`IBVERBS_PRIVATE_34`): what the
//! provider libraries import from libibverbs.
//!
//! Programs such as perftest link providers (libmlx5, libefa) directly,
//! so the dynamic linker loads them beside this library and binds every
//! symbol they import (they are linked with `-z now`). Their constructors
//! register with [`verbs_register_driver_34`]; after that, nothing of
//! theirs is ever called for an rnic device, which is served here and
//! not by a provider. The kernel-command half of the interface
//! (`ibv_cmd_*`, `execute_ioctl`) talks to a kernel rnic has no use for:
//! it fails with `EOPNOTSUPP`, as libibverbs' own fallbacks do for an
//! operation a device lacks.
//!
//! The stubs declare no parameters: under the SysV x86-64 calling
//! convention the caller owns its arguments, so a function that reads
//! none of them may be called with any (or, for `__verbs_log`, a variable
//! number of them).

use std::ffi::{c_int, c_uint, c_void};
use std::sync::atomic::AtomicBool;

use crate::errno;

/// `verbs_allow_disassociate_destroy`: the flag (a `bool` variable) that
/// lets providers' destroy calls succeed on a device the kernel took
/// away. rnic's devices are never taken away: false.
#[no_mangle]
pub static verbs_allow_disassociate_destroy: AtomicBool = AtomicBool::new(false);

/// `verbs_register_driver_34`: a provider library's constructor
/// registers its `struct verbs_device_ops`. Noted and not used: rnic's
/// devices are served without providers.
#[no_mangle]
pub extern "C" fn verbs_register_driver_34(ops: *const c_void) {
    log::debug!("provider {ops:p} registered, not used by rnic");
}

/// `ibv_register_driver`, the pre-1.2 provider registration: ignored as
/// [`verbs_register_driver_34`].
#[no_mangle]
pub extern "C" fn ibv_register_driver(_name: *const c_void, _init: *const c_void) {}

/// `_verbs_init_and_alloc_context`: a provider's context on a kernel
/// device. NULL with `errno` `EOPNOTSUPP`.
#[no_mangle]
pub extern "C" fn _verbs_init_and_alloc_context() -> *mut c_void {
    errno::fail(libc::EOPNOTSUPP)
}

/// `verbs_open_device`: opening a provider's device. NULL with `errno`
/// `EOPNOTSUPP`.
#[no_mangle]
pub extern "C" fn verbs_open_device() -> *mut c_void {
    errno::fail(libc::EOPNOTSUPP)
}

/// `verbs_set_ops`: a provider filling its context's operations. No
/// provider context exists to fill.
#[no_mangle]
pub extern "C" fn verbs_set_ops() {}

/// `verbs_uninit_context`: a provider releasing its context. No provider
/// context exists to release.
#[no_mangle]
pub extern "C" fn verbs_uninit_context() {}

/// `verbs_init_cq`: a provider initialising its CQ's common fields. No
/// provider CQ exists.
#[no_mangle]
pub extern "C" fn verbs_init_cq() {}

/// `__verbs_log`: a provider's debug log (printf-style, variadic).
/// Dropped: providers have nothing to say about rnic devices.
#[no_mangle]
pub extern "C" fn __verbs_log() {}

/// `__ioctl_final_num_attrs`: the attribute count of a kernel command
/// buffer. rnic builds no command buffers, so none is linked: the count
/// given.
#[no_mangle]
pub extern "C" fn __ioctl_final_num_attrs(num_attrs: c_uint, _link: *const c_void) -> c_uint {
    num_attrs
}

/// `ibv_read_ibdev_sysfs_file`: reading a kernel device's sysfs
/// attribute. -1 with `errno` `ENOENT`: rnic devices have no sysfs
/// directory.
#[no_mangle]
pub extern "C" fn ibv_read_ibdev_sysfs_file() -> c_int {
    errno::set(libc::ENOENT);
    -1
}

/// `ibv_cmd_poll_cq`: polling through the kernel, -1 (a poll error) with
/// `errno` `EOPNOTSUPP`.
#[no_mangle]
pub extern "C" fn ibv_cmd_poll_cq() -> c_int {
    errno::set(libc::EOPNOTSUPP);
    -1
}

/// Kernel commands, each failing with `EOPNOTSUPP` (returned and in
/// `errno`), as libibverbs' calls do for an operation the device lacks.
macro_rules! kernel_commands {
    ($($name:ident),* $(,)?) => {$(
        #[doc = concat!("`", stringify!($name), "`: a kernel command, `EOPNOTSUPP`.")]
        #[no_mangle]
        pub extern "C" fn $name() -> c_int {
            errno::set(libc::EOPNOTSUPP);
            libc::EOPNOTSUPP
        }
    )*};
}

kernel_commands!(
    execute_ioctl,
    ibv_cmd_advise_mr,
    ibv_cmd_alloc_dm,
    ibv_cmd_alloc_mw,
    ibv_cmd_alloc_pd,
    ibv_cmd_attach_mcast,
    ibv_cmd_close_xrcd,
    ibv_cmd_create_ah,
    ibv_cmd_create_counters,
    ibv_cmd_create_cq,
    ibv_cmd_create_cq_ex,
    ibv_cmd_create_flow,
    ibv_cmd_create_flow_action_esp,
    ibv_cmd_create_qp,
    ibv_cmd_create_qp_ex2,
    ibv_cmd_create_qp_ex,
    ibv_cmd_create_rwq_ind_table,
    ibv_cmd_create_srq,
    ibv_cmd_create_srq_ex,
    ibv_cmd_create_wq,
    ibv_cmd_dealloc_mw,
    ibv_cmd_dealloc_pd,
    ibv_cmd_dereg_mr,
    ibv_cmd_destroy_ah,
    ibv_cmd_destroy_counters,
    ibv_cmd_destroy_cq,
    ibv_cmd_destroy_flow,
    ibv_cmd_destroy_flow_action,
    ibv_cmd_destroy_qp,
    ibv_cmd_destroy_rwq_ind_table,
    ibv_cmd_destroy_srq,
    ibv_cmd_destroy_wq,
    ibv_cmd_detach_mcast,
    ibv_cmd_free_dm,
    ibv_cmd_get_context,
    ibv_cmd_modify_cq,
    ibv_cmd_modify_flow_action_esp,
    ibv_cmd_modify_qp,
    ibv_cmd_modify_qp_ex,
    ibv_cmd_modify_srq,
    ibv_cmd_modify_wq,
    ibv_cmd_open_qp,
    ibv_cmd_open_xrcd,
    ibv_cmd_post_recv,
    ibv_cmd_post_send,
    ibv_cmd_post_srq_recv,
    ibv_cmd_query_context,
    ibv_cmd_query_device,
    ibv_cmd_query_device_any,
    ibv_cmd_query_mr,
    ibv_cmd_query_port,
    ibv_cmd_query_qp,
    ibv_cmd_query_srq,
    ibv_cmd_read_counters,
    ibv_cmd_reg_dm_mr,
    ibv_cmd_reg_dmabuf_mr,
    ibv_cmd_reg_mr,
    ibv_cmd_req_notify_cq,
    ibv_cmd_rereg_mr,
    ibv_cmd_resize_cq,
);

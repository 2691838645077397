//! The device list: `ibv_get_device_list` and the calls on its entries.

use std::ffi::{c_char, c_int, c_void, CString};
use std::sync::OnceLock;

use crate::abi::{
    set_str, DeviceOps, IbvDevice, NODE_CA, SYSFS_NAME_MAX, SYSFS_PATH_MAX, TRANSPORT_IB,
};
use crate::config::{self, DeviceSpec};
use crate::errno;

/// A configured device: the `struct ibv_device` programs see, first, so
/// that a pointer to one is a pointer to the other.
#[repr(C)]
pub(crate) struct Device {
    pub ibv: IbvDevice,
    /// Where rdma-core's `struct verbs_device` has its provider's
    /// operations after the `struct ibv_device`: NULL, none. A provider
    /// library's call given an rnic device (perftest calls libmlx5's and
    /// libefa's) reads it to tell whether the device is its own: it is
    /// not.
    provider_ops: *const c_void,
    pub spec: DeviceSpec,
}

// SAFETY: the only pointers in a Device are NULL ones (the entry points
// of `DeviceOps`, `provider_ops`); the rest is plain data, never changed after the list is
// made.
unsafe impl Send for Device {}
// SAFETY: as for Send; shared access only reads.
unsafe impl Sync for Device {}

impl Device {
    /// Device `index` of the configuration.
    fn new(index: usize, spec: DeviceSpec) -> Device {
        let mut ibv = IbvDevice {
            ops: DeviceOps {
                dummy1: std::ptr::null_mut(),
                dummy2: std::ptr::null_mut(),
            },
            node_type: NODE_CA,
            transport_type: TRANSPORT_IB,
            name: [0; SYSFS_NAME_MAX],
            dev_name: [0; SYSFS_NAME_MAX],
            dev_path: [0; SYSFS_PATH_MAX],
            ibdev_path: [0; SYSFS_PATH_MAX],
        };
        set_str(&mut ibv.name, &spec.name);
        // No kernel device stands behind it, so no sysfs paths; but the
        // uverbs name a kernel would give device `index`, whose node in
        // /dev/infiniband programs check before they open a device (UCX
        // does), and `scripts/setup.sh` makes.
        set_str(&mut ibv.dev_name, &format!("uverbs{index}"));
        Device {
            ibv,
            provider_ops: std::ptr::null(),
            spec,
        }
    }
}

/// The configured devices, made once per process (never changed after:
/// their addresses are the `struct ibv_device *` programs hold).
fn devices() -> Result<&'static [Device], &'static str> {
    static DEVICES: OnceLock<Result<Vec<Device>, String>> = OnceLock::new();
    let made = DEVICES.get_or_init(|| {
        // A C program has no Rust logger: RUST_LOG=debug shows what the
        // driver and the device log.
        let _ = env_logger::try_init();
        config::from_env()
            .map(|specs| {
                specs
                    .into_iter()
                    .enumerate()
                    .map(|(i, spec)| Device::new(i, spec))
                    .collect()
            })
            .inspect_err(|e| eprintln!("rnic libibverbs: {e}"))
    });
    match made {
        Ok(d) => Ok(d),
        Err(e) => Err(e),
    }
}

/// The device `dev` points to, if it is one of ours.
pub(crate) fn ours(dev: *const IbvDevice) -> Option<&'static Device> {
    let list = devices().ok()?;
    list.iter().find(|d| std::ptr::eq(&d.ibv, dev))
}

/// `ibv_get_device_list`: a NULL-terminated array of the configured
/// devices, and their number in `*num_devices` (if not NULL). NULL with
/// `errno` `EINVAL` if the configuration is bad (the reason goes to
/// stderr once), `ENOMEM` if the array cannot be allocated.
///
/// # Safety
///
/// `num_devices` is NULL or points to writable memory for an `int`.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_list(num_devices: *mut c_int) -> *mut *mut IbvDevice {
    let list = match devices() {
        Ok(l) => l,
        Err(_) => {
            return errno::fail(libc::EINVAL);
        }
    };
    // SAFETY: calloc with a count and an element size; checked for NULL.
    let array = unsafe { libc::calloc(list.len() + 1, size_of::<*mut IbvDevice>()) }
        .cast::<*mut IbvDevice>();
    if array.is_null() {
        return errno::fail(libc::ENOMEM);
    }
    for (i, d) in list.iter().enumerate() {
        // SAFETY: `i < list.len()`, inside the array of `len + 1` entries;
        // the last stays NULL. The devices live as long as the process, and
        // programs only read them.
        unsafe { *array.add(i) = (&d.ibv as *const IbvDevice).cast_mut() };
    }
    if !num_devices.is_null() {
        // SAFETY: the caller's promise.
        unsafe { *num_devices = list.len() as c_int };
    }
    array
}

/// `ibv_free_device_list`: frees an array from [`ibv_get_device_list`]
/// (the devices stay valid, as in libibverbs while one is open).
///
/// # Safety
///
/// `list` is NULL or came from `ibv_get_device_list` and is not freed yet.
#[no_mangle]
pub unsafe extern "C" fn ibv_free_device_list(list: *mut *mut IbvDevice) {
    // SAFETY: the caller's promise: calloc's memory, or NULL.
    unsafe { libc::free(list.cast()) }
}

/// `ibv_get_device_name`: the device's name; NULL with `errno` `EINVAL`
/// for a pointer that is not one of the listed devices.
///
/// # Safety
///
/// None beyond what the C signature implies: the pointer is only compared.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_name(device: *mut IbvDevice) -> *const c_char {
    match ours(device) {
        Some(d) => d.ibv.name.as_ptr(),
        None => {
            errno::set(libc::EINVAL);
            std::ptr::null()
        }
    }
}

/// `ibv_get_device_guid`: the node GUID in network byte order (the MAC's
/// modified EUI-64; 0 for a vfio or vfio-user device, whose GUID is
/// known once it is open); 0 with `errno` `EINVAL` for a pointer that is
/// not one of the listed devices.
///
/// # Safety
///
/// None beyond what the C signature implies: the pointer is only compared.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_guid(device: *mut IbvDevice) -> u64 {
    match ours(device) {
        // A real device's GUID is its own, which `ibv_query_device`
        // reports once it is open: unknown here, 0, as libibverbs answers
        // when it cannot read a GUID.
        Some(d) if d.spec.attached() => 0,
        Some(d) => u64::from_ne_bytes(d.spec.guid()),
        None => {
            errno::set(libc::EINVAL);
            0
        }
    }
}

/// `ibv_get_device_index`: the device's index, its place in the
/// configuration (0, 1, ...); -1 for a pointer that is not one of the
/// listed devices.
///
/// # Safety
///
/// None beyond what the C signature implies: the pointer is only compared.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_device_index(device: *mut IbvDevice) -> c_int {
    let Ok(list) = devices() else {
        return -1;
    };
    list.iter()
        .position(|d| std::ptr::eq(&d.ibv, device))
        .map_or(-1, |i| i as c_int)
}

/// `ibv_get_sysfs_path`: where sysfs is mounted, as libibverbs finds it:
/// `SYSFS_PATH` without its trailing slashes (unless the program runs
/// set-user-ID), or `/sys`. rnic devices have no entries there;
/// librdmacm asks.
#[no_mangle]
pub extern "C" fn ibv_get_sysfs_path() -> *const c_char {
    static PATH: OnceLock<CString> = OnceLock::new();
    PATH.get_or_init(|| {
        // SAFETY: getuid and geteuid cannot fail.
        let suid = unsafe { libc::getuid() != libc::geteuid() };
        match std::env::var_os("SYSFS_PATH").filter(|_| !suid) {
            Some(p) => {
                use std::os::unix::ffi::OsStrExt;
                let mut b = p.as_bytes().to_vec();
                b.truncate(SYSFS_PATH_MAX);
                b.truncate(b.iter().position(|&c| c == 0).unwrap_or(b.len()));
                while b.last() == Some(&b'/') {
                    b.pop();
                }
                CString::new(b).unwrap_or_default()
            }
            None => c"/sys".into(),
        }
    })
    .as_ptr()
}

/// `ibv_import_device`: a context shared through a kernel command file
/// descriptor. NULL with `errno` `EOPNOTSUPP`: rnic contexts belong to
/// their process.
#[no_mangle]
pub extern "C" fn ibv_import_device(_cmd_fd: c_int) -> *mut c_void {
    errno::fail(libc::EOPNOTSUPP)
}

//! The kernel objects both ends share: eventfds and sealed memfds.

use std::ffi::CStr;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// A non-blocking eventfd.
pub(crate) fn eventfd() -> std::io::Result<OwnedFd> {
    // SAFETY: no memory arguments; a non-negative result is a fresh fd.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is fresh and owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A memfd named `name` of `len` zeroed bytes, with `seals` added
/// (`F_SEAL_SHRINK` at least, so that no mapping of it can fault).
pub(crate) fn sealed_memfd(name: &CStr, len: u64, seals: i32) -> std::io::Result<File> {
    let flags = libc::MFD_ALLOW_SEALING | libc::MFD_CLOEXEC;
    // SAFETY: a NUL-terminated name; a non-negative result is a fresh fd.
    let fd = unsafe { libc::memfd_create(name.as_ptr(), flags) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is fresh and owned by nothing else.
    let file = unsafe { File::from_raw_fd(fd) };
    file.set_len(len)?;
    // SAFETY: F_ADD_SEALS with a seal mask on a descriptor we own.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_ADD_SEALS, seals) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(file)
}

//! VFIO ioctl request numbers and the raw call.
//!
//! `vfio-bindings` carries the kernel's structures and constants; the
//! request numbers are C macros (`_IO(VFIO_TYPE, VFIO_BASE + n)`), so they
//! are spelled out here. Every VFIO ioctl is `_IO` (no size or direction
//! bits): the argument structures carry their own `argsz`.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

use vfio_bindings::bindings::vfio::{VFIO_BASE, VFIO_TYPE};

const fn vfio_io(nr: u32) -> u64 {
    ((VFIO_TYPE as u64) << 8) | (VFIO_BASE + nr) as u64
}

pub(crate) const VFIO_GET_API_VERSION: u64 = vfio_io(0);
pub(crate) const VFIO_CHECK_EXTENSION: u64 = vfio_io(1);
pub(crate) const VFIO_SET_IOMMU: u64 = vfio_io(2);
pub(crate) const VFIO_GROUP_GET_STATUS: u64 = vfio_io(3);
pub(crate) const VFIO_GROUP_SET_CONTAINER: u64 = vfio_io(4);
pub(crate) const VFIO_GROUP_GET_DEVICE_FD: u64 = vfio_io(6);
pub(crate) const VFIO_DEVICE_GET_INFO: u64 = vfio_io(7);
pub(crate) const VFIO_DEVICE_GET_REGION_INFO: u64 = vfio_io(8);
pub(crate) const VFIO_DEVICE_GET_IRQ_INFO: u64 = vfio_io(9);
pub(crate) const VFIO_DEVICE_SET_IRQS: u64 = vfio_io(10);
pub(crate) const VFIO_DEVICE_RESET: u64 = vfio_io(11);
pub(crate) const VFIO_IOMMU_GET_INFO: u64 = vfio_io(12);
pub(crate) const VFIO_IOMMU_MAP_DMA: u64 = vfio_io(13);
pub(crate) const VFIO_IOMMU_UNMAP_DMA: u64 = vfio_io(14);

/// `ioctl(fd, request, arg)` with a pointer argument.
///
/// # Safety
///
/// `arg` must point to memory laid out as `request` expects, valid for the
/// reads and writes the kernel makes for it (at least its `argsz` bytes).
pub(crate) unsafe fn ioctl_ptr<T>(
    fd: BorrowedFd<'_>,
    request: u64,
    arg: *mut T,
) -> io::Result<libc::c_int> {
    // SAFETY: the fd is open (borrowed); the caller vouches for `arg`.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), request as _, arg) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// `ioctl(fd, request, value)` with an integer argument (or none).
pub(crate) fn ioctl_val(fd: BorrowedFd<'_>, request: u64, value: libc::c_ulong) -> io::Result<i32> {
    // SAFETY: the VFIO requests this is used with (GET_API_VERSION,
    // CHECK_EXTENSION, SET_IOMMU, DEVICE_RESET) take
    // an integer or nothing, so the kernel dereferences no pointer.
    let rc = unsafe { libc::ioctl(fd.as_raw_fd(), request as _, value) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_numbers_match_the_kernel() {
        // Values from <linux/vfio.h> as compiled by gcc on x86-64.
        assert_eq!(VFIO_GET_API_VERSION, 0x3b64);
        assert_eq!(VFIO_SET_IOMMU, 0x3b66);
        assert_eq!(VFIO_GROUP_GET_DEVICE_FD, 0x3b6a);
        assert_eq!(VFIO_DEVICE_SET_IRQS, 0x3b6e);
        assert_eq!(VFIO_DEVICE_RESET, 0x3b6f);
        assert_eq!(VFIO_IOMMU_MAP_DMA, 0x3b71);
        assert_eq!(VFIO_IOMMU_UNMAP_DMA, 0x3b72);
    }
}

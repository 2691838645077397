//! `ibv_read_sysfs_file`, libibverbs' helper for reading a sysfs
//! attribute, which rdma-core's utilities call.

use std::ffi::{c_char, c_int, CStr};
use std::io::Read;

use crate::errno;

/// `ibv_read_sysfs_file`: reads `dir/file` into `buf` (at most
/// `size - 1` bytes, NUL-terminated, a final newline dropped). The bytes
/// read, or -1 with `errno` (the file's error; `EINVAL` for a NULL
/// argument or a zero size). rnic devices have no sysfs directory, so
/// their paths are empty and reading them fails.
///
/// # Safety
///
/// `dir` and `file` are NULL or NUL-terminated strings; `buf` is NULL or
/// points to `size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn ibv_read_sysfs_file(
    dir: *const c_char,
    file: *const c_char,
    buf: *mut c_char,
    size: usize,
) -> c_int {
    if dir.is_null() || file.is_null() || buf.is_null() || size == 0 {
        errno::set(libc::EINVAL);
        return -1;
    }
    // SAFETY: non-NULL, and NUL-terminated by the caller's promise.
    let (dir, file) = unsafe { (CStr::from_ptr(dir), CStr::from_ptr(file)) };
    let path = std::path::Path::new(std::ffi::OsStr::new(
        std::str::from_utf8(dir.to_bytes()).unwrap_or(""),
    ))
    .join(std::str::from_utf8(file.to_bytes()).unwrap_or(""));
    let mut data = Vec::new();
    let read =
        std::fs::File::open(&path).and_then(|f| f.take(size as u64 - 1).read_to_end(&mut data));
    if let Err(e) = read {
        errno::set(e.raw_os_error().unwrap_or(libc::EIO));
        return -1;
    }
    if data.last() == Some(&b'\n') {
        data.pop();
    }
    // SAFETY: `data.len() <= size - 1`: the bytes and the NUL fit in the
    // caller's `size` bytes.
    unsafe {
        std::ptr::copy_nonoverlapping(data.as_ptr(), buf.cast::<u8>(), data.len());
        *buf.add(data.len()) = 0;
    }
    data.len() as c_int
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::CString;

    fn read(dir: &str, file: &str, size: usize) -> (c_int, Vec<u8>, i32) {
        let (d, f) = (CString::new(dir).unwrap(), CString::new(file).unwrap());
        let mut buf = vec![0x55 as c_char; size.max(1)];
        // SAFETY: NUL-terminated strings; `buf` holds `size` bytes.
        let n = unsafe { ibv_read_sysfs_file(d.as_ptr(), f.as_ptr(), buf.as_mut_ptr(), size) };
        // SAFETY: errno of this thread.
        let e = unsafe { *libc::__errno_location() };
        (n, buf.iter().map(|&c| c as u8).collect(), e)
    }

    #[test]
    fn reads_a_file_as_libibverbs_does() {
        let dir = std::env::temp_dir().join(format!("rnic-sysfs-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("fw_ver"), "1.2.3\n").unwrap();
        let d = dir.to_str().unwrap();
        let (n, buf, _) = read(d, "fw_ver", 16);
        assert_eq!(
            (n, &buf[..6]),
            (5, &b"1.2.3\0"[..]),
            "newline dropped, NUL added"
        );
        let (n, buf, _) = read(d, "fw_ver", 3);
        assert_eq!((n, &buf[..3]), (2, &b"1.\0"[..]), "cut to the buffer");
        let (n, _, e) = read(d, "nothing", 16);
        assert_eq!((n, e), (-1, libc::ENOENT));
        let (n, _, e) = read(d, "fw_ver", 0);
        assert_eq!((n, e), (-1, libc::EINVAL));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}

//! Copies of bytes that another party may access at the same time: an
//! MR's bytes, which the application and the device both touch.
//!
//! A plain or volatile copy of such bytes would be a data race. These
//! copies behave as a loop of relaxed single-byte atomic loads and stores,
//! which is race-free whatever the other side does (it sees each byte old
//! or new). On x86-64 that loop is one `rep movsb`, whose byte moves are
//! exactly such accesses and which runs at memcpy speed on CPUs with fast
//! string moves (ERMS/FSRM); elsewhere it is the loop itself, 8 bytes at a
//! time where aligned.

#[cfg(not(target_arch = "x86_64"))]
use core::sync::atomic::{AtomicU64, AtomicU8, Ordering};

/// Copies `src` to `dst`, where the bytes at `dst` may be read or written
/// by another thread, process or device meanwhile.
///
/// # Safety
/// `dst .. dst + src.len()` is valid for writes for the whole call and is
/// accessed by others only atomically or by code outside Rust (a device,
/// another process); it does not overlap `src`.
pub unsafe fn copy_to_shared(dst: *mut u8, src: &[u8]) {
    // SAFETY: the caller's contract for `dst`; `src` is a live borrow.
    unsafe { copy(src.as_ptr(), dst, src.len()) }
}

/// Copies the bytes at `src` to `dst`, where those at `src` may be written
/// by another thread, process or device meanwhile.
///
/// # Safety
/// `src .. src + dst.len()` is valid for reads for the whole call and is
/// written by others only atomically or by code outside Rust; it does not
/// overlap `dst`.
pub unsafe fn copy_from_shared(src: *const u8, dst: &mut [u8]) {
    // SAFETY: the caller's contract for `src`; `dst` is a live exclusive
    // borrow.
    unsafe { copy(src, dst.as_mut_ptr(), dst.len()) }
}

/// A byte-wise relaxed-atomic copy of `n` bytes.
///
/// # Safety
/// Both ranges are valid for the access, do not overlap, and whichever is
/// shared is accessed by others only atomically or outside Rust.
#[cfg(target_arch = "x86_64")]
unsafe fn copy(src: *const u8, dst: *mut u8, n: usize) {
    // SAFETY: `rep movsb` moves `n` bytes forward (the direction flag is
    // clear on entry to and exit from Rust code) from `src` to `dst`, both
    // valid for it (contract); each move is a single-byte load and store,
    // atomic on x86, so the block is a loop of relaxed byte atomics and
    // races with nothing. It touches no stack and keeps flags as they were.
    unsafe {
        core::arch::asm!(
            "rep movsb",
            inout("rcx") n => _,
            inout("rsi") src => _,
            inout("rdi") dst => _,
            options(nostack, preserves_flags),
        );
    }
}

/// A byte-wise relaxed-atomic copy of `n` bytes, 8-byte words where both
/// ends allow.
///
/// # Safety
/// As the x86-64 version.
#[cfg(not(target_arch = "x86_64"))]
unsafe fn copy(src: *const u8, dst: *mut u8, n: usize) {
    let mut i = 0;
    let aligned = (src as usize) % 8 == (dst as usize) % 8;
    while i < n && (!aligned || (dst as usize + i) % 8 != 0) {
        // SAFETY: byte `i < n` of both ranges (contract).
        unsafe { byte(src.add(i), dst.add(i)) };
        i += 1;
    }
    while aligned && i + 8 <= n {
        // SAFETY: an aligned word inside both ranges; the other side
        // accesses it only atomically (contract).
        let w = unsafe { AtomicU64::from_ptr(src.add(i).cast_mut().cast()) };
        // SAFETY: as above.
        let d = unsafe { AtomicU64::from_ptr(dst.add(i).cast()) };
        d.store(w.load(Ordering::Relaxed), Ordering::Relaxed);
        i += 8;
    }
    while i < n {
        // SAFETY: as for the head.
        unsafe { byte(src.add(i), dst.add(i)) };
        i += 1;
    }
}

/// One byte, atomically at both ends.
///
/// # Safety
/// Both bytes are valid and accessed by others only atomically.
#[cfg(not(target_arch = "x86_64"))]
unsafe fn byte(src: *const u8, dst: *mut u8) {
    // SAFETY: the contract.
    let v = unsafe { AtomicU8::from_ptr(src.cast_mut()) }.load(Ordering::Relaxed);
    // SAFETY: the contract.
    unsafe { AtomicU8::from_ptr(dst) }.store(v, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copies_every_length_and_alignment_both_ways() {
        let src: [u8; 96] = core::array::from_fn(|i| i as u8 ^ 0x5a);
        for off in 0..9 {
            for n in 0..80 {
                let mut buf = [0u8; 96];
                // SAFETY: `off + n <= 96`: inside `buf`, which nothing else
                // touches.
                unsafe { copy_to_shared(buf.as_mut_ptr().add(off), &src[..n]) };
                assert_eq!(&buf[off..off + n], &src[..n]);
                assert!(buf[..off].iter().chain(&buf[off + n..]).all(|&b| b == 0));
                let mut out = [0u8; 96];
                // SAFETY: as above, for reads of `src`.
                unsafe { copy_from_shared(src.as_ptr().add(off), &mut out[..n]) };
                assert_eq!(&out[..n], &src[off..off + n]);
                assert!(out[n..].iter().all(|&b| b == 0));
            }
        }
    }
}

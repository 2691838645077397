//! The device's half of the ring protocols, for device models and fake
//! devices: writing owner-bit entries, and ring space arithmetic.

use core::ptr::NonNull;
use core::sync::atomic::{AtomicU32, Ordering};

use crate::OwnedEntry;

/// Writes `entry` into the ring slot at `slot`, handing it to the consumer
/// with owner bit `owner`: the body first, then the owner word, with one
/// atomic release store.
///
/// # Safety
///
/// `slot` must be valid for reads and writes of `size_of::<T>()` bytes,
/// aligned for `T`, and owned by the device (the consumer has released it),
/// so that no one else accesses its body while it is written.
pub unsafe fn write_entry<T: OwnedEntry>(slot: NonNull<u8>, entry: &T, owner: bool) {
    const { crate::ring::check_owned_entry::<T>() };
    let src = (entry as *const T).cast::<u8>();
    // SAFETY: both ranges hold at least OWNER_OFFSET bytes (the caller's
    // contract; check_owned_entry); they are distinct objects, and `T: Pod`
    // has no padding, so every byte copied is initialised.
    unsafe { core::ptr::copy_nonoverlapping(src, slot.as_ptr(), T::OWNER_OFFSET) };
    // SAFETY: the owner word lies inside `entry` (check_owned_entry).
    let word = u32::from_le(unsafe { src.add(T::OWNER_OFFSET).cast::<u32>().read_unaligned() });
    let word = (word & !1) | owner as u32;
    // SAFETY: the owner word lies inside the slot and is 4-byte aligned (the
    // slot is aligned for T, the offset a multiple of 4: check_owned_entry);
    // the consumer accesses it only atomically until it owns the entry.
    let dst = unsafe { AtomicU32::from_ptr(slot.as_ptr().add(T::OWNER_OFFSET).cast()) };
    // Release: the consumer must see the body before the owner bit flips.
    dst.store(word.to_le(), Ordering::Release);
}

/// Whether a ring of `1 << log_size` entries with free-running producer
/// index `pi` and consumer index `ci` (both taken modulo 2^`index_bits`) is
/// full.
pub fn ring_full(pi: u32, ci: u32, log_size: u32, index_bits: u32) -> bool {
    let mask = if index_bits >= 32 {
        u32::MAX
    } else {
        (1 << index_bits) - 1
    };
    (pi.wrapping_sub(ci) & mask) >= (1 << log_size)
}

/// Number of new entries between the device's consumer index `ci` and the
/// driver's producer index `pi`, both taken modulo 2^`index_bits`.
pub fn ring_pending(pi: u32, ci: u32, index_bits: u32) -> u32 {
    let mask = if index_bits >= 32 {
        u32::MAX
    } else {
        (1 << index_bits) - 1
    };
    pi.wrapping_sub(ci) & mask
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn full_and_pending_with_wrapped_indices() {
        assert!(!ring_full(3, 0, 2, 24));
        assert!(ring_full(4, 0, 2, 24));
        assert!(ring_full(2, 0x00ff_fffe, 2, 24));
        assert!(!ring_full(1, 0x00ff_fffe, 2, 24));
        assert_eq!(ring_pending(2, 0xfffe, 16), 4);
        assert_eq!(ring_pending(0x1_0002, 0xfffe, 16), 4);
    }
}

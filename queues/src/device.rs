//! The device's half of the ring protocols, for device models and fake
//! devices: writing owner-bit entries, and ring space arithmetic.

use core::ptr::NonNull;
use core::sync::atomic::{fence, Ordering};

use crate::OwnedEntry;

/// Writes `entry` into the ring slot at `slot`, handing it to the consumer
/// with owner bit `owner`: the body first, then the owner word.
///
/// # Safety
///
/// `slot` must be valid for writes of `size_of::<T>()` bytes and suitably
/// aligned for `T`.
pub unsafe fn write_entry<T: OwnedEntry>(slot: NonNull<u8>, entry: &T, owner: bool) {
    let src = (entry as *const T).cast::<u8>();
    // SAFETY: both ranges hold at least OWNER_OFFSET bytes (OwnedEntry
    // contract and the caller's); they are distinct objects.
    unsafe { core::ptr::copy_nonoverlapping(src, slot.as_ptr(), T::OWNER_OFFSET) };
    // SAFETY: the owner word lies inside `entry` (OwnedEntry contract).
    let word = u32::from_le(unsafe { src.add(T::OWNER_OFFSET).cast::<u32>().read_unaligned() });
    let word = (word & !1) | owner as u32;
    // Release: the consumer must see the body before the owner bit flips.
    fence(Ordering::Release);
    // SAFETY: the owner word lies inside the slot and is 4-byte aligned
    // (OwnedEntry contract; the slot is aligned for T).
    unsafe {
        slot.as_ptr()
            .add(T::OWNER_OFFSET)
            .cast::<u32>()
            .write_volatile(word.to_le())
    };
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

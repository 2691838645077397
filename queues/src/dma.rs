//! DMA memory regions and doorbell records.

use core::ptr::NonNull;
use core::sync::atomic::{AtomicU32, AtomicU8, Ordering};

use crate::Pod;

/// A region of DMA memory: host virtual address, device IOVA and length.
///
/// Typed accesses ([`DmaRegion::read`], [`DmaRegion::write`]) are volatile
/// and limited to [`Pod`] types, so whatever bytes the device left behind
/// read as a valid value. The bulk copies ([`DmaRegion::read_bytes`],
/// [`DmaRegion::write_bytes`]) are plain memory copies. Both move descriptor
/// bodies and payload, whose hand-over to or from the device is ordered by a
/// hand-off word: an owner bit, owner byte or doorbell record, accessed only
/// with the atomic acquire/release methods ([`DmaRegion::load_u32_acquire`]
/// and the like, [`DbRec`]).
#[derive(Debug)]
pub struct DmaRegion {
    vaddr: NonNull<u8>,
    iova: u64,
    len: usize,
}

// SAFETY: the region is plain memory shared with a device; it has no thread
// affinity.
unsafe impl Send for DmaRegion {}
// SAFETY: no method hands out references into the region; every access is
// through a raw pointer (volatile, a copy, or an atomic for hand-off words).
unsafe impl Sync for DmaRegion {}

impl DmaRegion {
    /// Describes a region. Used by [`crate::Hal`] implementations.
    ///
    /// # Safety
    ///
    /// `vaddr .. vaddr + len` must be valid for volatile reads and writes for
    /// as long as the region (or any ring or record made from it) is used.
    pub unsafe fn new(vaddr: NonNull<u8>, iova: u64, len: usize) -> Self {
        Self { vaddr, iova, len }
    }

    /// Host virtual address of the first byte.
    pub fn vaddr(&self) -> NonNull<u8> {
        self.vaddr
    }

    /// Device address (IOVA) of the first byte.
    pub fn iova(&self) -> u64 {
        self.iova
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn check(&self, offset: usize, size: usize) {
        assert!(
            offset.checked_add(size).is_some_and(|end| end <= self.len),
            "DMA access at {offset:#x}+{size} outside a region of {:#x} bytes",
            self.len
        );
    }

    /// Bounds and alignment check of a `T` at byte `offset`; returns its
    /// address. A failure is a bug in the driver's own layout arithmetic,
    /// never something a device can cause, so it panics.
    fn typed<T>(&self, offset: usize) -> NonNull<T> {
        self.check(offset, core::mem::size_of::<T>());
        let addr = self.vaddr.as_ptr() as usize + offset;
        assert!(
            addr % core::mem::align_of::<T>() == 0,
            "DMA access of a {} at {addr:#x} (offset {offset:#x}) is not {}-byte aligned",
            core::any::type_name::<T>(),
            core::mem::align_of::<T>()
        );
        // SAFETY: `offset + size_of::<T>() <= len` (checked), so the result
        // stays inside the region (constructor).
        unsafe { self.vaddr.add(offset).cast() }
    }

    /// Reads a `T` at byte `offset` (volatile). Panics if the access is out
    /// of bounds or misaligned for `T`.
    pub fn read<T: Pod>(&self, offset: usize) -> T {
        let p = self.typed::<T>(offset);
        // SAFETY: in bounds and aligned (checked by `typed`); the
        // constructor's contract makes the bytes valid for volatile reads,
        // and any bit pattern is a valid `T` (Pod).
        unsafe { p.as_ptr().read_volatile() }
    }

    /// Writes a `T` at byte `offset` (volatile). Panics if the access is out
    /// of bounds or misaligned for `T`.
    pub fn write<T: Pod>(&self, offset: usize, value: T) {
        let p = self.typed::<T>(offset);
        // SAFETY: in bounds and aligned (checked by `typed`) and valid for
        // writes (constructor); `T: Pod` has no padding, so every byte the
        // device will read is initialised.
        unsafe { p.as_ptr().write_volatile(value) }
    }

    /// Loads the little-endian 32-bit hand-off word (an owner word or an
    /// index) at byte `offset` with acquire ordering: everything the other
    /// side wrote before it stored the word with release ordering is visible
    /// after this returns. Panics if out of bounds or not 4-byte aligned.
    pub fn load_u32_acquire(&self, offset: usize) -> u32 {
        let p = self.typed::<u32>(offset);
        // SAFETY: in bounds, 4-byte aligned (checked by `typed`), valid for
        // reads and writes while the region lives (constructor); hand-off
        // words are only accessed atomically while both sides use them.
        u32::from_le(unsafe { AtomicU32::from_ptr(p.as_ptr()) }.load(Ordering::Acquire))
    }

    /// Stores the little-endian 32-bit hand-off word at byte `offset` with
    /// release ordering: everything this thread wrote (or read) in DMA
    /// memory before is visible to whoever loads the new value with acquire
    /// ordering. Panics if out of bounds or not 4-byte aligned.
    pub fn store_u32_release(&self, offset: usize, value: u32) {
        let p = self.typed::<u32>(offset);
        // SAFETY: as in `load_u32_acquire`.
        unsafe { AtomicU32::from_ptr(p.as_ptr()) }.store(value.to_le(), Ordering::Release)
    }

    /// Loads the hand-off byte (the command owner byte) at `offset` with
    /// acquire ordering, like [`DmaRegion::load_u32_acquire`].
    pub fn load_u8_acquire(&self, offset: usize) -> u8 {
        let p = self.typed::<u8>(offset);
        // SAFETY: in bounds (checked by `typed`), valid for reads and writes
        // while the region lives (constructor); hand-off bytes are only
        // accessed atomically while both sides use them.
        unsafe { AtomicU8::from_ptr(p.as_ptr()) }.load(Ordering::Acquire)
    }

    /// Stores the hand-off byte at `offset` with release ordering, like
    /// [`DmaRegion::store_u32_release`].
    pub fn store_u8_release(&self, offset: usize, value: u8) {
        let p = self.typed::<u8>(offset);
        // SAFETY: as in `load_u8_acquire`.
        unsafe { AtomicU8::from_ptr(p.as_ptr()) }.store(value, Ordering::Release)
    }

    /// Copies `bytes` into the region at `offset` as relaxed atomic byte
    /// stores ([`shared::copy_to_shared`](crate::shared::copy_to_shared)):
    /// for data the device may read or write at the same time (an MR's
    /// bytes), which a plain or volatile copy would race with. The device
    /// model copies such bytes the same way, so neither side's accesses are
    /// a data race.
    pub fn write_shared(&self, offset: usize, bytes: &[u8]) {
        self.check(offset, bytes.len());
        // SAFETY: in bounds (checked), valid for writes while the region
        // lives (constructor); bytes the device shares are accessed only
        // atomically or by the device; `bytes` is a distinct borrow.
        unsafe { crate::shared::copy_to_shared(self.vaddr.as_ptr().add(offset), bytes) }
    }

    /// Copies bytes of the region at `offset` into `out` as relaxed atomic
    /// byte loads, the counterpart of [`DmaRegion::write_shared`].
    pub fn read_shared(&self, offset: usize, out: &mut [u8]) {
        self.check(offset, out.len());
        // SAFETY: as in `write_shared`, for reads.
        unsafe { crate::shared::copy_from_shared(self.vaddr.as_ptr().add(offset), out) }
    }

    /// Copies `bytes` into the region at `offset`.
    pub fn write_bytes(&self, offset: usize, bytes: &[u8]) {
        self.check(offset, bytes.len());
        // SAFETY: in bounds (checked) and valid for writes (constructor);
        // `bytes` is a distinct Rust borrow, so the ranges do not overlap.
        unsafe {
            core::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.vaddr.add(offset).as_ptr(),
                bytes.len(),
            )
        }
    }

    /// Copies bytes out of the region at `offset` into `out`.
    pub fn read_bytes(&self, offset: usize, out: &mut [u8]) {
        self.check(offset, out.len());
        // SAFETY: in bounds (checked) and valid for reads (constructor).
        unsafe {
            core::ptr::copy_nonoverlapping(
                self.vaddr.add(offset).as_ptr(),
                out.as_mut_ptr(),
                out.len(),
            )
        }
    }

    /// Fills the whole region with zeros.
    pub fn zero(&self) {
        // SAFETY: the whole region is valid for writes (constructor).
        unsafe { core::ptr::write_bytes(self.vaddr.as_ptr(), 0, self.len) }
    }
}

/// A doorbell record: a little-endian 32-bit index in DMA memory that the
/// driver writes and the device reads (or the reverse), always with one
/// atomic access.
#[derive(Debug)]
pub struct DbRec {
    ptr: NonNull<u32>,
}

// SAFETY: a pointer into DMA memory accessed only with atomic operations.
unsafe impl Send for DbRec {}
// SAFETY: as above: concurrent accesses through `&DbRec` are atomic.
unsafe impl Sync for DbRec {}

impl DbRec {
    /// A record at byte `offset` of `region`.
    ///
    /// # Safety
    ///
    /// The region must outlive the returned record.
    pub unsafe fn new(region: &DmaRegion, offset: usize) -> Self {
        Self {
            // In bounds and 4-byte aligned, or a panic.
            ptr: region.typed::<u32>(offset),
        }
    }

    fn word(&self) -> &AtomicU32 {
        // SAFETY: a 4-byte aligned pointer into DMA memory that is valid for
        // reads and writes while the region lives (constructor); the record
        // is only ever accessed atomically.
        unsafe { AtomicU32::from_ptr(self.ptr.as_ptr()) }
    }

    /// Publishes `value`: everything written to (or read from) DMA memory
    /// before this call is visible to the device before the new value is.
    pub fn publish(&self, value: u32) {
        // Release: the WQEs (or consumed CQEs) this index covers must be
        // visible before the device can observe the index.
        self.word().store(value.to_le(), Ordering::Release)
    }

    /// Reads the current value.
    pub fn read(&self) -> u32 {
        // Acquire: the writer's entries up to this index are visible once
        // the index is.
        u32::from_le(self.word().load(Ordering::Acquire))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn region(buf: &mut [u64; 4]) -> DmaRegion {
        // SAFETY: the buffer outlives the region in each test.
        unsafe { DmaRegion::new(NonNull::from(buf).cast(), 0x1000, 32) }
    }

    #[test]
    fn shared_copies_at_every_offset_and_length() {
        for off in 0..16 {
            for len in 0..=(32 - off) {
                let mut buf = [0u64; 4];
                let r = region(&mut buf);
                let mut data = [0u8; 32];
                for (i, d) in data.iter_mut().enumerate() {
                    *d = (i as u8).wrapping_mul(37) | 1;
                }
                let data = &data[..len];
                r.write_shared(off, data);
                let mut plain = [0u8; 32];
                r.read_bytes(0, &mut plain);
                assert!(plain[..off].iter().all(|&b| b == 0), "before {off}");
                assert_eq!(&plain[off..off + len], data, "{off} {len}");
                assert!(plain[off + len..].iter().all(|&b| b == 0), "after");
                let mut back = [0u8; 32];
                r.read_shared(off, &mut back[..len]);
                assert_eq!(&back[..len], data);
            }
        }
    }

    #[test]
    fn typed_access_round_trips() {
        let mut buf = [0u64; 4];
        let r = region(&mut buf);
        r.write(8, 0x1122_3344_5566_7788u64);
        r.write(17, 0xabu8);
        r.write(20, [1u16, 2]);
        assert_eq!(r.read::<u64>(8), 0x1122_3344_5566_7788);
        assert_eq!(r.read::<u8>(17), 0xab);
        assert_eq!(r.read::<[u16; 2]>(20), [1, 2]);
    }

    #[test]
    #[should_panic(expected = "is not 8-byte aligned")]
    fn misaligned_read_panics() {
        let mut buf = [0u64; 4];
        let r = region(&mut buf);
        let _ = r.read::<u64>(1);
    }

    #[test]
    #[should_panic(expected = "is not 4-byte aligned")]
    fn misaligned_write_panics() {
        let mut buf = [0u64; 4];
        let r = region(&mut buf);
        r.write(6, 0u32);
    }

    #[test]
    #[should_panic(expected = "outside a region")]
    fn out_of_bounds_read_panics() {
        let mut buf = [0u64; 4];
        let r = region(&mut buf);
        let _ = r.read::<u64>(32);
    }

    #[test]
    fn hand_off_words_are_little_endian() {
        let mut buf = [0u64; 4];
        let r = region(&mut buf);
        r.store_u32_release(4, 0x0102_0304);
        r.store_u8_release(1, 0x7f);
        assert_eq!(r.load_u32_acquire(4), 0x0102_0304);
        assert_eq!(r.load_u8_acquire(1), 0x7f);
        assert_eq!(r.read::<[u8; 8]>(0), [0, 0x7f, 0, 0, 4, 3, 2, 1]);
        // SAFETY: `buf` outlives the record.
        let db = unsafe { DbRec::new(&r, 12) };
        db.publish(0xdead_beef);
        assert_eq!(db.read(), 0xdead_beef);
        assert_eq!(r.read::<[u8; 4]>(12), [0xef, 0xbe, 0xad, 0xde]);
    }

    #[test]
    #[should_panic(expected = "is not 4-byte aligned")]
    fn misaligned_doorbell_record_panics() {
        let mut buf = [0u64; 4];
        let r = region(&mut buf);
        // SAFETY: `buf` outlives the record (which is never made).
        let _ = unsafe { DbRec::new(&r, 2) };
    }
}

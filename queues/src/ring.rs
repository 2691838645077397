//! Producer and consumer rings in DMA memory.

use core::marker::PhantomData;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU32, Ordering};

use crate::{DmaRegion, Pod};

/// The phase ("owner") bit a producer writes into the entry at free-running
/// index `index` of a ring of `1 << log_size` entries.
///
/// The producer writes `1` on the first pass over a zeroed ring, `0` on the
/// second, and so on; a consumer whose free-running consumer index is `ci`
/// owns the entry iff its owner bit equals `owner_bit(ci, log_size)`. A zeroed
/// ring therefore starts out with no valid entries.
#[inline]
pub const fn owner_bit(index: u32, log_size: u32) -> bool {
    (index >> log_size) & 1 == 0
}

/// The producer side of a ring: index accounting and slot addresses. The
/// driver writes entries into [`ProducerRing::slot`] at the producer index,
/// and learns from completions how far the device has consumed.
///
/// Indices are free-running 32-bit counters; the slot of index `i` is
/// `i & (size - 1)`. The device sees the low 16 bits.
#[derive(Debug)]
pub struct ProducerRing {
    base: NonNull<u8>,
    log_size: u32,
    stride: usize,
    pi: u32,
    ci: u32,
}

// SAFETY: the ring only computes slot addresses in DMA memory and never
// accesses that memory itself; moving it between threads is fine.
unsafe impl Send for ProducerRing {}

impl ProducerRing {
    /// A ring of `1 << log_size` slots of `stride` bytes at the start of
    /// `region`.
    ///
    /// # Safety
    ///
    /// `region` must outlive the ring.
    pub unsafe fn new(region: &DmaRegion, log_size: u32, stride: usize) -> Self {
        assert!(
            log_size < 16,
            "ring of 2^{log_size} slots exceeds the 16-bit device index"
        );
        assert!(
            stride
                .checked_mul(1 << log_size)
                .is_some_and(|bytes| bytes <= region.len()),
            "ring of {} x {stride} bytes does not fit a region of {} bytes",
            1u32 << log_size,
            region.len()
        );
        Self {
            base: region.vaddr(),
            log_size,
            stride,
            pi: 0,
            ci: 0,
        }
    }

    /// Number of slots.
    pub fn size(&self) -> u32 {
        1 << self.log_size
    }

    /// Free-running producer index.
    pub fn pi(&self) -> u32 {
        self.pi
    }

    /// Free-running consumer index (as far as completions have told).
    pub fn ci(&self) -> u32 {
        self.ci
    }

    /// Slots written and not yet retired.
    pub fn used(&self) -> u32 {
        self.pi.wrapping_sub(self.ci)
    }

    /// Slots free for new entries.
    pub fn free(&self) -> u32 {
        self.size() - self.used()
    }

    /// Pointer to the `stride` bytes of the slot of index `idx` (taken
    /// modulo the ring size). Writing through it is up to the caller, who
    /// must keep the region alive (the constructor's contract) and write
    /// only slots it has not yet handed to the device.
    pub fn slot(&self, idx: u32) -> NonNull<u8> {
        // SAFETY: the slot lies inside the ring's region: `stride << log_size
        // <= region.len()` (checked in the constructor).
        unsafe {
            self.base
                .add((idx & (self.size() - 1)) as usize * self.stride)
        }
    }

    /// Accounts `n` written slots. Panics if they were not free: callers
    /// check [`ProducerRing::free`] first.
    pub fn advance(&mut self, n: u32) {
        assert!(
            n <= self.free(),
            "advancing {n} slots with only {} free",
            self.free()
        );
        self.pi = self.pi.wrapping_add(n);
    }

    /// Retires slots up to the device's 16-bit consumer index `counter` (from
    /// a completion). Returns false, changing nothing, if `counter` is not
    /// between the current consumer and producer indices.
    pub fn retire_to(&mut self, counter: u16) -> bool {
        let step = counter.wrapping_sub(self.ci as u16) as u32;
        if step > self.used() {
            return false;
        }
        self.ci = self.ci.wrapping_add(step);
        true
    }

    /// Retires every slot (after the queue was reset).
    pub fn reset(&mut self) {
        self.pi = 0;
        self.ci = 0;
    }
}

/// A ring entry whose last word carries the owner (phase) bit.
///
/// # Safety
///
/// `Self` must have a little-endian 32-bit owner word at `OWNER_OFFSET`
/// whose bit 0 is the owner bit, and no bytes after it. (That the offset is
/// a multiple of 4, the word lies inside the entry and `Self` is at least
/// 4-byte aligned is checked at compile time.)
pub unsafe trait OwnedEntry: Pod {
    /// Offset of the owner word.
    const OWNER_OFFSET: usize;
}

/// Compile-time check of the layout facts [`OwnedEntry`] relies on: the
/// owner word is the aligned last word of the entry.
pub(crate) const fn check_owned_entry<T: OwnedEntry>() {
    assert!(
        T::OWNER_OFFSET % 4 == 0
            && T::OWNER_OFFSET + 4 == core::mem::size_of::<T>()
            && core::mem::align_of::<T>() >= 4,
        "OwnedEntry owner word must be the entry's aligned last word"
    );
}

/// The consumer side of a CQ or EQ: the device writes entries with owner
/// bits, the driver takes those whose owner bit says they are new.
#[derive(Debug)]
pub struct ConsumerRing<T: OwnedEntry> {
    base: NonNull<u8>,
    log_size: u32,
    ci: u32,
    _entry: PhantomData<T>,
}

// SAFETY: a view of DMA memory: owner words are accessed atomically, entry
// bodies read only after the acquire hand-over; no thread affinity.
unsafe impl<T: OwnedEntry> Send for ConsumerRing<T> {}

impl<T: OwnedEntry> ConsumerRing<T> {
    /// A ring of `1 << log_size` entries at the start of `region`, which must
    /// be zeroed (no valid entries) when the device starts using it. Panics
    /// if the ring does not fit or the region is not aligned for `T`.
    ///
    /// # Safety
    ///
    /// `region` must outlive the ring.
    pub unsafe fn new(region: &DmaRegion, log_size: u32) -> Self {
        const { check_owned_entry::<T>() };
        assert!(
            log_size < 24,
            "ring of 2^{log_size} entries exceeds the 24-bit device index"
        );
        assert!(
            (core::mem::size_of::<T>() << log_size) <= region.len(),
            "ring of 2^{log_size} entries does not fit a region of {} bytes",
            region.len()
        );
        assert!(
            region.vaddr().as_ptr() as usize % core::mem::align_of::<T>() == 0,
            "ring at {:p} is not aligned for its entries",
            region.vaddr()
        );
        Self {
            base: region.vaddr(),
            log_size,
            ci: 0,
            _entry: PhantomData,
        }
    }

    /// The ring, resized, at the start of `region`: `1 << log_size`
    /// entries, the consumer index unchanged (the device moved the entries
    /// not yet taken to their indices in the new ring).
    ///
    /// # Safety
    ///
    /// As for [`ConsumerRing::new`].
    pub unsafe fn moved_to(&self, region: &DmaRegion, log_size: u32) -> Self {
        // SAFETY: the caller's promise, passed on.
        let mut r = unsafe { Self::new(region, log_size) };
        r.ci = self.ci;
        r
    }

    /// Number of entries.
    pub fn size(&self) -> u32 {
        1 << self.log_size
    }

    /// Free-running consumer index.
    pub fn ci(&self) -> u32 {
        self.ci
    }

    fn slot(&self, idx: u32) -> *mut T {
        let i = (idx & (self.size() - 1)) as usize;
        // SAFETY: slot `i` lies inside the region (constructor).
        unsafe { self.base.as_ptr().cast::<T>().add(i) }
    }

    /// Whether the device has handed over the entry at free-running index
    /// `idx`: its owner bit is the one the device writes on `idx`'s pass over
    /// the ring. When it returns true, everything the device wrote before
    /// the owner word (the entry body) is visible.
    pub fn ready(&self, idx: u32) -> bool {
        // SAFETY: the owner word lies inside the slot, which is in bounds
        // (constructor); it is 4-byte aligned since the slot is aligned for
        // `T` (constructor) and the offset is a multiple of 4
        // (check_owned_entry). The device stores it only atomically.
        let word = unsafe { AtomicU32::from_ptr(self.slot(idx).byte_add(T::OWNER_OFFSET).cast()) };
        // Acquire: the device wrote the entry body before its owner word.
        let owner = u32::from_le(word.load(Ordering::Acquire));
        (owner & 1 == 1) == owner_bit(idx, self.log_size)
    }

    /// The entry at the consumer index, if the device has written it.
    pub fn peek(&self) -> Option<T> {
        if !self.ready(self.ci) {
            return None;
        }
        // SAFETY: in-bounds slot aligned for `T` (constructor); any bit
        // pattern is a valid `T` (Pod). The device does not write the entry
        // again until the consumer index is published past it.
        Some(unsafe { self.slot(self.ci).read_volatile() })
    }

    /// Takes the entry at the consumer index, if the device has written it.
    pub fn pop(&mut self) -> Option<T> {
        let entry = self.peek()?;
        self.ci = self.ci.wrapping_add(1);
        Some(entry)
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec;

    use super::*;
    use crate::device;

    /// A 16-byte entry with its owner word last, as a CQE has.
    #[repr(C, align(8))]
    #[derive(Clone, Copy, Default)]
    struct Entry {
        wr_id: u64,
        len: u32,
        owner: u32,
    }
    crate::pod_struct! { Entry { wr_id, len, owner } }
    // SAFETY: `owner`, at offset 12, is the last word and 4-byte aligned.
    unsafe impl OwnedEntry for Entry {
        const OWNER_OFFSET: usize = 12;
    }

    #[test]
    fn owner_bit_flips_every_pass() {
        assert!(owner_bit(0, 2));
        assert!(owner_bit(3, 2));
        assert!(!owner_bit(4, 2));
        assert!(!owner_bit(7, 2));
        assert!(owner_bit(8, 2));
    }

    fn region(buf: &mut [u64]) -> DmaRegion {
        let len = core::mem::size_of_val(buf);
        // SAFETY: the buffer outlives the region in each test.
        unsafe { DmaRegion::new(NonNull::new(buf.as_mut_ptr().cast()).unwrap(), 0x1000, len) }
    }

    /// Writes `v` into the first word of the slot at the producer index and
    /// accounts it, as a driver posting one entry does.
    fn post(ring: &mut ProducerRing, v: u64) {
        let slot = ring.slot(ring.pi()).cast::<u64>();
        // SAFETY: the slot is inside the live test buffer and 8-byte aligned
        // (the buffer is a u64 array, the stride a multiple of 8).
        unsafe { slot.as_ptr().write(v) };
        ring.advance(1);
    }

    #[test]
    fn producer_empty_full_wrap() {
        let mut buf = vec![0u64; 4 * 8];
        let base = buf.as_ptr() as usize;
        let r = region(&mut buf);
        // SAFETY: `buf` outlives the ring.
        let mut ring = unsafe { ProducerRing::new(&r, 2, 64) };
        assert_eq!((ring.used(), ring.free()), (0, 4), "a new ring is empty");
        for i in 0..4u32 {
            assert_eq!(
                ring.slot(ring.pi()).as_ptr() as usize,
                base + 64 * i as usize
            );
            post(&mut ring, i as u64 + 100);
        }
        assert_eq!((ring.used(), ring.free()), (4, 0), "ring full");
        assert!(
            !ring.retire_to(5),
            "counter past the producer index must be refused"
        );
        assert_eq!(ring.ci(), 0, "a refused counter changes nothing");
        assert!(ring.retire_to(2));
        assert_eq!(ring.free(), 2);
        // Indices 4 and 5 wrap around to slots 0 and 1.
        assert_eq!(ring.slot(4), ring.slot(0));
        post(&mut ring, 7);
        post(&mut ring, 8);
        assert_eq!(ring.free(), 0);
        assert_eq!([buf[0], buf[8], buf[16], buf[24]], [7, 8, 102, 103]);
    }

    #[test]
    #[should_panic(expected = "advancing 1 slots with only 0 free")]
    fn producer_refuses_overfill() {
        let mut buf = vec![0u64; 2 * 8];
        let r = region(&mut buf);
        // SAFETY: `buf` outlives the ring.
        let mut ring = unsafe { ProducerRing::new(&r, 1, 64) };
        ring.advance(2);
        ring.advance(1);
    }

    #[test]
    #[should_panic(expected = "does not fit")]
    fn producer_stride_overflow_is_refused() {
        let mut buf = vec![0u64; 2 * 8];
        let r = region(&mut buf);
        // SAFETY: `buf` outlives the ring (which is never made).
        let _ = unsafe { ProducerRing::new(&r, 15, usize::MAX / 2 + 2) };
    }

    #[test]
    fn producer_counter_wraps_16_bits() {
        let mut buf = vec![0u64; 2 * 8];
        let r = region(&mut buf);
        // SAFETY: `buf` outlives the ring.
        let mut ring = unsafe { ProducerRing::new(&r, 1, 64) };
        for _ in 0..70_000u32 {
            ring.advance(1);
            assert!(ring.retire_to(ring.pi() as u16));
        }
        assert_eq!(ring.used(), 0);
        assert_eq!(ring.pi(), 70_000);
    }

    #[test]
    fn consumer_owner_flip() {
        let mut buf = vec![0u64; 2 * 8];
        let r = region(&mut buf);
        // SAFETY: `buf` outlives the ring.
        let mut cq = unsafe { ConsumerRing::<Entry>::new(&r, 1) };
        assert!(cq.pop().is_none(), "a zeroed ring holds no entries");
        for pi in 0..6u32 {
            let cqe = Entry {
                wr_id: pi as u64,
                ..Default::default()
            };
            let slot = NonNull::new(cq.slot(pi).cast::<u8>()).unwrap();
            // SAFETY: the slot is inside the live ring buffer.
            unsafe { device::write_entry(slot, &cqe, owner_bit(pi, 1)) };
            let got = cq.pop().expect("entry just written");
            assert_eq!(got.wr_id, pi as u64);
            assert!(
                cq.pop().is_none(),
                "stale entry from the previous pass taken"
            );
        }
        assert_eq!(cq.ci(), 6);
    }

    #[test]
    fn consumer_full_ring_then_empty() {
        let mut buf = vec![0u64; 4 * 8];
        let r = region(&mut buf);
        // SAFETY: `buf` outlives the ring.
        let mut cq = unsafe { ConsumerRing::<Entry>::new(&r, 2) };
        // Two passes: the second overwrites every slot with the flipped bit.
        for pass in 0..2u32 {
            for i in 0..4u32 {
                let pi = pass * 4 + i;
                assert!(!cq.ready(pi), "entry {pi} not written yet");
                let slot = NonNull::new(cq.slot(pi).cast::<u8>()).unwrap();
                let cqe = Entry {
                    wr_id: pi as u64,
                    ..Default::default()
                };
                // SAFETY: the slot is inside the live ring buffer.
                unsafe { device::write_entry(slot, &cqe, owner_bit(pi, 2)) };
                assert!(cq.ready(pi));
            }
            for i in 0..4u32 {
                let got = cq.pop().expect("full ring");
                assert_eq!(got.wr_id, (pass * 4 + i) as u64);
            }
            assert!(cq.pop().is_none(), "every entry taken");
        }
        assert_eq!(cq.ci(), 8);
    }
}

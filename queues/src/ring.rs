//! Producer and consumer rings in DMA memory.

use core::marker::PhantomData;
use core::ptr::NonNull;
use core::sync::atomic::{fence, Ordering};

use rnic_hw_regs::cqe::{Cqe, CQE_OWNER_OFFSET};
use rnic_hw_regs::eqe::{Eqe, EQE_OWNER_OFFSET};
use rnic_hw_regs::owner_bit;

use crate::DmaRegion;

/// The producer side of a ring: the driver writes entries at the producer
/// index, and learns from completions how far the device has consumed.
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

// SAFETY: the ring is a view of DMA memory accessed only through volatile
// operations; moving it between threads is fine.
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
            (stride << log_size) <= region.len(),
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

    /// log2 of the number of slots.
    pub fn log_size(&self) -> u32 {
        self.log_size
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

    fn bytes(&self) -> usize {
        self.stride << self.log_size
    }

    /// Writes `bytes` starting `offset` bytes into the slot of index `idx`,
    /// wrapping from the end of the ring to its start.
    pub fn write_bytes(&mut self, idx: u32, offset: usize, bytes: &[u8]) {
        let total = self.bytes();
        assert!(
            bytes.len() <= total,
            "write of {} bytes larger than the ring",
            bytes.len()
        );
        let start = ((idx & (self.size() - 1)) as usize * self.stride + offset) % total;
        let first = bytes.len().min(total - start);
        // SAFETY: `start + first <= total` and `bytes.len() - first <= total`,
        // both inside the ring's region (constructor).
        unsafe {
            core::ptr::copy_nonoverlapping(bytes.as_ptr(), self.base.as_ptr().add(start), first);
            core::ptr::copy_nonoverlapping(
                bytes.as_ptr().add(first),
                self.base.as_ptr(),
                bytes.len() - first,
            );
        }
    }

    /// Writes `value` starting `offset` bytes into the slot of index `idx`,
    /// wrapping like [`ProducerRing::write_bytes`].
    pub fn write<T: Copy>(&mut self, idx: u32, offset: usize, value: T) {
        let total = self.bytes();
        let size = core::mem::size_of::<T>();
        let start = ((idx & (self.size() - 1)) as usize * self.stride + offset) % total;
        if start + size <= total && start % core::mem::align_of::<T>() == 0 {
            // SAFETY: in bounds (checked) and aligned; the region is valid
            // for volatile writes (constructor).
            unsafe {
                self.base
                    .as_ptr()
                    .add(start)
                    .cast::<T>()
                    .write_volatile(value)
            }
        } else {
            // SAFETY: `T: Copy` is plain data; viewing it as bytes is sound.
            let bytes =
                unsafe { core::slice::from_raw_parts((&value as *const T).cast::<u8>(), size) };
            self.write_bytes(idx, offset, bytes);
        }
    }

    /// Pointer to the slot of index `idx`.
    pub fn slot(&self, idx: u32) -> NonNull<u8> {
        // SAFETY: the slot lies inside the ring's region (constructor).
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
/// `Self` must be a `#[repr(C)]` plain-data type valid for every bit
/// pattern, with a little-endian 32-bit owner word at `OWNER_OFFSET` whose
/// bit 0 is the owner bit.
pub unsafe trait OwnedEntry: Copy {
    /// Offset of the owner word.
    const OWNER_OFFSET: usize;
}

// SAFETY: Cqe is repr(C) plain data; its owner word is at CQE_OWNER_OFFSET.
unsafe impl OwnedEntry for Cqe {
    const OWNER_OFFSET: usize = CQE_OWNER_OFFSET;
}

// SAFETY: Eqe is repr(C) plain data; its owner word is at EQE_OWNER_OFFSET.
unsafe impl OwnedEntry for Eqe {
    const OWNER_OFFSET: usize = EQE_OWNER_OFFSET;
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

// SAFETY: a view of DMA memory accessed only through volatile operations.
unsafe impl<T: OwnedEntry> Send for ConsumerRing<T> {}

impl<T: OwnedEntry> ConsumerRing<T> {
    /// A ring of `1 << log_size` entries at the start of `region`, which must
    /// be zeroed (no valid entries) when the device starts using it.
    ///
    /// # Safety
    ///
    /// `region` must outlive the ring.
    pub unsafe fn new(region: &DmaRegion, log_size: u32) -> Self {
        assert!(
            log_size < 24,
            "ring of 2^{log_size} entries exceeds the 24-bit device index"
        );
        assert!(
            (core::mem::size_of::<T>() << log_size) <= region.len(),
            "ring of 2^{log_size} entries does not fit a region of {} bytes",
            region.len()
        );
        Self {
            base: region.vaddr(),
            log_size,
            ci: 0,
            _entry: PhantomData,
        }
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

    /// The entry at the consumer index, if the device has written it.
    pub fn peek(&self) -> Option<T> {
        let slot = self.slot(self.ci);
        // SAFETY: the owner word lies inside the slot (OwnedEntry contract).
        let owner = unsafe {
            slot.cast::<u8>()
                .add(T::OWNER_OFFSET)
                .cast::<u32>()
                .read_volatile()
        };
        if (u32::from_le(owner) & 1 == 1) != owner_bit(self.ci, self.log_size) {
            return None;
        }
        // Acquire: the device wrote the entry body before its owner word.
        fence(Ordering::Acquire);
        // SAFETY: in-bounds aligned slot; any bit pattern is a valid T.
        Some(unsafe { slot.read_volatile() })
    }

    /// Takes the entry at the consumer index, if the device has written it.
    pub fn pop(&mut self) -> Option<T> {
        let entry = self.peek()?;
        self.ci = self.ci.wrapping_add(1);
        Some(entry)
    }

    /// Takes up to `out.len()` entries; returns how many.
    pub fn pop_batch(&mut self, out: &mut [T]) -> usize {
        let mut n = 0;
        while n < out.len() {
            match self.pop() {
                Some(e) => out[n] = e,
                None => break,
            }
            n += 1;
        }
        n
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use std::vec;
    use std::vec::Vec;

    use super::*;
    use crate::device;
    use rnic_hw_regs::le64;

    fn region(buf: &mut [u64]) -> DmaRegion {
        let len = core::mem::size_of_val(buf);
        // SAFETY: the buffer outlives the region in each test.
        unsafe { DmaRegion::new(NonNull::new(buf.as_mut_ptr().cast()).unwrap(), 0x1000, len) }
    }

    #[test]
    fn producer_empty_full_wrap() {
        let mut buf = vec![0u64; 4 * 8];
        let r = region(&mut buf);
        // SAFETY: `buf` outlives the ring.
        let mut ring = unsafe { ProducerRing::new(&r, 2, 64) };
        assert_eq!(ring.free(), 4);
        for i in 0..4u32 {
            ring.write(ring.pi(), 0, i as u64 + 100);
            ring.advance(1);
        }
        assert_eq!(ring.free(), 0);
        assert!(
            !ring.retire_to(5),
            "counter past the producer index must be refused"
        );
        assert!(ring.retire_to(2));
        assert_eq!(ring.free(), 2);
        // Indices 4 and 5 land in slots 0 and 1.
        ring.write(ring.pi(), 0, 7u64);
        ring.advance(1);
        assert_eq!(buf[0], 7);
        assert_eq!(buf[8], 101);
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
    fn write_wraps_around_ring_end() {
        let mut buf = vec![0u64; 2 * 8];
        let r = region(&mut buf);
        // SAFETY: `buf` outlives the ring.
        let mut ring = unsafe { ProducerRing::new(&r, 1, 64) };
        let data: Vec<u8> = (0..16u8).collect();
        ring.write_bytes(1, 56, &data);
        let bytes: Vec<u8> = buf.iter().flat_map(|w| w.to_ne_bytes()).collect();
        assert_eq!(&bytes[120..128], &data[..8]);
        assert_eq!(&bytes[0..8], &data[8..]);
    }

    #[test]
    fn consumer_owner_flip() {
        let mut buf = vec![0u64; 2 * 8];
        let r = region(&mut buf);
        // SAFETY: `buf` outlives the ring.
        let mut cq = unsafe { ConsumerRing::<Cqe>::new(&r, 1) };
        assert!(cq.pop().is_none(), "a zeroed ring holds no entries");
        for pi in 0..6u32 {
            let cqe = Cqe {
                wr_id: le64::from_ne(pi as u64),
                ..Default::default()
            };
            let slot = NonNull::new(cq.slot(pi).cast::<u8>()).unwrap();
            // SAFETY: the slot is inside the live ring buffer.
            unsafe { device::write_entry(slot, &cqe, owner_bit(pi, 1)) };
            let got = cq.pop().expect("entry just written");
            assert_eq!(got.wr_id.to_ne(), pi as u64);
            assert!(
                cq.pop().is_none(),
                "stale entry from the previous pass taken"
            );
        }
        assert_eq!(cq.ci(), 6);
    }

    #[test]
    fn consumer_batch() {
        let mut buf = vec![0u64; 4 * 8];
        let r = region(&mut buf);
        // SAFETY: `buf` outlives the ring.
        let mut cq = unsafe { ConsumerRing::<Cqe>::new(&r, 2) };
        for pi in 0..3u32 {
            let slot = NonNull::new(cq.slot(pi).cast::<u8>()).unwrap();
            // SAFETY: the slot is inside the live ring buffer.
            unsafe { device::write_entry(slot, &Cqe::default(), owner_bit(pi, 2)) };
        }
        let mut out = [Cqe::default(); 8];
        assert_eq!(cq.pop_batch(&mut out), 3);
        assert_eq!(cq.pop_batch(&mut out), 0);
    }
}

//! Producer/consumer index rings: one direction's two indices in a state
//! page, as PVRDMA's queues keep them (`pvrdma_ring.h`).
//!
//! The producer writes the entry at its tail, then advances the tail; the
//! consumer reads the entry at its head, then advances the head. Each index
//! runs modulo twice the ring's size `n` (a power of two), so the ring is
//! empty when tail == head and full when tail == head ^ n, and all `n`
//! slots can be used. The two words are little-endian 32-bit integers the
//! other side may write at any time: an index with bits above `2n - 1`
//! set is refused ([`IndexError`]), never used as a slot.

use crate::DmaRegion;

/// An index the other side left in the state page is out of range: the
/// ring cannot be used until it is reset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexError {
    /// The value read.
    pub value: u32,
    /// Twice the ring's size: a valid index is below it.
    pub limit: u32,
}

impl core::fmt::Display for IndexError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        write!(
            f,
            "ring index {:#x} is not below {:#x}",
            self.value, self.limit
        )
    }
}

/// One direction of an index ring: where its producer tail and consumer
/// head words are in a region, and its size. It holds no memory itself;
/// each call reads or writes the words in the region it is given.
#[derive(Debug, Clone, Copy)]
pub struct IndexRing {
    tail: usize,
    head: usize,
    log_size: u32,
}

impl IndexRing {
    /// A ring of `1 << log_size` entries whose producer tail is the 32-bit
    /// word at byte `tail` of its state region and whose consumer head is
    /// the word at `head`. Panics if `log_size` is 31 or more (the indices
    /// need one bit above the slot).
    pub fn new(tail: usize, head: usize, log_size: u32) -> Self {
        assert!(
            log_size < 31,
            "an index ring of 2^{log_size} entries overflows its indices"
        );
        Self {
            tail,
            head,
            log_size,
        }
    }

    /// Number of entries.
    pub fn size(&self) -> u32 {
        1 << self.log_size
    }

    fn load(&self, state: &DmaRegion, offset: usize) -> Result<u32, IndexError> {
        // Acquire: the entries the other side wrote (or finished reading)
        // before it moved this index are visible after it.
        let value = state.load_u32_acquire(offset);
        let limit = self.size() << 1;
        if value & !(limit - 1) != 0 {
            return Err(IndexError { value, limit });
        }
        Ok(value)
    }

    fn advance(&self, state: &DmaRegion, offset: usize, from: u32) {
        let next = from.wrapping_add(1) & ((self.size() << 1) - 1);
        // Release: the entry written (or read) before is done when the other
        // side sees the index move.
        state.store_u32_release(offset, next);
    }

    /// The producer's view: the slot at the tail if the ring has space,
    /// `None` if it is full.
    pub fn free_slot(&self, state: &DmaRegion) -> Result<Option<u32>, IndexError> {
        let tail = self.load(state, self.tail)?;
        let head = self.load(state, self.head)?;
        Ok((tail != head ^ self.size()).then_some(tail & (self.size() - 1)))
    }

    /// The consumer's view: the slot at the head if the ring holds an
    /// entry, `None` if it is empty.
    pub fn ready_slot(&self, state: &DmaRegion) -> Result<Option<u32>, IndexError> {
        let tail = self.load(state, self.tail)?;
        let head = self.load(state, self.head)?;
        Ok((tail != head).then_some(head & (self.size() - 1)))
    }

    /// Entries written and not yet consumed.
    pub fn used(&self, state: &DmaRegion) -> Result<u32, IndexError> {
        let tail = self.load(state, self.tail)?;
        let head = self.load(state, self.head)?;
        Ok(tail.wrapping_sub(head) & ((self.size() << 1) - 1))
    }

    /// Hands the entry written at the tail to the consumer. Call only after
    /// [`IndexRing::free_slot`] gave a slot and the entry was written there.
    pub fn produce(&self, state: &DmaRegion) -> Result<(), IndexError> {
        let tail = self.load(state, self.tail)?;
        self.advance(state, self.tail, tail);
        Ok(())
    }

    /// Gives the slot read at the head back to the producer. Call only
    /// after [`IndexRing::ready_slot`] gave a slot and its entry was read.
    pub fn consume(&self, state: &DmaRegion) -> Result<(), IndexError> {
        let head = self.load(state, self.head)?;
        self.advance(state, self.head, head);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    extern crate std;
    use core::ptr::NonNull;
    use std::vec;

    use super::*;

    /// A state page of four words: tail at 0, head at 4 (PVRDMA's `tx`).
    fn state(buf: &mut [u32]) -> DmaRegion {
        let len = core::mem::size_of_val(buf);
        // SAFETY: the buffer outlives the region in each test.
        unsafe { DmaRegion::new(NonNull::new(buf.as_mut_ptr().cast()).unwrap(), 0, len) }
    }

    #[test]
    fn fills_every_slot_and_wraps() {
        let mut buf = vec![0u32; 4];
        let st = state(&mut buf);
        let ring = IndexRing::new(0, 4, 2);
        assert_eq!(ring.ready_slot(&st), Ok(None), "a zeroed ring is empty");
        let mut seen = vec![];
        // Three passes over four slots: the producer fills the ring, the
        // consumer drains it.
        for _ in 0..3 {
            for _ in 0..4 {
                let slot = ring.free_slot(&st).unwrap().expect("space");
                seen.push(slot);
                ring.produce(&st).unwrap();
            }
            assert_eq!(ring.free_slot(&st), Ok(None), "four of four slots used");
            assert_eq!(ring.used(&st), Ok(4));
            for want in 0..4 {
                assert_eq!(ring.ready_slot(&st), Ok(Some(want)));
                ring.consume(&st).unwrap();
            }
            assert_eq!(ring.ready_slot(&st), Ok(None));
        }
        assert_eq!(seen, [0, 1, 2, 3].repeat(3));
        // Twelve entries: both indices are 12 mod 8.
        assert_eq!(st.read::<[u32; 2]>(0), [4, 4]);
    }

    #[test]
    fn full_is_tail_equal_to_head_with_the_wrap_bit() {
        let mut buf = vec![0u32; 4];
        let st = state(&mut buf);
        let ring = IndexRing::new(0, 4, 2);
        // head 6 (slot 2, second pass), tail 2 (slot 2, third pass): full.
        st.write::<[u32; 2]>(0, [2, 6]);
        assert_eq!(ring.free_slot(&st), Ok(None));
        assert_eq!(ring.used(&st), Ok(4));
        assert_eq!(ring.ready_slot(&st), Ok(Some(2)));
        // tail 7, head 6: one entry, at slot 2; three free, tail at slot 3.
        st.write::<[u32; 2]>(0, [7, 6]);
        assert_eq!(ring.used(&st), Ok(1));
        assert_eq!(ring.free_slot(&st), Ok(Some(3)));
        // Advancing tail 7 wraps it to 0.
        ring.produce(&st).unwrap();
        assert_eq!(st.read::<u32>(0), 0);
    }

    #[test]
    fn an_out_of_range_index_is_refused() {
        let mut buf = vec![0u32; 4];
        let st = state(&mut buf);
        let ring = IndexRing::new(0, 4, 2);
        // A device that writes head 8 into a ring of four entries.
        st.write::<u32>(4, 8);
        let bad = Err(IndexError { value: 8, limit: 8 });
        assert_eq!(ring.ready_slot(&st), bad.map(|_: ()| None));
        assert_eq!(ring.free_slot(&st), bad.map(|_: ()| None));
        assert_eq!(ring.consume(&st), bad);
        assert_eq!(st.read::<u32>(4), 8, "a refused index is left as it was");
        st.write::<u32>(0, u32::MAX);
        assert_eq!(
            ring.produce(&st),
            Err(IndexError {
                value: u32::MAX,
                limit: 8
            })
        );
    }

    #[test]
    #[should_panic(expected = "overflows its indices")]
    fn a_ring_too_large_for_its_indices_is_refused() {
        IndexRing::new(0, 4, 31);
    }
}

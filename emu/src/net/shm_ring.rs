//! Rings of frames in memory shared with other processes: the mapping,
//! reached only through atomics, and the two ends of a single-producer
//! single-consumer ring in it, which the shared-memory wire ([`ShmWire`])
//! and the shared-memory fabric ([`ShmFabric`]) are made of.
//!
//! A ring is a producer index, a consumer index (each `u32`, free-running,
//! on a cache line of its own) and `slots` slots of [`SLOT_BYTES`]: a `u32`
//! length, 4 bytes of padding, the frame. The sender copies frames into
//! the slots from its producer index and publishes the index with a
//! release store; the receiver acquires it, copies the frames out and
//! publishes its consumer index. The other process is not trusted:
//! everything read from the mapping is read with atomic loads, so no
//! access is a data race whatever it does, and checked before use (a
//! length beyond a slot, an index more than a ring ahead).
//!
//! [`ShmWire`]: super::ShmWire
//! [`ShmFabric`]: super::ShmFabric

use std::fs::File;
use std::io;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use memmap2::MmapMut;

use super::Frame;

/// Bytes per slot: an 8-byte header, then the frame.
pub(super) const SLOT_BYTES: usize = 8 << 10;
/// The largest frame a slot holds.
pub(super) const MAX_FRAME: usize = SLOT_BYTES - 8;

/// A file mapped shared, whose bytes another process may change at any
/// time.
pub(super) struct Mapping {
    /// Kept for as long as `base` is used.
    _map: MmapMut,
    /// The mapping's first byte.
    base: NonNull<u8>,
    len: usize,
}

impl Mapping {
    /// Maps all of `file`, which must be `len` bytes long.
    pub(super) fn new(file: &File, len: usize) -> io::Result<Mapping> {
        // SAFETY: the mapping is shared with other processes that may
        // change any byte at any time; it is only ever reached through
        // atomics (`u32_at`, `u64_at`, `words`) at `base`, never through
        // references to plain data, so no access races.
        let mut map = unsafe { MmapMut::map_mut(file)? };
        if map.len() != len {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("a shared-memory file of {} bytes, not {len}", map.len()),
            ));
        }
        let base = NonNull::new(map.as_mut_ptr()).expect("a mapping is never at 0");
        Ok(Mapping {
            _map: map,
            base,
            len,
        })
    }

    /// The `u32` at byte `off`.
    pub(super) fn u32_at(&self, off: usize) -> &AtomicU32 {
        assert!(off % 4 == 0 && off + 4 <= self.len);
        // SAFETY: in bounds and aligned (the mapping is page-aligned);
        // the bytes are only ever accessed atomically (see `new`), and
        // the reference lives no longer than the mapping (`&self`).
        unsafe { AtomicU32::from_ptr(self.base.as_ptr().add(off).cast()) }
    }

    /// The `u64` at byte `off`.
    pub(super) fn u64_at(&self, off: usize) -> &AtomicU64 {
        assert!(off % 8 == 0 && off + 8 <= self.len);
        // SAFETY: as in `u32_at`.
        unsafe { AtomicU64::from_ptr(self.base.as_ptr().add(off).cast()) }
    }

    /// `n` words from byte `off`.
    fn words(&self, off: usize, n: usize) -> &[AtomicU64] {
        assert!(off % 8 == 0 && off + 8 * n <= self.len);
        // SAFETY: in bounds and aligned; the bytes are only ever accessed
        // atomically (see `new`); the slice lives no longer than `&self`.
        unsafe { std::slice::from_raw_parts(self.base.as_ptr().add(off).cast(), n) }
    }
}

// SAFETY: `base` points into the mapping the value owns, which no other
// object of this process reaches except through it, and every access
// through it is atomic: it may move to another thread.
unsafe impl Send for Mapping {}

/// Where a ring lies in a mapping.
#[derive(Debug, Clone, Copy)]
pub(super) struct Ring {
    /// Byte offset of the producer index.
    pub producer: usize,
    /// Byte offset of the consumer index.
    pub consumer: usize,
    /// Byte offset of slot 0.
    pub slots_at: usize,
    /// Number of slots.
    pub slots: u32,
}

impl Ring {
    fn slot_at(&self, i: u32) -> usize {
        self.slots_at + (i % self.slots) as usize * SLOT_BYTES
    }
}

/// The sending end of a ring.
#[derive(Debug)]
pub(super) struct Tx {
    ring: Ring,
    /// Our producer index.
    pi: u32,
}

impl Tx {
    /// The sending end of `ring`, going on from its producer index (a
    /// sender before us may have left frames the receiver has yet to
    /// take).
    pub(super) fn new(m: &Mapping, ring: Ring) -> Tx {
        let pi = m.u32_at(ring.producer).load(Ordering::Acquire);
        Tx { ring, pi }
    }

    /// Copies `frames` into the ring and publishes them; returns how many
    /// found no room (a full ring, or longer than a slot), which are lost
    /// as on a congested link.
    pub(super) fn send<'a>(&mut self, m: &Mapping, frames: impl Iterator<Item = &'a Frame>) -> u64 {
        let mut room = self.room(m);
        let mut dropped = 0;
        for f in frames {
            if room == 0 || !self.push(m, f) {
                dropped += 1;
                continue;
            }
            room -= 1;
        }
        self.publish(m);
        dropped
    }

    /// Free slots, as far as the receiver's index says (none if it says
    /// something impossible).
    pub(super) fn room(&self, m: &Mapping) -> u32 {
        let ci = m.u32_at(self.ring.consumer).load(Ordering::Acquire);
        self.ring.slots.saturating_sub(self.pi.wrapping_sub(ci))
    }

    /// Copies `frame` into the next slot, which the caller knows is free
    /// ([`Tx::room`]), unpublished; `false` if it is longer than a slot.
    pub(super) fn push(&mut self, m: &Mapping, frame: &[u8]) -> bool {
        if frame.len() > MAX_FRAME {
            return false;
        }
        self.put(m, frame);
        self.pi = self.pi.wrapping_add(1);
        true
    }

    /// Lets the receiver see the frames pushed.
    pub(super) fn publish(&self, m: &Mapping) {
        // The slots are written before the receiver sees the index.
        m.u32_at(self.ring.producer)
            .store(self.pi, Ordering::Release);
    }

    /// Copies `frame` into the slot at our producer index, a word at a
    /// time.
    fn put(&self, m: &Mapping, frame: &[u8]) {
        let at = self.ring.slot_at(self.pi);
        m.u32_at(at).store(frame.len() as u32, Ordering::Relaxed);
        let words = m.words(at + 8, frame.len().div_ceil(8));
        let mut chunks = frame.chunks_exact(8);
        for (w, c) in words.iter().zip(&mut chunks) {
            let c: [u8; 8] = c.try_into().expect("chunks of 8");
            w.store(u64::from_ne_bytes(c), Ordering::Relaxed);
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut c = [0u8; 8];
            c[..rest.len()].copy_from_slice(rest);
            words[words.len() - 1].store(u64::from_ne_bytes(c), Ordering::Relaxed);
        }
    }

    /// Sets our producer index, as a sender that lost track would.
    #[cfg(test)]
    pub(super) fn skip(&mut self, n: u32) {
        self.pi = self.pi.wrapping_add(n);
    }
}

/// The receiving end of a ring.
#[derive(Debug)]
pub(super) struct Rx {
    ring: Ring,
    /// Our consumer index.
    ci: u32,
}

/// What [`Rx::recv`] found.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Received {
    /// Frames moved out.
    pub got: usize,
    /// Malformed entries or indices, skipped.
    pub bad: u64,
}

impl Rx {
    /// The receiving end of `ring`, taking frames from its consumer index
    /// (frames already queued to us are received).
    pub(super) fn new(m: &Mapping, ring: Ring) -> Rx {
        let ci = m.u32_at(ring.consumer).load(Ordering::Acquire);
        Rx { ring, ci }
    }

    /// Frames waiting, as far as the index says (`None`: an index the
    /// sender broke).
    pub(super) fn pending(&self, m: &Mapping) -> Option<u32> {
        let pi = m.u32_at(self.ring.producer).load(Ordering::Acquire);
        let n = pi.wrapping_sub(self.ci);
        (n <= self.ring.slots).then_some(n)
    }

    /// Moves up to `max` frames into `out`, in buffers from `pool`.
    pub(super) fn recv(
        &mut self,
        m: &Mapping,
        out: &mut Vec<Frame>,
        max: usize,
        pool: &mut Vec<Frame>,
    ) -> Received {
        let mut r = Received::default();
        let Some(n) = self.pending(m) else {
            // An index more than a ring ahead: nothing behind it can be
            // trusted. Skip to it.
            r.bad += 1;
            self.ci = m.u32_at(self.ring.producer).load(Ordering::Acquire);
            m.u32_at(self.ring.consumer)
                .store(self.ci, Ordering::Release);
            return r;
        };
        for _ in 0..(n as usize).min(max) {
            let mut f = pool.pop().unwrap_or_default();
            if self.take(m, &mut f) {
                out.push(f);
                r.got += 1;
            } else {
                r.bad += 1;
                pool.push(f);
            }
            self.ci = self.ci.wrapping_add(1);
        }
        // The slots are read before the sender may reuse them.
        m.u32_at(self.ring.consumer)
            .store(self.ci, Ordering::Release);
        r
    }

    /// Copies the frame at our consumer index into `out`, a word at a
    /// time; `false` if its length is impossible.
    fn take(&self, m: &Mapping, out: &mut Frame) -> bool {
        let at = self.ring.slot_at(self.ci);
        let len = m.u32_at(at).load(Ordering::Relaxed) as usize;
        if len > MAX_FRAME {
            return false;
        }
        let words = m.words(at + 8, len.div_ceil(8));
        out.clear();
        out.resize(words.len() * 8, 0);
        for (c, w) in out.chunks_exact_mut(8).zip(words) {
            c.copy_from_slice(&w.load(Ordering::Relaxed).to_ne_bytes());
        }
        out.truncate(len);
        true
    }
}

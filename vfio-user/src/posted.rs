//! The posted-write queue: doorbell writes from a client's threads to the
//! server's device through shared memory, with no message and no system
//! call while the device is awake.
//!
//! On PCIe a doorbell is a posted write: the CPU does not wait for it, and
//! the device sees every one, in order. A page of the doorbell BAR mapped
//! into the client would lose that: the device can only look at the page,
//! and two writes to one doorbell between two looks leave one value (two
//! CQs armed through one page, one arm lost). So the server gives the
//! client a queue instead, a device-specific region it maps: each
//! doorbell write is an entry (its BAR offset and value), the device takes
//! every entry in order, and an eventfd (the region's ioeventfd) wakes it
//! when it sleeps.
//!
//! The queue is Vyukov's bounded multi-producer queue, one consumer:
//! slot `i` has a sequence number; a producer claims position `p` by
//! advancing `tail` from `p` when slot `p % N` says `p`, fills it, and
//! publishes `p + 1`; the consumer takes position `h` when its slot says
//! `h + 1`, and frees it for the next pass with `h + N`.
//!
//! Layout (native byte order; [`QUEUE_BYTES`] bytes, the server's memfd
//! sealed against resizing, so that no mapping can fault):
//!
//! | Offset | Field |
//! | --- | --- |
//! | 0 | magic `RNICPWQ1` |
//! | 8 | slots (`u32`): [`SLOTS`] |
//! | 64 | `tail`: the next position a producer claims (`u64`) |
//! | 128 | `asleep`: the consumer may sleep; a producer kicks (`u32`) |
//! | 4096 + 32 · i | slot i: `seq` (`u64`), BAR offset (`u64`), value (`u64`), 8 reserved |
//!
//! The client is not trusted: the consumer keeps its own head, reads
//! everything with atomic loads, and checks nothing else here; the offset
//! and value are the device's to check, as any doorbell write's. A client
//! that corrupts the queue stalls its own device, no other.

use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU32, AtomicU64, Ordering};

use memmap2::{MmapOptions, MmapRaw};

use crate::fd::{eventfd, sealed_memfd};

const MAGIC: u64 = u64::from_le_bytes(*b"RNICPWQ1");
/// Slots in the queue.
pub const SLOTS: u32 = 256;
const SLOT_BYTES: usize = 32;
const HEADER_BYTES: usize = 4096;
/// Bytes of the queue's memory.
pub const QUEUE_BYTES: usize = HEADER_BYTES + SLOTS as usize * SLOT_BYTES;

const SLOTS_AT: usize = 8;
const TAIL_AT: usize = 64;
const ASLEEP_AT: usize = 128;
const fn slot_at(i: u32) -> usize {
    HEADER_BYTES + i as usize * SLOT_BYTES
}

/// A shared mapping of the queue and the typed access to it.
struct Mem {
    map: MmapRaw,
}

impl Mem {
    fn base(&self) -> NonNull<u8> {
        NonNull::new(self.map.as_mut_ptr()).expect("mmap never returns null")
    }

    fn u64_at(&self, off: usize) -> &AtomicU64 {
        debug_assert!(off % 8 == 0 && off + 8 <= QUEUE_BYTES);
        // SAFETY: `off` is 8-byte aligned inside the mapping (every caller
        // passes a constant or a slot offset), which lives as long as
        // `self`; the other process also accesses it only atomically.
        unsafe { AtomicU64::from_ptr(self.base().as_ptr().add(off).cast()) }
    }

    fn u32_at(&self, off: usize) -> &AtomicU32 {
        debug_assert!(off % 4 == 0 && off + 4 <= QUEUE_BYTES);
        // SAFETY: as in `u64_at`.
        unsafe { AtomicU32::from_ptr(self.base().as_ptr().add(off).cast()) }
    }
}

fn signal(fd: RawFd) {
    let one = 1u64;
    // SAFETY: writes 8 bytes from `one` to an eventfd; a full counter
    // (EAGAIN) still leaves it readable, which is all a kick needs.
    unsafe { libc::write(fd, (&one as *const u64).cast(), 8) };
}

/// The server's end: it creates the queue, hands out its file and kick
/// eventfd, and takes the entries.
///
/// One thread pops at a time (the device's step); `pending`, `nap` and
/// `wake` may be called from any.
pub struct Consumer {
    mem: Mem,
    file: File,
    kick: OwnedFd,
    /// The next position to take, the consumer's own (never read from
    /// the shared memory).
    head: AtomicU64,
}

impl std::fmt::Debug for Consumer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Consumer")
            .field("head", &self.head.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

impl Consumer {
    /// A fresh, empty queue in a memfd sealed against resizing.
    pub fn new() -> std::io::Result<Consumer> {
        let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
        let file = sealed_memfd(c"rnic-posted-writes", QUEUE_BYTES as u64, seals)?;
        let map = MmapOptions::new().len(QUEUE_BYTES).map_raw(&file)?;
        let mem = Mem { map };
        for i in 0..SLOTS {
            mem.u64_at(slot_at(i))
                .store(u64::from(i), Ordering::Relaxed);
        }
        mem.u32_at(SLOTS_AT).store(SLOTS, Ordering::Relaxed);
        // The magic last: a producer that sees it sees the slots.
        mem.u64_at(0).store(MAGIC, Ordering::Release);
        Ok(Consumer {
            mem,
            file,
            kick: eventfd()?,
            head: AtomicU64::new(0),
        })
    }

    /// The file the client maps (a region's `mmap` file, offset 0).
    pub fn file(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    /// The eventfd a producer signals to wake the consumer (the region's
    /// ioeventfd); readable after a kick.
    pub fn kick_fd(&self) -> RawFd {
        self.kick.as_raw_fd()
    }

    /// Whether the entry at `head` is published, and its slot.
    fn ready(&self, head: u64) -> (bool, usize) {
        let at = slot_at((head % u64::from(SLOTS)) as u32);
        // Acquire: the entry's words were written before its sequence.
        (self.mem.u64_at(at).load(Ordering::Acquire) == head + 1, at)
    }

    /// Whether an entry waits.
    pub fn pending(&self) -> bool {
        self.ready(self.head.load(Ordering::Relaxed)).0
    }

    /// Takes the next entry: a BAR offset and the value written there.
    /// One caller at a time.
    pub fn pop(&self) -> Option<(u64, u64)> {
        let head = self.head.load(Ordering::Relaxed);
        let (ready, at) = self.ready(head);
        if !ready {
            return None;
        }
        let off = self.mem.u64_at(at + 8).load(Ordering::Relaxed);
        let value = self.mem.u64_at(at + 16).load(Ordering::Relaxed);
        // Release: the words are read before the slot is handed back.
        self.mem
            .u64_at(at)
            .store(head + u64::from(SLOTS), Ordering::Release);
        self.head.store(head + 1, Ordering::Relaxed);
        Some((off, value))
    }

    /// Says the consumer is about to sleep: returns whether it must not,
    /// an entry having come (then it stays awake).
    pub fn nap(&self) -> bool {
        let asleep = self.mem.u32_at(ASLEEP_AT);
        asleep.store(1, Ordering::Relaxed);
        // Pairs with the producer's fence between publishing and reading
        // `asleep`: either it sees us asleep and kicks, or we see its entry.
        fence(Ordering::SeqCst);
        if self.pending() {
            asleep.store(0, Ordering::Relaxed);
            return true;
        }
        false
    }

    /// The consumer is awake: producers need not kick, and the kicks so
    /// far are taken.
    pub fn wake(&self) {
        self.mem.u32_at(ASLEEP_AT).store(0, Ordering::Relaxed);
        let mut n = 0u64;
        // SAFETY: reads 8 bytes into `n` from our eventfd; an empty one
        // fails with EAGAIN and changes nothing.
        unsafe { libc::read(self.kick.as_raw_fd(), (&mut n as *mut u64).cast(), 8) };
    }
}

/// The client's end: posts doorbell writes from any thread.
pub struct Producer {
    mem: Mem,
    kick: OwnedFd,
    kicks: AtomicU64,
}

impl std::fmt::Debug for Producer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Producer")
            .field("kicks", &self.kicks)
            .finish_non_exhaustive()
    }
}

impl Producer {
    /// Maps the queue from `file` (at `offset`) and kicks through `kick`;
    /// refuses memory that does not hold a queue.
    pub fn new(file: &File, offset: u64, kick: OwnedFd) -> std::io::Result<Producer> {
        let map = MmapOptions::new()
            .offset(offset)
            .len(QUEUE_BYTES)
            .map_raw(file)?;
        let mem = Mem { map };
        let magic = mem.u64_at(0).load(Ordering::Acquire);
        let slots = mem.u32_at(SLOTS_AT).load(Ordering::Relaxed);
        if magic != MAGIC || slots != SLOTS {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                "not a posted-write queue of this version",
            ));
        }
        Ok(Producer {
            mem,
            kick,
            kicks: AtomicU64::new(0),
        })
    }

    /// Posts a write of `value` at BAR offset `off`. Returns at once
    /// unless the queue is full, when it waits for the consumer (woken).
    pub fn post(&self, off: u64, value: u64) {
        let tail = self.mem.u64_at(TAIL_AT);
        let mut pos = tail.load(Ordering::Relaxed);
        loop {
            let at = slot_at((pos % u64::from(SLOTS)) as u32);
            let seq = self.mem.u64_at(at).load(Ordering::Acquire);
            if seq == pos {
                match tail.compare_exchange_weak(pos, pos + 1, Ordering::Relaxed, Ordering::Relaxed)
                {
                    Ok(_) => {
                        self.mem.u64_at(at + 8).store(off, Ordering::Relaxed);
                        self.mem.u64_at(at + 16).store(value, Ordering::Relaxed);
                        // Release: the words, and every store this thread
                        // made to DMA memory before the doorbell, are seen
                        // by a consumer that sees the sequence.
                        self.mem.u64_at(at).store(pos + 1, Ordering::Release);
                        break;
                    }
                    Err(now) => pos = now,
                }
            } else if seq < pos {
                // Full: the consumer has not freed this slot from the last
                // pass. It may be asleep.
                self.kick();
                std::thread::yield_now();
                pos = tail.load(Ordering::Relaxed);
            } else {
                pos = tail.load(Ordering::Relaxed);
            }
        }
        // Pairs with the consumer's fence in `nap`.
        fence(Ordering::SeqCst);
        if self.mem.u32_at(ASLEEP_AT).load(Ordering::Relaxed) != 0 {
            self.kick();
        }
    }

    fn kick(&self) {
        self.kicks.fetch_add(1, Ordering::Relaxed);
        signal(self.kick.as_raw_fd());
    }

    /// Writes posted so far, by every producer of the queue.
    pub fn posted(&self) -> u64 {
        self.mem.u64_at(TAIL_AT).load(Ordering::Relaxed)
    }

    /// Times a post of this producer woke the consumer (a system call
    /// each).
    pub fn kicks(&self) -> u64 {
        self.kicks.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use std::os::fd::FromRawFd;

    use super::*;

    fn pair() -> (Consumer, Producer) {
        let c = Consumer::new().unwrap();
        // SAFETY: dup of descriptors we own.
        let file = unsafe { File::from_raw_fd(libc::dup(c.file())) };
        // SAFETY: as above.
        let kick = unsafe { OwnedFd::from_raw_fd(libc::dup(c.kick_fd())) };
        let p = Producer::new(&file, 0, kick).unwrap();
        (c, p)
    }

    fn readable(fd: RawFd) -> bool {
        let mut p = libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd, no wait.
        unsafe { libc::poll(&mut p, 1, 0) == 1 }
    }

    #[test]
    fn every_write_arrives_in_order_across_many_passes() {
        let (c, p) = pair();
        let n = 3 * SLOTS as u64 + 7;
        let mut got = Vec::new();
        for i in 0..n {
            p.post(i * 8, !i);
            // The queue fills up to a fifth of the posts, over several
            // passes of its slots.
            if i % 5 != 0 {
                got.push(c.pop().unwrap());
            }
        }
        while let Some(e) = c.pop() {
            got.push(e);
        }
        let want: Vec<_> = (0..n).map(|i| (i * 8, !i)).collect();
        assert_eq!(got, want);
        assert_eq!(p.kicks(), 0, "an awake consumer is never kicked");
    }

    #[test]
    fn a_sleeping_consumer_is_kicked_once_per_sleep_and_a_late_entry_keeps_it_awake() {
        let (c, p) = pair();
        assert!(!c.nap(), "nothing queued: it may sleep");
        p.post(0x10, 1);
        assert_eq!(p.kicks(), 1);
        assert!(readable(c.kick_fd()));
        c.wake();
        assert!(!readable(c.kick_fd()));
        p.post(0x10, 2);
        assert_eq!(p.kicks(), 1, "awake: no kick");
        assert!(c.nap(), "an entry waits: it must not sleep");
        assert_eq!(c.pop(), Some((0x10, 1)));
        assert_eq!(c.pop(), Some((0x10, 2)));
        assert_eq!(c.pop(), None);
    }

    #[test]
    fn producers_on_many_threads_lose_nothing() {
        let (c, p) = pair();
        let p = std::sync::Arc::new(p);
        let threads = 4u64;
        let each = 10_000u64;
        let hs: Vec<_> = (0..threads)
            .map(|t| {
                let p = p.clone();
                std::thread::spawn(move || {
                    for i in 0..each {
                        p.post(t, i);
                    }
                })
            })
            .collect();
        let mut next = vec![0u64; threads as usize];
        let mut seen = 0;
        while seen < threads * each {
            match c.pop() {
                Some((t, i)) => {
                    assert_eq!(i, next[t as usize], "thread {t}'s writes in order");
                    next[t as usize] += 1;
                    seen += 1;
                }
                None => {
                    c.wake();
                    std::hint::spin_loop();
                }
            }
        }
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(c.pop(), None);
    }

    #[test]
    fn memory_that_is_not_a_queue_is_refused() {
        let c = Consumer::new().unwrap();
        // SAFETY: dup of descriptors we own.
        let file = unsafe { File::from_raw_fd(libc::dup(c.file())) };
        c.mem.u64_at(0).store(0, Ordering::Relaxed);
        // SAFETY: as above.
        let kick = unsafe { OwnedFd::from_raw_fd(libc::dup(c.kick_fd())) };
        assert!(Producer::new(&file, 0, kick).is_err());
        assert_eq!(
            file.set_len(1).map_err(|e| e.raw_os_error()),
            Err(Some(libc::EPERM))
        );
    }
}

//! A wire in shared memory between two processes on one host: a file
//! (in `/dev/shm`, say) mapped by both, holding one ring of frames each
//! way, in the manner of DPDK's memif.
//!
//! Each ring is single-producer single-consumer: the sender copies a frame
//! into the slot at its producer index and publishes the index with a
//! release store; the receiver acquires the index, copies the frames out
//! and publishes its consumer index. No lock and no system call: the
//! device looks at the ring on each of its steps ([`Wire::poll`]), so
//! while both sides are busy a frame costs two copies and two atomic
//! stores. A thread that waits on the NIC (`EmuDevice::poll` in the
//! application's wait loop, which the driver's waits and CQ polls call)
//! looks on each of its steps, which makes the application's thread a
//! poll-mode driver and the whole data path one thread per process. A
//! device worker with nothing else to do looks every 50 µs: nothing can
//! wake it when a frame comes (its statistics count these waits as late).
//!
//! The other process is not trusted: everything read from the mapping
//! (indices, lengths, bytes) is read with atomic loads, so no access is a
//! data race whatever the peer does, and checked before use. A slot
//! length beyond a slot or a producer index more than a ring ahead is
//! counted ([`ShmWire::bad`]) and the frames it claims are skipped.
//!
//! Layout (all little-endian, the file is [`FILE_LEN`] bytes):
//!
//! | Offset | Field |
//! | --- | --- |
//! | 0 | magic `RNICSHM1` (written last by the creator) |
//! | 8 | slots per ring (`u32`), 12: bytes per slot (`u32`) |
//! | 64 · (1 + 2r) | ring r's producer index (`u32`, free-running) |
//! | 64 · (2 + 2r) | ring r's consumer index |
//! | 320 + 64 · s | side s is attached (`u32`, 1 or 0) |
//! | 4096 + r · ring bytes | ring r's slots: `u32` length, 4 bytes pad, frame |
//!
//! The creator (side 0) sends on ring 0 and receives on ring 1; the side
//! that opens the file does the opposite. The link is up while the other
//! side is attached.

use std::fs::OpenOptions;
use std::io;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::shm_ring::{Mapping, Ring, Rx, Tx, SLOT_BYTES};
use super::{Frame, Waker, Wire};

const MAGIC: u64 = u64::from_le_bytes(*b"RNICSHM1");
/// Slots per ring.
const SLOTS: u32 = 512;
const HEADER_BYTES: usize = 4096;
const RING_BYTES: usize = SLOTS as usize * SLOT_BYTES;
/// Length of the shared file.
const FILE_LEN: usize = HEADER_BYTES + 2 * RING_BYTES;

const SLOTS_AT: usize = 8;
const SLOT_BYTES_AT: usize = 12;
const fn attached_at(side: usize) -> usize {
    320 + 64 * side
}
const fn ring(r: usize) -> Ring {
    Ring {
        producer: 64 * (1 + 2 * r),
        consumer: 64 * (2 + 2 * r),
        slots_at: HEADER_BYTES + r * RING_BYTES,
        slots: SLOTS,
    }
}

/// Frame buffers the wire keeps at most, and keeps for receiving when the
/// NIC reclaims the others.
const POOL: usize = 1024;
const KEEP: usize = 64;

/// How long [`ShmWire::open`] waits for the creator to finish the header.
const OPEN_WAIT: Duration = Duration::from_secs(5);

/// One side of a shared-memory wire.
pub struct ShmWire {
    map: Mapping,
    side: usize,
    /// The ring we send on (ring `side`).
    tx: Tx,
    /// The ring we receive on.
    rx: Rx,
    waker: Option<Waker>,
    /// Buffers of frames sent, reused for frames received and handed back
    /// to the NIC ([`Wire::reclaim`]).
    pool: Vec<Frame>,
    dropped: u64,
    bad: u64,
}

impl std::fmt::Debug for ShmWire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShmWire")
            .field("side", &self.side)
            .field("tx", &self.tx)
            .field("rx", &self.rx)
            .finish_non_exhaustive()
    }
}

impl ShmWire {
    /// Creates (or truncates) the file at `path`, lays out two empty rings
    /// and attaches as side 0.
    pub fn create(path: impl AsRef<Path>) -> io::Result<ShmWire> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        file.set_len(FILE_LEN as u64)?;
        let map = Mapping::new(&file, FILE_LEN)?;
        map.u32_at(SLOTS_AT).store(SLOTS, Ordering::Relaxed);
        map.u32_at(SLOT_BYTES_AT)
            .store(SLOT_BYTES as u32, Ordering::Relaxed);
        map.u32_at(attached_at(0)).store(1, Ordering::Relaxed);
        // The header is complete before an opener can see the magic.
        map.u64_at(0).store(MAGIC, Ordering::Release);
        Ok(Self::attach(map, 0))
    }

    /// Opens the file another process made with [`ShmWire::create`] and
    /// attaches as side 1, waiting up to 5 s for its header.
    pub fn open(path: impl AsRef<Path>) -> io::Result<ShmWire> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        if file.metadata()?.len() != FILE_LEN as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("not a shared-memory wire: its length is not {FILE_LEN}"),
            ));
        }
        let map = Mapping::new(&file, FILE_LEN)?;
        let deadline = Instant::now() + OPEN_WAIT;
        while map.u64_at(0).load(Ordering::Acquire) != MAGIC {
            if Instant::now() > deadline {
                return Err(io::Error::new(
                    io::ErrorKind::TimedOut,
                    "the shared-memory wire's header was never completed",
                ));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        let geometry = (
            map.u32_at(SLOTS_AT).load(Ordering::Relaxed),
            map.u32_at(SLOT_BYTES_AT).load(Ordering::Relaxed),
        );
        if geometry != (SLOTS, SLOT_BYTES as u32) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!("shared-memory wire of {geometry:?} slots and bytes per slot"),
            ));
        }
        // Pick up where the rings are: frames already queued to us are
        // received, none of ours is pending.
        let w = Self::attach(map, 1);
        w.map.u32_at(attached_at(1)).store(1, Ordering::Release);
        Ok(w)
    }

    fn attach(map: Mapping, side: usize) -> ShmWire {
        ShmWire {
            tx: Tx::new(&map, ring(side)),
            rx: Rx::new(&map, ring(1 - side)),
            map,
            side,
            waker: None,
            pool: Vec::new(),
            dropped: 0,
            bad: 0,
        }
    }

    /// Frames dropped because the other side's ring was full.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Malformed ring entries or indices the other side wrote.
    pub fn bad(&self) -> u64 {
        self.bad
    }

    fn wake_if_pending(&self) {
        if self.rx.pending(&self.map) != Some(0) {
            if let Some(w) = &self.waker {
                w();
            }
        }
    }
}

impl Drop for ShmWire {
    fn drop(&mut self) {
        self.map
            .u32_at(attached_at(self.side))
            .store(0, Ordering::Release);
    }
}

impl Wire for ShmWire {
    fn send(&mut self, frames: &mut Vec<Frame>) {
        self.dropped += self.tx.send(&self.map, frames.iter());
        let room = POOL.saturating_sub(self.pool.len());
        self.pool.extend(frames.drain(..).take(room));
    }

    fn recv(&mut self, out: &mut Vec<Frame>, max: usize) -> usize {
        let r = self.rx.recv(&self.map, out, max, &mut self.pool);
        self.bad += r.bad;
        // More may have come: look again on the next step.
        self.wake_if_pending();
        r.got
    }

    fn set_waker(&mut self, waker: Waker) {
        self.waker = Some(waker);
    }

    /// Every buffer but a receive batch's worth.
    fn reclaim(&mut self, pool: &mut Vec<Frame>) {
        let keep = self.pool.len().min(KEEP);
        pool.extend(self.pool.drain(keep..));
    }

    /// Called on each step of the device: frames on the ring make the
    /// device receive.
    fn poll(&mut self, _now_ns: u64) {
        self.wake_if_pending();
    }

    /// No thread moves the frames and no descriptor tells of them: the
    /// device sees the other side's on each step it runs (a doorbell, a
    /// waiting thread's `EmuDevice::poll`), and an idle worker looks now
    /// and then.
    fn polled(&self) -> bool {
        true
    }

    fn link_up(&self) -> bool {
        self.map
            .u32_at(attached_at(1 - self.side))
            .load(Ordering::Acquire)
            == 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::shm_ring::MAX_FRAME;

    /// A file path, removed when dropped.
    struct TempPath(std::path::PathBuf);

    impl TempPath {
        fn new() -> Self {
            use std::sync::atomic::AtomicU32;
            static N: AtomicU32 = AtomicU32::new(0);
            let n = N.fetch_add(1, Ordering::Relaxed);
            let name = format!("rnic-shm-unit-{}-{n}", std::process::id());
            TempPath(std::env::temp_dir().join(name))
        }
    }

    impl Drop for TempPath {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.0);
        }
    }

    fn pair() -> (ShmWire, ShmWire, TempPath) {
        let p = TempPath::new();
        let a = ShmWire::create(&p.0).unwrap();
        let b = ShmWire::open(&p.0).unwrap();
        (a, b, p)
    }

    #[test]
    fn frames_cross_both_ways_in_order() {
        let (mut a, mut b, _p) = pair();
        assert!(a.link_up() && b.link_up());
        let frames: Vec<Frame> = (0..3u8).map(|i| vec![i; 60 + i as usize]).collect();
        a.send(&mut frames.clone());
        let mut got = Vec::new();
        assert_eq!(b.recv(&mut got, 64), 3);
        assert_eq!(got, frames);
        b.send(&mut vec![vec![9; MAX_FRAME]]);
        got.clear();
        assert_eq!(a.recv(&mut got, 64), 1);
        assert_eq!(got, [vec![9; MAX_FRAME]]);
        assert_eq!(a.recv(&mut got, 64), 0);
        drop(b);
        assert!(!a.link_up());
    }

    #[test]
    fn a_full_ring_drops_and_wraps() {
        let (mut a, mut b, _p) = pair();
        let mut v: Vec<Frame> = (0..SLOTS + 5).map(|i| i.to_le_bytes().to_vec()).collect();
        a.send(&mut v);
        assert_eq!(a.dropped(), 5);
        let mut got = Vec::new();
        assert_eq!(b.recv(&mut got, SLOTS as usize), SLOTS as usize);
        assert_eq!(got[SLOTS as usize - 1], (SLOTS - 1).to_le_bytes());
        // Around the ring several times, every frame in order.
        for round in 0..3 * SLOTS {
            a.send(&mut vec![round.to_le_bytes().to_vec()]);
            got.clear();
            assert_eq!(b.recv(&mut got, 8), 1);
            assert_eq!(got[0], round.to_le_bytes());
        }
    }

    #[test]
    fn a_bad_peer_is_counted_not_trusted() {
        let (mut a, mut b, _p) = pair();
        a.send(&mut vec![vec![1; 64], vec![2; 64]]);
        // The peer lies about a length and then about its index.
        a.map
            .u32_at(ring(0).slots_at)
            .store(u32::MAX, Ordering::Relaxed);
        let mut got = Vec::new();
        assert_eq!(b.recv(&mut got, 64), 1);
        assert_eq!((got[0][0], b.bad()), (2, 1));
        a.tx.skip(SLOTS + 1);
        a.send(&mut Vec::new());
        assert_eq!(b.recv(&mut got, 64), 0);
        assert_eq!(b.bad(), 2);
        // Back in step with whatever the index said.
        a.send(&mut vec![vec![3; 64]]);
        got.clear();
        assert_eq!(b.recv(&mut got, 64), 1);
        assert_eq!(got[0][0], 3);
    }

    #[test]
    fn a_file_of_another_kind_is_refused() {
        let p = TempPath::new();
        std::fs::write(&p.0, b"not a wire").unwrap();
        assert!(ShmWire::open(&p.0).is_err());
    }
}

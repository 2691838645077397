//! A shared-memory fabric: any number of NICs, in any processes of one
//! host, each reaching every other by MAC address, as ports of one
//! Ethernet switch do. MPI connects every rank with every other; a wire
//! between two NICs cannot carry that, and this fabric does without a
//! switch process or a system call per frame.
//!
//! Each member has an inbox: a file in the fabric's directory named by its
//! MAC address (12 hex digits), holding [`LANES`] rings of frames
//! ([`shm_ring`](super::shm_ring)), one per sender. A NIC that sends to a
//! MAC for the first time maps that member's inbox and claims a free lane
//! with a compare-and-swap of the lane's owner word; from then on its
//! frames to that member are copies into its own single-producer
//! single-consumer ring. Broadcast and multicast frames (ARP, neighbour
//! discovery) go to every member the directory lists. A frame to a MAC no
//! member has is dropped and counted, as a switch port with no such
//! station would lose it.
//!
//! Like [`ShmWire`](super::ShmWire) the fabric is polled: the device
//! looks at its lanes on each step, and the link is up from the moment the
//! NIC joins (its cable is in the switch), whoever else has joined.
//!
//! Members are not trusted: each inbox is read only through atomics and
//! every length and index checked ([`ShmFabric::bad`]). A member that
//! leaves marks its inbox left and removes it; senders that see the mark
//! let go of it and look the MAC up again. A member that died without
//! leaving is found out by its process ID when another NIC joins with its
//! MAC, and a lane whose sender died is claimed again by the next sender.
//!
//! Inbox layout (little-endian; [`FILE_LEN`] bytes, sparse):
//!
//! | Offset | Field |
//! | --- | --- |
//! | 0 | magic `RNICFAB1` (written last, before the file is renamed into place) |
//! | 8 | lanes (`u32`), 12: slots per lane, 16: bytes per slot |
//! | 20 | the member's process ID (`u32`) |
//! | 24 | joined (`u32`: 1 while on the fabric, 0 once left) |
//! | 28 | lanes ever claimed (`u32`, a high-water mark the member scans to) |
//! | 4096 + 192 · l | lane l's owner (`u64`: 0 free, else the sender's process ID · 2³² + its number in that process) |
//! | 4096 + 192 · l + 64 | lane l's producer index; + 128: its consumer index |
//! | [`CONTROL_BYTES`] + l · ring bytes | lane l's slots |

use std::collections::{HashMap, VecDeque};
use std::fs::{File, OpenOptions};
use std::io;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU32, Ordering};

use super::shm_ring::{Mapping, Ring, Rx, Tx, MAX_FRAME, SLOT_BYTES};
use super::{Frame, Waker, Wire};

const MAGIC: u64 = u64::from_le_bytes(*b"RNICFAB1");
/// Senders an inbox has room for.
pub const LANES: usize = 64;
/// Slots per lane.
const SLOTS: u32 = 128;
const RING_BYTES: usize = SLOTS as usize * SLOT_BYTES;
/// Bytes before the first lane's slots.
const CONTROL_BYTES: usize = 4096 + 192 * LANES;
/// Length of an inbox file.
pub const FILE_LEN: usize = CONTROL_BYTES + LANES * RING_BYTES;

const LANES_AT: usize = 8;
const SLOTS_AT: usize = 12;
const SLOT_BYTES_AT: usize = 16;
const PID_AT: usize = 20;
const JOINED_AT: usize = 24;
const CLAIMED_AT: usize = 28;
const fn owner_at(lane: usize) -> usize {
    4096 + 192 * lane
}
const fn lane(l: usize) -> Ring {
    Ring {
        producer: owner_at(l) + 64,
        consumer: owner_at(l) + 128,
        slots_at: CONTROL_BYTES + l * RING_BYTES,
        slots: SLOTS,
    }
}

/// Frame buffers kept at most, and kept for receiving when the NIC
/// reclaims the others (as [`ShmWire`](super::ShmWire)).
const POOL: usize = 1024;
const KEEP: usize = 64;

/// An inbox file's name: the MAC in hex.
fn file_name(mac: [u8; 6]) -> String {
    mac.iter().map(|b| format!("{b:02x}")).collect()
}

/// The MAC an inbox file's name stands for.
fn mac_of(name: &str) -> Option<[u8; 6]> {
    if name.len() != 12 {
        return None;
    }
    let mut mac = [0u8; 6];
    for (i, b) in mac.iter_mut().enumerate() {
        *b = u8::from_str_radix(name.get(2 * i..2 * i + 2)?, 16).ok()?;
    }
    Some(mac)
}

/// Whether process `pid` exists.
fn alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks that the process exists.
    pid > 0
        && (unsafe { libc::kill(pid, 0) } == 0
            || io::Error::last_os_error().raw_os_error() == Some(libc::EPERM))
}

/// Maps an inbox file and checks its header; `None` if it is not one.
fn map_inbox(file: &File) -> Option<Mapping> {
    if file.metadata().ok()?.len() != FILE_LEN as u64 {
        return None;
    }
    let m = Mapping::new(file, FILE_LEN).ok()?;
    let geometry = (
        m.u32_at(LANES_AT).load(Ordering::Relaxed),
        m.u32_at(SLOTS_AT).load(Ordering::Relaxed),
        m.u32_at(SLOT_BYTES_AT).load(Ordering::Relaxed),
    );
    let ok = m.u64_at(0).load(Ordering::Acquire) == MAGIC
        && geometry == (LANES as u32, SLOTS, SLOT_BYTES as u32);
    ok.then_some(m)
}

/// Frames a member holds for another whose lane is full, as a switch
/// port's buffer does, before it drops them.
const BACKLOG: usize = 4096;
/// How soon a member with frames held looks for room again.
const HOLD_RETRY_NS: u64 = 2_000;

/// Another member's inbox and our lane in it.
struct Peer {
    map: Mapping,
    lane: usize,
    tx: Tx,
    /// Frames waiting for room in the lane, oldest first.
    backlog: VecDeque<Frame>,
}

impl Peer {
    /// Moves what the lane has room for from the backlog into it.
    fn flush(&mut self, pool: &mut Vec<Frame>) {
        let room = self.tx.room(&self.map) as usize;
        for f in self.backlog.drain(..room.min(self.backlog.len())) {
            // Only frames that fit a slot are held back.
            self.tx.push(&self.map, &f);
            pool.push(f);
        }
        self.tx.publish(&self.map);
    }
}

/// What a fabric member has counted.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FabricStats {
    /// Frames sent into members' inboxes (a flooded frame once per member).
    pub sent: u64,
    /// Frames received from the inbox.
    pub received: u64,
    /// Frames that waited for room in a full lane.
    pub held: u64,
    /// Frames lost to a full lane and a full backlog, or longer than a
    /// slot.
    pub dropped: u64,
    /// Unicast frames to a MAC no member has, or to a member with no free
    /// lane.
    pub unreachable: u64,
    /// Malformed ring entries or indices senders wrote.
    pub bad: u64,
}

/// One NIC's port on a shared-memory fabric.
pub struct ShmFabric {
    dir: PathBuf,
    mac: [u8; 6],
    /// Our inbox, and which file it is (to remove it only if it is still
    /// ours).
    inbox: Mapping,
    inbox_id: (u64, u64),
    /// The receiving end of every lane.
    lanes: Vec<Rx>,
    /// The lane to look at first on the next receive, so that every
    /// sender gets its turn.
    next_lane: usize,
    /// Our owner word in other members' lanes.
    owner: u64,
    peers: HashMap<[u8; 6], Peer>,
    waker: Option<Waker>,
    pool: Vec<Frame>,
    stats: FabricStats,
    /// The time of the last [`Wire::poll`].
    now_ns: u64,
}

impl std::fmt::Debug for ShmFabric {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ShmFabric")
            .field("dir", &self.dir)
            .field("mac", &file_name(self.mac))
            .field("peers", &self.peers.len())
            .field("stats", &self.stats)
            .finish_non_exhaustive()
    }
}

impl ShmFabric {
    /// Joins the fabric in directory `dir` (made if missing) as the
    /// station `mac`. Fails with `AddrInUse` if a live member has that
    /// MAC; the inbox of one that died is taken over.
    pub fn join(dir: impl AsRef<Path>, mac: [u8; 6]) -> io::Result<ShmFabric> {
        static JOINS: AtomicU32 = AtomicU32::new(0);
        let dir = dir.as_ref().to_path_buf();
        std::fs::create_dir_all(&dir)?;
        let path = dir.join(file_name(mac));
        if let Ok(old) = OpenOptions::new().read(true).write(true).open(&path) {
            if let Some(m) = map_inbox(&old) {
                let pid = m.u32_at(PID_AT).load(Ordering::Relaxed);
                if m.u32_at(JOINED_AT).load(Ordering::Acquire) == 1 && alive(pid) {
                    return Err(io::Error::new(
                        io::ErrorKind::AddrInUse,
                        format!(
                            "{} is on the fabric already (process {pid})",
                            path.display()
                        ),
                    ));
                }
                // Its senders let go of it.
                m.u32_at(JOINED_AT).store(0, Ordering::Release);
            }
        }
        let n = JOINS.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let tmp = dir.join(format!(".join-{pid}-{n}"));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&tmp)?;
        let made = (|| {
            file.set_len(FILE_LEN as u64)?;
            let m = Mapping::new(&file, FILE_LEN)?;
            m.u32_at(LANES_AT).store(LANES as u32, Ordering::Relaxed);
            m.u32_at(SLOTS_AT).store(SLOTS, Ordering::Relaxed);
            m.u32_at(SLOT_BYTES_AT)
                .store(SLOT_BYTES as u32, Ordering::Relaxed);
            m.u32_at(PID_AT).store(pid, Ordering::Relaxed);
            m.u32_at(JOINED_AT).store(1, Ordering::Relaxed);
            // The header is complete before any sender can see the magic.
            m.u64_at(0).store(MAGIC, Ordering::Release);
            std::fs::rename(&tmp, &path)?;
            Ok::<_, io::Error>(m)
        })();
        let inbox = match made {
            Ok(m) => m,
            Err(e) => {
                let _ = std::fs::remove_file(&tmp);
                return Err(e);
            }
        };
        let meta = file.metadata()?;
        let lanes = (0..LANES).map(|l| Rx::new(&inbox, lane(l))).collect();
        Ok(ShmFabric {
            dir,
            mac,
            inbox,
            inbox_id: (meta.dev(), meta.ino()),
            lanes,
            next_lane: 0,
            owner: (u64::from(pid) << 32) | u64::from(n + 1),
            peers: HashMap::new(),
            waker: None,
            pool: Vec::new(),
            stats: FabricStats::default(),
            now_ns: 0,
        })
    }

    /// What this member has counted.
    pub fn stats(&self) -> FabricStats {
        self.stats
    }

    /// Malformed ring entries or indices senders wrote.
    pub fn bad(&self) -> u64 {
        self.stats.bad
    }

    /// The members the directory lists, other than us.
    fn members(&self) -> Vec<[u8; 6]> {
        let Ok(dir) = std::fs::read_dir(&self.dir) else {
            return Vec::new();
        };
        dir.filter_map(|e| mac_of(e.ok()?.file_name().to_str()?))
            .filter(|m| *m != self.mac)
            .collect()
    }

    /// Makes sure we have a lane into `mac`'s inbox, mapping it and
    /// claiming a lane the first time; `false` if no member has that MAC
    /// or its inbox has no free lane.
    fn reach(&mut self, mac: [u8; 6]) -> bool {
        let gone = self
            .peers
            .get(&mac)
            .is_some_and(|p| p.map.u32_at(JOINED_AT).load(Ordering::Acquire) != 1);
        if gone {
            // It left (or died and was replaced): look it up again.
            self.release(mac);
        }
        if !self.peers.contains_key(&mac) {
            let Some(p) = self.connect(mac) else {
                return false;
            };
            self.peers.insert(mac, p);
        }
        true
    }

    fn connect(&self, mac: [u8; 6]) -> Option<Peer> {
        let path = self.dir.join(file_name(mac));
        let file = OpenOptions::new().read(true).write(true).open(path).ok()?;
        let map = map_inbox(&file)?;
        if map.u32_at(JOINED_AT).load(Ordering::Acquire) != 1 {
            return None;
        }
        for l in 0..LANES {
            let word = map.u64_at(owner_at(l));
            let cur = word.load(Ordering::Acquire);
            if cur != 0 && alive((cur >> 32) as u32) {
                continue;
            }
            if word
                .compare_exchange(cur, self.owner, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                // The member scans up to here from now on.
                map.u32_at(CLAIMED_AT)
                    .fetch_max(l as u32 + 1, Ordering::AcqRel);
                let tx = Tx::new(&map, lane(l));
                return Some(Peer {
                    map,
                    lane: l,
                    tx,
                    backlog: VecDeque::new(),
                });
            }
        }
        None
    }

    /// Gives our lane in `mac`'s inbox back.
    fn release(&mut self, mac: [u8; 6]) {
        if let Some(p) = self.peers.remove(&mac) {
            let _ = p.map.u64_at(owner_at(p.lane)).compare_exchange(
                self.owner,
                0,
                Ordering::AcqRel,
                Ordering::Relaxed,
            );
        }
    }

    /// Sends `f` to `mac`'s inbox, or holds it while its lane is full;
    /// `false` if no member has that MAC.
    fn send_to(&mut self, mac: [u8; 6], f: &Frame) -> bool {
        if f.len() > MAX_FRAME {
            self.stats.dropped += 1;
            return true;
        }
        if !self.reach(mac) {
            return false;
        }
        let mut spare = self.pool.pop();
        let p = self.peers.get_mut(&mac).expect("reached");
        let stats = &mut self.stats;
        if p.backlog.is_empty() && p.tx.room(&p.map) > 0 {
            p.tx.push(&p.map, f);
            p.tx.publish(&p.map);
            stats.sent += 1;
        } else if p.backlog.len() < BACKLOG {
            let mut b = spare.take().unwrap_or_default();
            b.clear();
            b.extend_from_slice(f);
            p.backlog.push_back(b);
            stats.held += 1;
        } else {
            stats.dropped += 1;
        }
        self.pool.extend(spare);
        true
    }

    /// Moves held frames into lanes that have room again.
    fn flush(&mut self) {
        for p in self.peers.values_mut() {
            if !p.backlog.is_empty() {
                let before = p.backlog.len();
                p.flush(&mut self.pool);
                self.stats.sent += (before - p.backlog.len()) as u64;
            }
        }
    }

    fn holding(&self) -> bool {
        self.peers.values().any(|p| !p.backlog.is_empty())
    }

    fn pending(&self) -> bool {
        let claimed = self.claimed();
        self.lanes[..claimed]
            .iter()
            .any(|rx| rx.pending(&self.inbox) != Some(0))
    }

    fn claimed(&self) -> usize {
        (self.inbox.u32_at(CLAIMED_AT).load(Ordering::Acquire) as usize).min(LANES)
    }

    fn wake_if_pending(&self) {
        if self.pending() {
            if let Some(w) = &self.waker {
                w();
            }
        }
    }
}

impl Drop for ShmFabric {
    fn drop(&mut self) {
        let macs: Vec<_> = self.peers.keys().copied().collect();
        for mac in macs {
            self.release(mac);
        }
        // Senders let go of the inbox; the file goes if it is still ours.
        self.inbox.u32_at(JOINED_AT).store(0, Ordering::Release);
        let path = self.dir.join(file_name(self.mac));
        if std::fs::metadata(&path).is_ok_and(|m| (m.dev(), m.ino()) == self.inbox_id) {
            let _ = std::fs::remove_file(path);
        }
    }
}

impl Wire for ShmFabric {
    fn send(&mut self, frames: &mut Vec<Frame>) {
        self.flush();
        let mut out = std::mem::take(frames);
        for f in &out {
            let Some(dst) = f.get(..6).and_then(|d| <[u8; 6]>::try_from(d).ok()) else {
                self.stats.dropped += 1;
                continue;
            };
            if dst[0] & 1 == 1 {
                // Broadcast or multicast: every member.
                for m in self.members() {
                    self.send_to(m, f);
                }
            } else if !self.send_to(dst, f) {
                self.stats.unreachable += 1;
            }
        }
        let room = POOL.saturating_sub(self.pool.len());
        self.pool.extend(out.drain(..).take(room));
        *frames = out;
    }

    fn recv(&mut self, out: &mut Vec<Frame>, max: usize) -> usize {
        let claimed = self.claimed();
        let mut got = 0;
        for i in 0..claimed {
            if got == max {
                break;
            }
            let l = (self.next_lane + i) % claimed;
            let r = self.lanes[l].recv(&self.inbox, out, max - got, &mut self.pool);
            got += r.got;
            self.stats.bad += r.bad;
        }
        if claimed > 0 {
            self.next_lane = (self.next_lane + 1) % claimed;
        }
        self.stats.received += got as u64;
        // More may have come: look again on the next step.
        self.wake_if_pending();
        got
    }

    fn set_waker(&mut self, waker: Waker) {
        self.waker = Some(waker);
    }

    /// Every buffer but a receive batch's worth.
    fn reclaim(&mut self, pool: &mut Vec<Frame>) {
        let keep = self.pool.len().min(KEEP);
        pool.extend(self.pool.drain(keep..));
    }

    /// Called on each step of the device: held frames go on where there
    /// is room, and frames in a lane make the device receive.
    fn poll(&mut self, now_ns: u64) {
        self.now_ns = now_ns;
        self.flush();
        self.wake_if_pending();
    }

    /// Soon, while frames are held: the receiver makes room as it runs.
    fn next_deadline(&self) -> Option<u64> {
        self.holding().then_some(self.now_ns + HOLD_RETRY_NS)
    }

    /// As [`ShmWire`](super::ShmWire): nothing tells of a frame, the
    /// device looks on each step.
    fn polled(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A fabric directory, removed when dropped.
    struct TempDir(PathBuf);

    impl TempDir {
        fn new() -> Self {
            static N: AtomicU32 = AtomicU32::new(0);
            let n = N.fetch_add(1, Ordering::Relaxed);
            let name = format!("rnic-fabric-unit-{}-{n}", std::process::id());
            TempDir(std::env::temp_dir().join(name))
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    fn mac(n: u8) -> [u8; 6] {
        [2, 0, 0, 0, 0, n]
    }

    /// A frame from `src` to `dst` with `tag` as its payload.
    fn frame(dst: [u8; 6], src: [u8; 6], tag: u8, len: usize) -> Frame {
        let mut f = vec![tag; len.max(14)];
        f[..6].copy_from_slice(&dst);
        f[6..12].copy_from_slice(&src);
        f
    }

    fn recv_all(w: &mut ShmFabric) -> Vec<Frame> {
        let mut got = Vec::new();
        while w.recv(&mut got, 64) > 0 {}
        got
    }

    #[test]
    fn every_member_reaches_every_other_by_mac() {
        let d = TempDir::new();
        let mut nics: Vec<_> = (1..=3)
            .map(|n| ShmFabric::join(&d.0, mac(n)).unwrap())
            .collect();
        for (i, nic) in nics.iter_mut().enumerate() {
            let me = mac(i as u8 + 1);
            let mut out: Vec<Frame> = (1..=3u8)
                .filter(|&n| mac(n) != me)
                .map(|n| frame(mac(n), me, 16 * n + i as u8, 60 + i))
                .collect();
            nic.send(&mut out);
            assert!(out.is_empty());
        }
        for (i, nic) in nics.iter_mut().enumerate() {
            let mut got = recv_all(nic);
            got.sort();
            let n = i as u8 + 1;
            let want: Vec<Frame> = (0..3u8)
                .filter(|&s| s != i as u8)
                .map(|s| frame(mac(n), mac(s + 1), 16 * n + s, 60 + s as usize))
                .collect();
            assert_eq!(got, want, "member {n}");
        }
        let s = nics[0].stats();
        assert_eq!((s.sent, s.received, s.dropped, s.unreachable), (2, 2, 0, 0));
    }

    #[test]
    fn broadcast_floods_and_unknown_macs_are_counted() {
        let d = TempDir::new();
        let mut a = ShmFabric::join(&d.0, mac(1)).unwrap();
        let mut b = ShmFabric::join(&d.0, mac(2)).unwrap();
        let mut c = ShmFabric::join(&d.0, mac(3)).unwrap();
        a.send(&mut vec![
            frame([0xff; 6], mac(1), 7, 42),
            frame(mac(9), mac(1), 8, 42),
        ]);
        assert_eq!(recv_all(&mut b), [frame([0xff; 6], mac(1), 7, 42)]);
        assert_eq!(recv_all(&mut c), [frame([0xff; 6], mac(1), 7, 42)]);
        assert!(recv_all(&mut a).is_empty());
        assert_eq!((a.stats().sent, a.stats().unreachable), (2, 1));
    }

    #[test]
    fn a_full_lane_holds_frames_until_there_is_room_and_wraps_in_order() {
        let d = TempDir::new();
        let mut a = ShmFabric::join(&d.0, mac(1)).unwrap();
        let mut b = ShmFabric::join(&d.0, mac(2)).unwrap();
        let n = SLOTS as usize + BACKLOG + 3;
        let mut v: Vec<Frame> = (0..n).map(|i| frame(mac(2), mac(1), i as u8, 64)).collect();
        a.send(&mut v);
        let s = a.stats();
        assert_eq!(
            (s.sent, s.held, s.dropped),
            (u64::from(SLOTS), BACKLOG as u64, 3)
        );
        assert!(a.next_deadline().is_some());
        let mut got = recv_all(&mut b);
        while a.next_deadline().is_some() {
            a.poll(0);
            got.extend(recv_all(&mut b));
        }
        assert_eq!(got.len(), SLOTS as usize + BACKLOG);
        for (i, f) in got.iter().enumerate() {
            assert_eq!(f[14], i as u8, "frame {i} in order");
        }
        assert_eq!(a.stats().sent, got.len() as u64);
        for round in 0..3 * SLOTS {
            a.send(&mut vec![frame(mac(2), mac(1), round as u8, MAX_FRAME)]);
            let got = recv_all(&mut b);
            assert_eq!(got, [frame(mac(2), mac(1), round as u8, MAX_FRAME)]);
        }
        a.send(&mut vec![frame(mac(2), mac(1), 0, MAX_FRAME + 1)]);
        assert_eq!(a.stats().dropped, 4);
    }

    #[test]
    fn a_member_that_leaves_is_looked_up_again_and_its_lane_freed() {
        let d = TempDir::new();
        let mut a = ShmFabric::join(&d.0, mac(1)).unwrap();
        let b = ShmFabric::join(&d.0, mac(2)).unwrap();
        assert_eq!(
            ShmFabric::join(&d.0, mac(2)).unwrap_err().kind(),
            io::ErrorKind::AddrInUse
        );
        a.send(&mut vec![frame(mac(2), mac(1), 1, 64)]);
        drop(b);
        assert!(!d.0.join(file_name(mac(2))).exists());
        a.send(&mut vec![frame(mac(2), mac(1), 2, 64)]);
        assert_eq!(a.stats().unreachable, 1);
        // A new member with that MAC gets what is sent from now on.
        let mut b = ShmFabric::join(&d.0, mac(2)).unwrap();
        a.send(&mut vec![frame(mac(2), mac(1), 3, 64)]);
        assert_eq!(recv_all(&mut b), [frame(mac(2), mac(1), 3, 64)]);
        // A sender that leaves gives its lane back.
        drop(a);
        let owner = b.inbox.u64_at(owner_at(0)).load(Ordering::Acquire);
        assert_eq!(owner, 0);
    }

    #[test]
    fn a_dead_members_inbox_and_lanes_are_taken_over() {
        let d = TempDir::new();
        // An inbox and a lane left by a process that no longer exists.
        let dead = ShmFabric::join(&d.0, mac(2)).unwrap();
        let gone = u32::MAX >> 1; // above any pid_max
        dead.inbox.u32_at(PID_AT).store(gone, Ordering::Relaxed);
        dead.inbox
            .u64_at(owner_at(0))
            .store(u64::from(gone) << 32 | 1, Ordering::Relaxed);
        dead.inbox.u32_at(CLAIMED_AT).store(1, Ordering::Relaxed);
        // It never leaves.
        std::mem::forget(dead);
        let mut b = ShmFabric::join(&d.0, mac(2)).unwrap();
        let mut a = ShmFabric::join(&d.0, mac(1)).unwrap();
        b.inbox
            .u64_at(owner_at(0))
            .store(u64::from(gone) << 32 | 1, Ordering::Relaxed);
        a.send(&mut vec![frame(mac(2), mac(1), 5, 64)]);
        assert_eq!(recv_all(&mut b), [frame(mac(2), mac(1), 5, 64)]);
        assert_eq!(b.inbox.u64_at(owner_at(0)).load(Ordering::Acquire), a.owner);
    }

    #[test]
    fn a_bad_sender_is_counted_not_trusted() {
        let d = TempDir::new();
        let mut a = ShmFabric::join(&d.0, mac(1)).unwrap();
        let mut b = ShmFabric::join(&d.0, mac(2)).unwrap();
        a.send(&mut vec![
            frame(mac(2), mac(1), 1, 64),
            frame(mac(2), mac(1), 2, 64),
        ]);
        // The sender lies about a length, then about its index.
        b.inbox
            .u32_at(lane(0).slots_at)
            .store(u32::MAX, Ordering::Relaxed);
        assert_eq!(recv_all(&mut b), [frame(mac(2), mac(1), 2, 64)]);
        assert_eq!(b.bad(), 1);
        b.inbox
            .u32_at(lane(0).producer)
            .store(2 + SLOTS + 1, Ordering::Release);
        assert!(recv_all(&mut b).is_empty());
        assert_eq!(b.bad(), 2);
        // Lanes beyond the inbox's are never scanned.
        b.inbox
            .u32_at(CLAIMED_AT)
            .store(u32::MAX, Ordering::Relaxed);
        assert!(recv_all(&mut b).is_empty());
    }

    #[test]
    fn names_are_macs() {
        assert_eq!(file_name([2, 0, 0, 0xab, 0, 1]), "020000ab0001");
        assert_eq!(mac_of("020000ab0001"), Some([2, 0, 0, 0xab, 0, 1]));
        assert_eq!(mac_of(".join-1-0"), None);
        assert_eq!(mac_of("02000zab0001"), None);
    }
}

//! An in-memory Ethernet switch joining NICs of one process.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use super::{Frame, Waker, Wire};
use crate::wire::ethernet::{EthernetAddress, EthernetFrame};

/// A learning L2 switch: a frame goes to the port its destination MAC was
/// last seen on (as a source), or to every other port if the destination
/// is broadcast, multicast or not yet known. A frame addressed to its
/// sender's own MAC goes back to the sender. Each port queues what it
/// receives up to its capacity and drops (and counts) the rest, as a
/// switch with full buffers does.
///
/// ```
/// use rnic_emu::net::{Switch, Wire};
///
/// let sw = Switch::new();
/// let (mut a, mut b) = (sw.port(), sw.port());
/// let frame = |dst: u8, src: u8| {
///     let mut f = vec![0u8; 60];
///     f[..6].copy_from_slice(&[2, 0, 0, 0, 0, dst]);
///     f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, src]);
///     f
/// };
/// a.send(&mut vec![frame(0xb, 0xa)]); // unknown: flooded to b
/// b.send(&mut vec![frame(0xa, 0xb)]); // a's MAC was learned
/// let mut got = Vec::new();
/// assert_eq!(b.recv(&mut got, 8), 1);
/// assert_eq!(a.recv(&mut got, 8), 1);
/// ```
#[derive(Clone, Default)]
pub struct Switch {
    shared: Arc<SwitchCore>,
}

#[derive(Default)]
struct SwitchCore {
    inner: Mutex<Inner>,
    /// Bumped whenever the forwarding database or the ports change: a
    /// port's cached route and learned address are good while it holds.
    generation: AtomicU64,
    free: FreeList,
}

/// Buffers of frames received that their NIC had no room to keep, for the
/// NICs that send: traffic that flows one way would otherwise free buffers
/// at one end and allocate them at the other.
#[derive(Default)]
struct FreeList {
    frames: Mutex<Vec<Frame>>,
    /// `frames.len()`, read without the lock.
    len: AtomicUsize,
}

/// Buffers the free list keeps at most.
const FREE_MAX: usize = 4096;
/// Buffers a NIC takes from it at most per step.
const FREE_TAKE: usize = 64;

#[derive(Default)]
struct Inner {
    ports: Vec<Option<Arc<PortQueue>>>,
    /// Forwarding database: MAC -> port index.
    fdb: HashMap<EthernetAddress, usize>,
}

/// What a port receives. A queue of its own, locked only by the senders
/// to this port and its NIC; it keeps its buffer, which stays in the cache
/// (a lock-free ring of the port's capacity would walk through megabytes
/// of slots, one cold line per frame).
struct PortQueue {
    frames: Mutex<VecDeque<Frame>>,
    capacity: usize,
    waker: OnceLock<Waker>,
    dropped: AtomicU64,
}

impl PortQueue {
    fn frames(&self) -> MutexGuard<'_, VecDeque<Frame>> {
        self.frames.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn wake(&self) {
        if let Some(w) = self.waker.get() {
            w();
        }
    }
}

/// Frames a port queues by default before it drops.
pub const DEFAULT_PORT_CAPACITY: usize = 1 << 16;

impl Switch {
    /// A switch with no ports.
    pub fn new() -> Switch {
        Switch::default()
    }

    fn inner(&self) -> MutexGuard<'_, Inner> {
        self.shared.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A new port queueing up to [`DEFAULT_PORT_CAPACITY`] frames.
    pub fn port(&self) -> SwitchPort {
        self.port_with_capacity(DEFAULT_PORT_CAPACITY)
    }

    /// A new port queueing up to `capacity` frames.
    pub fn port_with_capacity(&self, capacity: usize) -> SwitchPort {
        let queue = Arc::new(PortQueue {
            frames: Mutex::new(VecDeque::new()),
            capacity,
            waker: OnceLock::new(),
            dropped: AtomicU64::new(0),
        });
        let mut inner = self.inner();
        let index = match inner.ports.iter().position(Option::is_none) {
            Some(i) => i,
            None => {
                inner.ports.push(None);
                inner.ports.len() - 1
            }
        };
        inner.ports[index] = Some(queue.clone());
        self.shared.generation.fetch_add(1, Ordering::AcqRel);
        SwitchPort {
            switch: self.clone(),
            index,
            queue,
            woken: Vec::new(),
            learned: None,
            route: None,
        }
    }

    /// Number of attached ports.
    pub fn ports(&self) -> usize {
        self.inner().ports.iter().flatten().count()
    }
}

impl std::fmt::Debug for Switch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.inner();
        f.debug_struct("Switch")
            .field("ports", &inner.ports.iter().flatten().count())
            .field("learned", &inner.fdb.len())
            .finish()
    }
}

/// One port of a [`Switch`]: the wire of one NIC. Dropping it detaches it.
pub struct SwitchPort {
    switch: Switch,
    index: usize,
    queue: Arc<PortQueue>,
    /// The ports a send delivered to, woken once it is done.
    woken: Vec<Arc<PortQueue>>,
    /// The source address this port last had learned, and the generation
    /// after it was.
    learned: Option<(EthernetAddress, u64)>,
    /// The last destination forwarded to, its port, and the generation it
    /// was looked up in.
    route: Option<(EthernetAddress, Arc<PortQueue>, u64)>,
}

/// Queues `f` at `q`, or counts it dropped there if its queue is full;
/// notes the port in `woken`.
fn deliver(q: &Arc<PortQueue>, f: Frame, woken: &mut Vec<Arc<PortQueue>>) {
    let mut fr = q.frames();
    if fr.len() >= q.capacity {
        q.dropped.fetch_add(1, Ordering::Relaxed);
        return;
    }
    fr.push_back(f);
    drop(fr);
    if !woken.iter().any(|w| Arc::ptr_eq(w, q)) {
        woken.push(q.clone());
    }
}

impl SwitchPort {
    /// Frames dropped because this port's queue was full.
    pub fn dropped(&self) -> u64 {
        self.queue.dropped.load(Ordering::Relaxed)
    }

    /// The slow path of a frame: under the switch's lock, learns its
    /// source, then forwards it by the database or floods it, and caches
    /// the route.
    fn forward(&mut self, src: EthernetAddress, dst: EthernetAddress, f: Frame) {
        let shared = &self.switch.shared;
        let mut inner = shared.inner.lock().unwrap_or_else(|e| e.into_inner());
        if !src.is_multicast() && inner.fdb.get(&src) != Some(&self.index) {
            inner.fdb.insert(src, self.index);
            shared.generation.fetch_add(1, Ordering::AcqRel);
        }
        let generation = shared.generation.load(Ordering::Acquire);
        self.learned = (!src.is_multicast()).then_some((src, generation));
        let known = (!dst.is_multicast())
            .then(|| inner.fdb.get(&dst).copied())
            .flatten()
            .and_then(|p| inner.ports[p].clone());
        if let Some(q) = known {
            deliver(&q, f, &mut self.woken);
            self.route = Some((dst, q, generation));
            return;
        }
        // Flooded: every other port a copy, the last the frame.
        let others: Vec<&Arc<PortQueue>> = inner
            .ports
            .iter()
            .enumerate()
            .filter(|&(p, _)| p != self.index)
            .filter_map(|(_, q)| q.as_ref())
            .collect();
        if let Some((last, rest)) = others.split_last() {
            for q in rest {
                deliver(q, f.clone(), &mut self.woken);
            }
            deliver(last, f, &mut self.woken);
        }
    }
}

impl std::fmt::Debug for SwitchPort {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SwitchPort")
            .field("index", &self.index)
            .field("dropped", &self.dropped())
            .finish()
    }
}

impl Drop for SwitchPort {
    fn drop(&mut self) {
        let mut inner = self.switch.inner();
        inner.ports[self.index] = None;
        let me = self.index;
        inner.fdb.retain(|_, p| *p != me);
        self.switch.shared.generation.fetch_add(1, Ordering::AcqRel);
    }
}

impl Wire for SwitchPort {
    /// A frame to the sender's own MAC goes back to it.
    fn reflects(&self) -> bool {
        true
    }

    fn send(&mut self, frames: &mut Vec<Frame>) {
        for f in frames.drain(..) {
            let Ok(eth) = EthernetFrame::new_checked(&f[..]) else {
                continue;
            };
            let (src, dst) = (eth.src_addr(), eth.dst_addr());
            // The fast path takes no lock: the source is learned and the
            // destination is the last one, in the current generation.
            let generation = self.switch.shared.generation.load(Ordering::Acquire);
            let learned = src.is_multicast() || self.learned == Some((src, generation));
            let cached = match &self.route {
                Some((d, q, g)) if learned && *d == dst && *g == generation => Some(q.clone()),
                _ => None,
            };
            match cached {
                Some(q) => deliver(&q, f, &mut self.woken),
                None => self.forward(src, dst, f),
            }
        }
        for q in self.woken.drain(..) {
            q.wake();
        }
    }

    fn recv(&mut self, out: &mut Vec<Frame>, max: usize) -> usize {
        let mut q = self.queue.frames();
        let n = max.min(q.len());
        out.extend(q.drain(..n));
        n
    }

    /// The first waker set stays: a port has one NIC.
    fn set_waker(&mut self, waker: Waker) {
        if self.queue.waker.set(waker).is_err() {
            log::warn!("switch port {}: a second waker is ignored", self.index);
        }
    }

    fn spare(&mut self, frames: &mut Vec<Frame>) {
        let free = &self.switch.shared.free;
        let mut list = free.frames.lock().unwrap_or_else(|e| e.into_inner());
        let keep = frames.len().min(FREE_MAX.saturating_sub(list.len()));
        list.extend(frames.drain(..keep));
        frames.clear();
        free.len.store(list.len(), Ordering::Relaxed);
    }

    fn reclaim(&mut self, pool: &mut Vec<Frame>) {
        let free = &self.switch.shared.free;
        // Most steps find it empty (or the NIC well supplied): no lock.
        if pool.len() >= FREE_TAKE || free.len.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut list = free.frames.lock().unwrap_or_else(|e| e.into_inner());
        let n = list.len().min(FREE_TAKE);
        let at = list.len() - n;
        pool.extend(list.drain(at..));
        free.len.store(list.len(), Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(dst: [u8; 6], src: u8, tag: u8) -> Frame {
        let mut f = vec![0u8; 60];
        f[..6].copy_from_slice(&dst);
        f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, src]);
        f[14] = tag;
        f
    }

    fn mac(n: u8) -> [u8; 6] {
        [2, 0, 0, 0, 0, n]
    }

    fn take(p: &mut SwitchPort) -> Vec<u8> {
        let mut v = Vec::new();
        p.recv(&mut v, 100);
        v.iter().map(|f| f[14]).collect()
    }

    #[test]
    fn floods_then_forwards_by_learned_mac() {
        let sw = Switch::new();
        let (mut a, mut b, mut c) = (sw.port(), sw.port(), sw.port());
        a.send(&mut vec![frame(mac(2), 1, 10)]);
        assert_eq!(
            (take(&mut b), take(&mut c)),
            (vec![10], vec![10]),
            "flooded"
        );
        b.send(&mut vec![frame(mac(1), 2, 11)]);
        assert_eq!(
            (take(&mut a), take(&mut c)),
            (vec![11], vec![]),
            "a learned"
        );
        a.send(&mut vec![frame(mac(2), 1, 12)]);
        assert_eq!(
            (take(&mut b), take(&mut c)),
            (vec![12], vec![]),
            "b learned"
        );
        a.send(&mut vec![frame([0xff; 6], 1, 13)]);
        assert_eq!(
            (take(&mut b), take(&mut c), take(&mut a)),
            (vec![13], vec![13], vec![])
        );
        // A frame to the sender's own MAC comes back to it.
        a.send(&mut vec![frame(mac(1), 1, 14)]);
        assert_eq!(take(&mut a), vec![14]);
        drop(c);
        assert_eq!(sw.ports(), 2);
    }

    #[test]
    fn full_port_drops_and_counts() {
        let sw = Switch::new();
        let mut a = sw.port();
        let mut b = sw.port_with_capacity(2);
        a.send(&mut (0..5).map(|i| frame(mac(9), 1, i)).collect());
        assert_eq!(b.dropped(), 3);
        assert_eq!(take(&mut b), vec![0, 1]);
    }
}

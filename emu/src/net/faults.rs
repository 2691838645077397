//! A fault injector: a wire around a wire that drops, duplicates,
//! reorders, delays and corrupts frames, in both directions.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use super::{Frame, Waker, Wire};
use crate::clock::Clock;
use crate::wire::ethernet::{ethertype, EthernetFrame};
use crate::wire::{ipv4, ipv6, udp, ROCE_V2_PORT};

/// Fault rates, each the probability (0.0..=1.0) that one frame suffers
/// it. Every frame crossing the injector in a direction with faults draws
/// once per kind, in the order drop, corrupt, duplicate, then for each copy
/// delay and reorder.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FaultConfig {
    /// Drop the frame.
    pub drop: f64,
    /// Deliver the frame twice.
    pub duplicate: f64,
    /// Hold the frame back until `reorder_depth` later frames have passed
    /// (or `max_hold_ns` has elapsed).
    pub reorder: f64,
    /// How many frames overtake a reordered one.
    pub reorder_depth: usize,
    /// Hold the frame for `delay_ns`.
    pub delay: f64,
    /// How long a delayed frame is held.
    pub delay_ns: u64,
    /// Flip one bit. Only RoCEv2 frames are corrupted, and only in the
    /// bytes after the UDP header (the transport headers, payload and
    /// ICRC), so that the ICRC catches every corruption, as a link's FCS
    /// would catch it in the other headers.
    pub corrupt: f64,
    /// Longest a reordered frame waits for the frames that overtake it.
    pub max_hold_ns: u64,
    /// Apply to frames the NIC sends.
    pub tx: bool,
    /// Apply to frames the NIC receives.
    pub rx: bool,
    /// The link is down: every frame is dropped both ways (counted as
    /// dropped), and the NIC sees its link down.
    pub link_down: bool,
    /// Targeted drops, each `(opcode, n)`: the `n`th RoCEv2 frame (from 1)
    /// with that BTH opcode crossing a direction with faults is dropped,
    /// whatever the draws; `n` 0 is no target. They count from the last
    /// [`FaultHandle::set`], and as drops.
    pub drop_nth: [(u8, u32); MAX_TARGETS],
}

/// Targeted drops a [`FaultConfig`] holds.
pub const MAX_TARGETS: usize = 4;

impl Default for FaultConfig {
    /// No faults, both directions, a reorder depth of 3, a 100 µs delay and
    /// a 1 ms limit on holding a reordered frame.
    fn default() -> Self {
        Self {
            drop: 0.0,
            duplicate: 0.0,
            reorder: 0.0,
            reorder_depth: 3,
            delay: 0.0,
            delay_ns: 100_000,
            corrupt: 0.0,
            max_hold_ns: 1_000_000,
            tx: true,
            rx: true,
            link_down: false,
            drop_nth: [(0, 0); MAX_TARGETS],
        }
    }
}

impl std::str::FromStr for FaultConfig {
    type Err = String;

    /// Parses `key=value` pairs separated by commas over the defaults, e.g.
    /// `drop=0.02,reorder=0.01,rx=0`: the rates `drop`, `duplicate`,
    /// `reorder`, `delay` and `corrupt` (0.0..=1.0), `reorder_depth`,
    /// `delay_ns`, `max_hold_ns`, the directions `tx` and `rx` (0 or 1), and
    /// up to [`MAX_TARGETS`] `drop_nth=OPCODE:N` (the opcode in hex with
    /// `0x` or decimal: `drop_nth=0x0e:1` drops the first READ response
    /// MIDDLE).
    fn from_str(s: &str) -> Result<Self, String> {
        let mut c = FaultConfig::default();
        let mut targets = 0;
        for pair in s.split(',').filter(|p| !p.is_empty()) {
            let (k, v) = pair
                .split_once('=')
                .ok_or_else(|| format!("fault {pair:?} is not KEY=VALUE"))?;
            let rate = |v: &str| match v.parse::<f64>() {
                Ok(r) if (0.0..=1.0).contains(&r) => Ok(r),
                _ => Err(format!("fault rate {k}={v:?} is not in 0.0..=1.0")),
            };
            let int = |v: &str| {
                v.parse::<u64>()
                    .map_err(|e| format!("fault {k}={v:?}: {e}"))
            };
            let flag = |v: &str| match v {
                "0" => Ok(false),
                "1" => Ok(true),
                _ => Err(format!("fault direction {k}={v:?} is not 0 or 1")),
            };
            match k {
                "drop" => c.drop = rate(v)?,
                "duplicate" => c.duplicate = rate(v)?,
                "reorder" => c.reorder = rate(v)?,
                "delay" => c.delay = rate(v)?,
                "corrupt" => c.corrupt = rate(v)?,
                "reorder_depth" => c.reorder_depth = int(v)? as usize,
                "delay_ns" => c.delay_ns = int(v)?,
                "max_hold_ns" => c.max_hold_ns = int(v)?,
                "tx" => c.tx = flag(v)?,
                "rx" => c.rx = flag(v)?,
                "link_down" => c.link_down = flag(v)?,
                "drop_nth" => {
                    let bad = || format!("fault drop_nth={v:?} is not OPCODE:N");
                    let (op, n) = v.split_once(':').ok_or_else(bad)?;
                    let op = match op.strip_prefix("0x") {
                        Some(hex) => u8::from_str_radix(hex, 16),
                        None => op.parse(),
                    }
                    .map_err(|_| bad())?;
                    let n = n.parse::<u32>().map_err(|_| bad())?;
                    let slot = c
                        .drop_nth
                        .get_mut(targets)
                        .ok_or_else(|| format!("more than {MAX_TARGETS} drop_nth"))?;
                    *slot = (op, n);
                    targets += 1;
                }
                _ => return Err(format!("unknown fault {k:?}")),
            }
        }
        Ok(c)
    }
}

/// What the injector did, counted per kind over both directions.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FaultStats {
    /// Frames that went through the injector in a direction with faults
    /// enabled (before faults).
    pub frames: u64,
    /// Frames dropped.
    pub dropped: u64,
    /// Extra copies delivered.
    pub duplicated: u64,
    /// Frames held back for reordering.
    pub reordered: u64,
    /// Frames delayed.
    pub delayed: u64,
    /// Frames delivered with a flipped bit (both copies of a duplicated
    /// one).
    pub corrupted: u64,
}

#[derive(Default)]
struct Counters {
    frames: AtomicU64,
    dropped: AtomicU64,
    duplicated: AtomicU64,
    reordered: AtomicU64,
    delayed: AtomicU64,
    corrupted: AtomicU64,
}

struct Controls {
    config: Mutex<FaultConfig>,
    /// Frames of each `drop_nth` target's opcode seen since the last set.
    seen: Mutex<[u32; MAX_TARGETS]>,
    counters: Counters,
    /// The NIC's waker, to tell it of a link change.
    waker: Mutex<Option<Waker>>,
}

/// Changes a running injector's configuration and reads its counts.
#[derive(Clone)]
pub struct FaultHandle(Arc<Controls>);

impl FaultHandle {
    /// Replaces the configuration; it applies to the next frame. A change
    /// of `link_down` wakes the NIC, which reports it.
    pub fn set(&self, config: FaultConfig) {
        *self.0.seen.lock().unwrap_or_else(|e| e.into_inner()) = [0; MAX_TARGETS];
        let old = std::mem::replace(
            &mut *self.0.config.lock().unwrap_or_else(|e| e.into_inner()),
            config,
        );
        if old.link_down != config.link_down {
            let waker = self
                .0
                .waker
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            if let Some(w) = waker {
                w();
            }
        }
    }

    /// The current configuration.
    pub fn config(&self) -> FaultConfig {
        *self.0.config.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// What the injector has done so far.
    pub fn stats(&self) -> FaultStats {
        let c = &self.0.counters;
        let get = |a: &AtomicU64| a.load(Ordering::Relaxed);
        FaultStats {
            frames: get(&c.frames),
            dropped: get(&c.dropped),
            duplicated: get(&c.duplicated),
            reordered: get(&c.reordered),
            delayed: get(&c.delayed),
            corrupted: get(&c.corrupted),
        }
    }
}

impl std::fmt::Debug for FaultHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FaultHandle")
            .field("config", &self.config())
            .field("stats", &self.stats())
            .finish()
    }
}

/// Frames held back in one direction.
#[derive(Default)]
struct Held {
    /// Delayed frames with the time they are due.
    delayed: VecDeque<(u64, Frame)>,
    /// Reordered frames: how many more frames must pass, and the latest
    /// time they are released anyway.
    reordered: VecDeque<(usize, u64, Frame)>,
}

impl Held {
    fn next_deadline(&self) -> Option<u64> {
        let d = self.delayed.iter().map(|(t, _)| *t);
        let r = self.reordered.iter().map(|(_, t, _)| *t);
        d.chain(r).min()
    }

    /// Moves frames due at `now` to `out`.
    fn release_due(&mut self, now: u64, out: &mut Vec<Frame>) {
        let mut i = 0;
        while i < self.delayed.len() {
            if self.delayed[i].0 <= now {
                if let Some((_, f)) = self.delayed.remove(i) {
                    out.push(f);
                }
            } else {
                i += 1;
            }
        }
        let mut i = 0;
        while i < self.reordered.len() {
            if self.reordered[i].1 <= now {
                if let Some((_, _, f)) = self.reordered.remove(i) {
                    out.push(f);
                }
            } else {
                i += 1;
            }
        }
    }
}

/// A wire around `W` that injects faults. Deterministic for a given seed
/// and sequence of frames and times.
///
/// ```
/// use rnic_emu::net::{FaultConfig, Faults, Loopback};
/// use rnic_emu::Clock;
///
/// let (wire, faults) = Faults::new(Loopback::default(), Clock::real(), 42);
/// faults.set(FaultConfig { drop: 0.05, ..FaultConfig::default() });
/// # drop(wire);
/// ```
pub struct Faults<W> {
    inner: W,
    shared: Arc<Controls>,
    clock: Clock,
    rng: u64,
    tx_held: Held,
    rx_held: Held,
    /// Received frames released from holding, waiting for `recv`.
    rx_ready: VecDeque<Frame>,
    waker: Option<Waker>,
}

impl<W: Wire> Faults<W> {
    /// Wraps `inner`, with no faults until the handle sets some. `clock`
    /// times delays and holds: it must be the clock of the NIC that
    /// polls the injector ([`Wire::poll`] and [`Wire::next_deadline`] are
    /// on it). `seed` seeds the draws.
    pub fn new(inner: W, clock: Clock, seed: u64) -> (Self, FaultHandle) {
        let shared = Arc::new(Controls {
            config: Mutex::new(FaultConfig::default()),
            seen: Mutex::new([0; MAX_TARGETS]),
            counters: Counters::default(),
            waker: Mutex::new(None),
        });
        let f = Self {
            inner,
            shared: shared.clone(),
            clock,
            rng: seed ^ 0x9e37_79b9_7f4a_7c15,
            tx_held: Held::default(),
            rx_held: Held::default(),
            rx_ready: VecDeque::new(),
            waker: None,
        };
        (f, FaultHandle(shared))
    }

    /// The wrapped wire.
    pub fn inner(&self) -> &W {
        &self.inner
    }

    /// splitmix64: a uniform draw in 0.0..1.0.
    fn draw(&mut self) -> f64 {
        self.rng = self.rng.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.rng;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        (z >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Passes `frames` through the faults of one direction, appending the
    /// survivors (and frames released meanwhile) to `out`.
    fn apply(&mut self, tx: bool, frames: &mut Vec<Frame>, out: &mut Vec<Frame>) {
        let cfg = *self.shared.config.lock().unwrap_or_else(|e| e.into_inner());
        let active = if tx { cfg.tx } else { cfg.rx };
        let now = self.clock.now_ns();
        let shared = self.shared.clone();
        let c = &shared.counters;
        let mut held = std::mem::take(if tx {
            &mut self.tx_held
        } else {
            &mut self.rx_held
        });
        held.release_due(now, out);
        for mut f in frames.drain(..) {
            if cfg.link_down {
                c.frames.fetch_add(1, Ordering::Relaxed);
                c.dropped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            if !active {
                out.push(f);
                continue;
            }
            c.frames.fetch_add(1, Ordering::Relaxed);
            if targeted(&cfg, &shared, &f) {
                c.dropped.fetch_add(1, Ordering::Relaxed);
                continue;
            }
            if self.draw() < cfg.drop {
                c.dropped.fetch_add(1, Ordering::Relaxed);
                trace("dropped", tx, &f);
                continue;
            }
            let mut corrupted = false;
            if self.draw() < cfg.corrupt {
                if let Some((start, len)) = roce_region(&f) {
                    // Any byte but the BTH's fifth (FECN, BECN and reserved
                    // bits), which the ICRC leaves out.
                    let bits = (len - 1) * 8;
                    let bit = (self.draw() * bits as f64) as usize % bits;
                    let mut byte = bit / 8;
                    if byte >= BTH_MASKED_BYTE {
                        byte += 1;
                    }
                    f[start + byte] ^= 1 << (bit % 8);
                    corrupted = true;
                    trace("corrupted", tx, &f);
                }
            }
            let copies = if self.draw() < cfg.duplicate {
                c.duplicated.fetch_add(1, Ordering::Relaxed);
                trace("duplicated", tx, &f);
                2
            } else {
                1
            };
            if corrupted {
                c.corrupted.fetch_add(copies, Ordering::Relaxed);
            }
            for i in 0..copies {
                let f = if i + 1 == copies {
                    std::mem::take(&mut f)
                } else {
                    f.clone()
                };
                if self.draw() < cfg.delay {
                    c.delayed.fetch_add(1, Ordering::Relaxed);
                    trace("delayed", tx, &f);
                    held.delayed.push_back((now + cfg.delay_ns, f));
                } else if self.draw() < cfg.reorder {
                    c.reordered.fetch_add(1, Ordering::Relaxed);
                    trace("reordered", tx, &f);
                    held.reordered
                        .push_back((cfg.reorder_depth, now + cfg.max_hold_ns, f));
                } else {
                    out.push(f);
                    // Held frames count the frames that overtake them.
                    let mut k = 0;
                    while k < held.reordered.len() {
                        held.reordered[k].0 = held.reordered[k].0.saturating_sub(1);
                        if held.reordered[k].0 == 0 {
                            if let Some((_, _, g)) = held.reordered.remove(k) {
                                out.push(g);
                            }
                        } else {
                            k += 1;
                        }
                    }
                }
            }
        }
        *(if tx {
            &mut self.tx_held
        } else {
            &mut self.rx_held
        }) = held;
    }
}

/// Logs (at trace level) what the injector did to frame `f`, with its
/// BTH if it is RoCEv2: with the NICs' captures, which frame each loss
/// was, to tell an injected loss from any other.
fn trace(what: &str, tx: bool, f: &[u8]) {
    if log::log_enabled!(log::Level::Trace) {
        let dir = if tx { "sent" } else { "received" };
        match roce_region(f).and_then(|(s, _)| f.get(s..s + 12)) {
            Some(bth) => log::trace!("faults: {what} a frame {dir}, BTH {bth:02x?}"),
            None => log::trace!("faults: {what} a frame {dir} (not RoCEv2)"),
        }
    }
}

/// Whether frame `f` is the `n`th of its BTH opcode that a `drop_nth`
/// target of `cfg` names (counting it in `shared.seen`).
fn targeted(cfg: &FaultConfig, shared: &Controls, f: &[u8]) -> bool {
    if cfg.drop_nth.iter().all(|t| t.1 == 0) {
        return false;
    }
    let Some((start, _)) = roce_region(f) else {
        return false;
    };
    let op = f[start];
    let mut seen = shared.seen.lock().unwrap_or_else(|e| e.into_inner());
    let mut hit = false;
    for (i, &(t, n)) in cfg.drop_nth.iter().enumerate() {
        if n != 0 && t == op {
            seen[i] += 1;
            hit |= seen[i] == n;
        }
    }
    hit
}

/// The BTH byte the ICRC does not cover (FECN, BECN, reserved).
const BTH_MASKED_BYTE: usize = 4;

/// The bytes after the UDP header of a RoCEv2 frame (all but one covered
/// by the ICRC), or `None` for any other frame.
fn roce_region(f: &[u8]) -> Option<(usize, usize)> {
    let eth = EthernetFrame::new_checked(f).ok()?;
    let ip_at = eth.header_len();
    let (ip_len, proto) = match eth.ethertype() {
        ethertype::IPV4 => (ipv4::HEADER_LEN, *f.get(ip_at + 9)?),
        ethertype::IPV6 => (ipv6::HEADER_LEN, *f.get(ip_at + 6)?),
        _ => return None,
    };
    let udp_at = ip_at + ip_len;
    let port = u16::from_be_bytes([*f.get(udp_at + 2)?, *f.get(udp_at + 3)?]);
    if proto != ipv4::protocol::UDP || port != ROCE_V2_PORT {
        return None;
    }
    let start = udp_at + udp::HEADER_LEN;
    (f.len() > start + BTH_MASKED_BYTE).then(|| (start, f.len() - start))
}

impl<W: Wire> Wire for Faults<W> {
    fn send(&mut self, frames: &mut Vec<Frame>) {
        let mut out = Vec::with_capacity(frames.len());
        self.apply(true, frames, &mut out);
        self.inner.send(&mut out);
    }

    fn recv(&mut self, out: &mut Vec<Frame>, max: usize) -> usize {
        // Fill up to `max` from the inner wire, so that returning fewer
        // means nothing is left but frames held back (which `poll`
        // releases, waking the NIC).
        let mut got = Vec::new();
        while self.rx_ready.len() < max {
            got.clear();
            if self.inner.recv(&mut got, max) == 0 {
                break;
            }
            let mut passed = Vec::with_capacity(got.len());
            self.apply(false, &mut got, &mut passed);
            self.rx_ready.extend(passed);
        }
        let n = max.min(self.rx_ready.len());
        out.extend(self.rx_ready.drain(..n));
        n
    }

    fn set_waker(&mut self, waker: Waker) {
        self.waker = Some(waker.clone());
        *self.shared.waker.lock().unwrap_or_else(|e| e.into_inner()) = Some(waker.clone());
        self.inner.set_waker(waker);
    }

    fn reclaim(&mut self, pool: &mut Vec<Frame>) {
        self.inner.reclaim(pool)
    }

    fn spare(&mut self, frames: &mut Vec<Frame>) {
        self.inner.spare(frames)
    }

    fn link_up(&self) -> bool {
        !self
            .shared
            .config
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .link_down
            && self.inner.link_up()
    }

    fn poll(&mut self, now_ns: u64) {
        let mut due = Vec::new();
        self.tx_held.release_due(now_ns, &mut due);
        if !due.is_empty() {
            self.inner.send(&mut due);
        }
        let mut rx_due = Vec::new();
        self.rx_held.release_due(now_ns, &mut rx_due);
        if !rx_due.is_empty() {
            self.rx_ready.extend(rx_due);
            if let Some(w) = &self.waker {
                w();
            }
        }
        self.inner.poll(now_ns);
    }

    fn next_deadline(&self) -> Option<u64> {
        [
            self.tx_held.next_deadline(),
            self.rx_held.next_deadline(),
            self.inner.next_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
    }

    fn polled(&self) -> bool {
        self.inner.polled()
    }

    fn reflects(&self) -> bool {
        self.inner.reflects()
    }

    fn wait_fd(&self) -> Option<std::os::fd::RawFd> {
        self.inner.wait_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::VirtualClock;
    use crate::net::Loopback;

    fn roce_frame(tag: u8) -> Frame {
        // Ethernet, IPv4 (UDP), UDP to 4791, 16 bytes of transport packet.
        let mut f = vec![0u8; 14 + 20 + 8 + 16];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        f[14] = 0x45;
        f[14 + 9] = 17;
        f[34 + 2..34 + 4].copy_from_slice(&ROCE_V2_PORT.to_be_bytes());
        f[42] = tag;
        f
    }

    fn run(cfg: FaultConfig, n: u8) -> (Vec<u8>, FaultStats) {
        let v = VirtualClock::new();
        let (mut w, h) = Faults::new(Loopback::default(), v.clock(), 7);
        h.set(FaultConfig { rx: false, ..cfg });
        w.send(&mut (0..n).map(roce_frame).collect());
        v.advance(std::time::Duration::from_millis(10));
        w.poll(v.now_ns());
        let mut out = Vec::new();
        w.recv(&mut out, 1000);
        (out.iter().map(|f| f[42]).collect(), h.stats())
    }

    #[test]
    fn drops_the_nth_frame_of_an_opcode() {
        let v = VirtualClock::new();
        let (mut w, h) = Faults::new(Loopback::default(), v.clock(), 7);
        let cfg: FaultConfig = "drop_nth=0x11:2,drop_nth=14:1,rx=0".parse().unwrap();
        assert_eq!(cfg.drop_nth[..2], [(0x11, 2), (0x0e, 1)]);
        h.set(cfg);
        // Opcodes ACK, READ MIDDLE, ACK, READ MIDDLE, ACK; byte 43 numbers
        // the frames.
        let mut frames: Vec<Frame> = [0x11, 0x0e, 0x11, 0x0e, 0x11]
            .iter()
            .enumerate()
            .map(|(i, &op)| {
                let mut f = roce_frame(op);
                f[43] = i as u8;
                f
            })
            .collect();
        w.send(&mut frames);
        let mut out = Vec::new();
        w.recv(&mut out, 100);
        let left: Vec<u8> = out.iter().map(|f| f[43]).collect();
        assert_eq!(
            left,
            [0, 3, 4],
            "the second ACK and the first MIDDLE dropped"
        );
        assert_eq!(h.stats().dropped, 2);
        // Counting starts again at the next set.
        h.set(cfg);
        let mut again = vec![roce_frame(0x0e)];
        w.send(&mut again);
        w.recv(&mut out, 100);
        assert_eq!(out.len(), 3, "the first MIDDLE after the set dropped");
        assert!("drop_nth=0x11".parse::<FaultConfig>().is_err());
        let five = "drop_nth=1:1,drop_nth=2:1,drop_nth=3:1,drop_nth=4:1,drop_nth=5:1";
        assert!(five.parse::<FaultConfig>().is_err());
    }

    #[test]
    fn parses_a_fault_list_over_the_defaults() {
        let c: FaultConfig = "drop=0.02,reorder=0.5,reorder_depth=5,rx=0"
            .parse()
            .unwrap();
        assert_eq!(
            c,
            FaultConfig {
                drop: 0.02,
                reorder: 0.5,
                reorder_depth: 5,
                rx: false,
                ..FaultConfig::default()
            }
        );
        assert_eq!("".parse::<FaultConfig>(), Ok(FaultConfig::default()));
        for bad in [
            "drop",
            "drop=2",
            "drop=-0.1",
            "lose=0.1",
            "tx=yes",
            "delay_ns=-1",
        ] {
            assert!(bad.parse::<FaultConfig>().is_err(), "{bad}");
        }
    }

    #[test]
    fn no_faults_pass_everything() {
        let (got, s) = run(FaultConfig::default(), 10);
        assert_eq!(got, (0..10).collect::<Vec<_>>());
        assert_eq!((s.frames, s.dropped), (10, 0));
    }

    #[test]
    fn drops_and_duplicates_at_their_rates() {
        let (got, s) = run(
            FaultConfig {
                drop: 0.2,
                ..FaultConfig::default()
            },
            200,
        );
        assert_eq!(got.len() as u64, 200 - s.dropped);
        assert!((20..=60).contains(&s.dropped), "{s:?}");
        let (got, s) = run(
            FaultConfig {
                duplicate: 1.0,
                ..FaultConfig::default()
            },
            5,
        );
        assert_eq!(got, vec![0, 0, 1, 1, 2, 2, 3, 3, 4, 4]);
        assert_eq!(s.duplicated, 5);
    }

    #[test]
    fn reorder_lets_later_frames_overtake() {
        let mut cfg = FaultConfig {
            reorder: 1.0,
            reorder_depth: 2,
            ..FaultConfig::default()
        };
        // Every frame held: all come out at the hold limit, in order.
        let (got, _) = run(cfg, 3);
        assert_eq!(got, vec![0, 1, 2]);
        // A seed and rate that hold some: whatever is held comes out after
        // frames sent later, and nothing is lost.
        cfg.reorder = 0.3;
        let (got, s) = run(cfg, 50);
        assert_eq!(got.len(), 50);
        assert!(s.reordered > 0);
        assert_ne!(got, (0..50).collect::<Vec<_>>());
        let mut sorted = got.clone();
        sorted.sort();
        assert_eq!(sorted, (0..50).collect::<Vec<_>>());
    }

    #[test]
    fn delay_holds_until_due_and_corrupt_flips_one_roce_bit() {
        let v = VirtualClock::new();
        let (mut w, h) = Faults::new(Loopback::default(), v.clock(), 1);
        h.set(FaultConfig {
            delay: 1.0,
            delay_ns: 5_000,
            ..FaultConfig::default()
        });
        w.send(&mut vec![roce_frame(1)]);
        assert_eq!(w.next_deadline(), Some(5_000));
        w.poll(4_999);
        let mut out = Vec::new();
        assert_eq!(w.recv(&mut out, 8), 0);
        h.set(FaultConfig::default());
        w.poll(5_000);
        assert_eq!(w.recv(&mut out, 8), 1);
        h.set(FaultConfig {
            corrupt: 1.0,
            rx: false,
            ..FaultConfig::default()
        });
        let clean = roce_frame(9);
        w.send(&mut vec![clean.clone(), vec![0u8; 60]]);
        let mut got = Vec::new();
        w.recv(&mut got, 8);
        let diff: Vec<usize> = (0..clean.len())
            .filter(|&i| got[0][i] != clean[i])
            .collect();
        assert_eq!(diff.len(), 1, "one byte changed");
        assert!(diff[0] >= 42, "only after the UDP header");
        assert_ne!(diff[0], 42 + 4, "never the byte the ICRC masks");
        assert_eq!((got[0][diff[0]] ^ clean[diff[0]]).count_ones(), 1);
        assert_eq!(got[1], vec![0u8; 60], "non-RoCE frames are never corrupted");
        assert_eq!(h.stats().corrupted, 1);
    }
}

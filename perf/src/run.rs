//! The measurements: perftest's latency tests (a ping-pong between two
//! pinned application threads for WRITE and SEND; a loop of one thread
//! for READ and atomics) and bandwidth tests (one thread keeping every QP's
//! send queue full, the other reposting receives for SEND).

use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::{Duration, Instant};

use rnic_driver::{
    send_flags, Payload, RecvWr, RemoteAddr, SendOp, SendWr, Sge, WcOpcode, WcStatus,
    WorkCompletion,
};

use crate::cpu;
use crate::setup::{Setup, Side};
use crate::stats::{Bandwidth, Latency};

/// The operation a test measures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    Write,
    Send,
    Read,
    Atomic,
}

/// How long a measurement runs: `iters` messages, or until `until`.
#[derive(Debug, Clone, Copy)]
pub struct Budget {
    pub iters: u64,
    pub until: Option<Instant>,
    /// This thread measures: a run longer than [`QUIET`] says on stderr,
    /// once a second, how far it has got.
    pub report: bool,
}

/// Runs shorter than this show no progress.
const QUIET: Duration = Duration::from_secs(2);
/// Messages between two looks at the clock for progress.
const PROGRESS_EVERY: u64 = 4096;

thread_local! {
    /// The measuring thread's progress: when its run started, the next
    /// message count to look at the clock, the seconds last shown.
    static PROGRESS: std::cell::Cell<(Instant, u64, u64)> =
        std::cell::Cell::new((Instant::now(), 0, 0));
}

impl Budget {
    /// The same budget for a thread that does not measure.
    pub fn quiet(self) -> Budget {
        Budget {
            report: false,
            ..self
        }
    }

    /// Whether message `i` is the last of a run of a number of messages.
    fn last(&self, i: u64) -> bool {
        self.until.is_none() && i + 1 == self.iters
    }

    fn more(&self, done: u64) -> bool {
        if self.report {
            self.progress(done);
        }
        match self.until {
            Some(t) => done % 64 != 0 || Instant::now() < t,
            None => done < self.iters,
        }
    }

    /// Shows how far a long run has got, at most once a second.
    fn progress(&self, done: u64) {
        PROGRESS.with(|p| {
            let (start, next, shown) = p.get();
            if done == 0 {
                p.set((Instant::now(), PROGRESS_EVERY, 0));
                return;
            }
            if done < next {
                return;
            }
            let t = start.elapsed();
            let mut seconds = shown;
            if t >= QUIET && t.as_secs() > shown {
                seconds = t.as_secs();
                match self.until {
                    Some(end) => {
                        let total = end.saturating_duration_since(start).as_secs_f64();
                        eprintln!("rnic-perf: {seconds} of {total:.0} s, {done} messages");
                    }
                    None => eprintln!(
                        "rnic-perf: {done} of {} messages ({} %), {seconds} s",
                        self.iters,
                        done * 100 / self.iters.max(1)
                    ),
                }
            }
            p.set((start, done + PROGRESS_EVERY, seconds));
        });
    }
}

/// Knobs of a run.
#[derive(Debug, Clone, Copy)]
pub struct Knobs {
    pub size: usize,
    pub inline: usize,
    pub depth: u32,
    /// Receives a SEND bandwidth test keeps posted per QP.
    pub rx_depth: u32,
    /// Every `cq_mod`-th work request is signaled.
    pub cq_mod: u32,
}

/// Gives up (a hung device or peer) after this long without progress.
const STALL: Duration = Duration::from_secs(20);

/// The tag of iteration `i` in a message's last byte: never 0.
fn tag(i: u64) -> u8 {
    (i % 255) as u8 + 1
}

/// Spins until byte `at` of `side`'s buffer reads `want`.
fn wait_byte(side: &Side, at: usize, want: u8) {
    let mut b = [0u8];
    // As in `poll_some`: the clock only for a long wait.
    let mut start = None;
    let mut spins = 0u32;
    loop {
        side.mr.read(at, &mut b).expect("read the buffer");
        if b[0] == want {
            return;
        }
        spins = spins.wrapping_add(1);
        if spins % 1024 == 0 {
            let since = start.get_or_insert_with(Instant::now);
            assert!(since.elapsed() < STALL, "no message within {STALL:?}");
        }
        side.idle();
    }
}

/// Polls `side`'s CQ for at least one completion; returns how many
/// receive completions were among them (every completion must succeed).
fn poll_some(side: &Side, wc: &mut [WorkCompletion]) -> (usize, usize) {
    // The clock is read only once the wait is long: reading it on every
    // call would be part of the latency measured.
    let mut start = None;
    let mut spins = 0u32;
    loop {
        let n = side.cq.poll(wc).expect("poll");
        if n > 0 {
            let mut recvs = 0;
            for w in &wc[..n] {
                assert_eq!(w.status, WcStatus::Success, "{w:?}");
                recvs += usize::from(matches!(
                    w.opcode,
                    WcOpcode::Recv | WcOpcode::RecvRdmaWithImm
                ));
            }
            return (n, recvs);
        }
        spins = spins.wrapping_add(1);
        if spins % 1024 == 0 {
            let since = start.get_or_insert_with(Instant::now);
            assert!(since.elapsed() < STALL, "no completion within {STALL:?}");
        }
        side.idle();
    }
}

/// A send work request of `op` to the peer's buffer at `remote`: the
/// message lands at its start (or is read from there).
fn request<'a>(
    op: Op,
    remote: RemoteAddr,
    k: &Knobs,
    inline: &'a [u8],
    sge: &'a [Sge; 1],
    signaled: bool,
) -> SendWr<'a> {
    let op = match op {
        Op::Write => SendOp::RdmaWrite { remote },
        Op::Send => SendOp::Send,
        Op::Read => SendOp::RdmaRead { remote },
        Op::Atomic => SendOp::AtomicFetchAndAdd { remote, add: 1 },
    };
    let payload = if !inline.is_empty() && k.size <= k.inline {
        Payload::Inline(inline)
    } else {
        Payload::Sgl(sge)
    };
    SendWr {
        wr_id: 0,
        op,
        payload,
        flags: if signaled { send_flags::SIGNALED } else { 0 },
    }
}

/// A receive of the whole buffer: any message size of the run fits, so
/// receives left posted from one size serve the next.
fn recv_sge(side: &Side) -> [Sge; 1] {
    [Sge {
        addr: side.mr.addr(),
        length: side.mr.len() as u32,
        lkey: side.mr.lkey(),
    }]
}

/// Receives posted behind one doorbell at most.
const RECV_BATCH: usize = 64;

/// Posts receives on QP `q` of `side` until `target` are outstanding, in
/// batches behind one doorbell each (an inline device runs in the thread
/// that rings: a doorbell per receive would keep the receiver from its
/// next post while the device runs the sender's traffic).
fn fill_recvs(side: &Side, q: usize, target: u32) {
    let sge = recv_sge(side);
    let r = RecvWr {
        wr_id: 0,
        sg_list: &sge,
    };
    let batch = [r; RECV_BATCH];
    loop {
        let missing = target.saturating_sub(side.recvs[q].load(Ordering::Relaxed)) as usize;
        if missing == 0 {
            return;
        }
        let n = missing.min(RECV_BATCH);
        side.qps[q].post_recv(&batch[..n]).expect("post_recv");
        side.recvs[q].fetch_add(n as u32, Ordering::Relaxed);
    }
}

/// Posts receives on every QP of `side` until `target` are outstanding
/// on each.
pub fn post_receives(side: &Side, target: u32) {
    for q in 0..side.qps.len() {
        fill_recvs(side, q, target);
    }
}

/// Counts `n` receive completions of QP `q` and posts their replacements.
fn repost(side: &Side, q: usize, n: usize, target: u32) {
    side.recvs[q].fetch_sub(n as u32, Ordering::Relaxed);
    fill_recvs(side, q, target);
}

/// The ping-pong half of one side, writing or sending to the peer's
/// buffer at `peer`: `first` sends first. Returns the half round trips
/// (of the side that sends first) and the thread's CPU time.
pub fn ping_pong(
    op: Op,
    me: &Side,
    peer: RemoteAddr,
    k: &Knobs,
    b: Budget,
    first: bool,
) -> (Vec<f64>, u64) {
    let size = k.size;
    let qp = &me.qps[0];
    let mut wc = [WorkCompletion::default(); 16];
    let src = [Sge {
        addr: me.mr.addr() + size as u64,
        length: size as u32,
        lkey: me.mr.lkey(),
    }];
    let mut inline = vec![0u8; if size <= k.inline { size } else { 0 }];
    let target = k.depth / 2;
    if op == Op::Send {
        fill_recvs(me, 0, target);
    }
    let mut samples = Vec::with_capacity(b.iters.min(1 << 24) as usize);
    let cpu0 = cpu::thread_ns();
    let mut unsignaled = 0;
    let mut i = 0u64;
    // Wait for the peer's message `i` (WRITE: its tag in our buffer; SEND:
    // a receive completion, reposted).
    let wait = |i: u64, wc: &mut [WorkCompletion]| match op {
        Op::Write => wait_byte(me, size - 1, tag(i)),
        _ => loop {
            let (_, recvs) = poll_some(me, wc);
            repost(me, 0, recvs, target);
            if recvs > 0 {
                break;
            }
        },
    };
    while b.more(i) {
        if !first {
            wait(i, &mut wc);
        }
        let t = Instant::now();
        // The last one too: a run leaves no unsignaled WQE behind to fill
        // the send queue of the runs after it.
        let signaled = unsignaled + 1 >= k.cq_mod || b.last(i);
        if let Some(last) = inline.last_mut() {
            *last = tag(i);
        } else {
            me.mr
                .write(2 * size - 1, &[tag(i)])
                .expect("write the source");
        }
        let wr = request(op, peer, k, &inline, &src, signaled);
        qp.post_send(&[wr]).expect("post_send");
        if signaled {
            unsignaled = 0;
            if op == Op::Write {
                poll_some(me, &mut wc);
            }
        } else {
            unsignaled += 1;
        }
        if first {
            wait(i, &mut wc);
            samples.push(t.elapsed().as_nanos() as f64 / 2.0);
        }
        i += 1;
    }
    (samples, cpu::thread_ns() - cpu0)
}

/// A ping-pong of `op` driven by one application thread, which plays
/// both sides in turn (the device runs on its own thread, on the other
/// core): half round trips.
fn ping_pong_one_thread(op: Op, s: &Setup, k: &Knobs, b: Budget) -> (Latency, f64) {
    cpu::pin(0);
    let size = k.size;
    let mut wc = [WorkCompletion::default(); 16];
    let sides = [&s.a, &s.b];
    let src: Vec<[Sge; 1]> = sides
        .iter()
        .map(|me| {
            [Sge {
                addr: me.mr.addr() + size as u64,
                length: size as u32,
                lkey: me.mr.lkey(),
            }]
        })
        .collect();
    let target = k.depth / 2;
    if op == Op::Send {
        for me in sides {
            fill_recvs(me, 0, target);
        }
    }
    let mut inline = vec![0u8; if size <= k.inline { size } else { 0 }];
    let mut unsignaled = [0u32; 2];
    let mut samples = Vec::with_capacity(b.iters.min(1 << 24) as usize);
    let cpu0 = cpu::thread_ns();
    let mut i = 0u64;
    while b.more(i) {
        let t = Instant::now();
        for (me, peer) in [(0, 1), (1, 0)] {
            let (from, to) = (sides[me], sides[peer]);
            let signaled = unsignaled[me] + 1 >= k.cq_mod || b.last(i);
            if let Some(last) = inline.last_mut() {
                *last = tag(i);
            } else {
                from.mr
                    .write(2 * size - 1, &[tag(i)])
                    .expect("write the source");
            }
            let wr = request(op, to.remote(), k, &inline, &src[me], signaled);
            from.qps[0].post_send(&[wr]).expect("post_send");
            unsignaled[me] = if signaled { 0 } else { unsignaled[me] + 1 };
            match op {
                Op::Write => {
                    if signaled {
                        poll_some(from, &mut wc);
                    }
                    wait_byte(to, size - 1, tag(i));
                }
                _ => loop {
                    let (_, recvs) = poll_some(to, &mut wc);
                    repost(to, 0, recvs, target);
                    if recvs > 0 {
                        break;
                    }
                },
            }
            // Send completions of the side that sent land on its CQ.
            if op == Op::Send && signaled {
                poll_some(from, &mut wc);
            }
        }
        samples.push(t.elapsed().as_nanos() as f64 / 2.0);
        i += 1;
    }
    let n = samples.len().max(1) as f64;
    let cpu = (cpu::thread_ns() - cpu0) as f64 / n;
    (Latency::new(samples), cpu)
}

/// A latency test of `op` in `s`: half round trips for WRITE and SEND,
/// whole operations for READ and atomics; and the CPU time per message on
/// the application's threads. The ping-pongs run on two application
/// threads, pinned to two cores, with an inline device; with a device
/// thread, on one application thread, leaving the other core to the
/// device.
pub fn latency(op: Op, s: &Setup, k: &Knobs, b: Budget, one_thread: bool) -> (Latency, f64) {
    match op {
        Op::Write | Op::Send if one_thread => ping_pong_one_thread(op, s, k, b),
        Op::Write | Op::Send => thread::scope(|sc| {
            // Both sides run the same number of iterations.
            assert!(b.until.is_none(), "a ping-pong runs a number of iterations");
            let peer = sc.spawn(|| {
                cpu::pin(1);
                ping_pong(op, &s.b, s.a.remote(), k, b.quiet(), false)
            });
            cpu::pin(0);
            let (samples, cpu_a) = ping_pong(op, &s.a, s.b.remote(), k, b, true);
            let (_, cpu_b) = peer.join().expect("the peer thread");
            let n = samples.len().max(1) as f64;
            (Latency::new(samples), (cpu_a + cpu_b) as f64 / n)
        }),
        Op::Read | Op::Atomic => with_peer_driven(s, || {
            cpu::pin(0);
            requests(op, &s.a, s.b.remote(), k, b)
        }),
    }
}

/// Runs `f` on this thread while, if side `b`'s device is run only by
/// its own thread and `f` gives it none, a thread on core 1 runs it.
fn with_peer_driven<R>(s: &Setup, f: impl FnOnce() -> R) -> R {
    if !s.b.needs_driver() {
        return f();
    }
    let stop = AtomicBool::new(false);
    thread::scope(|sc| {
        sc.spawn(|| {
            cpu::pin(1);
            s.b.drive_until(&stop)
        });
        let r = f();
        stop.store(true, Ordering::Release);
        r
    })
}

/// READs or atomics from `me` to the peer's buffer at `peer`, one at a
/// time: whole operations, and the CPU time per operation.
pub fn requests(op: Op, me: &Side, peer: RemoteAddr, k: &Knobs, b: Budget) -> (Latency, f64) {
    let size = if op == Op::Atomic { 8 } else { k.size };
    let dst = [Sge {
        addr: me.mr.addr() + k.size.max(8) as u64,
        length: size as u32,
        lkey: me.mr.lkey(),
    }];
    let mut wc = [WorkCompletion::default(); 4];
    let kk = Knobs {
        size,
        inline: 0,
        ..*k
    };
    let mut samples = Vec::with_capacity(b.iters.min(1 << 24) as usize);
    let cpu0 = cpu::thread_ns();
    let mut i = 0;
    while b.more(i) {
        let t = Instant::now();
        let wr = request(op, peer, &kk, &[], &dst, true);
        me.qps[0].post_send(&[wr]).expect("post_send");
        poll_some(me, &mut wc);
        samples.push(t.elapsed().as_nanos() as f64);
        i += 1;
    }
    let n = samples.len().max(1) as f64;
    let cpu = (cpu::thread_ns() - cpu0) as f64 / n;
    (Latency::new(samples), cpu)
}

/// A bandwidth test of `op`: side `a` keeps every QP's send queue full
/// (batches of `cq_mod` requests, one doorbell each, the last signaled);
/// for SEND, side `b` reposts receives as they complete.
pub fn bandwidth(op: Op, s: &Setup, k: &Knobs, b: Budget) -> (Bandwidth, f64) {
    if op != Op::Send {
        return with_peer_driven(s, || {
            cpu::pin(0);
            send_loop(op, &s.a, s.b.remote(), k, b)
        });
    }
    let stop = AtomicBool::new(false);
    thread::scope(|sc| {
        let receiver = sc.spawn(|| {
            cpu::pin(1);
            receive(&s.b, k.rx_depth, || stop.load(Ordering::Acquire))
        });
        cpu::pin(0);
        let (bw, cpu) = send_loop(op, &s.a, s.b.remote(), k, b);
        stop.store(true, Ordering::Release);
        let theirs = receiver.join().expect("the receiver") as f64 / bw.iters.max(1) as f64;
        (bw, cpu + theirs)
    })
}

/// Keeps `depth` receives posted on each of `me`'s QPs, reposting the
/// receives one poll completed on a QP behind one doorbell, until `stop`
/// says so (asked now and then while idle; the
/// receives stay posted for the next run). Returns the thread's CPU time.
pub fn receive(me: &Side, depth: u32, mut stop: impl FnMut() -> bool) -> u64 {
    post_receives(me, depth);
    let cpu0 = cpu::thread_ns();
    let mut wc = [WorkCompletion::default(); 64];
    // Receives completed per QP by one poll, reposted together.
    let mut done = vec![0usize; me.qps.len()];
    let mut idle = 0u32;
    loop {
        let n = me.cq.poll(&mut wc).expect("poll");
        done.fill(0);
        for w in &wc[..n] {
            assert_eq!(w.status, WcStatus::Success, "{w:?}");
            done[me.index_of(w.qp_num)] += 1;
        }
        for (q, &k) in done.iter().enumerate() {
            if k > 0 {
                repost(me, q, k, depth);
            }
        }
        if n == 0 {
            idle = idle.wrapping_add(1);
            if idle % 256 == 0 && stop() {
                return cpu::thread_ns() - cpu0;
            }
            me.idle();
        }
    }
}

/// `me` keeps every QP's send queue full towards the peer's buffer at
/// `peer`: batches of `cq_mod` requests behind one doorbell, the last
/// signaled. Returns the bandwidth and the CPU time per message.
pub fn send_loop(op: Op, me: &Side, peer: RemoteAddr, k: &Knobs, b: Budget) -> (Bandwidth, f64) {
    let size = if op == Op::Atomic { 8 } else { k.size };
    let batch = k.cq_mod.clamp(1, k.depth) as u64;
    let nq = me.qps.len();
    let src = [Sge {
        addr: me.mr.addr() + size.max(8) as u64,
        length: size as u32,
        lkey: me.mr.lkey(),
    }];
    let inline = vec![
        0x5au8;
        if size <= k.inline && op.inlinable() {
            size
        } else {
            0
        }
    ];
    let kk = Knobs { size, ..*k };
    let wrs: Vec<SendWr<'_>> = (0..batch)
        .map(|j| request(op, peer, &kk, &inline, &src, j == batch - 1))
        .collect();
    let mut outstanding = vec![0u64; nq];
    let mut wc = [WorkCompletion::default(); 64];
    let (mut posted, mut done) = (0u64, 0u64);
    let mut marks: Vec<(Instant, u64)> = Vec::with_capacity(4096);
    let cpu0 = cpu::thread_ns();
    let start = Instant::now();
    let mut last = start;
    // Empty polls: the stall check reads the clock once per 1024.
    let mut empty = 0u32;
    let mut q = 0;
    while b.more(posted) || done < posted {
        if b.more(posted) && outstanding[q] + batch <= k.depth as u64 {
            me.qps[q].post_send(&wrs).expect("post_send");
            outstanding[q] += batch;
            posted += batch;
            q = (q + 1) % nq;
            continue;
        }
        let n = me.cq.poll(&mut wc).expect("poll");
        for w in &wc[..n] {
            assert_eq!(w.status, WcStatus::Success, "{w:?}");
            outstanding[me.index_of(w.qp_num)] -= batch;
            done += batch;
        }
        if n > 0 {
            let now = Instant::now();
            if marks.len() < marks.capacity() {
                marks.push((now, done));
            }
            last = now;
        } else {
            empty = empty.wrapping_add(1);
            if empty % 1024 == 0 {
                assert!(last.elapsed() < STALL, "no completion within {STALL:?}");
            }
            // Every QP full: the next completion frees one.
            q = (q + 1) % nq;
            me.idle();
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    let cpu = cpu::thread_ns() - cpu0;
    let peak = peak_rate(&marks, start, size);
    let bw = Bandwidth {
        size,
        iters: done,
        seconds,
        peak: peak.max((size as u64 * done) as f64 / seconds),
    };
    (bw, cpu as f64 / done.max(1) as f64)
}

/// The best byte rate over windows of a twentieth of the completions.
fn peak_rate(marks: &[(Instant, u64)], start: Instant, size: usize) -> f64 {
    let w = (marks.len() / 20).max(1);
    let mut best = 0.0f64;
    let mut prev = (start, 0u64);
    for chunk in marks.chunks(w) {
        let end = *chunk.last().expect("a non-empty chunk");
        let secs = end.0.duration_since(prev.0).as_secs_f64();
        if secs > 0.0 {
            best = best.max(((end.1 - prev.1) * size as u64) as f64 / secs);
        }
        prev = end;
    }
    best
}

impl Op {
    fn inlinable(self) -> bool {
        matches!(self, Op::Write | Op::Send)
    }
}

/// The work request id of [`signal`]'s WRITE (every other is 0).
const SIGNAL_WR_ID: u64 = u64::MAX;

/// Writes `seq` into the peer's control word at `to` (an inline RDMA
/// WRITE on `me`'s first QP, waited for).
pub fn signal(me: &Side, to: RemoteAddr, seq: u64) {
    let v = seq.to_le_bytes();
    let wr = SendWr {
        wr_id: SIGNAL_WR_ID,
        op: SendOp::RdmaWrite { remote: to },
        payload: Payload::Inline(&v),
        flags: send_flags::SIGNALED,
    };
    me.qps[0].post_send(&[wr]).expect("post_send");
    let mut wc = [WorkCompletion::default(); 16];
    // Completions of the run may still be queued: wait for this one.
    loop {
        let (n, _) = poll_some(me, &mut wc);
        if wc[..n].iter().any(|w| w.wr_id == SIGNAL_WR_ID) {
            return;
        }
    }
}

/// The control word of `me`: the last 8 bytes of its buffer.
pub fn word(me: &Side) -> u64 {
    let mut b = [0u8; 8];
    me.mr
        .read(me.mr.len() - 8, &mut b)
        .expect("read the control word");
    u64::from_le_bytes(b)
}

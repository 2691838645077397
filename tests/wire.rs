//! RC traffic between two NICs on a switch, through a wire that drops,
//! duplicates, reorders and corrupts frames.
//!
//! Four QP pairs (two with their requester on each NIC) run a mix of every
//! RC operation (SEND, SEND with immediate, RDMA WRITE, WRITE with
//! immediate, RDMA READ, compare-and-swap, fetch-and-add), of sizes from 0
//! bytes to 1 MiB (most small, a few large), all signaled. Every
//! completion must be successful and arrive in order; every byte that
//! lands is checked against what was sent; receive completions come once
//! per message, in order, with their length and immediate data; the
//! atomics return exactly the sequence of values that executing each one
//! exactly once gives. Afterwards the port counters must show the
//! retransmissions, duplicates and sequence NAKs the faults caused, and
//! exactly as many ICRC drops as the injector corrupted frames.
//!
//! Inline mode runs a million messages on a virtual clock (the run is the
//! same for a seed); thread mode fewer, on the host clock.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use rnic_emu::net::FaultConfig;
use rnic_tests::fabric::Fabric;
use rnic_tests::*;

const SQ_DEPTH: u32 = 32;
const RQ_DEPTH: u32 = 32;
/// Largest RDMA WRITE or READ.
const MAX_RDMA: usize = 1 << 20;
/// Largest SEND (each receive buffer holds one).
const MAX_SEND: usize = 64 << 10;
/// Gather sources at the requester and READ sources at the responder.
const SRC_LEN: usize = 2 << 20;
/// WRITE destinations at the responder, READ landings at the requester.
const RING_LEN: usize = 4 << 20;
/// Slots for atomic results at the requester.
const RESULT_SLOTS: usize = 64;

/// xorshift64*.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// A message size: mostly small, now and then up to `max`.
    fn size(&mut self, max: usize) -> usize {
        let p = self.below(10_000);
        let top = if p < 9_000 {
            64
        } else if p < 9_900 {
            4096
        } else if p < 9_990 {
            64 << 10
        } else {
            1 << 20
        };
        self.below(top.min(max) + 1)
    }
}

/// A ring of byte ranges handed out and freed in order.
struct Ring {
    head: u64,
    tail: u64,
    /// Ends of the ranges handed out, oldest first.
    ends: VecDeque<u64>,
}

impl Ring {
    fn new() -> Self {
        Ring {
            head: 0,
            tail: 0,
            ends: VecDeque::new(),
        }
    }

    /// An offset for `len` contiguous bytes, if there is room.
    fn alloc(&mut self, len: usize) -> Option<usize> {
        let len = len as u64;
        let ring = RING_LEN as u64;
        let mut at = self.head;
        if at % ring + len > ring {
            at = at.next_multiple_of(ring);
        }
        if at + len - self.tail > ring {
            return None;
        }
        self.head = at + len;
        self.ends.push_back(self.head);
        Some((at % ring) as usize)
    }

    fn free_oldest(&mut self) {
        if let Some(end) = self.ends.pop_front() {
            self.tail = end;
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Send,
    SendImm,
    Write,
    WriteImm,
    Read,
    CmpSwap,
    FetchAdd,
}

#[derive(Debug)]
struct Op {
    id: u64,
    kind: Kind,
    len: usize,
    /// Offset in the gather source (SEND/WRITE) or READ source.
    src: usize,
    /// Offset in the WRITE ring or READ ring (unused otherwise).
    dst: usize,
    /// What an atomic must return.
    orig: u64,
}

/// A receive completion the responder must see next.
#[derive(Debug)]
struct RecvExpect {
    id: u64,
    kind: Kind,
    len: usize,
    src: usize,
}

/// One QP pair and its memory.
struct Flow {
    req_qp: EQp,
    req_cq: ECq,
    resp_qp: EQp,
    resp_cq: ECq,
    src: EMr,
    src_copy: Vec<u8>,
    land: EMr,
    results: EMr,
    rsrc: EMr,
    rsrc_copy: Vec<u8>,
    dst: EMr,
    rbufs: EMr,
    atomics: EMr,
    pending: VecDeque<Op>,
    expect: VecDeque<RecvExpect>,
    write_ring: Ring,
    read_ring: Ring,
    fetch_adds: u64,
    cmp_swaps: u64,
    next_id: u64,
    target: u64,
    done: u64,
    recvs_done: u64,
    rng: Rng,
}

fn mr(pd: &EPd, len: usize) -> EMr {
    pd.alloc_mr(len, ALL_ACCESS)
        .unwrap_or_else(|e| panic!("alloc_mr({len}): {e}"))
}

impl Flow {
    fn new(req: &Ctx, resp: &Ctx, conn: &Conn, seed: u64, target: u64) -> Flow {
        let (pd_q, pd_r) = (req.alloc_pd().unwrap(), resp.alloc_pd().unwrap());
        let req_cq = req.create_cq(2 * SQ_DEPTH).unwrap();
        let resp_cq = resp.create_cq(2 * RQ_DEPTH).unwrap();
        let c = QpCap {
            max_send_wr: SQ_DEPTH,
            max_recv_wr: RQ_DEPTH,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let req_qp = create_qp(&pd_q, &req_cq, &req_cq, c, false);
        let resp_qp = create_qp(&pd_r, &resp_cq, &resp_cq, c, false);
        connect_to(resp, &req_qp, resp_qp.qp_num(), conn);
        connect_to(req, &resp_qp, req_qp.qp_num(), conn);
        let src_copy = pattern(seed, SRC_LEN);
        let rsrc_copy = pattern(seed ^ 0xabcd, SRC_LEN);
        let f = Flow {
            src: mr(&pd_q, SRC_LEN),
            land: mr(&pd_q, RING_LEN),
            results: mr(&pd_q, RESULT_SLOTS * 8),
            rsrc: mr(&pd_r, SRC_LEN),
            dst: mr(&pd_r, RING_LEN),
            rbufs: mr(&pd_r, RQ_DEPTH as usize * MAX_SEND),
            atomics: mr(&pd_r, 16),
            src_copy,
            rsrc_copy,
            req_qp,
            req_cq,
            resp_qp,
            resp_cq,
            pending: VecDeque::new(),
            expect: VecDeque::new(),
            write_ring: Ring::new(),
            read_ring: Ring::new(),
            fetch_adds: 0,
            cmp_swaps: 0,
            next_id: 0,
            target,
            done: 0,
            recvs_done: 0,
            rng: Rng(seed | 1),
        };
        write_mr(&f.src, 0, &f.src_copy);
        write_mr(&f.rsrc, 0, &f.rsrc_copy);
        for i in 0..RQ_DEPTH as u64 {
            f.post_recv(i);
        }
        f
    }

    fn post_recv(&self, n: u64) {
        let slot = (n % RQ_DEPTH as u64) as usize;
        let sg = [sge(&self.rbufs, slot * MAX_SEND, MAX_SEND as u32)];
        post_recv(&self.resp_qp, recv(n, &sg));
    }

    /// Posts what the queues and rings allow; returns whether it posted.
    fn post(&mut self) -> bool {
        let mut wrs = Vec::new();
        while self.next_id < self.target && self.pending.len() + wrs.len() < SQ_DEPTH as usize {
            let kind = match self.rng.below(7) {
                0 => Kind::Send,
                1 => Kind::SendImm,
                2 => Kind::Write,
                3 => Kind::WriteImm,
                4 => Kind::Read,
                5 => Kind::CmpSwap,
                _ => Kind::FetchAdd,
            };
            let needs_recv = matches!(kind, Kind::Send | Kind::SendImm | Kind::WriteImm);
            if needs_recv && self.expect.len() >= RQ_DEPTH as usize {
                break;
            }
            let len = match kind {
                Kind::Send | Kind::SendImm => self.rng.size(MAX_SEND),
                Kind::Write | Kind::WriteImm | Kind::Read => self.rng.size(MAX_RDMA),
                Kind::CmpSwap | Kind::FetchAdd => 8,
            };
            let src = self.rng.below(SRC_LEN - len + 1);
            let dst = match kind {
                Kind::Write | Kind::WriteImm => match self.write_ring.alloc(len) {
                    Some(d) => d,
                    None => break,
                },
                Kind::Read => match self.read_ring.alloc(len) {
                    Some(d) => d,
                    None => break,
                },
                _ => 0,
            };
            let id = self.next_id;
            self.next_id += 1;
            let orig = match kind {
                Kind::FetchAdd => {
                    self.fetch_adds += 1;
                    self.fetch_adds - 1
                }
                Kind::CmpSwap => {
                    self.cmp_swaps += 1;
                    self.cmp_swaps - 1
                }
                _ => 0,
            };
            if needs_recv {
                self.expect.push_back(RecvExpect { id, kind, len, src });
            }
            self.pending.push_back(Op {
                id,
                kind,
                len,
                src,
                dst,
                orig,
            });
            wrs.push(id);
        }
        if wrs.is_empty() {
            return false;
        }
        let first = self.pending.len() - wrs.len();
        let sges: Vec<Sge> = self
            .pending
            .iter()
            .skip(first)
            .map(|op| self.local_sge(op))
            .collect();
        let batch: Vec<SendWr<'_>> = self
            .pending
            .iter()
            .skip(first)
            .zip(&sges)
            .map(|(op, sg)| self.wr(op, std::slice::from_ref(sg)))
            .collect();
        self.req_qp
            .post_send(&batch)
            .unwrap_or_else(|e| panic!("post_send: {e}"));
        true
    }

    fn local_sge(&self, op: &Op) -> Sge {
        match op.kind {
            Kind::Read => sge(&self.land, op.dst, op.len as u32),
            Kind::CmpSwap | Kind::FetchAdd => {
                sge(&self.results, (op.id as usize % RESULT_SLOTS) * 8, 8)
            }
            _ => sge(&self.src, op.src, op.len as u32),
        }
    }

    fn wr<'a>(&self, op: &Op, sgl: &'a [Sge]) -> SendWr<'a> {
        let remote = |base: &EMr, off: usize| RemoteAddr {
            addr: base.addr() + off as u64,
            rkey: base.rkey(),
        };
        let imm = (op.id as u32).to_be_bytes();
        let sop = match op.kind {
            Kind::Send => SendOp::Send,
            Kind::SendImm => SendOp::SendWithImm { imm },
            Kind::Write => SendOp::RdmaWrite {
                remote: remote(&self.dst, op.dst),
            },
            Kind::WriteImm => SendOp::RdmaWriteWithImm {
                remote: remote(&self.dst, op.dst),
                imm,
            },
            Kind::Read => SendOp::RdmaRead {
                remote: remote(&self.rsrc, op.src),
            },
            Kind::CmpSwap => SendOp::AtomicCmpAndSwp {
                remote: remote(&self.atomics, 0),
                compare: op.orig,
                swap: op.orig + 1,
            },
            Kind::FetchAdd => SendOp::AtomicFetchAndAdd {
                remote: remote(&self.atomics, 8),
                add: 1,
            },
        };
        SendWr {
            wr_id: op.id,
            op: sop,
            payload: Payload::Sgl(sgl),
            flags: send_flags::SIGNALED,
        }
    }

    /// Takes and checks completions; returns whether there were any.
    fn poll(&mut self) -> bool {
        let mut wc = [WorkCompletion::default(); 16];
        let mut moved = false;
        let n = self.req_cq.poll(&mut wc).expect("poll requester");
        for w in &wc[..n] {
            let op = self
                .pending
                .pop_front()
                .expect("a completion for nothing posted");
            assert_eq!(
                (w.wr_id, w.status),
                (op.id, WcStatus::Success),
                "requester completion {w:#?} for {op:?}"
            );
            self.check_done(&op);
            self.done += 1;
            moved = true;
        }
        let n = self.resp_cq.poll(&mut wc).expect("poll responder");
        for w in &wc[..n] {
            let e = self.expect.pop_front().expect("a receive for nothing sent");
            assert_eq!(w.status, WcStatus::Success, "{w:#?} for {e:?}");
            assert_eq!(w.wr_id, self.recvs_done, "receives in order: {w:#?}");
            assert_eq!(w.byte_len as usize, e.len, "{w:#?} for {e:?}");
            let (opcode, imm) = match e.kind {
                Kind::Send => (WcOpcode::Recv, None),
                Kind::SendImm => (WcOpcode::Recv, Some((e.id as u32).to_be_bytes())),
                _ => (WcOpcode::RecvRdmaWithImm, Some((e.id as u32).to_be_bytes())),
            };
            assert_eq!((w.opcode, w.imm_data), (opcode, imm), "{w:#?} for {e:?}");
            if e.kind != Kind::WriteImm {
                let slot = (w.wr_id % RQ_DEPTH as u64) as usize;
                let got = read_mr(&self.rbufs, slot * MAX_SEND, e.len);
                assert!(
                    got == self.src_copy[e.src..e.src + e.len],
                    "SEND {} of {} bytes arrived wrong",
                    e.id,
                    e.len
                );
            }
            self.post_recv(self.recvs_done + RQ_DEPTH as u64);
            self.recvs_done += 1;
            moved = true;
        }
        moved
    }

    fn check_done(&mut self, op: &Op) {
        match op.kind {
            Kind::Write | Kind::WriteImm => {
                let got = read_mr(&self.dst, op.dst, op.len);
                assert!(
                    got == self.src_copy[op.src..op.src + op.len],
                    "WRITE {} of {} bytes landed wrong",
                    op.id,
                    op.len
                );
                self.write_ring.free_oldest();
            }
            Kind::Read => {
                let got = read_mr(&self.land, op.dst, op.len);
                assert!(
                    got == self.rsrc_copy[op.src..op.src + op.len],
                    "READ {} of {} bytes came back wrong",
                    op.id,
                    op.len
                );
                self.read_ring.free_oldest();
            }
            Kind::CmpSwap | Kind::FetchAdd => {
                let got = read_u64(&self.results, (op.id as usize % RESULT_SLOTS) * 8);
                assert_eq!(got, op.orig, "{op:?}: executed other than once");
            }
            Kind::Send | Kind::SendImm => {}
        }
    }

    fn finished(&self) -> bool {
        self.done == self.target && self.expect.is_empty()
    }
}

/// Runs `total` messages over four flows through `faults` on NIC 0's port,
/// with local ACK timeout code `timeout`; returns the fabric for the
/// counter checks.
fn run(mode: ExecMode, total: u64, faults: FaultConfig, timeout: u8, seed: u64) -> Fabric {
    let _ = env_logger::builder().is_test(true).try_init();
    let fabric = Fabric::new(mode, 2, seed);
    let conn = Conn {
        timeout,
        retry_cnt: 7,
        mtu: Mtu::Mtu4096,
        max_rd_atomic: 16,
        max_dest_rd_atomic: 16,
        ..Conn::default()
    };
    let (a, b) = (&fabric.nics[0].ctx, &fabric.nics[1].ctx);
    let mut flows: Vec<Flow> = (0..4u64)
        .map(|i| {
            let (req, resp) = if i % 2 == 0 { (a, b) } else { (b, a) };
            Flow::new(req, resp, &conn, seed * 10 + i, total / 4)
        })
        .collect();
    fabric.nics[0].faults.set(faults);
    let start = Instant::now();
    let mut last = Instant::now();
    let limit = Duration::from_secs(120);
    while !flows.iter().all(Flow::finished) {
        let mut moved = false;
        for f in &mut flows {
            moved |= f.post();
            moved |= f.poll();
        }
        if moved {
            last = Instant::now();
        } else {
            fabric.idle(Duration::from_millis(1));
        }
        if last.elapsed() > Duration::from_secs(20) || start.elapsed() > limit {
            let state: Vec<_> = flows
                .iter()
                .map(|f| (f.done, f.target, f.pending.len(), f.expect.len()))
                .collect();
            panic!("no progress: (done, target, pending, receives due) per flow: {state:?}");
        }
    }
    // No faults while the held frames drain and the counters settle.
    fabric.nics[0].faults.set(FaultConfig::default());
    for _ in 0..10 {
        fabric.idle(Duration::from_millis(2));
    }
    for f in &flows {
        assert_cq_empty(&f.req_cq.context(), &f.req_cq);
        assert_cq_empty(&f.resp_cq.context(), &f.resp_cq);
        assert_eq!(query_state(&f.req_qp), QpState::Rts);
        assert_eq!(query_state(&f.resp_qp), QpState::Rts);
        assert_eq!(read_u64(&f.atomics, 0), f.cmp_swaps, "compare-and-swaps");
        assert_eq!(read_u64(&f.atomics, 8), f.fetch_adds, "fetch-and-adds");
    }
    eprintln!(
        "{total} messages in {:.1} s ({mode:?})",
        start.elapsed().as_secs_f64()
    );
    fabric
}

/// The port counters of both NICs, summed.
fn port_sum(fabric: &Fabric, idx: usize) -> u64 {
    fabric
        .nics
        .iter()
        .map(|n| n.ctx.query_port_counters(1).unwrap().get(idx))
        .sum()
}

fn lossy() -> FaultConfig {
    FaultConfig {
        drop: 0.05,
        duplicate: 0.01,
        reorder: 0.01,
        corrupt: 0.001,
        ..FaultConfig::default()
    }
}

fn check_counters(fabric: &Fabric) {
    let stats = fabric.nics[0].faults.stats();
    eprintln!("faults: {stats:?}");
    for n in &fabric.nics {
        let c = n.ctx.query_port_counters(1).unwrap();
        let line: Vec<String> = c
            .iter()
            .filter(|(_, v)| *v != 0)
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        eprintln!("NIC {}: {}", n.dev.config().mac[5], line.join(" "));
    }
    assert!(stats.dropped > 0 && stats.duplicated > 0 && stats.corrupted > 0);
    // Every corrupted frame reached a NIC, which dropped it for its ICRC.
    assert_eq!(port_sum(fabric, counter::RX_ICRC_ERRORS), stats.corrupted);
    assert_eq!(port_sum(fabric, counter::RX_MALFORMED), 0);
    assert!(port_sum(fabric, counter::RETRANSMITS) > 0);
    assert!(port_sum(fabric, counter::DUPLICATE_REQUESTS) > 0);
    assert!(port_sum(fabric, counter::SEQ_NAKS_SENT) > 0);
    assert!(port_sum(fabric, counter::SEQ_NAKS_RECEIVED) > 0);
}

/// `default` messages, or `RNIC_WIRE_MESSAGES` if set.
fn messages(default: u64) -> u64 {
    std::env::var("RNIC_WIRE_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn million_messages_through_faults_inline() {
    let fabric = run(ExecMode::Inline, messages(1_000_000), lossy(), 12, 1);
    check_counters(&fabric);
}

#[test]
fn messages_through_faults_thread() {
    // On the host clock each tail loss waits out the timeout: a short one
    // (4.2 ms), which a busy machine may also hit without a loss.
    let fabric = run(ExecMode::Thread, messages(40_000), lossy(), 10, 2);
    check_counters(&fabric);
}

#[test]
fn clean_wire_needs_no_retransmission() {
    for mode in [ExecMode::Inline, ExecMode::Thread] {
        // A timeout no scheduling delay reaches: any retransmission would
        // be the transport's own mistake.
        let fabric = run(mode, 20_000, FaultConfig::default(), 16, 3);
        assert_eq!(port_sum(&fabric, counter::RETRANSMITS), 0, "{mode:?}");
        assert_eq!(port_sum(&fabric, counter::SEQ_NAKS_SENT), 0, "{mode:?}");
        assert_eq!(
            port_sum(&fabric, counter::DUPLICATE_REQUESTS),
            0,
            "{mode:?}"
        );
        assert!(port_sum(&fabric, counter::ACKS_SENT) > 0);
        // The address vectors gave no MAC: ARP resolved it, once per
        // side at most (the side asked first learns from the request).
        let asked = port_sum(&fabric, counter::NEIGH_REQUESTS_SENT);
        assert!((1..=2).contains(&asked), "{mode:?}: {asked} ARP requests");
    }
}

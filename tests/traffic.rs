//! A verified RC traffic generator in two halves, so that requester and
//! responder can live in different processes.
//!
//! Both halves derive the same stream of operations from a seed: the
//! [`Requester`] posts it (SEND, SEND with immediate, RDMA WRITE, WRITE
//! with immediate, RDMA READ, compare-and-swap, fetch-and-add, sizes from
//! 0 to 1 MiB, most small), the [`Responder`] knows from it what each
//! receive must bring. The checks:
//!
//! - every completion on either side is successful and in order;
//! - a receive brings the right length, immediate data and bytes, once,
//!   in order;
//! - what a WRITE placed is read back (a READ of the same range, which the
//!   responder executes after the WRITE) and compared;
//! - a READ returns the responder's bytes;
//! - the atomics return exactly the values that executing each once
//!   gives, and the words hold the final counts.

use std::collections::VecDeque;

use crate::*;

/// Send queue depth of a requester.
pub const SQ_DEPTH: u32 = 32;
/// Receive queue depth of a responder.
pub const RQ_DEPTH: u32 = 32;
/// Largest RDMA WRITE or READ.
pub const MAX_RDMA: usize = 1 << 20;
/// Largest SEND (each receive buffer holds one).
pub const MAX_SEND: usize = 64 << 10;
/// Gather sources at the requester and READ sources at the responder.
pub const SRC_LEN: usize = 2 << 20;
/// WRITE destinations at the responder, READ landings at the requester.
pub const RING_LEN: usize = 4 << 20;
/// Slots for atomic results at the requester.
const RESULT_SLOTS: usize = 64;

/// A message size: mostly small, now and then up to `max`.
fn size(r: &mut Rng, max: usize) -> usize {
    let top = match r.below(10_000) {
        0..=8999 => 64,
        9000..=9899 => 4096,
        9900..=9989 => 64 << 10,
        _ => 1 << 20,
    };
    r.below(top.min(max) + 1)
}

/// What an operation does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// SEND.
    Send,
    /// SEND with immediate.
    SendImm,
    /// RDMA WRITE.
    Write,
    /// RDMA WRITE with immediate.
    WriteImm,
    /// RDMA READ.
    Read,
    /// Compare-and-swap.
    CmpSwap,
    /// Fetch-and-add.
    FetchAdd,
}

impl Kind {
    fn takes_receive(self) -> bool {
        matches!(self, Kind::Send | Kind::SendImm | Kind::WriteImm)
    }
}

/// One operation of the stream.
#[derive(Debug, Clone, Copy)]
struct Planned {
    kind: Kind,
    len: usize,
    /// Offset in the gather source (SEND, WRITE) or the READ source.
    src: usize,
}

/// The stream both halves derive from a seed.
struct Plan(Rng);

impl Plan {
    fn new(seed: u64) -> Self {
        Plan(Rng(seed | 1))
    }

    fn next(&mut self) -> Planned {
        let r = &mut self.0;
        let kind = match r.below(7) {
            0 => Kind::Send,
            1 => Kind::SendImm,
            2 => Kind::Write,
            3 => Kind::WriteImm,
            4 => Kind::Read,
            5 => Kind::CmpSwap,
            _ => Kind::FetchAdd,
        };
        let len = match kind {
            Kind::Send | Kind::SendImm => size(r, MAX_SEND),
            Kind::Write | Kind::WriteImm | Kind::Read => size(r, MAX_RDMA),
            Kind::CmpSwap | Kind::FetchAdd => 8,
        };
        let src = r.below(SRC_LEN - len + 1);
        Planned { kind, len, src }
    }
}

/// The requester's gather source for seed `seed`.
fn source(seed: u64) -> Vec<u8> {
    pattern(seed, SRC_LEN)
}

/// The responder's READ source for seed `seed`.
fn read_source(seed: u64) -> Vec<u8> {
    pattern(seed ^ 0xabcd, SRC_LEN)
}

/// A ring of byte ranges handed out and freed in order.
struct Ring {
    head: u64,
    tail: u64,
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

    fn alloc(&mut self, len: usize) -> Option<usize> {
        let (len, ring) = (len as u64, RING_LEN as u64);
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

/// Where a responder's memory is, for its requester.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// QP number.
    pub qpn: u32,
    /// The READ source.
    pub rsrc: RemoteAddr,
    /// The WRITE ring.
    pub dst: RemoteAddr,
    /// Two 8-byte words: compare-and-swap at 0, fetch-and-add at 8.
    pub atomics: RemoteAddr,
}

fn remote(mr: &EMr) -> RemoteAddr {
    RemoteAddr {
        addr: mr.addr(),
        rkey: mr.rkey(),
    }
}

fn mr(pd: &EPd, len: usize) -> EMr {
    pd.alloc_mr(len, ALL_ACCESS)
        .unwrap_or_else(|e| panic!("alloc_mr({len}): {e}"))
}

/// An operation posted and not yet completed.
#[derive(Debug)]
struct Op {
    id: u64,
    kind: Kind,
    len: usize,
    src: usize,
    /// WRITE: offset in the responder's ring; READ: in the landing ring.
    dst: usize,
    /// A READ that reads back a WRITE: the WRITE's source offset.
    readback: Option<usize>,
    /// What an atomic must return.
    orig: u64,
}

/// The responder's half: a QP whose receives are checked.
pub struct Responder {
    /// The QP.
    pub qp: EQp,
    /// Its send and receive CQ.
    pub cq: ECq,
    rbufs: EMr,
    rsrc: EMr,
    dst: EMr,
    atomics: EMr,
    src_copy: Vec<u8>,
    plan: Plan,
    /// The receives the stream still owes, in order.
    expect: VecDeque<(u64, Planned)>,
    /// Receive-taking operations the plan has produced.
    planned: u64,
    /// Receives completed.
    pub received: u64,
    /// Receive-taking operations the requester will send.
    pub total: u64,
}

impl Responder {
    /// A responder QP on `ctx` for the stream of `seed`, whose requester
    /// sends `messages` operations; connect it, then call [`Responder::start`].
    pub fn new(ctx: &Ctx, seed: u64, messages: u64) -> Responder {
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(2 * RQ_DEPTH).unwrap();
        let qp = create_qp(&pd, &cq, &cq, caps(), false);
        let mut plan = Plan::new(seed);
        let total = (0..messages)
            .filter(|_| plan.next().kind.takes_receive())
            .count() as u64;
        let r = Responder {
            rbufs: mr(&pd, RQ_DEPTH as usize * MAX_SEND),
            rsrc: mr(&pd, SRC_LEN),
            dst: mr(&pd, RING_LEN),
            atomics: mr(&pd, 16),
            src_copy: source(seed),
            plan: Plan::new(seed),
            expect: VecDeque::new(),
            planned: 0,
            received: 0,
            total,
            qp,
            cq,
        };
        write_mr(&r.rsrc, 0, &read_source(seed));
        r
    }

    /// What the requester needs to know.
    pub fn window(&self) -> Window {
        Window {
            qpn: self.qp.qp_num(),
            rsrc: remote(&self.rsrc),
            dst: remote(&self.dst),
            atomics: remote(&self.atomics),
        }
    }

    /// Posts the first receives (the QP is at least in INIT).
    pub fn start(&mut self) {
        for i in 0..RQ_DEPTH as u64 {
            self.post_recv(i);
        }
    }

    fn post_recv(&self, n: u64) {
        let slot = (n % RQ_DEPTH as u64) as usize;
        let sg = [sge(&self.rbufs, slot * MAX_SEND, MAX_SEND as u32)];
        post_recv(&self.qp, recv(n, &sg));
    }

    /// Takes and checks receive completions; returns whether there were
    /// any.
    pub fn poll(&mut self) -> bool {
        let mut wc = [WorkCompletion::default(); 16];
        let n = self.cq.poll(&mut wc).expect("poll responder");
        for w in &wc[..n] {
            while self.expect.is_empty() {
                let p = self.plan.next();
                if p.kind.takes_receive() {
                    self.expect.push_back((self.planned, p));
                    self.planned += 1;
                }
            }
            let (k, p) = self.expect.pop_front().expect("an expected receive");
            assert_eq!(w.status, WcStatus::Success, "{w:#?} for receive {k}: {p:?}");
            assert_eq!(w.wr_id, self.received, "receives in order: {w:#?}");
            assert_eq!(w.byte_len as usize, p.len, "{w:#?} for receive {k}: {p:?}");
            let imm = (k as u32).to_be_bytes();
            let (opcode, imm) = match p.kind {
                Kind::Send => (WcOpcode::Recv, None),
                Kind::SendImm => (WcOpcode::Recv, Some(imm)),
                _ => (WcOpcode::RecvRdmaWithImm, Some(imm)),
            };
            assert_eq!((w.opcode, w.imm_data), (opcode, imm), "{w:#?} for {p:?}");
            if p.kind != Kind::WriteImm {
                let slot = (w.wr_id % RQ_DEPTH as u64) as usize;
                let got = read_mr(&self.rbufs, slot * MAX_SEND, p.len);
                assert!(
                    got == self.src_copy[p.src..p.src + p.len],
                    "receive {k} of {} bytes brought other bytes",
                    p.len
                );
            }
            self.post_recv(self.received + RQ_DEPTH as u64);
            self.received += 1;
        }
        n > 0
    }

    /// Whether every receive the stream owes arrived.
    pub fn finished(&self) -> bool {
        self.received == self.total
    }

    /// The final values of the atomic words: (compare-and-swaps,
    /// fetch-and-adds) executed.
    pub fn atomic_words(&self) -> (u64, u64) {
        (read_u64(&self.atomics, 0), read_u64(&self.atomics, 8))
    }
}

/// The requester's half.
pub struct Requester {
    /// The QP.
    pub qp: EQp,
    /// Its send and receive CQ.
    pub cq: ECq,
    peer: Option<Window>,
    src: EMr,
    src_copy: Vec<u8>,
    rsrc_copy: Vec<u8>,
    land: EMr,
    results: EMr,
    plan: Plan,
    /// The next operation of the stream, drawn but not yet posted.
    next: Option<Planned>,
    /// Ranges of the responder's ring WRITEs hold until read back.
    write_ring: Ring,
    read_ring: Ring,
    /// WRITEs completed and not yet read back: (ring offset, source
    /// offset, length).
    to_read_back: VecDeque<(usize, usize, usize)>,
    pending: VecDeque<Op>,
    next_id: u64,
    /// Receive-taking operations posted (their immediate data).
    receives: u64,
    /// Compare-and-swaps and fetch-and-adds posted.
    pub cmp_swaps: u64,
    /// Fetch-and-adds posted.
    pub fetch_adds: u64,
    /// Operations of the stream posted.
    posted: u64,
    /// Operations of the stream to post.
    pub total: u64,
    /// Operations completed (read-backs included).
    pub completed: u64,
}

/// The QP capacities both halves use.
fn caps() -> QpCap {
    QpCap {
        max_send_wr: SQ_DEPTH,
        max_recv_wr: RQ_DEPTH,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    }
}

impl Requester {
    /// A requester QP on `ctx` for the stream of `seed`, to send `messages`
    /// operations; connect it and give it the responder's
    /// [`Window`] with [`Requester::set_peer`].
    pub fn new(ctx: &Ctx, seed: u64, messages: u64) -> Requester {
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(2 * SQ_DEPTH).unwrap();
        let qp = create_qp(&pd, &cq, &cq, caps(), false);
        let r = Requester {
            src: mr(&pd, SRC_LEN),
            land: mr(&pd, RING_LEN),
            results: mr(&pd, RESULT_SLOTS * 8),
            src_copy: source(seed),
            rsrc_copy: read_source(seed),
            plan: Plan::new(seed),
            next: None,
            write_ring: Ring::new(),
            read_ring: Ring::new(),
            to_read_back: VecDeque::new(),
            pending: VecDeque::new(),
            next_id: 0,
            receives: 0,
            cmp_swaps: 0,
            fetch_adds: 0,
            posted: 0,
            total: messages,
            completed: 0,
            peer: None,
            qp,
            cq,
        };
        write_mr(&r.src, 0, &r.src_copy);
        r
    }

    /// The responder's memory.
    pub fn set_peer(&mut self, w: Window) {
        self.peer = Some(w);
    }

    /// The next operation to post, if the queues and rings allow it.
    fn take(&mut self) -> Option<Op> {
        let id = self.next_id;
        if let Some(&(dst, src, len)) = self.to_read_back.front() {
            let at = self.read_ring.alloc(len)?;
            self.to_read_back.pop_front();
            self.next_id += 1;
            return Some(Op {
                id,
                kind: Kind::Read,
                len,
                src: dst,
                dst: at,
                readback: Some(src),
                orig: 0,
            });
        }
        if self.posted == self.total {
            return None;
        }
        let p = *self.next.get_or_insert_with(|| self.plan.next());
        let dst = match p.kind {
            Kind::Write | Kind::WriteImm => self.write_ring.alloc(p.len)?,
            Kind::Read => self.read_ring.alloc(p.len)?,
            _ => 0,
        };
        self.next = None;
        self.posted += 1;
        self.next_id += 1;
        let orig = match p.kind {
            Kind::CmpSwap => {
                self.cmp_swaps += 1;
                self.cmp_swaps - 1
            }
            Kind::FetchAdd => {
                self.fetch_adds += 1;
                self.fetch_adds - 1
            }
            Kind::Send | Kind::SendImm | Kind::WriteImm => {
                self.receives += 1;
                self.receives - 1
            }
            _ => 0,
        };
        Some(Op {
            id,
            kind: p.kind,
            len: p.len,
            src: p.src,
            dst,
            readback: None,
            orig,
        })
    }

    /// Posts what the queue and rings allow; returns whether it posted.
    pub fn post(&mut self) -> bool {
        let first = self.pending.len();
        while self.pending.len() < SQ_DEPTH as usize {
            let Some(op) = self.take() else { break };
            self.pending.push_back(op);
        }
        if self.pending.len() == first {
            return false;
        }
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
        self.qp
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
        let w = self.peer.expect("the responder's window");
        let at = |r: RemoteAddr, off: usize| RemoteAddr {
            addr: r.addr + off as u64,
            rkey: r.rkey,
        };
        let imm = (op.orig as u32).to_be_bytes();
        let sop = match op.kind {
            Kind::Send => SendOp::Send,
            Kind::SendImm => SendOp::SendWithImm { imm },
            Kind::Write => SendOp::RdmaWrite {
                remote: at(w.dst, op.dst),
            },
            Kind::WriteImm => SendOp::RdmaWriteWithImm {
                remote: at(w.dst, op.dst),
                imm,
            },
            Kind::Read if op.readback.is_some() => SendOp::RdmaRead {
                remote: at(w.dst, op.src),
            },
            Kind::Read => SendOp::RdmaRead {
                remote: at(w.rsrc, op.src),
            },
            Kind::CmpSwap => SendOp::AtomicCmpAndSwp {
                remote: at(w.atomics, 0),
                compare: op.orig,
                swap: op.orig + 1,
            },
            Kind::FetchAdd => SendOp::AtomicFetchAndAdd {
                remote: at(w.atomics, 8),
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
    pub fn poll(&mut self) -> bool {
        let mut wc = [WorkCompletion::default(); 16];
        let n = self.cq.poll(&mut wc).expect("poll requester");
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
            self.check(&op);
            self.completed += 1;
        }
        n > 0
    }

    fn check(&mut self, op: &Op) {
        match op.kind {
            Kind::Write | Kind::WriteImm => {
                // Read it back: the range stays the WRITE's until then.
                self.to_read_back.push_back((op.dst, op.src, op.len));
            }
            Kind::Read => {
                let got = read_mr(&self.land, op.dst, op.len);
                let want = match op.readback {
                    Some(src) => &self.src_copy[src..src + op.len],
                    None => &self.rsrc_copy[op.src..op.src + op.len],
                };
                assert!(
                    got == want,
                    "{} {} of {} bytes came back wrong",
                    if op.readback.is_some() {
                        "read-back of WRITE"
                    } else {
                        "READ"
                    },
                    op.id,
                    op.len
                );
                self.read_ring.free_oldest();
                if op.readback.is_some() {
                    self.write_ring.free_oldest();
                }
            }
            Kind::CmpSwap | Kind::FetchAdd => {
                let got = read_u64(&self.results, (op.id as usize % RESULT_SLOTS) * 8);
                assert_eq!(got, op.orig, "{op:?} executed other than once");
            }
            Kind::Send | Kind::SendImm => {}
        }
    }

    /// Whether the whole stream, read-backs included, completed.
    pub fn finished(&self) -> bool {
        self.posted == self.total && self.pending.is_empty() && self.to_read_back.is_empty()
    }

    /// A line on what is left, for a failure message.
    pub fn progress(&self) -> String {
        format!(
            "posted {}/{}, completed {}, pending {}, read-backs due {}",
            self.posted,
            self.total,
            self.completed,
            self.pending.len(),
            self.to_read_back.len()
        )
    }
}

/// The connection parameters of a traffic run: path MTU 4096, 16
/// outstanding READs and atomics each way, retry counts 7, and local ACK
/// timeout code `timeout`.
pub fn conn(timeout: u8) -> Conn {
    Conn {
        timeout,
        retry_cnt: 7,
        mtu: Mtu::Mtu4096,
        max_rd_atomic: 16,
        max_dest_rd_atomic: 16,
        ..Conn::default()
    }
}

//! Thousands of bad frames thrown at a NIC in the middle of live traffic:
//! truncated at every length, every single bit flipped (where a checksum,
//! a length or the ICRC covers it), rewritten with a valid ICRC but
//! another transport version, a foreign P_Key, a QP that does not exist or
//! is connected elsewhere, an unknown opcode or a reserved AETH syndrome,
//! addressed to another host or port, and random garbage. Each must be
//! dropped and counted once, in its counter where its kind says which; the
//! live traffic must complete as if nothing happened, and the device must
//! keep answering commands.

use std::time::{Duration, Instant};

use rnic_emu::net::{Frame, Wire};
use rnic_emu::wire::aeth::{AckKind, AethRepr, CREDITS_INVALID};
use rnic_emu::wire::bth::BthRepr;
use rnic_emu::wire::ethernet::{ethertype, EthernetAddress, EthernetRepr};
use rnic_emu::wire::frame::{FrameRepr, IpRepr};
use rnic_emu::wire::icrc;
use rnic_emu::wire::ipv4::{protocol, Ipv4Address, Ipv4Packet, Ipv4Repr};
use rnic_emu::wire::opcode;
use rnic_emu::wire::reth::RethRepr;
use rnic_emu::wire::roce::RoceRepr;
use rnic_emu::wire::udp::{UdpChecksum, UdpRepr};
use rnic_emu::wire::ROCE_V2_PORT;
use rnic_tests::fabric::Fabric;
use rnic_tests::traffic::{conn, Requester, Responder};
use rnic_tests::*;

/// Where a bad frame must be counted; `Any` for those whose damage may
/// land in any drop counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    At(usize),
    Any,
}

const DROPS: [usize; 6] = [
    counter::RX_MALFORMED,
    counter::RX_ICRC_ERRORS,
    counter::RX_BAD_VERSION,
    counter::RX_BAD_PKEY,
    counter::RX_UNKNOWN_QP,
    counter::RX_IGNORED,
];

/// The corpus frames' source MAC: not a NIC's, so the switch learns it at
/// the injecting port and keeps forwarding the NICs' own traffic right.
const INJECTOR_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x99];

/// A valid frame from NIC 1's address to QP `qpn` of NIC 2.
fn base(op: u8, qpn: u32, payload_len: usize) -> FrameRepr {
    let info = opcode::info(op).unwrap();
    let mut roce = RoceRepr {
        bth: BthRepr {
            opcode: op,
            pkey: 0xffff,
            dest_qp: qpn,
            psn: 0x00ab_cdef,
            ack_req: true,
            ..BthRepr::default()
        },
        payload_len,
        ..RoceRepr::default()
    };
    if info.headers & opcode::headers::RETH != 0 {
        roce.reth = Some(RethRepr {
            va: 0x1000,
            rkey: 0x1234,
            dma_len: payload_len as u32,
        });
    }
    if info.headers & opcode::headers::IMMDT != 0 {
        roce.immdt = Some(rnic_emu::wire::immdt::ImmDtRepr { imm: [1, 2, 3, 4] });
    }
    if info.headers & opcode::headers::AETH != 0 {
        roce.aeth = Some(AethRepr {
            kind: AckKind::Ack {
                credits: CREDITS_INVALID,
            },
            msn: 1,
        });
    }
    FrameRepr {
        eth: EthernetRepr {
            src_addr: EthernetAddress(INJECTOR_MAC),
            dst_addr: EthernetAddress([0x02, 0, 0, 0, 0, 2]),
            vlan: None,
            ethertype: ethertype::IPV4,
        },
        ip: IpRepr::V4(Ipv4Repr {
            src_addr: Ipv4Address([192, 0, 2, 1]),
            dst_addr: Ipv4Address([192, 0, 2, 2]),
            tos: 0,
            ident: 1,
            dont_frag: true,
            ttl: 64,
            protocol: protocol::UDP,
            payload_len: 0,
        }),
        udp: UdpRepr {
            src_port: 0xc001,
            dst_port: ROCE_V2_PORT,
            payload_len: 0,
            checksum: UdpChecksum::None,
        },
        roce,
    }
}

fn emit(r: &FrameRepr) -> Frame {
    let mut buf = vec![0u8; r.buffer_len()];
    r.emit(&mut buf, |p| p.fill(0x5a));
    buf
}

/// Re-seals a frame edited in place: the IPv4 header checksum, then the
/// ICRC.
fn reseal(mut f: Frame) -> Frame {
    Ipv4Packet::new_unchecked(&mut f[14..]).fill_checksum();
    icrc::fill(&mut f[14..]).unwrap();
    f
}

fn corpus(qpn: u32) -> Vec<(Frame, Expect)> {
    use opcode::*;
    let bases: Vec<FrameRepr> = vec![
        base(RC_SEND_ONLY, qpn, 64),
        base(RC_RDMA_WRITE_FIRST, qpn, 1024),
        base(RC_RDMA_READ_REQUEST, qpn, 0),
        base(RC_ACKNOWLEDGE, qpn, 0),
        base(RC_SEND_LAST_WITH_IMMEDIATE, qpn, 3),
    ];
    let mut out = Vec::new();
    for b in &bases {
        let f = emit(b);
        // Cut at every length that still has an Ethernet header (the
        // switch drops shorter ones before any NIC sees them).
        for len in 14..f.len() {
            out.push((f[..len].to_vec(), Expect::At(counter::RX_MALFORMED)));
        }
        // Every bit past the Ethernet header but the BTH's fifth byte,
        // which the ICRC masks and nothing else covers.
        let bth = b.roce_offset();
        for bit in 14 * 8..f.len() * 8 {
            if bit / 8 == bth + 4 {
                continue;
            }
            let mut g = f.clone();
            g[bit / 8] ^= 1 << (bit % 8);
            out.push((g, Expect::Any));
        }
    }
    let send = base(RC_SEND_ONLY, qpn, 64);
    let bth_at = send.roce_offset();
    let f = emit(&send);
    // Another transport header version.
    for tver in 1..16u8 {
        let mut g = f.clone();
        g[bth_at + 1] = (g[bth_at + 1] & 0xf0) | tver;
        out.push((reseal(g), Expect::At(counter::RX_BAD_VERSION)));
    }
    // Another partition (0x7fff would be a limited member of ours).
    for pkey in [0x0000u16, 0x1234, 0x7ffe, 0x8001, 0xfffe] {
        let mut g = f.clone();
        g[bth_at + 2..bth_at + 4].copy_from_slice(&pkey.to_be_bytes());
        out.push((reseal(g), Expect::At(counter::RX_BAD_PKEY)));
    }
    // A QP that does not exist, a reserved one, and a live one reached
    // from a source it is not connected to, or with a UD opcode.
    for dest in [0u32, 1, 0x00ab_cdef, qpn + 100] {
        let mut r = send;
        r.roce.bth.dest_qp = dest;
        out.push((emit(&r), Expect::At(counter::RX_UNKNOWN_QP)));
    }
    let mut stranger = send;
    stranger.ip = IpRepr::V4(Ipv4Repr {
        src_addr: Ipv4Address([192, 0, 2, 77]),
        ..match send.ip {
            IpRepr::V4(v) => v,
            IpRepr::V6(_) => unreachable!(),
        }
    });
    out.push((emit(&stranger), Expect::At(counter::RX_UNKNOWN_QP)));
    let mut ud = send;
    ud.roce.bth.opcode = UD_SEND_ONLY;
    ud.roce.deth = Some(rnic_emu::wire::deth::DethRepr { qkey: 1, src_qp: 5 });
    out.push((emit(&ud), Expect::At(counter::RX_UNKNOWN_QP)));
    // Opcodes nobody here speaks: reserved RC, RD, CNP, vendor.
    for op in [0x15u8, 0x18, 0x1f, 0x40, 0x4c, 0x81, 0xc0, 0xff] {
        let mut g = f.clone();
        g[bth_at] = op;
        out.push((reseal(g), Expect::At(counter::RX_IGNORED)));
    }
    // A reserved AETH syndrome.
    let mut ack = emit(&base(RC_ACKNOWLEDGE, qpn, 0));
    let aeth_at = bth_at + 12;
    ack[aeth_at] = 0x40;
    out.push((reseal(ack), Expect::At(counter::RX_MALFORMED)));
    // Addressed to another host, and to another UDP port.
    let mut other = send;
    other.ip = IpRepr::V4(Ipv4Repr {
        dst_addr: Ipv4Address([192, 0, 2, 200]),
        ..match send.ip {
            IpRepr::V4(v) => v,
            IpRepr::V6(_) => unreachable!(),
        }
    });
    out.push((emit(&other), Expect::At(counter::RX_IGNORED)));
    let mut port = send;
    port.udp.dst_port = 4790;
    out.push((emit(&port), Expect::At(counter::RX_IGNORED)));
    // Garbage after a real Ethernet header, of random lengths.
    let mut s = Rng(0x9e37_79b9_7f4a_7c15);
    for _ in 0..1000 {
        let len = 14 + (s.next() % 1500) as usize;
        let mut g = vec![0u8; len];
        g[..6].copy_from_slice(&[0x02, 0, 0, 0, 0, 2]);
        g[6..12].copy_from_slice(&INJECTOR_MAC);
        let kind = s.next() % 3;
        g[12..14].copy_from_slice(&[0x0800u16, 0x86dd, 0x0806][kind as usize].to_be_bytes());
        for b in &mut g[14..] {
            *b = s.next() as u8;
        }
        out.push((g, Expect::Any));
    }
    out
}

fn drops(ctx: &Ctx) -> Vec<u64> {
    let c = ctx.query_port_counters(1).unwrap();
    DROPS.iter().map(|&i| c.get(i)).collect()
}

fn run(mode: ExecMode) {
    let fabric = Fabric::new(mode, 2, 11);
    let (a, b) = (&fabric.nics[0].ctx, &fabric.nics[1].ctx);
    let c = conn(if mode == ExecMode::Inline { 12 } else { 14 });
    let mut q = Requester::new(a, 77, 3000);
    let mut r = Responder::new(b, 77, 3000);
    connect_to(b, &q.qp, r.qp.qp_num(), &c);
    connect_to(a, &r.qp, q.qp.qp_num(), &c);
    q.set_peer(r.window());
    r.start();
    let mut injector = fabric.switch.port();
    let bad = corpus(r.qp.qp_num());
    assert!(bad.len() > 4000, "{} frames", bad.len());
    let before = drops(b);
    let mut next = 0;
    let start = Instant::now();
    while !(q.finished() && r.finished()) || next < bad.len() {
        // A few bad frames between every round of good work.
        let n = (bad.len() - next).min(16);
        let mut batch: Vec<Frame> = bad[next..next + n].iter().map(|(f, _)| f.clone()).collect();
        injector.send(&mut batch);
        next += n;
        let moved = q.post() | q.poll() | r.poll();
        if !moved {
            fabric.idle(Duration::from_millis(1));
        }
        assert!(
            start.elapsed() < Duration::from_secs(60),
            "stalled: {}, receives {}/{}",
            q.progress(),
            r.received,
            r.total
        );
    }
    // Let the NIC take what is still queued for it: until every bad frame
    // is counted (a device worker shared with other tests' NICs may take
    // a while), then a little longer, so that one counted twice shows.
    let counted = |b: &Ctx| -> u64 {
        let now = drops(b);
        now.iter().zip(&before).map(|(x, y)| x - y).sum()
    };
    let wait = Instant::now();
    while counted(b) < bad.len() as u64 && wait.elapsed() < Duration::from_secs(10) {
        fabric.nics[1].dev.poll();
        fabric.idle(Duration::from_millis(1));
    }
    for _ in 0..20 {
        fabric.nics[1].dev.poll();
        fabric.idle(Duration::from_millis(1));
    }
    let after = drops(b);
    let delta: Vec<u64> = after.iter().zip(&before).map(|(x, y)| x - y).collect();
    let total: u64 = delta.iter().sum();
    assert_eq!(
        total,
        bad.len() as u64,
        "every bad frame counted once: {delta:?}"
    );
    for (k, &idx) in DROPS.iter().enumerate() {
        let want = bad.iter().filter(|(_, e)| *e == Expect::At(idx)).count() as u64;
        assert!(delta[k] >= want, "counter {idx}: {} < {want}", delta[k]);
    }
    assert_eq!(r.atomic_words(), (q.cmp_swaps, q.fetch_adds));
    assert_eq!(query_state(&q.qp), QpState::Rts);
    assert_eq!(query_state(&r.qp), QpState::Rts);
    // The device still answers.
    b.query_device().expect("the NIC answers commands");
    let names: Vec<String> = rnic_tests::counter::NAMES
        .iter()
        .filter(|(i, _)| DROPS.contains(i))
        .map(|(i, n)| format!("{n}={}", delta[DROPS.iter().position(|d| d == i).unwrap()]))
        .collect();
    eprintln!("{mode:?}: {} bad frames: {}", bad.len(), names.join(" "));
}

#[test]
fn bad_frames_are_dropped_and_counted_inline() {
    run(ExecMode::Inline);
}

#[test]
fn bad_frames_are_dropped_and_counted_thread() {
    run(ExecMode::Thread);
}

/// Two NICs on a switch with one connected QP pair (PSNs from 0x1000,
/// two READs/atomics each way), a 4 KiB MR on each side, after one READ
/// so that both sides know each other's MAC and the responder expects PSN
/// 0x1001.
struct Flooded {
    fabric: Fabric,
    r: EQp,
    remote: EMr,
    _keep: (EQp, ECq, ECq, EMr),
}

fn flooded() -> Flooded {
    let fabric = Fabric::new(ExecMode::Inline, 2, 5);
    let (a, b) = (&fabric.nics[0].ctx, &fabric.nics[1].ctx);
    let c = Conn {
        max_rd_atomic: 2,
        max_dest_rd_atomic: 2,
        sq_psn: 0x1000,
        rq_psn: 0x1000,
        ..Conn::default()
    };
    let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (cq_a, cq_b) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    let q = create_qp(&pd_a, &cq_a, &cq_a, cap(4, 1, 0), false);
    let r = create_qp(&pd_b, &cq_b, &cq_b, cap(4, 1, 0), false);
    connect_to(b, &q, r.qp_num(), &c);
    connect_to(a, &r, q.qp_num(), &c);
    let local = pd_a.alloc_mr(4096, ALL_ACCESS).unwrap();
    let remote = pd_b.alloc_mr(4096, ALL_ACCESS).unwrap();
    let s = [sge(&local, 0, 64)];
    q.post_send(&[read(1, &s, remote.addr(), remote.rkey())])
        .unwrap();
    assert_eq!(poll_one(&cq_a).status, WcStatus::Success);
    Flooded {
        fabric,
        r,
        remote,
        _keep: (q, cq_a, cq_b, local),
    }
}

impl Flooded {
    /// Injects `frames` towards NIC 2 and lets both NICs take them; the
    /// change of NIC 2's and NIC 1's port counters.
    fn inject(&self, mut frames: Vec<Frame>) -> (Vec<u64>, Vec<u64>) {
        let nics = &self.fabric.nics;
        let read = |n: usize| -> Vec<u64> {
            let c = nics[n].ctx.query_port_counters(1).unwrap();
            (0..COUNTERS).map(|i| c.get(i)).collect()
        };
        let (b0, a0) = (read(1), read(0));
        self.fabric.switch.port().send(&mut frames);
        for _ in 0..4 {
            nics[1].dev.poll();
            nics[0].dev.poll();
        }
        let sub = |x: Vec<u64>, y: Vec<u64>| x.iter().zip(&y).map(|(x, y)| x - y).collect();
        (sub(read(1), b0), sub(read(0), a0))
    }

    /// A request of opcode `op` to the responder QP at PSN `psn`.
    fn request(&self, op: u8, psn: u32) -> FrameRepr {
        let mut f = base(op, self.r.qp_num(), 0);
        f.roce.bth.psn = psn;
        f
    }
}

/// Counter slots compared by the flood tests.
const COUNTERS: usize = 32;

/// A peer that keeps asking again for old READs (each at another PSN
/// before the expected one, valid but for there being no READ held at
/// that PSN) gets no answer at all, however many it sends at once: a
/// duplicate READ is answered only from the responder's READ resources
/// (IBA 9.7.5.1.2), and the rest are dropped.
#[test]
fn duplicate_reads_of_no_read_held_are_dropped() {
    let t = flooded();
    const FLOOD: u32 = 256;
    let flood: Vec<Frame> = (0..FLOOD)
        .map(|i| {
            let mut f = t.request(opcode::RC_RDMA_READ_REQUEST, 0x1000 - 1 - i);
            f.roce.reth = Some(RethRepr {
                va: t.remote.addr(),
                rkey: t.remote.rkey(),
                dma_len: 64,
            });
            emit(&f)
        })
        .collect();
    let (b, a) = t.inject(flood);
    assert_eq!(
        b[counter::DUPLICATE_REQUESTS],
        FLOOD as u64,
        "every one seen as a duplicate"
    );
    assert_eq!(b[counter::TX_FRAMES], 0, "no READ held: none answered");
    assert_eq!(a[counter::RESPONSES_IGNORED], 0);
    assert_eq!(query_state(&t.r), QpState::Rts);
}

/// A peer that sends the same WRITE again and again at once gets one ACK
/// for them all, not one each: the duplicates' ACKs are the same, and the
/// answer queue holds one.
#[test]
fn a_flood_of_duplicate_writes_gets_one_ack() {
    let t = flooded();
    const FLOOD: usize = 256;
    let mut f = t.request(opcode::RC_RDMA_WRITE_ONLY, 0x1000 - 1);
    f.roce.reth = Some(RethRepr {
        va: t.remote.addr(),
        rkey: t.remote.rkey(),
        dma_len: 0,
    });
    f.roce.bth.ack_req = true;
    let frame = emit(&f);
    let (b, _) = t.inject(vec![frame; FLOOD]);
    assert_eq!(b[counter::DUPLICATE_REQUESTS], FLOOD as u64);
    let acks = b[counter::ACKS_SENT];
    assert!(
        (1..=4).contains(&acks),
        "{acks} ACKs for {FLOOD} duplicates"
    );
    assert_eq!(query_state(&t.r), QpState::Rts);
}

/// A peer that ignores its window and sends thousands of new atomics in
/// sequence at once: the responder executes what its answer queue holds,
/// drops and counts the rest (and NAKs the gap that leaves), each atomic
/// executed at most once.
#[test]
fn requests_beyond_the_answer_queue_are_dropped_and_counted() {
    let t = flooded();
    const FLOOD: u32 = 2000;
    let flood: Vec<Frame> = (0..FLOOD)
        .map(|i| {
            let mut f = t.request(opcode::RC_FETCH_ADD, 0x1001 + i);
            f.roce.atomic_eth = Some(rnic_emu::wire::atomic_eth::AtomicEthRepr {
                va: t.remote.addr(),
                rkey: t.remote.rkey(),
                swap_add: 1,
                compare: 0,
            });
            emit(&f)
        })
        .collect();
    let (b, _) = t.inject(flood);
    let busy = b[counter::RX_BUSY_DROPS];
    assert!(busy > 0, "the queue filled");
    let word = u64::from_le_bytes(read_mr(&t.remote, 0, 8).try_into().unwrap());
    // Executed in sequence up to the first drop; the rest were a gap.
    let naks = b[counter::SEQ_NAKS_SENT];
    assert_eq!(naks, 1, "one NAK for the gap");
    assert_eq!(b[counter::TX_FRAMES], word + naks, "one atomic ACK each");
    assert!(word < FLOOD as u64 && word >= 256, "{word} executed");
    assert_eq!(
        b[counter::RX_UNKNOWN_QP] + b[counter::RX_MALFORMED],
        0,
        "nothing else dropped"
    );
    assert_eq!(query_state(&t.r), QpState::Rts);
}

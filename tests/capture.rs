//! A capture of every RC opcode, written by the pcap middleware, as
//! Wireshark's dissectors read it.
//!
//! Two NICs on a switch, over IPv4 and over link-local IPv6 GIDs, run
//! SEND and WRITE messages of one and of several packets, with and without
//! immediate data, zero-length WRITEs, READs of one and of several
//! response packets, both atomics, and an RNR NAK; NIC 0's port writes
//! what it sends and receives to a pcap file. tshark must decode every
//! RoCEv2 frame as InfiniBand, flag nothing malformed and raise no
//! warning or error, and its fields must be what was sent: what this
//! crate's parser reads from the same bytes, and the addresses, keys,
//! lengths, immediate data and atomic operands the work requests gave.

use std::collections::BTreeSet;
use std::process::Command;
use std::time::Duration;

use rnic_emu::pcap;
use rnic_emu::wire::aeth::AckKind;
use rnic_emu::wire::frame::{classify, FrameRepr, Received};
use rnic_emu::wire::opcode;
use rnic_tests::fabric::Fabric;
use rnic_tests::*;

/// The fields read per frame, in this order.
const FIELDS: &[&str] = &[
    "frame.number",
    "_ws.malformed",
    "_ws.expert.severity",
    "eth.type",
    "udp.dstport",
    "infiniband.bth.opcode",
    "infiniband.bth.destqp",
    "infiniband.bth.psn",
    "infiniband.bth.a",
    "infiniband.bth.se",
    "infiniband.bth.padcnt",
    "infiniband.bth.p_key",
    "infiniband.reth.va",
    "infiniband.reth.r_key",
    "infiniband.reth.dmalen",
    "infiniband.aeth.syndrome",
    "infiniband.aeth.msn",
    "infiniband.atomiceth.swapdt",
    "infiniband.atomiceth.cmpdt",
    "infiniband.atomicacketh.origremdt",
    "infiniband.immdt",
];

/// Wireshark's expert severity of a warning.
const PI_WARN: u64 = 0x0060_0000;

/// One connected QP pair, `q` on NIC 0, `r` on NIC 1, over GID `gid`.
struct Link {
    q: EQp,
    r: EQp,
    cq_q: ECq,
    cq_r: ECq,
    src: EMr,
    dst: EMr,
}

/// A requester QP on NIC 1 connected to a responder QP on NIC 2 through
/// GID index `gid` with `c`, and a 64 KiB MR on each side.
fn link(f: &Fabric, gid: u8, c: &Conn) -> Link {
    let (a, b) = (&f.nics[0].ctx, &f.nics[1].ctx);
    let (pd_a, pd_b) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (cq_q, cq_r) = (a.create_cq(64).unwrap(), b.create_cq(64).unwrap());
    let q = create_qp(&pd_a, &cq_q, &cq_q, cap(16, 1, 0), false);
    let r = create_qp(&pd_b, &cq_r, &cq_r, cap(16, 1, 0), false);
    let connect = |qp: &EQp, peer: &Ctx, dest: u32| {
        to_init(qp, c).unwrap();
        let dgid = peer.query_gid(1, gid as u32).unwrap();
        let (mut attr, mask) = rtr_attr_to(dgid, dest, c);
        attr.ah_attr.sgid_index = gid;
        qp.modify(&attr, mask).unwrap();
        to_rts(qp, c).unwrap();
    };
    connect(&q, b, r.qp_num());
    connect(&r, a, q.qp_num());
    Link {
        src: pd_a.alloc_mr(65536, ALL_ACCESS).unwrap(),
        dst: pd_b.alloc_mr(65536, ALL_ACCESS).unwrap(),
        q,
        r,
        cq_q,
        cq_r,
    }
}

/// What the test posted that the capture must show.
#[derive(Debug, Default)]
struct Sent {
    /// (va, rkey, length) of each RETH.
    reths: BTreeSet<(u64, u32, u32)>,
    /// Immediate data.
    imms: BTreeSet<[u8; 4]>,
    /// (swap or add, compare) of each atomic.
    atomics: BTreeSet<(u64, u64)>,
}

fn traffic(f: &Fabric, l: &Link, tag: u8, sent: &mut Sent) {
    write_mr(&l.src, 0, &pattern(tag as u64, 8192));
    let rkey = l.dst.rkey();
    let va = |off: u64| l.dst.addr() + off;
    // Receives for the four SENDs and two WRITEs with immediate.
    for i in 0..6 {
        post_recv(&l.r, recv(i, &[sge(&l.dst, 4096, 4096)]));
    }
    let imm = |n: u8| [0xa0 | tag, n, 0x5a, 0xc3];
    let sends = [
        // SEND FIRST/MIDDLE/LAST and ONLY.
        (1, SendOp::Send, 3000),
        (2, SendOp::Send, 100),
        // SEND FIRST/MIDDLE/LAST WITH IMMEDIATE and ONLY WITH IMMEDIATE.
        (3, SendOp::SendWithImm { imm: imm(3) }, 2500),
        (4, SendOp::SendWithImm { imm: imm(4) }, 10),
    ];
    for (id, op, len) in sends {
        post_send(&l.q, wr(id, op, &[sge(&l.src, 0, len)]));
    }
    let remote = |off| RemoteAddr {
        addr: va(off),
        rkey,
    };
    let wrs = [
        // WRITE FIRST/MIDDLE/LAST, ONLY, zero-length ONLY.
        (5, SendOp::RdmaWrite { remote: remote(0) }, 2500u32),
        (
            6,
            SendOp::RdmaWrite {
                remote: remote(3000),
            },
            10,
        ),
        (
            7,
            SendOp::RdmaWrite {
                remote: remote(3100),
            },
            0,
        ),
        // WRITE FIRST/MIDDLE/LAST WITH IMMEDIATE, ONLY WITH IMMEDIATE.
        (
            8,
            SendOp::RdmaWriteWithImm {
                remote: remote(0),
                imm: imm(8),
            },
            2500,
        ),
        (
            9,
            SendOp::RdmaWriteWithImm {
                remote: remote(3200),
                imm: imm(9),
            },
            10,
        ),
    ];
    for (id, op, len) in wrs {
        if let SendOp::RdmaWrite { remote } | SendOp::RdmaWriteWithImm { remote, .. } = op {
            sent.reths.insert((remote.addr, remote.rkey, len));
        }
        if let SendOp::RdmaWriteWithImm { imm, .. } = op {
            sent.imms.insert(imm);
        }
        post_send(&l.q, wr(id, op, &[sge(&l.src, 0, len)]));
    }
    sent.imms.insert(imm(3));
    sent.imms.insert(imm(4));
    // READ with RESPONSE FIRST/MIDDLE/LAST, and ONLY.
    for (id, off, len) in [(10u64, 0u64, 3000u32), (11, 3000, 10)] {
        post_send(&l.q, read(id, &[sge(&l.src, 4096, len)], va(off), rkey));
        sent.reths.insert((va(off), rkey, len));
    }
    // Both atomics.
    let target = RemoteAddr {
        addr: va(8000),
        rkey,
    };
    post_send(
        &l.q,
        wr(
            12,
            SendOp::AtomicCmpAndSwp {
                remote: target,
                compare: 0,
                swap: 0x1111_2222_3333_4444,
            },
            &[sge(&l.src, 8000, 8)],
        ),
    );
    post_send(
        &l.q,
        wr(
            13,
            SendOp::AtomicFetchAndAdd {
                remote: target,
                add: 0x10,
            },
            &[sge(&l.src, 8000, 8)],
        ),
    );
    sent.atomics.insert((0x1111_2222_3333_4444, 0));
    sent.atomics.insert((0x10, 0));
    let done = poll_n(&l.cq_q, 13);
    for (w, id) in done.iter().zip(1..) {
        assert_eq!((w.wr_id, w.status), (id, WcStatus::Success), "{w:#?}");
    }
    poll_n(&l.cq_r, 6);
    // An RNR NAK: a SEND with no receive posted, then one posted and the
    // RNR timer run out.
    post_send(&l.q, send(14, &[sge(&l.src, 0, 64)]));
    post_recv(&l.r, recv(6, &[sge(&l.dst, 4096, 4096)]));
    f.idle(Duration::from_millis(5));
    assert_ok(&poll_one(&l.cq_q), 14, WcOpcode::Send);
    assert_ok(&poll_one(&l.cq_r), 6, WcOpcode::Recv);
}

/// A number as tshark prints it: `0x…` hexadecimal, or decimal.
fn hex(s: &str) -> u64 {
    let r = match s.strip_prefix("0x") {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse(),
    };
    r.unwrap_or_else(|e| panic!("{s:?}: {e}"))
}

/// The first value of a field tshark may print more than once.
fn first(s: &str) -> &str {
    s.split(',').next().unwrap_or("")
}

#[test]
fn tshark_reads_every_opcode() {
    let _ = env_logger::builder().is_test(true).try_init();
    let dir = std::env::temp_dir().join(format!("rnic-capture-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("every-opcode.pcap");
    let mut sent = Sent::default();
    {
        let f = Fabric::with_capture(ExecMode::Inline, 2, 5, Some(&path));
        let c = Conn {
            mtu: Mtu::Mtu1024,
            ..Conn::default()
        };
        traffic(&f, &link(&f, 0, &c), 1, &mut sent);
        traffic(&f, &link(&f, 1, &c), 2, &mut sent);
    }
    let out = Command::new("tshark")
        .arg("-r")
        .arg(&path)
        .args(["-T", "fields", "-E", "separator=|"])
        .args(FIELDS.iter().flat_map(|f| ["-e", f]))
        .output()
        .expect("tshark (scripts/setup.sh installs it)");
    assert!(
        out.status.success(),
        "tshark: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let ours = pcap::read(&std::fs::read(&path).unwrap()).unwrap();
    let rows: Vec<Vec<&str>> = text.lines().map(|l| l.split('|').collect()).collect();
    assert_eq!(rows.len(), ours.len(), "a row per frame");

    let mut opcodes = BTreeSet::new();
    let (mut v4, mut v6, mut rnr, mut neigh) = (0, 0, 0, 0);
    for (row, rec) in rows.iter().zip(&ours) {
        let col = |name: &str| row[FIELDS.iter().position(|f| *f == name).unwrap()];
        assert_eq!(
            col("_ws.malformed"),
            "",
            "frame {}: malformed",
            col("frame.number")
        );
        let worst = col("_ws.expert.severity")
            .split(',')
            .filter(|s| !s.is_empty())
            .map(|s| s.parse::<u64>().unwrap())
            .max()
            .unwrap_or(0);
        assert!(
            worst < PI_WARN,
            "frame {}: expert severity {worst:#x}",
            col("frame.number")
        );
        let r: FrameRepr = match classify(&rec.frame) {
            Ok(Received::Roce(r, _)) => r,
            Ok(_) => {
                neigh += 1;
                continue;
            }
            Err(e) => panic!("frame {}: {e}", col("frame.number")),
        };
        let b = r.roce.bth;
        match col("eth.type") {
            "0x0800" => v4 += 1,
            "0x86dd" => v6 += 1,
            t => panic!("ethertype {t}"),
        }
        assert_eq!(col("udp.dstport"), "4791");
        let n = col("frame.number");
        assert_eq!(
            col("infiniband.bth.opcode").parse::<u8>().unwrap(),
            b.opcode,
            "frame {n}"
        );
        assert_eq!(
            hex(col("infiniband.bth.destqp")) as u32,
            b.dest_qp,
            "frame {n}"
        );
        assert_eq!(
            col("infiniband.bth.psn").parse::<u32>().unwrap(),
            b.psn,
            "frame {n}"
        );
        assert_eq!(col("infiniband.bth.a") == "1", b.ack_req, "frame {n}");
        assert_eq!(col("infiniband.bth.se") == "1", b.solicited, "frame {n}");
        assert_eq!(
            col("infiniband.bth.padcnt").parse::<u8>().unwrap(),
            b.pad_count,
            "frame {n}"
        );
        assert_eq!(hex(col("infiniband.bth.p_key")), 0xffff, "frame {n}");
        opcodes.insert(b.opcode);
        if let Some(reth) = r.roce.reth {
            let got = (
                hex(col("infiniband.reth.va")),
                hex(col("infiniband.reth.r_key")) as u32,
                col("infiniband.reth.dmalen").parse::<u32>().unwrap(),
            );
            assert_eq!(got, (reth.va, reth.rkey, reth.dma_len), "frame {n}");
            assert!(
                sent.reths.contains(&got),
                "frame {n}: RETH {got:x?} not sent"
            );
        }
        if let Some(aeth) = r.roce.aeth {
            let syn = col("infiniband.aeth.syndrome").parse::<u8>().unwrap();
            assert_eq!(syn, aeth.syndrome(), "frame {n}");
            assert_eq!(col("infiniband.aeth.msn").parse::<u32>().unwrap(), aeth.msn);
            if matches!(aeth.kind, AckKind::RnrNak { .. }) {
                rnr += 1;
            }
        }
        if let Some(imm) = r.roce.immdt {
            // A byte string: bare hex digits.
            let bytes = first(col("infiniband.immdt"));
            let got = u32::from_str_radix(bytes, 16)
                .unwrap_or_else(|e| panic!("frame {n}: immediate {bytes:?}: {e}"))
                .to_be_bytes();
            assert_eq!(got, imm.imm, "frame {n}");
            assert!(
                sent.imms.contains(&got),
                "frame {n}: immediate {got:x?} not sent"
            );
        }
        if let Some(a) = r.roce.atomic_eth {
            let got = (
                hex(col("infiniband.atomiceth.swapdt")),
                hex(col("infiniband.atomiceth.cmpdt")),
            );
            assert_eq!(got, (a.swap_add, a.compare), "frame {n}");
            assert!(
                sent.atomics.contains(&got),
                "frame {n}: atomic {got:x?} not sent"
            );
        }
        if let Some(ack) = r.roce.atomic_ack_eth {
            let got = hex(col("infiniband.atomicacketh.origremdt"));
            assert_eq!(got, ack.orig, "frame {n}");
        }
    }
    use opcode::*;
    let every = [
        RC_SEND_FIRST,
        RC_SEND_MIDDLE,
        RC_SEND_LAST,
        RC_SEND_LAST_WITH_IMMEDIATE,
        RC_SEND_ONLY,
        RC_SEND_ONLY_WITH_IMMEDIATE,
        RC_RDMA_WRITE_FIRST,
        RC_RDMA_WRITE_MIDDLE,
        RC_RDMA_WRITE_LAST,
        RC_RDMA_WRITE_LAST_WITH_IMMEDIATE,
        RC_RDMA_WRITE_ONLY,
        RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
        RC_RDMA_READ_REQUEST,
        RC_RDMA_READ_RESPONSE_FIRST,
        RC_RDMA_READ_RESPONSE_MIDDLE,
        RC_RDMA_READ_RESPONSE_LAST,
        RC_RDMA_READ_RESPONSE_ONLY,
        RC_ACKNOWLEDGE,
        RC_ATOMIC_ACKNOWLEDGE,
        RC_COMPARE_SWAP,
        RC_FETCH_ADD,
    ];
    let missing: Vec<_> = every.iter().filter(|o| !opcodes.contains(o)).collect();
    assert!(missing.is_empty(), "opcodes never captured: {missing:?}");
    assert!(v4 > 0 && v6 > 0, "IPv4 {v4}, IPv6 {v6} frames");
    assert_eq!(rnr, 2, "one RNR NAK per GID");
    assert!(neigh >= 2, "ARP and neighbour discovery: {neigh} frames");
    std::fs::remove_dir_all(&dir).unwrap();
}

/// In a capture of NIC 0's port: with `max_rd_atomic` 2 no more than two
/// READs or atomics are outstanding at a time (requests sent, responses
/// not all back), and a fenced SEND after a READ leaves only once the
/// READ's last response arrived.
#[test]
fn outstanding_reads_are_limited_and_fences_wait() {
    let dir = std::env::temp_dir().join(format!("rnic-capture-rd-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("reads.pcap");
    {
        let f = Fabric::with_capture(ExecMode::Inline, 2, 9, Some(&path));
        let c = Conn {
            mtu: Mtu::Mtu1024,
            max_rd_atomic: 2,
            max_dest_rd_atomic: 2,
            ..Conn::default()
        };
        let Link {
            q,
            r,
            cq_q,
            cq_r,
            src: local,
            dst: remote,
        } = link(&f, 0, &c);
        post_recv(&r, recv(1, &[sge(&remote, 60000, 64)]));
        let mut wrs = Vec::new();
        let sgl: Vec<[Sge; 1]> = (0..6).map(|i| [sge(&local, i * 4096, 3000)]).collect();
        for (i, s) in sgl.iter().enumerate() {
            wrs.push(read(
                i as u64,
                s,
                remote.addr() + (i * 4096) as u64,
                remote.rkey(),
            ));
        }
        let send_sg = [sge(&local, 0, 16)];
        let mut fenced = send(6, &send_sg);
        fenced.flags |= send_flags::FENCE;
        wrs.push(fenced);
        q.post_send(&wrs).unwrap();
        let done = poll_n(&cq_q, 7);
        assert!(
            done.iter().all(|w| w.status == WcStatus::Success),
            "{done:#?}"
        );
        poll_one(&cq_r);
    }
    let frames = pcap::read(&std::fs::read(&path).unwrap()).unwrap();
    let (mut outstanding, mut most, mut reads_done, mut send_at) = (0i32, 0, 0, None);
    for (i, rec) in frames.iter().enumerate() {
        let Ok(Received::Roce(r, _)) = classify(&rec.frame) else {
            continue;
        };
        let from_a = r.eth.src_addr.0[5] == 1;
        match r.roce.bth.opcode {
            opcode::RC_RDMA_READ_REQUEST if from_a => outstanding += 1,
            opcode::RC_RDMA_READ_RESPONSE_LAST | opcode::RC_RDMA_READ_RESPONSE_ONLY if !from_a => {
                outstanding -= 1;
                reads_done += 1;
            }
            opcode::RC_SEND_ONLY if from_a => {
                send_at.get_or_insert((i, reads_done));
            }
            _ => {}
        }
        most = most.max(outstanding);
    }
    assert_eq!(most, 2, "READs outstanding at most");
    let (_, reads_before_send) = send_at.expect("the SEND");
    assert_eq!(
        reads_before_send, 6,
        "the fenced SEND waited for every READ"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

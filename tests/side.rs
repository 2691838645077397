//! One side of the two-process traffic test (`tests/processes.rs`): the
//! test runs one, and the peer process (`tests/bin/traffic_peer.rs`) the
//! other. The two exchange QP numbers and memory windows over TCP, each
//! runs two requesters towards the other and the two responders of the
//! other's requesters, and at the end each reports the atomic words its
//! responders hold, which the other compares with what its requesters
//! executed.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use rnic_emu::net::{FaultConfig, Faults, Wire};
use rnic_emu::{Clock, EmuDevice};

use crate::fabric::nic_config;
use crate::traffic::{conn, Requester, Responder, Window};
use crate::*;

/// Messages each requester sends.
pub const PER_FLOW: u64 = 10_000;

/// `127.0.0.1:port`.
pub fn lo(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// One side: its NIC, its requesters (seeds `mine`) and the responders of
/// the peer's requesters (seeds `theirs`), talking with the other side over
/// `tcp` and sending on `wire`, with `faults` on it once both are ready.
/// Panics, failing the test or the peer process, on anything unexpected.
pub fn side(
    tcp: TcpStream,
    wire: Box<dyn Wire>,
    nic: u8,
    mine: [u64; 2],
    theirs: [u64; 2],
    faults: Option<FaultConfig>,
) {
    let _ = env_logger::builder().is_test(true).try_init();
    let clock = Clock::real();
    let (wire, handle) = Faults::new(wire, clock.clone(), 7 + nic as u64);
    let dev = EmuDevice::builder(nic_config(nic))
        .mode(ExecMode::Thread)
        .clock(clock)
        .wire(wire)
        .build()
        .expect("device");
    let ctx = Ctx::open(dev.hal()).expect("Context::open");
    // A 16.8 ms ACK timeout: each tail loss waits it out, and a scheduling
    // delay of the other process must exceed it to cost a retry.
    let c = conn(12);
    let mut reqs: Vec<Requester> = mine
        .iter()
        .map(|&s| Requester::new(&ctx, s, PER_FLOW))
        .collect();
    let mut resps: Vec<Responder> = theirs
        .iter()
        .map(|&s| Responder::new(&ctx, s, PER_FLOW))
        .collect();

    // Tell the peer what it needs, learn the same from it.
    let mut out = tcp.try_clone().unwrap();
    let gid = ctx.query_gid(1, 0).unwrap();
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    writeln!(out, "gid {}", hex(&gid)).unwrap();
    for q in &reqs {
        writeln!(out, "req {}", q.qp.qp_num()).unwrap();
    }
    for r in &resps {
        let w = r.window();
        writeln!(
            out,
            "resp {} {} {} {} {} {} {}",
            w.qpn, w.rsrc.addr, w.rsrc.rkey, w.dst.addr, w.dst.rkey, w.atomics.addr, w.atomics.rkey
        )
        .unwrap();
    }
    writeln!(out, "end").unwrap();
    let mut lines = BufReader::new(tcp).lines();
    let mut next = || lines.next().expect("a line from the peer").expect("read");
    let mut peer_gid = [0u8; 16];
    let (mut peer_reqs, mut peer_resps) = (Vec::new(), Vec::new());
    loop {
        let l = next();
        let f: Vec<&str> = l.split(' ').collect();
        match f[0] {
            "gid" => {
                for (i, g) in peer_gid.iter_mut().enumerate() {
                    *g = u8::from_str_radix(&f[1][2 * i..2 * i + 2], 16).unwrap();
                }
            }
            "req" => peer_reqs.push(f[1].parse::<u32>().unwrap()),
            "resp" => {
                let n: Vec<u64> = f[1..].iter().map(|x| x.parse().unwrap()).collect();
                let ra = |a: u64, k: u64| RemoteAddr {
                    addr: a,
                    rkey: k as u32,
                };
                peer_resps.push(Window {
                    qpn: n[0] as u32,
                    rsrc: ra(n[1], n[2]),
                    dst: ra(n[3], n[4]),
                    atomics: ra(n[5], n[6]),
                });
            }
            "end" => break,
            other => panic!("unexpected line {other:?}"),
        }
    }
    let peer_ctx_gid = |qp: &EQp, dest: u32| {
        to_init(qp, &c).unwrap();
        let (attr, mask) = rtr_attr_to(peer_gid, dest, &c);
        qp.modify(&attr, mask).unwrap();
        to_rts(qp, &c).unwrap();
    };
    for (q, w) in reqs.iter_mut().zip(&peer_resps) {
        peer_ctx_gid(&q.qp, w.qpn);
        q.set_peer(*w);
    }
    for (r, &qpn) in resps.iter_mut().zip(&peer_reqs) {
        peer_ctx_gid(&r.qp, qpn);
        r.start();
    }
    writeln!(out, "ready").unwrap();
    assert_eq!(next(), "ready");
    if let Some(f) = faults {
        handle.set(f);
    }

    let start = Instant::now();
    let mut last = Instant::now();
    while !(reqs.iter().all(Requester::finished) && resps.iter().all(Responder::finished)) {
        let mut moved = false;
        for q in &mut reqs {
            moved |= q.post();
            moved |= q.poll();
        }
        for r in &mut resps {
            moved |= r.poll();
        }
        if moved {
            last = Instant::now();
        } else {
            ctx.hal().relax();
        }
        if last.elapsed() > Duration::from_secs(20) || start.elapsed() > Duration::from_secs(100) {
            let p: Vec<String> = reqs.iter().map(Requester::progress).collect();
            let r: Vec<(u64, u64)> = resps.iter().map(|r| (r.received, r.total)).collect();
            panic!("NIC {nic}: no progress: requesters {p:#?}, receives {r:?}");
        }
    }
    handle.set(FaultConfig::default());
    // Both sides done (the peer's atomics to this side completed too)
    // before either reads what its responders hold.
    writeln!(out, "done").unwrap();
    assert_eq!(next(), "done", "NIC {nic}: the peer's end of traffic");
    // Report what this side's responders hold; check the peer's report
    // against this side's requesters.
    for r in &resps {
        let (cas, fa) = r.atomic_words();
        writeln!(out, "atomics {cas} {fa}").unwrap();
    }
    for q in &reqs {
        let l = next();
        assert_eq!(
            l,
            format!("atomics {} {}", q.cmp_swaps, q.fetch_adds),
            "NIC {nic}: the peer's atomic words"
        );
        assert_cq_empty(&q.cq.context(), &q.cq);
        assert_eq!(query_state(&q.qp), QpState::Rts);
    }
    writeln!(out, "done").unwrap();
    assert_eq!(next(), "done");
    let c = ctx.query_port_counters(1).unwrap();
    let line: Vec<String> = c
        .iter()
        .filter(|(_, v)| *v != 0)
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    eprintln!(
        "NIC {nic}: {} messages in {:.1} s; {}; faults {:?}",
        2 * PER_FLOW,
        start.elapsed().as_secs_f64(),
        line.join(" "),
        handle.stats()
    );
    if faults.is_some() {
        let s = handle.stats();
        assert!(s.dropped > 0 && s.duplicated > 0);
        assert!(c.get(counter::RETRANSMITS) > 0);
        assert!(c.get(counter::DUPLICATE_REQUESTS) > 0);
    }
}

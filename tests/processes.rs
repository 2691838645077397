//! The verified traffic of [`rnic_tests::traffic`] between NICs in two
//! processes, over UDP wires on 127.0.0.1 and over a shared-memory wire,
//! through the same faults as the in-process test (on the parent's port).
//!
//! The test re-runs its own binary as the peer process (the
//! `peer_process` test, which does nothing unless `RNIC_PEER` is set). The two exchange QP numbers and memory windows over TCP, each
//! runs two requesters towards the other and the two responders of the
//! other's requesters, and at the end each reports the atomic words its
//! responders hold, which the other compares with what its requesters
//! executed.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rnic_emu::net::{FaultConfig, Faults, ShmWire, UdpWire, Wire};
use rnic_emu::{Clock, EmuDevice};
use rnic_tests::fabric::nic_config;
use rnic_tests::traffic::{conn, Requester, Responder, Window};
use rnic_tests::*;

/// Messages each requester sends.
const PER_FLOW: u64 = 10_000;

fn free_udp_port() -> u16 {
    let s = UdpSocket::bind("127.0.0.1:0").expect("bind a probe socket");
    s.local_addr().unwrap().port()
}

fn lo(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// One side: its NIC, its requesters (seeds `mine`) and the responders of
/// the peer's requesters (seeds `theirs`).
fn side(
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

/// Runs the peer process with `RNIC_PEER` set to `spec` (the TCP port is
/// added) and this side on `wire`, with faults.
fn two_processes(wire: Box<dyn Wire>, spec: String) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let tcp_port = listener.local_addr().unwrap().port();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "peer_process",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env("RNIC_PEER", format!("{tcp_port} {spec}"))
        .stdout(Stdio::null())
        .spawn()
        .expect("start the peer process");
    let (tcp, _) = listener.accept().expect("the peer connects");
    let faults = FaultConfig {
        drop: 0.05,
        duplicate: 0.01,
        reorder: 0.01,
        corrupt: 0.001,
        ..FaultConfig::default()
    };
    side(tcp, wire, 1, [101, 102], [201, 202], Some(faults));
    let status = child.wait().unwrap();
    assert!(status.success(), "the peer process failed: {status}");
}

#[test]
fn two_processes_over_udp() {
    let (a_port, b_port) = (free_udp_port(), free_udp_port());
    let wire = UdpWire::bind(lo(a_port), lo(b_port)).expect("UDP wire");
    two_processes(Box::new(wire), format!("udp {b_port} {a_port}"));
}

#[test]
fn two_processes_over_shared_memory() {
    let path = std::env::temp_dir().join(format!("rnic-shm-test-{}", std::process::id()));
    let wire = ShmWire::create(&path).expect("shared-memory wire");
    two_processes(Box::new(wire), format!("shm {}", path.display()));
    let _ = std::fs::remove_file(&path);
}

/// The peer process of [`two_processes_over_udp`] and
/// [`two_processes_over_shared_memory`]; a no-op when run on its own.
#[test]
fn peer_process() {
    let Ok(v) = std::env::var("RNIC_PEER") else {
        return;
    };
    let p: Vec<&str> = v.split(' ').collect();
    let tcp = TcpStream::connect(lo(p[0].parse().unwrap())).expect("connect to the test");
    let wire: Box<dyn Wire> = match p[1] {
        "udp" => {
            let port = |s: &str| lo(s.parse().unwrap());
            Box::new(UdpWire::bind(port(p[2]), port(p[3])).expect("UDP wire"))
        }
        "shm" => Box::new(ShmWire::open(p[2]).expect("shared-memory wire")),
        other => panic!("unknown wire {other}"),
    };
    side(tcp, wire, 2, [201, 202], [101, 102], None);
}

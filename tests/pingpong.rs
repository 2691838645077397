//! `examples/rc_pingpong` as two processes on 127.0.0.1: a server and a
//! client, each with its own emulated NIC on a UDP wire, exchanging their
//! addresses over TCP in ibv_rc_pingpong's format. Sizes from 1 byte to
//! 64 KiB at path MTU 1024 and 4096 (so that messages segment), then the
//! `--ops` round of RDMA WRITE, WRITE with immediate, READ and both
//! atomics in both directions; the server's port is captured with
//! `RNIC_PCAP`, and the capture holds the RoCEv2 frames of the run.

use std::net::{TcpListener, UdpSocket};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use rnic_emu::pcap;
use rnic_emu::wire::frame::{classify, Received};
use rnic_emu::wire::opcode;

fn example() -> PathBuf {
    // target/<profile>/deps/pingpong-… -> target/<profile>/examples/
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .and_then(|d| d.parent())
        .map(|d| d.join("examples").join("rc_pingpong"))
        .expect("the examples directory")
}

fn free_port(udp: bool) -> u16 {
    if udp {
        UdpSocket::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    } else {
        TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port()
    }
}

/// Runs a server and a client with `extra` options; returns both outputs.
fn pair(extra: &[&str], pcap: Option<&PathBuf>) -> (Output, Output) {
    let (tcp, s_udp, c_udp) = (free_port(false), free_port(true), free_port(true));
    let common = |wire: String| -> Vec<String> {
        let mut v = vec!["-p".to_string(), tcp.to_string(), "--wire".into(), wire];
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let mut server = Command::new(example());
    server
        .args(common(format!("127.0.0.1:{s_udp}=127.0.0.1:{c_udp}")))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(p) = pcap {
        server.env("RNIC_PCAP", p);
    }
    let server = server
        .spawn()
        .expect("rc_pingpong (cargo test builds the examples)");
    // The client retries until the server listens.
    let mut client = None;
    for _ in 0..100 {
        let out = Command::new(example())
            .args(common(format!("127.0.0.1:{c_udp}=127.0.0.1:{s_udp}")))
            .args([
                "--mac",
                "02:00:00:00:00:02",
                "--ipv4",
                "192.0.2.2",
                "127.0.0.1",
            ])
            .output()
            .unwrap();
        let refused = String::from_utf8_lossy(&out.stderr).contains("couldn't connect");
        if !refused {
            client = Some(out);
            break;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let server = server.wait_with_output().unwrap();
    (server, client.expect("the client connected"))
}

/// Checks one side's output and returns its stdout.
fn check(o: &Output, who: &str, size: u64, iters: u64) -> String {
    let out = String::from_utf8_lossy(&o.stdout).to_string();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{who}: {}\n{out}\n{err}", o.status);
    let lines: Vec<&str> = out.lines().collect();
    let me = if who == "server" {
        "192.0.2.1"
    } else {
        "192.0.2.2"
    };
    let peer = if who == "server" {
        "192.0.2.2"
    } else {
        "192.0.2.1"
    };
    assert!(
        lines[0].starts_with("  local address:  LID 0x0000, QPN 0x")
            && lines[0].ends_with(&format!("GID ::ffff:{me}")),
        "{who}: {}",
        lines[0]
    );
    assert!(
        lines[1].starts_with("  remote address: LID 0x0000, QPN 0x")
            && lines[1].ends_with(&format!("GID ::ffff:{peer}")),
        "{who}: {}",
        lines[1]
    );
    assert!(
        lines[2].starts_with(&format!("{} bytes in ", size * iters * 2))
            && lines[2].ends_with(" Mbit/sec"),
        "{who}: {}",
        lines[2]
    );
    assert!(
        lines[3].starts_with(&format!("{iters} iters in ")) && lines[3].ends_with(" usec/iter"),
        "{who}: {}",
        lines[3]
    );
    out
}

#[test]
fn sizes_and_mtus() {
    for (size, mtu) in [
        (1u64, 1024),
        (4096, 1024),
        (65536, 1024),
        (4096, 4096),
        (65536, 4096),
    ] {
        let iters = 30;
        let (s, c) = pair(
            &[
                "-s",
                &size.to_string(),
                "-m",
                &mtu.to_string(),
                "-n",
                &iters.to_string(),
            ],
            None,
        );
        check(&s, "server", size, iters);
        check(&c, "client", size, iters);
    }
}

#[test]
fn rdma_operations_both_ways_captured() {
    let dir = std::env::temp_dir().join(format!("rnic-pingpong-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (s, c) = pair(&["-s", "2048", "-n", "20", "--ops"], Some(&dir));
    for (o, who) in [(&s, "server"), (&c, "client")] {
        let out = check(o, who, 2048, 20);
        for line in [
            "RDMA WRITE and READ of 65536 bytes: ok",
            "WRITE with immediate received: ok",
            "compare-and-swap and fetch-and-add: ok",
            "the peer's WRITE, WRITE with immediate and atomics on this side: ok",
        ] {
            assert!(out.contains(line), "{who}: no {line:?} in\n{out}");
        }
    }
    let file = dir.join("rnic-020000000001.pcap");
    let frames = pcap::read(&std::fs::read(&file).unwrap()).unwrap();
    let mut ops = std::collections::BTreeSet::new();
    for f in &frames {
        if let Ok(Received::Roce(r, _)) = classify(&f.frame) {
            ops.insert(r.roce.bth.opcode);
        }
    }
    for op in [
        opcode::RC_SEND_FIRST,
        opcode::RC_SEND_LAST,
        opcode::RC_RDMA_WRITE_FIRST,
        opcode::RC_RDMA_READ_REQUEST,
        opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
        opcode::RC_COMPARE_SWAP,
        opcode::RC_FETCH_ADD,
        opcode::RC_ATOMIC_ACKNOWLEDGE,
        opcode::RC_ACKNOWLEDGE,
    ] {
        assert!(ops.contains(&op), "opcode {op:#x} not captured: {ops:x?}");
    }
    std::fs::remove_dir_all(&dir).unwrap();
}

//! `examples/rc_pingpong` as two processes on 127.0.0.1: a server and a
//! client, each with its own emulated NIC on a UDP wire, exchanging their
//! addresses over TCP in ibv_rc_pingpong's format. Sizes from 1 byte to
//! 64 KiB at path MTU 1024 and 4096 (so that messages segment), then the
//! `--ops` round of RDMA WRITE, WRITE with immediate, READ and both
//! atomics in both directions; the server's port is captured with
//! `RNIC_PCAP`, and the capture holds the RoCEv2 frames of the run. Then
//! `--pattern` through both sides' fault injectors, with `--counters`
//! showing the retransmissions, and a pattern on one side only caught as
//! wrong bytes by the other.

use std::net::{TcpListener, UdpSocket};
use std::path::PathBuf;
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use rnic_emu::pcap;
use rnic_emu::wire::frame::{classify, Received};
use rnic_emu::wire::opcode;

fn example() -> PathBuf {
    example_named("rc_pingpong")
}

fn example_named(name: &str) -> PathBuf {
    // target/<profile>/deps/pingpong-… -> target/<profile>/examples/
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .and_then(|d| d.parent())
        .map(|d| d.join("examples").join(name))
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

/// Runs a server and a client with `extra` options (and `server_extra` on
/// the server); returns both outputs.
fn pair(extra: &[&str], pcap: Option<&PathBuf>) -> (Output, Output) {
    pair_with(extra, &[], pcap)
}

fn pair_with(extra: &[&str], server_extra: &[&str], pcap: Option<&PathBuf>) -> (Output, Output) {
    pair_of(&example(), extra, server_extra, &[], pcap)
}

/// Runs a server and a client of `bin` on ports free a moment ago: the
/// examples bind their own, so another process may take one in between,
/// and then the pair runs again on others.
fn pair_of(
    bin: &PathBuf,
    extra: &[&str],
    server_extra: &[&str],
    client_extra: &[&str],
    pcap: Option<&PathBuf>,
) -> (Output, Output) {
    let in_use = |o: &Output| String::from_utf8_lossy(&o.stderr).contains("os error 98");
    for _ in 0..5 {
        let (s, c) = pair_once(bin, extra, server_extra, client_extra, pcap);
        if !(in_use(&s) || in_use(&c)) {
            return (s, c);
        }
        eprintln!("a port was taken before the pair bound it: again on others");
    }
    panic!("five pairs of ports taken before the examples bound them");
}

fn pair_once(
    bin: &PathBuf,
    extra: &[&str],
    server_extra: &[&str],
    client_extra: &[&str],
    pcap: Option<&PathBuf>,
) -> (Output, Output) {
    let (tcp, s_udp, c_udp) = (free_port(false), free_port(true), free_port(true));
    let common = |wire: String| -> Vec<String> {
        let mut v = vec!["-p".to_string(), tcp.to_string(), "--wire".into(), wire];
        v.extend(extra.iter().map(|s| s.to_string()));
        v
    };
    let mut server = Command::new(bin);
    server
        .args(common(format!("127.0.0.1:{s_udp}=127.0.0.1:{c_udp}")))
        .args(server_extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(p) = pcap {
        server.env("RNIC_PCAP", p);
    }
    let mut server = server
        .spawn()
        .expect("rc_pingpong (cargo test builds the examples)");
    // The client retries until the server listens (or has given up).
    let mut client = None;
    for _ in 0..100 {
        let out = Command::new(bin)
            .args(common(format!("127.0.0.1:{c_udp}=127.0.0.1:{s_udp}")))
            .args([
                "--mac",
                "02:00:00:00:00:02",
                "--ipv4",
                "192.0.2.2",
                "127.0.0.1",
            ])
            .args(client_extra)
            .output()
            .unwrap();
        let refused = String::from_utf8_lossy(&out.stderr).contains("couldn't connect");
        let server_gone = server.try_wait().unwrap().is_some();
        if !refused || server_gone {
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

/// The value of `counter NAME` in an output.
fn counter(out: &str, name: &str) -> u64 {
    let prefix = format!("counter {name} ");
    out.lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no counter {name} in\n{out}"))
        .parse()
        .unwrap()
}

#[test]
fn patterns_through_faults_with_counters() {
    let (s, c) = pair(
        &[
            "-s",
            "5000",
            "-n",
            "50",
            "--pattern",
            "--ops",
            "--faults",
            "drop=0.03,reorder=0.03",
            "--counters",
        ],
        None,
    );
    let mut resent = 0;
    let mut dropped = 0;
    for (o, who) in [(&s, "server"), (&c, "client")] {
        let out = check(o, who, 5000, 50);
        assert!(
            out.contains("  50 messages received, every byte as sent"),
            "{who}: {out}"
        );
        assert!(
            out.contains("compare-and-swap and fetch-and-add: ok"),
            "{who}: {out}"
        );
        for bad in [
            "rx_icrc_errors",
            "rx_malformed",
            "rx_bad_version",
            "rx_bad_pkey",
        ] {
            assert_eq!(counter(&out, bad), 0, "{who}: {bad}");
        }
        assert!(counter(&out, "tx_frames") > 0 && counter(&out, "rx_frames") > 0);
        resent += counter(&out, "retransmits");
        let f = out
            .lines()
            .find_map(|l| l.strip_prefix("faults frames "))
            .expect("the injector's line");
        dropped += f.split(' ').nth(2).unwrap().parse::<u64>().unwrap();
    }
    assert!(dropped > 0, "the injectors dropped nothing");
    assert!(resent > 0, "{dropped} frames dropped, none retransmitted");
}

#[test]
fn a_pattern_on_one_side_only_is_caught() {
    // The server expects patterned messages; the client sends 0x7b bytes as
    // ibv_rc_pingpong does.
    let (s, c) = pair_with(
        &["-s", "300", "-n", "5", "--wait", "2"],
        &["--pattern"],
        None,
    );
    assert!(!s.status.success());
    let err = String::from_utf8_lossy(&s.stderr);
    assert!(err.contains("message 0: byte 0 is 0x7b, not 0x"), "{err}");
    // The client sees its peer stop answering, or the patterned bytes.
    assert!(!c.status.success());
}

#[test]
fn a_bad_fault_list_is_refused() {
    let o = Command::new(example())
        .args(["--faults", "drop=2"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("fault rate drop=\"2\" is not in 0.0..=1.0"),
        "{err}"
    );
}

#[test]
fn chk_layout_both_sides_and_a_mismatch() {
    // ibv_rc_pingpong's -c: a 0 at the start of each of the three pages.
    let (s, c) = pair(&["-s", "9000", "-n", "5", "-c"], None);
    check(&s, "server", 9000, 5);
    check(&c, "client", 9000, 5);
    // Only the server expects the zeros: the client's 0x7b at offset 0 is
    // caught.
    let (s, _) = pair_with(&["-s", "9000", "-n", "5", "--wait", "2"], &["-c"], None);
    let err = String::from_utf8_lossy(&s.stderr);
    assert!(err.contains("message 0: byte 0 is 0x7b, not 0x00"), "{err}");
}

#[test]
fn ud_pingpong_over_ipv4_and_ipv6() {
    let ud = example_named("ud_pingpong");
    for gid in ["0", "1"] {
        for size in ["1", "2048", "4096"] {
            let (s, c) = pair_of(&ud, &["-g", gid, "-s", size, "-n", "50"], &[], &[], None);
            for (o, who) in [(&s, "server"), (&c, "client")] {
                let out = String::from_utf8_lossy(&o.stdout);
                let err = String::from_utf8_lossy(&o.stderr);
                assert!(o.status.success(), "{who} -g {gid} -s {size}: {out}\n{err}");
                let want_gid = if gid == "0" {
                    "GID ::ffff:192.0.2."
                } else {
                    "GID fe80::"
                };
                assert!(
                    out.lines().take(2).all(|l| l.contains(want_gid)),
                    "{who}: {out}"
                );
                let bytes = size.parse::<u64>().unwrap() * 100;
                assert!(out.contains(&format!("{bytes} bytes in ")), "{who}: {out}");
                assert!(
                    out.contains("50 messages received from QP 0x"),
                    "{who}: {out}"
                );
            }
        }
    }
    // Larger than the port's MTU: refused before anything is sent.
    let o = Command::new(&ud)
        .args(["-s", "4097", "--wire", "127.0.0.1:0=127.0.0.1:9"])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("Requested size larger than port MTU (4096)"),
        "{err}"
    );
}

#[test]
fn uc_pingpong() {
    for (size, mtu) in [("1", "1024"), ("5000", "1024"), ("65536", "4096")] {
        let (s, c) = pair(
            &["--uc", "--pattern", "-s", size, "-m", mtu, "-n", "30"],
            None,
        );
        let n = size.parse().unwrap();
        for (o, who) in [(&s, "server"), (&c, "client")] {
            let out = check(o, who, n, 30);
            assert!(
                out.contains("30 messages received, every byte as sent"),
                "{who}: {out}"
            );
        }
    }
    let o = Command::new(example())
        .args(["--uc", "--ops"])
        .output()
        .unwrap();
    assert!(!o.status.success(), "--uc and --ops together");
}

/// `--registers` (the client, whose output is read as it runs) and
/// `--trace FILE` (the server): each side's register accesses, commands,
/// WQEs, frames and CQEs as they happen, and the ping-pong still runs.
#[test]
fn registers_show_each_side_at_the_register_level() {
    let trace = std::env::temp_dir().join(format!("rnic-pp-trace-{}.jsonl", std::process::id()));
    let t = trace.to_str().unwrap();
    let (server, client) = pair_of(
        &example(),
        &["-s", "64", "-n", "2"],
        &["--trace", t],
        &["--registers"],
        None,
    );
    let server_trace = std::fs::read_to_string(&trace).unwrap();
    std::fs::remove_file(&trace).unwrap();
    let client_out = String::from_utf8_lossy(&client.stdout).into_owned();
    for (who, o, text) in [
        ("server", &server, server_trace),
        ("client", &client, client_out),
    ] {
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            o.status.success(),
            "{who}: {out}{}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(out.contains("2 iters in"), "{who}: {out}");
        assert!(text.contains("MMIO BAR0+0x05c CMDQ_DB"), "{who}");
        assert!(text.contains("CREATE_QP done: OK qpn"), "{who}");
        // A SEND: its WQE, its packet, the ACK, and the CQEs.
        let mut at = text.find("ctrl SEND signaled").expect("a send WQE");
        for line in ["FRAME", "RC_SEND_ONLY", "RC_ACKNOWLEDGE", "CQE cqn"] {
            at += text[at..]
                .find(line)
                .unwrap_or_else(|| panic!("{who}: {line}: {text}"));
        }
        assert!(text.contains("RESP RECV wqe 1 SUCCESS"), "{who}");
    }
}

//! Unmodified Debian programs (ibverbs-utils, perftest) over the drop-in
//! libibverbs, each process a client of one rnicd (`vfio-user=`): two of
//! them exchange traffic through rnicd's switch, four at once in two
//! pairs, and one killed in the middle of a transfer while the others go
//! on (scripts/setup.sh installs the programs).

mod common;

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};

use rnic_tests::dropin::lib_dir;
use std::time::{Duration, Instant};

/// `program args` over the drop-in, its device the one rnicd at `socket`
/// gives it.
fn program(program: &str, args: &[&str], socket: &Path) -> Command {
    let mut c = Command::new(program);
    c.args(args)
        .env("LD_LIBRARY_PATH", lib_dir())
        .env("RNIC_DEVICES", format!("vfio-user={}", socket.display()))
        .env_remove("RNIC_DEVICES_FILE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    c
}

/// A TCP port nobody listened on a moment ago, for a pair's exchange of
/// QP numbers.
fn free_port() -> String {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port().to_string()
}

fn text(o: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    )
}

/// A server started, and its client started once the server listens
/// (started again while it cannot connect).
struct Pair {
    server: Child,
    client: Child,
}

/// Whether a socket listens on TCP port `port` (from /proc/net/tcp and
/// tcp6: the local address's port in hex, state 0A).
fn listening(port: &str) -> bool {
    let hex = format!(":{:04X}", port.parse::<u16>().unwrap());
    ["/proc/net/tcp", "/proc/net/tcp6"].iter().any(|f| {
        std::fs::read_to_string(f)
            .unwrap_or_default()
            .lines()
            .any(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                w.len() > 3 && w[1].ends_with(&hex) && w[3] == "0A"
            })
    })
}

fn pair(name: &str, args: &[&str], socket: &Path) -> Pair {
    pair_traced(name, args, socket, None)
}

/// [`pair`], the client under `strace -f -ff` writing a trace file per
/// thread in `trace`.
fn pair_traced(name: &str, args: &[&str], socket: &Path, trace: Option<&Path>) -> Pair {
    let port = free_port();
    let args_p = [args, &["-p", &port]].concat();
    let server = program(name, &args_p, socket)
        .spawn()
        .unwrap_or_else(|e| panic!("{name}: {e} (scripts/setup.sh installs it)"));
    let deadline = Instant::now() + Duration::from_secs(20);
    // Not by connecting: the servers take the first connection as their
    // client's.
    while !listening(&port) {
        assert!(
            Instant::now() < deadline,
            "{name}: the server never listened"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let client_args = [&args_p[..], &["127.0.0.1"]].concat();
    let mut client = match trace {
        None => program(name, &client_args, socket),
        Some(dir) => {
            let mut c = program("strace", &["-f", "-ff", "-qq", "-o"], socket);
            c.arg(dir.join("t")).arg(name).args(&client_args);
            c
        }
    };
    let client = client.spawn().unwrap();
    Pair { server, client }
}

/// Waits for both and checks that each exited 0 with `says` in its
/// output and no error.
fn finished(name: &str, p: Pair, says: &str) -> (String, String) {
    let (s, c) = (
        p.server.wait_with_output().unwrap(),
        p.client.wait_with_output().unwrap(),
    );
    for (who, o) in [("server", &s), ("client", &c)] {
        let all = text(o);
        assert!(o.status.success(), "{name} {who}: {all}");
        assert!(
            all.contains(says),
            "{name} {who} does not say {says:?}:\n{all}"
        );
        for bad in ["Failed", "failed", "Couldn't", "Unable", "rror"] {
            assert!(!all.contains(bad), "{name} {who} says {bad:?}:\n{all}");
        }
    }
    (text(&s), text(&c))
}

#[test]
fn ibv_rc_pingpong_between_two_processes_through_rnicd() {
    let (daemon, socket) = common::daemon("pingpong", 2, 2);
    let p = pair(
        "ibv_rc_pingpong",
        &["-d", "rnic0", "-g", "0", "-n", "200", "-s", "8192", "-c"],
        &socket,
    );
    let (_, client) = finished("ibv_rc_pingpong", p, "iters in");
    assert!(client.contains("200 iters"), "{client}");
    common::exits(daemon);
}

#[test]
fn ib_write_bw_between_two_processes_through_rnicd() {
    let (daemon, socket) = common::daemon("write-bw", 2, 2);
    let args = ["-d", "rnic0", "-x", "0", "-s", "65536", "-n", "500"];
    let p = pair("ib_write_bw", &args, &socket);
    let (_, client) = finished("ib_write_bw", p, "BW average");
    let line = client
        .lines()
        .find(|l| l.trim_start().starts_with("65536"))
        .unwrap_or_else(|| panic!("no result line:\n{client}"));
    let mbps: f64 = line.split_whitespace().nth(3).unwrap().parse().unwrap();
    assert!(mbps > 0.0, "{line}");
    common::exits(daemon);
}

#[test]
fn four_clients_in_two_pairs_and_one_killed_mid_transfer() {
    // Five clients in all: the two pairs, then one after the kill.
    let (daemon, socket) = common::daemon("kill", 5, 5);
    let long = ["-d", "rnic0", "-x", "0", "-s", "65536", "-n", "1000000"];
    let mut doomed = pair("ib_write_bw", &long, &socket);
    let short = ["-d", "rnic0", "-x", "0", "-s", "4096", "-n", "5000"];
    let survivors = pair("ib_write_bw", &short, &socket);
    // The long transfer is under way: its server is killed.
    std::thread::sleep(Duration::from_millis(1500));
    assert!(
        doomed.client.try_wait().unwrap().is_none(),
        "the long transfer ended before the kill"
    );
    doomed.server.kill().unwrap();
    let _ = doomed.server.wait();
    // Its peer runs out of retries instead of hanging.
    let deadline = Instant::now() + Duration::from_secs(60);
    let status = loop {
        if let Some(s) = doomed.client.try_wait().unwrap() {
            break s;
        }
        assert!(Instant::now() < deadline, "the killed server's peer hangs");
        std::thread::sleep(Duration::from_millis(50));
    };
    let out = text(&doomed.client.wait_with_output().unwrap());
    assert!(
        !status.success(),
        "the peer of a killed process fails:\n{out}"
    );
    // The other pair, whose devices share the switch and the worker,
    // completes.
    finished("ib_write_bw", survivors, "BW average");
    // A fifth client is served as the first were.
    let o = program("ibv_devinfo", &[], &socket).output().unwrap();
    assert!(o.status.success(), "{}", text(&o));
    assert!(text(&o).contains("PORT_ACTIVE"), "{}", text(&o));
    // rnicd exits once every client's session has ended, the killed one's
    // with its device and objects.
    common::exits(daemon);
}

/// System calls of a traced program: wake-ups of rnicd's device worker
/// (an 8-byte write of 1 to an eventfd: a doorbell posted while it slept)
/// and every other call, over all its threads.
fn calls(dir: &Path) -> (usize, usize) {
    let (mut wakes, mut other) = (0, 0);
    for e in std::fs::read_dir(dir).unwrap() {
        let text = std::fs::read_to_string(e.unwrap().path()).unwrap();
        // Signals and exits are not calls.
        for l in text
            .lines()
            .filter(|l| !l.starts_with("---") && !l.starts_with("+++"))
        {
            if l.starts_with("write(") && l.contains(r#", "\1\0\0\0\0\0\0\0", 8)"#) {
                wakes += 1;
            } else {
                other += 1;
            }
        }
    }
    std::fs::remove_dir_all(dir).unwrap();
    (wakes, other)
}

/// Unmodified ib_write_bw's client, traced, for `n` 8-byte WRITEs through
/// rnicd: its (wake-ups, other calls).
fn traced_write_bw(n: u64) -> (usize, usize) {
    let (daemon, socket) = common::daemon(&format!("syscalls-{n}"), 2, 2);
    let dir = std::env::temp_dir().join(format!("rnicd-syscalls-{}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let n = n.to_string();
    let args = ["-d", "rnic0", "-x", "0", "-s", "8", "-n", &n];
    let p = pair_traced("ib_write_bw", &args, &socket, Some(&dir));
    finished("ib_write_bw", p, "BW average");
    common::exits(daemon);
    calls(&dir)
}

/// Kernel bypass through rnicd: a program's data path makes no system
/// call per message, its doorbells posted in shared memory and its
/// completions polled there. Unmodified ib_write_bw runs N and 100 × N
/// 8-byte WRITEs under strace: its calls other than the device's
/// wake-ups must not grow with N (setup and teardown are the same). The
/// wake-ups (a doorbell posted while rnicd's worker slept, which it does
/// after 10 µs without work) are reported, not bounded, here: each is a
/// traced call that stops the program for longer than that, so that the
/// worker dozes off again before the next doorbell. Untraced, they are
/// bounded by `a_stream_of_writes_wakes_rnicd_less_than_once_a_list`
/// (rnicd/tests/driver.rs).
#[test]
fn no_system_call_per_message_through_rnicd() {
    let n = 2_000;
    let (small_wakes, small) = traced_write_bw(n);
    let (large_wakes, large) = traced_write_bw(100 * n);
    eprintln!(
        "ib_write_bw through rnicd: {small} calls and {small_wakes} wake-ups for {n} messages, \
         {large} and {large_wakes} for {}",
        100 * n
    );
    assert!(
        large <= small + 200,
        "the program's system calls grew from {small} to {large}"
    );
    assert!(small > 0, "nothing traced");
}

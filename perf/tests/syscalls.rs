//! Kernel bypass, checked: a steady-state data path makes no system call
//! per message. `rnic-perf write_bw` runs N and 100 × N 8-byte WRITEs
//! under `strace -f -ff` (one trace file per thread), and the application
//! thread's system calls must not grow with N. Inline, the device runs on
//! that thread too, so its calls are counted with it; a device thread's
//! calls (an idle worker's sleeps) are reported, not bounded, since they
//! follow how often the host lets the application fall behind. With a
//! device worker, a doorbell rung while the worker sleeps wakes it with
//! one write to its eventfd (an emulated device's price for not spinning;
//! hardware needs none): those are counted apart, and bounded by one per
//! 64 messages, the signalled batch. A worker so woken may find the
//! application thread stepping the NIC it lent itself to while it polled,
//! and wait for the NIC's lock: the application thread then wakes it with
//! one futex call on release. Those hand-overs are counted apart too, and
//! bounded by the worker's wake-ups, each of which can cause at most one
//! (measured: about one per 400 messages on a 2-vCPU Xeon, a third of the
//! wake-ups). Then the same over the shared-memory wire between two
//! processes, each one thread running its inline device.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// A thread's system calls, from its trace file.
#[derive(Debug, Default, Clone, Copy)]
struct Calls {
    /// Calls of any other kind.
    other: usize,
    /// Device worker wake-ups: an 8-byte write of 1 to an eventfd.
    wakes: usize,
    /// Lock and condition-variable hand-overs between threads: futex.
    handovers: usize,
}

impl Calls {
    fn all(&self) -> usize {
        self.other + self.wakes + self.handovers
    }
}

fn calls(trace: &Path) -> Calls {
    let text = std::fs::read_to_string(trace).unwrap();
    let mut c = Calls::default();
    // Signals and exits are not calls.
    for l in text
        .lines()
        .filter(|l| !l.starts_with("---") && !l.starts_with("+++"))
    {
        if l.starts_with("write(") && l.contains(r#", "\1\0\0\0\0\0\0\0", 8)"#) {
            c.wakes += 1;
        } else if l.starts_with("futex(") {
            c.handovers += 1;
        } else {
            c.other += 1;
        }
    }
    c
}

/// A fresh directory for one traced run's files.
fn trace_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("rnic-syscalls-{}-{name}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// `rnic-perf args` under strace, its threads' traces in `dir`.
fn strace(dir: &Path, args: &[&str]) -> Child {
    Command::new("strace")
        .args(["-f", "-ff", "-qq", "-o"])
        .arg(dir.join("t"))
        .arg(env!("CARGO_BIN_EXE_rnic-perf"))
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("strace (scripts/setup.sh installs it)")
}

fn finish(c: Child) {
    let out = c.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// (the main thread's calls, every other thread's calls) in `dir`, which
/// goes.
fn count(dir: &Path) -> (Calls, Vec<usize>) {
    let mut main = None;
    let mut others = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let text = std::fs::read_to_string(&p).unwrap();
        if text.starts_with("execve(") {
            main = Some(calls(&p));
        } else {
            others.push(calls(&p).all());
        }
    }
    std::fs::remove_dir_all(dir).unwrap();
    (main.expect("the main thread's trace"), others)
}

/// (the main thread's calls, every other thread's calls) for `n`
/// messages.
fn traced(device: &str, n: u64) -> (Calls, Vec<usize>) {
    let dir = trace_dir(&format!("{device}-{n}"));
    let n = n.to_string();
    finish(strace(
        &dir,
        &["write_bw", "-n", &n, "--device", device, "--no-baselines"],
    ));
    count(&dir)
}

/// The main threads' calls (server, client) of `n` messages between two
/// processes on the shared-memory wire.
fn traced_pair(n: u64) -> (usize, usize) {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port().to_string()
    };
    let (sd, cd) = (trace_dir(&format!("s{n}")), trace_dir(&format!("c{n}")));
    let n = n.to_string();
    let args = [
        "write_bw",
        "-n",
        &n,
        "--wire",
        "shm",
        "-p",
        &port,
        "--no-baselines",
    ];
    let server = strace(&sd, &args);
    let mut client_args = args.to_vec();
    client_args.push("--client");
    let client = strace(&cd, &client_args);
    finish(client);
    finish(server);
    (count(&sd).0.all(), count(&cd).0.all())
}

/// Calls a longer run may make beyond a shorter one's: allocator noise,
/// and the yields of a command's wait at teardown, which follow how deep
/// into its idle backoff the device thread has gone. A call per message
/// would add 990,000; one per batch of 64, 15,000.
const SLACK: usize = 200;
/// The same with a device worker: the teardown's commands wait for it,
/// as long as the worker takes to get to them (it takes a command at
/// least every 4,096 steps of a busy NIC), which follows how much work
/// the run left it.
const SLACK_THREAD: usize = 2000;

#[test]
fn no_system_call_per_message() {
    let n = 10_000;
    for device in ["inline", "thread"] {
        let (small, small_others) = traced(device, n);
        let (large, large_others) = traced(device, 100 * n);
        eprintln!(
            "{device}: application thread {small:?} for {n} messages, {large:?} for {}; \
             other threads {small_others:?} and {large_others:?}",
            100 * n
        );
        assert!(
            large.wakes as u64 <= 100 * n / 64,
            "{device}: {} wake-ups of the device worker for {} messages",
            large.wakes,
            100 * n
        );
        let slack = if device == "thread" {
            SLACK_THREAD
        } else {
            SLACK
        };
        assert!(
            large.other <= small.other + slack,
            "{device}: the application thread's system calls grew from {} to {}",
            small.other,
            large.other
        );
        assert!(
            large.handovers <= small.handovers + large.wakes + SLACK,
            "{device}: the application thread's lock hand-overs grew from {} to {}, \
             beyond the worker's {} wake-ups",
            small.handovers,
            large.handovers,
            large.wakes
        );
        if device == "inline" {
            let (a, b): (usize, usize) = (small_others.iter().sum(), large_others.iter().sum());
            assert!(
                b <= a + SLACK,
                "inline: other threads' calls grew from {a} to {b}"
            );
        }
    }
}

#[test]
fn no_system_call_per_message_between_processes_on_shared_memory() {
    let n = 10_000;
    let (s1, c1) = traced_pair(n);
    let (s2, c2) = traced_pair(100 * n);
    eprintln!(
        "shared memory: server {s1} and client {c1} calls for {n} messages, {s2} and {c2} for {}",
        100 * n
    );
    assert!(
        s2 <= s1 + SLACK,
        "the server's calls grew from {s1} to {s2}"
    );
    assert!(
        c2 <= c1 + SLACK,
        "the client's calls grew from {c1} to {c2}"
    );
}

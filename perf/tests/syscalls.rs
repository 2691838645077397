//! Kernel bypass, checked: a steady-state data path makes no system call
//! per message. `rnic-perf write_bw` runs N and 100 × N 8-byte WRITEs
//! under `strace -f -ff` (one trace file per thread), and the application
//! thread's system calls must not grow with N. Inline, the device runs on
//! that thread too, so its calls are counted with it; a device thread's
//! calls (an idle worker's backoff: yields, then a futex sleep) are
//! reported, not bounded, since they follow how often the host lets the
//! application fall behind.

use std::path::Path;
use std::process::Command;

/// System calls a thread's trace file records.
fn calls(trace: &Path) -> usize {
    std::fs::read_to_string(trace)
        .unwrap()
        .lines()
        // Signals and exits are not calls.
        .filter(|l| !l.starts_with("---") && !l.starts_with("+++"))
        .count()
}

/// (the main thread's calls, every other thread's) for `n` messages.
fn traced(device: &str, n: u64) -> (usize, Vec<usize>) {
    let dir =
        std::env::temp_dir().join(format!("rnic-syscalls-{}-{device}-{n}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let out = Command::new("strace")
        .args(["-f", "-ff", "-qq", "-o"])
        .arg(dir.join("t"))
        .arg(env!("CARGO_BIN_EXE_rnic-perf"))
        .args([
            "write_bw",
            "-n",
            &n.to_string(),
            "--device",
            device,
            "--no-baselines",
        ])
        .output()
        .expect("strace (scripts/setup.sh installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut main = None;
    let mut others = Vec::new();
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        let text = std::fs::read_to_string(&p).unwrap();
        if text.starts_with("execve(") {
            main = Some(calls(&p));
        } else {
            others.push(calls(&p));
        }
    }
    std::fs::remove_dir_all(&dir).unwrap();
    (main.expect("the main thread's trace"), others)
}

/// Calls a longer run may make beyond a shorter one's (allocator and
/// timing noise; none of them per message).
const SLACK: usize = 16;

#[test]
fn no_system_call_per_message() {
    let n = 10_000;
    for device in ["inline", "thread"] {
        let (small, small_others) = traced(device, n);
        let (large, large_others) = traced(device, 100 * n);
        eprintln!(
            "{device}: application thread {small} calls for {n} messages, {large} for {}; \
             other threads {small_others:?} and {large_others:?}",
            100 * n
        );
        assert!(
            large <= small + SLACK,
            "{device}: the application thread's system calls grew from {small} to {large}"
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

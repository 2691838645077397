//! The examples as users run them: each exits 0 and prints what it
//! checked, and `RUST_LOG=debug` shows what the driver and the device log
//! (every example initialises env_logger).

use std::path::PathBuf;
use std::process::Command;

/// `target/<profile>/examples/NAME`, which `cargo test` builds.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .and_then(|d| d.parent())
        .map(|d| d.join("examples").join(name))
        .expect("the examples directory")
}

/// An example run without arguments.
const NO_ARGS: [&str; 0] = [];

/// Runs example `name` with `args`; it must exit 0. Its standard output.
fn run_ok<S: AsRef<std::ffi::OsStr>>(name: &str, args: impl IntoIterator<Item = S>) -> String {
    let o = Command::new(example(name))
        .args(args)
        .output()
        .expect("cargo test builds the examples");
    let out = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "{name}: {out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    out
}

#[test]
fn loopback_verifies_its_transfers_and_logs_at_debug() {
    let o = Command::new(example("loopback"))
        .env("RUST_LOG", "debug")
        .output()
        .expect("cargo test builds the examples");
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(o.status.success(), "{out}{err}");
    assert!(out.contains("loopback: all transfers verified"), "{out}");
    // The driver's and the device's own records.
    assert!(err.contains("DEBUG rnic_driver"), "{err}");
    assert!(err.contains("rnic_emu"), "{err}");
}

#[test]
fn bringup_explains_every_step_in_the_spec_s_order() {
    let out = run_ok("bringup", NO_ARGS);
    assert!(out.contains("bringup: the sequence is the spec's"), "{out}");
    // Every line of the trace comes with what it means.
    for step in [
        "ID -> 0x43494e52 (\"RNIC\")",
        "CTRL <- 0x1 (Ctrl { reset: true",
        "CMDQ_BASE_HI <- ",
        "EQ_CTRL <- ",
        "STATUS -> 0x3 (Status { ready: true, enabled: true",
        "CMD 0 ALLOC_UCTX done: OK",
    ] {
        let at = out.find(step).unwrap_or_else(|| panic!("{step}: {out}"));
        let next = out[at..].lines().nth(1).unwrap_or("");
        assert!(
            next.trim_start().starts_with("= "),
            "{step} is explained: {next}"
        );
    }
}

#[test]
fn doorbell_moves_bytes_with_a_hand_built_wqe() {
    let out = run_ok("doorbell", NO_ARGS);
    assert!(
        out.contains("doorbell: the bytes arrived and the CQE says so"),
        "{out}"
    );
    // In order: the hand-built WQE as the trace decodes it at the
    // doorbell, the CQE the device wrote, and what the example read.
    let mut at = 0;
    for line in [
        "| MMIO BAR0+0x000 ID -> 0x43494e52",
        "| CMD 0 ALLOC_UCTX done: OK",
        "| CMD 4 CREATE_QP done: OK qpn",
        "| MMIO BAR2+0x0 SQ doorbell qpn",
        "ctrl RDMA_WRITE signaled ds 3 | raddr",
        "| CQE cqn 1 idx 0 owner 1: REQ RDMA_WRITE wqe 1 SUCCESS",
        "CQE: wr_id 42 Some(RdmaWrite) Some(Success)",
        "at the remote address: \"written by hand, rung by hand\"",
    ] {
        at += out[at..]
            .find(line)
            .unwrap_or_else(|| panic!("{line} after {at}: {out}"));
    }
}

#[test]
fn loopback_shows_each_transfer_at_the_register_level() {
    let trace = std::env::temp_dir().join(format!("rnic-loopback-{}.jsonl", std::process::id()));
    let out = run_ok(
        "loopback",
        [
            "--registers".as_ref(),
            "--trace".as_ref(),
            trace.as_os_str(),
        ],
    );
    // The RDMA WRITE: the application's note, its WQE at the doorbell (or
    // a BlueFlame write), its packet out and back, the ACK, its CQE.
    let mut at = out.find("| app      RDMA WRITE").expect("the note");
    for line in [
        "ctrl RDMA_WRITE signaled",
        "| wire     FRAME tx",
        "RC_RDMA_WRITE_ONLY",
        "| wire     FRAME rx",
        "RC_ACKNOWLEDGE",
        "| device   CQE",
        "REQ RDMA_WRITE",
        "SUCCESS",
        "RDMA WRITE  QP",
    ] {
        at += out[at..]
            .find(line)
            .unwrap_or_else(|| panic!("{line}: {out}"));
    }
    // The file holds the same events, one JSON object per line.
    let json = std::fs::read_to_string(&trace).unwrap();
    std::fs::remove_file(&trace).unwrap();
    let printed = out.lines().filter(|l| l.starts_with("      | ")).count();
    assert_eq!(json.lines().count(), printed);
    assert!(json.lines().all(|l| l.starts_with("{\"seq\":")));
}

/// The figures of an all-reduce result line (`size count float sum time
/// algbw busbw #wrong what`): size, time in µs, algbw, busbw, #wrong.
fn result_line(out: &str, what: &str) -> (f64, f64, f64, f64, usize) {
    let l = out
        .lines()
        .find(|l| !l.starts_with('#') && l.trim_end().ends_with(what))
        .unwrap_or_else(|| panic!("a {what} line: {out}"));
    let w: Vec<&str> = l.split_whitespace().collect();
    let num = |i: usize| w[i].parse::<f64>().unwrap_or_else(|_| panic!("{l}"));
    assert_eq!((w[2], w[3]), ("float", "sum"), "{l}");
    (num(0), num(4), num(5), num(6), num(7) as usize)
}

/// Checks a result line: nothing wrong, and algbw and busbw as nccl-tests
/// computes them from the size and the time.
fn check_result(out: &str, what: &str, ranks: usize, size: usize) {
    let (bytes, us, algbw, busbw, wrong) = result_line(out, what);
    assert_eq!(bytes as usize, size, "{out}");
    assert_eq!(wrong, 0, "{out}");
    assert!(us > 0.0, "{out}");
    let want = bytes / (us * 1e-6) / 1e9;
    // Printed with 3 decimals, from a time printed with one.
    assert!((algbw - want).abs() <= 0.002 + want * 0.01, "{out}");
    let bus = algbw * 2.0 * (ranks - 1) as f64 / ranks as f64;
    assert!((busbw - bus).abs() <= 0.002 + bus * 0.01, "{out}");
}

#[test]
fn allreduce_sums_over_2_to_8_nics_on_the_switch() {
    for (ranks, size) in [(2, 4096), (3, 1000), (5, 65536), (8, 40000)] {
        let (n, bytes) = (ranks.to_string(), size.to_string());
        let out = run_ok(
            "allreduce",
            ["--ranks", &n, "--size", &bytes, "--iters", "3"],
        );
        assert!(
            out.contains("every element of every rank is the sum"),
            "{out}"
        );
        // Rounded down to whole floats in whole chunks.
        let size = size / (4 * ranks) * (4 * ranks);
        check_result(&out, "rnic", ranks, size);
        check_result(&out, "tcp", ranks, size);
        assert!(
            out.contains(&format!("{} steps per all-reduce", 2 * (ranks - 1))),
            "{out}"
        );
    }
    // Bad arguments are refused with a reason.
    for bad in [["--ranks", "9"], ["--size", "3"]] {
        let o = Command::new(example("allreduce"))
            .args(bad)
            .output()
            .unwrap();
        assert!(!o.status.success());
        assert!(String::from_utf8_lossy(&o.stderr).contains("FAILED: --"));
    }
}

/// `allreduce --wire WIRE` (with `wire`'s arguments) for `ranks`
/// processes on ports from `port`, rank `late` started `delay` after the
/// others: each exits 0, says its sum is right, and prints nccl-tests'
/// columns. Returns rank 0's output.
fn allreduce_processes(
    ranks: usize,
    late: usize,
    delay: std::time::Duration,
    port: u32,
    wire: &[&std::ffi::OsStr],
) -> String {
    let spawn = |r: usize| {
        Command::new(example("allreduce"))
            .args(wire)
            .args(["--ranks", &ranks.to_string()])
            .args(["--size", "262144", "--iters", "2", "--rank", &r.to_string()])
            .args(["--port", &port.to_string()])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap()
    };
    let mut children: Vec<_> = (0..ranks)
        .filter(|&r| r != late)
        .map(|r| (r, spawn(r)))
        .collect();
    std::thread::sleep(delay);
    children.push((late, spawn(late)));
    let size = 262144 / (4 * ranks) * (4 * ranks);
    let mut first = String::new();
    for (r, c) in children {
        let o = c.wait_with_output().unwrap();
        let out = String::from_utf8_lossy(&o.stdout).into_owned();
        assert!(
            o.status.success(),
            "rank {r}: {out}{}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(
            out.contains(&format!("rank {r}: every element is the sum")),
            "{out}"
        );
        check_result(&out, &format!("rnic rank {r}"), ranks, size);
        check_result(&out, &format!("tcp rank {r}"), ranks, size);
        if r == 0 {
            first = out;
        }
    }
    first
}

/// `--wire udp`.
fn udp() -> [&'static std::ffi::OsStr; 2] {
    ["--wire".as_ref(), "udp".as_ref()]
}

/// `allreduce --wire rnicd` for 3 processes, every NIC a device of one
/// rnicd (served here, in this process): each rank exits 0, says its sum
/// is right, and prints nccl-tests' columns; rnicd then has served the
/// six devices and returns.
#[test]
fn allreduce_sums_between_processes_through_rnicd() {
    let ranks = 3;
    let path = std::env::temp_dir().join(format!("rnic-allreduce-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
    let cfg = rnic_emu::EmuConfig::default();
    let devices = 2 * ranks as u64;
    let rnicd = std::thread::spawn(move || {
        rnicd::serve(listener, &cfg, devices as usize, Some(devices), None)
    });
    let wire = [
        "--wire".as_ref(),
        "rnicd".as_ref(),
        "--socket".as_ref(),
        path.as_os_str(),
    ];
    let zero = allreduce_processes(ranks, 0, std::time::Duration::ZERO, ports(2), &wire);
    assert!(zero.contains("two devices each of one rnicd"), "{zero}");
    rnicd.join().unwrap().expect("rnicd served every device");
    let _ = std::fs::remove_file(&path);
}

/// A port range of its own for this test process and test (below the
/// kernel's ephemeral ports, from 32768): `slot` 0, 1 or 2, 16 ports each.
fn ports(slot: u32) -> u32 {
    20000 + (std::process::id() % 250) * 48 + slot * 16
}

#[test]
fn allreduce_sums_between_processes_over_udp() {
    allreduce_processes(3, 0, std::time::Duration::ZERO, ports(0), &udp());
}

/// A rank that starts two seconds late: its neighbours, which already
/// write to or wait on the others, still answer their writes and
/// retransmissions (far beyond the 0.5 s a write is retried) while they
/// wait to meet it.
#[test]
fn allreduce_waits_for_a_rank_that_starts_late() {
    allreduce_processes(4, 2, std::time::Duration::from_secs(2), ports(1), &udp());
}

/// `allreduce --registers --trace FILE`: beneath rank 0's first write,
/// its WQE, its packet, the peer's receive completion with the
/// immediate data, the ACK and rank 0's send completion; the file holds
/// the same events.
#[test]
fn allreduce_shows_a_write_at_the_register_level() {
    let trace = std::env::temp_dir().join(format!("rnic-allreduce-{}.jsonl", std::process::id()));
    let args = [
        "--ranks",
        "2",
        "--size",
        "64",
        "--iters",
        "1",
        "--registers",
        "--trace",
    ];
    let mut args: Vec<&std::ffi::OsStr> = args.iter().map(|a| a.as_ref()).collect();
    args.push(trace.as_os_str());
    let out = run_ok("allreduce", args);
    assert!(
        out.contains("every element of every rank is the sum"),
        "{out}"
    );
    let mut at = out
        .find("| app      rank 0 step 0 (reduce-scatter): RDMA WRITE with immediate 0 of chunk 0 into rank 1's staging slot 0")
        .expect("the note");
    let after = |from: usize, lines: &[&str]| {
        let mut at = from;
        for line in lines {
            at += out[at..]
                .find(line)
                .unwrap_or_else(|| panic!("{line}: {out}"));
        }
    };
    after(
        at,
        &[
            "ctrl RDMA_WRITE_WITH_IMM signaled",
            "| wire     FRAME tx",
            "RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE",
            "ImmDt 0x00000000",
        ],
    );
    at += out[at..].find("ImmDt 0x00000000").unwrap();
    // The two sides' workers run at once: the peer's receive completion
    // and the ACK's way back are in either order.
    after(at, &["| peer     CQE", "RESP RECV_RDMA_WITH_IMM", "len 32"]);
    after(
        at,
        &[
            "| wire     FRAME rx",
            "RC_ACKNOWLEDGE",
            "| device   CQE",
            "REQ RDMA_WRITE",
            "SUCCESS",
        ],
    );
    assert!(
        out.contains("| app      rank 1 step 0: rank 0's write with immediate 0 arrived (32 B)"),
        "{out}"
    );
    let json = std::fs::read_to_string(&trace).unwrap();
    std::fs::remove_file(&trace).unwrap();
    let printed = out.lines().filter(|l| l.starts_with("      | ")).count();
    assert_eq!(json.lines().count(), printed);
    assert!(json.contains("\"lane\":\"peer\""), "the peer NIC's events");
}

//! `rnic-perf` end to end: every test runs, prints perftest's columns with
//! one row per size, and sets each figure beside its baselines.

use std::process::Command;

fn run(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_rnic-perf"))
        .args(args)
        .output()
        .expect("run rnic-perf");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "rnic-perf {args:?} failed: {}\n{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    text
}

/// The rows of `text` that start with a size.
fn rows(text: &str) -> Vec<Vec<String>> {
    text.lines()
        .filter(|l| {
            l.split_whitespace()
                .next()
                .is_some_and(|w| w.parse::<u64>().is_ok())
        })
        .map(|l| l.split_whitespace().map(str::to_owned).collect())
        .collect()
}

#[test]
fn latency_tests_print_perftest_columns_and_their_baselines() {
    for (test, device) in [
        ("write_lat", "inline"),
        ("send_lat", "thread"),
        ("read_lat", "inline"),
        ("atomic_lat", "thread"),
    ] {
        let out = run(&[
            test,
            "-n",
            "300",
            "-s",
            "64",
            "--device",
            device,
            "--cpu-util",
        ]);
        assert!(out.contains("t_typical[usec]") && out.contains("99.9% percentile[usec]"));
        let r = rows(&out);
        assert_eq!(r.len(), 1, "{out}");
        let size = if test == "atomic_lat" { "8" } else { "64" };
        assert_eq!((r[0][0].as_str(), r[0][1].as_str()), (size, "300"), "{out}");
        let t: Vec<f64> = r[0][2..].iter().map(|v| v.parse().unwrap()).collect();
        assert!(
            t[0] > 0.0 && t[0] <= t[2] && t[2] <= t[1],
            "min <= typical <= max: {out}"
        );
        for want in [
            "vs cache-line",
            "vs TCP loopback",
            "tail: 99.9%",
            "CPU per message",
        ] {
            assert!(out.contains(want), "{want}: {out}");
        }
    }
}

#[test]
fn bandwidth_tests_over_sizes_qps_and_wires() {
    let out = run(&["write_bw", "-a", "-n", "4", "-t", "8", "-c", "4"]);
    let r = rows(&out);
    assert_eq!(r.len(), 23, "2 B to 8 MiB: {out}");
    assert_eq!(r[22][0], "8388608");
    assert!(out.contains("vs one core's memcpy"));
    for (test, extra) in [("send_bw", ["-q", "3"]), ("read_bw", ["--wire", "switch"])] {
        let out = run(&[
            test,
            "-n",
            "2000",
            "-s",
            "4096",
            "--report-gbits",
            extra[0],
            extra[1],
        ]);
        assert!(out.contains("BW average[Gb/sec]"), "{out}");
        let r = rows(&out);
        assert_eq!(r.len(), 1, "{out}");
        let avg: f64 = r[0][3].parse().unwrap();
        assert!(avg > 0.0, "{out}");
    }
    // A duration instead of a count.
    let out = run(&["write_bw", "-D", "0.2", "-s", "8"]);
    let r = rows(&out);
    assert!(r[0][1].parse::<u64>().unwrap() > 0, "{out}");
}

#[test]
fn bad_arguments_are_refused() {
    let out = Command::new(env!("CARGO_BIN_EXE_rnic-perf"))
        .args(["write_lat", "-s", "1"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = Command::new(env!("CARGO_BIN_EXE_rnic-perf"))
        .args(["nonsense"])
        .output()
        .unwrap();
    assert!(!out.status.success());
}

/// A TCP port nobody listens on (and, likely, the two after it free).
fn free_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[test]
fn two_processes_over_shared_memory_and_udp() {
    for (wire, device, args) in [
        ("shm", "inline", vec!["write_lat", "-n", "2000"]),
        ("shm", "thread", vec!["read_lat", "-n", "200"]),
        ("udp", "inline", vec!["send_bw", "-n", "3000", "-s", "1024"]),
        (
            "udp",
            "thread",
            vec!["write_bw", "-n", "2000", "-s", "8192"],
        ),
    ] {
        let (out, server) = pair(&args, wire, device);
        let r = rows(&out);
        assert_eq!(r.len(), 1, "{wire} {device} {args:?}: {out}");
        // Bandwidth tests round up to whole batches.
        let iters: u64 = r[0][1].parse().unwrap();
        assert!(iters >= args[2].parse().unwrap(), "iterations: {out}");
        assert!(out.contains("vs TCP loopback"), "{out}");
        assert!(
            server.status.success(),
            "server of {wire} {device} {args:?}: {}",
            server.status
        );
    }
}

/// A server and a client of `args` on `wire` and `device`: the client's
/// output and the server's. rnic-perf binds its own ports (TCP `port`,
/// UDP `port + 1` and `port + 2`), free a moment ago: if another process
/// took one in between, the pair runs again on others.
fn pair(args: &[&str], wire: &str, device: &str) -> (String, std::process::Output) {
    for _ in 0..5 {
        let port = free_port().to_string();
        let mut all = args.to_vec();
        all.extend(["--wire", wire, "--device", device, "-p", &port]);
        let server = Command::new(env!("CARGO_BIN_EXE_rnic-perf"))
            .args(&all)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        all.push("--client");
        let client = Command::new(env!("CARGO_BIN_EXE_rnic-perf"))
            .args(&all)
            .output()
            .expect("run rnic-perf");
        let server = server.wait_with_output().unwrap();
        let taken =
            |o: &std::process::Output| String::from_utf8_lossy(&o.stderr).contains("os error 98");
        if taken(&server) || taken(&client) {
            eprintln!("a port was taken before rnic-perf bound it: again on others");
            continue;
        }
        let text = String::from_utf8_lossy(&client.stdout).into_owned();
        assert!(
            client.status.success(),
            "rnic-perf {all:?} failed: {}\n{text}",
            String::from_utf8_lossy(&client.stderr)
        );
        return (text, server);
    }
    panic!("five sets of ports taken before rnic-perf bound them");
}

#[test]
fn two_processes_must_run_the_same_test() {
    let port = free_port().to_string();
    let mut server = Command::new(env!("CARGO_BIN_EXE_rnic-perf"))
        .args(["write_lat", "--wire", "shm", "-p", &port])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_rnic-perf"))
        .args(["write_bw", "--wire", "shm", "-p", &port, "--client"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("the same test and options"), "{err}");
    assert!(!server.wait().unwrap().success());
}

#[test]
fn send_latency_over_every_size() {
    // Receives left posted by one size serve the next.
    let out = run(&["send_lat", "-a", "-n", "20", "--no-baselines"]);
    assert_eq!(rows(&out).len(), 23, "{out}");
}

#[test]
fn plot_draws_the_sizes_measured() {
    let dir = std::env::temp_dir().join(format!("rnic-perf-plot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let svg = dir.join("lat.svg");
    let out = run(&[
        "write_lat",
        "-s",
        "64",
        "-n",
        "300",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert!(out.contains("plot: "), "{out}");
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(text.starts_with("<svg") && text.contains("t_typical [usec]"));
    assert!(text.contains("rnic") && text.contains("TCP loopback"));
    // One size: a point for rnic and one for TCP.
    assert_eq!(text.matches("<circle").count(), 2, "{text}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_failed_completion_ends_the_run_with_its_status() {
    // Every frame dropped, an 8 us ACK timeout: the WRITEs exhaust their
    // retries. The run must say so and exit, not wait for the other side.
    let mut child = Command::new(env!("CARGO_BIN_EXE_rnic-perf"))
        .args(["write_bw", "-n", "1000", "--loss", "1", "-u", "1"])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed().as_secs() > 60 {
            child.kill().unwrap();
            panic!("rnic-perf still running after a failed completion");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert!(!status.success(), "{err}");
    assert!(err.contains("RetryExcErr"), "{err}");
}

#[test]
fn perftest_spellings_are_accepted() {
    let out = run(&[
        "write_bw",
        "-n",
        "2000",
        "-Q",
        "8",
        "--report_gbits",
        "--cpu_util",
    ]);
    assert!(out.contains("BW average[Gb/sec]"), "{out}");
    assert!(out.contains("CPU per message"), "{out}");
    assert_eq!(rows(&out).len(), 1, "{out}");
}

#[test]
fn long_runs_show_progress() {
    let out = Command::new(env!("CARGO_BIN_EXE_rnic-perf"))
        .args(["write_bw", "-D", "3", "--no-baselines"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    let lines: Vec<&str> = err.lines().filter(|l| l.contains(" of 3 s, ")).collect();
    // Once a second from the second second on.
    assert!(!lines.is_empty() && lines.len() <= 2, "{err}");
    assert_eq!(rows(&String::from_utf8_lossy(&out.stdout)).len(), 1);
}

//! Debian's unmodified perftest over the drop-in libibverbs.so.1: each of
//! its eight RDMA tests as a server and a client, two processes on
//! 127.0.0.1 with an rnic device each and a UDP wire between them
//! (scripts/setup.sh installs perftest).

mod common;

use common::{text, two_processes};

/// `test` (`ib_write_lat`, ...) with `args`, as server and client: both
/// exit 0 and print no error, and the client reports `iters` iterations
/// of `bytes`-byte messages.
fn perftest(test: &str, args: &[&str], bytes: u32, iters: u32) {
    let args = [&["-d", "rnic0"], args].concat();
    let (server, client) = two_processes(test, &args);
    for (who, o) in [("server", &server), ("client", &client)] {
        let (out, err) = text(o);
        assert!(o.status.success(), "{test} {who}: {out}{err}");
        let all = format!("{out}{err}");
        for bad in ["Failed", "failed", "Couldn't", "Unable", "error", "Error"] {
            assert!(!all.contains(bad), "{test} {who} says {bad:?}:\n{all}");
        }
    }
    let (out, _) = text(&client);
    // The result line: size, iterations, then the figures.
    let result = out
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|w| w.len() >= 5 && w[0] == bytes.to_string() && w[1] == iters.to_string())
        .unwrap_or_else(|| panic!("{test}: no result for {bytes} B × {iters}:\n{out}"));
    for figure in &result[2..] {
        let v: f64 = figure
            .parse()
            .unwrap_or_else(|_| panic!("{test}: {figure:?} in {out}"));
        assert!(v.is_finite() && v >= 0.0, "{test}: {figure}");
    }
}

#[test]
fn ib_write_lat() {
    perftest("ib_write_lat", &["-n", "300"], 2, 300);
}

#[test]
fn ib_write_bw() {
    perftest("ib_write_bw", &["-n", "300", "-s", "16384"], 16384, 300);
}

#[test]
fn ib_read_lat() {
    perftest("ib_read_lat", &["-n", "300", "-s", "64"], 64, 300);
}

#[test]
fn ib_read_bw() {
    perftest("ib_read_bw", &["-n", "300"], 65536, 300);
}

#[test]
fn ib_send_lat() {
    perftest("ib_send_lat", &["-n", "300", "-s", "1024"], 1024, 300);
}

#[test]
fn ib_send_bw() {
    perftest("ib_send_bw", &["-n", "300", "-s", "4096"], 4096, 300);
}

#[test]
fn ib_atomic_lat() {
    perftest("ib_atomic_lat", &["-n", "300"], 8, 300);
}

#[test]
fn ib_atomic_bw() {
    perftest("ib_atomic_bw", &["-n", "300", "-A", "CMP_AND_SWAP"], 8, 300);
}

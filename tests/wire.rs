//! RC traffic between two NICs on a switch, through a wire that drops,
//! duplicates, reorders and corrupts frames.
//!
//! Four QP pairs (two with their requester on each NIC) run the verified
//! traffic of [`rnic_tests::traffic`]: a mix of every RC operation, sizes
//! from 0 bytes to 1 MiB, every completion successful and in order, every
//! byte checked, atomics executed exactly once. Afterwards the port
//! counters must show the retransmissions, duplicates and sequence NAKs
//! the faults caused, and exactly as many ICRC drops as the injector
//! corrupted frames.
//!
//! Inline mode runs a million messages on a virtual clock (the run is the
//! same for a seed); thread mode fewer, on the host clock.

use std::time::{Duration, Instant};

use rnic_emu::net::FaultConfig;
use rnic_tests::fabric::Fabric;
use rnic_tests::traffic::{conn, Requester, Responder};
use rnic_tests::*;

/// Runs `total` messages over four QP pairs through `faults` on NIC 0's
/// port, with local ACK timeout code `timeout`; returns the fabric for the
/// counter checks.
fn run(mode: ExecMode, total: u64, faults: FaultConfig, timeout: u8, seed: u64) -> Fabric {
    run_with(mode, total, faults, conn(timeout), seed)
}

/// [`run`] with connection parameters `c`.
fn run_with(mode: ExecMode, total: u64, faults: FaultConfig, c: Conn, seed: u64) -> Fabric {
    let _ = env_logger::builder().is_test(true).try_init();
    let fabric = Fabric::new(mode, 2, seed);
    let (a, b) = (&fabric.nics[0].ctx, &fabric.nics[1].ctx);
    let mut pairs: Vec<(Requester, Responder)> = (0..4u64)
        .map(|i| {
            let (qctx, rctx) = if i % 2 == 0 { (a, b) } else { (b, a) };
            let s = seed * 10 + i;
            let mut q = Requester::new(qctx, s, total / 4);
            let mut r = Responder::new(rctx, s, total / 4);
            connect_to(rctx, &q.qp, r.qp.qp_num(), &c);
            connect_to(qctx, &r.qp, q.qp.qp_num(), &c);
            q.set_peer(r.window());
            r.start();
            (q, r)
        })
        .collect();
    fabric.nics[0].faults.set(faults);
    let start = Instant::now();
    let mut last = Instant::now();
    while !pairs.iter().all(|(q, r)| q.finished() && r.finished()) {
        let mut moved = false;
        for (q, r) in &mut pairs {
            moved |= q.post();
            moved |= q.poll();
            moved |= r.poll();
        }
        if moved {
            last = Instant::now();
        } else {
            fabric.idle(Duration::from_millis(1));
        }
        if last.elapsed() > Duration::from_secs(20) || start.elapsed() > Duration::from_secs(150) {
            let state: Vec<String> = pairs
                .iter()
                .map(|(q, r)| format!("{}; receives {}/{}", q.progress(), r.received, r.total))
                .collect();
            panic!("no progress: {state:#?}");
        }
    }
    // No faults while held frames drain and the counters settle.
    fabric.nics[0].faults.set(FaultConfig::default());
    for _ in 0..10 {
        fabric.idle(Duration::from_millis(2));
    }
    for (q, r) in &pairs {
        assert_cq_empty(&q.cq.context(), &q.cq);
        assert_cq_empty(&r.cq.context(), &r.cq);
        assert_eq!(query_state(&q.qp), QpState::Rts);
        assert_eq!(query_state(&r.qp), QpState::Rts);
        assert_eq!(
            r.atomic_words(),
            (q.cmp_swaps, q.fetch_adds),
            "atomic words"
        );
    }
    eprintln!(
        "{total} messages in {:.1} s ({mode:?})",
        start.elapsed().as_secs_f64()
    );
    fabric
}

/// The port counters of both NICs, summed.
fn port_sum(fabric: &Fabric, idx: usize) -> u64 {
    fabric
        .nics
        .iter()
        .map(|n| n.ctx.query_port_counters(1).unwrap().get(idx))
        .sum()
}

fn lossy() -> FaultConfig {
    FaultConfig {
        drop: 0.05,
        duplicate: 0.01,
        reorder: 0.01,
        corrupt: 0.001,
        ..FaultConfig::default()
    }
}

/// The faults of the device-thread runs. On the host clock a machine busy
/// with other work delays the device threads too, and a delay past the
/// ACK timeout costs a retry like a loss: at 5 % loss a READ-heavy stream
/// needs, now and then, all seven retries of one request (two losses in
/// each of eight rounds), so a scheduling hiccup on top could exhaust them
/// and fail the run for the machine's sake. At 1 % it never comes close.
fn mild() -> FaultConfig {
    FaultConfig {
        drop: 0.01,
        duplicate: 0.005,
        reorder: 0.005,
        corrupt: 0.001,
        ..FaultConfig::default()
    }
}

fn check_counters(fabric: &Fabric) {
    let stats = fabric.nics[0].faults.stats();
    eprintln!("faults: {stats:?}");
    for n in &fabric.nics {
        let c = n.ctx.query_port_counters(1).unwrap();
        let line: Vec<String> = c
            .iter()
            .filter(|(_, v)| *v != 0)
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        eprintln!("NIC {}: {}", n.dev.config().mac[5], line.join(" "));
    }
    assert!(stats.dropped > 0 && stats.duplicated > 0 && stats.corrupted > 0);
    // Every corrupted frame reached a NIC, which dropped it for its ICRC.
    assert_eq!(port_sum(fabric, counter::RX_ICRC_ERRORS), stats.corrupted);
    assert_eq!(port_sum(fabric, counter::RX_MALFORMED), 0);
    assert!(port_sum(fabric, counter::RETRANSMITS) > 0);
    assert!(port_sum(fabric, counter::DUPLICATE_REQUESTS) > 0);
    assert!(port_sum(fabric, counter::SEQ_NAKS_SENT) > 0);
    assert!(port_sum(fabric, counter::SEQ_NAKS_RECEIVED) > 0);
}

/// `default` messages, or `RNIC_WIRE_MESSAGES` if set.
fn messages(default: u64) -> u64 {
    std::env::var("RNIC_WIRE_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

#[test]
fn million_messages_through_faults_inline() {
    let fabric = run(ExecMode::Inline, messages(1_000_000), lossy(), 12, 1);
    check_counters(&fabric);
}

#[test]
fn messages_through_faults_thread() {
    // On the host clock each tail loss waits out the timeout (16.8 ms).
    let fabric = run(ExecMode::Thread, messages(40_000), mild(), 12, 2);
    check_counters(&fabric);
}

#[test]
fn clean_wire_needs_no_retransmission() {
    for mode in [ExecMode::Inline, ExecMode::Thread] {
        // A timeout no scheduling delay reaches: any retransmission would
        // be the transport's own mistake.
        let fabric = run(mode, 20_000, FaultConfig::default(), 16, 3);
        assert_eq!(port_sum(&fabric, counter::RETRANSMITS), 0, "{mode:?}");
        assert_eq!(port_sum(&fabric, counter::SEQ_NAKS_SENT), 0, "{mode:?}");
        assert_eq!(
            port_sum(&fabric, counter::DUPLICATE_REQUESTS),
            0,
            "{mode:?}"
        );
        assert!(port_sum(&fabric, counter::ACKS_SENT) > 0);
        // The address vectors gave no MAC: ARP resolved it, once per
        // side at most (the side asked first learns from the request).
        let asked = port_sum(&fabric, counter::NEIGH_REQUESTS_SENT);
        assert!((1..=2).contains(&asked), "{mode:?}: {asked} ARP requests");
    }
}

/// PSNs that wrap from 0xffffff to 0 within the run, at the smallest path
/// MTU (every message of more than 256 bytes segments), through the
/// faults.
#[test]
fn psn_wrap_at_mtu_256() {
    for mode in [ExecMode::Inline, ExecMode::Thread] {
        let c = Conn {
            sq_psn: 0xff_ff00,
            rq_psn: 0xff_ff00,
            mtu: Mtu::Mtu256,
            ..conn(12)
        };
        let faults = if mode == ExecMode::Inline {
            lossy()
        } else {
            mild()
        };
        let fabric = run_with(mode, 8_000, faults, c, 4);
        assert!(port_sum(&fabric, counter::RETRANSMITS) > 0, "{mode:?}");
    }
}

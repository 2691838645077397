//! Data-path benchmarks over the emulated device, in both execution modes.
//!
//! - `write_half_rtt_8b`: an 8-byte inline RDMA WRITE ping-pong between two
//!   QPs; each side spins on its memory until the peer's write lands, then
//!   writes back. The time reported is half a round trip. Inline, the two
//!   sides are two threads, as perftest's two processes, each running the
//!   device for its own posts; with the device thread, one application
//!   thread plays both sides and every half crosses to the device's core
//!   and back (three spinning threads would share two cores).
//!   `rnic-perf write_lat` measures the same with pinned threads and
//!   percentiles.
//! - `write_batch32_8b`: 32 inline 8-byte RDMA WRITEs posted by one
//!   `post_send` (one doorbell), the last one signaled; throughput is in
//!   messages.
//! - `send_recv_8b`: one receive and one signaled 8-byte inline SEND, both
//!   completions polled.
//!
//! Run with `cargo bench -p rnic-tests --bench verbs`.

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_main, Criterion, Throughput};
use rnic_driver::{
    access, send_flags, Payload, RecvWr, RemoteAddr, SendOp, SendWr, WcStatus, WorkCompletion,
};
use rnic_emu::ExecMode;
use rnic_tests::{cap, ECq, EMr, Pair, PairOpts};

const MODES: [(ExecMode, &str); 2] = [(ExecMode::Inline, "inline"), (ExecMode::Thread, "thread")];
/// Unsignaled WRITEs between two signaled ones: keeps the send queue from
/// filling without a completion per message.
const SIGNAL_EVERY: u64 = 16;

fn pair(mode: ExecMode) -> (Pair, EMr, EMr) {
    let opts = PairOpts {
        cap: cap(64, 1, 64),
        cq_size: 256,
        ..PairOpts::default()
    };
    let p = Pair::with(mode, opts);
    let rights = access::LOCAL_WRITE | access::REMOTE_WRITE;
    let (ma, mb) = (p.mr(4096, rights), p.mr(4096, rights));
    (p, ma, mb)
}

fn write8<'a>(wr_id: u64, value: &'a [u8; 8], to: &EMr) -> SendWr<'a> {
    SendWr {
        wr_id,
        op: SendOp::RdmaWrite {
            remote: RemoteAddr {
                addr: to.addr(),
                rkey: to.rkey(),
            },
        },
        payload: Payload::Inline(value),
        flags: if wr_id % SIGNAL_EVERY == SIGNAL_EVERY - 1 {
            send_flags::SIGNALED
        } else {
            0
        },
    }
}

/// Spins until `cq` yields one completion, which must be a success. Unlike
/// the tests' `poll_n` it neither allocates nor yields, so it measures the
/// data path and nothing else.
fn poll1(cq: &ECq) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut wc = [WorkCompletion::default()];
    while cq.poll(&mut wc).expect("poll") == 0 {
        assert!(
            Instant::now() < deadline,
            "no completion on CQ {}",
            cq.cq_num()
        );
        std::hint::spin_loop();
    }
    assert_eq!(wc[0].status, WcStatus::Success, "{:?}", wc[0]);
}

/// Spins until the first 8 bytes of `mr` read `want`.
fn wait_for(mr: &EMr, want: u64) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut got = [0u8; 8];
    loop {
        mr.read(0, &mut got).expect("read MR");
        if u64::from_le_bytes(got) == want {
            return;
        }
        assert!(Instant::now() < deadline, "write {want} never landed");
        std::hint::spin_loop();
    }
}

fn write_half_rtt(c: &mut Criterion) {
    let mut g = c.benchmark_group("write_half_rtt_8b");
    for (mode, name) in MODES {
        let (p, ma, mb) = pair(mode);
        let mut seq = 0u64;
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let first = seq + 1;
                seq += iters;
                let ping = |n: u64| {
                    let v = n.to_le_bytes();
                    p.a.post_send(&[write8(n, &v, &mb)]).expect("post a");
                    if n % SIGNAL_EVERY == SIGNAL_EVERY - 1 {
                        poll1(&p.cq_a);
                    }
                };
                let pong = |n: u64| {
                    wait_for(&mb, n);
                    let v = n.to_le_bytes();
                    p.b.post_send(&[write8(n, &v, &ma)]).expect("post b");
                    if n % SIGNAL_EVERY == SIGNAL_EVERY - 1 {
                        poll1(&p.cq_b);
                    }
                };
                if mode == ExecMode::Thread {
                    let start = Instant::now();
                    for n in first..first + iters {
                        ping(n);
                        pong(n);
                        wait_for(&ma, n);
                    }
                    return start.elapsed() / 2;
                }
                std::thread::scope(|s| {
                    s.spawn(|| (first..first + iters).for_each(pong));
                    let start = Instant::now();
                    for n in first..first + iters {
                        ping(n);
                        wait_for(&ma, n);
                    }
                    start.elapsed() / 2
                })
            })
        });
    }
    g.finish();
}

fn write_batch32(c: &mut Criterion) {
    let mut g = c.benchmark_group("write_batch32_8b");
    g.throughput(Throughput::Elements(32));
    for (mode, name) in MODES {
        let (p, _ma, mb) = pair(mode);
        let v = 7u64.to_le_bytes();
        let wrs: Vec<SendWr<'_>> = (0..32u64)
            .map(|i| {
                let mut w = write8(i, &v, &mb);
                w.flags = if i == 31 { send_flags::SIGNALED } else { 0 };
                w
            })
            .collect();
        g.bench_function(name, |b| {
            b.iter(|| {
                p.a.post_send(black_box(&wrs)).expect("post batch");
                poll1(&p.cq_a);
            })
        });
    }
    g.finish();
}

fn send_recv(c: &mut Criterion) {
    let mut g = c.benchmark_group("send_recv_8b");
    for (mode, name) in MODES {
        let (p, _ma, mb) = pair(mode);
        let sge = mb.sge(0, 64).expect("sge");
        let v = 9u64.to_le_bytes();
        g.bench_function(name, |b| {
            b.iter(|| {
                p.b.post_recv(&[RecvWr {
                    wr_id: 1,
                    sg_list: &[sge],
                }])
                .expect("post recv");
                p.a.post_send(&[SendWr {
                    wr_id: 2,
                    op: SendOp::Send,
                    payload: Payload::Inline(&v),
                    flags: send_flags::SIGNALED,
                }])
                .expect("post send");
                poll1(&p.cq_a);
                poll1(&p.cq_b);
            })
        });
    }
    g.finish();
}

fn benches() {
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    write_half_rtt(&mut c);
    write_batch32(&mut c);
    send_recv(&mut c);
}

criterion_main!(benches);

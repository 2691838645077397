//! The frame path's hot spots, on RoCEv2 frames Linux rxe sent
//! (`emu/tests/vectors`): the ICRC, parsing a received frame (every check
//! a port makes before the transport sees it) and emitting one (headers,
//! payload copy, ICRC). Each at a small RDMA WRITE and at an MTU-sized
//! one, in bytes per second of whole frames.
//!
//! Run with `cargo bench -p rnic-emu --bench wire`.

use std::hint::black_box;

use criterion::{criterion_main, Criterion, Throughput};
use rnic_emu::pcap;
use rnic_emu::wire::frame::{classify, Received};
use rnic_emu::wire::{icrc, opcode};

/// The first RDMA WRITE packet (ONLY, FIRST or MIDDLE) of a capture.
fn write_frame(capture: &str) -> Vec<u8> {
    let path = format!("{}/tests/vectors/{capture}", env!("CARGO_MANIFEST_DIR"));
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    let writes = [
        opcode::RC_RDMA_WRITE_ONLY,
        opcode::RC_RDMA_WRITE_FIRST,
        opcode::RC_RDMA_WRITE_MIDDLE,
    ];
    pcap::read(&bytes)
        .unwrap()
        .into_iter()
        .map(|r| r.frame)
        .find(|f| matches!(classify(f), Ok(Received::Roce(r, _)) if writes.contains(&r.roce.bth.opcode)))
        .unwrap_or_else(|| panic!("{capture}: no RDMA WRITE"))
}

fn frames() -> [(&'static str, Vec<u8>); 2] {
    [
        ("write_small", write_frame("write_lat.pcap")),
        ("write_mtu", write_frame("write_bw.pcap")),
    ]
}

/// Offset of the IP header (no VLAN tag in the captures).
const IP_AT: usize = 14;

fn bench_icrc(c: &mut Criterion) {
    let mut g = c.benchmark_group("icrc");
    for (name, f) in frames() {
        g.throughput(Throughput::Bytes(f.len() as u64));
        g.bench_function(format!("{name}_{}B", f.len()), |b| {
            b.iter(|| icrc::compute(black_box(&f[IP_AT..])).unwrap())
        });
    }
}

fn bench_parse(c: &mut Criterion) {
    let mut g = c.benchmark_group("frame_parse");
    for (name, f) in frames() {
        g.throughput(Throughput::Bytes(f.len() as u64));
        g.bench_function(format!("{name}_{}B", f.len()), |b| {
            b.iter(|| matches!(classify(black_box(&f)), Ok(Received::Roce(..))))
        });
    }
}

fn bench_emit(c: &mut Criterion) {
    let mut g = c.benchmark_group("frame_emit");
    for (name, f) in frames() {
        let Ok(Received::Roce(repr, payload)) = classify(&f) else {
            unreachable!("checked by write_frame")
        };
        let mut buf = vec![0u8; repr.buffer_len()];
        g.throughput(Throughput::Bytes(f.len() as u64));
        g.bench_function(format!("{name}_{}B", f.len()), |b| {
            b.iter(|| {
                black_box(&repr).emit(&mut buf, |p| p.copy_from_slice(payload));
                black_box(&buf);
            })
        });
        // What was emitted is what rxe sent.
        assert_eq!(buf, f);
    }
}

fn benches() {
    let mut c = Criterion::default()
        .warm_up_time(std::time::Duration::from_millis(500))
        .measurement_time(std::time::Duration::from_secs(2))
        .configure_from_args();
    bench_icrc(&mut c);
    bench_parse(&mut c);
    bench_emit(&mut c);
}

criterion_main!(benches);

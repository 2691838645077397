//! The baselines every figure is set against, measured in the same run:
//! the floor of any notification between two cores, the OS network stack
//! over loopback, and a single core's memcpy.

use std::hint::black_box;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Instant;

use crate::cpu;
use crate::stats::{Bandwidth, Latency};

/// Half round trips of a cache line bounced between two pinned threads.
pub fn cache_line(iters: usize) -> Latency {
    #[repr(align(64))]
    struct Line(AtomicU64);
    let line = Arc::new(Line(AtomicU64::new(0)));
    let peer = {
        let line = Arc::clone(&line);
        thread::spawn(move || {
            cpu::pin(1);
            for i in 0..iters as u64 {
                while line.0.load(Ordering::Acquire) != 2 * i + 1 {
                    std::hint::spin_loop();
                }
                line.0.store(2 * i + 2, Ordering::Release);
            }
        })
    };
    cpu::pin(0);
    let mut samples = Vec::with_capacity(iters);
    for i in 0..iters as u64 {
        let t = Instant::now();
        line.0.store(2 * i + 1, Ordering::Release);
        while line.0.load(Ordering::Acquire) != 2 * i + 2 {
            std::hint::spin_loop();
        }
        samples.push(t.elapsed().as_nanos() as f64 / 2.0);
    }
    peer.join().expect("cache-line peer");
    Latency::new(samples)
}

fn tcp_pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").expect("a loopback TCP port");
    let a = TcpStream::connect(l.local_addr().expect("its address")).expect("connect");
    let (b, _) = l.accept().expect("accept");
    for s in [&a, &b] {
        s.set_nodelay(true).expect("TCP_NODELAY");
    }
    (a, b)
}

/// A TCP loopback ping-pong of `size`-byte messages: half round trips,
/// and the CPU time per message on the two threads.
pub fn tcp_pingpong(size: usize, iters: usize) -> (Latency, f64) {
    let (mut a, mut b) = tcp_pair();
    let peer = thread::spawn(move || {
        cpu::pin(1);
        let c0 = cpu::thread_ns();
        let mut buf = vec![0u8; size];
        for _ in 0..iters {
            b.read_exact(&mut buf).expect("peer read");
            b.write_all(&buf).expect("peer write");
        }
        cpu::thread_ns() - c0
    });
    cpu::pin(0);
    let c0 = cpu::thread_ns();
    let mut buf = vec![1u8; size];
    let mut samples = Vec::with_capacity(iters);
    for _ in 0..iters {
        let t = Instant::now();
        a.write_all(&buf).expect("write");
        a.read_exact(&mut buf).expect("read");
        samples.push(t.elapsed().as_nanos() as f64 / 2.0);
    }
    let cpu = cpu::thread_ns() - c0 + peer.join().expect("TCP peer");
    (Latency::new(samples), cpu as f64 / (2 * iters) as f64)
}

/// A TCP loopback stream of `size`-byte writes, and the CPU time per
/// message on both threads.
pub fn tcp_stream(size: usize, iters: u64) -> (Bandwidth, f64) {
    let (mut a, mut b) = tcp_pair();
    let total = size as u64 * iters;
    let peer = thread::spawn(move || {
        cpu::pin(1);
        let c0 = cpu::thread_ns();
        let mut buf = vec![0u8; size.clamp(1, 1 << 20)];
        let mut got = 0u64;
        while got < total {
            let n = b.read(&mut buf).expect("peer read");
            assert!(n > 0, "the stream ended early");
            got += n as u64;
        }
        b.write_all(&[0]).expect("done");
        cpu::thread_ns() - c0
    });
    cpu::pin(0);
    let c0 = cpu::thread_ns();
    let buf = vec![7u8; size];
    let t = Instant::now();
    for _ in 0..iters {
        a.write_all(&buf).expect("write");
    }
    a.read_exact(&mut [0]).expect("the reader's end");
    let seconds = t.elapsed().as_secs_f64();
    let cpu = cpu::thread_ns() - c0 + peer.join().expect("TCP reader");
    let bw = Bandwidth {
        size,
        iters,
        seconds,
        peak: (size as u64 * iters) as f64 / seconds,
    };
    (bw, cpu as f64 / iters as f64)
}

/// Bytes per second of one core copying `size`-byte buffers.
pub fn memcpy(size: usize, iters: u64) -> f64 {
    cpu::pin(0);
    let src = vec![3u8; size];
    let mut dst = vec![0u8; size];
    let t = Instant::now();
    for _ in 0..iters {
        dst.copy_from_slice(black_box(&src));
        black_box(&mut dst);
    }
    (size as u64 * iters) as f64 / t.elapsed().as_secs_f64()
}

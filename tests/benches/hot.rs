//! The data path's hot spots, one at a time, over the emulated device.
//!
//! A platform wrapper (`Held`) keeps doorbells from the device until the
//! benchmark lets them through, which separates what the application's
//! thread does from what the device does:
//!
//! - `post_send/write_32x8b`: building 32 inline 8-byte WRITE WQEs, the
//!   doorbell record, the fence and the doorbell store (held);
//! - `device_exec/write_32x8b`: the held doorbell reaching an inline
//!   device, which runs the 32 WQEs: fetch and decode, frames built and
//!   parsed, the responder's writes, the ACK, the CQEs;
//! - `device_exec/write_64k`: the same for one 64 KiB WRITE at MTU 1024,
//!   64 frames: what rnic itself spends per byte and per frame of a large
//!   message, without a wire's system calls;
//! - `mr_lookup/1_mr` and `mr_lookup/1024_mrs`: the same execution with
//!   every WRITE to one MR, or each to another of 1024 (the responder looks
//!   up each rkey);
//! - `cq_poll/32`: polling 32 CQEs the device has written;
//! - `doorbell/{inline,thread}`: one doorbell store with no new WQE behind
//!   it (the device reads the doorbell record and finds nothing).
//!
//! The frame path's own parts (ICRC, parse, emit) are in
//! `cargo bench -p rnic-emu --bench wire`. Run with
//! `cargo bench -p rnic-tests --bench hot`.

use std::hint::black_box;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_main, Criterion, Throughput};
use rnic_driver::{
    access, send_flags, Context, Cq, Mr, Payload, Pd, Qp, QpInit, QpType, RemoteAddr, SendOp,
    SendWr, WcStatus, WorkCompletion,
};
use rnic_emu::{EmuConfig, EmuDevice, EmuHal, ExecMode};
use rnic_hw_regs::pci::BAR_DOORBELL;
use rnic_queues::{DmaRegion, Hal, HalError};
use rnic_tests::{cap, init_attr, rtr_attr_to, rts_attr, Conn};

/// The batch every benchmark posts.
const BATCH: usize = 32;
/// The large message of `device_exec/write_64k`.
const LARGE: usize = 64 << 10;

/// The emulated device's platform, with doorbells held back while `hold`
/// is set; the last one held is rung by [`Held::release`].
#[derive(Clone)]
struct Held {
    inner: EmuHal,
    hold: Arc<AtomicBool>,
    offset: Arc<AtomicUsize>,
    value: Arc<AtomicU64>,
}

impl Held {
    fn new(inner: EmuHal) -> Self {
        Self {
            inner,
            hold: Arc::new(AtomicBool::new(false)),
            offset: Arc::new(AtomicUsize::new(0)),
            value: Arc::new(AtomicU64::new(0)),
        }
    }

    fn hold(&self) {
        self.hold.store(true, Ordering::Relaxed);
    }

    /// Rings the last doorbell written (held or not) again. A doorbell
    /// names a QP and the device takes the producer index from the
    /// record, so the last one stands for all.
    fn release(&self) {
        self.hold.store(false, Ordering::Relaxed);
        let (off, v) = (
            self.offset.load(Ordering::Relaxed),
            self.value.load(Ordering::Relaxed),
        );
        self.inner.mmio_write64(BAR_DOORBELL, off, v);
    }
}

// SAFETY: every call goes to the inner platform, which keeps the contract;
// a held doorbell is written later, which the device allows (the doorbell
// record is authoritative and a late doorbell is repaired by the next).
unsafe impl Hal for Held {
    fn dma_alloc(&self, len: usize) -> Result<DmaRegion, HalError> {
        self.inner.dma_alloc(len)
    }
    unsafe fn dma_free(&self, region: DmaRegion) {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.inner.dma_free(region) }
    }
    unsafe fn dma_map(&self, vaddr: NonNull<u8>, len: usize) -> Result<u64, HalError> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.inner.dma_map(vaddr, len) }
    }
    unsafe fn dma_unmap(&self, iova: u64, len: usize) -> Result<(), HalError> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.inner.dma_unmap(iova, len) }
    }
    fn mmio_read32(&self, bar: u8, offset: usize) -> u32 {
        self.inner.mmio_read32(bar, offset)
    }
    fn mmio_write32(&self, bar: u8, offset: usize, value: u32) {
        self.inner.mmio_write32(bar, offset, value)
    }
    fn mmio_write64(&self, bar: u8, offset: usize, value: u64) {
        if bar == BAR_DOORBELL {
            self.offset.store(offset, Ordering::Relaxed);
            self.value.store(value, Ordering::Relaxed);
            if self.hold.load(Ordering::Relaxed) {
                return;
            }
        }
        self.inner.mmio_write64(bar, offset, value)
    }
    fn now_ns(&self) -> u64 {
        self.inner.now_ns()
    }
    fn wait_irq(&self, vector: u16, timeout_ns: u64) -> Result<bool, HalError> {
        self.inner.wait_irq(vector, timeout_ns)
    }
    fn irq_eventfd(&self, vector: u16) -> Option<i32> {
        self.inner.irq_eventfd(vector)
    }
    fn relax(&self) {
        self.inner.relax()
    }
    fn poll_empty(&self) {
        self.inner.poll_empty()
    }
}

/// Two connected RC QPs on one device, `a` writing into `mrs` (all with
/// remote write) at `b`'s side.
struct Rig {
    hal: Held,
    _ctx: Context<Held>,
    pd: Pd<Held>,
    cq: Cq<Held>,
    a: Qp<Held>,
    _b: Qp<Held>,
    mrs: Vec<Mr<Held>>,
}

impl Rig {
    fn new(mode: ExecMode, n_mrs: usize) -> Self {
        let dev = EmuDevice::new(EmuConfig::default(), mode);
        let hal = Held::new(dev.hal());
        let ctx = Context::open(hal.clone()).expect("open");
        let pd = ctx.alloc_pd().expect("pd");
        let cq = ctx.create_cq(256).expect("cq");
        let qp = || {
            pd.create_qp(&QpInit {
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                cap: cap(BATCH as u32 * 2, 1, 64),
                qp_type: QpType::Rc,
                sq_sig_all: false,
            })
            .expect("qp")
        };
        let (a, b) = (qp(), qp());
        let gid = ctx.query_gid(1, 0).expect("gid");
        let c = Conn::default();
        for (q, dest) in [(&a, b.qp_num()), (&b, a.qp_num())] {
            for (attr, mask) in [init_attr(&c), rtr_attr_to(gid, dest, &c), rts_attr(&c)] {
                q.modify(&attr, mask).expect("connect");
            }
        }
        let mrs = (0..n_mrs)
            .map(|_| {
                pd.alloc_mr(64, access::LOCAL_WRITE | access::REMOTE_WRITE)
                    .expect("mr")
            })
            .collect();
        Self {
            hal,
            _ctx: ctx,
            pd,
            cq,
            a,
            _b: b,
            mrs,
        }
    }

    /// 32 inline 8-byte WRITEs round robin over the MRs; every one
    /// signaled if `all`, else the last.
    fn batch<'a>(&self, v: &'a [u8; 8], all: bool) -> Vec<SendWr<'a>> {
        (0..BATCH)
            .map(|i| {
                let mr = &self.mrs[i % self.mrs.len()];
                SendWr {
                    wr_id: i as u64,
                    op: SendOp::RdmaWrite {
                        remote: RemoteAddr {
                            addr: mr.addr(),
                            rkey: mr.rkey(),
                        },
                    },
                    payload: Payload::Inline(v),
                    flags: if all || i == BATCH - 1 {
                        send_flags::SIGNALED
                    } else {
                        0
                    },
                }
            })
            .collect()
    }

    /// Polls until `n` completions arrived, all successful.
    fn reap(&self, n: usize) {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut wc = [WorkCompletion::default(); BATCH];
        let mut got = 0;
        while got < n {
            let k = self.cq.poll(&mut wc[..n - got]).expect("poll");
            for w in &wc[..k] {
                assert_eq!(w.status, WcStatus::Success, "{w:?}");
            }
            got += k;
            assert!(Instant::now() < deadline, "{got} of {n} completions");
        }
    }
}

fn post_send(c: &mut Criterion) {
    let mut g = c.benchmark_group("post_send");
    g.throughput(Throughput::Elements(BATCH as u64));
    let r = Rig::new(ExecMode::Inline, 1);
    let v = 7u64.to_le_bytes();
    let wrs = r.batch(&v, false);
    g.bench_function("write_32x8b", |b| {
        b.iter_custom(|iters| {
            let mut t = Duration::ZERO;
            for _ in 0..iters {
                r.hal.hold();
                let start = Instant::now();
                r.a.post_send(black_box(&wrs)).expect("post");
                t += start.elapsed();
                r.hal.release();
                r.reap(1);
            }
            t
        })
    });
    g.finish();
}

/// Time of the held doorbell's release: the inline device runs the batch.
fn exec_time(r: &Rig, wrs: &[SendWr<'_>], iters: u64) -> Duration {
    let mut t = Duration::ZERO;
    for _ in 0..iters {
        r.hal.hold();
        r.a.post_send(wrs).expect("post");
        let start = Instant::now();
        r.hal.release();
        t += start.elapsed();
        r.reap(1);
    }
    t
}

fn device_exec(c: &mut Criterion) {
    let mut g = c.benchmark_group("device_exec");
    g.throughput(Throughput::Elements(BATCH as u64));
    let r = Rig::new(ExecMode::Inline, 1);
    let v = 7u64.to_le_bytes();
    let wrs = r.batch(&v, false);
    g.bench_function("write_32x8b", |b| b.iter_custom(|n| exec_time(&r, &wrs, n)));
    // One 64 KiB WRITE at MTU 1024: 64 frames built (payload gathered,
    // ICRC), parsed (ICRC checked) and scattered, and their ACK, all done
    // when the release returns (an inline NIC runs its frames to the end).
    g.throughput(Throughput::Bytes(LARGE as u64));
    let src = r.pd.alloc_mr(LARGE, access::LOCAL_WRITE).expect("mr");
    let dst =
        r.pd.alloc_mr(LARGE, access::LOCAL_WRITE | access::REMOTE_WRITE)
            .expect("mr");
    let sge = [src.sge(0, LARGE as u32).expect("sge")];
    let wr = [SendWr {
        wr_id: 0,
        op: SendOp::RdmaWrite {
            remote: RemoteAddr {
                addr: dst.addr(),
                rkey: dst.rkey(),
            },
        },
        payload: Payload::Sgl(&sge),
        flags: send_flags::SIGNALED,
    }];
    g.bench_function("write_64k", |b| b.iter_custom(|n| exec_time(&r, &wr, n)));
    g.finish();
}

fn mr_lookup(c: &mut Criterion) {
    let mut g = c.benchmark_group("mr_lookup");
    g.throughput(Throughput::Elements(BATCH as u64));
    for n in [1, 1024] {
        let r = Rig::new(ExecMode::Inline, n);
        let v = 7u64.to_le_bytes();
        let wrs = r.batch(&v, false);
        let name = if n == 1 { "1_mr" } else { "1024_mrs" };
        // Each batch starts where the last ended: 32 of the 1024 MRs a time.
        let mut shift = 0;
        g.bench_function(name, |b| {
            b.iter_custom(|iters| {
                let mut t = Duration::ZERO;
                for _ in 0..iters {
                    shift = (shift + BATCH) % n.max(BATCH);
                    let wrs: Vec<SendWr<'_>> = (0..BATCH)
                        .map(|i| {
                            let mr = &r.mrs[(shift + i) % n];
                            let mut w = wrs[i];
                            w.op = SendOp::RdmaWrite {
                                remote: RemoteAddr {
                                    addr: mr.addr(),
                                    rkey: mr.rkey(),
                                },
                            };
                            w
                        })
                        .collect();
                    t += exec_time(&r, &wrs, 1);
                }
                t
            })
        });
    }
    g.finish();
}

fn cq_poll(c: &mut Criterion) {
    let mut g = c.benchmark_group("cq_poll");
    g.throughput(Throughput::Elements(BATCH as u64));
    let r = Rig::new(ExecMode::Inline, 1);
    let v = 7u64.to_le_bytes();
    let wrs = r.batch(&v, true);
    g.bench_function("32", |b| {
        b.iter_custom(|iters| {
            let mut t = Duration::ZERO;
            for _ in 0..iters {
                // Inline: every CQE is written when the post returns.
                r.a.post_send(&wrs).expect("post");
                let start = Instant::now();
                r.reap(BATCH);
                t += start.elapsed();
            }
            t
        })
    });
    g.finish();
}

fn doorbell(c: &mut Criterion) {
    let mut g = c.benchmark_group("doorbell");
    for (mode, name) in [(ExecMode::Inline, "inline"), (ExecMode::Thread, "thread")] {
        let r = Rig::new(mode, 1);
        let v = 7u64.to_le_bytes();
        r.a.post_send(&r.batch(&v, false)).expect("post");
        r.reap(1);
        let (off, val) = (
            r.hal.offset.load(Ordering::Relaxed),
            r.hal.value.load(Ordering::Relaxed),
        );
        g.bench_function(name, |b| {
            b.iter(|| r.hal.inner.mmio_write64(BAR_DOORBELL, off, black_box(val)))
        });
    }
    g.finish();
}

fn benches() {
    let mut c = Criterion::default()
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(2))
        .configure_from_args();
    post_send(&mut c);
    device_exec(&mut c);
    mr_lookup(&mut c);
    cq_poll(&mut c);
    doorbell(&mut c);
}

criterion_main!(benches);

//! No allocation per message: a steady-state data path of N and of 10 × N
//! 8-byte RDMA WRITEs (batches of 32 behind one doorbell, the last one
//! signalled; each a request frame and an ACK frame, built, summed and
//! parsed) allocates no more for the larger run, in both execution modes,
//! on one NIC's loopback wire and between two NICs on the in-memory
//! switch. A counting global allocator sees every thread, the device
//! worker's too.

use std::sync::{Arc, Mutex};

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicU64, Ordering};

use rnic_emu::net::Switch;
use rnic_tests::fabric::nic_config;
use rnic_tests::*;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
/// Held by each test: the counter is global, so they run one at a time.
static ALONE: Mutex<()> = Mutex::new(());

struct Counting;

// SAFETY: every call is passed to the system allocator with the same
// arguments; counting changes nothing it returns.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: the caller's contract for `alloc` is `System.alloc`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System` with `layout` (this allocator
        // hands out only what `System` gave it).
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
        // SAFETY: as for `dealloc`; `new_size` is the caller's, checked by
        // its contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const BATCH: usize = 32;
/// What every WRITE carries.
const V: [u8; 8] = 0x0102_0304_0506_0708u64.to_le_bytes();
/// A longer run may allocate this much more: a queue's buffer doubling
/// once more, a log line. One allocation per message would add 288,000.
const SLACK: u64 = 64;

/// Posts `n` WRITEs on `qp` to `dst` in batches of [`BATCH`] and waits
/// for each batch's completion on `cq`; returns the allocations made
/// meanwhile.
fn run(qp: &EQp, cq: &ECq, dst: &EMr, n: usize) -> u64 {
    let mut wc = [WorkCompletion::default(); 4];
    let wrs: Vec<SendWr> = (0..BATCH)
        .map(|i| SendWr {
            wr_id: i as u64,
            op: SendOp::RdmaWrite {
                remote: RemoteAddr {
                    addr: dst.addr() + 8 * i as u64,
                    rkey: dst.rkey(),
                },
            },
            payload: Payload::Inline(&V),
            flags: if i + 1 == BATCH {
                send_flags::SIGNALED
            } else {
                0
            },
        })
        .collect();
    let before = ALLOCATIONS.load(Ordering::Relaxed);
    for _ in 0..n / BATCH {
        qp.post_send(&wrs).unwrap();
        let mut got = 0;
        while got == 0 {
            got = cq.poll(&mut wc).unwrap();
        }
        assert_eq!(got, 1);
        assert_eq!(wc[0].status, WcStatus::Success, "{:?}", wc[0]);
        assert_eq!(wc[0].wr_id, BATCH as u64 - 1);
    }
    ALLOCATIONS.load(Ordering::Relaxed) - before
}

/// Warms up, then runs N and 10 × N WRITEs and compares what each
/// allocated.
fn steady(what: &str, qp: &EQp, cq: &ECq, dst: &EMr) {
    let n = 32_000;
    // Queues, pools and tables reach their working size.
    run(qp, cq, dst, n);
    let small = run(qp, cq, dst, n);
    let large = run(qp, cq, dst, 10 * n);
    eprintln!(
        "{what}: {small} allocations for {n} WRITEs, {large} for {}",
        10 * n
    );
    assert!(
        large <= small + SLACK,
        "{what}: allocations grew from {small} to {large}"
    );
    let mut got = [0u8; 8 * BATCH];
    dst.read(0, &mut got).unwrap();
    assert!(got.chunks(8).all(|c| c == V), "the WRITEs landed");
}

#[test]
fn loopback_allocates_nothing_per_message() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    for mode in [ExecMode::Inline, ExecMode::Thread] {
        let setup = ALLOCATIONS.load(Ordering::Relaxed);
        let p = Pair::with(
            mode,
            PairOpts {
                cap: cap(128, 1, 64),
                ..PairOpts::default()
            },
        );
        let dst = p.mr(8 * BATCH, ALL_ACCESS);
        assert!(
            ALLOCATIONS.load(Ordering::Relaxed) > setup,
            "the counter sees the setup's allocations"
        );
        steady(&format!("loopback {mode:?}"), &p.a, &p.cq_a, &dst);
    }
}

#[test]
fn switch_allocates_nothing_per_message() {
    let _alone = ALONE.lock().unwrap_or_else(|e| e.into_inner());
    for mode in [ExecMode::Inline, ExecMode::Thread] {
        let sw = Switch::new();
        let devs: Vec<Arc<EmuDevice>> = (1..=2)
            .map(|n| {
                let b = EmuDevice::builder(nic_config(n)).mode(mode);
                b.wire(sw.port()).build().unwrap()
            })
            .collect();
        let ctxs: Vec<Ctx> = devs.iter().map(|d| Ctx::open(d.hal()).unwrap()).collect();
        let (pa, pb) = (ctxs[0].alloc_pd().unwrap(), ctxs[1].alloc_pd().unwrap());
        let (ca, cb) = (
            ctxs[0].create_cq(64).unwrap(),
            ctxs[1].create_cq(64).unwrap(),
        );
        let a = create_qp(&pa, &ca, &ca, cap(128, 1, 64), false);
        let b = create_qp(&pb, &cb, &cb, cap(128, 1, 64), false);
        connect_to(&ctxs[1], &a, b.qp_num(), &Conn::default());
        connect_to(&ctxs[0], &b, a.qp_num(), &Conn::default());
        let dst = pb.alloc_mr(8 * BATCH, ALL_ACCESS).unwrap();
        steady(&format!("switch {mode:?}"), &a, &ca, &dst);
    }
}

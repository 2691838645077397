//! The driver's BlueFlame writes (spec 8.1), seen at the platform: one
//! small WQE goes with its doorbell as a 64-byte write and no SQ doorbell;
//! a batch, or a WQE too large, rings the doorbell; a platform that cannot
//! make 64-byte writes gets doorbells from then on, and every WRITE lands
//! in each case, in both execution modes.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use rnic_driver::{
    access, send_flags, Context, Cq, Payload, QpInitAttr, QpType, RemoteAddr, SendOp, SendWr,
    WcStatus, WorkCompletion,
};
use rnic_emu::{EmuConfig, EmuDevice, EmuHal, ExecMode};
use rnic_hw_regs::pci::BAR_DOORBELL;
use rnic_hw_regs::uar::{SQ_DB, UAR_PAGE_SIZE};
use rnic_queues::{DmaRegion, Hal, HalError};
use rnic_tests::{cap, init_attr, rtr_attr_to, rts_attr, Conn};

/// The emulated device's platform, counting BlueFlame writes and SQ
/// doorbells, and refusing 64-byte writes while `refuse` is set.
#[derive(Clone)]
struct Counting {
    inner: EmuHal,
    blocks: Arc<AtomicUsize>,
    sq_doorbells: Arc<AtomicUsize>,
    refuse: Arc<AtomicBool>,
}

// SAFETY: every call goes to the inner platform, which keeps the contract;
// a refused 64-byte write reaches nothing, as on a platform without them.
unsafe impl Hal for Counting {
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
        if bar == BAR_DOORBELL && offset % UAR_PAGE_SIZE == SQ_DB {
            self.sq_doorbells.fetch_add(1, Ordering::Relaxed);
        }
        self.inner.mmio_write64(bar, offset, value)
    }
    fn mmio_write_block(&self, bar: u8, offset: usize, block: &[u64; 8]) -> Result<(), HalError> {
        if self.refuse.load(Ordering::Relaxed) {
            return Err(HalError::Unsupported);
        }
        self.blocks.fetch_add(1, Ordering::Relaxed);
        self.inner.mmio_write_block(bar, offset, block)
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
}

fn reap(cq: &Cq<Counting>, n: usize) {
    let mut wc = [WorkCompletion::default(); 8];
    let mut got = 0;
    let start = std::time::Instant::now();
    while got < n {
        let k = cq.poll(&mut wc).unwrap();
        for w in &wc[..k] {
            assert_eq!(w.status, WcStatus::Success, "{w:?}");
        }
        got += k;
        assert!(start.elapsed().as_secs() < 10, "{got} of {n} completions");
    }
}

fn blueflame(mode: ExecMode) {
    let dev = EmuDevice::new(EmuConfig::default(), mode);
    let hal = Counting {
        inner: dev.hal(),
        blocks: Arc::default(),
        sq_doorbells: Arc::default(),
        refuse: Arc::default(),
    };
    let ctx = Context::open(hal.clone()).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let qp = || {
        pd.create_qp(&QpInitAttr {
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            cap: cap(16, 1, 128),
            qp_type: QpType::Rc,
            sq_sig_all: true,
        })
        .unwrap()
    };
    let (a, b) = (qp(), qp());
    let gid = ctx.query_gid(1, 0).unwrap();
    let c = Conn::default();
    for (q, dest) in [(&a, b.qp_num()), (&b, a.qp_num())] {
        for (attr, mask) in [init_attr(&c), rtr_attr_to(gid, dest, &c), rts_attr(&c)] {
            q.modify(&attr, mask).unwrap();
        }
    }
    let mr = pd
        .alloc_mr(256, access::LOCAL_WRITE | access::REMOTE_WRITE)
        .unwrap();
    let write = |v: &[u8]| {
        let wr = SendWr {
            wr_id: 1,
            op: SendOp::RdmaWrite {
                remote: RemoteAddr {
                    addr: mr.addr(),
                    rkey: mr.rkey(),
                },
            },
            payload: Payload::Inline(v),
            flags: send_flags::SIGNALED,
        };
        a.post_send(&[wr]).unwrap();
        reap(&cq, 1);
        let mut got = vec![0u8; v.len()];
        mr.read(0, &mut got).unwrap();
        assert_eq!(got, v, "the WRITE landed");
    };
    let counts = || {
        (
            hal.blocks.load(Ordering::Relaxed),
            hal.sq_doorbells.load(Ordering::Relaxed),
        )
    };
    // 8 inline bytes: 3 segments, a BlueFlame write.
    for i in 1..=10u8 {
        write(&[i; 8]);
    }
    assert_eq!(counts(), (10, 0));
    // 40 inline bytes: 5 segments, a doorbell.
    write(&[0x40; 40]);
    assert_eq!(counts(), (10, 1));
    // Two WQEs behind one doorbell.
    let wr = |v: &'static [u8]| SendWr {
        wr_id: 2,
        op: SendOp::RdmaWrite {
            remote: RemoteAddr {
                addr: mr.addr() + 128,
                rkey: mr.rkey(),
            },
        },
        payload: Payload::Inline(v),
        flags: send_flags::SIGNALED,
    };
    a.post_send(&[wr(&[1; 8]), wr(&[2; 8])]).unwrap();
    reap(&cq, 2);
    assert_eq!(counts(), (10, 2));
    // A platform that refuses: the doorbell, and no more tries.
    hal.refuse.store(true, Ordering::Relaxed);
    write(&[0x77; 8]);
    hal.refuse.store(false, Ordering::Relaxed);
    write(&[0x78; 8]);
    assert_eq!(counts(), (10, 4), "BlueFlame stays off once refused");
}

#[test]
fn blueflame_inline() {
    blueflame(ExecMode::Inline);
}

#[test]
fn blueflame_thread() {
    blueflame(ExecMode::Thread);
}

//! A driver that does not trust its device: over the model, behind a Hal
//! wrapper that can make the device say what it should not (capabilities
//! it cannot back) and corrupt what it wrote into a completion queue, the
//! driver reports each lie as an error and keeps its own accounting
//! straight. A CQE naming an unknown QP, or a `wqe_counter` that names no
//! outstanding WQE or points inside a multi-block WQE, is an error and
//! never a completion; the work request ID comes from the driver's own
//! records, whatever the CQE carries; a CQ size the ring cannot index is
//! refused before any ring is built.

use std::ptr::NonNull;
use std::sync::{Arc, Mutex};

use rnic_hw_regs::bar0::{QueueCaps, CAP_QUEUE};
use rnic_hw_regs::cqe::CQE_SIZE;
use rnic_queues::{DmaRegion, HalError};
use rnic_tests::*;

/// The emulated device's platform, with a liar in between.
#[derive(Clone)]
struct Tamper {
    inner: EmuHal,
    t: Arc<Mutex<Lies>>,
}

#[derive(Default)]
struct Lies {
    /// `CAP_QUEUE.log_max_cqe` to claim.
    log_max_cqe: Option<u8>,
    /// Every region allocated: address and length.
    regions: Vec<(usize, usize)>,
}

impl Tamper {
    fn new() -> (Tamper, Arc<EmuDevice>) {
        let dev = EmuDevice::new(EmuConfig::default(), ExecMode::Inline);
        let t = Tamper {
            inner: dev.hal(),
            t: Arc::default(),
        };
        (t, dev)
    }

    /// Number of regions allocated so far.
    fn allocated(&self) -> usize {
        self.t.lock().unwrap().regions.len()
    }

    /// Rewrites bytes `off..` of region `idx` (a CQ ring: the device has
    /// written its entries; the inline device runs only inside driver
    /// calls, so nothing else touches them now).
    fn poke(&self, idx: usize, off: usize, bytes: &[u8]) {
        let (addr, len) = self.t.lock().unwrap().regions[idx];
        assert!(off + bytes.len() <= len);
        // SAFETY: the region is live (the CQ that owns it is), the range
        // is inside it (checked), and no other thread reads or writes it
        // during the call (the device runs inline, the test thread polls
        // only afterwards).
        unsafe {
            std::ptr::copy_nonoverlapping(bytes.as_ptr(), (addr as *mut u8).add(off), bytes.len())
        };
    }
}

// SAFETY: every call is passed to the model's own Hal, whose guarantees
// hold unchanged: the wrapper only records the regions it returns and
// answers one register read differently, which no memory-safety property
// depends on.
unsafe impl Hal for Tamper {
    fn dma_alloc(&self, len: usize) -> Result<DmaRegion, HalError> {
        let r = self.inner.dma_alloc(len)?;
        let mut t = self.t.lock().unwrap();
        t.regions.push((r.vaddr().as_ptr() as usize, r.len()));
        Ok(r)
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
    unsafe fn dma_unmap_retired(&self, iova: u64, len: usize) -> Result<(), HalError> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.inner.dma_unmap_retired(iova, len) }
    }
    fn mmio_read32(&self, bar: u8, offset: usize) -> u32 {
        let v = self.inner.mmio_read32(bar, offset);
        match self.t.lock().unwrap().log_max_cqe {
            Some(log) if bar == 0 && offset == CAP_QUEUE => {
                let q = QueueCaps::from_bits(rnic_hw_regs::le32::from_ne(v)).with_log_max_cqe(log);
                q.into_bits().to_ne()
            }
            _ => v,
        }
    }
    fn mmio_write32(&self, bar: u8, offset: usize, value: u32) {
        self.inner.mmio_write32(bar, offset, value)
    }
    fn mmio_write64(&self, bar: u8, offset: usize, value: u64) {
        self.inner.mmio_write64(bar, offset, value)
    }
    fn now_ns(&self) -> u64 {
        self.inner.now_ns()
    }
    fn wait_irq(&self, vector: u16, timeout_ns: u64) -> Result<bool, HalError> {
        self.inner.wait_irq(vector, timeout_ns)
    }
    fn relax(&self) {
        self.inner.relax()
    }
    fn poll_empty(&self) {
        self.inner.poll_empty()
    }
}

type TCtx = Context<Tamper>;

/// The wrapped platform, its device and the driver's context on it.
struct Setup {
    hal: Tamper,
    _dev: Arc<EmuDevice>,
    ctx: TCtx,
}

fn setup() -> Setup {
    let (hal, dev) = Tamper::new();
    let ctx = TCtx::open(hal.clone()).unwrap();
    Setup {
        hal,
        _dev: dev,
        ctx,
    }
}

/// An RC QP connected to itself, on `cq`.
fn loopback_qp(ctx: &TCtx, pd: &Pd<Tamper>, cq: &Cq<Tamper>, inline: u32) -> Qp<Tamper> {
    let qp = pd
        .create_qp(&QpInit {
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap: cap(8, 1, inline),
            qp_type: QpType::Rc,
            sq_sig_all: false,
        })
        .unwrap();
    let c = Conn::default();
    let (a, m) = init_attr(&c);
    qp.modify(&a, m).unwrap();
    let (a, m) = rtr_attr_to(ctx.query_gid(1, 0).unwrap(), qp.qp_num(), &c);
    qp.modify(&a, m).unwrap();
    let (a, m) = rts_attr(&c);
    qp.modify(&a, m).unwrap();
    qp
}

/// An inline RDMA WRITE of `len` bytes to `mr`, signaled.
fn write(qp: &Qp<Tamper>, mr: &Mr<Tamper>, wr_id: u64, len: usize) {
    let data = vec![0x5a; len];
    qp.post_send(&[SendWr {
        wr_id,
        op: SendOp::RdmaWrite {
            remote: RemoteAddr {
                addr: mr.addr(),
                rkey: mr.rkey(),
            },
        },
        payload: Payload::Inline(&data),
        flags: send_flags::SIGNALED,
    }])
    .unwrap();
}

/// Lets the inline device run (polling nothing: the test corrupts the
/// CQEs it writes before the driver reads them).
fn run_device(ctx: &TCtx) {
    for _ in 0..1000 {
        ctx.hal().relax();
    }
}

/// Offset of a field of CQE `idx`.
fn cqe_off(idx: usize, field: usize) -> usize {
    idx * CQE_SIZE + field
}

#[test]
fn unknown_qp_and_foreign_counters_are_errors_not_completions() {
    let s = setup();
    let pd = s.ctx.alloc_pd().unwrap();
    let before = s.hal.allocated();
    let cq = s.ctx.create_cq(16).unwrap();
    let cq_region = before;
    let mr = pd
        .alloc_mr(4096, access::LOCAL_WRITE | access::REMOTE_WRITE)
        .unwrap();
    let qp = loopback_qp(&s.ctx, &pd, &cq, 128);
    // CQE 0: its QP number changed to one no QP on this CQ has.
    write(&qp, &mr, 1, 8);
    run_device(&s.ctx);
    s.hal.poke(
        cq_region,
        cqe_off(0, std::mem::offset_of!(rnic_hw_regs::cqe::Cqe, qpn)),
        &0x00ab_cdefu32.to_le_bytes(),
    );
    let mut wc = [WorkCompletion::default(); 4];
    let e = cq.poll(&mut wc).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Io);
    assert!(e.to_string().contains("no queue on this CQ"), "{e}");
    // CQE 1: a counter far outside the posted WQEs.
    write(&qp, &mr, 2, 8);
    run_device(&s.ctx);
    s.hal.poke(
        cq_region,
        cqe_off(1, std::mem::offset_of!(rnic_hw_regs::cqe::Cqe, wqe_counter)),
        &900u16.to_le_bytes(),
    );
    let e = cq.poll(&mut wc).unwrap_err();
    assert!(
        e.to_string().contains("outside its outstanding WQEs"),
        "{e}"
    );
    // The lost completions did not retire anything: the next true one
    // retires every WQE up to it, with the driver's wr_id although the CQE
    // claims another.
    write(&qp, &mr, 3, 8);
    run_device(&s.ctx);
    s.hal.poke(
        cq_region,
        cqe_off(2, std::mem::offset_of!(rnic_hw_regs::cqe::Cqe, wr_id)),
        &0xdead_beefu64.to_le_bytes(),
    );
    assert_eq!(cq.poll(&mut wc).unwrap(), 1);
    assert_eq!((wc[0].wr_id, wc[0].status), (3, WcStatus::Success));
    assert_eq!(cq.poll(&mut wc).unwrap(), 0);
    // All eight slots are free again.
    for i in 0..8 {
        write(&qp, &mr, 10 + i, 8);
    }
    run_device(&s.ctx);
    let mut all = [WorkCompletion::default(); 16];
    assert_eq!(cq.poll(&mut all).unwrap(), 8);
    let ids: Vec<u64> = all[..8].iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, (10..18).collect::<Vec<_>>());
}

#[test]
fn a_counter_inside_a_multi_block_wqe_cannot_wedge_the_send_queue() {
    let s = setup();
    let pd = s.ctx.alloc_pd().unwrap();
    let before = s.hal.allocated();
    let cq = s.ctx.create_cq(16).unwrap();
    let cq_region = before;
    let mr = pd
        .alloc_mr(4096, access::LOCAL_WRITE | access::REMOTE_WRITE)
        .unwrap();
    let qp = loopback_qp(&s.ctx, &pd, &cq, 128);
    // 128 inline bytes: ctrl + raddr + 9 inline segments = 11, 3 BBs.
    write(&qp, &mr, 1, 128);
    run_device(&s.ctx);
    // Its CQE says the WQE ended after its first BB.
    s.hal.poke(
        cq_region,
        cqe_off(0, std::mem::offset_of!(rnic_hw_regs::cqe::Cqe, wqe_counter)),
        &1u16.to_le_bytes(),
    );
    let mut wc = [WorkCompletion::default(); 4];
    let e = cq.poll(&mut wc).unwrap_err();
    assert!(
        e.to_string().contains("outside its outstanding WQEs"),
        "{e}"
    );
    // Nothing was retired by it: the next completion retires both WQEs.
    write(&qp, &mr, 2, 8);
    run_device(&s.ctx);
    assert_eq!(cq.poll(&mut wc).unwrap(), 1);
    assert_eq!(wc[0].wr_id, 2);
    for i in 0..8 {
        write(&qp, &mr, 20 + i, 8);
    }
    run_device(&s.ctx);
    let mut all = [WorkCompletion::default(); 16];
    assert_eq!(cq.poll(&mut all).unwrap(), 8);
}

#[test]
fn a_cq_the_ring_cannot_index_is_refused() {
    let s = setup();
    // Before any lie: the model's limit.
    let max = s.ctx.query_device().unwrap().max_cqe;
    assert_eq!(
        s.ctx.create_cq(max + 1).err().map(|e| e.kind()),
        Some(ErrorKind::InvalidArgument)
    );
    // A device that claims 2^31 entries: a driver opened on it still
    // refuses 2^24, which its 24-bit consumer index cannot address.
    let (hal, _dev) = Tamper::new();
    hal.t.lock().unwrap().log_max_cqe = Some(31);
    let ctx = TCtx::open(hal).unwrap();
    let e = ctx.create_cq(1 << 24).err().expect("a CQ of 2^24 entries");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(e.to_string().contains("1..=8388608"), "{e}");
}

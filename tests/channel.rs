//! Completion channels and interrupts, in both execution modes: several
//! CQs on one channel and several channels, each on its own EQ and
//! vector; `get_cq_event` blocking in another thread, and after `poll` on
//! the channel's fd; arming for any or only solicited completions; the
//! counting of `ack_events`; and commands issued from many threads at
//! once, which sleep on the command interrupt instead of spinning.

use std::ptr::NonNull;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use rnic_driver::CompChannel;
use rnic_hw_regs::bar0::CMDQ_DB;
use rnic_queues::{DmaRegion, HalError};
use rnic_tests::*;

type Channel = CompChannel<EmuHal>;

/// Two RC QPs in loopback on one device, each completing into its own CQ
/// on `channel`.
struct Setup {
    ctx: Ctx,
    ch: Channel,
    mr: EMr,
    cq_a: ECq,
    cq_b: ECq,
    a: EQp,
    b: EQp,
}

fn setup(mode: ExecMode) -> Setup {
    let ctx = open(mode);
    let pd = ctx.alloc_pd().unwrap();
    let ch = ctx.create_comp_channel().unwrap();
    let cq_a = ctx.create_cq_with(16, Some(&ch), 0).unwrap();
    let cq_b = ctx.create_cq_with(16, Some(&ch), 0).unwrap();
    let a = create_qp(&pd, &cq_a, &cq_a, cap(8, 1, 64), false);
    let b = create_qp(&pd, &cq_b, &cq_b, cap(8, 1, 64), false);
    connect(&ctx, &a, b.qp_num(), &Conn::default());
    connect(&ctx, &b, a.qp_num(), &Conn::default());
    let mr = pd.alloc_mr(4096, access::LOCAL_WRITE).unwrap();
    Setup {
        ctx,
        ch,
        mr,
        cq_a,
        cq_b,
        a,
        b,
    }
}

impl Setup {
    /// A SEND from `a` to `b` (one receive posted), signaled; `solicited`
    /// sets the solicited event flag.
    fn send(&self, wr_id: u64, solicited: bool) {
        post_recv(&self.b, recv(wr_id, &[sge(&self.mr, 0, 64)]));
        let flags = send_flags::SIGNALED | if solicited { send_flags::SOLICITED } else { 0 };
        self.a
            .post_send(&[SendWr {
                wr_id,
                op: SendOp::Send,
                payload: Payload::Inline(b"an event"),
                flags,
            }])
            .unwrap();
    }

    /// The next event within `ms` milliseconds: its CQ's number.
    fn event(&self, ms: u64) -> Option<u32> {
        self.ch
            .get_cq_event(ms * 1_000_000)
            .unwrap()
            .map(|cq| cq.cq_num())
    }
}

fn readable(fd: i32, ms: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one valid pollfd.
    unsafe { libc::poll(&mut p, 1, ms) == 1 }
}

fn events_and_counting(mode: ExecMode) {
    let s = setup(mode);
    // Nothing armed: completions raise no event.
    s.send(1, false);
    assert_eq!(poll_n(&s.cq_a, 1)[0].wr_id, 1);
    assert_eq!(poll_n(&s.cq_b, 1)[0].wr_id, 1);
    settle(&s.ctx);
    assert_eq!(s.event(0), None);
    // Both CQs armed: one event each, through the one channel.
    s.cq_a.arm(false);
    s.cq_b.arm(false);
    s.send(2, false);
    let mut got = [s.event(5000).unwrap(), s.event(5000).unwrap()];
    got.sort_unstable();
    let mut want = [s.cq_a.cq_num(), s.cq_b.cq_num()];
    want.sort_unstable();
    assert_eq!(got, want);
    assert_eq!(s.event(0), None, "one event per arm");
    poll_n(&s.cq_a, 1);
    poll_n(&s.cq_b, 1);
    // Solicited only: an unsolicited receive raises nothing, a solicited
    // one does.
    s.cq_b.arm(true);
    s.send(3, false);
    poll_n(&s.cq_b, 1);
    settle(&s.ctx);
    assert_eq!(s.event(0), None);
    s.send(4, true);
    assert_eq!(s.event(5000), Some(s.cq_b.cq_num()));
    poll_n(&s.cq_b, 1);
    // Unacknowledged events keep the CQ from being destroyed.
    let Setup {
        ctx: _ctx,
        ch,
        cq_a,
        cq_b,
        a,
        b,
        ..
    } = s;
    drop((a, b));
    let e = cq_b.destroy().unwrap_err();
    assert_eq!(e.error.kind(), ErrorKind::Busy, "{}", e.error);
    let cq_b = e.object.unwrap();
    assert_eq!(
        cq_b.ack_events(3).unwrap_err().kind(),
        ErrorKind::InvalidArgument,
        "two taken"
    );
    cq_b.ack_events(2).unwrap();
    cq_a.ack_events(1).unwrap();
    // The channel is busy while CQs use it.
    let e = ch.destroy().unwrap_err();
    assert_eq!(e.error.kind(), ErrorKind::Busy);
    let ch = e.object.unwrap();
    cq_b.destroy().unwrap();
    cq_a.destroy().unwrap();
    ch.destroy().unwrap();
}

#[test]
fn events_and_counting_inline_device() {
    events_and_counting(ExecMode::Inline);
}

#[test]
fn events_and_counting_device_thread() {
    events_and_counting(ExecMode::Thread);
}

/// A thread blocks in `get_cq_event` until the completion arrives; the
/// channel's fd is readable exactly while an event waits.
fn blocking_and_fd(mode: ExecMode) {
    let s = Arc::new(setup(mode));
    let fd = s.ch.fd().expect("the emulated device has eventfds");
    assert!(!readable(fd, 0));
    s.cq_a.arm(false);
    let waiter = {
        let s = Arc::clone(&s);
        thread::spawn(move || {
            let t = Instant::now();
            let cq = s.ch.get_cq_event(10_000_000_000).unwrap();
            (cq.map(|c| c.cq_num()), t.elapsed())
        })
    };
    thread::sleep(Duration::from_millis(20));
    assert!(!waiter.is_finished(), "it waits");
    s.send(1, false);
    let (cq, took) = waiter.join().unwrap();
    assert_eq!(cq, Some(s.cq_a.cq_num()));
    assert!(took < Duration::from_secs(5), "woken by the event");
    assert!(!readable(fd, 0), "nothing waits");
    // The event loop way: poll, then take without blocking.
    poll_n(&s.cq_a, 1);
    poll_n(&s.cq_b, 1);
    s.cq_b.arm(false);
    s.send(2, false);
    assert!(readable(fd, 5000));
    assert_eq!(s.event(0), Some(s.cq_b.cq_num()));
    assert!(!readable(fd, 0), "taken");
    assert_eq!(s.event(0), None);
    s.cq_a.ack_events(1).unwrap();
    s.cq_b.ack_events(1).unwrap();
}

#[test]
fn blocking_and_fd_inline_device() {
    blocking_and_fd(ExecMode::Inline);
}

#[test]
fn blocking_and_fd_device_thread() {
    blocking_and_fd(ExecMode::Thread);
}

#[test]
fn every_channel_has_its_own_vector() {
    let ctx = open(ExecMode::Thread);
    // 16 vectors: 0 for commands, 1 for EQ 0, 14 for channels.
    assert_eq!(ctx.num_comp_vectors(), 14);
    let chans: Vec<Channel> = (0..14)
        .map(|_| ctx.create_comp_channel().unwrap())
        .collect();
    let mut v: Vec<u16> = chans.iter().map(Channel::vector).collect();
    v.sort_unstable();
    assert_eq!(v, (2..16).collect::<Vec<_>>());
    let e = ctx.create_comp_channel().err().unwrap();
    assert_eq!(e.kind(), ErrorKind::NoMemory, "{e}");
    let fds: Vec<i32> = chans.iter().map(|c| c.fd().unwrap()).collect();
    let mut distinct = fds.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), 14);
    // An event on one channel makes only its fd readable.
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq_with(4, Some(&chans[3]), 0).unwrap();
    let qp = create_qp(&pd, &cq, &cq, cap(4, 1, 64), false);
    connect(&ctx, &qp, qp.qp_num(), &Conn::default());
    cq.arm(false);
    let mr = pd.alloc_mr(64, access::LOCAL_WRITE).unwrap();
    post_recv(&qp, recv(1, &[sge(&mr, 0, 64)]));
    post_send(&qp, send(1, &[sge(&mr, 0, 8)]));
    assert!(readable(fds[3], 5000));
    for (i, &fd) in fds.iter().enumerate() {
        assert_eq!(readable(fd, 0), i == 3, "channel {i}");
    }
    let got = chans[3].get_cq_event(0).unwrap().unwrap();
    assert_eq!(got.cq_num(), cq.cq_num());
    drop(got);
    cq.ack_events(1).unwrap();
    // A completion vector outside the range is refused; a destroyed
    // channel's vector goes to the next channel.
    assert_eq!(
        ctx.create_cq_with(4, Some(&chans[0]), 14)
            .err()
            .unwrap()
            .kind(),
        ErrorKind::InvalidArgument
    );
    let mut chans = chans;
    let freed = chans.remove(5);
    let v5 = freed.vector();
    freed.destroy().unwrap();
    assert_eq!(ctx.create_comp_channel().unwrap().vector(), v5);
}

/// A platform whose command doorbell reaches the device 5 ms late, and
/// which counts the command interrupts a waiter slept on.
#[derive(Clone)]
struct SlowDoorbell {
    inner: EmuHal,
    woken: Arc<AtomicU64>,
}

// SAFETY: every call goes to the inner platform (the doorbell later,
// from another thread), which keeps the contract.
unsafe impl Hal for SlowDoorbell {
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
        if bar == 0 && offset == CMDQ_DB && self.woken.load(Ordering::Relaxed) != u64::MAX {
            let inner = self.inner.clone();
            thread::spawn(move || {
                thread::sleep(Duration::from_millis(5));
                inner.mmio_write32(bar, offset, value);
            });
            return;
        }
        self.inner.mmio_write32(bar, offset, value)
    }
    fn mmio_write64(&self, bar: u8, offset: usize, value: u64) {
        self.inner.mmio_write64(bar, offset, value)
    }
    fn now_ns(&self) -> u64 {
        self.inner.now_ns()
    }
    fn wait_irq(&self, vector: u16, timeout_ns: u64) -> Result<bool, HalError> {
        let fired = self.inner.wait_irq(vector, timeout_ns)?;
        if fired && vector == 0 {
            self.woken.fetch_add(1, Ordering::Relaxed);
        }
        Ok(fired)
    }
    fn relax(&self) {
        self.inner.relax()
    }
    fn poll_empty(&self) {
        self.inner.poll_empty()
    }
}

#[test]
fn commands_sleep_on_their_interrupt_and_run_from_many_threads() {
    let dev = EmuDevice::new(EmuConfig::default(), ExecMode::Thread);
    let hal = SlowDoorbell {
        inner: dev.hal(),
        // Bring-up rings the doorbell at once.
        woken: Arc::new(AtomicU64::new(u64::MAX)),
    };
    let ctx = Context::open(hal.clone()).unwrap();
    hal.woken.store(0, Ordering::Relaxed);
    let t = Instant::now();
    let pd = ctx.alloc_pd().unwrap();
    assert!(t.elapsed() >= Duration::from_millis(5));
    assert!(
        hal.woken.load(Ordering::Relaxed) >= 1,
        "the command's caller slept until the command interrupt"
    );
    drop(pd);
    // Commands from eight threads at once, all answered.
    let threads: Vec<_> = (0..8)
        .map(|_| {
            let ctx = ctx.clone();
            thread::spawn(move || {
                for _ in 0..20 {
                    let pd = ctx.alloc_pd().unwrap();
                    ctx.query_device().unwrap();
                    pd.destroy().unwrap();
                }
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(hal.woken.load(Ordering::Relaxed) > 8);
}

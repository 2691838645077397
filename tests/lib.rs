//! Shared helpers for the integration tests of the rnic driver over the
//! emulated device.
//!
//! Every test opens its own [`EmuDevice`] (so tests are independent and
//! may run in parallel) and reaches it only through the driver's verbs API.
//! The helpers here cover the repetitive parts:
//!
//! - [`open`] / [`open_with`]: a [`Context`] over a fresh device in a given
//!   [`ExecMode`];
//! - [`Conn`] and [`to_init`] / [`to_rtr`] / [`to_rts`] / [`connect`]: the
//!   RESET → INIT → RTR → RTS bring-up of an RC QP with the attribute masks
//!   libibverbs requires;
//! - [`Pair`]: two connected RC QPs `a` and `b` (each with its own CQ) on one
//!   device, the fixture of most data-path tests;
//! - [`poll_n`], [`assert_cq_empty`], [`expect_event`], [`assert_no_event`]:
//!   completion and event checks that never hang: a bounded wait fails the
//!   test with a message naming what was expected and what arrived;
//! - [`both_modes!`]: runs a test function once per execution mode of the
//!   device model.
//!
//! The device model executes a doorbell either before the doorbell write
//! returns ([`ExecMode::Inline`]) or later on its own thread
//! ([`ExecMode::Thread`]). To assert that something did *not* happen, a
//! test first calls [`settle`]: the device handles register writes and
//! doorbells in order, so once a command has completed every earlier
//! doorbell has been fully processed.

use std::time::{Duration, Instant};

pub use rnic_queues::Hal;

pub mod dropin;
pub mod fabric;
pub mod peer;
pub mod side;
pub mod traffic;

pub use rnic_driver::Config as DriverConfig;
pub use rnic_driver::{
    access, counter, qp_attr, send_flags, srq_mask, wc_flags, Ah, AhAttr, AsyncEvent, Context,
    Counters, Cq, DestroyError, Error, ErrorKind, EventType, GidType, Mr, Mtu, Payload, Pd,
    PortState, PostError, Qp, QpAttr, QpCap, QpInit, QpState, QpType, RecvWr, RemoteAddr, SendOp,
    SendWr, Sge, Srq, SrqAttr, Syndrome, UdDest, WcOpcode, WcStatus, WorkCompletion, GRH_LEN,
};
pub use rnic_emu::{EmuConfig, EmuDevice, EmuHal, ExecMode};

/// The driver context over the emulated device.
pub type Ctx = Context<EmuHal>;
/// A protection domain of [`Ctx`].
pub type EPd = Pd<EmuHal>;
/// A memory region of [`Ctx`].
pub type EMr = Mr<EmuHal>;
/// A completion queue of [`Ctx`].
pub type ECq = Cq<EmuHal>;
/// A queue pair of [`Ctx`].
pub type EQp = Qp<EmuHal>;

/// How long any wait for the device may take before the test fails. Only a
/// guard against hangs: no test asserts anything about time.
pub const TIMEOUT: Duration = Duration::from_secs(10);

/// Access rights a responder QP grants by default: everything.
pub const ALL_REMOTE: u32 = access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;

/// Every MR access right.
pub const ALL_ACCESS: u32 = access::LOCAL_WRITE | ALL_REMOTE;

/// Generates one `#[test]` per execution mode for each listed function
/// `fn name(mode: ExecMode)`: `inline::name` and `thread::name`.
/// Attributes written before a name (such as `#[ignore = "..."]`) are put
/// on both generated tests.
///
/// ```text
/// fn send_works(mode: ExecMode) { /* ... */ }
/// both_modes!(send_works, #[ignore = "bug: ..."] other);
/// ```
#[macro_export]
macro_rules! both_modes {
    ($($(#[$m:meta])* $name:ident),* $(,)?) => {
        mod inline {
            $( $(#[$m])* #[test] fn $name() { super::$name($crate::ExecMode::Inline) } )*
        }
        mod thread {
            $( $(#[$m])* #[test] fn $name() { super::$name($crate::ExecMode::Thread) } )*
        }
    };
}

/// Opens a [`Context`] over a new device with the default configuration.
pub fn open(mode: ExecMode) -> Ctx {
    open_with(EmuConfig::default(), mode)
}

/// Opens a [`Context`] over a new device with configuration `cfg`.
pub fn open_with(cfg: EmuConfig, mode: ExecMode) -> Ctx {
    open_with_driver(cfg, DriverConfig::default(), mode)
}

/// Opens a [`Context`] with bring-up parameters `driver` over a new device
/// with configuration `cfg`.
pub fn open_with_driver(cfg: EmuConfig, driver: DriverConfig, mode: ExecMode) -> Ctx {
    let dev = EmuDevice::new(cfg, mode);
    Context::open_with(dev.hal(), driver).expect("Context::open over the emulated device")
}

/// Waits until the device has processed every doorbell and register write
/// issued so far, by running a command (QUERY_DEVICE) through the command
/// queue: the device handles them in order and the driver waits for the
/// command's completion.
pub fn settle(ctx: &Ctx) {
    ctx.query_device().expect("QUERY_DEVICE as a barrier");
}

/// Connection parameters of one QP for [`to_init`], [`to_rtr`] and
/// [`to_rts`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conn {
    /// `qp_access_flags` granted to remote requesters.
    pub access: u32,
    /// RNR retry count (7 = infinite).
    pub rnr_retry: u8,
    /// Transport retry count.
    pub retry_cnt: u8,
    /// Local ACK timeout code.
    pub timeout: u8,
    /// Minimum RNR NAK timer code.
    pub min_rnr_timer: u8,
    /// Path MTU.
    pub mtu: Mtu,
    /// Send PSN.
    pub sq_psn: u32,
    /// Expected receive PSN.
    pub rq_psn: u32,
    /// Outstanding READ/atomics as requester.
    pub max_rd_atomic: u8,
    /// Outstanding READ/atomics as responder.
    pub max_dest_rd_atomic: u8,
}

impl Default for Conn {
    fn default() -> Self {
        Self {
            access: ALL_REMOTE,
            rnr_retry: 7,
            retry_cnt: 7,
            timeout: 14,
            min_rnr_timer: 12,
            mtu: Mtu::Mtu1024,
            sq_psn: 0,
            rq_psn: 0,
            max_rd_atomic: 1,
            max_dest_rd_atomic: 1,
        }
    }
}

/// RESET → INIT attributes and mask (`PKEY_INDEX | PORT | ACCESS_FLAGS`).
pub fn init_attr(c: &Conn) -> (QpAttr, u32) {
    let attr = QpAttr {
        qp_state: QpState::Init,
        pkey_index: 0,
        port_num: 1,
        qp_access_flags: c.access,
        ..QpAttr::default()
    };
    let mask = qp_attr::STATE | qp_attr::PKEY_INDEX | qp_attr::PORT | qp_attr::ACCESS_FLAGS;
    (attr, mask)
}

/// INIT → RTR attributes and mask for a connection to QP `dest` of the same
/// device (GID index 0 as source and destination).
pub fn rtr_attr(ctx: &Ctx, dest: u32, c: &Conn) -> (QpAttr, u32) {
    rtr_attr_to(ctx.query_gid(1, 0).expect("QUERY_GID(1, 0)"), dest, c)
}

/// INIT → RTR attributes and mask for a connection to QP `dest` behind GID
/// `dgid` (source GID index 0; the destination MAC left for the device to
/// resolve).
pub fn rtr_attr_to(dgid: [u8; 16], dest: u32, c: &Conn) -> (QpAttr, u32) {
    let mut attr = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: Some(c.mtu),
        dest_qp_num: dest,
        rq_psn: c.rq_psn,
        max_dest_rd_atomic: c.max_dest_rd_atomic,
        min_rnr_timer: c.min_rnr_timer,
        ..QpAttr::default()
    };
    attr.ah_attr = AhAttr {
        dgid,
        sgid_index: 0,
        hop_limit: 64,
        port_num: 1,
        is_global: true,
        ..AhAttr::default()
    };
    let mask = qp_attr::STATE
        | qp_attr::AV
        | qp_attr::PATH_MTU
        | qp_attr::DEST_QPN
        | qp_attr::RQ_PSN
        | qp_attr::MAX_DEST_RD_ATOMIC
        | qp_attr::MIN_RNR_TIMER;
    (attr, mask)
}

/// RTR → RTS attributes and mask.
pub fn rts_attr(c: &Conn) -> (QpAttr, u32) {
    let attr = QpAttr {
        qp_state: QpState::Rts,
        sq_psn: c.sq_psn,
        timeout: c.timeout,
        retry_cnt: c.retry_cnt,
        rnr_retry: c.rnr_retry,
        max_rd_atomic: c.max_rd_atomic,
        ..QpAttr::default()
    };
    let mask = qp_attr::STATE
        | qp_attr::SQ_PSN
        | qp_attr::TIMEOUT
        | qp_attr::RETRY_CNT
        | qp_attr::RNR_RETRY
        | qp_attr::MAX_QP_RD_ATOMIC;
    (attr, mask)
}

/// Moves `qp` from RESET to INIT.
pub fn to_init(qp: &EQp, c: &Conn) -> Result<(), Error> {
    let (attr, mask) = init_attr(c);
    qp.modify(&attr, mask)
}

/// Moves `qp` from INIT to RTR, connected to QP number `dest`.
pub fn to_rtr(ctx: &Ctx, qp: &EQp, dest: u32, c: &Conn) -> Result<(), Error> {
    let (attr, mask) = rtr_attr(ctx, dest, c);
    qp.modify(&attr, mask)
}

/// Moves `qp` from RTR to RTS.
pub fn to_rts(qp: &EQp, c: &Conn) -> Result<(), Error> {
    let (attr, mask) = rts_attr(c);
    qp.modify(&attr, mask)
}

/// Brings `qp` from RESET to RTS, connected to QP number `dest`; panics
/// (failing the test) if any step fails, and checks the state by QUERY_QP.
pub fn connect(ctx: &Ctx, qp: &EQp, dest: u32, c: &Conn) {
    to_init(qp, c).unwrap_or_else(|e| panic!("QP {} RESET -> INIT: {e}", qp.qp_num()));
    to_rtr(ctx, qp, dest, c).unwrap_or_else(|e| panic!("QP {} INIT -> RTR: {e}", qp.qp_num()));
    to_rts(qp, c).unwrap_or_else(|e| panic!("QP {} RTR -> RTS: {e}", qp.qp_num()));
    assert_eq!(
        query_state(qp),
        QpState::Rts,
        "QP {} after connect",
        qp.qp_num()
    );
}

/// Brings `qp` from RESET to RTS, connected to QP number `dest` of the NIC
/// whose context is `peer`.
pub fn connect_to(peer: &Ctx, qp: &EQp, dest: u32, c: &Conn) {
    let dgid = peer.query_gid(1, 0).expect("peer QUERY_GID(1, 0)");
    to_init(qp, c).unwrap_or_else(|e| panic!("QP {} RESET -> INIT: {e}", qp.qp_num()));
    let (attr, mask) = rtr_attr_to(dgid, dest, c);
    qp.modify(&attr, mask)
        .unwrap_or_else(|e| panic!("QP {} INIT -> RTR: {e}", qp.qp_num()));
    to_rts(qp, c).unwrap_or_else(|e| panic!("QP {} RTR -> RTS: {e}", qp.qp_num()));
}

/// Moves `qp` to `state` with only `STATE` in the mask (RESET and ERR).
pub fn set_state(qp: &EQp, state: QpState) -> Result<(), Error> {
    let attr = QpAttr {
        qp_state: state,
        ..QpAttr::default()
    };
    qp.modify(&attr, qp_attr::STATE)
}

/// The QP's state as the device reports it (QUERY_QP).
pub fn query_state(qp: &EQp) -> QpState {
    qp.query().expect("QUERY_QP").qp_state
}

/// Queue capacities for a small RC QP: `wr` requests each way, `sge`
/// entries each way, `inline` bytes of inline data.
pub fn cap(wr: u32, sge: u32, inline: u32) -> QpCap {
    QpCap {
        max_send_wr: wr,
        max_recv_wr: wr,
        max_send_sge: sge,
        max_recv_sge: sge,
        max_inline_data: inline,
    }
}

/// Creates an RC QP in RESET.
pub fn create_qp(pd: &EPd, send_cq: &ECq, recv_cq: &ECq, cap: QpCap, sq_sig_all: bool) -> EQp {
    pd.create_qp(&QpInit {
        send_cq,
        recv_cq,
        srq: None,
        cap,
        qp_type: QpType::Rc,
        sq_sig_all,
    })
    .unwrap_or_else(|e| panic!("create_qp({cap:?}): {e}"))
}

/// Options of a [`Pair`].
#[derive(Debug, Clone)]
pub struct PairOpts {
    /// Device configuration.
    pub config: EmuConfig,
    /// Driver bring-up parameters (command and event queue sizes).
    pub driver: DriverConfig,
    /// Capacities of both QPs.
    pub cap: QpCap,
    /// Entries of each QP's CQ.
    pub cq_size: u32,
    /// `sq_sig_all` of both QPs.
    pub sq_sig_all: bool,
    /// Connection parameters of `a`.
    pub conn_a: Conn,
    /// Connection parameters of `b`.
    pub conn_b: Conn,
    /// Connect the QPs (else both stay in RESET).
    pub connect: bool,
}

impl Default for PairOpts {
    fn default() -> Self {
        Self {
            config: EmuConfig::default(),
            driver: DriverConfig::default(),
            cap: cap(16, 4, 64),
            cq_size: 64,
            sq_sig_all: false,
            conn_a: Conn::default(),
            conn_b: Conn::default(),
            connect: true,
        }
    }
}

/// Two RC QPs on one device, `a` connected to `b` and `b` to `a`, in one
/// PD. Each QP completes sends and receives into its own CQ (`cq_a`,
/// `cq_b`).
pub struct Pair {
    /// The device context.
    pub ctx: Ctx,
    /// The PD of both QPs.
    pub pd: EPd,
    /// Send and receive CQ of `a`.
    pub cq_a: ECq,
    /// Send and receive CQ of `b`.
    pub cq_b: ECq,
    /// The first QP (usually the requester).
    pub a: EQp,
    /// The second QP (usually the responder).
    pub b: EQp,
}

impl Pair {
    /// A connected pair with the default options.
    pub fn new(mode: ExecMode) -> Self {
        Self::with(mode, PairOpts::default())
    }

    /// A pair with options `o`.
    pub fn with(mode: ExecMode, o: PairOpts) -> Self {
        let ctx = open_with_driver(o.config.clone(), o.driver, mode);
        let pd = ctx.alloc_pd().expect("alloc_pd");
        let cq_a = ctx.create_cq(o.cq_size).expect("create_cq a");
        let cq_b = ctx.create_cq(o.cq_size).expect("create_cq b");
        let a = create_qp(&pd, &cq_a, &cq_a, o.cap, o.sq_sig_all);
        let b = create_qp(&pd, &cq_b, &cq_b, o.cap, o.sq_sig_all);
        if o.connect {
            connect(&ctx, &a, b.qp_num(), &o.conn_a);
            connect(&ctx, &b, a.qp_num(), &o.conn_b);
        }
        Self {
            ctx,
            pd,
            cq_a,
            cq_b,
            a,
            b,
        }
    }

    /// A driver-allocated MR of `len` bytes in the pair's PD.
    pub fn mr(&self, len: usize, access: u32) -> EMr {
        self.pd
            .alloc_mr(len, access)
            .unwrap_or_else(|e| panic!("alloc_mr({len}, {access:#x}): {e}"))
    }

    /// Asserts that both CQs are empty and no event is pending.
    pub fn assert_quiet(&self) {
        assert_cq_empty(&self.ctx, &self.cq_a);
        assert_cq_empty(&self.ctx, &self.cq_b);
        assert_no_event(&self.ctx);
    }
}

/// Polls `cq` until exactly `n` completions have been taken, failing the
/// test if they do not all arrive within [`TIMEOUT`]. Completions past the
/// `n`th stay in the CQ.
pub fn poll_n(cq: &ECq, n: usize) -> Vec<WorkCompletion> {
    let mut out = vec![WorkCompletion::default(); n];
    let mut got = 0;
    let start = Instant::now();
    while got < n {
        match cq.poll(&mut out[got..]) {
            Ok(k) => got += k,
            Err(e) => panic!(
                "CQ {}: poll failed after {got} of {n} completions: {e}; got {:#?}",
                cq.cq_num(),
                &out[..got]
            ),
        }
        if got < n {
            if start.elapsed() > TIMEOUT {
                panic!(
                    "CQ {}: timed out after {TIMEOUT:?} waiting for {n} completions; got {got}: \
                     {:#?}",
                    cq.cq_num(),
                    &out[..got]
                );
            }
            // The waiting thread lends itself to the device (an inline
            // device runs its timers and received frames).
            cq.context().hal().relax();
        }
    }
    out
}

/// Polls exactly one completion.
pub fn poll_one(cq: &ECq) -> WorkCompletion {
    poll_n(cq, 1)[0]
}

/// Takes every completion `cq` holds once the device has settled.
pub fn drain(ctx: &Ctx, cq: &ECq) -> Vec<WorkCompletion> {
    settle(ctx);
    let mut all = Vec::new();
    let mut buf = [WorkCompletion::default(); 16];
    loop {
        let n = cq
            .poll(&mut buf)
            .unwrap_or_else(|e| panic!("CQ {}: poll failed: {e}", cq.cq_num()));
        if n == 0 {
            return all;
        }
        all.extend_from_slice(&buf[..n]);
    }
}

/// Asserts that `cq` holds no completion once the device has settled.
pub fn assert_cq_empty(ctx: &Ctx, cq: &ECq) {
    let extra = drain(ctx, cq);
    assert!(
        extra.is_empty(),
        "CQ {}: expected no completions, got {extra:#?}",
        cq.cq_num()
    );
}

/// Asserts a successful completion of `wr_id` with `opcode`.
#[track_caller]
pub fn assert_ok(wc: &WorkCompletion, wr_id: u64, opcode: WcOpcode) {
    assert_eq!(
        (wc.status, wc.wr_id, wc.opcode),
        (WcStatus::Success, wr_id, opcode),
        "completion {wc:#?}"
    );
    assert_eq!(
        (wc.vendor_err, wc.pkey_index, wc.slid),
        (0, 0, 0),
        "successful completion {wc:#?}"
    );
}

/// Asserts an error completion of `wr_id` with `status` and syndrome
/// (`vendor_err`); error completions name no source QP.
#[track_caller]
pub fn assert_err(wc: &WorkCompletion, wr_id: u64, status: WcStatus, syndrome: Syndrome) {
    assert_eq!(
        (wc.wr_id, wc.status, rnic_driver::syndrome(wc), wc.src_qp),
        (wr_id, status, Some(syndrome), 0),
        "completion {wc:#?}"
    );
}

/// Asserts that `wcs` are flush completions (`WR_FLUSH_ERR`) of exactly
/// `wr_ids`, in that order.
#[track_caller]
pub fn assert_flushed(wcs: &[WorkCompletion], wr_ids: &[u64]) {
    let got: Vec<u64> = wcs.iter().map(|w| w.wr_id).collect();
    assert_eq!(got, wr_ids, "flushed wr_ids; completions {wcs:#?}");
    for w in wcs {
        assert_err(w, w.wr_id, WcStatus::WrFlushErr, Syndrome::Flushed);
    }
}

/// Waits for the next event (at most [`TIMEOUT`]), failing the test if
/// there is none.
pub fn expect_event(ctx: &Ctx) -> AsyncEvent {
    ctx.wait_event(TIMEOUT.as_nanos() as u64)
        .expect("wait_event")
        .unwrap_or_else(|| panic!("no event within {TIMEOUT:?}"))
}

/// Asserts that no event is pending once the device has settled.
pub fn assert_no_event(ctx: &Ctx) {
    settle(ctx);
    if let Some(ev) = ctx.poll_event() {
        panic!("expected no event, got {ev:?}");
    }
}

/// A signaled send work request of operation `op` with gather/scatter list
/// `sgl`.
pub fn wr<'a>(wr_id: u64, op: SendOp, sgl: &'a [Sge]) -> SendWr<'a> {
    SendWr {
        wr_id,
        op,
        payload: Payload::Sgl(sgl),
        flags: send_flags::SIGNALED,
    }
}

/// A signaled SEND of `sgl`.
pub fn send(wr_id: u64, sgl: &[Sge]) -> SendWr<'_> {
    wr(wr_id, SendOp::Send, sgl)
}

/// A signaled RDMA WRITE of `sgl` to `remote`.
pub fn write(wr_id: u64, sgl: &[Sge], addr: u64, rkey: u32) -> SendWr<'_> {
    wr(
        wr_id,
        SendOp::RdmaWrite {
            remote: RemoteAddr { addr, rkey },
        },
        sgl,
    )
}

/// A signaled RDMA READ from `remote` into `sgl`.
pub fn read(wr_id: u64, sgl: &[Sge], addr: u64, rkey: u32) -> SendWr<'_> {
    wr(
        wr_id,
        SendOp::RdmaRead {
            remote: RemoteAddr { addr, rkey },
        },
        sgl,
    )
}

/// A receive work request.
pub fn recv(wr_id: u64, sgl: &[Sge]) -> RecvWr<'_> {
    RecvWr {
        wr_id,
        sg_list: sgl,
    }
}

/// An SGE of `mr` (bytes `off .. off + len`).
pub fn sge(mr: &EMr, off: usize, len: u32) -> Sge {
    mr.sge(off, len)
        .unwrap_or_else(|e| panic!("sge({off}, {len}): {e}"))
}

/// Posts one send request, panicking on refusal.
pub fn post_send(qp: &EQp, w: SendWr<'_>) {
    qp.post_send(&[w])
        .unwrap_or_else(|e| panic!("QP {}: post_send: {e}", qp.qp_num()));
}

/// Posts one receive request, panicking on refusal.
pub fn post_recv(qp: &EQp, w: RecvWr<'_>) {
    qp.post_recv(&[w])
        .unwrap_or_else(|e| panic!("QP {}: post_recv: {e}", qp.qp_num()));
}

/// xorshift64*: a small seeded generator, so that a failing run repeats.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// A number in `lo..=hi`.
    pub fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + self.below(hi - lo + 1)
    }

    /// True `percent` times in a hundred.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
}

/// `len` deterministic pseudo-random bytes that depend on `seed`, for
/// payloads whose placement a test checks byte for byte.
pub fn pattern(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// Reads `len` bytes of `mr` at `off`.
pub fn read_mr(mr: &EMr, off: usize, len: usize) -> Vec<u8> {
    let mut v = vec![0; len];
    mr.read(off, &mut v)
        .unwrap_or_else(|e| panic!("Mr::read({off}, {len}): {e}"));
    v
}

/// Writes `data` into `mr` at `off`.
pub fn write_mr(mr: &EMr, off: usize, data: &[u8]) {
    mr.write(off, data)
        .unwrap_or_else(|e| panic!("Mr::write({off}, {}): {e}", data.len()));
}

/// Fills all of `mr` with `byte`.
pub fn fill_mr(mr: &EMr, byte: u8) {
    write_mr(mr, 0, &vec![byte; mr.len()]);
}

/// Reads the little-endian `u64` at `off` of `mr` (atomic targets and
/// results).
pub fn read_u64(mr: &EMr, off: usize) -> u64 {
    let mut b = [0; 8];
    mr.read(off, &mut b).expect("Mr::read");
    u64::from_le_bytes(b)
}

/// Writes `v` as a little-endian `u64` at `off` of `mr`.
pub fn write_u64(mr: &EMr, off: usize, v: u64) {
    write_mr(mr, off, &v.to_le_bytes());
}

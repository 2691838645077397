//! A minimal test driver: issues commands and builds WQEs by hand with the
//! hw-regs layouts, reaching the device only through `EmuHal`.

#![allow(dead_code)]

use std::sync::Arc;

use rnic_emu::{EmuConfig, EmuDevice, EmuHal, ExecMode, VirtualClock};
use rnic_hw_regs::bar0::{self, CmdqCtrl, Ctrl, EqCtrl, Status};
use rnic_hw_regs::cmd::*;
use rnic_hw_regs::cqe::{Cqe, CQE_OWNER_OFFSET, CQE_SIZE};
use rnic_hw_regs::eqe::{Eqe, EQE_OWNER_OFFSET, EQE_SIZE};
use rnic_hw_regs::uar::{self, CqArmCmd, CqDoorbell, RqDoorbell, SqDoorbell};
use rnic_hw_regs::wqe::*;
use rnic_hw_regs::{le16, le32, le64};
use rnic_queues::owner_bit;
use rnic_queues::{DmaRegion, Hal, Pod};
use rnic_verbs::{access, qp_attr, Mtu, QpState, QpType, WrOpcode};

/// How long any wait may take before the test fails.
const TIMEOUT_NS: u64 = 5_000_000_000;

/// Views a plain-data value as bytes.
pub fn bytes_of<T: Pod>(v: &T) -> &[u8] {
    // SAFETY: `T: Pod` has no padding, so every byte of the value is
    // initialised; the slice covers exactly the value.
    unsafe { std::slice::from_raw_parts((v as *const T).cast::<u8>(), size_of::<T>()) }
}

/// Reads a plain-data value from the start of `b`.
pub fn from_bytes<T: Pod>(b: &[u8]) -> T {
    assert!(b.len() >= size_of::<T>());
    // SAFETY: in bounds (checked); `T: Pod` is valid for any bit pattern.
    unsafe { b.as_ptr().cast::<T>().read_unaligned() }
}

/// A finished command.
#[derive(Clone, Copy)]
pub struct CmdOut {
    pub status: u8,
    pub syndrome: u32,
    pub out: [u8; CMD_OUT_SIZE],
}

impl CmdOut {
    pub fn status(&self) -> CmdStatus {
        CmdStatus::from_raw(self.status).expect("unknown status")
    }

    /// Asserts success and decodes the output.
    pub fn ok<T: Pod>(&self) -> T {
        assert_eq!(self.status(), CmdStatus::Ok, "syndrome {}", self.syndrome);
        from_bytes(&self.out)
    }

    /// Asserts a failure with `status` blaming the input field at `off`.
    pub fn fails(&self, status: CmdStatus, off: usize) {
        assert_eq!(self.status(), status, "syndrome {}", self.syndrome);
        assert_eq!(self.syndrome, off as u32 + 1, "syndrome for {status:?}");
    }
}

/// An enabled device with a command queue and EQ 0, on a loopback wire
/// and a virtual clock: transport timers fire only when a test advances
/// the clock.
pub struct Tdev {
    pub dev: Arc<EmuDevice>,
    pub hal: EmuHal,
    pub clock: VirtualClock,
    cmdq: DmaRegion,
    cmd_pi: u32,
    pub eq: DmaRegion,
    eq_ci: u32,
    token: u8,
}

pub const CMDQ_LOG: u32 = 4;
/// The responders' `min_rnr_timer` code: 0.64 ms.
pub const RNR_TIMER: u8 = 12;
/// A little more than the wait of [`RNR_TIMER`].
pub const RNR_WAIT: std::time::Duration = std::time::Duration::from_micros(700);
/// The requesters' `timeout` code: 4.096 µs × 2^14 = 67.1 ms.
pub const ACK_TIMEOUT: u8 = 14;
/// A little more than the local ACK timeout of [`ACK_TIMEOUT`].
pub const ACK_WAIT: std::time::Duration = std::time::Duration::from_millis(68);
pub const EQ_LOG: u32 = 6;

/// Brings a device to STATUS.enabled the way a driver does.
pub fn bring_up(mode: ExecMode) -> Tdev {
    bring_up_with(EmuConfig::default(), mode)
}

pub fn wait_until(hal: &EmuHal, what: &str, mut f: impl FnMut() -> bool) {
    let start = hal.now_ns();
    while !f() {
        assert!(
            hal.now_ns() - start < TIMEOUT_NS,
            "timed out waiting for {what}"
        );
        hal.relax();
    }
}

pub fn status(hal: &EmuHal) -> Status {
    Status::from_bits(le32::from_ne(hal.mmio_read32(0, bar0::STATUS)))
}

pub fn reset(hal: &EmuHal) {
    hal.mmio_write32(
        0,
        bar0::CTRL,
        Ctrl::new().with_reset(true).into_bits().to_ne(),
    );
    wait_until(hal, "reset", || status(hal).ready());
}

pub fn write64(hal: &EmuHal, lo: usize, v: u64) {
    hal.mmio_write32(0, lo, v as u32);
    hal.mmio_write32(0, lo + 4, (v >> 32) as u32);
}

pub fn bring_up_with(cfg: EmuConfig, mode: ExecMode) -> Tdev {
    let clock = VirtualClock::new();
    let dev = EmuDevice::builder(cfg)
        .mode(mode)
        .clock(clock.clock())
        .build()
        .expect("device");
    let hal = dev.hal();
    reset(&hal);
    assert_eq!(hal.mmio_read32(0, bar0::ID), bar0::MAGIC);
    let cmdq = hal.dma_alloc(CMD_ENTRY_SIZE << CMDQ_LOG).unwrap();
    write64(&hal, bar0::CMDQ_BASE_LO, cmdq.iova());
    hal.mmio_write32(
        0,
        bar0::CMDQ_CTRL,
        CmdqCtrl::new()
            .with_log_size(CMDQ_LOG as u8)
            .into_bits()
            .to_ne(),
    );
    let eq = hal.dma_alloc(EQE_SIZE << EQ_LOG).unwrap();
    write64(&hal, bar0::EQ_BASE_LO, eq.iova());
    let eq_ctrl = EqCtrl::new().with_log_size(EQ_LOG as u8).with_enable(true);
    hal.mmio_write32(0, bar0::EQ_CTRL, eq_ctrl.into_bits().to_ne());
    hal.mmio_write32(
        0,
        bar0::CTRL,
        Ctrl::new().with_enable(true).into_bits().to_ne(),
    );
    wait_until(&hal, "enable", || status(&hal).enabled());
    Tdev {
        dev,
        hal,
        clock,
        cmdq,
        cmd_pi: 0,
        eq,
        eq_ci: 0,
        token: 0,
    }
}

/// A CQ and its memory.
pub struct TCq {
    pub cqn: u32,
    pub log: u32,
    pub buf: DmaRegion,
    pub dbrec: DmaRegion,
    pub ci: u32,
}

/// A QP and its memory.
pub struct TQp {
    pub qpn: u32,
    pub log_sq: u32,
    pub log_rq: u32,
    pub log_stride: u32,
    pub sq: DmaRegion,
    pub rq: DmaRegion,
    pub dbrec: DmaRegion,
    pub sq_pi: u32,
    pub rq_pi: u32,
    pub page: u32,
}

/// A registered buffer.
pub struct TMr {
    pub region: DmaRegion,
    pub key: u32,
}

impl TMr {
    pub fn addr(&self, off: usize) -> u64 {
        // MRs are registered with va == IOVA: the test driver has no other
        // address space.
        self.region.iova() + off as u64
    }
}

impl Tdev {
    /// Issues a command and waits for it.
    pub fn raw_cmd(&mut self, opcode: u16, input: &[u8]) -> CmdOut {
        self.raw_cmd_as(0, opcode, input)
    }

    /// Issues a command of user context `uid` and waits for it.
    pub fn raw_cmd_as(&mut self, uid: u32, opcode: u16, input: &[u8]) -> CmdOut {
        let off = (self.cmd_pi as usize & ((1 << CMDQ_LOG) - 1)) * CMD_ENTRY_SIZE;
        self.token = self.token.wrapping_add(1);
        let hdr = CmdHeader {
            opcode: le16::from_ne(opcode),
            token: self.token,
            uid: le32::from_ne(uid),
            ..CmdHeader::default()
        };
        self.cmdq.write_bytes(off, &[0; CMD_ENTRY_SIZE]);
        self.cmdq.write_bytes(off, bytes_of(&hdr));
        self.cmdq.write_bytes(off + CMD_IN_OFFSET, input);
        // Release: the input must be visible before the owner byte.
        self.cmdq
            .store_u8_release(off + CMD_OWNER_OFFSET, OWNER_DEVICE);
        self.cmd_pi = self.cmd_pi.wrapping_add(1);
        self.hal.mmio_write32(0, bar0::CMDQ_DB, self.cmd_pi);
        let (hal, q) = (&self.hal, &self.cmdq);
        // Acquire: status and output were written before the owner byte.
        wait_until(hal, "command", || {
            q.load_u8_acquire(off + CMD_OWNER_OFFSET) == 0
        });
        let hdr: CmdHeader = self.cmdq.read(off);
        assert_eq!(hdr.token, self.token, "token echoed");
        let mut out = [0u8; CMD_OUT_SIZE];
        self.cmdq.read_bytes(off + CMD_OUT_OFFSET, &mut out);
        CmdOut {
            status: hdr.status,
            syndrome: hdr.syndrome.to_ne(),
            out,
        }
    }

    pub fn cmd<I: Pod>(&mut self, op: CmdOpcode, input: &I) -> CmdOut {
        self.raw_cmd(op.raw(), bytes_of(input))
    }

    /// A command of user context `uid`.
    pub fn cmd_as<I: Pod>(&mut self, uid: u32, op: CmdOpcode, input: &I) -> CmdOut {
        self.raw_cmd_as(uid, op.raw(), bytes_of(input))
    }

    /// Waits until every doorbell written before is processed (commands and
    /// doorbells run in order).
    /// Moves the device clock forward by `d` and waits until the device
    /// has run what fell due and what that sent has been answered. A
    /// device thread may complete the first command in the very step that
    /// runs the timers; the second completes only once the frames they
    /// sent are handled (it runs when the device has nothing else to do).
    pub fn advance(&mut self, d: std::time::Duration) {
        self.clock.advance(d);
        self.sync();
        self.sync();
    }

    pub fn sync(&mut self) {
        self.cmd(CmdOpcode::QueryDevice, &0u32)
            .ok::<QueryDeviceOut>();
    }

    pub fn obj(&mut self, op: CmdOpcode, id: u32) -> CmdOut {
        self.cmd(
            op,
            &ObjIn {
                id: le32::from_ne(id),
            },
        )
    }

    pub fn create_pd(&mut self) -> u32 {
        self.cmd(CmdOpcode::CreatePd, &0u32)
            .ok::<CreatePdOut>()
            .pdn
            .to_ne()
    }

    pub fn reg_mr_in(&self, pdn: u32, region: &DmaRegion, access: u32) -> RegMrIn {
        RegMrIn {
            pdn: le32::from_ne(pdn),
            access: le32::from_ne(access),
            va: le64::from_ne(region.iova()),
            length: le64::from_ne(region.len() as u64),
            iova: le64::from_ne(region.iova()),
        }
    }

    pub fn reg_mr(&mut self, pdn: u32, len: usize, access: u32) -> TMr {
        let region = self.hal.dma_alloc(len).unwrap();
        let i = self.reg_mr_in(pdn, &region, access);
        let o: RegMrOut = self.cmd(CmdOpcode::RegMr, &i).ok();
        assert_eq!(o.lkey, o.rkey);
        TMr {
            region,
            key: o.lkey.to_ne(),
        }
    }

    pub fn create_cq(&mut self, log: u32) -> TCq {
        let buf = self.hal.dma_alloc(CQE_SIZE << log).unwrap();
        let dbrec = self.hal.dma_alloc(8).unwrap();
        let i = CreateCqIn {
            log_size: le32::from_ne(log),
            uar_page: le32::from_ne(0),
            eqn: le32::from_ne(0),
            reserved: le32::from_ne(0),
            buf_iova: le64::from_ne(buf.iova()),
            dbrec_iova: le64::from_ne(dbrec.iova()),
        };
        let cqn = self
            .cmd(CmdOpcode::CreateCq, &i)
            .ok::<CreateCqOut>()
            .cqn
            .to_ne();
        TCq {
            cqn,
            log,
            buf,
            dbrec,
            ci: 0,
        }
    }

    /// CREATE_QP input for buffers `qp` (other fields default).
    pub fn create_qp_in(pdn: u32, scq: u32, rcq: u32, qp: &TQp) -> CreateQpIn {
        CreateQpIn {
            qp_type: QpType::Rc.raw(),
            sq_sig_all: 0,
            log_rq_stride: qp.log_stride as u8,
            reserved0: 0,
            pdn: le32::from_ne(pdn),
            send_cqn: le32::from_ne(scq),
            recv_cqn: le32::from_ne(rcq),
            srqn: le32::from_ne(NONE),
            log_sq_bbs: le32::from_ne(qp.log_sq),
            log_rq_wqes: le32::from_ne(qp.log_rq),
            max_inline: le32::from_ne(64),
            uar_page: le32::from_ne(qp.page),
            reserved1: le32::from_ne(0),
            sq_iova: le64::from_ne(qp.sq.iova()),
            rq_iova: le64::from_ne(qp.rq.iova()),
            dbrec_iova: le64::from_ne(qp.dbrec.iova()),
        }
    }

    /// Allocates QP memory (not created yet: `qpn` is 0).
    pub fn qp_mem(&self, log_sq: u32, log_rq: u32, log_stride: u32) -> TQp {
        TQp {
            qpn: 0,
            log_sq,
            log_rq,
            log_stride,
            sq: self.hal.dma_alloc(SEND_WQE_BB << log_sq).unwrap(),
            rq: self.hal.dma_alloc(1 << (log_rq + log_stride)).unwrap(),
            dbrec: self.hal.dma_alloc(8).unwrap(),
            sq_pi: 0,
            rq_pi: 0,
            page: 1,
        }
    }

    pub fn create_qp(&mut self, pdn: u32, scq: &TCq, rcq: &TCq) -> TQp {
        let mut qp = self.qp_mem(6, 6, 6);
        let i = Self::create_qp_in(pdn, scq.cqn, rcq.cqn, &qp);
        qp.qpn = self
            .cmd(CmdOpcode::CreateQp, &i)
            .ok::<CreateQpOut>()
            .qpn
            .to_ne();
        qp
    }

    pub fn modify(&mut self, qpn: u32, mask: u32, attrs: QpAttrs) -> CmdOut {
        let i = ModifyQpIn {
            qpn: le32::from_ne(qpn),
            attr_mask: le32::from_ne(mask),
            attrs,
        };
        self.cmd(CmdOpcode::ModifyQp, &i)
    }

    pub fn modify_init(&mut self, qpn: u32, access: u32) -> CmdOut {
        let a = QpAttrs {
            qp_state: QpState::Init.raw(),
            port_num: 1,
            qp_access_flags: le32::from_ne(access),
            ..QpAttrs::default()
        };
        self.modify(
            qpn,
            qp_attr::STATE | qp_attr::PKEY_INDEX | qp_attr::PORT | qp_attr::ACCESS_FLAGS,
            a,
        )
    }

    /// INIT -> RTR, connected to QP `dest` of the same device (its GID 0:
    /// the frames loop back through the device's wire).
    pub fn modify_rtr(&mut self, qpn: u32, dest: u32) -> CmdOut {
        let a = QpAttrs {
            qp_state: QpState::Rtr.raw(),
            path_mtu: Mtu::Mtu1024.raw(),
            dest_qp_num: le32::from_ne(dest),
            max_dest_rd_atomic: 4,
            min_rnr_timer: RNR_TIMER,
            ah: AddressVector {
                dgid: self.hal.device().config().ipv4_gid(),
                is_global: 1,
                port_num: 1,
                hop_limit: 64,
                ..AddressVector::default()
            },
            ..QpAttrs::default()
        };
        use qp_attr::*;
        self.modify(
            qpn,
            STATE | AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER,
            a,
        )
    }

    pub fn modify_rts(&mut self, qpn: u32, rnr_retry: u8) -> CmdOut {
        let a = QpAttrs {
            qp_state: QpState::Rts.raw(),
            timeout: ACK_TIMEOUT,
            retry_cnt: 7,
            rnr_retry,
            max_rd_atomic: 4,
            ..QpAttrs::default()
        };
        use qp_attr::*;
        self.modify(
            qpn,
            STATE | SQ_PSN | TIMEOUT | RETRY_CNT | RNR_RETRY | MAX_QP_RD_ATOMIC,
            a,
        )
    }

    pub fn modify_state(&mut self, qpn: u32, s: QpState) -> CmdOut {
        let a = QpAttrs {
            qp_state: s.raw(),
            ..QpAttrs::default()
        };
        self.modify(qpn, qp_attr::STATE, a)
    }

    /// Connects `qp` to `dest` all the way to RTS.
    pub fn connect(&mut self, qpn: u32, dest: u32, rnr_retry: u8) {
        let all = access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;
        self.modify_init(qpn, all).ok::<u32>();
        self.modify_rtr(qpn, dest).ok::<u32>();
        self.modify_rts(qpn, rnr_retry).ok::<u32>();
    }

    /// QP `qpn`'s counters (QUERY_COUNTERS), by `counters::counter` index.
    pub fn counters_qp(&mut self, qpn: u32) -> Vec<u64> {
        self.counters(rnic_hw_regs::counters::scope::QP, qpn)
    }

    /// Port 1's counters.
    pub fn counters_port(&mut self) -> Vec<u64> {
        self.counters(rnic_hw_regs::counters::scope::PORT, 1)
    }

    fn counters(&mut self, scope: u32, id: u32) -> Vec<u64> {
        use rnic_hw_regs::counters::{CountersOut, QueryCountersIn};
        let mut all = Vec::new();
        for first in [0, 32] {
            let i = QueryCountersIn {
                scope: le32::from_ne(scope),
                id: le32::from_ne(id),
                first: le32::from_ne(first),
            };
            let o: CountersOut = self.cmd(CmdOpcode::QueryCounters, &i).ok();
            all.extend(o.values.iter().map(|v| v.to_ne()));
        }
        all
    }

    pub fn query_qp(&mut self, qpn: u32) -> QpAttrs {
        self.obj(CmdOpcode::QueryQp, qpn).ok()
    }

    /// The next EQE, if any.
    pub fn poll_eq(&mut self) -> Option<Eqe> {
        let off = (self.eq_ci as usize & ((1 << EQ_LOG) - 1)) * EQE_SIZE;
        // Acquire: the body was written before the owner word.
        let owner = self.eq.load_u32_acquire(off + EQE_OWNER_OFFSET) & 1 == 1;
        if owner != owner_bit(self.eq_ci, EQ_LOG) {
            return None;
        }
        let e: Eqe = self.eq.read(off);
        self.eq_ci += 1;
        self.hal.mmio_write32(0, bar0::EQ_DB, self.eq_ci);
        Some(e)
    }

    /// Every pending event as (type, obj, syndrome).
    pub fn events(&mut self) -> Vec<(u8, u32, u32)> {
        self.sync();
        std::iter::from_fn(|| self.poll_eq())
            .map(|e| (e.word.event_type(), e.obj.to_ne(), e.syndrome.to_ne()))
            .collect()
    }
}

impl TCq {
    pub fn poll(&mut self) -> Option<Cqe> {
        let off = (self.ci as usize & ((1 << self.log) - 1)) * CQE_SIZE;
        // Acquire: the body was written before the owner word.
        let owner = self.buf.load_u32_acquire(off + CQE_OWNER_OFFSET) & 1 == 1;
        if owner != owner_bit(self.ci, self.log) {
            return None;
        }
        let c: Cqe = self.buf.read(off);
        self.ci += 1;
        // Release: done reading the entry before handing the slot back.
        self.dbrec.store_u32_release(0, self.ci);
        Some(c)
    }

    pub fn wait(&mut self, hal: &EmuHal) -> Cqe {
        let mut got = None;
        wait_until(hal, "a CQE", || {
            got = self.poll();
            got.is_some()
        });
        got.unwrap()
    }

    pub fn arm(&self, hal: &EmuHal, cmd: CqArmCmd) {
        let db = CqDoorbell::new()
            .with_cqn(self.cqn)
            .with_cmd(cmd as u8)
            .with_ci(self.ci);
        hal.mmio_write64(2, uar::CQ_DB, db.into_bits());
    }
}

/// A send WQE under construction.
pub struct Wqe {
    pub ctrl: CtrlSeg,
    pub segs: Vec<u8>,
}

impl Wqe {
    pub fn new(op: WrOpcode, wr_id: u64) -> Self {
        let ctrl = CtrlSeg {
            word: CtrlWord::new().with_opcode(op.raw()).with_signaled(true),
            imm: [0; 4],
            wr_id: le64::from_ne(wr_id),
        };
        Self {
            ctrl,
            segs: Vec::new(),
        }
    }

    pub fn unsignaled(mut self) -> Self {
        self.ctrl.word.set_signaled(false);
        self
    }

    pub fn imm(mut self, imm: [u8; 4]) -> Self {
        self.ctrl.imm = imm;
        self
    }

    pub fn raddr(mut self, raddr: u64, rkey: u32) -> Self {
        let r = RaddrSeg {
            raddr: le64::from_ne(raddr),
            rkey: le32::from_ne(rkey),
            reserved: le32::from_ne(0),
        };
        self.segs.extend_from_slice(bytes_of(&r));
        self
    }

    pub fn atomic(mut self, swap_add: u64, compare: u64) -> Self {
        let a = AtomicSeg {
            swap_add: le64::from_ne(swap_add),
            compare: le64::from_ne(compare),
        };
        self.segs.extend_from_slice(bytes_of(&a));
        self
    }

    pub fn sge(mut self, lkey: u32, addr: u64, len: u32) -> Self {
        self.segs
            .extend_from_slice(bytes_of(&dseg(lkey, addr, len)));
        self
    }

    pub fn inline(mut self, data: &[u8]) -> Self {
        self.ctrl.word.set_inline(true);
        let hdr = (INLINE_MARK | data.len() as u32).to_le_bytes();
        self.segs.extend_from_slice(&hdr);
        self.segs.extend_from_slice(data);
        while self.segs.len() % SEG_SIZE != 0 {
            self.segs.push(0);
        }
        self
    }
}

pub fn dseg(lkey: u32, addr: u64, len: u32) -> DataSeg {
    DataSeg {
        byte_count: le32::from_ne(len),
        lkey: le32::from_ne(lkey),
        addr: le64::from_ne(addr),
    }
}

impl TQp {
    /// Writes `bytes` at BB `bb` of the send queue, wrapping.
    fn write_sq(&self, bb: u32, bytes: &[u8]) {
        let total = SEND_WQE_BB << self.log_sq;
        let start = (bb as usize & ((1 << self.log_sq) - 1)) * SEND_WQE_BB;
        for (i, b) in bytes.iter().enumerate() {
            self.sq.write::<u8>((start + i) % total, *b);
        }
    }

    /// Writes a WQE without ringing (fills ds and wqe_index).
    pub fn write_wqe(&mut self, w: &Wqe) {
        let mut ctrl = w.ctrl;
        let ds = 1 + w.segs.len() / SEG_SIZE;
        ctrl.word.set_ds(ds as u8);
        ctrl.word.set_wqe_index(self.sq_pi as u8);
        let mut bytes = bytes_of(&ctrl).to_vec();
        bytes.extend_from_slice(&w.segs);
        self.write_sq(self.sq_pi, &bytes);
        self.sq_pi += wqe_bbs(ds) as u32;
    }

    /// Writes raw WQE bytes occupying `bbs` BBs without ringing.
    pub fn write_raw(&mut self, bytes: &[u8], bbs: u32) {
        self.write_sq(self.sq_pi, bytes);
        self.sq_pi += bbs;
    }

    /// Publishes the send producer index and rings the SQ doorbell.
    pub fn ring_sq(&self, hal: &EmuHal) {
        // Release: WQEs before the doorbell record.
        self.dbrec.store_u32_release(uar::QP_DBREC_SQ, self.sq_pi);
        let db = SqDoorbell::new()
            .with_qpn(self.qpn)
            .with_pi(self.sq_pi as u16);
        hal.mmio_write64(
            2,
            self.page as usize * uar::UAR_PAGE_SIZE + uar::SQ_DB,
            db.into_bits(),
        );
    }

    pub fn post_send(&mut self, hal: &EmuHal, w: &Wqe) {
        self.write_wqe(w);
        self.ring_sq(hal);
    }

    /// Writes a receive WQE without ringing.
    pub fn write_recv(&mut self, wr_id: u64, sges: &[DataSeg]) {
        let stride = 1usize << self.log_stride;
        let off = (self.rq_pi as usize & ((1 << self.log_rq) - 1)) * stride;
        let hdr = RecvWqeHdr {
            wr_id: le64::from_ne(wr_id),
            sge_count: le32::from_ne(sges.len() as u32),
            next: le32::from_ne(0),
        };
        self.rq.write(off, hdr);
        for (i, s) in sges.iter().enumerate() {
            self.rq.write(off + SEG_SIZE * (i + 1), *s);
        }
        self.rq_pi += 1;
    }

    pub fn ring_rq(&self, hal: &EmuHal) {
        // Release: WQEs before the doorbell record.
        self.dbrec.store_u32_release(uar::QP_DBREC_RQ, self.rq_pi);
        let db = RqDoorbell::new()
            .with_qpn(self.qpn)
            .with_pi(self.rq_pi as u16);
        hal.mmio_write64(
            2,
            self.page as usize * uar::UAR_PAGE_SIZE + uar::RQ_DB,
            db.into_bits(),
        );
    }

    pub fn post_recv(&mut self, hal: &EmuHal, wr_id: u64, sges: &[DataSeg]) {
        self.write_recv(wr_id, sges);
        self.ring_rq(hal);
    }
}

/// Generates one test per execution mode from `fn name(mode: ExecMode)`.
#[macro_export]
macro_rules! both_modes {
    ($($name:ident),+ $(,)?) => {
        mod inline {
            $(#[test] fn $name() { super::$name(rnic_emu::ExecMode::Inline) })+
        }
        mod thread {
            $(#[test] fn $name() { super::$name(rnic_emu::ExecMode::Thread) })+
        }
    };
}

//! One RDMA WRITE with no driver and no verbs: everything built by hand
//! with hw-regs' layouts in DMA memory, straight through the platform
//! (`Hal`) of an emulated device.
//!
//! ```text
//! cargo run --example doorbell
//! ```
//!
//! It resets and enables the device with a command queue, issues the
//! commands that make a user context, a PD, an MR, a CQ and a QP
//! connected to itself, writes one RDMA WRITE WQE into the send queue,
//! publishes it in the doorbell record, rings the doorbell, and polls the
//! CQE by its owner bit. Each step is printed with the spec section that
//! defines it; rnic-middleware's `TraceHal` prints, beneath, what crossed
//! the boundary (`|` lines). It checks that the bytes arrived and the CQE
//! says so, and exits 1 if not.

use std::process::ExitCode;
use std::sync::atomic::{fence, Ordering};
use std::sync::Arc;

use rnic_emu::{EmuConfig, EmuDevice, ExecMode};
use rnic_hw_regs::bar0::{self, CmdqCtrl, Ctrl, Status};
use rnic_hw_regs::cmd::{
    AllocUctxIn, AllocUctxOut, CmdEntry, CmdHeader, CmdOpcode, CmdStatus, CreateCqIn, CreateCqOut,
    CreatePdOut, CreateQpIn, CreateQpOut, ModifyQpIn, QpAttrs, RegMrIn, RegMrOut, CMD_OWNER_OFFSET,
    NONE, OWNER_DEVICE,
};
use rnic_hw_regs::cqe::Cqe;
use rnic_hw_regs::pci::{BAR_DOORBELL, BAR_REGS};
use rnic_hw_regs::uar::{WqDoorbell, QP_DBREC_SQ, SQ_DB, UAR_PAGE_SIZE};
use rnic_hw_regs::wqe::{CtrlSeg, CtrlWord, DataSeg, RaddrSeg, SEG_SIZE};
use rnic_hw_regs::{le16, le32, le64};
use rnic_middleware::{Event, Sink, Timeline, TraceHal};
use rnic_queues::owner_bit;
use rnic_queues::{DmaRegion, Hal, Pod};
use rnic_verbs::{access, qp_attr, Mtu, QpState, QpType, WcOpcode, WcStatus, WrOpcode};

type Res<T> = Result<T, String>;

/// Prints each event as it is recorded, beneath the step that caused it.
struct Print;

impl Sink for Print {
    fn record(&self, e: &Event) {
        println!("      | {}", e.text);
    }
}

/// The platform and the command queue the example drives.
struct Dev<H: Hal> {
    hal: H,
    cmdq: DmaRegion,
    pi: u32,
    uid: u32,
}

/// Log2 of the command queue's entries.
const CMDQ_LOG: u32 = 2;

fn step(title: &str, spec: &str) {
    println!("\n{title}  [spec {spec}]");
}

impl<H: Hal> Dev<H> {
    /// Waits until `done` holds, polling through the platform (an inline
    /// device runs when the waiting thread calls it).
    fn wait(&self, what: &str, done: impl Fn() -> bool) -> Res<()> {
        for _ in 0..1_000_000 {
            if done() {
                return Ok(());
            }
            self.hal.relax();
        }
        Err(format!("timed out waiting for {what}"))
    }

    /// Runs command `op` with `input`: the entry written, its owner byte
    /// handed to the device last, the doorbell, then the wait for the
    /// device to hand it back (spec 6.1, 6.2).
    fn exec<I: Pod, O: Pod + Default>(&mut self, op: CmdOpcode, input: I) -> Res<O> {
        let size = std::mem::size_of::<CmdEntry>();
        let base = (self.pi as usize % (1 << CMDQ_LOG)) * size;
        self.cmdq.write_bytes(base, &vec![0u8; size]);
        let hdr = CmdHeader {
            opcode: le16::from_ne(op.raw()),
            op_mod: le16::from_ne(0),
            status: 0,
            token: self.pi as u8,
            reserved0: 0,
            owner: 0,
            syndrome: le32::from_ne(0),
            uid: le32::from_ne(self.uid),
        };
        self.cmdq.write(base, hdr);
        self.cmdq
            .write(base + std::mem::size_of::<CmdHeader>(), input);
        // Release: the entry is complete before the device may read it.
        self.cmdq
            .store_u8_release(base + CMD_OWNER_OFFSET, OWNER_DEVICE);
        self.pi += 1;
        self.hal.mmio_write32(BAR_REGS, bar0::CMDQ_DB, self.pi);
        // Acquire: the output is read only after the owner byte says done.
        self.wait("a command", || {
            self.cmdq.load_u8_acquire(base + CMD_OWNER_OFFSET) != OWNER_DEVICE
        })?;
        let hdr: CmdHeader = self.cmdq.read(base);
        if hdr.status != CmdStatus::Ok.raw() {
            return Err(format!(
                "{op:?} failed: {:?}",
                CmdStatus::from_raw(hdr.status)
            ));
        }
        let out_at = std::mem::size_of::<CmdHeader>() + rnic_hw_regs::cmd::CMD_IN_SIZE;
        Ok(self.cmdq.read(base + out_at))
    }
}

fn main() -> ExitCode {
    env_logger::init();
    match run() {
        Ok(()) => {
            println!("\ndoorbell: the bytes arrived and the CQE says so");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("\ndoorbell: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run() -> Res<()> {
    let cfg = EmuConfig::default();
    let (mac, ipv4) = (cfg.mac, cfg.ipv4);
    let nic = EmuDevice::new(cfg, ExecMode::Inline);
    let hal = TraceHal::new(nic.hal(), Timeline::new(vec![Arc::new(Print)]));
    let e = |e: rnic_queues::HalError| e.to_string();

    step(
        "1. The ID register, a reset, then STATUS.ready",
        "3.1, 4.1, 4.2",
    );
    let id = hal.mmio_read32(BAR_REGS, bar0::ID);
    if id != bar0::MAGIC {
        return Err(format!("ID {id:#x} is no rnic"));
    }
    hal.mmio_write32(
        BAR_REGS,
        bar0::CTRL,
        Ctrl::new().with_reset(true).into_bits().to_ne(),
    );
    let status = || Status::from_bits(le32::from_ne(hal.mmio_read32(BAR_REGS, bar0::STATUS)));
    if !(0..1000).any(|_| {
        hal.relax();
        status().ready()
    }) {
        return Err("the device never got ready".into());
    }

    step(
        "2. A command queue: DMA memory, its base and size, then enable",
        "4.2, 6.1",
    );
    let cmdq = hal.dma_alloc(4096).map_err(e)?;
    hal.mmio_write32(BAR_REGS, bar0::CMDQ_BASE_LO, cmdq.iova() as u32);
    hal.mmio_write32(BAR_REGS, bar0::CMDQ_BASE_HI, (cmdq.iova() >> 32) as u32);
    let ctrl = CmdqCtrl::new().with_log_size(CMDQ_LOG as u8);
    hal.mmio_write32(BAR_REGS, bar0::CMDQ_CTRL, ctrl.into_bits().to_ne());
    hal.mmio_write32(
        BAR_REGS,
        bar0::CTRL,
        Ctrl::new().with_enable(true).into_bits().to_ne(),
    );
    if !status().enabled() {
        return Err("the device did not enable".into());
    }
    let mut d = Dev {
        hal,
        cmdq,
        pi: 0,
        uid: 0,
    };

    step(
        "3. ALLOC_UCTX: a user context, and its doorbell page",
        "6.2, 6.5",
    );
    let u: AllocUctxOut = d.exec(
        CmdOpcode::AllocUctx,
        AllocUctxIn {
            uar_pages: le32::from_ne(1),
        },
    )?;
    d.uid = u.uid.to_ne();
    let page = u.uar_first.to_ne();

    step(
        "4. CREATE_PD and REG_MR: a PD, and 4 KiB of DMA memory as an MR",
        "7.5, 7.6",
    );
    let pd: CreatePdOut = d.exec(CmdOpcode::CreatePd, ())?;
    let pdn = pd.pdn.to_ne();
    let buf = d.hal.dma_alloc(4096).map_err(e)?;
    let mr: RegMrOut = d.exec(
        CmdOpcode::RegMr,
        RegMrIn {
            pdn: le32::from_ne(pdn),
            access: le32::from_ne(access::LOCAL_WRITE | access::REMOTE_WRITE),
            va: le64::from_ne(buf.vaddr().as_ptr() as u64),
            length: le64::from_ne(4096),
            iova: le64::from_ne(buf.iova()),
        },
    )?;
    let (lkey, rkey) = (mr.lkey.to_ne(), mr.rkey.to_ne());

    step("5. CREATE_CQ: 16 CQEs and a doorbell record", "7.7, 11.1");
    const CQ_LOG: u32 = 4;
    let cq_mem = d.hal.dma_alloc(4096).map_err(e)?;
    let dbrec = d.hal.dma_alloc(4096).map_err(e)?;
    let cq: CreateCqOut = d.exec(
        CmdOpcode::CreateCq,
        CreateCqIn {
            log_size: le32::from_ne(CQ_LOG),
            uar_page: le32::from_ne(page),
            eqn: le32::from_ne(0),
            reserved: le32::from_ne(0),
            buf_iova: le64::from_ne(cq_mem.iova()),
            dbrec_iova: le64::from_ne(dbrec.iova()),
        },
    )?;
    let cqn = cq.cqn.to_ne();

    step(
        "6. CREATE_QP: an RC QP, 16 send BBs, 4 receive WQEs",
        "7.8, 9.1, 10",
    );
    let sq = d.hal.dma_alloc(4096).map_err(e)?;
    let rq = d.hal.dma_alloc(4096).map_err(e)?;
    let qp: CreateQpOut = d.exec(
        CmdOpcode::CreateQp,
        CreateQpIn {
            qp_type: QpType::Rc.raw(),
            log_rq_stride: 5,
            pdn: le32::from_ne(pdn),
            send_cqn: le32::from_ne(cqn),
            recv_cqn: le32::from_ne(cqn),
            srqn: le32::from_ne(NONE),
            log_sq_bbs: le32::from_ne(4),
            log_rq_wqes: le32::from_ne(2),
            uar_page: le32::from_ne(page),
            sq_iova: le64::from_ne(sq.iova()),
            rq_iova: le64::from_ne(rq.iova()),
            dbrec_iova: le64::from_ne(dbrec.iova() + 64),
            ..Default::default()
        },
    )?;
    let qpn = qp.qpn.to_ne();

    step(
        "7. MODIFY_QP three times: RESET -> INIT -> RTR -> RTS, to itself",
        "7.9, 12",
    );
    let mut gid = [0u8; 16];
    gid[10] = 0xff;
    gid[11] = 0xff;
    gid[12..].copy_from_slice(&ipv4);
    let mut rtr = QpAttrs {
        qp_state: QpState::Rtr.raw(),
        path_mtu: Mtu::Mtu1024.raw(),
        dest_qp_num: le32::from_ne(qpn),
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        ..Default::default()
    };
    rtr.ah.dgid = gid;
    rtr.ah.dmac = mac;
    rtr.ah.hop_limit = 64;
    rtr.ah.port_num = 1;
    rtr.ah.is_global = 1;
    let steps = [
        (
            QpAttrs {
                qp_state: QpState::Init.raw(),
                port_num: 1,
                qp_access_flags: le32::from_ne(access::REMOTE_WRITE),
                ..Default::default()
            },
            qp_attr::STATE | qp_attr::PKEY_INDEX | qp_attr::PORT | qp_attr::ACCESS_FLAGS,
        ),
        (
            rtr,
            qp_attr::STATE
                | qp_attr::AV
                | qp_attr::PATH_MTU
                | qp_attr::DEST_QPN
                | qp_attr::RQ_PSN
                | qp_attr::MAX_DEST_RD_ATOMIC
                | qp_attr::MIN_RNR_TIMER,
        ),
        (
            QpAttrs {
                qp_state: QpState::Rts.raw(),
                timeout: 14,
                retry_cnt: 7,
                rnr_retry: 7,
                max_rd_atomic: 1,
                ..Default::default()
            },
            qp_attr::STATE
                | qp_attr::SQ_PSN
                | qp_attr::TIMEOUT
                | qp_attr::RETRY_CNT
                | qp_attr::RNR_RETRY
                | qp_attr::MAX_QP_RD_ATOMIC,
        ),
    ];
    for (attrs, mask) in steps {
        let _: () = d.exec(
            CmdOpcode::ModifyQp,
            ModifyQpIn {
                qpn: le32::from_ne(qpn),
                attr_mask: le32::from_ne(mask),
                attrs,
            },
        )?;
    }

    step(
        "8. The WQE, by hand: control, remote address, one data segment",
        "9.2, 9.3",
    );
    let msg = b"written by hand, rung by hand";
    buf.write_bytes(0, msg);
    let word = CtrlWord::new()
        .with_opcode(WrOpcode::RdmaWrite.raw())
        .with_signaled(true)
        .with_ds(3)
        .with_wqe_index(0);
    sq.write(
        0,
        CtrlSeg {
            word,
            imm: [0; 4],
            wr_id: le64::from_ne(42),
        },
    );
    let remote = buf.vaddr().as_ptr() as u64 + 2048;
    sq.write(
        SEG_SIZE,
        RaddrSeg {
            raddr: le64::from_ne(remote),
            rkey: le32::from_ne(rkey),
            reserved: le32::from_ne(0),
        },
    );
    sq.write(
        2 * SEG_SIZE,
        DataSeg {
            byte_count: le32::from_ne(msg.len() as u32),
            lkey: le32::from_ne(lkey),
            addr: le64::from_ne(buf.vaddr().as_ptr() as u64),
        },
    );

    step("9. The doorbell record, then the doorbell", "8.1, 8.2, 15");
    // Release: the WQE's bytes are visible before the record that
    // publishes them.
    fence(Ordering::Release);
    dbrec.store_u32_release(64 + QP_DBREC_SQ, 1);
    println!("      (doorbell record: sq_pi = 1, in DMA memory, which no Hal call shows)");
    let db = WqDoorbell::new().with_qpn(qpn).with_pi(1);
    d.hal.mmio_write64(
        BAR_DOORBELL,
        page as usize * UAR_PAGE_SIZE + SQ_DB,
        db.into_bits(),
    );

    step(
        "10. The CQE: polled by its owner bit, then read",
        "11.1, 11.2, 15",
    );
    d.wait("the CQE", || {
        let c: Cqe = cq_mem.read(0);
        c.owner.owner() == owner_bit(0, CQ_LOG)
    })?;
    // Acquire: the CQE's other fields are read after its owner bit.
    fence(Ordering::Acquire);
    let c: Cqe = cq_mem.read(0);
    let (status, opcode) = (WcStatus::from_raw(c.status), WcOpcode::from_raw(c.opcode));
    println!(
        "      CQE: wr_id {} {opcode:?} {status:?}, wqe_counter {}, qpn {}",
        c.wr_id.to_ne(),
        c.wqe_counter.to_ne(),
        c.qpn.to_ne()
    );
    let mut got = vec![0u8; msg.len()];
    buf.read_bytes(2048, &mut got);
    println!(
        "      at the remote address: {:?}",
        String::from_utf8_lossy(&got)
    );
    if status != Some(WcStatus::Success)
        || opcode != Some(WcOpcode::RdmaWrite)
        || c.wr_id.to_ne() != 42
    {
        return Err(format!(
            "the CQE says {status:?} {opcode:?} for wr_id {}",
            c.wr_id.to_ne()
        ));
    }
    if got != msg {
        return Err("the bytes did not arrive".into());
    }
    Ok(())
}

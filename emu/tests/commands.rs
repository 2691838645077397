//! Device-level tests of bring-up, registers and commands, driven through
//! `EmuHal` like a driver, in both execution modes.

mod common;

use common::*;
use rnic_emu::{EmuConfig, EmuDevice, ExecMode};
use rnic_hw_regs::bar0::{
    self, CmdqCtrl, Ctrl, DevCaps, EqCtrl, FatalSyndrome, QueueCaps, Version,
};
use rnic_hw_regs::cmd::*;
use rnic_hw_regs::cqe::Syndrome;
use rnic_hw_regs::eqe::EventType;
use rnic_hw_regs::uar::{WqDoorbell, SRQ_DB, UAR_PAGE_SIZE};
use rnic_hw_regs::{le32, le64};
use rnic_queues::Hal;
use rnic_verbs::{access, qp_attr, GidType, LinkLayer, PortState, QpState};

use std::mem::offset_of;

both_modes!(
    registers_and_handshake,
    bar0_ordering_and_reserved_bits,
    fatal_on_unmapped_cmdq,
    fatal_on_bad_config,
    query_commands,
    pd_and_mr_commands,
    cq_commands,
    qp_create_rejections,
    qp_modify_rules,
    srq_commands,
    eq_commands,
    uctx_isolation,
    unimplemented_opcodes,
);

fn registers_and_handshake(mode: ExecMode) {
    let dev = EmuDevice::new(EmuConfig::default(), mode);
    let hal = dev.hal();
    assert_eq!(hal.mmio_read32(0, bar0::ID), bar0::MAGIC);
    let v = Version::from_bits(le32::from_ne(hal.mmio_read32(0, bar0::VERSION)));
    assert_eq!(v.major(), bar0::VERSION_MAJOR);
    let caps = DevCaps::from_bits(le32::from_ne(hal.mmio_read32(0, bar0::CAP_DEV)));
    assert_eq!(
        (caps.num_ports(), caps.log_max_msg(), caps.atomics()),
        (1, 31, true)
    );
    assert!(caps.srq() && caps.ud() && caps.uc());
    assert_eq!(hal.mmio_read32(0, bar0::CAP_MAX_SRQ), 1024);
    let q = QueueCaps::from_bits(le32::from_ne(hal.mmio_read32(0, bar0::CAP_QUEUE)));
    assert_eq!((q.log_max_wq(), q.log_max_cqe(), q.max_sge()), (15, 16, 16));
    assert_eq!((q.max_inline_16(), q.max_wqe_bbs()), (16, 8));
    assert_eq!(hal.mmio_read32(0, bar0::CAP_MAX_QP), 1024);
    assert_eq!(hal.mmio_read32(0, bar0::CAP_MAX_MR), 4096);
    // The reference values docs/device-spec.md gives are the device's.
    let spec = include_str!("../../docs/device-spec.md");
    let hex_after = |needle: &str| -> u32 {
        let at = spec
            .find(needle)
            .unwrap_or_else(|| panic!("{needle:?} in the spec"))
            + needle.len();
        let digits: String = spec[at..]
            .chars()
            .take_while(|c| c.is_ascii_hexdigit())
            .collect();
        u32::from_str_radix(&digits, 16).unwrap()
    };
    assert_eq!(
        hex_after("| `VERSION` | RO | `0x"),
        hal.mmio_read32(0, bar0::VERSION),
        "spec 3.1: VERSION's reset value"
    );
    assert_eq!(
        hex_after("`CAP_DEV = 0x"),
        hal.mmio_read32(0, bar0::CAP_DEV),
        "spec 3.1: the reference CAP_DEV"
    );
    assert_eq!(
        hex_after("`CAP_QUEUE = 0x"),
        hal.mmio_read32(0, bar0::CAP_QUEUE),
        "spec 3.1: the reference CAP_QUEUE"
    );
    // Undefined offsets read 0; writes to them and to RO registers are ignored.
    assert_eq!(hal.mmio_read32(0, 0x1000), 0);
    hal.mmio_write32(0, 0x1000, 5);
    hal.mmio_write32(0, bar0::ID, 5);
    assert_eq!(hal.mmio_read32(0, bar0::ID), bar0::MAGIC);

    let mut t = bring_up(mode);
    let hal = t.hal.clone();
    assert!(status(&hal).ready() && status(&hal).enabled() && !status(&hal).fatal());
    // Queue configuration is frozen while enabled.
    hal.mmio_write32(0, bar0::CMDQ_CTRL, 9);
    assert_eq!(hal.mmio_read32(0, bar0::CMDQ_CTRL), CMDQ_LOG);
    t.sync();
    // Disable, then reset clears everything.
    hal.mmio_write32(0, bar0::CTRL, 0);
    wait_until(&hal, "disable", || !status(&hal).enabled());
    reset(&hal);
    assert_eq!(hal.mmio_read32(0, bar0::CMDQ_CTRL), 0);
    assert_eq!(hal.mmio_read32(0, bar0::CMDQ_BASE_HI), 0);
    // The IOVA latches on the HI write: LO alone leaves the base at 0, which
    // is not mapped.
    hal.mmio_write32(0, bar0::CMDQ_BASE_LO, 0x1000);
    enable(&hal);
    wait_until(&hal, "fatal", || status(&hal).fatal());
    assert_eq!(
        hal.mmio_read32(0, bar0::FATAL_SYNDROME),
        FatalSyndrome::CmdqDma as u32
    );
}

/// BAR 0 writes take effect in the order made and a read sees every earlier
/// write, as PCIe orders them; reserved bits read as zero.
fn bar0_ordering_and_reserved_bits(mode: ExecMode) {
    let dev = EmuDevice::new(EmuConfig::default(), mode);
    let hal = dev.hal();
    let reset_bits = Ctrl::new().with_reset(true).into_bits().to_ne();
    for i in 0..500u32 {
        // No polling between the reset and the configuration writes: they
        // come after it, so the reset must not undo or refuse them.
        hal.mmio_write32(0, bar0::CTRL, reset_bits);
        let ctrl = Ctrl::from_bits(le32::from_ne(hal.mmio_read32(0, bar0::CTRL)));
        assert!(
            ctrl.reset() || status(&hal).ready(),
            "reset bit cleared early"
        );
        let base = 0x1000 * (i as u64 + 1);
        write64(&hal, bar0::CMDQ_BASE_LO, base);
        hal.mmio_write32(0, bar0::INTR_MASK, 0x2);
        assert_eq!(
            hal.mmio_read32(0, bar0::CMDQ_BASE_LO),
            base as u32,
            "pass {i}"
        );
        assert_eq!(hal.mmio_read32(0, bar0::INTR_MASK), 0x2, "pass {i}");
    }
    reset(&hal);
    hal.mmio_write32(0, bar0::CMDQ_CTRL, u32::MAX);
    assert_eq!(hal.mmio_read32(0, bar0::CMDQ_CTRL), 0x1f);
    hal.mmio_write32(0, bar0::EQ_CTRL, 0x7fff_ffff);
    let eq = EqCtrl::from_bits(le32::from_ne(hal.mmio_read32(0, bar0::EQ_CTRL)));
    assert_eq!(
        (eq.log_size(), eq.vector(), eq.enable()),
        (0x1f, 0x7ff, false)
    );
    assert_eq!(hal.mmio_read32(0, bar0::EQ_CTRL), 0x1f | 0x7ff << 8);
    hal.mmio_write32(0, bar0::INTR_MASK, u32::MAX);
    assert_eq!(hal.mmio_read32(0, bar0::INTR_MASK), 0x7);
    // A reset returns them to zero.
    reset(&hal);
    for off in [bar0::CMDQ_CTRL, bar0::EQ_CTRL, bar0::INTR_MASK] {
        assert_eq!(hal.mmio_read32(0, off), 0, "{off:#x}");
    }
}

fn enable(hal: &impl Hal) {
    hal.mmio_write32(
        0,
        bar0::CTRL,
        Ctrl::new().with_enable(true).into_bits().to_ne(),
    );
}

fn fatal_on_unmapped_cmdq(mode: ExecMode) {
    let dev = EmuDevice::new(EmuConfig::default(), mode);
    let hal = dev.hal();
    reset(&hal);
    let r = hal.dma_alloc(4096).unwrap();
    write64(&hal, bar0::CMDQ_BASE_LO, r.iova());
    // 2 entries of 512 bytes fit; then free the memory before enabling.
    hal.mmio_write32(0, bar0::CMDQ_CTRL, 1);
    // SAFETY: the device has not been told about the region yet.
    unsafe { hal.dma_free(r) };
    enable(&hal);
    wait_until(&hal, "fatal", || status(&hal).fatal());
    assert!(!status(&hal).enabled());
    assert_eq!(
        hal.mmio_read32(0, bar0::FATAL_SYNDROME),
        FatalSyndrome::CmdqDma as u32
    );
    let cause = hal.mmio_read32(0, bar0::INTR_CAUSE);
    assert_ne!(cause & 4, 0, "fatal interrupt cause");
    hal.mmio_write32(0, bar0::INTR_CAUSE, 4);
    assert_eq!(hal.mmio_read32(0, bar0::INTR_CAUSE) & 4, 0, "RW1C");
    // Enable is ignored in the fatal state; only reset leaves it.
    enable(&hal);
    reset(&hal);
    assert!(!status(&hal).fatal());
    assert_eq!(hal.mmio_read32(0, bar0::FATAL_SYNDROME), 0);
}

fn fatal_on_bad_config(mode: ExecMode) {
    let dev = EmuDevice::new(EmuConfig::default(), mode);
    let hal = dev.hal();
    let cmdq = hal.dma_alloc(1 << 20).unwrap();
    // Command queue larger than CAP_DEV.log_max_cmdq.
    reset(&hal);
    write64(&hal, bar0::CMDQ_BASE_LO, cmdq.iova());
    let log = CmdqCtrl::new().with_log_size(13);
    hal.mmio_write32(0, bar0::CMDQ_CTRL, log.into_bits().to_ne());
    enable(&hal);
    wait_until(&hal, "fatal", || status(&hal).fatal());
    assert_eq!(
        hal.mmio_read32(0, bar0::FATAL_SYNDROME),
        FatalSyndrome::BadConfig as u32
    );
    // Unaligned command queue.
    reset(&hal);
    write64(&hal, bar0::CMDQ_BASE_LO, cmdq.iova() + 512);
    enable(&hal);
    wait_until(&hal, "fatal", || status(&hal).fatal());
    assert_eq!(
        hal.mmio_read32(0, bar0::FATAL_SYNDROME),
        FatalSyndrome::BadConfig as u32
    );
    // Unmapped EQ.
    reset(&hal);
    write64(&hal, bar0::CMDQ_BASE_LO, cmdq.iova());
    write64(&hal, bar0::EQ_BASE_LO, 0x10_0000_0000);
    let eq = EqCtrl::new().with_log_size(4).with_enable(true);
    hal.mmio_write32(0, bar0::EQ_CTRL, eq.into_bits().to_ne());
    enable(&hal);
    wait_until(&hal, "fatal", || status(&hal).fatal());
    assert_eq!(
        hal.mmio_read32(0, bar0::FATAL_SYNDROME),
        FatalSyndrome::EqDma as u32
    );
}

fn query_commands(mode: ExecMode) {
    let mut t = bring_up(mode);
    let cfg = t.dev.config().clone();
    let d: QueryDeviceOut = t.cmd(CmdOpcode::QueryDevice, &0u32).ok();
    assert_eq!(d.node_guid, cfg.node_guid());
    assert_eq!(d.vendor_id.to_ne(), rnic_hw_regs::pci::VENDOR_ID as u32);
    assert_eq!(d.max_qp.to_ne(), 1024);
    assert_eq!(d.max_msg_sz.to_ne(), 1 << 31);
    assert_eq!(d.atomic_cap.to_ne(), 1);
    assert_eq!(d.phys_port_cnt.to_ne(), 1);

    let p: QueryPortOut = t
        .cmd(
            CmdOpcode::QueryPort,
            &QueryPortIn {
                port: le32::from_ne(1),
            },
        )
        .ok();
    assert_eq!(p.state, PortState::Active.raw());
    assert_eq!(p.link_layer, LinkLayer::Ethernet.raw());
    assert_eq!(p.mac, cfg.mac);
    assert_eq!(p.gid_tbl_len.to_ne(), cfg.gid_table_len);
    t.cmd(
        CmdOpcode::QueryPort,
        &QueryPortIn {
            port: le32::from_ne(2),
        },
    )
    .fails(CmdStatus::BadParam, offset_of!(QueryPortIn, port));

    let gid = |t: &mut Tdev, port: u32, index: u32| {
        t.cmd(
            CmdOpcode::QueryGid,
            &QueryGidIn {
                port: le32::from_ne(port),
                index: le32::from_ne(index),
            },
        )
    };
    let g: QueryGidOut = gid(&mut t, 1, 0).ok();
    assert_eq!(g.gid, cfg.ipv4_gid());
    assert_eq!((g.valid, g.gid_type), (1, GidType::RoceV2.raw()));
    let g: QueryGidOut = gid(&mut t, 1, 1).ok();
    assert_eq!(g.gid, cfg.link_local_gid());
    let g: QueryGidOut = gid(&mut t, 1, 2).ok();
    assert_eq!(g.valid, 0);
    gid(&mut t, 1, 16).fails(CmdStatus::BadParam, offset_of!(QueryGidIn, index));
    gid(&mut t, 0, 0).fails(CmdStatus::BadParam, offset_of!(QueryGidIn, port));

    let mut set = SetGidIn {
        port: le32::from_ne(1),
        index: le32::from_ne(2),
        gid: [0xab; 16],
        gid_type: GidType::RoceV2.raw(),
        reserved: [0; 3],
    };
    t.cmd(CmdOpcode::SetGid, &set).ok::<u32>();
    let g: QueryGidOut = gid(&mut t, 1, 2).ok();
    assert_eq!((g.gid, g.valid), ([0xab; 16], 1));
    set.gid_type = GidType::Ib.raw();
    t.cmd(CmdOpcode::SetGid, &set)
        .fails(CmdStatus::BadParam, offset_of!(SetGidIn, gid_type));
    set.gid_type = GidType::RoceV2.raw();
    set.reserved = [1, 0, 0];
    t.cmd(CmdOpcode::SetGid, &set)
        .fails(CmdStatus::BadParam, offset_of!(SetGidIn, reserved));
    // An all-zero GID clears the entry.
    set.reserved = [0; 3];
    set.gid = [0; 16];
    t.cmd(CmdOpcode::SetGid, &set).ok::<u32>();
    assert_eq!(gid(&mut t, 1, 2).ok::<QueryGidOut>().valid, 0);
}

fn pd_and_mr_commands(mode: ExecMode) {
    let mut t = bring_up(mode);
    assert_eq!(t.create_pd(), 1);
    assert_eq!(t.create_pd(), 2);
    t.obj(CmdOpcode::DestroyPd, 7)
        .fails(CmdStatus::BadResource, offset_of!(ObjIn, id));
    let mr = t.reg_mr(1, 4096, access::LOCAL_WRITE | access::REMOTE_WRITE);
    assert_eq!(mr.key >> 8, 1, "MR index from 1");
    t.obj(CmdOpcode::DestroyPd, 1)
        .fails(CmdStatus::Busy, offset_of!(ObjIn, id));

    let region = t.hal.dma_alloc(8192).unwrap();
    let good = t.reg_mr_in(2, &region, access::LOCAL_WRITE);
    let bad = RegMrIn {
        pdn: le32::from_ne(9),
        ..good
    };
    t.cmd(CmdOpcode::RegMr, &bad)
        .fails(CmdStatus::BadResource, offset_of!(RegMrIn, pdn));
    // Remote write needs local write.
    let bad = RegMrIn {
        access: le32::from_ne(access::REMOTE_WRITE),
        ..good
    };
    t.cmd(CmdOpcode::RegMr, &bad)
        .fails(CmdStatus::BadParam, offset_of!(RegMrIn, access));
    let bad = RegMrIn {
        access: le32::from_ne(1 << 5),
        ..good
    };
    t.cmd(CmdOpcode::RegMr, &bad)
        .fails(CmdStatus::BadParam, offset_of!(RegMrIn, access));
    // One byte past the mapping.
    let bad = RegMrIn {
        length: le64::from_ne(8193),
        ..good
    };
    t.cmd(CmdOpcode::RegMr, &bad)
        .fails(CmdStatus::BadDma, offset_of!(RegMrIn, iova));
    let bad = RegMrIn {
        iova: le64::from_ne(0x1234),
        ..good
    };
    t.cmd(CmdOpcode::RegMr, &bad)
        .fails(CmdStatus::BadDma, offset_of!(RegMrIn, iova));

    // A reused index gets a new tag: the old key misses.
    let o: RegMrOut = t.cmd(CmdOpcode::RegMr, &good).ok();
    let k1 = o.lkey.to_ne();
    t.obj(CmdOpcode::DeregMr, k1).ok::<u32>();
    let k2 = t.cmd(CmdOpcode::RegMr, &good).ok::<RegMrOut>().lkey.to_ne();
    assert_eq!(k1 >> 8, k2 >> 8);
    assert_ne!(k1, k2);
    t.obj(CmdOpcode::DeregMr, k1)
        .fails(CmdStatus::BadResource, offset_of!(ObjIn, id));
    t.obj(CmdOpcode::DeregMr, k2).ok::<u32>();

    // REREG_MR keeps the key; a new PD takes the MR's count with it.
    let pd2 = t.create_pd();
    let rereg = |flags: u32, pdn: u32, acc: u32| ReregMrIn {
        lkey: le32::from_ne(mr.key),
        flags: le32::from_ne(flags),
        pdn: le32::from_ne(pdn),
        access: le32::from_ne(acc),
        va: good.va,
        length: good.length,
        iova: good.iova,
    };
    t.cmd(CmdOpcode::ReregMr, &rereg(0, 0, 0))
        .fails(CmdStatus::BadParam, offset_of!(ReregMrIn, flags));
    t.cmd(CmdOpcode::ReregMr, &rereg(rereg::PD, 99, 0))
        .fails(CmdStatus::BadResource, offset_of!(ReregMrIn, pdn));
    t.cmd(
        CmdOpcode::ReregMr,
        &rereg(rereg::ACCESS, 0, access::REMOTE_WRITE),
    )
    .fails(CmdStatus::BadParam, offset_of!(ReregMrIn, access));
    let all = rereg::PD | rereg::ACCESS | rereg::TRANSLATION;
    t.cmd(CmdOpcode::ReregMr, &rereg(all, pd2, access::LOCAL_WRITE))
        .ok::<u32>();
    t.obj(CmdOpcode::DestroyPd, pd2)
        .fails(CmdStatus::Busy, offset_of!(ObjIn, id));
    // Windows: type 1 or 2, in a PD, deallocated once.
    let mw = |pdn: u32, ty: u32| AllocMwIn {
        pdn: le32::from_ne(pdn),
        mw_type: le32::from_ne(ty),
    };
    t.cmd(CmdOpcode::AllocMw, &mw(pd2, 3))
        .fails(CmdStatus::BadParam, offset_of!(AllocMwIn, mw_type));
    t.cmd(CmdOpcode::AllocMw, &mw(99, 1))
        .fails(CmdStatus::BadResource, offset_of!(AllocMwIn, pdn));
    let w = t
        .cmd(CmdOpcode::AllocMw, &mw(pd2, 2))
        .ok::<AllocMwOut>()
        .rkey
        .to_ne();
    // A window's key is no MR's.
    t.obj(CmdOpcode::DeregMr, w)
        .fails(CmdStatus::BadResource, offset_of!(ObjIn, id));
    t.obj(CmdOpcode::DeallocMw, mr.key)
        .fails(CmdStatus::BadResource, offset_of!(ObjIn, id));
    t.obj(CmdOpcode::DeallocMw, w).ok::<u32>();
    t.obj(CmdOpcode::DeallocMw, w)
        .fails(CmdStatus::BadResource, offset_of!(ObjIn, id));
    t.obj(CmdOpcode::DeregMr, mr.key).ok::<u32>();
    t.obj(CmdOpcode::DestroyPd, pd2).ok::<u32>();
    t.obj(CmdOpcode::DestroyPd, 1).ok::<u32>();
    t.obj(CmdOpcode::DestroyPd, 1)
        .fails(CmdStatus::BadResource, offset_of!(ObjIn, id));
    // PD numbers are reused least recently freed first.
    assert_eq!((t.create_pd(), t.create_pd()), (pd2, 1));
}

fn cq_commands(mode: ExecMode) {
    let mut t = bring_up(mode);
    let buf = t.hal.dma_alloc(64 << 4).unwrap();
    let dbrec = t.hal.dma_alloc(8).unwrap();
    let good = CreateCqIn {
        log_size: le32::from_ne(4),
        uar_page: le32::from_ne(0),
        eqn: le32::from_ne(0),
        reserved: le32::from_ne(0),
        buf_iova: le64::from_ne(buf.iova()),
        dbrec_iova: le64::from_ne(dbrec.iova()),
    };
    let cases = [
        (
            CreateCqIn {
                log_size: le32::from_ne(17),
                ..good
            },
            CmdStatus::BadParam,
            offset_of!(CreateCqIn, log_size),
        ),
        (
            CreateCqIn {
                uar_page: le32::from_ne(64),
                ..good
            },
            CmdStatus::BadParam,
            offset_of!(CreateCqIn, uar_page),
        ),
        (
            CreateCqIn {
                eqn: le32::from_ne(3),
                ..good
            },
            CmdStatus::BadResource,
            offset_of!(CreateCqIn, eqn),
        ),
        (
            CreateCqIn {
                reserved: le32::from_ne(1),
                ..good
            },
            CmdStatus::BadParam,
            offset_of!(CreateCqIn, reserved),
        ),
        (
            CreateCqIn {
                buf_iova: le64::from_ne(buf.iova() + 64),
                ..good
            },
            CmdStatus::BadParam,
            offset_of!(CreateCqIn, buf_iova),
        ),
        // 32 CQEs do not fit the 1 KiB... page it was given: the page is
        // mapped, so use a size past the page.
        (
            CreateCqIn {
                log_size: le32::from_ne(7),
                ..good
            },
            CmdStatus::BadDma,
            offset_of!(CreateCqIn, buf_iova),
        ),
        (
            CreateCqIn {
                dbrec_iova: le64::from_ne(dbrec.iova() + 4),
                ..good
            },
            CmdStatus::BadParam,
            offset_of!(CreateCqIn, dbrec_iova),
        ),
        (
            CreateCqIn {
                dbrec_iova: le64::from_ne(0x2000),
                ..good
            },
            CmdStatus::BadDma,
            offset_of!(CreateCqIn, dbrec_iova),
        ),
    ];
    for (i, status, off) in cases {
        t.cmd(CmdOpcode::CreateCq, &i).fails(status, off);
    }
    let cqn = t
        .cmd(CmdOpcode::CreateCq, &good)
        .ok::<CreateCqOut>()
        .cqn
        .to_ne();
    assert_eq!(cqn, 1, "CQN from 1");
    // Busy while a QP uses it.
    let pdn = t.create_pd();
    let cq = TCq {
        cqn,
        log: 4,
        buf,
        dbrec,
        ci: 0,
    };
    let qp = t.create_qp(pdn, &cq, &cq);
    t.obj(CmdOpcode::DestroyCq, cqn)
        .fails(CmdStatus::Busy, offset_of!(ObjIn, id));
    t.obj(CmdOpcode::DestroyPd, pdn)
        .fails(CmdStatus::Busy, offset_of!(ObjIn, id));
    t.obj(CmdOpcode::DestroyQp, qp.qpn).ok::<u32>();
    t.obj(CmdOpcode::DestroyCq, cqn).ok::<u32>();
    t.obj(CmdOpcode::DestroyCq, cqn)
        .fails(CmdStatus::BadResource, offset_of!(ObjIn, id));
    t.obj(CmdOpcode::DestroyPd, pdn).ok::<u32>();
}

fn qp_create_rejections(mode: ExecMode) {
    let mut t = bring_up(mode);
    let pdn = t.create_pd();
    let cq = t.create_cq(6);
    let mem = t.qp_mem(6, 6, 6);
    let good = Tdev::create_qp_in(pdn, cq.cqn, cq.cqn, &mem);
    use CmdStatus::*;
    let cases = [
        // GSI, RC, UC and UD are 1, 2, 3 and 4: 0 (QP0) and 5 are no
        // type.
        (
            CreateQpIn { qp_type: 5, ..good },
            BadParam,
            offset_of!(CreateQpIn, qp_type),
        ),
        (
            CreateQpIn { qp_type: 0, ..good },
            BadParam,
            offset_of!(CreateQpIn, qp_type),
        ),
        (
            CreateQpIn {
                sq_sig_all: 2,
                ..good
            },
            BadParam,
            offset_of!(CreateQpIn, sq_sig_all),
        ),
        (
            CreateQpIn {
                log_rq_stride: 4,
                ..good
            },
            BadParam,
            offset_of!(CreateQpIn, log_rq_stride),
        ),
        (
            CreateQpIn {
                log_rq_stride: 10,
                ..good
            },
            BadParam,
            offset_of!(CreateQpIn, log_rq_stride),
        ),
        (
            CreateQpIn {
                pdn: le32::from_ne(5),
                ..good
            },
            BadResource,
            offset_of!(CreateQpIn, pdn),
        ),
        (
            CreateQpIn {
                send_cqn: le32::from_ne(5),
                ..good
            },
            BadResource,
            offset_of!(CreateQpIn, send_cqn),
        ),
        (
            CreateQpIn {
                recv_cqn: le32::from_ne(0),
                ..good
            },
            BadResource,
            offset_of!(CreateQpIn, recv_cqn),
        ),
        (
            CreateQpIn {
                srqn: le32::from_ne(1),
                log_rq_stride: 0,
                log_rq_wqes: le32::from_ne(0),
                rq_iova: le64::from_ne(0),
                ..good
            },
            BadResource,
            offset_of!(CreateQpIn, srqn),
        ),
        (
            CreateQpIn {
                log_sq_bbs: le32::from_ne(16),
                ..good
            },
            BadParam,
            offset_of!(CreateQpIn, log_sq_bbs),
        ),
        (
            CreateQpIn {
                max_inline: le32::from_ne(257),
                ..good
            },
            BadParam,
            offset_of!(CreateQpIn, max_inline),
        ),
        (
            CreateQpIn {
                uar_page: le32::from_ne(64),
                ..good
            },
            BadParam,
            offset_of!(CreateQpIn, uar_page),
        ),
        (
            CreateQpIn {
                log_sq_bbs: le32::from_ne(7),
                ..good
            },
            BadDma,
            offset_of!(CreateQpIn, sq_iova),
        ),
        (
            CreateQpIn {
                rq_iova: le64::from_ne(mem.rq.iova() + 8),
                ..good
            },
            BadParam,
            offset_of!(CreateQpIn, rq_iova),
        ),
        (
            CreateQpIn {
                log_rq_wqes: le32::from_ne(7),
                ..good
            },
            BadDma,
            offset_of!(CreateQpIn, rq_iova),
        ),
        (
            CreateQpIn {
                dbrec_iova: le64::from_ne(1 << 40),
                ..good
            },
            BadDma,
            offset_of!(CreateQpIn, dbrec_iova),
        ),
    ];
    for (i, status, off) in cases {
        t.cmd(CmdOpcode::CreateQp, &i).fails(status, off);
    }
    let qpn = t
        .cmd(CmdOpcode::CreateQp, &good)
        .ok::<CreateQpOut>()
        .qpn
        .to_ne();
    assert_eq!(qpn, 2, "QPN from 2");
    let a = t.query_qp(qpn);
    assert_eq!(a.qp_state, QpState::Reset.raw());
    t.obj(CmdOpcode::QueryQp, 99)
        .fails(BadResource, offset_of!(ObjIn, id));
    t.obj(CmdOpcode::DestroyQp, 99)
        .fails(BadResource, offset_of!(ObjIn, id));
}

/// Offset of a QpAttrs field in the MODIFY_QP input.
fn attr(off: usize) -> usize {
    offset_of!(ModifyQpIn, attrs) + off
}

fn qp_modify_rules(mode: ExecMode) {
    let mut t = bring_up(mode);
    let pdn = t.create_pd();
    let cq = t.create_cq(6);
    let qp = t.create_qp(pdn, &cq, &cq);
    let n = qp.qpn;
    let mask_off = offset_of!(ModifyQpIn, attr_mask);
    // Illegal transition.
    t.modify_rts(n, 0)
        .fails(CmdStatus::BadState, attr(offset_of!(QpAttrs, qp_state)));
    // Missing required attribute.
    let init = QpAttrs {
        qp_state: QpState::Init.raw(),
        port_num: 1,
        ..QpAttrs::default()
    };
    t.modify(
        n,
        qp_attr::STATE | qp_attr::PORT | qp_attr::ACCESS_FLAGS,
        init,
    )
    .fails(CmdStatus::BadParam, mask_off);
    // Attribute not allowed in this transition.
    let all = qp_attr::STATE | qp_attr::PKEY_INDEX | qp_attr::PORT | qp_attr::ACCESS_FLAGS;
    t.modify(n, all | qp_attr::SQ_PSN, init)
        .fails(CmdStatus::BadParam, mask_off);
    // Bad values.
    let bad_port = QpAttrs {
        port_num: 2,
        ..init
    };
    t.modify(n, all, bad_port)
        .fails(CmdStatus::BadParam, attr(offset_of!(QpAttrs, port_num)));
    let bad_access = QpAttrs {
        qp_access_flags: le32::from_ne(access::LOCAL_WRITE),
        ..init
    };
    t.modify(n, all, bad_access).fails(
        CmdStatus::BadParam,
        attr(offset_of!(QpAttrs, qp_access_flags)),
    );
    let bad_state = QpAttrs {
        qp_state: 9,
        ..init
    };
    t.modify(n, all, bad_state)
        .fails(CmdStatus::BadParam, attr(offset_of!(QpAttrs, qp_state)));
    // Fields MODIFY_QP takes as 0 each name their own offset (spec 6.1).
    let draining = QpAttrs {
        sq_draining: 1,
        ..init
    };
    t.modify(n, all, draining)
        .fails(CmdStatus::BadParam, attr(offset_of!(QpAttrs, sq_draining)));
    let reserved = QpAttrs {
        reserved: [0, 1],
        ..init
    };
    t.modify(n, all, reserved)
        .fails(CmdStatus::BadParam, attr(offset_of!(QpAttrs, reserved)));
    // CUR_STATE must match (and is only allowed where the table allows it).
    t.modify_init(n, access::REMOTE_WRITE).ok::<u32>();
    t.modify_rtr(n, 3).ok::<u32>();
    let rts = QpAttrs {
        qp_state: QpState::Rts.raw(),
        cur_qp_state: QpState::Init.raw(),
        ..QpAttrs::default()
    };
    use qp_attr::*;
    let rts_mask = STATE | SQ_PSN | TIMEOUT | RETRY_CNT | RNR_RETRY | MAX_QP_RD_ATOMIC;
    t.modify(n, rts_mask | CUR_STATE, rts)
        .fails(CmdStatus::BadState, attr(offset_of!(QpAttrs, cur_qp_state)));
    let bad_psn = QpAttrs {
        cur_qp_state: QpState::Rtr.raw(),
        sq_psn: le32::from_ne(1 << 24),
        ..rts
    };
    t.modify(n, rts_mask | CUR_STATE, bad_psn)
        .fails(CmdStatus::BadParam, attr(offset_of!(QpAttrs, sq_psn)));
    let ok = QpAttrs {
        cur_qp_state: QpState::Rtr.raw(),
        sq_psn: le32::from_ne(77),
        rnr_retry: 3,
        ..rts
    };
    t.modify(n, rts_mask | CUR_STATE, ok).ok::<u32>();
    // Query returns the state and every attribute, old and new.
    let a = t.query_qp(n);
    assert_eq!(a.qp_state, QpState::Rts.raw());
    assert_eq!(a.sq_psn.to_ne(), 77);
    assert_eq!(a.rnr_retry, 3);
    assert_eq!(a.dest_qp_num.to_ne(), 3);
    assert_eq!(a.port_num, 1);
    assert_eq!(a.qp_access_flags.to_ne(), access::REMOTE_WRITE);
    assert_eq!(a.path_mtu, rnic_verbs::Mtu::Mtu1024.raw());
    // Alternate paths are not implemented.
    t.modify(
        n,
        STATE | ALT_PATH,
        QpAttrs {
            qp_state: QpState::Rts.raw(),
            ..a
        },
    )
    .fails(CmdStatus::BadParam, mask_off);
    // Bad address vector.
    t.modify_state(n, QpState::Reset).ok::<u32>();
    t.modify_init(n, 0).ok::<u32>();
    let rtr = |sgid: u8, global: u8| QpAttrs {
        qp_state: QpState::Rtr.raw(),
        path_mtu: 3,
        ah: AddressVector {
            sgid_index: sgid,
            is_global: global,
            port_num: 1,
            ..AddressVector::default()
        },
        ..QpAttrs::default()
    };
    let rtr_mask = STATE | AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER;
    let av = |f: usize| attr(offset_of!(QpAttrs, ah) + f);
    t.modify(n, rtr_mask, rtr(5, 1)).fails(
        CmdStatus::BadParam,
        av(offset_of!(AddressVector, sgid_index)),
    );
    t.modify(n, rtr_mask, rtr(0, 0)).fails(
        CmdStatus::BadParam,
        av(offset_of!(AddressVector, is_global)),
    );
    let bad_mtu = QpAttrs {
        path_mtu: 6,
        ..rtr(1, 1)
    };
    t.modify(n, rtr_mask, bad_mtu)
        .fails(CmdStatus::BadParam, attr(offset_of!(QpAttrs, path_mtu)));
    let bad_dest = QpAttrs {
        dest_qp_num: le32::from_ne(1 << 24),
        ..rtr(1, 1)
    };
    t.modify(n, rtr_mask, bad_dest)
        .fails(CmdStatus::BadParam, attr(offset_of!(QpAttrs, dest_qp_num)));
    t.modify(n, rtr_mask, rtr(1, 1)).ok::<u32>();
    // Any state may go to ERR, and ERR only to RESET.
    t.modify_state(n, QpState::Err).ok::<u32>();
    t.modify_state(n, QpState::Init)
        .fails(CmdStatus::BadState, attr(offset_of!(QpAttrs, qp_state)));
    t.modify_state(n, QpState::Reset).ok::<u32>();
    t.modify(99, STATE, QpAttrs::default())
        .fails(CmdStatus::BadResource, offset_of!(ModifyQpIn, qpn));
}

fn srq_commands(mode: ExecMode) {
    use CmdStatus::{BadDma, BadParam, BadResource, Busy};
    let mut t = bring_up(mode);
    let pdn = t.create_pd();
    let buf = t.hal.dma_alloc(1 << (3 + 5)).unwrap();
    let big = t.hal.dma_alloc(1 << (5 + 5)).unwrap();
    let dbrec = t.hal.dma_alloc(8).unwrap();
    let good = CreateSrqIn {
        pdn: le32::from_ne(pdn),
        log_wqes: le32::from_ne(3),
        log_stride: le32::from_ne(5),
        srq_limit: le32::from_ne(0),
        uar_page: le32::from_ne(2),
        reserved: le32::from_ne(0),
        buf_iova: le64::from_ne(buf.iova()),
        dbrec_iova: le64::from_ne(dbrec.iova()),
    };
    let bad = |f: &dyn Fn(&mut CreateSrqIn)| {
        let mut i = good;
        f(&mut i);
        i
    };
    let cases: [(CreateSrqIn, CmdStatus, usize); 10] = [
        (
            bad(&|i| i.pdn = le32::from_ne(77)),
            BadResource,
            offset_of!(CreateSrqIn, pdn),
        ),
        (
            bad(&|i| i.log_wqes = le32::from_ne(16)),
            BadParam,
            offset_of!(CreateSrqIn, log_wqes),
        ),
        (
            bad(&|i| i.log_stride = le32::from_ne(4)),
            BadParam,
            offset_of!(CreateSrqIn, log_stride),
        ),
        (
            bad(&|i| i.log_stride = le32::from_ne(10)),
            BadParam,
            offset_of!(CreateSrqIn, log_stride),
        ),
        (
            bad(&|i| i.srq_limit = le32::from_ne(9)),
            BadParam,
            offset_of!(CreateSrqIn, srq_limit),
        ),
        (
            bad(&|i| i.uar_page = le32::from_ne(64)),
            BadParam,
            offset_of!(CreateSrqIn, uar_page),
        ),
        (
            bad(&|i| i.reserved = le32::from_ne(1)),
            BadParam,
            offset_of!(CreateSrqIn, reserved),
        ),
        (
            bad(&|i| i.buf_iova = le64::from_ne(buf.iova() + 64)),
            BadParam,
            offset_of!(CreateSrqIn, buf_iova),
        ),
        (
            bad(&|i| i.buf_iova = le64::from_ne(0x7000_0000_0000)),
            BadDma,
            offset_of!(CreateSrqIn, buf_iova),
        ),
        (
            bad(&|i| i.dbrec_iova = le64::from_ne(dbrec.iova() + 2)),
            BadParam,
            offset_of!(CreateSrqIn, dbrec_iova),
        ),
    ];
    for (i, status, off) in cases {
        t.cmd(CmdOpcode::CreateSrq, &i).fails(status, off);
    }
    let srqn = t
        .cmd(CmdOpcode::CreateSrq, &good)
        .ok::<CreateSrqOut>()
        .srqn
        .to_ne();
    assert_eq!(srqn, 1);
    let q: QuerySrqOut = t.obj(CmdOpcode::QuerySrq, srqn).ok();
    assert_eq!(
        (q.max_wr.to_ne(), q.max_sge.to_ne(), q.srq_limit.to_ne()),
        (8, 1, 0)
    );
    t.obj(CmdOpcode::QuerySrq, 2)
        .fails(BadResource, offset_of!(ObjIn, id));
    // The PD has a user now.
    t.obj(CmdOpcode::DestroyPd, pdn)
        .fails(Busy, offset_of!(ObjIn, id));

    let modify = |mask: u32, log_wqes: u32, limit: u32, iova: u64| ModifySrqIn {
        srqn: le32::from_ne(srqn),
        attr_mask: le32::from_ne(mask),
        log_wqes: le32::from_ne(log_wqes),
        srq_limit: le32::from_ne(limit),
        buf_iova: le64::from_ne(iova),
    };
    let (max_wr, limit) = (srq_attr::MAX_WR, srq_attr::LIMIT);
    t.cmd(CmdOpcode::ModifySrq, &modify(0, 0, 0, 0))
        .fails(BadParam, offset_of!(ModifySrqIn, attr_mask));
    t.cmd(CmdOpcode::ModifySrq, &modify(4, 0, 0, 0))
        .fails(BadParam, offset_of!(ModifySrqIn, attr_mask));
    t.cmd(CmdOpcode::ModifySrq, &modify(limit, 0, 9, 0))
        .fails(BadParam, offset_of!(ModifySrqIn, srq_limit));
    t.cmd(CmdOpcode::ModifySrq, &modify(limit, 0, 6, 0))
        .ok::<u32>();
    let q: QuerySrqOut = t.obj(CmdOpcode::QuerySrq, srqn).ok();
    assert_eq!(q.srq_limit.to_ne(), 6);
    // Six WQEs posted: a ring of four cannot hold them.
    dbrec.write(0, le32::from_ne(6));
    t.cmd(CmdOpcode::ModifySrq, &modify(max_wr, 2, 0, big.iova()))
        .fails(BadParam, offset_of!(ModifySrqIn, log_wqes));
    t.cmd(CmdOpcode::ModifySrq, &modify(max_wr, 16, 0, big.iova()))
        .fails(BadParam, offset_of!(ModifySrqIn, log_wqes));
    t.cmd(CmdOpcode::ModifySrq, &modify(max_wr, 5, 0, big.iova() + 8))
        .fails(BadParam, offset_of!(ModifySrqIn, buf_iova));
    t.cmd(
        CmdOpcode::ModifySrq,
        &modify(max_wr | limit, 5, 20, big.iova()),
    )
    .ok::<u32>();
    let q: QuerySrqOut = t.obj(CmdOpcode::QuerySrq, srqn).ok();
    assert_eq!((q.max_wr.to_ne(), q.srq_limit.to_ne()), (32, 20));

    // A QP on the SRQ has no receive queue, and keeps the SRQ busy.
    let cq = t.create_cq(4);
    let qp = t.qp_mem(4, 0, 5);
    let on_srq = CreateQpIn {
        srqn: le32::from_ne(srqn),
        log_rq_stride: 0,
        log_rq_wqes: le32::from_ne(0),
        rq_iova: le64::from_ne(0),
        ..Tdev::create_qp_in(pdn, cq.cqn, cq.cqn, &qp)
    };
    for (i, off) in [
        (
            CreateQpIn {
                log_rq_stride: 5,
                ..on_srq
            },
            offset_of!(CreateQpIn, log_rq_stride),
        ),
        (
            CreateQpIn {
                log_rq_wqes: le32::from_ne(1),
                ..on_srq
            },
            offset_of!(CreateQpIn, log_rq_wqes),
        ),
        (
            CreateQpIn {
                rq_iova: le64::from_ne(qp.rq.iova()),
                ..on_srq
            },
            offset_of!(CreateQpIn, rq_iova),
        ),
    ] {
        t.cmd(CmdOpcode::CreateQp, &i).fails(BadParam, off);
    }
    let qpn = t
        .cmd(CmdOpcode::CreateQp, &on_srq)
        .ok::<CreateQpOut>()
        .qpn
        .to_ne();
    t.obj(CmdOpcode::DestroySrq, srqn)
        .fails(Busy, offset_of!(ObjIn, id));
    t.obj(CmdOpcode::DestroyQp, qpn).ok::<u32>();

    // A producer index more than the ring ahead puts the SRQ in error,
    // once, with an event naming it; a doorbell on another page, or for
    // another SRQ, is ignored.
    assert!(t.events().is_empty());
    let ring = |t: &mut Tdev, page: u32, n: u32| {
        let db = WqDoorbell::new().with_qpn(n);
        t.hal
            .mmio_write64(2, page as usize * UAR_PAGE_SIZE + SRQ_DB, db.into_bits());
        t.sync();
    };
    dbrec.write(0, le32::from_ne(33));
    ring(&mut t, 3, srqn);
    ring(&mut t, 2, 9);
    assert!(t.events().is_empty());
    ring(&mut t, 2, srqn);
    ring(&mut t, 2, srqn);
    assert_eq!(
        t.events(),
        vec![(EventType::SrqErr.raw(), srqn, Syndrome::BadWqe as u32)]
    );
    t.obj(CmdOpcode::DestroySrq, srqn).ok::<u32>();
    t.obj(CmdOpcode::DestroySrq, srqn)
        .fails(BadResource, offset_of!(ObjIn, id));
    t.obj(CmdOpcode::DestroyPd, pdn).ok::<u32>();
}

fn eq_commands(mode: ExecMode) {
    use CmdStatus::{BadDma, BadParam, BadResource, Busy};
    let mut t = bring_up(mode);
    assert_eq!(t.hal.mmio_read32(0, bar0::CAP_MAX_EQ), 64);
    assert_eq!(t.hal.mmio_read32(0, bar0::CAP_MSIX), 16);
    let ring = t.hal.dma_alloc(64 << 4).unwrap();
    let good = CreateEqIn {
        log_size: le32::from_ne(4),
        vector: le32::from_ne(5),
        uar_page: le32::from_ne(3),
        reserved: le32::from_ne(0),
        buf_iova: le64::from_ne(ring.iova()),
    };
    let cases = [
        (
            CreateEqIn {
                log_size: le32::from_ne(17),
                ..good
            },
            BadParam,
            offset_of!(CreateEqIn, log_size),
        ),
        (
            CreateEqIn {
                vector: le32::from_ne(16),
                ..good
            },
            BadParam,
            offset_of!(CreateEqIn, vector),
        ),
        (
            CreateEqIn {
                uar_page: le32::from_ne(64),
                ..good
            },
            BadParam,
            offset_of!(CreateEqIn, uar_page),
        ),
        (
            CreateEqIn {
                reserved: le32::from_ne(1),
                ..good
            },
            BadParam,
            offset_of!(CreateEqIn, reserved),
        ),
        (
            CreateEqIn {
                buf_iova: le64::from_ne(ring.iova() + 64),
                ..good
            },
            BadParam,
            offset_of!(CreateEqIn, buf_iova),
        ),
        (
            CreateEqIn {
                buf_iova: le64::from_ne(0x7000_0000_0000),
                ..good
            },
            BadDma,
            offset_of!(CreateEqIn, buf_iova),
        ),
    ];
    for (i, status, off) in cases {
        t.cmd(CmdOpcode::CreateEq, &i).fails(status, off);
    }
    let eqn = t
        .cmd(CmdOpcode::CreateEq, &good)
        .ok::<CreateEqOut>()
        .eqn
        .to_ne();
    assert_eq!(eqn, 1, "EQ 0 is BAR 0's");
    // A CQ may name it, EQ 0 or none; another number is refused.
    let buf = t.hal.dma_alloc(64 << 4).unwrap();
    let dbrec = t.hal.dma_alloc(8).unwrap();
    let cq_in = |eqn: u32| CreateCqIn {
        log_size: le32::from_ne(4),
        uar_page: le32::from_ne(0),
        eqn: le32::from_ne(eqn),
        reserved: le32::from_ne(0),
        buf_iova: le64::from_ne(buf.iova()),
        dbrec_iova: le64::from_ne(dbrec.iova()),
    };
    t.cmd(CmdOpcode::CreateCq, &cq_in(2))
        .fails(BadResource, offset_of!(CreateCqIn, eqn));
    let cqn = t
        .cmd(CmdOpcode::CreateCq, &cq_in(eqn))
        .ok::<CreateCqOut>()
        .cqn
        .to_ne();
    t.obj(CmdOpcode::DestroyEq, eqn)
        .fails(Busy, offset_of!(ObjIn, id));
    t.obj(CmdOpcode::DestroyCq, cqn).ok::<u32>();
    t.obj(CmdOpcode::DestroyEq, eqn).ok::<u32>();
    t.obj(CmdOpcode::DestroyEq, eqn)
        .fails(BadResource, offset_of!(ObjIn, id));
    t.obj(CmdOpcode::DestroyEq, 0)
        .fails(BadResource, offset_of!(ObjIn, id));
}

fn uctx_isolation(mode: ExecMode) {
    use CmdStatus::{BadParam, BadResource};
    let mut t = bring_up(mode);
    let open = |t: &mut Tdev, uid: u32, n: u32| {
        t.cmd_as(
            uid,
            CmdOpcode::AllocUctx,
            &AllocUctxIn {
                uar_pages: le32::from_ne(n),
            },
        )
    };
    open(&mut t, 0, 0).fails(BadParam, offset_of!(AllocUctxIn, uar_pages));
    open(&mut t, 0, 65).fails(BadParam, offset_of!(AllocUctxIn, uar_pages));
    let a: AllocUctxOut = open(&mut t, 0, 8).ok();
    let b: AllocUctxOut = open(&mut t, 0, 8).ok();
    let (ua, ub) = (a.uid.to_ne(), b.uid.to_ne());
    assert_eq!((ua, a.uar_first.to_ne(), a.uar_count.to_ne()), (1, 0, 8));
    assert_eq!((ub, b.uar_first.to_ne()), (2, 8));
    // A context opens no context, and a context that does not exist
    // issues nothing.
    open(&mut t, ua, 1).fails(BadParam, 0);
    assert_eq!(
        t.cmd_as(9, CmdOpcode::CreatePd, &0u32).status(),
        BadResource
    );
    let pd_a = t
        .cmd_as(ua, CmdOpcode::CreatePd, &0u32)
        .ok::<CreatePdOut>()
        .pdn
        .to_ne();
    // Another context (or none) does not see it.
    let region = t.hal.dma_alloc(4096).unwrap();
    let mr_in = t.reg_mr_in(pd_a, &region, access::LOCAL_WRITE);
    t.cmd_as(ub, CmdOpcode::RegMr, &mr_in)
        .fails(BadResource, offset_of!(RegMrIn, pdn));
    t.cmd(CmdOpcode::RegMr, &mr_in)
        .fails(BadResource, offset_of!(RegMrIn, pdn));
    let destroy_pd = ObjIn {
        id: le32::from_ne(pd_a),
    };
    t.cmd_as(ub, CmdOpcode::DestroyPd, &destroy_pd)
        .fails(BadResource, offset_of!(ObjIn, id));
    let key = t
        .cmd_as(ua, CmdOpcode::RegMr, &mr_in)
        .ok::<RegMrOut>()
        .lkey
        .to_ne();
    t.cmd_as(
        ub,
        CmdOpcode::DeregMr,
        &ObjIn {
            id: le32::from_ne(key),
        },
    )
    .fails(BadResource, offset_of!(ObjIn, id));
    // Doorbell pages: a context's own only; uid 0 those of no context.
    let buf = t.hal.dma_alloc(64 << 4).unwrap();
    let dbrec = t.hal.dma_alloc(8).unwrap();
    let cq_in = |page: u32| CreateCqIn {
        log_size: le32::from_ne(4),
        uar_page: le32::from_ne(page),
        eqn: le32::from_ne(0),
        reserved: le32::from_ne(0),
        buf_iova: le64::from_ne(buf.iova()),
        dbrec_iova: le64::from_ne(dbrec.iova()),
    };
    t.cmd_as(ua, CmdOpcode::CreateCq, &cq_in(8))
        .fails(BadParam, offset_of!(CreateCqIn, uar_page));
    t.cmd(CmdOpcode::CreateCq, &cq_in(3))
        .fails(BadParam, offset_of!(CreateCqIn, uar_page));
    let cqn = t
        .cmd_as(ua, CmdOpcode::CreateCq, &cq_in(7))
        .ok::<CreateCqOut>()
        .cqn
        .to_ne();
    t.cmd_as(
        ub,
        CmdOpcode::DestroyCq,
        &ObjIn {
            id: le32::from_ne(cqn),
        },
    )
    .fails(BadResource, offset_of!(ObjIn, id));
    // Closing a context takes its objects and frees its pages.
    t.cmd_as(
        ub,
        CmdOpcode::DeallocUctx,
        &ObjIn {
            id: le32::from_ne(ua),
        },
    )
    .fails(BadResource, offset_of!(ObjIn, id));
    t.cmd(
        CmdOpcode::DeallocUctx,
        &ObjIn {
            id: le32::from_ne(ua),
        },
    )
    .ok::<u32>();
    assert_eq!(
        t.cmd_as(ua, CmdOpcode::CreatePd, &0u32).status(),
        BadResource
    );
    let again: AllocUctxOut = open(&mut t, 0, 8).ok();
    assert_eq!((again.uid.to_ne(), again.uar_first.to_ne()), (1, 0));
    // The objects went with it: the numbers are free.
    let pd = t
        .cmd_as(1, CmdOpcode::CreatePd, &0u32)
        .ok::<CreatePdOut>()
        .pdn
        .to_ne();
    assert_eq!(pd, pd_a);
    let cq2 = t
        .cmd_as(1, CmdOpcode::CreateCq, &cq_in(0))
        .ok::<CreateCqOut>()
        .cqn
        .to_ne();
    assert_eq!(cq2, cqn);
}

fn unimplemented_opcodes(mode: ExecMode) {
    let mut t = bring_up(mode);
    // A device configured without SRQs has none of their commands.
    let mut no_srq = bring_up_with(
        EmuConfig {
            max_srq: 0,
            ..EmuConfig::default()
        },
        mode,
    );
    let caps = DevCaps::from_bits(le32::from_ne(no_srq.hal.mmio_read32(0, bar0::CAP_DEV)));
    assert!(!caps.srq());
    for op in [
        CmdOpcode::CreateSrq,
        CmdOpcode::DestroySrq,
        CmdOpcode::ModifySrq,
        CmdOpcode::QuerySrq,
    ] {
        assert_eq!(no_srq.cmd(op, &0u32).status(), CmdStatus::BadOpcode);
    }
    assert_eq!(t.raw_cmd(0x7777, &[]).status(), CmdStatus::BadOpcode);
    // The queue keeps working after many commands (ring wrap-around).
    for _ in 0..40 {
        t.sync();
    }
}

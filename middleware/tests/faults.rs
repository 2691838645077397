//! FaultHal around the device model: how rnic-driver takes a device that
//! is no rnic, one that never gets ready, commands that never run or fail
//! or hand out a number in use, DMA that cannot be had, and corrupt CQEs.

mod common;

use std::sync::Arc;

use common::{connect, one, self_path};
use rnic_driver::{
    access, send_flags, Config, Context, ErrorKind, Payload, QpCap, QpInit, QpType, RemoteAddr,
    SendOp, SendWr, WcStatus, WorkCompletion,
};
use rnic_emu::{EmuConfig, EmuDevice, EmuHal, ExecMode};
use rnic_hw_regs::bar0;
use rnic_hw_regs::cmd::{CmdOpcode, CmdStatus};
use rnic_hw_regs::pci::BAR_REGS;
use rnic_middleware::{CqeFault, FaultHal, FaultHandle, Memory, Timeline, TraceHal};

type H = FaultHal<EmuHal>;

/// An inline model under FaultHal, not opened yet.
fn platform() -> (Arc<EmuDevice>, H, FaultHandle) {
    let dev = EmuDevice::new(EmuConfig::default(), ExecMode::Inline);
    let (hal, faults) = FaultHal::new(dev.hal());
    (dev, hal, faults)
}

/// Short timeouts: the faults below make the driver wait for nothing.
fn short() -> Config {
    Config {
        reset_timeout_ns: 2_000_000,
        enable_timeout_ns: 2_000_000,
        cmd_timeout_ns: 2_000_000,
        ..Config::default()
    }
}

#[test]
fn a_device_that_is_no_rnic_is_refused_and_never_written() {
    let (_dev, hal, faults) = platform();
    faults.set(|f| f.reads.push((BAR_REGS, bar0::ID, 0x0100_00ed)));
    // The trace outside sees what the driver did.
    let mem = Arc::new(Memory::default());
    let traced = TraceHal::new(hal, Timeline::new(vec![mem.clone()]));
    let e = Context::open(traced).err().expect("refused");
    assert_eq!(e.kind(), ErrorKind::NoDevice);
    assert!(e.to_string().contains("0x010000ed"), "{e}");
    assert!(faults.injected().reads >= 1);
    let ev = mem.events();
    assert!(
        ev.iter().any(|e| e.text.contains("ID -> 0x10000ed")),
        "{ev:?}"
    );
    assert!(
        ev.iter().all(|e| e.kind != "mmio_write"),
        "no register written: {ev:?}"
    );
}

#[test]
fn a_device_that_never_gets_ready_times_out() {
    let (_dev, hal, faults) = platform();
    // STATUS reads 0: never ready after the reset.
    faults.set(|f| f.reads.push((BAR_REGS, bar0::STATUS, 0)));
    let e = Context::open_with(hal, short()).err().expect("refused");
    assert_eq!(e.kind(), ErrorKind::TimedOut, "{e}");
}

#[test]
fn commands_that_never_run_time_out() {
    let (_dev, hal, faults) = platform();
    let ctx = Context::open_with(hal, short()).unwrap();
    faults.set(|f| f.hang_commands = true);
    let e = ctx.alloc_pd().err().expect("timed out");
    assert_eq!(e.kind(), ErrorKind::TimedOut, "{e}");
    assert_eq!(faults.injected().commands_hung, 1);
}

#[test]
fn dma_that_cannot_be_had_fails_the_object_only() {
    let (_dev, hal, faults) = platform();
    let ctx = Context::open(hal).unwrap();
    faults.set(|f| f.fail_dma_allocs = 1);
    let e = ctx.create_cq(8).err().expect("no memory");
    assert_eq!(e.kind(), ErrorKind::NoMemory, "{e}");
    assert!(ctx.create_cq(8).is_ok(), "the next one works");
    let pd = ctx.alloc_pd().unwrap();
    let mut buf = vec![0u8; 4096];
    let ptr = std::ptr::NonNull::new(buf.as_mut_ptr()).unwrap();
    faults.set(|f| f.fail_dma_maps = 1);
    // SAFETY: `buf` outlives the MR (dropped below, before it).
    let e = unsafe { pd.reg_mr(ptr, buf.len(), access::LOCAL_WRITE) }
        .err()
        .expect("no mapping");
    assert_eq!(e.kind(), ErrorKind::NoMemory, "{e}");
    // SAFETY: as above.
    let mr = unsafe { pd.reg_mr(ptr, buf.len(), access::LOCAL_WRITE) }.unwrap();
    drop(mr);
    assert_eq!(faults.injected().dma_failures, 2);
}

#[test]
fn a_failed_command_reports_its_status_and_the_next_one_runs() {
    let (_dev, hal, faults) = platform();
    let ctx = Context::open(hal).unwrap();
    faults.set(|f| f.device.fail_command = Some((CmdOpcode::CreatePd, CmdStatus::NoResources, 0)));
    let e = ctx.alloc_pd().err().expect("refused");
    assert_eq!(e.kind(), ErrorKind::NoMemory, "{e}");
    let pd = ctx.alloc_pd().unwrap();
    assert_eq!(faults.injected().commands_changed, 1);
    // Refused, the command never ran: the PD handed back is still the
    // device's, and destroying it again succeeds.
    faults.set(|f| f.device.fail_command = Some((CmdOpcode::DestroyPd, CmdStatus::Internal, 0)));
    let e = pd.destroy().unwrap_err();
    assert_eq!(
        rnic_driver::CmdFailure::of(&e.error).map(|c| c.status),
        Some(CmdStatus::Internal)
    );
    e.object.expect("handed back").destroy().unwrap();
}

#[test]
fn a_number_already_in_use_is_refused() {
    let (_dev, hal, faults) = platform();
    let ctx = Context::open(hal).unwrap();
    let first = ctx.create_cq(8).unwrap();
    faults.set(|f| f.device.number = Some((CmdOpcode::CreateCq, first.cq_num())));
    let e = ctx.create_cq(8).err().expect("a number in use");
    assert_eq!(e.kind(), ErrorKind::Io, "{e}");
    assert_eq!(faults.injected().commands_changed, 1);
    // The first CQ is still its own.
    let mut wc = [WorkCompletion::default()];
    assert_eq!(first.poll(&mut wc).unwrap(), 0);
}

#[test]
fn corrupt_cqes_are_reported_not_taken() {
    let (_dev, hal, faults) = platform();
    let ctx = Context::open(hal).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd
        .alloc_mr(4096, access::LOCAL_WRITE | access::REMOTE_WRITE)
        .unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let cap = QpCap {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let init = QpInit {
        send_cq: &cq,
        recv_cq: &cq,
        srq: None,
        cap,
        qp_type: QpType::Rc,
        sq_sig_all: false,
    };
    let (a, b) = (pd.create_qp(&init).unwrap(), pd.create_qp(&init).unwrap());
    connect(&a, b.qp_num(), self_path(&ctx));
    connect(&b, a.qp_num(), self_path(&ctx));
    let write = |wr_id| SendWr {
        wr_id,
        op: SendOp::RdmaWrite {
            remote: RemoteAddr {
                addr: mr.addr() + 2048,
                rkey: mr.rkey(),
            },
        },
        payload: Payload::Sgl(&[]),
        flags: send_flags::SIGNALED,
    };
    let mut wc = [WorkCompletion::default()];
    // A CQE for a QP the CQ does not serve.
    faults.set(|f| f.device.cqe = Some(CqeFault::Qpn(0x77)));
    a.post_send(&[write(1)]).unwrap();
    let e = cq.poll(&mut wc).expect_err("refused");
    assert_eq!(e.kind(), ErrorKind::Io, "{e}");
    assert!(e.to_string().contains("QP 119"), "{e}");
    // One whose wqe_counter names no outstanding WQE.
    faults.set(|f| f.device.cqe = Some(CqeFault::WqeCounter(500)));
    a.post_send(&[write(2)]).unwrap();
    let e = cq.poll(&mut wc).expect_err("refused");
    assert!(
        e.to_string().contains("outside its outstanding WQEs"),
        "{e}"
    );
    // An unknown status: the completion is an error one.
    faults.set(|f| f.device.cqe = Some(CqeFault::Status(200)));
    a.post_send(&[write(3)]).unwrap();
    let w = one(&cq);
    assert_eq!((w.wr_id, w.status), (3, WcStatus::GeneralErr));
    assert_eq!(faults.injected().cqes_changed, 3);
}

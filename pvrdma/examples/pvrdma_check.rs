//! The guest half of the PVRDMA VM test (`tests/pvrdma/run.sh`): drives
//! QEMU's pvrdma function through `rnic-vfio` and `rnic-pvrdma` inside a
//! VM with an emulated Intel IOMMU.
//!
//! ```text
//! pvrdma_check [--registers] BDF   # BDF: the pvrdma function, bound to vfio-pci
//! ```
//!
//! Brings the device up, runs commands that need no backend traffic
//! (QUERY_PORT, QUERY_PKEY, a context, a PD, MRs, an armed CQ and an
//! RC QP taken to INIT, given a receive and refused a WRITE, all made and
//! destroyed, a command the device does not implement), tears it down, and
//! does it all again in the same boot under rnic-middleware's `TraceHal`
//! for PVRDMA: the trace must name the registers, commands, responses and
//! WQEs as the interface defines them (with `--registers` it is printed,
//! one line per event, as it happens). A third open runs under `FaultHal`:
//! faults injected into the device's real responses and into the platform
//! must reach the driver as errors, and the device go on. Each check prints
//! `ok   NAME` or `FAIL NAME: why`; the last line is `pvrdma_check: N
//! passed, M failed` and the exit status is 0 only when nothing failed.

use std::process::ExitCode;
use std::ptr::NonNull;
use std::sync::Arc;

use rnic_middleware::pvrdma::RespFault;
use rnic_middleware::{FaultHal, FaultHandle, Memory, Print, Pvrdma, Sink, Timeline, TraceHal};
use rnic_pvrdma::{Cq, Device, Pd, QpInit, Uc};
use rnic_pvrdma_regs::bar::UAR;
use rnic_pvrdma_regs::cmd::{
    access, qp_attr_mask, CmdOpcode, QpAttr, QpState, QpType, QueryPkey, QueryPkeyResp, QueryPort,
    QueryPortResp, ResizeCq, ResizeCqResp,
};
use rnic_pvrdma_regs::{le16, le32};
use rnic_queues::Hal;
use rnic_verbs::{ErrorKind, Payload, RecvWr, RemoteAddr, SendOp, SendWr, Sge};
use rnic_vfio::{IrqMode, VfioHal, VfioOptions};

/// Page-aligned memory for MRs.
#[repr(C, align(4096))]
struct Pages([u8; 4 * 4096]);

#[derive(Default)]
struct Checks {
    passed: u32,
    failed: u32,
}

impl Checks {
    fn check(&mut self, name: &str, ok: bool, detail: impl FnOnce() -> String) -> bool {
        if ok {
            self.passed += 1;
            println!("ok   {name}");
        } else {
            self.failed += 1;
            println!("FAIL {name}: {}", detail());
        }
        ok
    }
}

/// The platform: the pvrdma function through VFIO, with its three MSI-X
/// vectors.
fn vfio(c: &mut Checks, bdf: &str, n: u32) -> Option<VfioHal> {
    let opts = VfioOptions::default().irqs(IrqMode::Msix(3));
    match VfioHal::open_with(bdf, &opts) {
        Ok(h) => Some(h),
        Err(e) => {
            c.check(&format!("open {n}: vfio"), false, || e.to_string());
            None
        }
    }
}

/// One bring-up, the commands, and teardown.
fn round<H: Hal>(c: &mut Checks, hal: H, n: u32) {
    let dev = match Device::open(hal) {
        Ok(d) => d,
        Err(e) => {
            c.check(&format!("open {n}: bring-up"), false, || e.to_string());
            return;
        }
    };
    let caps = *dev.caps();
    println!(
        "pvrdma_check: round {n}: version {}, fw {:#x}, vendor {:#x}:{:#x}, max_qp {}, \
         max_cq {}, max_mr {}, max_pd {}, max_sge {}, gid types {:#x}, UAR at {:#x}",
        dev.version(),
        caps.fw_ver.to_ne(),
        caps.vendor_id.to_ne(),
        caps.vendor_part_id.to_ne(),
        caps.max_qp.to_ne(),
        caps.max_cq.to_ne(),
        caps.max_mr.to_ne(),
        caps.max_pd.to_ne(),
        caps.max_sge.to_ne(),
        caps.gid_types,
        dev.hal().bar_address(UAR).unwrap_or(0),
    );
    c.check(&format!("open {n}: bring-up"), true, String::new);
    c.check(
        &format!("open {n}: capabilities"),
        caps.max_qp.to_ne() > 0 && caps.max_cq.to_ne() > 0 && caps.max_pd.to_ne() > 0,
        || format!("{caps:?}"),
    );

    let port = dev.exec::<_, QueryPortResp>(
        CmdOpcode::QueryPort,
        &QueryPort {
            port_num: 1,
            ..Default::default()
        },
    );
    c.check(
        &format!("round {n}: QUERY_PORT"),
        port.as_ref()
            .is_ok_and(|p| p.attrs.gid_tbl_len.to_ne() > 0 && p.attrs.max_mtu.to_ne() > 0),
        || format!("{port:?}"),
    );
    if let Ok(p) = &port {
        let a = p.attrs;
        println!(
            "pvrdma_check: port 1: state {}, max_mtu {}, active_mtu {}, gid_tbl_len {}, \
             pkey_tbl_len {}",
            a.state.to_ne(),
            a.max_mtu.to_ne(),
            a.active_mtu.to_ne(),
            a.gid_tbl_len.to_ne(),
            a.pkey_tbl_len.to_ne()
        );
    }

    let pkey = dev.exec::<_, QueryPkeyResp>(
        CmdOpcode::QueryPkey,
        &QueryPkey {
            port_num: 1,
            index: 0,
            ..Default::default()
        },
    );
    c.check(
        &format!("round {n}: QUERY_PKEY 0 is the default P_Key"),
        pkey.as_ref().is_ok_and(|p| p.pkey.to_ne() == 0xffff),
        || format!("{pkey:?}"),
    );

    // A context, a PD and a CQ in it, and their teardown.
    let uc = dev.create_uc();
    c.check(&format!("round {n}: CREATE_UC"), uc.is_ok(), || {
        format!("{uc:?}")
    });
    if let Ok(uc) = uc {
        let pd = dev.create_pd(&uc);
        c.check(&format!("round {n}: CREATE_PD"), pd.is_ok(), || {
            format!("{pd:?}")
        });
        if let Ok(pd) = pd {
            let gone = dev.destroy_pd(pd);
            c.check(&format!("round {n}: DESTROY_PD"), gone.is_ok(), || {
                format!("{gone:?}")
            });
        }
        if let Ok(pd) = dev.create_pd(&uc) {
            let mut buf = Box::new(Pages([0; 4 * 4096]));
            let base = NonNull::new(buf.0.as_mut_ptr()).expect("a Box's pointer");
            let reg = |at: usize, len: usize| {
                let addr = NonNull::new(base.as_ptr().wrapping_add(at)).expect("in the buffer");
                // SAFETY: `buf` outlives every MR, each deregistered below.
                unsafe { dev.reg_mr(&pd, addr, len, addr.as_ptr() as u64, access::LOCAL_WRITE) }
            };
            let mr = reg(0, 3 * 4096);
            let odd = reg(100, 3 * 4096);
            c.check(
                &format!("round {n}: CREATE_MR of 12 KiB"),
                mr.is_ok(),
                || format!("{mr:?}"),
            );
            // QEMU's quirk: it wants nchunks == length / 4096 rounded up,
            // so 12 KiB from 100 bytes into a page (4 pages) is EINVAL.
            c.check(
                &format!("round {n}: QEMU refuses an MR over one page more than its length"),
                odd.as_ref()
                    .is_err_and(|e| e.kind() == ErrorKind::InvalidArgument),
                || format!("{odd:?}"),
            );
            for mr in [mr, odd].into_iter().flatten() {
                println!(
                    "pvrdma_check: MR handle {}, lkey {:#x}, rkey {:#x}",
                    mr.handle(),
                    mr.lkey(),
                    mr.rkey()
                );
                let gone = dev.dereg_mr(mr);
                c.check(&format!("round {n}: DESTROY_MR"), gone.is_ok(), || {
                    format!("{gone:?}")
                });
            }
            let _ = dev.destroy_pd(pd);
        }
        let cq = dev.create_cq(&uc, 100);
        c.check(
            &format!("round {n}: CREATE_CQ of 128 CQEs, empty"),
            cq.as_ref()
                .is_ok_and(|cq| cq.capacity() == 128 && matches!(dev.poll_cq(cq), Ok(None))),
            || format!("{cq:?}"),
        );
        if let Ok(cq) = cq {
            dev.arm_cq(&cq, false);
            if let Ok(pd) = dev.create_pd(&uc) {
                qp_round(c, &dev, n, &uc, &pd, &cq);
                let _ = dev.destroy_pd(pd);
            }
            let gone = dev.destroy_cq(cq);
            c.check(&format!("round {n}: DESTROY_CQ"), gone.is_ok(), || {
                format!("{gone:?}")
            });
        }
        let gone = dev.destroy_uc(uc);
        c.check(&format!("round {n}: DESTROY_UC"), gone.is_ok(), || {
            format!("{gone:?}")
        });
    }

    // QEMU 7.2 has no RESIZE_CQ: ERR reads 0xffff and nothing is answered.
    let resize = dev.exec::<_, ResizeCqResp>(
        CmdOpcode::ResizeCq,
        &ResizeCq {
            cq_handle: le32::from_ne(1),
            cqe: le32::from_ne(64),
            ..Default::default()
        },
    );
    c.check(
        &format!("round {n}: an unimplemented command is EOPNOTSUPP"),
        resize
            .as_ref()
            .is_err_and(|e| e.kind() == ErrorKind::NotSupported),
        || format!("{resize:?}"),
    );
    if let Err(e) = &resize {
        println!("pvrdma_check: RESIZE_CQ: {e}");
    }
    // Teardown: interrupts masked, every page freed and unmapped.
    drop(dev);
}

/// An RC QP made, taken to INIT, given a receive, refused a WRITE (QEMU
/// would send it as a SEND), and destroyed.
fn qp_round<H: Hal>(c: &mut Checks, dev: &Device<H>, n: u32, uc: &Uc, pd: &Pd, cq: &Cq) {
    let init = QpInit {
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        sq_sig_all: false,
    };
    let qp = dev.create_qp(uc, pd, &init);
    c.check(&format!("round {n}: CREATE_QP (RC)"), qp.is_ok(), || {
        format!("{qp:?}")
    });
    let Ok(mut qp) = qp else { return };
    println!(
        "pvrdma_check: QP handle {}, number {}",
        qp.handle(),
        qp.qpn()
    );
    let attrs = QpAttr {
        qp_state: le32::from_ne(QpState::Init.raw()),
        pkey_index: le16::from_ne(0),
        port_num: 1,
        qp_access_flags: le32::from_ne(access::LOCAL_WRITE),
        ..Default::default()
    };
    let mask = qp_attr_mask::STATE
        | qp_attr_mask::PKEY_INDEX
        | qp_attr_mask::PORT
        | qp_attr_mask::ACCESS_FLAGS;
    let inited = dev.modify_qp(&qp, mask, &attrs);
    c.check(
        &format!("round {n}: MODIFY_QP to INIT"),
        inited.is_ok(),
        || format!("{inited:?}"),
    );
    let mut buf = Box::new(Pages([0; 4 * 4096]));
    let addr = NonNull::new(buf.0.as_mut_ptr()).expect("a Box's pointer");
    // SAFETY: `buf` outlives the MR, deregistered below.
    let mr = unsafe { dev.reg_mr(pd, addr, 4096, addr.as_ptr() as u64, access::LOCAL_WRITE) };
    if let Ok(mr) = mr {
        let sge = [Sge {
            addr: addr.as_ptr() as u64,
            length: 4096,
            lkey: mr.lkey(),
        }];
        let posted = dev.post_recv(
            &mut qp,
            &[RecvWr {
                wr_id: 1,
                sg_list: &sge,
            }],
        );
        c.check(
            &format!("round {n}: a receive posted"),
            posted.is_ok(),
            || format!("{posted:?}"),
        );
        let write = SendWr {
            wr_id: 2,
            op: SendOp::RdmaWrite {
                remote: RemoteAddr {
                    addr: addr.as_ptr() as u64,
                    rkey: mr.rkey(),
                },
            },
            flags: 0,
            payload: Payload::Sgl(&sge),
        };
        let refused = dev.post_send(&mut qp, &[write]);
        c.check(
            &format!("round {n}: an RDMA WRITE is refused, not sent as a SEND"),
            refused
                .as_ref()
                .is_err_and(|e| e.index == 0 && e.error.kind() == ErrorKind::NotSupported),
            || format!("{refused:?}"),
        );
        let gone = dev.destroy_qp(qp);
        c.check(&format!("round {n}: DESTROY_QP"), gone.is_ok(), || {
            format!("{gone:?}")
        });
        let _ = dev.dereg_mr(mr);
    } else {
        c.check(&format!("round {n}: CREATE_MR for the QP"), false, || {
            format!("{mr:?}")
        });
        let _ = dev.destroy_qp(qp);
    }
}

/// What the second round's trace must hold: the bring-up registers, the
/// commands and their responses, the WQE at the RQ doorbell, the CQ's arm,
/// each by its interface name.
fn trace_checks(c: &mut Checks, trace: &Memory) {
    let events = trace.events();
    let texts: Vec<&str> = events.iter().map(|e| e.text.as_str()).collect();
    let has = |needle: &str| texts.iter().any(|t| t.contains(needle));
    let expected = [
        "VERSION -> ",
        "DSRLOW <- ",
        "DSRHIGH <- ",
        "IMR <- 0x0 (every vector unmasked)",
        "CTL <- 0x0 (ACTIVATE)",
        "ERR -> 0x0 (no error)",
        "CMD QUERY_PORT cookie",
        "RESP QUERY_PORT cookie",
        "CMD CREATE_UC cookie",
        "CMD CREATE_MR cookie",
        "RESP CREATE_MR cookie",
        "CMD CREATE_CQ cookie",
        "RESP CREATE_CQ cookie",
        "CQ doorbell handle",
        "CMD CREATE_QP cookie",
        "RESP CREATE_QP cookie",
        "CMD MODIFY_QP cookie",
        "QP doorbell handle",
        "RWQE qp ",
        "CMD DESTROY_QP cookie",
    ];
    for needle in expected {
        c.check(&format!("trace: {needle}"), has(needle), || {
            format!("{} events, none with {needle:?}", texts.len())
        });
    }
    // The response the device wrote to the CREATE_QP it was handed.
    let qp = texts
        .iter()
        .position(|t| t.starts_with("CMD CREATE_QP"))
        .zip(texts.iter().position(|t| t.starts_with("RESP CREATE_QP")));
    c.check(
        "trace: CREATE_QP's response follows its request, acked ok",
        qp.is_some_and(|(req, resp)| req < resp && texts[resp].contains(": ok qpn ")),
        || format!("{qp:?}"),
    );
}

/// Faults injected into the device's real responses and into the
/// platform reach the driver as errors, and the device goes on.
fn fault_checks<H: Hal>(c: &mut Checks, hal: H, faults: &FaultHandle<Pvrdma>) {
    let dev = match Device::open(hal) {
        Ok(d) => d,
        Err(e) => {
            c.check("faults: bring-up", false, || e.to_string());
            return;
        }
    };
    let Ok(uc) = dev.create_uc() else {
        c.check("faults: CREATE_UC", false, String::new);
        return;
    };
    faults.set(|f| f.device.response = Some((CmdOpcode::CreatePd, RespFault::Err(12))));
    let pd = dev.create_pd(&uc);
    c.check(
        "faults: a response with err 12 is ENOMEM",
        pd.as_ref().is_err_and(|e| e.kind() == ErrorKind::NoMemory),
        || format!("{pd:?}"),
    );
    let wrong = CmdOpcode::DestroyPd.ack();
    faults.set(|f| f.device.response = Some((CmdOpcode::CreatePd, RespFault::Ack(wrong))));
    let pd = dev.create_pd(&uc);
    c.check(
        "faults: a response acking another command is EIO",
        pd.as_ref().is_err_and(|e| e.kind() == ErrorKind::Io),
        || format!("{pd:?}"),
    );
    faults.set(|f| f.fail_dma_allocs = 1);
    let cq = dev.create_cq(&uc, 16);
    c.check(
        "faults: a CQ whose memory cannot be had is ENOMEM",
        cq.as_ref().is_err_and(|e| e.kind() == ErrorKind::NoMemory),
        || format!("{cq:?}"),
    );
    let pd = dev.create_pd(&uc);
    let cq = dev.create_cq(&uc, 16);
    c.check(
        "faults: once fired, the device answers as before",
        pd.is_ok() && cq.is_ok() && faults.injected().commands_changed == 2,
        || format!("{pd:?} {cq:?} {:?}", faults.injected()),
    );
    if let Ok(cq) = cq {
        let _ = dev.destroy_cq(cq);
    }
    if let Ok(pd) = pd {
        let _ = dev.destroy_pd(pd);
    }
    let _ = dev.destroy_uc(uc);
}

fn main() -> ExitCode {
    env_logger::init();
    let mut args: Vec<String> = std::env::args().skip(1).collect();
    let registers = args.first().is_some_and(|a| a == "--registers");
    if registers {
        args.remove(0);
    }
    let [bdf] = &args[..] else {
        eprintln!("usage: pvrdma_check [--registers] BDF");
        return ExitCode::from(2);
    };
    let mut c = Checks::default();
    if let Some(hal) = vfio(&mut c, bdf, 1) {
        round(&mut c, hal, 1);
    }
    // Round 2 traced, then a third open under faults.
    if let Some(hal) = vfio(&mut c, bdf, 2) {
        let memory = Arc::new(Memory::default());
        let mut sinks: Vec<Arc<dyn Sink>> = vec![memory.clone()];
        if registers {
            sinks.push(Arc::new(Print));
        }
        round(
            &mut c,
            TraceHal::<_, Pvrdma>::of(hal, Timeline::new(sinks)),
            2,
        );
        trace_checks(&mut c, &memory);
    }
    if let Some(hal) = vfio(&mut c, bdf, 3) {
        let (faulty, faults) = FaultHal::<_, Pvrdma>::of(hal);
        fault_checks(&mut c, faulty, &faults);
    }
    println!("pvrdma_check: {} passed, {} failed", c.passed, c.failed);
    if c.failed == 0 && c.passed > 0 {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

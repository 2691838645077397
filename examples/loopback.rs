//! Two RC queue pairs on one emulated rnic device, connected to each other
//! through port 1 on a loopback wire (every request and ACK is a RoCEv2
//! frame that comes back): a SEND, an RDMA WRITE and an RDMA READ, each
//! verified byte for byte.
//!
//! ```text
//! cargo run --example loopback            # device model runs inline
//! cargo run --example loopback -- --thread  # device model on its own thread
//! cargo run --example loopback -- --registers          # and what crossed the boundary
//! cargo run --example loopback -- --trace loopback.jsonl  # the same as JSON lines, for rnic-trace
//! ```
//!
//! The platform is wrapped in rnic-middleware's `TraceHal` and the wire in
//! a tap, on one timeline: `--registers` prints every register access,
//! command, WQE, frame and CQE as it happens, beneath the transfer that
//! caused it; `--trace FILE` writes them for `rnic-trace FILE`.
//!
//! Everything below goes through the verbs API of `rnic-driver`; the driver
//! reaches the device model only through BAR registers, doorbells and DMA
//! memory, exactly as it would reach a NIC bound to vfio-pci.

use std::error::Error;
use std::process::ExitCode;
use std::time::{Duration, Instant};

use rnic_driver::{
    access, qp_attr, AhAttr, Context, Cq, Mr, Mtu, Payload, Qp, QpAttr, QpCap, QpInit, QpState,
    QpType, RecvWr, RemoteAddr, SendOp, SendWr, WcOpcode, WcStatus, WorkCompletion,
};
use rnic_emu::net::{Direction, Loopback, Tap};
use rnic_emu::wire::frame::describe;
use rnic_emu::{EmuConfig, EmuDevice, EmuHal, ExecMode};
use rnic_middleware::{JsonLines, Print, Sink, Timeline, TraceHal};

type Res<T> = Result<T, Box<dyn Error>>;
/// The platform: the model's, traced.
type H = TraceHal<EmuHal>;

fn main() -> ExitCode {
    env_logger::init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = if args.iter().any(|a| a == "--thread") {
        ExecMode::Thread
    } else {
        ExecMode::Inline
    };
    let mut sinks: Vec<std::sync::Arc<dyn Sink>> = Vec::new();
    if args.iter().any(|a| a == "--registers") {
        sinks.push(std::sync::Arc::new(Print));
    }
    if let Some(i) = args.iter().position(|a| a == "--trace") {
        let Some(path) = args.get(i + 1) else {
            eprintln!("loopback: --trace needs a file");
            return ExitCode::FAILURE;
        };
        match std::fs::File::create(path) {
            Ok(f) => sinks.push(std::sync::Arc::new(JsonLines::new(f))),
            Err(e) => {
                eprintln!("loopback: {path}: {e}");
                return ExitCode::FAILURE;
            }
        }
    }
    match run(mode, Timeline::new(sinks)) {
        Ok(()) => {
            println!("\nloopback: all transfers verified");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("\nloopback: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(mode: ExecMode, tl: std::sync::Arc<Timeline>) -> Res<()> {
    // The NIC's frames go on the timeline too, through a tap on its wire.
    let t = tl.clone();
    let tap = Tap::new(
        Loopback::default(),
        std::sync::Arc::new(move |d, f: &[u8]| t.frame(d == Direction::Tx, describe(f), f)),
    );
    let dev = EmuDevice::builder(EmuConfig::default())
        .mode(mode)
        .wire(tap)
        .build()?;
    tl.note("open the device: rnic-driver's bring-up");
    let ctx = Context::open(TraceHal::new(dev.hal(), tl.clone()))?;

    let attr = ctx.query_device()?;
    let port = ctx.query_port(1)?;
    let gid = ctx.query_gid(1, 0)?;
    println!("rnic emulated device ({mode:?} execution)");
    println!(
        "  vendor {:#06x} part {:#06x} fw {:#x}: {} QPs, {} CQs, {} MRs, {} SGEs, {} B inline",
        attr.vendor_id,
        attr.vendor_part_id,
        attr.fw_ver,
        attr.max_qp,
        attr.max_cq,
        attr.max_mr,
        attr.max_sge,
        attr.max_inline_data
    );
    println!(
        "  port 1: {:?}, {:?} link, active MTU {} B, MAC {}, GID[0] {}",
        port.state,
        port.link_layer,
        port.active_mtu.bytes(),
        hex(&port.mac, ":"),
        std::net::Ipv6Addr::from(gid)
    );

    let pd = ctx.alloc_pd()?;
    let rights = access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ;
    let mr_a = pd.alloc_mr(4096, rights)?;
    let mr_b = pd.alloc_mr(4096, rights)?;
    let cq_a = ctx.create_cq(16)?;
    let cq_b = ctx.create_cq(16)?;
    let cap = QpCap {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 2,
        max_recv_sge: 2,
        max_inline_data: 64,
    };
    let qp_a = pd.create_qp(&QpInit {
        send_cq: &cq_a,
        recv_cq: &cq_a,
        srq: None,
        cap,
        qp_type: QpType::Rc,
        sq_sig_all: false,
    })?;
    let qp_b = pd.create_qp(&QpInit {
        send_cq: &cq_b,
        recv_cq: &cq_b,
        srq: None,
        cap,
        qp_type: QpType::Rc,
        sq_sig_all: false,
    })?;
    let path = AhAttr {
        dgid: gid,
        dmac: port.mac,
        hop_limit: 64,
        port_num: 1,
        is_global: true,
        ..AhAttr::default()
    };
    tl.note("connect the QPs to each other: RESET -> INIT -> RTR -> RTS");
    connect(&qp_a, qp_b.qp_num(), path, rights)?;
    connect(&qp_b, qp_a.qp_num(), path, rights)?;
    println!(
        "  QP {} <-> QP {} connected (RC, RTS), MRs lkey/rkey {:#x} and {:#x}\n",
        qp_a.qp_num(),
        qp_b.qp_num(),
        mr_a.rkey(),
        mr_b.rkey()
    );

    // SEND: QP b posts a receive buffer, QP a sends a message gathered from
    // two pieces of its MR.
    let (head, tail) = (&b"hello from "[..], &b"QP a over the loopback port"[..]);
    mr_a.write(0, head)?;
    mr_a.write(512, tail)?;
    tl.note("SEND: QP b posts a receive, QP a sends two pieces of its MR");
    qp_b.post_recv(&[RecvWr {
        wr_id: 100,
        sg_list: &[mr_b.sge(0, 256)?],
    }])?;
    qp_a.post_send(&[SendWr {
        wr_id: 1,
        op: SendOp::Send,
        payload: Payload::Sgl(&[
            mr_a.sge(0, head.len() as u32)?,
            mr_a.sge(512, tail.len() as u32)?,
        ]),
        flags: rnic_driver::send_flags::SIGNALED,
    }])?;
    expect(&cq_a, 1, WcOpcode::Send)?;
    let wc = expect(&cq_b, 100, WcOpcode::Recv)?;
    let got = read(&mr_b, 0, wc.byte_len as usize)?;
    let want = [head, tail].concat();
    check("SEND", &got, &want)?;
    println!(
        "SEND        QP {} -> QP {}  {:4} B  {:?}",
        qp_a.qp_num(),
        qp_b.qp_num(),
        wc.byte_len,
        String::from_utf8_lossy(&got)
    );

    // RDMA WRITE: QP a places 256 bytes straight into QP b's MR; QP b's CPU
    // is not involved and gets no completion.
    let pattern: Vec<u8> = (0..256u32).map(|i| (i * 7 + 3) as u8).collect();
    mr_a.write(1024, &pattern)?;
    tl.note("RDMA WRITE: QP a writes 256 bytes into QP b's MR");
    qp_a.post_send(&[SendWr {
        wr_id: 2,
        op: SendOp::RdmaWrite {
            remote: RemoteAddr {
                addr: mr_b.addr() + 2048,
                rkey: mr_b.rkey(),
            },
        },
        payload: Payload::Sgl(&[mr_a.sge(1024, 256)?]),
        flags: rnic_driver::send_flags::SIGNALED,
    }])?;
    expect(&cq_a, 2, WcOpcode::RdmaWrite)?;
    check("RDMA WRITE", &read(&mr_b, 2048, 256)?, &pattern)?;
    println!(
        "RDMA WRITE  QP {} -> MR {:#x} @ {:#x}  {:4} B  {}...",
        qp_a.qp_num(),
        mr_b.rkey(),
        mr_b.addr() + 2048,
        pattern.len(),
        hex(&pattern[..8], " ")
    );

    // RDMA READ: QP a fetches bytes from QP b's MR into its own.
    let remote = b"data that lives in QP b's memory";
    mr_b.write(3072, remote)?;
    tl.note("RDMA READ: QP a reads them back into its own MR");
    qp_a.post_send(&[SendWr {
        wr_id: 3,
        op: SendOp::RdmaRead {
            remote: RemoteAddr {
                addr: mr_b.addr() + 3072,
                rkey: mr_b.rkey(),
            },
        },
        payload: Payload::Sgl(&[mr_a.sge(3072, remote.len() as u32)?]),
        flags: rnic_driver::send_flags::SIGNALED,
    }])?;
    let wc = expect(&cq_a, 3, WcOpcode::RdmaRead)?;
    let got = read(&mr_a, 3072, remote.len())?;
    check("RDMA READ", &got, remote)?;
    println!(
        "RDMA READ   QP {} <- MR {:#x} @ {:#x}  {:4} B  {:?}",
        qp_a.qp_num(),
        mr_b.rkey(),
        mr_b.addr() + 3072,
        wc.byte_len,
        String::from_utf8_lossy(&got)
    );
    Ok(())
}

/// Walks `qp` through RESET → INIT → RTR → RTS towards `dest_qpn`.
fn connect(qp: &Qp<H>, dest_qpn: u32, path: AhAttr, rights: u32) -> Res<()> {
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        pkey_index: 0,
        qp_access_flags: rights & !access::LOCAL_WRITE,
        ..QpAttr::default()
    };
    qp.modify(
        &init,
        qp_attr::STATE | qp_attr::PKEY_INDEX | qp_attr::PORT | qp_attr::ACCESS_FLAGS,
    )?;
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: Some(Mtu::Mtu1024),
        dest_qp_num: dest_qpn,
        rq_psn: 0,
        max_dest_rd_atomic: 4,
        min_rnr_timer: 12,
        ah_attr: path,
        ..QpAttr::default()
    };
    qp.modify(
        &rtr,
        qp_attr::STATE
            | qp_attr::AV
            | qp_attr::PATH_MTU
            | qp_attr::DEST_QPN
            | qp_attr::RQ_PSN
            | qp_attr::MAX_DEST_RD_ATOMIC
            | qp_attr::MIN_RNR_TIMER,
    )?;
    let rts = QpAttr {
        qp_state: QpState::Rts,
        sq_psn: 0,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 4,
        ..QpAttr::default()
    };
    qp.modify(
        &rts,
        qp_attr::STATE
            | qp_attr::SQ_PSN
            | qp_attr::TIMEOUT
            | qp_attr::RETRY_CNT
            | qp_attr::RNR_RETRY
            | qp_attr::MAX_QP_RD_ATOMIC,
    )?;
    Ok(())
}

/// Polls `cq` for one completion and checks it is a successful `opcode`
/// for `wr_id`.
fn expect(cq: &Cq<H>, wr_id: u64, opcode: WcOpcode) -> Res<WorkCompletion> {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut wc = [WorkCompletion::default()];
    while cq.poll(&mut wc)? == 0 {
        if Instant::now() > deadline {
            return Err(format!("no completion for wr_id {wr_id} within 5 s").into());
        }
        std::hint::spin_loop();
    }
    let wc = wc[0];
    if wc.status != WcStatus::Success || wc.wr_id != wr_id || wc.opcode != opcode {
        return Err(format!(
            "expected {opcode:?} success for wr_id {wr_id}, got {:?} {:?} for wr_id {} (syndrome {:?})",
            wc.opcode,
            wc.status,
            wc.wr_id,
            rnic_driver::syndrome(&wc)
        )
        .into());
    }
    Ok(wc)
}

fn read(mr: &Mr<H>, offset: usize, len: usize) -> Res<Vec<u8>> {
    let mut out = vec![0; len];
    mr.read(offset, &mut out)?;
    Ok(out)
}

fn check(what: &str, got: &[u8], want: &[u8]) -> Res<()> {
    if got == want {
        Ok(())
    } else {
        Err(format!(
            "{what}: got {} bytes {:02x?}, expected {:02x?}",
            got.len(),
            got,
            want
        )
        .into())
    }
}

fn hex(bytes: &[u8], sep: &str) -> String {
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(sep)
}

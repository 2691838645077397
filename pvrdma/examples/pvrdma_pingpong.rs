//! RC SEND ping-pong over a PVRDMA device through `rnic-vfio` and
//! `rnic-pvrdma`, as the client of an unmodified `ibv_rc_pingpong` server:
//! the same out-of-band exchange over TCP (`LID:QPN:PSN:GID`), then
//! `ITERS` rounds of one SEND each way, every completion's status, opcode
//! and length checked. The guest half of the PVRDMA VM test's traffic
//! (`tests/pvrdma/run.sh`).
//!
//! ```text
//! pvrdma_pingpong BDF HOST:PORT ITERS SIZE [events]
//! ```
//!
//! With `events`, it waits for completions as `ibv_rc_pingpong -e` does:
//! the CQ armed, the CQ-notification vector waited for, the notification
//! taken from its ring, then the CQ polled.
//!
//! Prints `pvrdma_pingpong: ITERS iters of SIZE B ... OK` and exits 0 when
//! every round completed.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::ExitCode;
use std::ptr::NonNull;
use std::time::{Duration, Instant};

use rnic_pvrdma::{Device, QpInit};
use rnic_pvrdma_regs::bar::UAR;
use rnic_pvrdma_regs::cmd::{
    access, qp_attr_mask as m, AhAttr, GlobalRoute, QpAttr, QpState, QpType,
};
use rnic_pvrdma_regs::dsr::GID_TYPE_ROCE_V1;
use rnic_pvrdma_regs::le32;
use rnic_verbs::{send_flags, Payload, RecvWr, SendOp, SendWr, Sge, WcOpcode, WcStatus};
use rnic_vfio::{IrqMode, VfioHal, VfioOptions};

/// `enum pvrdma_mtu`: 1024 bytes, what QEMU's pvrdma carries.
const MTU_1024: u32 = 3;
/// Receive buffers kept posted, each `SLOT` bytes.
const RECVS: usize = 8;
const SLOT: usize = 4096;
const PAGE: usize = 4096;

/// The send buffer (one page) then the receive slots.
#[repr(C, align(4096))]
struct Buffers([u8; PAGE + RECVS * SLOT]);

/// ibv_rc_pingpong's exchange message: `%04x:%06x:%06x:%s` with a 32-digit
/// GID, NUL-terminated.
const MSG_LEN: usize = 52;

fn message(qpn: u32, psn: u32, gid: &[u8; 16]) -> [u8; MSG_LEN] {
    let hex: String = gid.iter().map(|b| format!("{b:02x}")).collect();
    let text = format!("{:04x}:{qpn:06x}:{psn:06x}:{hex}", 0);
    let mut out = [0u8; MSG_LEN];
    out[..text.len()].copy_from_slice(text.as_bytes());
    out
}

fn parse(msg: &[u8]) -> Result<(u32, u32, [u8; 16]), String> {
    let text = std::str::from_utf8(msg)
        .map_err(|e| e.to_string())?
        .trim_end_matches('\0');
    let fields: Vec<&str> = text.split(':').collect();
    let [_lid, qpn, psn, gid] = fields[..] else {
        return Err(format!(
            "the peer's message {text:?} is not LID:QPN:PSN:GID"
        ));
    };
    let hex = |s: &str| u32::from_str_radix(s, 16).map_err(|e| format!("{s:?}: {e}"));
    let mut g = [0u8; 16];
    if gid.len() != 32 {
        return Err(format!("the peer's GID {gid:?} is not 32 hex digits"));
    }
    for (i, b) in g.iter_mut().enumerate() {
        *b = u8::from_str_radix(&gid[2 * i..2 * i + 2], 16).map_err(|e| e.to_string())?;
    }
    Ok((hex(qpn)?, hex(psn)?, g))
}

fn run(bdf: &str, peer: &str, iters: u32, size: usize, events: bool) -> Result<(), String> {
    if size == 0 || size > SLOT.min(PAGE) {
        return Err(format!("size {size}: 1 to {PAGE}"));
    }
    let opts = VfioOptions::default().irqs(IrqMode::Msix(3));
    let hal = VfioHal::open_with(bdf, &opts).map_err(|e| e.to_string())?;
    let uar_pfn = hal.device().bar_address(UAR).map_err(|e| e.to_string())? >> 12;
    let dev = Device::open(hal, uar_pfn).map_err(|e| e.to_string())?;
    let uc = dev.create_uc().map_err(|e| e.to_string())?;
    let pd = dev.create_pd(&uc).map_err(|e| e.to_string())?;
    // GID 0: fe80::, then the node GUID, which QEMU derives from the
    // vmxnet3's MAC (EUI-64).
    let mut gid = [0u8; 16];
    gid[..2].copy_from_slice(&[0xfe, 0x80]);
    gid[8..].copy_from_slice(&dev.caps().node_guid.to_ne().to_le_bytes());
    dev.create_bind(0, gid, GID_TYPE_ROCE_V1)
        .map_err(|e| e.to_string())?;
    let cq = dev.create_cq(&uc, 64).map_err(|e| e.to_string())?;
    let mut bufs = Box::new(Buffers([0; PAGE + RECVS * SLOT]));
    let base = NonNull::new(bufs.0.as_mut_ptr()).expect("a Box's pointer");
    let va = base.as_ptr() as u64;
    // SAFETY: `bufs` lives until the process ends, after the device is
    // closed.
    let mr = unsafe { dev.reg_mr(&pd, base, bufs.0.len(), va, access::LOCAL_WRITE) }
        .map_err(|e| e.to_string())?;
    let init = QpInit {
        qp_type: QpType::Rc,
        send_cq: &cq,
        recv_cq: &cq,
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 1,
        max_recv_sge: 1,
        sq_sig_all: false,
    };
    let mut qp = dev.create_qp(&uc, &pd, &init).map_err(|e| e.to_string())?;
    let to_init = QpAttr {
        qp_state: le32::from_ne(QpState::Init.raw()),
        port_num: 1,
        qp_access_flags: le32::from_ne(access::LOCAL_WRITE),
        ..Default::default()
    };
    dev.modify_qp(
        &qp,
        m::STATE | m::PKEY_INDEX | m::PORT | m::ACCESS_FLAGS,
        &to_init,
    )
    .map_err(|e| e.to_string())?;
    let recv_sge = |slot: usize| Sge {
        addr: va + (PAGE + slot * SLOT) as u64,
        length: SLOT as u32,
        lkey: mr.lkey(),
    };
    for slot in 0..RECVS {
        let sge = [recv_sge(slot)];
        dev.post_recv(
            &mut qp,
            &[RecvWr {
                wr_id: slot as u64,
                sg_list: &sge,
            }],
        )
        .map_err(|e| e.to_string())?;
    }

    let psn = std::process::id() & 0xff_ffff;
    let mut sock = connect(peer)?;
    sock.write_all(&message(qp.qpn(), psn, &gid))
        .map_err(|e| e.to_string())?;
    let mut theirs = [0u8; MSG_LEN];
    sock.read_exact(&mut theirs).map_err(|e| e.to_string())?;
    sock.write_all(b"done\0").map_err(|e| e.to_string())?;
    let (rqpn, rpsn, rgid) = parse(&theirs)?;
    println!(
        "pvrdma_pingpong: local QPN {:#08x} PSN {psn:#08x}, remote QPN {rqpn:#08x} PSN {rpsn:#08x}",
        qp.qpn()
    );

    let to_rtr = QpAttr {
        qp_state: le32::from_ne(QpState::Rtr.raw()),
        path_mtu: le32::from_ne(MTU_1024),
        dest_qp_num: le32::from_ne(rqpn),
        rq_psn: le32::from_ne(rpsn),
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        ah_attr: AhAttr {
            grh: GlobalRoute {
                dgid: rgid,
                sgid_index: 0,
                hop_limit: 1,
                ..Default::default()
            },
            ah_flags: 1,
            port_num: 1,
            ..Default::default()
        },
        ..Default::default()
    };
    let rtr = m::STATE
        | m::AV
        | m::PATH_MTU
        | m::DEST_QPN
        | m::RQ_PSN
        | m::MAX_DEST_RD_ATOMIC
        | m::MIN_RNR_TIMER;
    dev.modify_qp(&qp, rtr, &to_rtr)
        .map_err(|e| e.to_string())?;
    let to_rts = QpAttr {
        qp_state: le32::from_ne(QpState::Rts.raw()),
        sq_psn: le32::from_ne(psn),
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 1,
        ..Default::default()
    };
    let rts = m::STATE | m::TIMEOUT | m::RETRY_CNT | m::RNR_RETRY | m::SQ_PSN | m::MAX_QP_RD_ATOMIC;
    dev.modify_qp(&qp, rts, &to_rts)
        .map_err(|e| e.to_string())?;

    let send_sge = [Sge {
        addr: va,
        length: size as u32,
        lkey: mr.lkey(),
    }];
    let ping = SendWr {
        wr_id: 1 << 32,
        op: SendOp::Send,
        flags: send_flags::SIGNALED,
        payload: Payload::Sgl(&send_sge),
    };
    dev.arm_cq(&cq, false);
    let start = Instant::now();
    let (mut sent, mut received, mut notifications) = (0u32, 0u32, 0u32);
    dev.post_send(&mut qp, &[ping]).map_err(|e| e.to_string())?;
    let mut outstanding = 2;
    while sent < iters || received < iters {
        if start.elapsed() > Duration::from_secs(120) {
            return Err(format!("timed out: {sent} sent, {received} received"));
        }
        let cqe = match dev.poll_cq(&cq).map_err(|e| e.to_string())? {
            Some(cqe) => cqe,
            None if events => {
                // Armed, then polled once more: a completion that came
                // before the arm is taken now rather than waited for.
                dev.arm_cq(&cq, false);
                match dev.poll_cq(&cq).map_err(|e| e.to_string())? {
                    Some(cqe) => cqe,
                    None => {
                        let n = dev
                            .wait_cq_notification(1_000_000_000)
                            .map_err(|e| e.to_string())?;
                        if let Some(n) = n {
                            if n.info.to_ne() != cq.handle() {
                                return Err(format!("a notification for CQ {}", n.info.to_ne()));
                            }
                            notifications += 1;
                        }
                        continue;
                    }
                }
            }
            None => {
                std::thread::sleep(Duration::from_micros(50));
                continue;
            }
        };
        if cqe.status != WcStatus::Success {
            return Err(format!(
                "completion {} failed: status {:?}, vendor error {:#x}",
                cqe.wr_id, cqe.status, cqe.vendor_err
            ));
        }
        if cqe.qp_num != qp.qpn() {
            return Err(format!("a completion of QP {:#x}, not ours", cqe.qp_num));
        }
        if cqe.opcode == WcOpcode::Recv {
            if cqe.byte_len as usize != size {
                return Err(format!("received {} bytes, not {size}", cqe.byte_len));
            }
            received += 1;
            let slot = cqe.wr_id as usize % RECVS;
            let sge = [recv_sge(slot)];
            dev.post_recv(
                &mut qp,
                &[RecvWr {
                    wr_id: slot as u64,
                    sg_list: &sge,
                }],
            )
            .map_err(|e| e.to_string())?;
        } else if cqe.opcode == WcOpcode::Send {
            sent += 1;
        } else {
            return Err(format!("a completion of opcode {:?}", cqe.opcode));
        }
        outstanding -= 1;
        if outstanding == 0 && sent < iters {
            outstanding = 2;
            dev.post_send(&mut qp, &[ping]).map_err(|e| e.to_string())?;
        }
    }
    let took = start.elapsed();
    if events && notifications == 0 {
        return Err("events asked for, and no CQ notification came".into());
    }
    println!(
        "pvrdma_pingpong: {iters} iters of {size} B in {:.3} s = {:.1} usec/iter, \
         {notifications} CQ notifications OK",
        took.as_secs_f64(),
        took.as_secs_f64() * 1e6 / f64::from(iters)
    );
    dev.destroy_qp(qp).map_err(|e| e.to_string())?;
    dev.dereg_mr(mr).map_err(|e| e.to_string())?;
    dev.destroy_cq(cq).map_err(|e| e.to_string())?;
    dev.destroy_bind(0, gid).map_err(|e| e.to_string())?;
    dev.destroy_pd(pd).map_err(|e| e.to_string())?;
    dev.destroy_uc(uc).map_err(|e| e.to_string())?;
    Ok(())
}

/// Connects to the server, retrying while it starts.
fn connect(peer: &str) -> Result<TcpStream, String> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match TcpStream::connect(peer) {
            Ok(s) => return Ok(s),
            Err(e) if Instant::now() > deadline => return Err(format!("connect {peer}: {e}")),
            Err(_) => std::thread::sleep(Duration::from_millis(200)),
        }
    }
}

fn main() -> ExitCode {
    env_logger::init();
    let args: Vec<String> = std::env::args().skip(1).collect();
    let (bdf, peer, iters, size, events) = match &args[..] {
        [b, p, i, s] => (b, p, i, s, false),
        [b, p, i, s, e] if e == "events" => (b, p, i, s, true),
        _ => {
            eprintln!("usage: pvrdma_pingpong BDF HOST:PORT ITERS SIZE [events]");
            return ExitCode::from(2);
        }
    };
    let (Ok(iters), Ok(size)) = (iters.parse(), size.parse()) else {
        eprintln!("pvrdma_pingpong: ITERS and SIZE are numbers");
        return ExitCode::from(2);
    };
    match run(bdf, peer, iters, size, events) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            println!("FAIL pvrdma_pingpong: {e}");
            ExitCode::FAILURE
        }
    }
}

//! `ibv_ud_pingpong` over an emulated rnic NIC on a UDP wire.
//!
//! The UD twin of `rc_pingpong`: the same NIC, wire, options and address
//! exchange, so it pairs with the real `ibv_ud_pingpong` (on Linux rxe in
//! a VM whose NIC shares the wire, as `tests/interop/run.sh` runs it) as
//! well as with itself:
//!
//! ```sh
//! # server
//! cargo run --example ud_pingpong -- --wire 127.0.0.1:47001=127.0.0.1:47002
//! # client
//! cargo run --example ud_pingpong -- --wire 127.0.0.1:47002=127.0.0.1:47001 \
//!     --mac 02:00:00:00:00:02 --ipv4 192.0.2.2 127.0.0.1
//! ```
//!
//! As `ibv_ud_pingpong` does, each side's UD QP has the Q_Key 0x11111111,
//! its receive buffers have room for the 40-byte GRH before the message,
//! and it sends 0x7b bytes to the peer's QP through an address handle to
//! the peer's GID. Every message received is checked: its length, its
//! bytes, the source QP and the GRH's source address.

use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use rnic_driver::{
    access, qp_attr, send_flags, AhAttr, Payload, QpAttr, QpCap, QpInit, QpState, QpType, RecvWr,
    SendOp, SendWr, WcStatus, WorkCompletion, GRH_LEN,
};

mod pingpong;
use pingpong::{exchange, mark, poll, report, Common, Dest, Nic, H};

const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;
/// The Q_Key of `ibv_ud_pingpong`.
const QKEY: u32 = 0x1111_1111;

#[derive(Parser, Debug)]
#[command(about = "UD ping-pong over an emulated rnic NIC on a UDP wire")]
struct Args {
    #[command(flatten)]
    c: Common,
    /// Size of the messages (at most the port's MTU).
    #[arg(short, long, default_value_t = 2048)]
    size: usize,
}

fn main() -> ExitCode {
    env_logger::init();
    match run(Args::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn run(a: Args) -> Result<(), String> {
    let c = &a.c;
    let limit = c.limit()?;
    let nic = Nic::open(c)?;
    let ctx = &nic.ctx;
    let mtu = ctx
        .query_port(1)
        .map_err(|e| e.to_string())?
        .active_mtu
        .bytes();
    if a.size > mtu as usize {
        return Err(format!("Requested size larger than port MTU ({mtu})"));
    }
    let pd = ctx.alloc_pd().map_err(|e| e.to_string())?;
    let buf = pd
        .alloc_mr(GRH_LEN + a.size, access::LOCAL_WRITE)
        .map_err(|e| format!("Couldn't register MR: {e}"))?;
    buf.write(0, &vec![0x7b; buf.len()])
        .map_err(|e| e.to_string())?;
    let cq = ctx
        .create_cq(c.rx_depth + 1)
        .map_err(|e| format!("Couldn't create CQ: {e}"))?;
    let qp = pd
        .create_qp(&QpInit {
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            cap: QpCap {
                max_send_wr: 1,
                max_recv_wr: c.rx_depth,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: QpType::Ud,
            sq_sig_all: false,
        })
        .map_err(|e| format!("Couldn't create QP: {e}"))?;
    let init = QpAttr {
        qp_state: QpState::Init,
        pkey_index: 0,
        port_num: 1,
        qkey: QKEY,
        ..QpAttr::default()
    };
    qp.modify(
        &init,
        qp_attr::STATE | qp_attr::PKEY_INDEX | qp_attr::PORT | qp_attr::QKEY,
    )
    .map_err(|e| format!("Failed to modify QP to INIT: {e}"))?;
    let recv_sg = [buf
        .sge(0, (GRH_LEN + a.size) as u32)
        .map_err(|e| e.to_string())?];
    let recv_wr = |n: u32| -> Result<(), String> {
        for _ in 0..n {
            qp.post_recv(&[RecvWr {
                wr_id: RECV_WRID,
                sg_list: &recv_sg,
            }])
            .map_err(|e| format!("Couldn't post receive: {e}"))?;
        }
        Ok(())
    };
    recv_wr(c.rx_depth)?;
    let mut routs = c.rx_depth;

    let me = Dest::local(ctx, qp.qp_num(), c.gid_idx)?;
    me.print("local");
    let mut ah = None;
    let (_tcp, rem) = exchange(c, &me, |rem| {
        qp.modify(
            &QpAttr {
                qp_state: QpState::Rtr,
                ..QpAttr::default()
            },
            qp_attr::STATE,
        )
        .map_err(|e| format!("Failed to modify QP to RTR: {e}"))?;
        qp.modify(
            &QpAttr {
                qp_state: QpState::Rts,
                sq_psn: me.psn,
                ..QpAttr::default()
            },
            qp_attr::STATE | qp_attr::SQ_PSN,
        )
        .map_err(|e| format!("Failed to modify QP to RTS: {e}"))?;
        let h = pd
            .create_ah(&AhAttr {
                dgid: rem.gid,
                sgid_index: c.gid_idx,
                hop_limit: 1,
                sl: c.sl,
                port_num: 1,
                is_global: true,
                ..AhAttr::default()
            })
            .map_err(|e| format!("Failed to create AH: {e}"))?;
        ah = Some(h);
        Ok(())
    })?;
    rem.print("remote");
    let ah = ah.ok_or("no address handle")?;
    let dest = ah.dest(rem.qpn, QKEY);

    let send_sg = [buf.sge(GRH_LEN, a.size as u32).map_err(|e| e.to_string())?];
    let send = || {
        qp.post_send(&[SendWr {
            wr_id: SEND_WRID,
            op: SendOp::UdSend { dest, imm: None },
            payload: Payload::Sgl(&send_sg),
            flags: send_flags::SIGNALED,
        }])
        .map_err(|e| format!("Couldn't post send: {e}"))
    };
    let mut pending = RECV_WRID;
    if c.host.is_some() {
        send()?;
        pending |= SEND_WRID;
    }
    let start = Instant::now();
    let run = mark(&nic);
    let (mut rcnt, mut scnt) = (0u32, 0u32);
    let mut wc = [WorkCompletion::default(); 2];
    while rcnt < c.iters || scnt < c.iters {
        let n = poll(&cq, &mut wc, start, limit)?;
        for w in &wc[..n] {
            if w.status != WcStatus::Success {
                return Err(format!(
                    "Failed status {:?} ({}) for wr_id {}",
                    w.status, w.status as u8, w.wr_id
                ));
            }
            match w.wr_id {
                SEND_WRID => scnt += 1,
                RECV_WRID => {
                    check(&buf, w, &rem, a.size)?;
                    routs -= 1;
                    if routs <= 1 {
                        recv_wr(c.rx_depth - routs)?;
                        routs = c.rx_depth;
                    }
                    rcnt += 1;
                }
                other => return Err(format!("Completion for unknown wr_id {other}")),
            }
            pending &= !w.wr_id;
            if scnt < c.iters && pending == 0 {
                send()?;
                pending = RECV_WRID | SEND_WRID;
            }
        }
    }
    report(a.size, c.iters, start);
    nic.print_run(c, "exchanges", &run);
    println!(
        "  {rcnt} messages received from QP 0x{:06x}, GRH and bytes as sent",
        rem.qpn
    );
    nic.finish(c)
}

/// Checks a received message: from the peer's QP, a GRH from the peer's
/// address, then `size` bytes of 0x7b.
fn check(
    buf: &rnic_driver::Mr<H>,
    w: &WorkCompletion,
    rem: &Dest,
    size: usize,
) -> Result<(), String> {
    if w.byte_len as usize != GRH_LEN + size {
        return Err(format!(
            "received {} bytes, not {} (GRH and message)",
            w.byte_len,
            GRH_LEN + size
        ));
    }
    if w.flags & rnic_driver::wc_flags::GRH == 0 || w.src_qp != rem.qpn {
        return Err(format!(
            "a message from QP {:#x} (GRH flag {}), not from QP {:#x}",
            w.src_qp,
            w.flags & rnic_driver::wc_flags::GRH != 0,
            rem.qpn
        ));
    }
    let mut got = vec![0u8; GRH_LEN + size];
    buf.read(0, &mut got).map_err(|e| e.to_string())?;
    // The GRH's source: the IPv4 header's (bytes 20..40) or the IPv6
    // header's.
    let v4 = rem.gid[..12] == [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff];
    let src = if v4 { &got[32..36] } else { &got[8..24] };
    let want = if v4 { &rem.gid[12..] } else { &rem.gid[..] };
    if src != want {
        return Err(format!("the GRH's source is {src:02x?}, not {want:02x?}"));
    }
    if let Some(i) = got[GRH_LEN..].iter().position(|&b| b != 0x7b) {
        return Err(format!(
            "byte {i} of a message is {:#04x}, not 0x7b",
            got[GRH_LEN + i]
        ));
    }
    Ok(())
}

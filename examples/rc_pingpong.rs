//! `ibv_rc_pingpong` (and with `--uc` `ibv_uc_pingpong`) over an emulated
//! rnic NIC on a UDP wire.
//!
//! Each side brings up its own NIC, whose port is a UDP socket carrying
//! one Ethernet frame per datagram (as QEMU's `-netdev dgram` does), and
//! exchanges LID, QPN, PSN and GID over TCP in `ibv_rc_pingpong`'s own
//! text format, so it pairs with the real `ibv_rc_pingpong` (on Linux rxe
//! in a VM whose NIC shares the wire) as well as with itself:
//!
//! ```sh
//! # server
//! cargo run --example rc_pingpong -- --wire 127.0.0.1:47001=127.0.0.1:47002
//! # client
//! cargo run --example rc_pingpong -- --wire 127.0.0.1:47002=127.0.0.1:47001 \
//!     --mac 02:00:00:00:00:02 --ipv4 192.0.2.2 127.0.0.1
//! ```
//!
//! The options that make sense here are `ibv_rc_pingpong`'s (`-p`, `-s`,
//! `-n`, `-m`, `-r`, `-g`, `-l`, `-c`), and so are the output lines. `--ops`
//! then runs RDMA WRITE, WRITE with immediate, READ, compare-and-swap and
//! fetch-and-add in both directions and checks every byte and value;
//! `--pattern` gives every message its own bytes and checks each one
//! received. Both work with this program and with
//! `tests/interop/verbs_peer.c`, their C twin over libibverbs (the rxe
//! interop test, docs/interop.md). `--faults` puts the fault injector on
//! this side's wire and `--counters` prints the port's counters at the end.
//! `--registers` prints this side's register accesses, commands, WQEs,
//! frames and CQEs as they happen, and `--trace FILE` writes them for
//! rnic-trace (docs/trace.md).

use std::io::{Read, Write};
use std::net::TcpStream;
use std::process::ExitCode;
use std::time::Instant;

use clap::Parser;
use rnic_driver::{
    access, qp_attr, send_flags, AhAttr, Mr, Mtu, Payload, Qp, QpAttr, QpCap, QpInit, QpState,
    QpType, RecvWr, RemoteAddr, SendOp, SendWr, WcOpcode, WcStatus, WorkCompletion,
};

mod pingpong;
use pingpong::{exchange, mark, poll, read_exact, report, Common, Dest, Nic, H};

const RECV_WRID: u64 = 1;
const SEND_WRID: u64 = 2;
/// Size of the memory `--ops` works on, on each side.
const OPS_LEN: usize = 128 << 10;

#[derive(Parser, Debug)]
#[command(about = "RC ping-pong over an emulated rnic NIC on a UDP wire")]
struct Args {
    #[command(flatten)]
    c: Common,
    /// Size of the messages.
    #[arg(short, long, default_value_t = 4096)]
    size: usize,
    /// Path MTU: 256, 512, 1024, 2048 or 4096.
    #[arg(short, long, default_value_t = 1024)]
    mtu: u32,
    /// After the ping-pong, run RDMA WRITE, WRITE with immediate, READ and
    /// both atomics in both directions, checking every result (both sides
    /// must be this program).
    #[arg(long)]
    ops: bool,
    /// Fill message k with a pattern of this side, k and the offset, and
    /// check every byte of each message received against the peer's (both
    /// sides must use it; `ibv_rc_pingpong` sends 0x7b everywhere, which
    /// is checked without it).
    #[arg(long)]
    pattern: bool,
    /// `ibv_rc_pingpong --chk`: the first byte of every 4 KiB page of the
    /// buffer is 0 rather than 0x7b, in what is sent and in what is
    /// checked (`ibv_rc_pingpong -c` checks those bytes of the last message
    /// its server received).
    #[arg(short = 'c', long)]
    chk: bool,
    /// A UC QP, as `ibv_uc_pingpong` has (not with `--ops`: UC does no
    /// READ or atomics).
    #[arg(long, conflicts_with = "ops")]
    uc: bool,
    /// The same exchanges over the address exchange's TCP connection
    /// instead of RDMA (both sides must use it): the OS network stack's
    /// figure for the same messages, printed the same way.
    #[arg(long, conflicts_with_all = ["ops", "pattern"])]
    tcp: bool,
}

fn mtu(bytes: u32) -> Result<Mtu, String> {
    Ok(match bytes {
        256 => Mtu::Mtu256,
        512 => Mtu::Mtu512,
        1024 => Mtu::Mtu1024,
        2048 => Mtu::Mtu2048,
        4096 => Mtu::Mtu4096,
        _ => return Err(format!("path MTU {bytes} is none of 256..4096")),
    })
}

/// RTR then RTS, connected to `dest`, as `ibv_rc_pingpong` does (with the
/// remote rights `--ops` needs, and room for its READs and atomics), or
/// with `--uc` as `ibv_uc_pingpong` does (UC's masks have none of the
/// RC-only attributes).
fn connect(qp: &Qp<H>, a: &Args, my_psn: u32, dest: &Dest) -> Result<(), String> {
    let rd_atomic = if a.ops { 16 } else { 1 };
    let mut rtr = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: Some(mtu(a.mtu)?),
        dest_qp_num: dest.qpn,
        rq_psn: dest.psn,
        max_dest_rd_atomic: rd_atomic,
        min_rnr_timer: 12,
        ..QpAttr::default()
    };
    rtr.ah_attr = AhAttr {
        dgid: dest.gid,
        sgid_index: a.c.gid_idx,
        hop_limit: 1,
        sl: a.c.sl,
        port_num: 1,
        is_global: true,
        ..AhAttr::default()
    };
    let rc_only = if a.uc {
        0
    } else {
        qp_attr::MAX_DEST_RD_ATOMIC | qp_attr::MIN_RNR_TIMER
    };
    qp.modify(
        &rtr,
        qp_attr::STATE
            | qp_attr::AV
            | qp_attr::PATH_MTU
            | qp_attr::DEST_QPN
            | qp_attr::RQ_PSN
            | rc_only,
    )
    .map_err(|e| format!("Failed to modify QP to RTR: {e}"))?;
    let rts = QpAttr {
        qp_state: QpState::Rts,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        sq_psn: my_psn,
        max_rd_atomic: rd_atomic,
        ..QpAttr::default()
    };
    let rc_only = if a.uc {
        0
    } else {
        qp_attr::TIMEOUT | qp_attr::RETRY_CNT | qp_attr::RNR_RETRY | qp_attr::MAX_QP_RD_ATOMIC
    };
    qp.modify(&rts, qp_attr::STATE | qp_attr::SQ_PSN | rc_only)
        .map_err(|e| format!("Failed to modify QP to RTS: {e}"))
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
    let pd = ctx.alloc_pd().map_err(|e| e.to_string())?;
    let buf = pd
        .alloc_mr(a.size.max(1), access::LOCAL_WRITE)
        .map_err(|e| format!("Couldn't register MR: {e}"))?;
    buf.write(0, &plain(buf.len(), a.chk))
        .map_err(|e| e.to_string())?;
    let cq = ctx
        .create_cq(c.rx_depth + 1)
        .map_err(|e| format!("Couldn't create CQ: {e}"))?;
    let cap = QpCap {
        max_send_wr: if a.ops { 16 } else { 1 },
        max_recv_wr: c.rx_depth,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qp = pd
        .create_qp(&QpInit {
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            cap,
            qp_type: if a.uc { QpType::Uc } else { QpType::Rc },
            sq_sig_all: false,
        })
        .map_err(|e| format!("Couldn't create QP: {e}"))?;
    let remote_rights = access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;
    let init = QpAttr {
        qp_state: QpState::Init,
        pkey_index: 0,
        port_num: 1,
        qp_access_flags: if a.ops { remote_rights } else { 0 },
        ..QpAttr::default()
    };
    qp.modify(
        &init,
        qp_attr::STATE | qp_attr::PKEY_INDEX | qp_attr::PORT | qp_attr::ACCESS_FLAGS,
    )
    .map_err(|e| format!("Failed to modify QP to INIT: {e}"))?;
    let recv_wr = |n: u32| -> Result<(), String> {
        let sg = [buf.sge(0, a.size as u32).map_err(|e| e.to_string())?];
        for _ in 0..n {
            qp.post_recv(&[RecvWr {
                wr_id: RECV_WRID,
                sg_list: &sg,
            }])
            .map_err(|e| format!("Couldn't post receive: {e}"))?;
        }
        Ok(())
    };
    recv_wr(c.rx_depth)?;
    let mut routs = c.rx_depth;

    let me = Dest::local(ctx, qp.qp_num(), c.gid_idx)?;
    me.print("local");
    let (mut tcp, rem) = exchange(c, &me, |rem| connect(&qp, &a, me.psn, rem))?;
    rem.print("remote");

    if a.tcp {
        return tcp_pingpong(&a, tcp);
    }
    // The ping-pong: a send goes out once the last one completed and a
    // receive arrived; the client starts.
    let send_sg = [buf.sge(0, a.size as u32).map_err(|e| e.to_string())?];
    let role = role(c);
    let send = |k: u32| {
        if a.pattern {
            buf.write(0, &message(role, k, a.size))
                .map_err(|e| e.to_string())?;
        }
        qp.post_send(&[SendWr {
            wr_id: SEND_WRID,
            op: SendOp::Send,
            payload: rnic_driver::Payload::Sgl(&send_sg),
            flags: send_flags::SIGNALED,
        }])
        .map_err(|e| format!("Couldn't post send: {e}"))
    };
    let unpatterned = plain(a.size, a.chk);
    let mut got = vec![0u8; a.size];
    let mut pending = RECV_WRID;
    if c.host.is_some() {
        send(0)?;
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
                    if w.byte_len as usize != a.size {
                        return Err(format!("received {} bytes, not {}", w.byte_len, a.size));
                    }
                    buf.read(0, &mut got).map_err(|e| e.to_string())?;
                    let patterned;
                    let want = if a.pattern {
                        patterned = message(1 - role, rcnt, a.size);
                        &patterned
                    } else {
                        &unpatterned
                    };
                    // Compared whole first: a byte loop costs as much as
                    // the transfer at 64 KiB.
                    if got != *want {
                        let i = (0..a.size).find(|&i| got[i] != want[i]).unwrap_or(0);
                        return Err(format!(
                            "message {rcnt}: byte {i} is {:#04x}, not {:#04x}",
                            got[i], want[i]
                        ));
                    }
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
                send(scnt)?;
                pending = RECV_WRID | SEND_WRID;
            }
        }
    }
    report(a.size, c.iters, start);
    nic.print_run(c, "exchanges", &run);
    if a.pattern {
        println!("  {rcnt} messages received, every byte as sent");
    }
    if a.ops {
        ops(&a, &pd, &qp, &cq, &mut tcp)?;
    }
    nic.finish(c)
}

/// `--tcp`: the ping-pong over `s`, the client writing first, each side
/// checking every message.
fn tcp_pingpong(a: &Args, mut s: TcpStream) -> Result<(), String> {
    s.set_nodelay(true).map_err(|e| e.to_string())?;
    let want = plain(a.size, a.chk);
    let mut got = vec![0u8; a.size];
    let io = |e: std::io::Error| format!("TCP ping-pong: {e}");
    let client = a.c.host.is_some();
    let start = Instant::now();
    for k in 0..a.c.iters {
        if client {
            s.write_all(&want).map_err(io)?;
        }
        s.read_exact(&mut got).map_err(io)?;
        if got != want {
            return Err(format!("message {k}: not the bytes sent"));
        }
        if !client {
            s.write_all(&want).map_err(io)?;
        }
    }
    report(a.size, a.c.iters, start);
    Ok(())
}

/// 0 for the server, 1 for the client.
fn role(c: &Common) -> u8 {
    c.host.is_some() as u8
}

/// What `ibv_rc_pingpong` sends: 0x7b bytes, with `--chk` a 0 at the start
/// of every page.
fn plain(len: usize, chk: bool) -> Vec<u8> {
    let mut v = vec![0x7b; len];
    if chk {
        v.iter_mut().step_by(4096).for_each(|b| *b = 0);
    }
    v
}

/// Message `k` from side `role`: byte i is a function of both and of i
/// (with a term for each 256-byte block, so that a packet placed at the
/// wrong offset shows), as `verbs_peer.c` computes it.
fn message(role: u8, k: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i * 31 + (i >> 8) + k as usize * 17 + role as usize * 101) as u8)
        .collect()
}

/// The bytes side `role` (0 server, 1 client) writes into its peer.
fn pattern(role: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i * 7 + role as usize * 13) as u8)
        .collect()
}

/// The `--ops` round: each side, on the other's memory, does an RDMA WRITE
/// of the first half and reads it back, a WRITE with immediate that the
/// other side receives, three compare-and-swaps (hit, hit, miss) and three
/// fetch-and-adds, then both check what the other did to them.
fn ops(
    a: &Args,
    pd: &rnic_driver::Pd<H>,
    qp: &Qp<H>,
    cq: &rnic_driver::Cq<H>,
    tcp: &mut TcpStream,
) -> Result<(), String> {
    let role = role(&a.c);
    let limit = a.c.limit()?;
    let all =
        access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;
    let mine = pd.alloc_mr(OPS_LEN, all).map_err(|e| e.to_string())?;
    let scratch = pd.alloc_mr(OPS_LEN, all).map_err(|e| e.to_string())?;
    mine.write(0, &vec![0; OPS_LEN])
        .map_err(|e| e.to_string())?;
    // Exchange the memory: "%016x:%08x:%08x" address, rkey, length.
    let msg = format!("{:016x}:{:08x}:{:08x}\0", mine.addr(), mine.rkey(), OPS_LEN);
    tcp.write_all(msg.as_bytes()).map_err(|e| e.to_string())?;
    let peer = read_exact(tcp, msg.len())?;
    let peer = std::str::from_utf8(&peer).map_err(|e| e.to_string())?;
    let f: Vec<&str> = peer.trim_end_matches('\0').split(':').collect();
    let hex = |x: &str| u64::from_str_radix(x, 16).map_err(|e| format!("{x:?}: {e}"));
    if f.len() != 3 {
        return Err(format!("malformed memory {peer:?}"));
    }
    let (raddr, rkey, rlen) = (hex(f[0])?, hex(f[1])? as u32, hex(f[2])? as usize);
    if rlen != OPS_LEN {
        return Err(format!("peer memory of {rlen} bytes"));
    }
    let at = |off: usize| RemoteAddr {
        addr: raddr + off as u64,
        rkey,
    };
    let half = OPS_LEN / 2;
    let data = pattern(role, half);
    scratch.write(0, &data).map_err(|e| e.to_string())?;
    // The peer's WRITE with immediate takes one of the ping-pong's
    // receives, whenever it comes.
    let imm_seen = std::cell::Cell::new(false);
    let run = |id: u64, op: SendOp, sg: rnic_driver::Sge| -> Result<WorkCompletion, String> {
        qp.post_send(&[SendWr {
            wr_id: id,
            op,
            payload: Payload::Sgl(&[sg]),
            flags: send_flags::SIGNALED,
        }])
        .map_err(|e| e.to_string())?;
        let mut wc = [WorkCompletion::default(); 1];
        let start = Instant::now();
        loop {
            let n = poll(cq, &mut wc, start, limit)?;
            if n == 1 && wc[0].wr_id == id {
                if wc[0].status != WcStatus::Success {
                    return Err(format!("{wc:?}"));
                }
                return Ok(wc[0]);
            }
            if n == 1 && wc[0].opcode == WcOpcode::RecvRdmaWithImm {
                check_write_imm(&wc[0], role)?;
                imm_seen.set(true);
            }
        }
    };
    let sge =
        |mr: &Mr<H>, off: usize, len: usize| mr.sge(off, len as u32).map_err(|e| e.to_string());
    run(
        10,
        SendOp::RdmaWrite { remote: at(0) },
        sge(&scratch, 0, half)?,
    )?;
    run(
        11,
        SendOp::RdmaRead { remote: at(0) },
        sge(&scratch, half, half)?,
    )?;
    let mut back = vec![0u8; half];
    scratch.read(half, &mut back).map_err(|e| e.to_string())?;
    if back != data {
        return Err("RDMA READ did not return what RDMA WRITE placed".into());
    }
    println!("  RDMA WRITE and READ of {half} bytes: ok");
    let imm = [0x12, 0x34, 0, role];
    run(
        12,
        SendOp::RdmaWriteWithImm {
            remote: at(half),
            imm,
        },
        sge(&scratch, 0, 1024)?,
    )?;
    let word = |off| sge(&scratch, off, 8);
    let result = |off| -> Result<u64, String> {
        let mut b = [0u8; 8];
        scratch.read(off, &mut b).map_err(|e| e.to_string())?;
        Ok(u64::from_le_bytes(b))
    };
    let cas_at = at(OPS_LEN - 16);
    for (i, (compare, swap, orig)) in [(0, 7, 0), (7, 9, 7), (1, 5, 9)].into_iter().enumerate() {
        run(
            20 + i as u64,
            SendOp::AtomicCmpAndSwp {
                remote: cas_at,
                compare,
                swap,
            },
            word(OPS_LEN - 64)?,
        )?;
        let got = result(OPS_LEN - 64)?;
        if got != orig {
            return Err(format!("compare-and-swap {i} returned {got}, not {orig}"));
        }
    }
    for i in 0..3u64 {
        run(
            30 + i,
            SendOp::AtomicFetchAndAdd {
                remote: at(OPS_LEN - 8),
                add: 5,
            },
            word(OPS_LEN - 64)?,
        )?;
        let got = result(OPS_LEN - 64)?;
        if got != 5 * i {
            return Err(format!("fetch-and-add {i} returned {got}, not {}", 5 * i));
        }
    }
    println!("  compare-and-swap and fetch-and-add: ok");
    // Wait for the peer's WRITE with immediate, then for the peer to be
    // done with this side's memory.
    let start = Instant::now();
    let mut wc = [WorkCompletion::default(); 1];
    while !imm_seen.get() {
        if poll(cq, &mut wc, start, limit)? == 1 && wc[0].opcode == WcOpcode::RecvRdmaWithImm {
            check_write_imm(&wc[0], role)?;
            imm_seen.set(true);
        }
    }
    tcp.write_all(b"ops\0").map_err(|e| e.to_string())?;
    read_exact(tcp, 4)?;
    let mut got = vec![0u8; half];
    mine.read(0, &mut got).map_err(|e| e.to_string())?;
    if got != pattern(1 - role, half) {
        return Err("the peer's RDMA WRITE did not land".into());
    }
    let mut imm_data = vec![0u8; 1024];
    mine.read(half, &mut imm_data).map_err(|e| e.to_string())?;
    if imm_data != pattern(1 - role, 1024) {
        return Err("the peer's WRITE with immediate did not land".into());
    }
    let mut words = [0u8; 16];
    mine.read(OPS_LEN - 16, &mut words)
        .map_err(|e| e.to_string())?;
    let (cas, fa) = (
        u64::from_le_bytes(words[..8].try_into().unwrap_or_default()),
        u64::from_le_bytes(words[8..].try_into().unwrap_or_default()),
    );
    if (cas, fa) != (9, 15) {
        return Err(format!(
            "the peer's atomics left ({cas}, {fa}), not (9, 15)"
        ));
    }
    println!("  the peer's WRITE, WRITE with immediate and atomics on this side: ok");
    Ok(())
}

fn check_write_imm(w: &WorkCompletion, role: u8) -> Result<(), String> {
    let want = [0x12, 0x34, 0, 1 - role];
    if w.status != WcStatus::Success
        || w.wr_id != RECV_WRID
        || w.opcode != WcOpcode::RecvRdmaWithImm
        || w.byte_len != 1024
        || w.imm_data != Some(want)
    {
        return Err(format!("WRITE with immediate arrived as {w:?}"));
    }
    println!("  WRITE with immediate received: ok");
    Ok(())
}

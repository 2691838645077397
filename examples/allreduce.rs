//! A ring all-reduce over RDMA: N ranks (2 to 8), each with two emulated
//! NICs (one writing to the right neighbour, one taking the left
//! neighbour's writes), sum their buffers of floats with RDMA WRITE with
//! immediate, as NCCL's ring algorithm does: N-1 reduce-scatter steps,
//! each rank writing one chunk into its right neighbour's staging memory
//! and adding the chunk its left neighbour wrote, then N-1 all-gather
//! steps, each writing a finished chunk straight into the right
//! neighbour's buffer. The immediate data numbers the step; the receive
//! completion it brings is the only synchronisation.
//!
//! ```text
//! cargo run --release --example allreduce -- --ranks 4 --size 1048576
//! # each step of rank 0's writes at the register level, and rank 1's side:
//! cargo run --release --example allreduce -- --ranks 2 --size 64 --iters 1 --registers
//! # one process per rank, on UDP wires between them:
//! for r in 0 1 2; do
//!     target/release/examples/allreduce --wire udp --ranks 3 --rank $r &
//! done; wait
//! # one process per rank, every NIC a device of one rnicd:
//! target/release/rnicd --socket /tmp/rnicd.sock &
//! for r in 0 1 2; do
//!     target/release/examples/allreduce --wire rnicd --ranks 3 --rank $r &
//! done; wait
//! ```
//!
//! It checks the sum (every element of every rank), then times the
//! all-reduce and prints time, algbw and busbw as nccl-tests does
//! (busbw = algbw × 2(N-1)/N), beside the same ring over TCP sockets on
//! 127.0.0.1 measured in the same run. It exits 1 if a sum is wrong.
//! docs/trace.md describes it.

use std::alloc::Layout;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::ExitCode;
use std::ptr::NonNull;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Parser;
use rnic_driver::{
    access, qp_attr, send_flags, AhAttr, Context, Cq, Mr, Mtu, Payload, Qp, QpAttr, QpCap, QpInit,
    QpState, QpType, RecvWr, RemoteAddr, SendOp, SendWr, WcOpcode, WcStatus, WorkCompletion,
};
use rnic_emu::net::{Direction, Tap};
use rnic_emu::net::{Switch, UdpWire, Wire};
use rnic_emu::wire::frame::describe;
use rnic_emu::{EmuConfig, EmuDevice, EmuHal, ExecMode};
use rnic_middleware::{JsonLines, Print, Sink, Timeline, TraceHal};
use rnic_queues::Hal;
use rnic_vfio_user::VfioUserHal;

type Res<T> = Result<T, String>;

/// A rank's platform `P` (the model's, or rnicd's over vfio-user), traced
/// for the rank `--registers` or `--trace` shows (and otherwise only
/// passed through).
type T<P> = TraceHal<P>;

/// A NIC of a rank: the emulated device, if it is one of this process,
/// and the driver's context on it.
type Nic<P> = (Option<Arc<EmuDevice>>, Context<T<P>>);

/// Receive WQEs each rank keeps posted.
const RECV_DEPTH: u32 = 64;

#[derive(Parser, Debug)]
#[command(about = "Ring all-reduce over RDMA WRITE with immediate between emulated rnic NICs")]
struct Args {
    /// Ranks, 2 to 8.
    #[arg(short = 'n', long, default_value_t = 4)]
    ranks: usize,
    /// Bytes of floats per rank (rounded down to a multiple of 4 × ranks).
    #[arg(short, long, default_value_t = 1 << 20)]
    size: usize,
    /// Timed all-reduces, after the checked one.
    #[arg(short, long, default_value_t = 5)]
    iters: usize,
    /// Where the ranks' NICs meet.
    #[arg(long, value_enum, default_value_t = WireKind::Switch)]
    wire: WireKind,
    /// With `--wire udp`: this process's rank.
    #[arg(long, default_value_t = 0)]
    rank: usize,
    /// With `--wire udp`: the first of the ports the ranks use on
    /// 127.0.0.1 (UDP: two per rank; TCP: two per rank).
    #[arg(long, default_value_t = 23600)]
    port: u16,
    /// Print what rank 0's sending NIC (over UDP, this rank's) does at
    /// the register level beneath each step: commands, WQEs, doorbells,
    /// frames, CQEs; on the switch also rank 1's receiving NIC, which its
    /// writes reach, on the peer lane.
    #[arg(long)]
    registers: bool,
    /// Write the same events to this file as JSON lines, for rnic-trace.
    #[arg(long)]
    trace: Option<std::path::PathBuf>,
    /// With `--wire rnicd`: rnicd's socket.
    #[arg(long, default_value = "/tmp/rnicd.sock")]
    socket: std::path::PathBuf,
}

/// Where the ranks' NICs meet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum WireKind {
    /// Every rank in this process, on the in-memory switch.
    Switch,
    /// This process is rank `--rank`, its NICs on UDP wires to its
    /// neighbours' processes on 127.0.0.1.
    Udp,
    /// This process is rank `--rank`, its two NICs devices of the rnicd
    /// at `--socket`, which reach every other rank's through its switch.
    Rnicd,
}

/// Zeroed, page-aligned memory that both NICs of a rank reach.
struct Buffer {
    ptr: NonNull<u8>,
    layout: Layout,
}

impl Buffer {
    fn new(len: usize) -> Res<Buffer> {
        let layout = Layout::from_size_align(len.max(1), 4096).map_err(|e| e.to_string())?;
        // SAFETY: a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(layout) };
        let ptr = NonNull::new(p).ok_or("out of memory")?;
        Ok(Buffer { ptr, layout })
    }
}

impl Drop for Buffer {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with this layout; the rank's MRs, which
        // reach it, are dropped before it (field order of Rank).
        unsafe { std::alloc::dealloc(self.ptr.as_ptr(), self.layout) }
    }
}

// SAFETY: the buffer is plain memory; it is read and written only through
// the MRs over it, whose copies are atomic.
unsafe impl Send for Buffer {}
// SAFETY: as for Send.
unsafe impl Sync for Buffer {}

/// One rank: a NIC whose QP `tx` writes to the right neighbour and a NIC
/// whose QP `rx` takes the left neighbour's writes, the buffer being
/// reduced and the staging memory, each registered where it is used.
struct Rank<P: Hal> {
    tx: Qp<T<P>>,
    rx: Qp<T<P>>,
    tx_cq: Cq<T<P>>,
    rx_cq: Cq<T<P>>,
    /// The buffer on the sending NIC: the source of every write.
    data_tx: Mr<T<P>>,
    /// The buffer on the receiving NIC: the left neighbour's all-gather
    /// target, and what this rank reads and adds into.
    data: Mr<T<P>>,
    /// Staging memory on the receiving NIC: the reduce-scatter target.
    stage: Mr<T<P>>,
    tx_ctx: Context<T<P>>,
    rx_ctx: Context<T<P>>,
    /// Where the rank's writes are noted, beside its sending NIC's events
    /// (read only when that NIC is traced).
    tl_tx: Arc<Timeline>,
    /// Where the writes it receives are noted, beside its receiving NIC's.
    tl_rx: Arc<Timeline>,
    // Kept for the rank's lifetime.
    _devs: Vec<Arc<EmuDevice>>,
    _bufs: [Buffer; 2],
}

/// What a rank has in flight between steps, and between all-reduces: a
/// neighbour that is ahead may already have written the next
/// all-reduce's first chunks when this one ends.
#[derive(Default)]
struct Progress {
    /// Signaled writes not completed yet.
    sent: u32,
    /// Receive completions polled before their step.
    waiting: Vec<WorkCompletion>,
    /// Steps done over every all-reduce: the immediate data of the next
    /// write.
    step: u32,
}

/// Where a rank's neighbour writes: its buffer and its staging memory.
#[derive(Clone, Copy)]
struct Target {
    data: RemoteAddr,
    stage: RemoteAddr,
}

fn main() -> ExitCode {
    env_logger::init();
    let a = Args::parse();
    match run(&a) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("allreduce: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

fn run(a: &Args) -> Res<bool> {
    if !(2..=8).contains(&a.ranks) {
        return Err(format!("--ranks {}: 2 to 8", a.ranks));
    }
    let n = a.ranks;
    let size = a.size / (4 * n) * (4 * n);
    if size == 0 {
        return Err(format!("--size {}: at least {} bytes", a.size, 4 * n));
    }
    let chunk = size / n;
    if a.wire != WireKind::Switch {
        return process(a, n, size, chunk);
    }
    let switch = Switch::new();
    let traced = timeline(a)?;
    let quiet = || Timeline::new(Vec::new());
    let ranks: Vec<Rank<EmuHal>> = (0..n)
        .map(|r| {
            // What is shown: rank 0's sending NIC, and the receiving NIC of
            // rank 1 that it writes to, as the peer.
            let tl_tx = if r == 0 { traced.clone() } else { quiet() };
            let tl_rx = if r == 1 { traced.clone() } else { quiet() };
            let tx = nic(r, 0, switch.port(), &tl_tx, false)?;
            let rx = nic(r, 1, switch.port(), &tl_rx, true)?;
            rank(tx, rx, size, chunk * 2 * (n - 1), (tl_tx, tl_rx))
        })
        .collect::<Res<_>>()?;
    // tx of rank r to rx of rank r+1.
    for r in 0..n {
        let right = &ranks[(r + 1) % n];
        connect(&ranks[r].tx, right.rx.qp_num(), path(&right.rx_ctx)?)?;
    }
    for r in 0..n {
        let left = &ranks[(r + n - 1) % n];
        ready_rx(&ranks[r], left.tx.qp_num(), path(&left.tx_ctx)?)?;
    }
    let targets: Vec<Target> = ranks.iter().map(target).collect();
    println!("# rnic all-reduce: {n} ranks, two emulated NICs each on the in-memory switch");
    println!(
        "# ring: RDMA WRITE with immediate, {} steps per all-reduce",
        2 * (n - 1)
    );
    // One checked all-reduce.
    for (r, k) in ranks.iter().enumerate() {
        k.data
            .write(0, &floats(&init(r, size / 4)))
            .map_err(|e| e.to_string())?;
    }
    let mut progress: Vec<Progress> = (0..n).map(|_| Progress::default()).collect();
    on_all(&ranks, &mut progress, &targets, chunk, 0)?;
    let mut wrong = 0usize;
    let want: Vec<f32> = (0..size / 4).map(|j| sum_at(n, j)).collect();
    for k in &ranks {
        let mut got = vec![0u8; size];
        k.data.read(0, &mut got).map_err(|e| e.to_string())?;
        wrong += unfloats(&got)
            .iter()
            .zip(&want)
            .filter(|(g, w)| g != w)
            .count();
    }
    // Timed ones.
    let start = Instant::now();
    for it in 0..a.iters {
        on_all(&ranks, &mut progress, &targets, chunk, 1 + it)?;
    }
    let rdma = start.elapsed() / a.iters.max(1) as u32;
    let tcp = tcp_allreduce(n, size, a.iters)?;
    println!("#       size    count   type   redop      time    algbw    busbw  #wrong");
    println!("#        (B) (elements)                   (us)   (GB/s)   (GB/s)");
    line("rnic", size, n, rdma, wrong);
    line("tcp", size, n, tcp.0, tcp.1);
    println!(
        "# rnic / TCP: time {:.2}, busbw {:.2}",
        rdma.as_secs_f64() / tcp.0.as_secs_f64(),
        tcp.0.as_secs_f64() / rdma.as_secs_f64()
    );
    if wrong > 0 || tcp.1 > 0 {
        eprintln!(
            "allreduce: {wrong} wrong element(s) over RDMA, {} over TCP",
            tcp.1
        );
        return Ok(false);
    }
    println!("allreduce: every element of every rank is the sum");
    Ok(true)
}

/// A result line, as nccl-tests prints it.
fn line(what: &str, size: usize, n: usize, t: Duration, wrong: usize) {
    let algbw = size as f64 / t.as_secs_f64() / 1e9;
    let busbw = algbw * 2.0 * (n - 1) as f64 / n as f64;
    println!(
        "{:>12} {:>8}  float     sum {:>9.1} {:>8.3} {:>8.3} {:>7}   {what}",
        size,
        size / 4,
        t.as_secs_f64() * 1e6,
        algbw,
        busbw,
        wrong
    );
}

/// Rank `r`'s element `j` before the all-reduce.
fn init(r: usize, count: usize) -> Vec<f32> {
    (0..count).map(|j| ((r + 1) * (j % 7 + 1)) as f32).collect()
}

/// Element `j` of the sum over `n` ranks.
fn sum_at(n: usize, j: usize) -> f32 {
    (n * (n + 1) / 2 * (j % 7 + 1)) as f32
}

fn floats(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

fn unfloats(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect()
}

/// A thread-mode NIC with MAC `...:r:side` and IPv4
/// `192.0.2.(2r + side + 1)` on `wire`, and its context: the rank's thread
/// runs it while it polls its CQ, the device worker while it does
/// anything else.
fn nic(
    r: usize,
    side: u8,
    wire: impl Wire + 'static,
    tl: &Arc<Timeline>,
    peer: bool,
) -> Res<Nic<EmuHal>> {
    let cfg = EmuConfig {
        mac: [0x02, 0, 0, 0, r as u8, side + 1],
        ipv4: [192, 0, 2, (2 * r) as u8 + side + 1],
        ..EmuConfig::default()
    };
    let b = EmuDevice::builder(cfg).mode(ExecMode::Thread);
    // A traced NIC's frames join its timeline through a tap on its wire
    // (the peer's are the same frames).
    let b = if tl.active() && !peer {
        let t = tl.clone();
        let tap = move |d, f: &[u8]| t.frame(d == Direction::Tx, describe(f), f);
        b.wire(Tap::new(wire, Arc::new(tap)))
    } else {
        b.wire(wire)
    };
    let dev = b.build().map_err(|e| e.to_string())?;
    let hal = if peer {
        TraceHal::peer(dev.hal(), tl.clone())
    } else {
        TraceHal::new(dev.hal(), tl.clone())
    };
    let ctx = Context::open(hal).map_err(|e| e.to_string())?;
    Ok((Some(dev), ctx))
}

/// The timeline `--registers` and `--trace` read (one nobody reads
/// without them).
fn timeline(a: &Args) -> Res<Arc<Timeline>> {
    let mut sinks: Vec<Arc<dyn Sink>> = Vec::new();
    if a.registers {
        sinks.push(Arc::new(Print));
    }
    if let Some(path) = &a.trace {
        let f = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
        sinks.push(Arc::new(JsonLines::new(f)));
    }
    Ok(Timeline::new(sinks))
}

/// Rank `r` on the NICs `tx` and `rx`: a buffer of `size` bytes, staging
/// memory of `stage` bytes, a CQ and an RC QP on each.
fn rank<P: Hal>(
    tx: Nic<P>,
    rx: Nic<P>,
    size: usize,
    stage: usize,
    (tl_tx, tl_rx): (Arc<Timeline>, Arc<Timeline>),
) -> Res<Rank<P>> {
    let e = |e: rnic_driver::Error| e.to_string();
    let bufs = [Buffer::new(size)?, Buffer::new(stage)?];
    let (tx_pd, rx_pd) = (tx.1.alloc_pd().map_err(e)?, rx.1.alloc_pd().map_err(e)?);
    let rights = access::LOCAL_WRITE | access::REMOTE_WRITE;
    // SAFETY: the buffers outlive the MRs (Rank's field order), and are
    // not moved: they are heap allocations.
    let (data_tx, data, stage_mr) = unsafe {
        (
            tx_pd
                .reg_mr(bufs[0].ptr, size, access::LOCAL_WRITE)
                .map_err(e)?,
            rx_pd.reg_mr(bufs[0].ptr, size, rights).map_err(e)?,
            rx_pd.reg_mr(bufs[1].ptr, stage, rights).map_err(e)?,
        )
    };
    let (tx_cq, rx_cq) = (
        tx.1.create_cq(64).map_err(e)?,
        rx.1.create_cq(256).map_err(e)?,
    );
    let cap = QpCap {
        max_send_wr: 32,
        max_recv_wr: RECV_DEPTH,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qp = |pd: &rnic_driver::Pd<T<P>>, cq| {
        pd.create_qp(&QpInit {
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap,
            qp_type: QpType::Rc,
            sq_sig_all: false,
        })
        .map_err(e)
    };
    let (tx_qp, rx_qp) = (qp(&tx_pd, &tx_cq)?, qp(&rx_pd, &rx_cq)?);
    Ok(Rank {
        tx: tx_qp,
        rx: rx_qp,
        tx_cq,
        rx_cq,
        data_tx,
        data,
        stage: stage_mr,
        tx_ctx: tx.1,
        rx_ctx: rx.1,
        _devs: tx.0.into_iter().chain(rx.0).collect(),
        tl_tx,
        tl_rx,
        _bufs: bufs,
    })
}

/// Where rank `k`'s left neighbour writes.
fn target<P: Hal>(k: &Rank<P>) -> Target {
    Target {
        data: RemoteAddr {
            addr: k.data.addr(),
            rkey: k.data.rkey(),
        },
        stage: RemoteAddr {
            addr: k.stage.addr(),
            rkey: k.stage.rkey(),
        },
    }
}

/// Takes `k.rx` to the left neighbour's QP `dest` on `path`, and fills its
/// receive queue: every step's write consumes a receive WQE.
fn ready_rx<P: Hal>(k: &Rank<P>, dest: u32, path: AhAttr) -> Res<()> {
    connect(&k.rx, dest, path)?;
    let none: [rnic_driver::Sge; 0] = [];
    let wrs: Vec<RecvWr> = (0..RECV_DEPTH)
        .map(|i| RecvWr {
            wr_id: u64::from(i),
            sg_list: &none,
        })
        .collect();
    k.rx.post_recv(&wrs).map_err(|e| e.to_string())
}

/// The path to port 1 of `ctx`'s NIC.
fn path<P: Hal>(ctx: &Context<T<P>>) -> Res<AhAttr> {
    let port = ctx.query_port(1).map_err(|e| e.to_string())?;
    Ok(AhAttr {
        dgid: ctx.query_gid(1, 0).map_err(|e| e.to_string())?,
        dmac: port.mac,
        hop_limit: 64,
        port_num: 1,
        is_global: true,
        ..AhAttr::default()
    })
}

/// INIT, RTR, RTS to QP `dest` on `path`, with remote write.
fn connect<P: Hal>(qp: &Qp<T<P>>, dest: u32, path: AhAttr) -> Res<()> {
    let e = |e: rnic_driver::Error| e.to_string();
    let a = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: access::REMOTE_WRITE,
        ..QpAttr::default()
    };
    qp.modify(
        &a,
        qp_attr::STATE | qp_attr::PKEY_INDEX | qp_attr::PORT | qp_attr::ACCESS_FLAGS,
    )
    .map_err(e)?;
    let a = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: Some(Mtu::Mtu4096),
        dest_qp_num: dest,
        min_rnr_timer: 1,
        ah_attr: path,
        ..QpAttr::default()
    };
    let m = qp_attr::STATE
        | qp_attr::AV
        | qp_attr::PATH_MTU
        | qp_attr::DEST_QPN
        | qp_attr::RQ_PSN
        | qp_attr::MAX_DEST_RD_ATOMIC
        | qp_attr::MIN_RNR_TIMER;
    qp.modify(&a, m).map_err(e)?;
    let a = QpAttr {
        qp_state: QpState::Rts,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        ..QpAttr::default()
    };
    let m = qp_attr::STATE
        | qp_attr::SQ_PSN
        | qp_attr::TIMEOUT
        | qp_attr::RETRY_CNT
        | qp_attr::RNR_RETRY
        | qp_attr::MAX_QP_RD_ATOMIC;
    qp.modify(&a, m).map_err(e)
}

/// One all-reduce on every rank, each in its own thread; `it` numbers
/// it (its staging slots alternate between even and odd ones).
fn on_all<P: Hal>(
    ranks: &[Rank<P>],
    progress: &mut [Progress],
    targets: &[Target],
    chunk: usize,
    it: usize,
) -> Res<()> {
    let n = ranks.len();
    std::thread::scope(|s| {
        let handles: Vec<_> = progress
            .iter_mut()
            .enumerate()
            .map(|(r, p)| {
                let right = targets[(r + 1) % n];
                s.spawn(move || ring(&ranks[r], p, r, n, right, chunk, it))
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or_else(|_| Err("a rank panicked".into())))
            .collect::<Res<Vec<()>>>()
    })
    .map(|_| ())
}

/// Rank `r`'s part of the ring all-reduce.
fn ring<P: Hal>(
    k: &Rank<P>,
    p: &mut Progress,
    r: usize,
    n: usize,
    right: Target,
    chunk: usize,
    it: usize,
) -> Res<()> {
    let steps = n - 1;
    // Staging slots: one per reduce-scatter step, in two sets that
    // alternate between all-reduces, so that a fast rank never writes
    // over what a slow neighbour has not added yet.
    let slot = |s: usize| ((it % 2) * steps + s) * chunk;
    let idx = |i: isize| (i.rem_euclid(n as isize)) as usize;
    let mut buf = vec![0u8; chunk];
    let mut acc = vec![0u8; chunk];
    for s in 0..2 * steps {
        let reduce = s < steps;
        // What this step sends, and where it lands at the right neighbour.
        let (send, remote) = if reduce {
            let c = idx(r as isize - s as isize);
            (
                c,
                RemoteAddr {
                    addr: right.stage.addr + slot(s) as u64,
                    rkey: right.stage.rkey,
                },
            )
        } else {
            let c = idx(r as isize + 1 - (s - steps) as isize);
            (
                c,
                RemoteAddr {
                    addr: right.data.addr + (c * chunk) as u64,
                    rkey: right.data.rkey,
                },
            )
        };
        if s == steps {
            // The chunks sent while reducing are read by the device until
            // their completions: none may be written over before.
            drain(k, p)?;
        }
        let sge = k
            .data_tx
            .sge(send * chunk, chunk as u32)
            .map_err(|e| e.to_string())?;
        let (right_rank, left_rank) = ((r + 1) % n, (r + n - 1) % n);
        if k.tl_tx.active() {
            let into = if reduce {
                format!("staging slot {}", slot(s) / chunk)
            } else {
                format!("chunk {send} of its buffer")
            };
            k.tl_tx.note(format!(
                "rank {r} step {s} ({}): RDMA WRITE with immediate {} of chunk {send} into rank {right_rank}'s {into}",
                if reduce { "reduce-scatter" } else { "all-gather" },
                p.step
            ));
        }
        k.tx.post_send(&[SendWr {
            wr_id: s as u64,
            op: SendOp::RdmaWriteWithImm {
                remote,
                imm: p.step.to_be_bytes(),
            },
            payload: Payload::Sgl(&[sge]),
            flags: send_flags::SIGNALED,
        }])
        .map_err(|e| e.to_string())?;
        p.sent += 1;
        // The left neighbour's write of this step.
        let wc = next_recv(k, p)?;
        if k.tl_rx.active() {
            k.tl_rx.note(format!(
                "rank {r} step {s}: rank {left_rank}'s write with immediate {} arrived ({} B)",
                p.step, wc.byte_len
            ));
        }
        p.step = p.step.wrapping_add(1);
        let none: [rnic_driver::Sge; 0] = [];
        k.rx.post_recv(&[RecvWr {
            wr_id: wc.wr_id,
            sg_list: &none,
        }])
        .map_err(|e| e.to_string())?;
        if reduce {
            let c = idx(r as isize - s as isize - 1);
            k.stage.read(slot(s), &mut buf).map_err(|e| e.to_string())?;
            k.data
                .read(c * chunk, &mut acc)
                .map_err(|e| e.to_string())?;
            for (a, b) in acc.chunks_exact_mut(4).zip(buf.chunks_exact(4)) {
                let x = f32::from_le_bytes([a[0], a[1], a[2], a[3]])
                    + f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                a.copy_from_slice(&x.to_le_bytes());
            }
            k.data.write(c * chunk, &acc).map_err(|e| e.to_string())?;
        }
    }
    drain(k, p)
}

/// How long a rank waits for a completion before it gives up.
const PATIENCE: Duration = Duration::from_secs(30);

/// Waits for the receive completion of step `p.step`, counting the send
/// completions polled meanwhile; receives of later steps wait in
/// `p.waiting`.
fn next_recv<P: Hal>(k: &Rank<P>, p: &mut Progress) -> Res<WorkCompletion> {
    let deadline = Instant::now() + PATIENCE;
    loop {
        let step = p.step;
        if let Some(i) = p
            .waiting
            .iter()
            .position(|w| w.imm_data.map(u32::from_be_bytes) == Some(step))
        {
            return Ok(p.waiting.swap_remove(i));
        }
        poll(k, p, deadline)?;
    }
}

/// Waits until every send posted has completed.
fn drain<P: Hal>(k: &Rank<P>, p: &mut Progress) -> Res<()> {
    let deadline = Instant::now() + PATIENCE;
    while p.sent > 0 {
        poll(k, p, deadline)?;
    }
    Ok(())
}

/// Polls both of the rank's CQs once: send completions count down
/// `p.sent`, receive completions go to `p.waiting`.
fn poll<P: Hal>(k: &Rank<P>, p: &mut Progress, deadline: Instant) -> Res<()> {
    let mut wc = [WorkCompletion::default(); 16];
    let mut got = 0;
    for cq in [&k.tx_cq, &k.rx_cq] {
        let n = cq.poll(&mut wc).map_err(|e| e.to_string())?;
        got += n;
        for w in &wc[..n] {
            if w.status != WcStatus::Success {
                return Err(format!(
                    "a completion failed: {:?} {:?}",
                    w.opcode, w.status
                ));
            }
            match w.opcode {
                WcOpcode::RdmaWrite => p.sent -= 1,
                WcOpcode::RecvRdmaWithImm => p.waiting.push(*w),
                o => return Err(format!("an unexpected completion: {o:?}")),
            }
        }
    }
    // Each empty poll ran its NIC in this thread (`Cq::poll`). The rank
    // gives the core up then: what it waits for is another thread's to
    // run (its neighbour, a device worker, rnicd's), and spinning ranks
    // leave them too little of two cores (3 ranks over UDP, 8 KiB: 15.8 ms
    // spinning, 0.54 ms yielding; 4 ranks on the switch, 64 KiB: 25.5 ms,
    // 1.6 ms).
    if got == 0 {
        std::thread::yield_now();
    }
    if got == 0 && Instant::now() > deadline {
        return Err(format!(
            "step {}: no completion within {} s; {}",
            p.step,
            PATIENCE.as_secs(),
            counters(k)
        ));
    }
    Ok(())
}

/// The non-zero port counters of both of the rank's NICs, for a rank that
/// waited in vain.
fn counters<P: Hal>(k: &Rank<P>) -> String {
    [("sending NIC", &k.tx_ctx), ("receiving NIC", &k.rx_ctx)]
        .iter()
        .map(|(side, ctx)| match ctx.query_port_counters(1) {
            Ok(c) => {
                let some: Vec<String> = c
                    .iter()
                    .filter(|(_, v)| *v > 0)
                    .map(|(n, v)| format!("{n} {v}"))
                    .collect();
                format!("{side}: {}", some.join(", "))
            }
            Err(e) => format!("{side}: {e}"),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// The same ring over TCP sockets between `n` threads on 127.0.0.1:
/// `iters` timed all-reduces after a checked one. (Average time, wrong
/// elements of the checked one.)
fn tcp_allreduce(n: usize, size: usize, iters: usize) -> Res<(Duration, usize)> {
    let chunk = size / n;
    let listeners: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string()))
        .collect::<Res<_>>()?;
    let addrs: Vec<_> = listeners
        .iter()
        .map(|l| l.local_addr().map_err(|e| e.to_string()))
        .collect::<Res<_>>()?;
    // Rank r's stream to its right neighbour, and from its left one.
    let to_right: Vec<TcpStream> = (0..n)
        .map(|r| TcpStream::connect(addrs[(r + 1) % n]).map_err(|e| e.to_string()))
        .collect::<Res<_>>()?;
    let from_left: Vec<TcpStream> = listeners
        .iter()
        .map(|l| l.accept().map(|(s, _)| s).map_err(|e| e.to_string()))
        .collect::<Res<_>>()?;
    for s in to_right.iter().chain(&from_left) {
        s.set_nodelay(true).map_err(|e| e.to_string())?;
    }
    let mut bufs: Vec<Vec<f32>> = (0..n).map(|r| init(r, size / 4)).collect();
    let run = |bufs: &mut [Vec<f32>]| -> Res<()> {
        std::thread::scope(|s| {
            let hs: Vec<_> = bufs
                .iter_mut()
                .enumerate()
                .map(|(r, b)| {
                    let (tx, rx) = (&to_right[r], &from_left[r]);
                    s.spawn(move || tcp_ring(b, r, n, chunk / 4, tx, rx))
                })
                .collect();
            hs.into_iter()
                .map(|h| {
                    h.join()
                        .unwrap_or_else(|_| Err("a TCP rank panicked".into()))
                })
                .collect::<Res<Vec<()>>>()
        })
        .map(|_| ())
    };
    run(&mut bufs)?;
    let wrong = bufs
        .iter()
        .map(|b| {
            b.iter()
                .enumerate()
                .filter(|&(j, x)| *x != sum_at(n, j))
                .count()
        })
        .sum();
    let start = Instant::now();
    for _ in 0..iters {
        run(&mut bufs)?;
    }
    Ok((start.elapsed() / iters.max(1) as u32, wrong))
}

/// Rank `r`'s ring over TCP: each step sends a chunk (on a thread of its
/// own, so that no two ranks block each other writing) and receives one.
fn tcp_ring(
    b: &mut [f32],
    r: usize,
    n: usize,
    count: usize,
    tx: &TcpStream,
    rx: &TcpStream,
) -> Res<()> {
    let idx = |i: isize| (i.rem_euclid(n as isize)) as usize;
    let mut incoming = vec![0u8; count * 4];
    for s in 0..2 * (n - 1) {
        let reduce = s < n - 1;
        let send = if reduce {
            idx(r as isize - s as isize)
        } else {
            idx(r as isize + 1 - (s - (n - 1)) as isize)
        };
        let recv = idx(send as isize - 1);
        let out = floats(&b[send * count..(send + 1) * count]);
        std::thread::scope(|sc| {
            let w = sc.spawn(|| (&*tx).write_all(&out));
            let got = (&*rx).read_exact(&mut incoming);
            let sent = w
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("the writer panicked")));
            got.and(sent).map_err(|e| e.to_string())
        })?;
        let dst = &mut b[recv * count..(recv + 1) * count];
        for (d, x) in dst.iter_mut().zip(unfloats(&incoming)) {
            *d = if reduce { *d + x } else { x };
        }
    }
    Ok(())
}

/// What a rank tells its neighbour to connect: its QP, its NIC's GID and
/// MAC, and (from the receiving side) where to write.
struct Hello {
    qpn: u32,
    gid: [u8; 16],
    mac: [u8; 6],
    to: Option<Target>,
}

impl Hello {
    /// One line of text: `qpn gid mac [data_addr data_rkey stage_addr stage_rkey]`.
    fn line(&self) -> String {
        let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
        let mut s = format!("{} {} {}", self.qpn, hex(&self.gid), hex(&self.mac));
        if let Some(t) = self.to {
            s += &format!(
                " {} {} {} {}",
                t.data.addr, t.data.rkey, t.stage.addr, t.stage.rkey
            );
        }
        s + "\n"
    }

    fn parse(line: &str) -> Res<Hello> {
        let w: Vec<&str> = line.split_whitespace().collect();
        let bad = || format!("a bad hello: {line:?}");
        let bytes = |s: &str, n: usize| -> Res<Vec<u8>> {
            (0..n)
                .map(|i| {
                    s.get(2 * i..2 * i + 2)
                        .and_then(|h| u8::from_str_radix(h, 16).ok())
                        .ok_or_else(bad)
                })
                .collect()
        };
        let num = |i: usize| -> Res<u64> { w.get(i).and_then(|x| x.parse().ok()).ok_or_else(bad) };
        let mut h = Hello {
            qpn: num(0)? as u32,
            gid: bytes(w.get(1).ok_or_else(bad)?, 16)?
                .try_into()
                .map_err(|_| bad())?,
            mac: bytes(w.get(2).ok_or_else(bad)?, 6)?
                .try_into()
                .map_err(|_| bad())?,
            to: None,
        };
        if w.len() == 7 {
            h.to = Some(Target {
                data: RemoteAddr {
                    addr: num(3)?,
                    rkey: num(4)? as u32,
                },
                stage: RemoteAddr {
                    addr: num(5)?,
                    rkey: num(6)? as u32,
                },
            });
        }
        Ok(h)
    }

    fn path(&self) -> AhAttr {
        AhAttr {
            dgid: self.gid,
            dmac: self.mac,
            hop_limit: 64,
            port_num: 1,
            is_global: true,
            ..AhAttr::default()
        }
    }
}

/// This side's hello on `ctx`'s NIC, for QP `qpn`.
fn hello<P: Hal>(ctx: &Context<T<P>>, qpn: u32, to: Option<Target>) -> Res<Hello> {
    let p = path(ctx)?;
    Ok(Hello {
        qpn,
        gid: p.dgid,
        mac: p.dmac,
        to,
    })
}

/// Reads one line from `s`.
fn read_line(s: &mut TcpStream) -> Res<String> {
    let mut line = Vec::new();
    let mut b = [0u8; 1];
    while b[0] != b'\n' {
        s.read_exact(&mut b).map_err(|e| e.to_string())?;
        line.push(b[0]);
    }
    String::from_utf8(line).map_err(|e| e.to_string())
}

/// Connects to 127.0.0.1:`port`, trying again for 30 s while nobody
/// listens there yet.
fn dial(port: u16) -> Res<TcpStream> {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let why = match TcpStream::connect(("127.0.0.1", port)) {
            // A connection to a port nobody listens on yet can meet itself
            // (TCP simultaneous open) when the kernel picks that same port
            // as its source: that is no neighbour.
            Ok(s) if s.local_addr().ok() == s.peer_addr().ok() => "nobody listens".to_string(),
            Ok(s) => return Ok(s),
            Err(e) => e.to_string(),
        };
        if Instant::now() > deadline {
            return Err(format!("port {port}: {why}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `--wire udp`: this process is rank `a.rank` of `n`. Its sending NIC
/// is on a UDP wire to the right neighbour's receiving NIC (ports
/// `port + 2i` and `port + 2i + 1` of rank i); each rank tells its left
/// neighbour, over TCP (`port + 2n + i`), where to write; the TCP ring
/// runs between the same processes (`port + 3n + i`).
fn process(a: &Args, n: usize, size: usize, chunk: usize) -> Res<bool> {
    let r = a.rank;
    if r >= n {
        return Err(format!("--rank {r}: below --ranks {n}"));
    }
    let (right, left) = ((r + 1) % n, (r + n - 1) % n);
    let port = |i: usize| a.port + i as u16;
    let udp = |i: usize| std::net::SocketAddr::from(([127, 0, 0, 1], port(i)));
    let wire = |l: usize, rem: usize| {
        UdpWire::bind(udp(l), udp(rem)).map_err(|e| format!("UDP {}: {e}", udp(l)))
    };
    // What is shown: this rank's sending NIC.
    let (tl_tx, tl_rx) = (timeline(a)?, Timeline::new(Vec::new()));
    let stage = chunk * 2 * (n - 1);
    if a.wire == WireKind::Rnicd {
        let open = |tl: &Arc<Timeline>, peer: bool| -> Res<Nic<VfioUserHal>> {
            let hal = VfioUserHal::connect(&a.socket)
                .map_err(|e| format!("rnicd at {}: {e}", a.socket.display()))?;
            let hal = if peer {
                TraceHal::peer(hal, tl.clone())
            } else {
                TraceHal::new(hal, tl.clone())
            };
            Ok((None, Context::open(hal).map_err(|e| e.to_string())?))
        };
        let (tx, rx) = (open(&tl_tx, false)?, open(&tl_rx, true)?);
        let k = rank(tx, rx, size, stage, (tl_tx, tl_rx))?;
        return ranked(a, n, size, chunk, &k, "two devices each of one rnicd");
    }
    let k = rank(
        nic(r, 0, wire(2 * r, 2 * right + 1)?, &tl_tx, false)?,
        nic(r, 1, wire(2 * r + 1, 2 * left)?, &tl_rx, true)?,
        size,
        stage,
        (tl_tx, tl_rx),
    )?;
    ranked(a, n, size, chunk, &k, "two emulated NICs each on UDP wires")
}

/// Rank `a.rank` of `n`, one process each, on `k` (its NICs described by
/// `nics`): connects to its neighbours, runs the checked and the timed
/// all-reduces, then the same over TCP between the processes.
fn ranked<P: Hal>(
    a: &Args,
    n: usize,
    size: usize,
    chunk: usize,
    k: &Rank<P>,
    nics: &str,
) -> Res<bool> {
    let r = a.rank;
    let right = (r + 1) % n;
    let port = |i: usize| a.port + i as u16;
    let listen = |i: usize| TcpListener::bind(("127.0.0.1", port(i))).map_err(|e| e.to_string());
    let (hellos, ring_l) = (listen(2 * n + r)?, listen(3 * n + r)?);
    let right_target = std::thread::scope(|s| -> Res<Target> {
        // The left neighbour's hello: connect rx to it, then answer with
        // where to write (rx ready, its receives posted).
        let from_left = s.spawn(|| -> Res<()> {
            let (mut c, _) = hellos.accept().map_err(|e| e.to_string())?;
            let h = Hello::parse(&read_line(&mut c)?)?;
            ready_rx(k, h.qpn, h.path())?;
            let me = hello(&k.rx_ctx, k.rx.qp_num(), Some(target(k)))?;
            c.write_all(me.line().as_bytes()).map_err(|e| e.to_string())
        });
        let mut c = dial(port(2 * n + right))?;
        let me = hello(&k.tx_ctx, k.tx.qp_num(), None)?;
        c.write_all(me.line().as_bytes())
            .map_err(|e| e.to_string())?;
        let h = Hello::parse(&read_line(&mut c)?)?;
        connect(&k.tx, h.qpn, h.path())?;
        from_left
            .join()
            .unwrap_or_else(|_| Err("the exchange panicked".into()))?;
        h.to.ok_or_else(|| "the right neighbour said not where to write".into())
    })?;
    if r == 0 {
        println!("# rnic all-reduce: {n} ranks, one process each, {nics}");
        println!(
            "# ring: RDMA WRITE with immediate, {} steps per all-reduce",
            2 * (n - 1)
        );
    }
    k.data
        .write(0, &floats(&init(r, size / 4)))
        .map_err(|e| e.to_string())?;
    let mut p = Progress::default();
    ring(k, &mut p, r, n, right_target, chunk, 0)?;
    let mut got = vec![0u8; size];
    k.data.read(0, &mut got).map_err(|e| e.to_string())?;
    let wrong = unfloats(&got)
        .iter()
        .enumerate()
        .filter(|&(j, x)| *x != sum_at(n, j))
        .count();
    let start = Instant::now();
    for it in 0..a.iters {
        ring(k, &mut p, r, n, right_target, chunk, 1 + it)?;
    }
    let rdma = start.elapsed() / a.iters.max(1) as u32;
    // The same ring over TCP between the processes.
    let (tx, rx) = std::thread::scope(|s| -> Res<(TcpStream, TcpStream)> {
        let acc = s.spawn(|| ring_l.accept().map(|(c, _)| c).map_err(|e| e.to_string()));
        let tx = dial(port(3 * n + right))?;
        let rx = acc
            .join()
            .unwrap_or_else(|_| Err("accept panicked".into()))?;
        Ok((tx, rx))
    })?;
    tx.set_nodelay(true).map_err(|e| e.to_string())?;
    let mut b = init(r, size / 4);
    tcp_ring(&mut b, r, n, chunk / 4, &tx, &rx)?;
    let tcp_wrong = b
        .iter()
        .enumerate()
        .filter(|&(j, x)| *x != sum_at(n, j))
        .count();
    let start = Instant::now();
    for _ in 0..a.iters {
        tcp_ring(&mut b, r, n, chunk / 4, &tx, &rx)?;
    }
    let tcp = start.elapsed() / a.iters.max(1) as u32;
    if r == 0 {
        println!("#       size    count   type   redop      time    algbw    busbw  #wrong");
        println!("#        (B) (elements)                   (us)   (GB/s)   (GB/s)");
    }
    line(&format!("rnic rank {r}"), size, n, rdma, wrong);
    line(&format!("tcp rank {r}"), size, n, tcp, tcp_wrong);
    if wrong > 0 || tcp_wrong > 0 {
        eprintln!("allreduce: rank {r}: {wrong} wrong element(s) over RDMA, {tcp_wrong} over TCP");
        return Ok(false);
    }
    println!("allreduce: rank {r}: every element is the sum");
    Ok(true)
}

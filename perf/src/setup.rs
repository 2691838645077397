//! The measured setups: two sides, each an application thread's QPs with
//! their CQ and buffer, on one device (two contexts, the device's own
//! loopback wire) or on two devices on an in-memory switch; the device
//! inline or on its own thread.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rnic_driver::{
    access, qp_attr, AhAttr, Context, Cq, Mr, Mtu, Pd, Qp, QpAttr, QpCap, QpInit, QpState, QpType,
    RemoteAddr,
};
use rnic_emu::net::{FaultConfig, Faults, Loopback, ShmWire, Switch, UdpWire};
use rnic_emu::Clock;
use rnic_emu::{EmuConfig, EmuDevice, EmuHal, ExecMode};
use rnic_queues::Hal;

use crate::run;

/// Where the two sides run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Wire {
    /// One device, both sides on it (two contexts), frames on its loopback.
    Loopback,
    /// Two devices on an in-memory switch.
    Switch,
    /// Two processes, one device each, on a UDP wire over 127.0.0.1.
    Udp,
    /// Two processes, one device each, on a shared-memory wire.
    Shm,
}

impl Wire {
    /// Whether the two sides are two processes.
    pub fn two_processes(self) -> bool {
        matches!(self, Wire::Udp | Wire::Shm)
    }
}

/// One side: its QPs, their CQ, and a registered buffer.
pub struct Side {
    pub ctx: Context<EmuHal>,
    pub cq: Cq<EmuHal>,
    pub qps: Vec<Qp<EmuHal>>,
    pub mr: Mr<EmuHal>,
    /// Receives outstanding on each QP (run.rs keeps them topped up).
    pub recvs: Vec<AtomicU32>,
    /// What its wait loops do between two looks.
    wait: Wait,
    /// Index in `qps` of each QP number.
    index: HashMap<u32, usize>,
    _pd: Pd<EmuHal>,
}

impl Side {
    /// The index in `qps` of the QP numbered `qpn` (a completion's).
    pub fn index_of(&self, qpn: u32) -> usize {
        *self.index.get(&qpn).expect("a QP of this side")
    }

    /// Where the peer writes to and reads from.
    pub fn remote(&self) -> RemoteAddr {
        RemoteAddr {
            addr: self.mr.addr(),
            rkey: self.mr.rkey(),
        }
    }

    /// Whether nothing runs this side's device unless its thread does (a
    /// test in which it has no thread of its own gives it one).
    pub fn needs_driver(&self) -> bool {
        matches!(self.wait, Wait::Poll(_))
    }

    /// Runs this side's device until `stop` is set.
    pub fn drive_until(&self, stop: &std::sync::atomic::AtomicBool) {
        while !stop.load(Ordering::Acquire) {
            self.idle();
        }
    }

    /// What a wait loop does between two looks.
    pub fn idle(&self) {
        match &self.wait {
            Wait::Spin => std::hint::spin_loop(),
            Wait::SpinRelax(n) => {
                // Now and then the waiting thread lends itself to the
                // device (`Hal::relax`): an inline device's timers (a
                // retransmission) run only in a thread that runs it.
                if n.fetch_add(1, Ordering::Relaxed) % RELAX_EVERY == 0 {
                    self.ctx.hal().relax();
                } else {
                    std::hint::spin_loop();
                }
            }
            Wait::Poll(d) => d.poll(),
            Wait::Relax => self.ctx.hal().relax(),
        }
    }
}

/// Spins between two runs of the device in a waiting thread.
const RELAX_EVERY: u32 = 4096;

/// How a side's wait loops wait.
enum Wait {
    /// Spin: the threads that must run (a device thread) have cores.
    Spin,
    /// Spin, and run the inline device now and then (a count of the
    /// spins).
    SpinRelax(AtomicU32),
    /// Run the inline device whose peer is in another process (nobody else
    /// makes it look at its wire), as a poll-mode driver does.
    Poll(Arc<EmuDevice>),
    /// Lend the thread to the device (`Hal::relax`): the peer is in
    /// another process, and a device worker here would have to compete
    /// with this thread for a core.
    Relax,
}

/// The devices and the two sides.
pub struct Setup {
    pub a: Side,
    pub b: Side,
    _devs: Vec<Arc<EmuDevice>>,
}

/// What a setup is made of.
pub struct Params {
    pub mode: ExecMode,
    /// The QPs' local ACK timeout code (4.096 µs × 2^timeout).
    pub timeout: u8,
    /// Share of frames each port drops as it sends them.
    pub loss: f64,
    pub wire: Wire,
    pub qps: usize,
    pub depth: u32,
    /// Receives per QP the receive queue holds.
    pub rx_depth: u32,
    /// Post `rx_depth` receives on every QP before either side sends (a
    /// SEND bandwidth test, as perftest posts its receives before its
    /// sides synchronise): a sender that starts first would otherwise
    /// meet an empty receive queue, and every RNR NAK sends its whole
    /// window again.
    pub prepost: bool,
    pub inline: u32,
    pub buf: usize,
    pub mtu: Mtu,
}

fn side(ctx: Context<EmuHal>, p: &Params) -> Side {
    let pd = ctx.alloc_pd().expect("alloc_pd");
    // As many CQEs as work requests may be outstanding, sends and
    // receives, within what the device allows.
    let cqe = ((p.depth + p.rx_depth.max(p.depth)) * p.qps as u32).clamp(64, 1 << 16);
    let cq = ctx.create_cq(cqe).expect("create_cq");
    let cap = QpCap {
        max_send_wr: p.depth,
        // A ping-pong keeps half the send depth posted.
        max_recv_wr: p.rx_depth.max(p.depth),
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: p.inline,
    };
    let qps: Vec<Qp<EmuHal>> = (0..p.qps)
        .map(|_| {
            pd.create_qp(&QpInit {
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                cap,
                qp_type: QpType::Rc,
                sq_sig_all: false,
            })
            .expect("create_qp")
        })
        .collect();
    let rights =
        access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;
    let mr = pd.alloc_mr(p.buf, rights).expect("alloc_mr");
    Side {
        ctx,
        cq,
        index: qps
            .iter()
            .enumerate()
            .map(|(i, q)| (q.qp_num(), i))
            .collect(),
        recvs: (0..p.qps).map(|_| AtomicU32::new(0)).collect(),
        qps,
        mr,
        wait: match p.mode {
            ExecMode::Inline => Wait::SpinRelax(AtomicU32::new(0)),
            ExecMode::Thread => Wait::Spin,
        },
        _pd: pd,
    }
}

/// A device's configuration: its addresses, and QPs for both sides of a
/// loopback.
fn config(p: &Params, mac: [u8; 6], ipv4: [u8; 4]) -> EmuConfig {
    let d = EmuConfig::default();
    EmuConfig {
        mac,
        ipv4,
        max_qp: d.max_qp.max(2 * p.qps as u32 + 2),
        ..d
    }
}

/// `wire` dropping a share `loss` of the frames sent on it (with no loss,
/// `wire` itself: the fault injector costs a lock per frame).
fn lossy<W: rnic_emu::net::Wire + 'static>(
    wire: W,
    loss: f64,
    seed: u64,
) -> Box<dyn rnic_emu::net::Wire> {
    if loss == 0.0 {
        return Box::new(wire);
    }
    let (w, handle) = Faults::new(wire, Clock::real(), seed);
    handle.set(FaultConfig {
        drop: loss,
        rx: false,
        ..FaultConfig::default()
    });
    Box::new(w)
}

/// RESET → RTS, connected to QP `dest` of the side whose GID is `dgid`.
fn connect(qp: &Qp<EmuHal>, dgid: [u8; 16], dest: u32, p: &Params) {
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC,
        ..QpAttr::default()
    };
    qp.modify(
        &init,
        qp_attr::STATE | qp_attr::PKEY_INDEX | qp_attr::PORT | qp_attr::ACCESS_FLAGS,
    )
    .expect("INIT");
    let mut rtr = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: Some(p.mtu),
        dest_qp_num: dest,
        max_dest_rd_atomic: 16,
        min_rnr_timer: 1,
        ..QpAttr::default()
    };
    rtr.ah_attr = AhAttr {
        dgid,
        port_num: 1,
        is_global: true,
        ..AhAttr::default()
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
    )
    .expect("RTR");
    let rts = QpAttr {
        qp_state: QpState::Rts,
        timeout: p.timeout,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 16,
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
    )
    .expect("RTS");
}

impl Setup {
    pub fn new(p: &Params) -> Setup {
        let (devs, ca, cb) = match p.wire {
            Wire::Loopback => {
                let dev = EmuDevice::builder(config(p, [0x02, 0, 0, 0, 0, 1], [192, 0, 2, 1]))
                    .mode(p.mode)
                    .wire(lossy(Loopback::default(), p.loss, 1))
                    .build()
                    .expect("device");
                let a = Context::open(dev.hal()).expect("open");
                let b = a.open_another().expect("a second context");
                (vec![dev], a, b)
            }
            Wire::Switch => {
                let sw = Switch::new();
                let devs: Vec<Arc<EmuDevice>> = (1..=2u8)
                    .map(|n| {
                        let cfg = config(p, [0x02, 0, 0, 0, 0, n], [192, 0, 2, n]);
                        // Each side's thread runs its own NIC.
                        EmuDevice::builder(cfg)
                            .mode(p.mode)
                            .poll_mode(true)
                            .wire(lossy(sw.port(), p.loss, n.into()))
                            .build()
                            .expect("device")
                    })
                    .collect();
                let a = Context::open(devs[0].hal()).expect("open");
                let b = Context::open(devs[1].hal()).expect("open");
                (devs, a, b)
            }
            Wire::Udp | Wire::Shm => panic!("two processes are set up by `remote`"),
        };
        let (mut a, mut b) = (side(ca, p), side(cb, p));
        if p.wire == Wire::Switch && p.mode == ExecMode::Inline {
            a.wait = Wait::Poll(devs[0].clone());
            b.wait = Wait::Poll(devs[1].clone());
        }
        let gid = |s: &Side| s.ctx.query_gid(1, 0).expect("GID 0");
        let (ga, gb) = (gid(&a), gid(&b));
        for (qa, qb) in a.qps.iter().zip(&b.qps) {
            connect(qa, gb, qb.qp_num(), p);
            connect(qb, ga, qa.qp_num(), p);
        }
        if p.prepost {
            run::post_receives(&b, p.rx_depth);
        }
        Setup { a, b, _devs: devs }
    }
}

/// A line-oriented control connection to the other process (TCP on
/// 127.0.0.1), used between runs only: during one, the two talk over
/// RDMA.
pub struct Control {
    stream: TcpStream,
    buf: Vec<u8>,
}

impl Control {
    fn new(stream: TcpStream) -> Control {
        stream.set_nodelay(true).expect("TCP_NODELAY");
        Control {
            stream,
            buf: Vec::new(),
        }
    }

    /// Sends one line.
    pub fn send(&mut self, line: &str) {
        self.stream
            .write_all(format!("{line}\n").as_bytes())
            .expect("the other process hung up");
    }

    /// Waits for the next line, blocking in the kernel.
    pub fn line(&mut self) -> String {
        loop {
            if let Some(l) = self.take_line() {
                return l;
            }
            let mut chunk = [0u8; 512];
            match self.stream.read(&mut chunk) {
                Ok(0) => panic!("the other process hung up"),
                Ok(n) => self.buf.extend_from_slice(&chunk[..n]),
                Err(e) => panic!("control connection: {e}"),
            }
        }
    }

    /// Expects `want` as the next line.
    pub fn expect(&mut self, want: &str) {
        let got = self.line();
        assert_eq!(got, want, "the other process is out of step");
    }

    fn take_line(&mut self) -> Option<String> {
        let i = self.buf.iter().position(|&b| b == b'\n')?;
        let line = String::from_utf8_lossy(&self.buf[..i]).into_owned();
        self.buf.drain(..=i);
        Some(line)
    }
}

/// This process's side of a two-process run, the other's buffer, and
/// the control connection.
pub struct Remote {
    pub me: Side,
    pub peer: RemoteAddr,
    /// The other side's control word: the last 8 bytes of its buffer,
    /// where the client writes, over RDMA, that a run is over (so that
    /// the server learns it from its memory, with no system call).
    pub peer_word: RemoteAddr,
    pub ctl: Control,
    _dev: Arc<EmuDevice>,
    /// The shared-memory file, removed by the server at the end.
    shm: Option<PathBuf>,
}

impl Drop for Remote {
    fn drop(&mut self) {
        if let Some(p) = &self.shm {
            let _ = std::fs::remove_file(p);
        }
    }
}

/// The shared-memory wire's file for control port `port`.
fn shm_path(port: u16) -> PathBuf {
    let dir = PathBuf::from("/dev/shm");
    let dir = if dir.is_dir() {
        dir
    } else {
        std::env::temp_dir()
    };
    dir.join(format!("rnic-perf-{port}"))
}

fn lo(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// Sets up this process's side of a two-process run over `p.wire`: the
/// server listens on 127.0.0.1:`port` (and makes the shared-memory wire,
/// or binds UDP port `port + 1`), the client connects (UDP `port + 2`).
/// Both exchange `hello` (which must match: the same test and options),
/// their QP numbers, GIDs and buffers, and connect their QPs.
pub fn remote(p: &Params, client: bool, port: u16, hello: &str) -> Result<Remote, String> {
    let udp = |local: u16, remote: u16| {
        UdpWire::bind(lo(local), lo(remote)).map_err(|e| format!("UDP wire on {local}: {e}"))
    };
    let (stream, wire, shm): (TcpStream, Box<dyn rnic_emu::net::Wire>, _) = if client {
        let deadline = Instant::now() + Duration::from_secs(10);
        let stream = loop {
            match TcpStream::connect(lo(port)) {
                Ok(s) => break s,
                Err(e) if Instant::now() > deadline => {
                    return Err(format!("no server on 127.0.0.1:{port}: {e}"))
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        };
        let wire: Box<dyn rnic_emu::net::Wire> = match p.wire {
            Wire::Shm => Box::new(
                ShmWire::open(shm_path(port)).map_err(|e| format!("shared-memory wire: {e}"))?,
            ),
            _ => Box::new(udp(port + 2, port + 1)?),
        };
        (stream, wire, None)
    } else {
        let listener =
            TcpListener::bind(lo(port)).map_err(|e| format!("listen on 127.0.0.1:{port}: {e}"))?;
        let (wire, shm): (Box<dyn rnic_emu::net::Wire>, _) = match p.wire {
            Wire::Shm => {
                let path = shm_path(port);
                let w = ShmWire::create(&path)
                    .map_err(|e| format!("shared-memory wire {}: {e}", path.display()))?;
                (Box::new(w), Some(path))
            }
            _ => (Box::new(udp(port + 1, port + 2)?), None),
        };
        println!("rnic-perf: waiting for the client on 127.0.0.1:{port}");
        let (stream, _) = listener.accept().map_err(|e| format!("accept: {e}"))?;
        (stream, wire, shm)
    };
    let n: u8 = if client { 2 } else { 1 };
    let cfg = config(p, [0x02, 0, 0, 0, 0, n], [192, 0, 2, n]);
    let dev = EmuDevice::builder(cfg)
        .mode(p.mode)
        .wire(wire)
        .build()
        .map_err(|e| e.to_string())?;
    let ctx = Context::open(dev.hal()).map_err(|e| format!("open: {e}"))?;
    let mut me = side(ctx, p);
    me.wait = Wait::Relax;
    let mut ctl = Control::new(stream);
    let gid = me.ctx.query_gid(1, 0).expect("GID 0");
    let hex: String = gid.iter().map(|b| format!("{b:02x}")).collect();
    let qpns: Vec<String> = me.qps.iter().map(|q| q.qp_num().to_string()).collect();
    ctl.send(&format!("hello {hello}"));
    ctl.send(&format!(
        "side {hex} {} {} {} {}",
        me.mr.addr(),
        me.mr.rkey(),
        me.mr.len(),
        qpns.join(",")
    ));
    let theirs = ctl.line();
    if theirs != format!("hello {hello}") {
        return Err(format!(
            "the other side runs {theirs:?}, this one hello {hello:?}: give both the same test and options"
        ));
    }
    let line = ctl.line();
    let f: Vec<&str> = line.split(' ').collect();
    let bad = || format!("a malformed line from the other side: {line:?}");
    if f.len() != 6 || f[0] != "side" || f[1].len() != 32 {
        return Err(bad());
    }
    let mut dgid = [0u8; 16];
    for (i, g) in dgid.iter_mut().enumerate() {
        *g = u8::from_str_radix(&f[1][2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    let peer = RemoteAddr {
        addr: f[2].parse().map_err(|_| bad())?,
        rkey: f[3].parse().map_err(|_| bad())?,
    };
    let len: u64 = f[4].parse().map_err(|_| bad())?;
    if len < 8 {
        return Err(bad());
    }
    let peer_word = RemoteAddr {
        addr: peer.addr + len - 8,
        rkey: peer.rkey,
    };
    let dests: Vec<u32> = f[5]
        .split(',')
        .map(|q| q.parse().map_err(|_| bad()))
        .collect::<Result<_, _>>()?;
    if dests.len() != me.qps.len() {
        return Err(bad());
    }
    for (qp, &dest) in me.qps.iter().zip(&dests) {
        connect(qp, dgid, dest, p);
    }
    if p.prepost && !client {
        run::post_receives(&me, p.rx_depth);
    }
    // Neither side sends before the other's QPs are ready.
    ctl.send("ready");
    ctl.expect("ready");
    Ok(Remote {
        me,
        peer,
        peer_word,
        ctl,
        _dev: dev,
        shm,
    })
}

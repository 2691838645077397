//! What `rc_pingpong` and `ud_pingpong` share: the options of
//! `ibv_*_pingpong` and of the UDP wire, the NIC on that wire, the address
//! exchange in the libibverbs examples' text format, polling, and the
//! counters printed at the end.

use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use rnic_driver::{Context, Cq, WorkCompletion};
use rnic_emu::net::{Direction, FaultConfig, FaultHandle, Faults, Tap, UdpWire, Wire};
use rnic_emu::wire::frame::describe;
use rnic_emu::{Clock, EmuConfig, EmuDevice, EmuHal, ExecMode, RunStats};
use rnic_middleware::{JsonLines, Print, Sink, Timeline, TraceHal};

/// The platform: the emulated NIC's, traced with `--registers` or
/// `--trace` (and otherwise only passed through).
pub type H = TraceHal<EmuHal>;
/// The driver context over the emulated NIC.
pub type Ctx = Context<H>;

/// Options of both ping-pongs beside the message size.
#[derive(Args, Debug)]
pub struct Common {
    /// Server to connect to; without it, wait for a client.
    pub host: Option<String>,
    /// TCP port of the address exchange.
    #[arg(short, long, default_value_t = 18515)]
    pub port: u16,
    /// Address the server listens on for the exchange.
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::UNSPECIFIED))]
    pub bind: IpAddr,
    /// Number of exchanges.
    #[arg(short = 'n', long, default_value_t = 1000)]
    pub iters: u32,
    /// Receives posted at a time.
    #[arg(short, long, default_value_t = 500)]
    pub rx_depth: u32,
    /// Local GID index (0: the IPv4-mapped GID, 1: link-local IPv6).
    #[arg(short, long, default_value_t = 0)]
    pub gid_idx: u8,
    /// Service level.
    #[arg(short = 'l', long, default_value_t = 0)]
    pub sl: u8,
    /// The UDP wire: LOCAL=REMOTE socket addresses.
    #[arg(long, default_value = "127.0.0.1:47001=127.0.0.1:47002")]
    pub wire: String,
    /// This NIC's MAC address.
    #[arg(long, default_value = "02:00:00:00:00:01")]
    pub mac: String,
    /// This NIC's IPv4 address (its GID 0).
    #[arg(long, default_value = "192.0.2.1")]
    pub ipv4: Ipv4Addr,
    /// Faults on this side's wire, both directions unless `tx=0` or `rx=0`:
    /// e.g. `drop=0.02,reorder=0.02` (see `FaultConfig`'s `FromStr`).
    #[arg(long)]
    pub faults: Option<FaultConfig>,
    /// Seed of the fault injector.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Longest wait for a completion, in seconds.
    #[arg(long, default_value_t = 30.0)]
    pub wait: f64,
    /// Keep the NIC up this many seconds after the last completion, so
    /// that a peer whose last ACK from here was lost gets it again when it
    /// retransmits (the libibverbs examples give no sign of being done).
    #[arg(long, default_value_t = 0.0)]
    pub linger: f64,
    /// At the end, print every port counter ("counter NAME VALUE") and what
    /// the fault injector did.
    #[arg(long)]
    pub counters: bool,
    /// Print every register access, command, WQE, frame and CQE of this
    /// side as it happens (rnic-middleware's TraceHal).
    #[arg(long)]
    pub registers: bool,
    /// Write the same events to this file as JSON lines, for rnic-trace.
    #[arg(long)]
    pub trace: Option<std::path::PathBuf>,
}

impl Common {
    /// The longest wait for a completion.
    pub fn limit(&self) -> Result<Duration, String> {
        Duration::try_from_secs_f64(self.wait).map_err(|e| format!("--wait: {e}"))
    }
}

/// The NIC, in thread mode on its UDP wire (behind the fault injector
/// with `--faults`), and the driver's context on it.
pub struct Nic {
    dev: Arc<EmuDevice>,
    pub ctx: Ctx,
    pub faults: Option<FaultHandle>,
}

/// `w`, with a tap that puts its frames on `tl` if anything reads it:
/// describing every frame costs tens of microseconds.
fn tapped(w: impl Wire + 'static, tl: &Arc<Timeline>) -> Box<dyn Wire> {
    if !tl.active() {
        return Box::new(w);
    }
    let t = tl.clone();
    Box::new(Tap::new(
        w,
        Arc::new(move |d, f: &[u8]| t.frame(d == Direction::Tx, describe(f), f)),
    ))
}

impl Nic {
    pub fn open(a: &Common) -> Result<Nic, String> {
        let (local, remote) = parse_wire(&a.wire)?;
        let wire = UdpWire::bind(local, remote).map_err(|e| format!("UDP wire on {local}: {e}"))?;
        let cfg = EmuConfig {
            mac: parse_mac(&a.mac)?,
            ipv4: a.ipv4.octets(),
            ..EmuConfig::default()
        };
        let mut sinks: Vec<Arc<dyn Sink>> = Vec::new();
        if a.registers {
            sinks.push(Arc::new(Print));
        }
        if let Some(path) = &a.trace {
            let f = std::fs::File::create(path).map_err(|e| format!("{}: {e}", path.display()))?;
            sinks.push(Arc::new(JsonLines::new(f)));
        }
        let tl = Timeline::new(sinks);
        // The injector holds frames on the NIC's clock, which polls it.
        let clock = Clock::real();
        let builder = EmuDevice::builder(cfg)
            .clock(clock.clone())
            .mode(ExecMode::Thread);
        // The tap sees what the NIC sends and receives, above the faults.
        let (builder, faults) = match a.faults {
            Some(f) => {
                let (wire, handle) = Faults::new(wire, clock, a.seed);
                handle.set(f);
                (builder.wire(tapped(wire, &tl)), Some(handle))
            }
            None => (builder.wire(tapped(wire, &tl)), None),
        };
        let dev = builder.build().map_err(|e| e.to_string())?;
        let ctx = Context::open(TraceHal::new(dev.hal(), tl))
            .map_err(|e| format!("Couldn't open the NIC: {e}"))?;
        Ok(Nic { dev, ctx, faults })
    }

    /// What the end of a run does: stay up `--linger` seconds, then with
    /// `--counters` print the port's counters and what the injector did.
    pub fn finish(&self, a: &Common) -> Result<(), String> {
        if a.linger > 0.0 {
            std::thread::sleep(Duration::try_from_secs_f64(a.linger).map_err(|e| e.to_string())?);
        }
        if !a.counters {
            return Ok(());
        }
        let c = self.ctx.query_port_counters(1).map_err(|e| e.to_string())?;
        for (name, v) in c.iter() {
            println!("counter {} {v}", name.to_lowercase());
        }
        if let Some(f) = &self.faults {
            let s = f.stats();
            println!(
                "faults frames {} dropped {} duplicated {} reordered {} delayed {} corrupted {}",
                s.frames, s.dropped, s.duplicated, s.reordered, s.delayed, s.corrupted
            );
        }
        Ok(())
    }
}

/// How the NIC has been run so far: a mark for [`Nic::print_run`].
pub fn mark(nic: &Nic) -> RunStats {
    nic.dev.run_stats()
}

impl Nic {
    /// With `--counters`, prints how the NIC was run since `since` (a
    /// [`mark`]): steps run by this program's waiting thread, and how the
    /// device worker slept and woke ("late": work that waited for the
    /// worker's clock; "takeovers": NICs it took back from a thread that
    /// stopped looking, with work waiting).
    pub fn print_run(&self, a: &Common, what: &str, since: &RunStats) {
        if !a.counters {
            return;
        }
        let now = self.dev.run_stats();
        let (w0, w1) = (
            since.worker.unwrap_or_default(),
            now.worker.unwrap_or_default(),
        );
        println!(
            "{what}: lent_steps {} worker sleeps {} woken {} timeouts {} late {} takeovers {}",
            now.lent_steps - since.lent_steps,
            w1.sleeps - w0.sleeps,
            w1.woken - w0.woken,
            w1.timeouts - w0.timeouts,
            w1.late - w0.late,
            w1.takeovers - w0.takeovers
        );
    }
}

/// What the libibverbs ping-pongs exchange.
#[derive(Debug, Clone, Copy)]
pub struct Dest {
    pub lid: u16,
    pub qpn: u32,
    pub psn: u32,
    pub gid: [u8; 16],
}

impl Dest {
    /// This side's: `qpn`, a PSN that differs between runs, GID `gid_idx`.
    pub fn local(ctx: &Ctx, qpn: u32, gid_idx: u8) -> Result<Dest, String> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        Ok(Dest {
            lid: 0,
            qpn,
            psn: (std::process::id().wrapping_mul(2_654_435_761) ^ nanos) & 0xff_ffff,
            gid: ctx
                .query_gid(1, gid_idx.into())
                .map_err(|e| format!("can't read sgid of index {gid_idx}: {e}"))?,
        })
    }

    /// `%04x:%06x:%06x:` and the GID as 32 hex digits, NUL-terminated: 52
    /// bytes.
    fn wire(&self) -> [u8; 52] {
        let gid: String = self.gid.iter().map(|b| format!("{b:02x}")).collect();
        let s = format!("{:04x}:{:06x}:{:06x}:{gid}", self.lid, self.qpn, self.psn);
        let mut out = [0u8; 52];
        out[..51].copy_from_slice(s.as_bytes());
        out
    }

    fn parse(msg: &[u8]) -> Result<Dest, String> {
        let s = std::str::from_utf8(msg)
            .map_err(|_| "address is not text".to_string())?
            .trim_end_matches('\0');
        let f: Vec<&str> = s.split(':').collect();
        let hex = |x: &str| u32::from_str_radix(x, 16).map_err(|e| format!("{x:?}: {e}"));
        if f.len() != 4 || f[3].len() != 32 {
            return Err(format!("malformed address {s:?}"));
        }
        let mut gid = [0u8; 16];
        for (i, g) in gid.iter_mut().enumerate() {
            *g = u8::from_str_radix(&f[3][2 * i..2 * i + 2], 16).map_err(|e| e.to_string())?;
        }
        Ok(Dest {
            lid: hex(f[0])? as u16,
            qpn: hex(f[1])?,
            psn: hex(f[2])?,
            gid,
        })
    }

    pub fn print(&self, what: &str) {
        println!(
            "  {what} address: {}LID 0x{:04x}, QPN 0x{:06x}, PSN 0x{:06x}, GID {}",
            if what == "local" { " " } else { "" },
            self.lid,
            self.qpn,
            self.psn,
            Ipv6Addr::from(self.gid)
        );
    }
}

pub fn read_exact(s: &mut TcpStream, n: usize) -> Result<Vec<u8>, String> {
    let mut buf = vec![0u8; n];
    s.read_exact(&mut buf)
        .map_err(|e| format!("address exchange: {e}"))?;
    Ok(buf)
}

/// The exchange: the client sends its address, the server answers with
/// its own once `connect` has taken the client's, the client says "done".
/// Returns the connection (for what follows) and the peer's address.
pub fn exchange(
    a: &Common,
    me: &Dest,
    connect: impl FnOnce(&Dest) -> Result<(), String>,
) -> Result<(TcpStream, Dest), String> {
    match &a.host {
        Some(host) => {
            let mut s = TcpStream::connect((host.as_str(), a.port))
                .map_err(|e| format!("couldn't connect to {host}:{}: {e}", a.port))?;
            s.write_all(&me.wire())
                .map_err(|e| format!("couldn't send local address: {e}"))?;
            let rem = Dest::parse(&read_exact(&mut s, 52)?)?;
            s.write_all(b"done\0").map_err(|e| e.to_string())?;
            connect(&rem)?;
            Ok((s, rem))
        }
        None => {
            let l = TcpListener::bind((a.bind, a.port))
                .map_err(|e| format!("couldn't listen to port {}: {e}", a.port))?;
            let (mut s, _) = l.accept().map_err(|e| format!("accept() failed: {e}"))?;
            let rem = Dest::parse(&read_exact(&mut s, 52)?)?;
            connect(&rem)?;
            s.write_all(&me.wire())
                .map_err(|e| format!("couldn't send local address: {e}"))?;
            let done = read_exact(&mut s, 5)?;
            if &done != b"done\0" {
                return Err(format!("expected \"done\", got {done:?}"));
            }
            Ok((s, rem))
        }
    }
}

/// Polls until at least one completion arrives, or `limit` passes. Each
/// empty poll runs the NIC in this thread ([`Cq::poll`]).
pub fn poll(
    cq: &Cq<H>,
    wc: &mut [WorkCompletion],
    since: Instant,
    limit: Duration,
) -> Result<usize, String> {
    let start = Instant::now();
    loop {
        let n = cq.poll(wc).map_err(|e| format!("poll CQ failed: {e}"))?;
        if n > 0 {
            return Ok(n);
        }
        if start.elapsed() > limit {
            return Err(format!(
                "no completion for {limit:?} ({:.1} s into the run)",
                since.elapsed().as_secs_f64()
            ));
        }
    }
}

/// The two lines the libibverbs ping-pongs end with.
pub fn report(size: usize, iters: u32, start: Instant) {
    let usec = start.elapsed().as_secs_f64() * 1e6;
    let bytes = size as u64 * iters as u64 * 2;
    println!(
        "{bytes} bytes in {:.2} seconds = {:.2} Mbit/sec",
        usec / 1e6,
        bytes as f64 * 8.0 / usec
    );
    println!(
        "{iters} iters in {:.2} seconds = {:.2} usec/iter",
        usec / 1e6,
        usec / iters as f64
    );
}

fn parse_mac(s: &str) -> Result<[u8; 6], String> {
    let v: Vec<u8> = s
        .split(':')
        .map(|x| u8::from_str_radix(x, 16))
        .collect::<Result<_, _>>()
        .map_err(|e| format!("MAC {s:?}: {e}"))?;
    v.try_into().map_err(|_| format!("MAC {s:?}: six bytes"))
}

fn parse_wire(s: &str) -> Result<(SocketAddr, SocketAddr), String> {
    let (l, r) = s
        .split_once('=')
        .ok_or_else(|| format!("wire {s:?}: LOCAL=REMOTE"))?;
    let p = |x: &str| {
        x.parse::<SocketAddr>()
            .map_err(|e| format!("wire address {x:?}: {e}"))
    };
    Ok((p(l)?, p(r)?))
}

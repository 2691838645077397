//! `rnic-perf`: perftest's latency and bandwidth tests over rnic on the
//! emulated device, each figure printed beside the baselines measured in
//! the same run at the same sizes (the cache-line ping-pong between two
//! cores, TCP over loopback, one core's memcpy) as a ratio to them.
//!
//! ```text
//! rnic-perf write_lat -s 8 -n 100000
//! rnic-perf write_bw -a --device thread --report-gbits
//! ```
//!
//! Modes: `--device inline` (the device runs in the posting thread) or
//! `thread` (a device thread); `--wire loopback` (one device, two
//! contexts) or `switch` (two devices on an in-memory switch). With an
//! inline device the two sides are two application threads pinned to
//! cores 0 and 1; with a device thread, one application thread plays both
//! sides of a ping-pong and the device has the other core.
//!
//! `--wire shm` and `--wire udp` run the two sides as two processes, as
//! perftest does: a server, then a client with `--client`, both with the
//! same test and options, meeting on TCP port `-p` of 127.0.0.1. With an
//! inline device (the default) each process is one thread that runs its
//! device while it waits, as a poll-mode driver does (over UDP the device
//! then reads its socket without waiting on each step); with a device
//! thread, each process has it and the application thread yields while
//! it waits (four busy threads would share two cores). The client prints
//! the figures.
//!
//! ```text
//! rnic-perf write_lat --wire shm &  rnic-perf write_lat --wire shm --client
//! ```

use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::{Parser, ValueEnum};
use rnic_driver::Mtu;
use rnic_emu::ExecMode;

mod baseline;
mod cpu;
mod plot;
mod run;
mod setup;
mod stats;

use plot::{Figures, Measure};
use run::{Budget, Knobs, Op};
use setup::{Params, Remote, Setup, Wire};
use stats::{Bandwidth, Latency};

/// perftest's test names.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
#[value(rename_all = "snake_case")]
enum Test {
    WriteLat,
    ReadLat,
    SendLat,
    AtomicLat,
    WriteBw,
    ReadBw,
    SendBw,
}

impl Test {
    fn op(self) -> Op {
        match self {
            Test::WriteLat | Test::WriteBw => Op::Write,
            Test::ReadLat | Test::ReadBw => Op::Read,
            Test::SendLat | Test::SendBw => Op::Send,
            Test::AtomicLat => Op::Atomic,
        }
    }

    fn latency(self) -> bool {
        matches!(
            self,
            Test::WriteLat | Test::ReadLat | Test::SendLat | Test::AtomicLat
        )
    }
}

/// Where the device model runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Device {
    /// In the thread that rings the doorbell.
    Inline,
    /// On a device thread.
    Thread,
}

/// perftest-style measurements of rnic on the emulated device.
#[derive(Debug, Parser)]
#[command(name = "rnic-perf", version)]
struct Cli {
    /// The test.
    #[arg(value_enum)]
    test: Test,
    /// Message size in bytes.
    #[arg(short = 's', long = "size", default_value_t = 8)]
    size: usize,
    /// Every power-of-two size from 2 B to 8 MiB.
    #[arg(short = 'a', long = "all")]
    all: bool,
    /// Iterations per size.
    #[arg(short = 'n', long = "iters", default_value_t = 10_000)]
    iters: u64,
    /// Run each size for this many seconds instead (latency tests time
    /// a first pass to choose their iterations).
    #[arg(short = 'D', long = "duration")]
    duration: Option<f64>,
    /// Send queue depth (work requests in flight per QP).
    #[arg(short = 't', long = "tx-depth", default_value_t = 128)]
    tx_depth: u32,
    /// Receive queue depth (receives posted per QP: a SEND bandwidth
    /// test's receiver keeps this many posted, ahead of the sender's
    /// `--tx-depth`, as perftest's default of 512 is).
    #[arg(short = 'r', long = "rx-depth", default_value_t = 512)]
    rx_depth: u32,
    /// Largest message sent inline.
    #[arg(short = 'I', long = "inline-size", default_value_t = 64)]
    inline_size: u32,
    /// QPs (bandwidth tests post to them round robin).
    #[arg(short = 'q', long = "qp", default_value_t = 1)]
    qps: usize,
    /// Signal one work request in this many (perftest's `-Q`/`--cq-mod`).
    #[arg(short = 'c', short_alias = 'Q', long = "cq-mod", default_value_t = 64)]
    cq_mod: u32,
    /// Bandwidth in Gb/s rather than MB/s.
    #[arg(long = "report-gbits", alias = "report_gbits")]
    report_gbits: bool,
    /// Print CPU time per message on the application threads, rnic and
    /// TCP.
    #[arg(long = "cpu-util", alias = "cpu_util")]
    cpu_util: bool,
    /// Where the device model runs.
    #[arg(long, value_enum, default_value_t = Device::Inline)]
    device: Device,
    /// The wire between the two sides.
    #[arg(long, value_enum, default_value_t = Wire::Loopback)]
    wire: Wire,
    /// Measure rnic alone, without the baselines (for profiling: a figure
    /// without its baseline means little).
    #[arg(long)]
    no_baselines: bool,
    /// The QPs' local ACK timeout, perftest's `-u`: 4.096 µs × 2^timeout
    /// (14: 67 ms).
    #[arg(short = 'u', long = "qp-timeout", default_value_t = 14)]
    qp_timeout: u8,
    /// Drop this share of the frames each port sends (0.05: 5 %), on the
    /// in-process wires.
    #[arg(long, default_value_t = 0.0)]
    loss: f64,
    /// Two processes (`--wire shm` or `udp`): this one is the client (the
    /// server is started first, without it).
    #[arg(long)]
    client: bool,
    /// Two processes: the TCP port on 127.0.0.1 where they meet (UDP
    /// wires use the next two).
    #[arg(short = 'p', long, default_value_t = 18515)]
    port: u16,
    /// Draw the figures against message size, rnic beside its baselines,
    /// to this SVG file (two processes: the client draws).
    #[arg(long, value_name = "FILE.svg")]
    plot: Option<PathBuf>,
}

impl Cli {
    /// What the figures of this run measure.
    fn measure(&self) -> Measure {
        match (self.test.latency(), self.report_gbits) {
            (true, _) => Measure::Latency,
            (false, true) => Measure::Bandwidth("Gb/s"),
            (false, false) => Measure::Bandwidth("MB/s"),
        }
    }

    /// Bytes per second in the unit of the report.
    fn bw_unit(&self, bps: f64) -> f64 {
        if self.report_gbits {
            bps * 8.0 / 1e9
        } else {
            bps / (1u64 << 20) as f64
        }
    }

    /// Draws `rows` if `--plot` asked for it.
    fn plot(&self, rows: &[Figures]) {
        let Some(path) = &self.plot else { return };
        let title = format!(
            "{:?}, device {:?}, wire {:?}",
            self.test, self.device, self.wire
        );
        match plot::draw(path, &title, self.measure(), rows) {
            Ok(()) => println!("plot: {}", path.display()),
            Err(e) => {
                eprintln!("rnic-perf: cannot draw the plot: {e}");
                std::process::exit(1);
            }
        }
    }
}

/// The sizes `-a` runs: powers of two from 2 B to 8 MiB.
fn all_sizes() -> Vec<usize> {
    (1..=23).map(|p| 1usize << p).collect()
}

/// `x / base` as a readable ratio: `3.2 x`, or `1/37` below 1.
fn ratio(x: f64, base: f64) -> String {
    if base <= 0.0 || x <= 0.0 {
        return "-".into();
    }
    let r = x / base;
    if r >= 1.0 {
        format!("{r:.2} x")
    } else {
        format!("1/{:.1}", 1.0 / r)
    }
}

fn main() {
    env_logger::init();
    // A failed completion or a stall panics in whichever thread saw it:
    // the run is over, and the other side's thread, which would wait for
    // it forever, goes with the process.
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        std::process::exit(1);
    }));
    // Before any thread is pinned.
    cpu::cores();
    let cli = Cli::parse();
    let op = cli.test.op();
    // Atomics are 8 bytes, whatever the size asked.
    let sizes = if op == Op::Atomic {
        vec![8]
    } else if cli.all {
        all_sizes()
    } else {
        vec![cli.size]
    };
    let min = if op == Op::Atomic { 8 } else { 2 };
    if let Some(&bad) = sizes.iter().find(|&&s| s < min || s > 1 << 23) {
        eprintln!("rnic-perf: size {bad} is outside {min} B ..= 8 MiB");
        std::process::exit(2);
    }
    let biggest = *sizes.iter().max().unwrap_or(&8);
    let params = Params {
        mode: match cli.device {
            Device::Inline => ExecMode::Inline,
            Device::Thread => ExecMode::Thread,
        },
        wire: cli.wire,
        loss: cli.loss.clamp(0.0, 1.0),
        timeout: cli.qp_timeout.min(31),
        qps: cli.qps.max(1),
        depth: cli.tx_depth.max(2),
        rx_depth: cli.rx_depth.max(1),
        prepost: op == Op::Send && !cli.test.latency(),
        inline: cli.inline_size,
        // The messages, their sources, and a control word.
        buf: 2 * biggest.max(8) + 8,
        mtu: Mtu::Mtu4096,
    };
    if cli.wire.two_processes() {
        return two_processes(&cli, op, &sizes, &params);
    }
    let setup = Setup::new(&params);
    println!(
        "rnic-perf {:?}: device {:?}, wire {:?}{}, {} QP(s), depth {}, cq-mod {}, {} core(s)",
        cli.test,
        cli.device,
        cli.wire,
        if cli.loss > 0.0 {
            format!(" dropping {:.1} %", cli.loss * 100.0)
        } else {
            String::new()
        },
        params.qps,
        params.depth,
        cli.cq_mod,
        cpu::cores()
    );
    let cache = baseline::cache_line(if cli.no_baselines {
        1000
    } else {
        100_000.min(cli.iters.max(1000) as usize)
    });
    println!(
        "baseline: cache-line ping-pong half round trip {:.3} usec",
        cache.typical() / 1000.0
    );
    if cli.test.latency() {
        println!("{}", Latency::header());
    } else {
        println!("{}", Bandwidth::header(cli.report_gbits));
    }
    let mut rows = Vec::new();
    for &size in &sizes {
        let knobs = Knobs {
            size,
            inline: cli.inline_size as usize,
            depth: params.depth,
            rx_depth: params.rx_depth,
            cq_mod: cli.cq_mod.clamp(1, params.depth / 2),
        };
        let progress = sizes.len() > 1 && size >= 1 << 16;
        if progress {
            eprintln!("rnic-perf: {size} B ...");
        }
        rows.push(if cli.test.latency() {
            latency_size(&cli, op, &setup, &knobs, &cache)
        } else {
            bandwidth_size(&cli, op, &setup, &knobs)
        });
    }
    cli.plot(&rows);
}

/// The tail of `lat` beside the baselines' own: on a shared machine the
/// 99.9th percentile is mostly the host's preemptions, which the
/// baselines suffer too.
fn tail_line(lat: &Latency, cache: &Latency, tcp: &Latency) -> String {
    format!(
        "   tail: 99.9% = {:.2} x t_typical (cache-line ping-pong {:.2} x, TCP {:.2} x)",
        lat.tail(),
        cache.tail(),
        tcp.tail()
    )
}

/// Iterations of a ping-pong that fill `seconds`, from a short first pass.
fn calibrate(op: Op, setup: &Setup, k: &Knobs, seconds: f64, one_thread: bool) -> u64 {
    let t = Instant::now();
    let probe = 200;
    run::latency(
        op,
        setup,
        k,
        Budget {
            iters: probe,
            until: None,
            report: false,
        },
        one_thread,
    );
    let per = t.elapsed().as_secs_f64() / probe as f64;
    ((seconds / per) as u64).max(probe)
}

fn latency_size(cli: &Cli, op: Op, setup: &Setup, k: &Knobs, cache: &Latency) -> Figures {
    // A device thread needs a core of its own: one application thread
    // then plays both sides.
    let one_thread = cli.device == Device::Thread;
    let iters = match cli.duration {
        Some(d) => calibrate(op, setup, k, d, one_thread),
        None => cli.iters,
    };
    let (lat, cpu) = run::latency(
        op,
        setup,
        k,
        Budget {
            iters,
            until: None,
            report: true,
        },
        one_thread,
    );
    println!("{}", lat.row(k.size));
    let mut fig = Figures {
        size: k.size,
        rnic: lat.typical() / 1000.0,
        tcp: None,
        memcpy: None,
    };
    if cli.no_baselines {
        return fig;
    }
    fig.tcp = Some(latency_baselines(
        cli,
        op,
        k,
        (&lat, cpu),
        cache,
        iters,
        "the application threads",
    ));
    fig
}

/// Prints latency `lat` (with `cpu` ns per message on `threads`) beside
/// the cache-line and TCP ping-pongs of the same run, and their tails;
/// returns the TCP figure, in µs, on the scale of `lat`'s test.
fn latency_baselines(
    cli: &Cli,
    op: Op,
    k: &Knobs,
    (lat, cpu): (&Latency, f64),
    cache: &Latency,
    iters: u64,
    threads: &str,
) -> f64 {
    let (tcp, tcp_cpu) = baseline::tcp_pingpong(k.size, iters.min(20_000) as usize);
    let full = matches!(op, Op::Read | Op::Atomic);
    // READ and atomics report a whole round trip: so do their baselines.
    let scale = if full { 2.0 } else { 1.0 };
    println!(
        "   vs cache-line {} round trip {:.3} usec: t_typical = {}",
        if full { "whole" } else { "half" },
        cache.typical() * scale / 1000.0,
        ratio(lat.typical(), cache.typical() * scale)
    );
    println!(
        "   vs TCP loopback {} B {} round trip {:.2} usec: t_typical = {}",
        k.size,
        if full { "whole" } else { "half" },
        tcp.typical() * scale / 1000.0,
        ratio(lat.typical(), tcp.typical() * scale)
    );
    println!("{}", tail_line(lat, cache, &tcp));
    if cli.cpu_util {
        println!(
            "   CPU per message on {threads}: rnic {cpu:.0} ns, TCP {tcp_cpu:.0} ns ({})",
            ratio(cpu, tcp_cpu)
        );
    }
    tcp.typical() * scale / 1000.0
}

fn bandwidth_size(cli: &Cli, op: Op, setup: &Setup, k: &Knobs) -> Figures {
    let budget = Budget {
        iters: cli.iters,
        until: cli
            .duration
            .map(|d| Instant::now() + Duration::from_secs_f64(d)),
        report: true,
    };
    let (bw, cpu) = run::bandwidth(op, setup, k, budget);
    println!("{}", bw.row(cli.report_gbits));
    let mut fig = Figures {
        size: k.size,
        rnic: cli.bw_unit(bw.average()),
        tcp: None,
        memcpy: None,
    };
    if cli.no_baselines {
        return fig;
    }
    let (tcp, copy) = bandwidth_baselines(cli, k, &bw, cpu, "the application threads");
    fig.tcp = Some(tcp);
    fig.memcpy = Some(copy);
    fig
}

/// Prints bandwidth `bw` (with `cpu` ns per message on `threads`) beside
/// the TCP stream and one core's memcpy of the same run; returns those
/// two, in the figure's unit.
fn bandwidth_baselines(
    cli: &Cli,
    k: &Knobs,
    bw: &Bandwidth,
    cpu: f64,
    threads: &str,
) -> (f64, f64) {
    let n = bw.iters.clamp(1, 200_000);
    let (tcp, tcp_cpu) = baseline::tcp_stream(k.size, n);
    let copy = baseline::memcpy(k.size, n.max(64));
    println!(
        "   vs TCP loopback stream {:.2} MB/s: BW average = {}",
        tcp.average() / (1u64 << 20) as f64,
        ratio(bw.average(), tcp.average())
    );
    println!(
        "   vs one core's memcpy {:.2} MB/s: BW average = {}",
        copy / (1u64 << 20) as f64,
        ratio(bw.average(), copy)
    );
    if cli.cpu_util {
        println!(
            "   CPU per message on {threads}: rnic {cpu:.0} ns, TCP {tcp_cpu:.0} ns ({})",
            ratio(cpu, tcp_cpu)
        );
    }
    (cli.bw_unit(tcp.average()), cli.bw_unit(copy))
}

/// A run with the other side in another process (see the crate
/// documentation): per size, the client measures and writes the run's
/// number into the server's control word; the server keeps its side going
/// until it sees it, says `quiet` over TCP and waits there (its device
/// quiet while the client measures the baselines) for `next`.
fn two_processes(cli: &Cli, op: Op, sizes: &[usize], params: &Params) {
    if cli.duration.is_some() {
        eprintln!("rnic-perf: two processes run -n iterations, not -D");
        std::process::exit(2);
    }
    let hello = format!(
        "{:?} {sizes:?} n={} t={} r={} I={} q={} c={} {:?} {:?}",
        cli.test,
        cli.iters,
        cli.tx_depth,
        cli.rx_depth,
        cli.inline_size,
        cli.qps,
        cli.cq_mod,
        cli.device,
        cli.wire
    );
    let mut r = match setup::remote(params, cli.client, cli.port, &hello) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("rnic-perf: {e}");
            std::process::exit(1);
        }
    };
    cpu::pin(usize::from(!cli.client));
    let cache = if cli.client {
        println!(
            "rnic-perf {:?}: two processes, device {:?}, wire {:?}, {} QP(s), depth {}, cq-mod {}, {} core(s)",
            cli.test, cli.device, cli.wire, params.qps, params.depth, cli.cq_mod, cpu::cores()
        );
        let cache = baseline::cache_line(if cli.no_baselines { 1000 } else { 100_000 });
        cpu::pin(0);
        println!(
            "baseline: cache-line ping-pong half round trip {:.3} usec",
            cache.typical() / 1000.0
        );
        if cli.test.latency() {
            println!("{}", Latency::header());
        } else {
            println!("{}", Bandwidth::header(cli.report_gbits));
        }
        Some(cache)
    } else {
        None
    };
    let mut rows = Vec::new();
    for (seq, &size) in (1..).zip(sizes) {
        let k = Knobs {
            size,
            inline: cli.inline_size as usize,
            depth: params.depth,
            rx_depth: params.rx_depth,
            cq_mod: cli.cq_mod.clamp(1, params.depth / 2),
        };
        // The client measures; the server only answers.
        let budget = Budget {
            iters: cli.iters,
            until: None,
            report: cli.client,
        };
        match cache {
            Some(ref cache) => rows.push(client_size(cli, op, &mut r, &k, budget, cache, seq)),
            None => server_size(cli, op, &mut r, &k, budget, seq),
        }
    }
    if cli.client {
        cli.plot(&rows);
    }
}

/// The client's run of size `k.size`, the `seq`-th: it measures, then
/// tells the server over RDMA that the run is over.
fn client_size(
    cli: &Cli,
    op: Op,
    r: &mut Remote,
    k: &Knobs,
    b: Budget,
    cache: &Latency,
    seq: u64,
) -> Figures {
    let mut fig = Figures {
        size: k.size,
        rnic: 0.0,
        tcp: None,
        memcpy: None,
    };
    if cli.test.latency() {
        let (lat, cpu) = match op {
            Op::Write | Op::Send => {
                let (samples, cpu) = run::ping_pong(op, &r.me, r.peer, k, b, true);
                let n = samples.len().max(1) as f64;
                (Latency::new(samples), cpu as f64 / n)
            }
            Op::Read | Op::Atomic => run::requests(op, &r.me, r.peer, k, b),
        };
        run::signal(&r.me, r.peer_word, seq);
        r.ctl.expect("quiet");
        println!("{}", lat.row(k.size));
        fig.rnic = lat.typical() / 1000.0;
        if !cli.no_baselines {
            let who = "this process's thread";
            fig.tcp = Some(latency_baselines(
                cli,
                op,
                k,
                (&lat, cpu),
                cache,
                cli.iters,
                who,
            ));
        }
    } else {
        let (bw, cpu) = run::send_loop(op, &r.me, r.peer, k, b);
        run::signal(&r.me, r.peer_word, seq);
        r.ctl.expect("quiet");
        println!("{}", bw.row(cli.report_gbits));
        fig.rnic = cli.bw_unit(bw.average());
        if !cli.no_baselines {
            let (tcp, copy) = bandwidth_baselines(cli, k, &bw, cpu, "the sender's thread");
            fig.tcp = Some(tcp);
            fig.memcpy = Some(copy);
        }
    }
    r.ctl.send("next");
    fig
}

/// The server's side of the `seq`-th run: the peer of a ping-pong, the
/// receiver of SENDs, or the memory of WRITEs, READs and atomics, until
/// the client's control word says `seq`. Its thread makes no system call
/// until then.
fn server_size(cli: &Cli, op: Op, r: &mut Remote, k: &Knobs, b: Budget, seq: u64) {
    let Remote { me, peer, ctl, .. } = r;
    let over = || run::word(me) >= seq;
    match op {
        Op::Write | Op::Send if cli.test.latency() => {
            run::ping_pong(op, me, *peer, k, b, false);
        }
        Op::Send => {
            run::receive(me, k.rx_depth, over);
        }
        _ => {}
    };
    while !over() {
        me.idle();
    }
    // Quiet until the client has measured its baselines.
    ctl.send("quiet");
    ctl.expect("next");
}

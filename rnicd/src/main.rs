//! `rnicd`: serves emulated rnic NICs over vfio-user on a unix socket.
//! Each client that connects gets a fresh device of its own.

use std::net::SocketAddr;
use std::os::fd::{FromRawFd, RawFd};
use std::os::unix::net::UnixListener;
use std::path::PathBuf;

use clap::Parser;
use rnic_emu::net::{UdpWire, Wire};
use rnic_emu::EmuConfig;

/// The emulated rnic NIC as a vfio-user device.
#[derive(Parser)]
#[command(version)]
struct Args {
    /// The unix socket to listen on (it must not exist).
    #[arg(long)]
    socket: PathBuf,
    /// Clients served at once.
    #[arg(long, default_value_t = 8)]
    slots: usize,
    /// Serve this many clients, then exit (default: without end).
    #[arg(long)]
    clients: Option<u64>,
    /// Join the devices' switch to other hosts: `udp:LOCAL=REMOTE`, a UDP
    /// socket bound at LOCAL sending to REMOTE (another rnic NIC, rnicd or
    /// VM on a UDP wire), or `udp-fd:FD=REMOTE`, a bound UDP socket
    /// inherited as descriptor FD.
    #[arg(long, value_parser = uplink)]
    uplink: Option<Uplink>,
}

/// Where the uplink's socket comes from.
#[derive(Clone, Copy, Debug)]
enum Uplink {
    /// Bound here at the first address, sending to the second.
    Bind(SocketAddr, SocketAddr),
    /// Inherited as this descriptor, sending to the address.
    Fd(RawFd, SocketAddr),
}

fn uplink(v: &str) -> Result<Uplink, String> {
    let sock = |s: &str| s.parse::<SocketAddr>().map_err(|e| format!("`{s}`: {e}"));
    if let Some((fd, r)) = v.strip_prefix("udp-fd:").and_then(|a| a.split_once('=')) {
        let fd = fd
            .parse::<RawFd>()
            .ok()
            .filter(|&fd| fd > 2)
            .ok_or(format!("`{fd}` is not a descriptor past stderr"))?;
        return Ok(Uplink::Fd(fd, sock(r)?));
    }
    let (l, r) = v
        .strip_prefix("udp:")
        .and_then(|a| a.split_once('='))
        .ok_or("udp:LOCAL=REMOTE or udp-fd:FD=REMOTE")?;
    Ok(Uplink::Bind(sock(l)?, sock(r)?))
}

/// The uplink's wire.
fn uplink_wire(u: Uplink) -> std::io::Result<UdpWire> {
    match u {
        Uplink::Bind(local, remote) => UdpWire::bind(local, remote),
        Uplink::Fd(fd, remote) => {
            // SAFETY: the descriptor was handed to this process for the
            // uplink, and nothing else here uses or closes it; one that
            // is not a bound socket fails `local_addr` below.
            let socket = unsafe { std::net::UdpSocket::from_raw_fd(fd) };
            socket.local_addr()?;
            UdpWire::from_socket(socket, remote)
        }
    }
}

fn main() -> std::process::ExitCode {
    env_logger::init();
    let args = Args::parse();
    if args.socket.exists() {
        eprintln!("rnicd: {} exists", args.socket.display());
        return std::process::ExitCode::FAILURE;
    }
    let listener = match UnixListener::bind(&args.socket) {
        Ok(l) => l,
        Err(e) => {
            eprintln!("rnicd: {}: {e}", args.socket.display());
            return std::process::ExitCode::FAILURE;
        }
    };
    let uplink: Option<Box<dyn Wire>> = match args.uplink.map(uplink_wire) {
        Some(Ok(w)) => Some(Box::new(w)),
        Some(Err(e)) => {
            eprintln!("rnicd: uplink: {e}");
            return std::process::ExitCode::FAILURE;
        }
        None => None,
    };
    let cfg = EmuConfig::default();
    let r = rnicd::serve(listener, &cfg, args.slots, args.clients, uplink);
    let _ = std::fs::remove_file(&args.socket);
    match r {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rnicd: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

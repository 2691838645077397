//! `rnicd`: serves emulated rnic NICs over vfio-user on a unix socket.
//! Each client that connects gets a fresh device of its own.

use std::os::unix::net::UnixListener;
use std::path::PathBuf;

use clap::Parser;
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
    let r = rnicd::serve(listener, &EmuConfig::default(), args.slots, args.clients);
    let _ = std::fs::remove_file(&args.socket);
    match r {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rnicd: {e}");
            std::process::ExitCode::FAILURE
        }
    }
}

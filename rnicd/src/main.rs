//! `rnicd`: serves an emulated rnic NIC over vfio-user on a unix socket.
//! Each client that connects gets a fresh device of its own; clients are
//! served one after another.

use std::path::PathBuf;

use clap::Parser;
use rnic_emu::{EmuConfig, EmuDevice, ExecMode};
use rnicd::Backend;
use vfio_user::Server;

/// The emulated rnic NIC as a vfio-user device.
#[derive(Parser)]
#[command(version)]
struct Args {
    /// The unix socket to listen on (it must not exist).
    #[arg(long)]
    socket: PathBuf,
    /// Serve this many clients, then exit (default: without end).
    #[arg(long)]
    clients: Option<u64>,
}

fn main() -> std::process::ExitCode {
    env_logger::init();
    let args = Args::parse();
    let cfg = EmuConfig::default();
    let mut b = Backend::new(&EmuDevice::new(cfg.clone(), ExecMode::Thread));
    let server = match Server::new(&args.socket, true, b.irqs(), b.regions()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("rnicd: {}: {e}", args.socket.display());
            return std::process::ExitCode::FAILURE;
        }
    };
    let mut served = 0;
    while args.clients.map_or(true, |n| served < n) {
        if let Err(e) = server.run(&mut b) {
            log::warn!("client {served}: {e}");
        }
        served += 1;
        // The next client gets a fresh device: nothing of this one's stays.
        b = Backend::new(&EmuDevice::new(cfg.clone(), ExecMode::Thread));
    }
    let _ = std::fs::remove_file(&args.socket);
    std::process::ExitCode::SUCCESS
}

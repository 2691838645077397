//! `rnicd`: the emulated rnic NIC served as a PCI device over vfio-user,
//! the protocol for a device emulated in another process.
//!
//! A client connects to the server's unix socket and sees the rnic
//! device's PCI regions and MSI-X vectors: BAR 0 (the registers) as region
//! reads and writes; BAR 2 (the doorbell pages) through a posted-write
//! queue in shared memory (region 9, [`backend::POSTED_REGION`]); memory
//! it shares (`DMA_MAP` of a sealed memfd at an IOVA it chooses), and its
//! own memory reached through the kernel, as the device's IOMMU mappings;
//! and its eventfds (`SET_IRQS`) signalled on every interrupt. Each
//! connection gets a device of its own (as a virtual function of a real
//! NIC): its own registers, command queue and IOMMU address space,
//! destroyed with every object in it when the client goes. Every device
//! is on one switch inside rnicd, joined to other hosts by an optional
//! [`uplink`].

pub mod backend;
pub mod uplink;

pub use backend::{Backend, PostedQueue};

use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use rnic_emu::net::{Switch, Wire};
use rnic_emu::{EmuConfig, EmuDevice, ExecMode};
use rnic_vfio_user::server;
use uplink::Uplink;

/// Client `n`'s device: `cfg` with a MAC and IPv4 address of its own
/// (the last two bytes of each are `n + 1`).
pub fn addressed(cfg: &EmuConfig, n: u64) -> EmuConfig {
    let id = ((n + 1) as u16).to_be_bytes();
    let mut c = cfg.clone();
    c.mac[4..].copy_from_slice(&id);
    c.ipv4[2..].copy_from_slice(&id);
    c
}

/// A fresh device for client `n` on `switch`, its steps on the process's
/// shared device workers, its doorbells through a posted-write queue.
pub fn device(
    cfg: &EmuConfig,
    n: u64,
    switch: &Switch,
) -> Result<(Arc<EmuDevice>, PostedQueue), String> {
    let q = PostedQueue::new().map_err(|e| format!("posted-write queue: {e}"))?;
    let dev = EmuDevice::builder(addressed(cfg, n))
        .mode(ExecMode::Thread)
        .wire(switch.port())
        .posted_writes(q.clone())
        .build()
        .map_err(|e| e.to_string())?;
    Ok((dev, q))
}

/// Serves one client on `stream` with a fresh device (client `n`).
fn client(stream: &UnixStream, cfg: &EmuConfig, n: u64, switch: &Switch) {
    let (dev, q) = match device(cfg, n, switch) {
        Ok(d) => d,
        Err(e) => {
            log::error!("client {n}: no device: {e}");
            return;
        }
    };
    let mut b = Backend::new(&dev, Some(q));
    drop(dev);
    match server::serve(stream, &mut b) {
        Ok(()) => log::info!("client {n}: gone"),
        Err(e) => log::warn!("client {n}: {e}"),
    }
    // Its device goes with every object in it.
}

/// Serves clients on `listener`, up to `slots` at once, each a fresh
/// device of `cfg` with addresses of its own ([`addressed`]), every device
/// on one switch, so that clients' QPs reach each other through rnicd,
/// and the switch joined to `uplink` if given, so that they reach other
/// hosts' NICs; returns once `clients` have been served, or never.
pub fn serve(
    listener: UnixListener,
    cfg: &EmuConfig,
    slots: usize,
    clients: Option<u64>,
    uplink: Option<Box<dyn Wire>>,
) -> std::io::Result<()> {
    let taken = Arc::new(AtomicU64::new(0));
    let switch = Switch::new();
    let _uplink = uplink.map(|w| Uplink::start(&switch, w)).transpose()?;
    let mut threads = Vec::new();
    for slot in 0..slots.max(1) {
        // Each slot accepts on its own copy of the listening socket.
        let listener = listener.try_clone()?;
        let (cfg, taken, switch) = (cfg.clone(), taken.clone(), switch.clone());
        threads.push(std::thread::spawn(move || loop {
            // A client number is taken before accepting, so that no more
            // than `clients` connections are served in all.
            let n = taken.fetch_add(1, Ordering::Relaxed);
            if clients.is_some_and(|c| n >= c) {
                return;
            }
            log::info!("slot {slot}: waiting for client {n}");
            match listener.accept() {
                Ok((stream, _)) => client(&stream, &cfg, n, &switch),
                Err(e) => log::error!("slot {slot}: accept: {e}"),
            }
        }));
    }
    for t in threads {
        let _ = t.join();
    }
    Ok(())
}

//! Several emulated NICs in one process on an in-memory switch, each
//! port behind a fault injector (no faults until a test sets some).
//!
//! In [`ExecMode::Inline`] the NICs share a [`VirtualClock`]: nothing
//! times out unless the test moves the clock ([`Fabric::idle`] does when
//! the test waits), so a run repeats exactly for a seed. In
//! [`ExecMode::Thread`] they run on the host clock.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use rnic_emu::net::{FaultHandle, Faults, Switch, Tap};
use rnic_emu::{Clock, EmuConfig, EmuDevice, ExecMode, VirtualClock};

use crate::{Ctx, DriverConfig, ECq, Hal, WorkCompletion};

/// One NIC of a [`Fabric`].
pub struct Nic {
    /// The device.
    pub dev: Arc<EmuDevice>,
    /// The driver's context on it.
    pub ctx: Ctx,
    /// Its port's fault injector.
    pub faults: FaultHandle,
}

/// NICs on one switch.
pub struct Fabric {
    /// The switch.
    pub switch: Switch,
    /// The NICs, NIC `i` with MAC `02:00:00:00:00:0<i+1>` and IPv4
    /// `192.0.2.<i+1>`.
    pub nics: Vec<Nic>,
    /// The shared virtual clock (inline mode).
    pub clock: Option<VirtualClock>,
}

/// The configuration of NIC number `n` (from 1).
pub fn nic_config(n: u8) -> EmuConfig {
    EmuConfig {
        mac: [0x02, 0, 0, 0, 0, n],
        ipv4: [192, 0, 2, n],
        ..EmuConfig::default()
    }
}

impl Fabric {
    /// `n` NICs in `mode`; the fault injectors draw from seeds derived
    /// from `seed`.
    pub fn new(mode: ExecMode, n: usize, seed: u64) -> Fabric {
        Self::with_capture(mode, n, seed, None)
    }

    /// As [`Fabric::new`], with NIC 0's frames (as it sends and receives
    /// them, inside its fault injector) written to the pcap file
    /// `capture`.
    pub fn with_capture(mode: ExecMode, n: usize, seed: u64, capture: Option<&Path>) -> Fabric {
        let switch = Switch::new();
        let clock = (mode == ExecMode::Inline).then(VirtualClock::new);
        let nics = (0..n)
            .map(|i| {
                let c = clock.as_ref().map_or_else(Clock::real, VirtualClock::clock);
                let (wire, faults) = Faults::new(switch.port(), c.clone(), seed + i as u64);
                let b = EmuDevice::builder(nic_config(i as u8 + 1))
                    .mode(mode)
                    .clock(c);
                let b = match capture.filter(|_| i == 0) {
                    Some(path) => b.wire(Tap::capture(wire, path).expect("capture file").0),
                    None => b.wire(wire),
                };
                let dev = b.build().expect("device");
                let ctx =
                    Ctx::open_with(dev.hal(), DriverConfig::default()).expect("Context::open");
                Nic { dev, ctx, faults }
            })
            .collect();
        Fabric {
            switch,
            nics,
            clock,
        }
    }

    /// What a test does while it waits for the NICs: in inline mode it
    /// moves the virtual clock by `step` (timers fall due, the NICs run
    /// them); in thread mode it lets the device threads run.
    pub fn idle(&self, step: Duration) {
        match &self.clock {
            Some(c) => c.advance(step),
            None => {
                for n in &self.nics {
                    n.ctx.hal().relax();
                }
            }
        }
    }

    /// Waits (idling the fabric) until `cq` has a completion, and takes it.
    pub fn wait_one(&self, cq: &ECq) -> WorkCompletion {
        let mut wc = [WorkCompletion::default(); 1];
        for _ in 0..20_000 {
            if cq.poll(&mut wc).unwrap() == 1 {
                return wc[0];
            }
            self.idle(Duration::from_micros(100));
        }
        panic!("CQ {}: no completion", cq.cq_num());
    }

    /// Lets the NICs run for a while and returns what `cq` then holds.
    pub fn settle_all(&self, cq: &ECq) -> Vec<WorkCompletion> {
        for _ in 0..100 {
            self.idle(Duration::from_micros(100));
        }
        let mut all = Vec::new();
        let mut wc = [WorkCompletion::default(); 16];
        loop {
            let n = cq.poll(&mut wc).unwrap();
            if n == 0 {
                return all;
            }
            all.extend_from_slice(&wc[..n]);
        }
    }
}

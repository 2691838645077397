//! Bring-up, register by register: rnic-driver's `Context::open` on the
//! emulated device, under rnic-middleware's `TraceHal`, every register
//! read and write, DMA allocation and command printed with what it means
//! (docs/device-spec.md section 4.2).
//!
//! ```text
//! cargo run --example bringup          # RUST_LOG=debug: the driver's and the device's own records too
//! ```
//!
//! It checks the sequence as it goes, and exits 1 if a step is missing or
//! out of order: `ID` and `VERSION` before any write, the reset before
//! the capabilities, the command and event queues before the enable, the
//! enable before the first command.

use std::process::ExitCode;
use std::sync::Arc;

use rnic_driver::Context;
use rnic_emu::{EmuConfig, EmuDevice, ExecMode};
use rnic_middleware::{Event, Memory, Timeline, TraceHal};

fn main() -> ExitCode {
    env_logger::init();
    let mem = Arc::new(Memory::default());
    let tl = Timeline::new(vec![mem.clone()]);
    let dev = EmuDevice::new(EmuConfig::default(), ExecMode::Inline);
    let ctx = match Context::open(TraceHal::new(dev.hal(), tl)) {
        Ok(c) => c,
        Err(e) => {
            eprintln!("bringup: Context::open failed: {e}");
            return ExitCode::FAILURE;
        }
    };
    let events = mem.events();
    println!("rnic bring-up on the emulated device, as rnic-driver's Context::open does it");
    println!("(docs/device-spec.md 4.2; each line: what crossed the boundary, then why)\n");
    let mut dma = 0;
    for e in &events {
        let why = explain(e, &mut dma);
        println!("{:4}  {}", e.seq, e.text);
        if !why.is_empty() {
            println!("      = {why}");
        }
    }
    let attr = ctx.device_attr();
    println!(
        "\nopen: {} QPs, {} CQs, {} MRs at most; {} events in all",
        attr.max_qp,
        attr.max_cq,
        attr.max_mr,
        events.len()
    );
    match check(&events) {
        Ok(()) => {
            println!("bringup: the sequence is the spec's");
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("bringup: FAILED: {e}");
            ExitCode::FAILURE
        }
    }
}

/// What event `e` means; `dma` counts the DMA allocations so far.
fn explain(e: &Event, dma: &mut u32) -> String {
    let t = e.text.as_str();
    let has = |w: &str| t.contains(w);
    let s = if has("ID ->") {
        "the ID register: \"RNIC\" says this is an rnic; nothing has been written yet"
    } else if has("VERSION ->") {
        "interface version: major.minor in the high and low halves; the driver needs major 1"
    } else if has("STATUS ->") && has("enabled: false") && has("ready: true") {
        "STATUS: ready, not enabled: no other driver owns the device"
    } else if has("STATUS ->") && has("enabled: true") {
        "STATUS.enabled: the device took the configuration and runs"
    } else if has("CTRL <-") && has("reset: true") {
        "CTRL.reset: the device drops everything and starts over"
    } else if has("CTRL ->") {
        "CTRL.reset reads 0 again: the reset is done"
    } else if has("CAP_DEV ->") {
        "device capabilities: ports, largest message, command and event queue sizes, features"
    } else if has("CAP_QUEUE ->") {
        "queue capabilities: work queue and CQ sizes, SGEs, inline bytes, WQE size"
    } else if has("CAP_UAR_PAGES") {
        "doorbell pages in BAR 2: one per user context at least"
    } else if has("CAP_MAX_EQ") {
        "event queues: one for asynchronous events, the rest for completion channels"
    } else if has("CAP_MSIX") {
        "interrupt vectors"
    } else if has("DMA alloc") {
        *dma += 1;
        match *dma {
            1 => "memory for the command queue: 512-byte entries the device reads",
            2 => "memory for event queue 0: 64-byte entries the device writes",
            _ => "DMA memory",
        }
    } else if has("CMDQ_BASE_LO") || has("CMDQ_BASE_HI") {
        "where the command queue lies (its IOVA, low then high half; the high half latches it)"
    } else if has("CMDQ_CTRL <-") {
        "the command queue's size: 2^log_size entries"
    } else if has("EQ_BASE_LO") || has("EQ_BASE_HI") {
        "where event queue 0 lies"
    } else if has("EQ_CTRL <-") {
        "event queue 0's size, its interrupt vector, and enable"
    } else if has("CTRL <-") && has("enable: true") {
        "CTRL.enable: the device checks the queues' configuration and starts"
    } else if has("CMDQ_DB <-") {
        "the command doorbell: entries up to this producer index are the device's"
    } else if has("ALLOC_UCTX done") {
        "a user context for this process: its objects, its doorbell page"
    } else if has("QUERY_DEVICE done") {
        "the device's limits, as ibv_query_device reports them"
    } else if has("QUERY_PORT done") {
        "port 1: state, MTU, link layer, GID table size"
    } else if e.kind == "cmd" {
        "a command entry handed over: opcode, token, user context, input"
    } else {
        ""
    };
    s.to_owned()
}

/// Checks the order of bring-up's steps in `events`.
fn check(events: &[Event]) -> Result<(), String> {
    let at = |what: &[&str]| {
        events
            .iter()
            .position(|e| what.iter().all(|w| e.text.contains(w)))
            .ok_or_else(|| format!("no step {what:?}"))
    };
    let first_write = events
        .iter()
        .position(|e| e.kind == "mmio_write")
        .ok_or("no register write")?;
    let id = at(&["ID ->", "\"RNIC\""])?;
    let version = at(&["VERSION ->"])?;
    let reset = at(&["BAR0+0x040 CTRL <-", "reset: true"])?;
    let caps = at(&["CAP_DEV ->"])?;
    let cmdq = at(&["CMDQ_CTRL <-"])?;
    let eq = at(&["EQ_CTRL <-", "enable: true"])?;
    let enable = at(&["BAR0+0x040 CTRL <-", "enable: true"])?;
    let enabled = at(&["STATUS ->", "enabled: true"])?;
    let uctx = at(&["ALLOC_UCTX done: OK"])?;
    let order = [
        ("ID before any write", id < first_write),
        ("VERSION before any write", version < first_write),
        ("the reset before the capabilities", reset < caps),
        ("the command queue before the enable", cmdq < enable),
        ("event queue 0 before the enable", eq < enable),
        ("the enable before STATUS.enabled", enable < enabled),
        ("STATUS.enabled before the first command", enabled < uctx),
    ];
    match order.iter().find(|(_, ok)| !ok) {
        Some((what, _)) => Err(format!("out of order: {what}")),
        None => Ok(()),
    }
}

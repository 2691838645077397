//! The examples as users run them: each exits 0 and prints what it
//! checked, and `RUST_LOG=debug` shows what the driver and the device log
//! (every example initialises env_logger).

use std::path::PathBuf;
use std::process::Command;

/// `target/<profile>/examples/NAME`, which `cargo test` builds.
fn example(name: &str) -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent()
        .and_then(|d| d.parent())
        .map(|d| d.join("examples").join(name))
        .expect("the examples directory")
}

#[test]
fn loopback_verifies_its_transfers_and_logs_at_debug() {
    let o = Command::new(example("loopback"))
        .env("RUST_LOG", "debug")
        .output()
        .expect("cargo test builds the examples");
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(o.status.success(), "{out}{err}");
    assert!(out.contains("loopback: all transfers verified"), "{out}");
    // The driver's and the device's own records.
    assert!(err.contains("DEBUG rnic_driver"), "{err}");
    assert!(err.contains("rnic_emu"), "{err}");
}

#[test]
fn bringup_explains_every_step_in_the_spec_s_order() {
    let o = Command::new(example("bringup")).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.contains("bringup: the sequence is the spec's"), "{out}");
    // Every line of the trace comes with what it means.
    for step in [
        "ID -> 0x43494e52 (\"RNIC\")",
        "CTRL <- 0x1 (Ctrl { reset: true",
        "CMDQ_BASE_HI <- ",
        "EQ_CTRL <- ",
        "STATUS -> 0x3 (Status { ready: true, enabled: true",
        "CMD 0 ALLOC_UCTX done: OK",
    ] {
        let at = out.find(step).unwrap_or_else(|| panic!("{step}: {out}"));
        let next = out[at..].lines().nth(1).unwrap_or("");
        assert!(
            next.trim_start().starts_with("= "),
            "{step} is explained: {next}"
        );
    }
}

#[test]
fn doorbell_moves_bytes_with_a_hand_built_wqe() {
    let o = Command::new(example("doorbell")).output().unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        out.contains("doorbell: the bytes arrived and the CQE says so"),
        "{out}"
    );
    // In order: the hand-built WQE as the trace decodes it at the
    // doorbell, the CQE the device wrote, and what the example read.
    let mut at = 0;
    for line in [
        "| MMIO BAR0+0x000 ID -> 0x43494e52",
        "| CMD 0 ALLOC_UCTX done: OK",
        "| CMD 4 CREATE_QP done: OK qpn",
        "| MMIO BAR2+0x0 SQ doorbell qpn",
        "ctrl RDMA_WRITE signaled ds 3 | raddr",
        "| CQE cqn 1 idx 0 owner 1: REQ RDMA_WRITE wqe 1 SUCCESS",
        "CQE: wr_id 42 Some(RdmaWrite) Some(Success)",
        "at the remote address: \"written by hand, rung by hand\"",
    ] {
        at += out[at..]
            .find(line)
            .unwrap_or_else(|| panic!("{line} after {at}: {out}"));
    }
}

#[test]
fn loopback_shows_each_transfer_at_the_register_level() {
    let trace = std::env::temp_dir().join(format!("rnic-loopback-{}.jsonl", std::process::id()));
    let o = Command::new(example("loopback"))
        .args(["--registers", "--trace"])
        .arg(&trace)
        .output()
        .unwrap();
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "{out}{}",
        String::from_utf8_lossy(&o.stderr)
    );
    // The RDMA WRITE: the application's note, its WQE at the doorbell (or
    // a BlueFlame write), its packet out and back, the ACK, its CQE.
    let mut at = out.find("| app      RDMA WRITE").expect("the note");
    for line in [
        "ctrl RDMA_WRITE signaled",
        "| wire     FRAME tx",
        "RC_RDMA_WRITE_ONLY",
        "| wire     FRAME rx",
        "RC_ACKNOWLEDGE",
        "| device   CQE",
        "REQ RDMA_WRITE",
        "SUCCESS",
        "RDMA WRITE  QP",
    ] {
        at += out[at..]
            .find(line)
            .unwrap_or_else(|| panic!("{line}: {out}"));
    }
    // The file holds the same events, one JSON object per line.
    let json = std::fs::read_to_string(&trace).unwrap();
    std::fs::remove_file(&trace).unwrap();
    let printed = out.lines().filter(|l| l.starts_with("      | ")).count();
    assert_eq!(json.lines().count(), printed);
    assert!(json.lines().all(|l| l.starts_with("{\"seq\":")));
}

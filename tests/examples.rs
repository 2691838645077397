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

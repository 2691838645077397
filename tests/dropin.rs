//! The drop-in libibverbs.so.1, built for tests that run unmodified
//! programs over it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// `target/ibverbs-test/ibverbs`, holding libibverbs.so.1, built once per
/// test binary by ibverbs/build.sh (in a target directory of its own: the
/// one the test runs from is locked by the cargo that runs it).
pub fn lib_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
        let target = root.join("target/ibverbs-test");
        let st = Command::new("bash")
            .arg(root.join("ibverbs/build.sh"))
            .env("CARGO_TARGET_DIR", &target)
            .status()
            .expect("bash");
        assert!(st.success(), "ibverbs/build.sh failed");
        target.join("ibverbs")
    })
}

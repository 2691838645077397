//! What the rnicd tests share: a daemon on a socket of its own.

use std::os::fd::RawFd;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command};
use std::time::{Duration, Instant};

/// A socket path of this test process, named `name`, not yet existing.
pub fn socket(name: &str) -> PathBuf {
    let path = std::env::temp_dir().join(format!("rnicd-{}-{name}.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    path
}

/// The rnicd binary serving `clients` clients, `slots` at once, on socket
/// `name`, once it listens.
pub fn daemon(name: &str, clients: u64, slots: usize) -> (Child, PathBuf) {
    daemon_with(name, clients, slots, &[], None)
}

/// [`daemon`] with `extra` arguments, and `inherit` (a descriptor of
/// this process) as its descriptor 3.
pub fn daemon_with(
    name: &str,
    clients: u64,
    slots: usize,
    extra: &[&str],
    inherit: Option<RawFd>,
) -> (Child, PathBuf) {
    let path = socket(name);
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_rnicd"));
    if let Some(fd) = inherit {
        // SAFETY: dup2 is async-signal-safe and touches only the child's
        // descriptor table; the copy at 3 has no close-on-exec flag.
        unsafe {
            cmd.pre_exec(move || {
                if libc::dup2(fd, 3) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let child = cmd
        .args(extra)
        .arg("--clients")
        .arg(clients.to_string())
        .arg("--slots")
        .arg(slots.to_string())
        .arg("--socket")
        .arg(&path)
        .spawn()
        .expect("rnicd starts");
    // The socket file appears when it is bound and listening.
    let deadline = Instant::now() + Duration::from_secs(10);
    while !path.exists() {
        assert!(Instant::now() < deadline, "no rnicd at {}", path.display());
        std::thread::sleep(Duration::from_millis(10));
    }
    (child, path)
}

/// Waits for the daemon to exit, which it does after its last client.
pub fn exits(mut child: Child) {
    let status = child.wait().expect("rnicd exits");
    assert!(status.success(), "{status}");
}

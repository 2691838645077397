//! The verified traffic of [`rnic_tests::traffic`] between NICs in two
//! processes, over UDP wires on 127.0.0.1, over a shared-memory wire and
//! over the shared-memory fabric,
//! through the same faults as the in-process test (on the parent's port).
//!
//! The peer process is the `traffic-peer` helper (`tests/bin/
//! traffic_peer.rs`); each runs one [`rnic_tests::side`]. The UDP sockets
//! are bound once, here, on ports the kernel picks: the peer inherits its
//! own as descriptor 3, so no port is ever closed and bound again.

use std::net::{TcpListener, UdpSocket};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};

use rnic_emu::net::{FaultConfig, ShmFabric, ShmWire, UdpWire, Wire};
use rnic_tests::fabric::nic_config;
use rnic_tests::side::side;

/// The descriptor the peer finds its UDP socket at.
const PEER_FD: i32 = 3;

/// Runs the peer process with `args` (after the TCP port), handing it
/// `socket` as descriptor [`PEER_FD`], and this side on `wire`, with
/// faults.
fn two_processes(wire: Box<dyn Wire>, args: &[String], socket: Option<UdpSocket>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let tcp_port = listener.local_addr().unwrap().port();
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_traffic-peer"));
    cmd.arg(tcp_port.to_string())
        .args(args)
        .stdout(Stdio::null());
    if let Some(s) = &socket {
        let fd = s.as_raw_fd();
        // SAFETY: dup2 and fcntl are async-signal-safe, and touch only the
        // child's descriptor table: the copy at PEER_FD has no close-on-exec
        // flag, the parent's original (close-on-exec) reaches no other child.
        unsafe {
            cmd.pre_exec(move || {
                // dup2 onto itself would keep close-on-exec: clear it then.
                let r = if fd == PEER_FD {
                    libc::fcntl(fd, libc::F_SETFD, 0)
                } else {
                    libc::dup2(fd, PEER_FD)
                };
                if r < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
    let mut child = cmd.spawn().expect("start the peer process");
    drop(socket);
    let (tcp, _) = listener.accept().expect("the peer connects");
    let faults = FaultConfig {
        drop: 0.05,
        duplicate: 0.01,
        reorder: 0.01,
        corrupt: 0.001,
        ..FaultConfig::default()
    };
    side(tcp, wire, 1, [101, 102], [201, 202], Some(faults));
    let status = child.wait().unwrap();
    assert!(status.success(), "the peer process failed: {status}");
}

#[test]
fn two_processes_over_udp() {
    let mine = UdpSocket::bind("127.0.0.1:0").expect("bind this side's socket");
    let theirs = UdpSocket::bind("127.0.0.1:0").expect("bind the peer's socket");
    let (a, b) = (mine.local_addr().unwrap(), theirs.local_addr().unwrap());
    let wire = UdpWire::from_socket(mine, b).expect("UDP wire");
    let args = [
        "udp-fd".to_string(),
        PEER_FD.to_string(),
        a.port().to_string(),
    ];
    two_processes(Box::new(wire), &args, Some(theirs));
}

#[test]
fn two_processes_over_shared_memory() {
    let path = std::env::temp_dir().join(format!("rnic-shm-test-{}", std::process::id()));
    let wire = ShmWire::create(&path).expect("shared-memory wire");
    let args = ["shm".to_string(), path.display().to_string()];
    two_processes(Box::new(wire), &args, None);
    let _ = std::fs::remove_file(&path);
}

#[test]
fn two_processes_on_the_shared_memory_fabric() {
    let dir = std::env::temp_dir().join(format!("rnic-fabric-test-{}", std::process::id()));
    let wire = ShmFabric::join(&dir, nic_config(1).mac).expect("join the fabric");
    let args = ["fabric".to_string(), dir.display().to_string()];
    two_processes(Box::new(wire), &args, None);
    let _ = std::fs::remove_dir_all(&dir);
}

//! The peer process of `tests/processes.rs`: one [`rnic_tests::side`] of
//! the two-process traffic test, as NIC 2.
//!
//! ```text
//! traffic-peer TCP_PORT udp-fd FD REMOTE_PORT   # a UDP socket inherited as FD
//! traffic-peer TCP_PORT shm PATH                # a shared-memory wire
//! traffic-peer TCP_PORT fabric DIR              # the shared-memory fabric
//! ```
//!
//! Exits 0 when its side's traffic was verified; a failed check panics,
//! and the test sees the status.

use std::net::{TcpStream, UdpSocket};
use std::os::fd::FromRawFd;

use rnic_emu::net::{ShmFabric, ShmWire, UdpWire, Wire};
use rnic_tests::fabric::nic_config;
use rnic_tests::side::{lo, side};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: traffic-peer TCP_PORT (udp-fd FD REMOTE_PORT | shm PATH | fabric DIR)";
    let port = |s: &String| s.parse::<u16>().expect(usage);
    let (tcp_port, wire) = args.split_first().expect(usage);
    let tcp = TcpStream::connect(lo(port(tcp_port))).expect("connect to the test");
    let wire: Box<dyn Wire> = match wire {
        [kind, fd, remote] if kind == "udp-fd" => {
            let fd: i32 = fd.parse().expect(usage);
            // SAFETY: the test hands this process a bound UDP socket at
            // `fd`, which nothing else here owns.
            let socket = unsafe { UdpSocket::from_raw_fd(fd) };
            Box::new(UdpWire::from_socket(socket, lo(port(remote))).expect("UDP wire"))
        }
        [kind, path] if kind == "shm" => Box::new(ShmWire::open(path).expect("shared-memory wire")),
        [kind, dir] if kind == "fabric" => {
            Box::new(ShmFabric::join(dir, nic_config(2).mac).expect("join the fabric"))
        }
        _ => panic!("{usage}"),
    };
    side(tcp, wire, 2, [201, 202], [101, 102], None);
}

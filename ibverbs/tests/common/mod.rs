//! What the tests of the drop-in libibverbs share: the library, built
//! once per test binary, and running programs over it.

#![allow(dead_code)] // Each test binary uses its own part.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::OnceLock;

/// `target/ibverbs-test/ibverbs`, holding libibverbs.so.1, built once per
/// run by ibverbs/build.sh (in a target directory of its own: the one this
/// test runs from is locked by the cargo that runs it).
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

/// `program` with the rnic libibverbs and `RNIC_DEVICES` (unset if None).
pub fn run(program: &str, args: &[&str], devices: Option<&str>) -> Output {
    let mut c = Command::new(program);
    c.args(args).env("LD_LIBRARY_PATH", lib_dir());
    match devices {
        Some(d) => c.env("RNIC_DEVICES", d),
        None => c.env_remove("RNIC_DEVICES"),
    };
    c.env_remove("RNIC_DEVICES_FILE");
    c.output()
        .unwrap_or_else(|e| panic!("{program}: {e} (scripts/setup.sh installs it)"))
}

pub fn text(o: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// A port nobody listens on now, TCP and UDP.
pub fn free_port() -> u16 {
    loop {
        let p = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if std::net::UdpSocket::bind(("127.0.0.1", p)).is_ok() {
            return p;
        }
    }
}

/// `program args -p PORT` as a server and `program args -p PORT
/// 127.0.0.1` as its client, two processes each with an rnic device on
/// one UDP wire between them; their outputs (server, client). The client
/// is started again until it reaches the server.
pub fn two_processes(program: &str, args: &[&str]) -> (Output, Output) {
    let (tcp, ua, ub) = (free_port(), free_port(), free_port());
    let dev = |me: u16, peer: u16, n: u8| {
        format!("wire=udp:127.0.0.1:{me}=127.0.0.1:{peer},mac=02:00:00:00:00:0{n},ipv4=192.0.2.{n}")
    };
    let port = tcp.to_string();
    let server = Command::new(program)
        .args(args)
        .args(["-p", &port])
        .env("LD_LIBRARY_PATH", lib_dir())
        .env("RNIC_DEVICES", dev(ua, ub, 1))
        .env_remove("RNIC_DEVICES_FILE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("{program}: {e} (scripts/setup.sh installs it)"));
    let mut client = None;
    for _ in 0..50 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        let o = Command::new(program)
            .args(args)
            .args(["-p", &port, "127.0.0.1"])
            .env("LD_LIBRARY_PATH", lib_dir())
            .env("RNIC_DEVICES", dev(ub, ua, 2))
            .env_remove("RNIC_DEVICES_FILE")
            .output()
            .unwrap();
        // rdma-core's pingpongs and perftest say so when nobody listens.
        if !String::from_utf8_lossy(&o.stderr).contains("Couldn't connect") {
            client = Some(o);
            break;
        }
    }
    let client = client.expect("the client never reached the server");
    (server.wait_with_output().unwrap(), client)
}

//! What the tests of the drop-in libibverbs share: the library, built
//! once per test binary, and running programs over it.

#![allow(dead_code)] // Each test binary uses its own part.

use std::process::{Command, Output, Stdio};

pub use rnic_tests::dropin::lib_dir;

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

/// A TCP port nobody listened on a moment ago (the programs bind their
/// own: [`two_processes`] runs them again on another if it was taken).
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The descriptor a program finds its UDP wire's socket at.
const WIRE_FD: i32 = 3;

/// Hands `socket` to the program `cmd` starts as descriptor [`WIRE_FD`].
fn hand_over(cmd: &mut Command, socket: &std::net::UdpSocket) {
    use std::os::fd::AsRawFd;
    use std::os::unix::process::CommandExt;
    let fd = socket.as_raw_fd();
    // SAFETY: dup2 and fcntl are async-signal-safe, and touch only the child's
    // descriptor table: the copy at WIRE_FD has no close-on-exec flag, the
    // parent's original (close-on-exec) reaches no other child.
    unsafe {
        cmd.pre_exec(move || {
            // dup2 onto itself would keep close-on-exec: clear it then.
            let r = if fd == WIRE_FD {
                libc::fcntl(fd, libc::F_SETFD, 0)
            } else {
                libc::dup2(fd, WIRE_FD)
            };
            if r < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// `program args -p PORT` as a server and `program args -p PORT
/// 127.0.0.1` as its client, two processes each with an rnic device on
/// one UDP wire between them; their outputs (server, client). The wire's
/// sockets are bound here, once, and inherited (`udp-fd`), so no UDP port
/// is closed and bound again; the TCP port the programs exchange QP
/// numbers on is theirs to bind, and if another process took it first,
/// the pair runs again on another. The client is started again until it
/// reaches the server.
pub fn two_processes(program: &str, args: &[&str]) -> (Output, Output) {
    for _ in 0..5 {
        let (server, client) = two_processes_once(program, args);
        let err = String::from_utf8_lossy(&server.stderr);
        // rdma-core's pingpongs and perftest, when their port is taken.
        let taken = ["Couldn't listen", "Couldn't bind", "Address already in use"]
            .iter()
            .any(|m| err.contains(m));
        if !taken {
            return (server, client.expect("the client never reached the server"));
        }
        eprintln!("{program}: TCP port taken before the server bound it: again on another");
    }
    panic!("{program}: five TCP ports taken before the server bound them");
}

fn two_processes_once(program: &str, args: &[&str]) -> (Output, Option<Output>) {
    let tcp = free_port();
    let socket = || std::net::UdpSocket::bind("127.0.0.1:0").expect("bind a UDP socket");
    let (ua, ub) = (socket(), socket());
    let dev = |peer: &std::net::UdpSocket, n: u8| {
        let peer = peer.local_addr().unwrap();
        format!("wire=udp-fd:{WIRE_FD}={peer},mac=02:00:00:00:00:0{n},ipv4=192.0.2.{n}")
    };
    let port = tcp.to_string();
    let mut server = Command::new(program);
    server
        .args(args)
        .args(["-p", &port])
        .env("LD_LIBRARY_PATH", lib_dir())
        .env("RNIC_DEVICES", dev(&ub, 1))
        .env_remove("RNIC_DEVICES_FILE")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    hand_over(&mut server, &ua);
    let mut server = server
        .spawn()
        .unwrap_or_else(|e| panic!("{program}: {e} (scripts/setup.sh installs it)"));
    let mut client = None;
    for _ in 0..50 {
        std::thread::sleep(std::time::Duration::from_millis(100));
        if server.try_wait().unwrap().is_some() {
            break;
        }
        let mut c = Command::new(program);
        c.args(args)
            .args(["-p", &port, "127.0.0.1"])
            .env("LD_LIBRARY_PATH", lib_dir())
            .env("RNIC_DEVICES", dev(&ua, 2))
            .env_remove("RNIC_DEVICES_FILE");
        hand_over(&mut c, &ub);
        let o = c.output().unwrap();
        // rdma-core's pingpongs and perftest say so when nobody listens.
        if !String::from_utf8_lossy(&o.stderr).contains("Couldn't connect") {
            client = Some(o);
            break;
        }
    }
    (server.wait_with_output().unwrap(), client)
}

/// What every C program of these tests starts with: the headers, a
/// `CHECK(condition, code)` that returns `code` (printing errno) when the
/// condition fails, and `to_rts`, which takes an RC QP to RTS towards QP
/// `dest` at GID `gid` (every remote access, both PSNs 7, MTU 1024,
/// timeout 14), returning 0 or 100, 200, 300 plus the failing
/// transition's error; `one`, which polls one completion from a CQ for
/// up to 5 s (1, or 0 if none came); `open_first`, which opens the first
/// device; `rc_qp`, which makes an RC QP; `write_within`, which posts a
/// signalled RDMA WRITE within one registered buffer; and `access_error`,
/// which makes a responder's access error (and its async event).
pub const C_PRELUDE: &str = r#"
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <infiniband/verbs.h>
#define CHECK(c, n) do { if (!(c)) { printf("check %d failed, errno %d\n", n, errno); return n; } } while (0)
static int to_rts(struct ibv_qp *qp, unsigned dest, union ibv_gid *gid) {
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_INIT; a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
    int rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    if (rc) return 100 + rc;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTR; a.path_mtu = IBV_MTU_1024; a.dest_qp_num = dest;
    a.rq_psn = 7; a.max_dest_rd_atomic = 1; a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1; a.ah_attr.grh.dgid = *gid; a.ah_attr.grh.hop_limit = 64; a.ah_attr.port_num = 1;
    rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                       IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
    if (rc) return 200 + rc;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_RTS; a.timeout = 14; a.retry_cnt = 7; a.rnr_retry = 7; a.sq_psn = 7; a.max_rd_atomic = 1;
    rc = ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                       IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC);
    return rc ? 300 + rc : 0;
}
/* Posts a signalled RDMA WRITE (wr_id 1) on `qp` of the first 8 bytes of
   `buf` to `buf + 32`, both in `mr`, with `rkey` (`mr->rkey`: a
   completion to wait for; another: an access error). */
static int write_within(struct ibv_qp *qp, char *buf, struct ibv_mr *mr, uint32_t rkey) {
    struct ibv_sge s = { (uintptr_t)buf, 8, mr->lkey };
    struct ibv_send_wr w, *bad;
    memset(&w, 0, sizeof w);
    w.wr_id = 1; w.sg_list = &s; w.num_sge = 1; w.opcode = IBV_WR_RDMA_WRITE; w.send_flags = IBV_SEND_SIGNALED;
    w.wr.rdma.remote_addr = (uintptr_t)buf + 32; w.wr.rdma.rkey = rkey;
    return ibv_post_send(qp, &w, &bad);
}
/* The first device, opened (NULL if there is none). */
static struct ibv_context *open_first(void) {
    struct ibv_device **list = ibv_get_device_list(NULL);
    return list && list[0] ? ibv_open_device(list[0]) : NULL;
}
/* An RC QP on `pd` with `cq` for both queues: `wrs` requests of `sge`
 * entries each way, `inl` inline bytes. */
static struct ibv_qp *rc_qp(struct ibv_pd *pd, struct ibv_cq *cq, int wrs, int sge, int inl) {
    struct ibv_qp_init_attr ia;
    memset(&ia, 0, sizeof ia);
    ia.qp_type = IBV_QPT_RC; ia.send_cq = cq; ia.recv_cq = cq;
    ia.cap.max_send_wr = wrs; ia.cap.max_recv_wr = wrs;
    ia.cap.max_send_sge = sge; ia.cap.max_recv_sge = sge; ia.cap.max_inline_data = inl;
    return ibv_create_qp(pd, &ia);
}
/* One completion from `cq`, waiting up to 5 s. */
static int one(struct ibv_cq *cq, struct ibv_wc *wc) {
    time_t end = time(NULL) + 5;
    while (time(NULL) < end) {
        int n = ibv_poll_cq(cq, 1, wc);
        if (n) return n;
    }
    return 0;
}
/* On `ctx`, two connected RC QPs and an RDMA WRITE from the first to the
   second with a wrong key: the WRITE completes with
   IBV_WC_REM_ACCESS_ERR, and the second's responder raises
   IBV_EVENT_QP_ACCESS_ERR. The second QP, or NULL if a step failed. */
static struct ibv_qp *access_error(struct ibv_context *ctx) {
    static char buf[64];
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
    if (!pd || !cq) return NULL;
    struct ibv_qp *a = rc_qp(pd, cq, 4, 1, 0), *b = rc_qp(pd, cq, 4, 1, 0);
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    union ibv_gid gid;
    if (!a || !b || !mr || ibv_query_gid(ctx, 1, 0, &gid) || to_rts(a, b->qp_num, &gid) ||
        to_rts(b, a->qp_num, &gid) || write_within(a, buf, mr, mr->rkey ^ 0x100))
        return NULL;
    struct ibv_wc wc;
    return one(cq, &wc) == 1 && wc.status == IBV_WC_REM_ACCESS_ERR ? b : NULL;
}
"#;

/// Compiles the C program `code` with gcc (against the system's
/// infiniband/verbs.h; `link` puts [`C_PRELUDE`] before it and links the
/// rnic library) and runs it with the
/// rnic libibverbs and `RNIC_DEVICES` `devices`.
pub fn c_program(code: &str, link: bool, devices: Option<&str>) -> Output {
    let dir =
        std::env::temp_dir().join(format!("rnic-ibv-c-{}-{}", std::process::id(), code.len()));
    std::fs::create_dir_all(&dir).unwrap();
    // A probe that is not linked has its own headers and no use for
    // to_rts.
    let prelude = if link { C_PRELUDE } else { "" };
    std::fs::write(dir.join("p.c"), format!("{prelude}{code}")).unwrap();
    let mut cc = Command::new("gcc");
    cc.arg(dir.join("p.c")).arg("-o").arg(dir.join("p"));
    if link {
        cc.arg("-L").arg(lib_dir()).arg("-libverbs");
    }
    assert!(
        cc.status().expect("gcc").success(),
        "the C program needs libibverbs-dev"
    );
    let out = run(dir.join("p").to_str().unwrap(), &[], devices);
    std::fs::remove_dir_all(&dir).unwrap();
    out
}

/// `name offset` lines from a layout probe of `ty`'s `fields` (and `size`).
pub fn layout(ty: &str, fields: &[&str]) -> Vec<(String, usize)> {
    let mut code = String::from(
        "#include <stddef.h>\n#include <stdio.h>\n#include <infiniband/verbs.h>\nint main(void) {\n",
    );
    code += &format!("printf(\"size %zu\\n\", sizeof({ty}));\n");
    for f in fields {
        code += &format!("printf(\"{f} %zu\\n\", offsetof({ty}, {f}));\n");
    }
    code += "return 0; }\n";
    let out = c_program(&code, false, None);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| {
            let (k, v) = l.split_once(' ').unwrap();
            (k.to_owned(), v.parse().unwrap())
        })
        .collect()
}

/// Asserts that `ours` (name, size or offset) matches the header's.
pub fn same_layout(ty: &str, ours: &[(&str, usize)]) {
    let fields: Vec<&str> = ours[1..].iter().map(|(f, _)| *f).collect();
    let header = layout(ty, &fields);
    assert_eq!(header.len(), ours.len());
    for ((k, v), (name, want)) in ours.iter().zip(&header) {
        assert_eq!((k, v), (&name.as_str(), want), "{ty}.{k}");
    }
}

/// Runs the C program `code` as [`c_program`] does (linked, after
/// [`C_PRELUDE`]), asserts that it exits 0, and returns what it printed.
pub fn c_ok(code: &str, devices: Option<&str>) -> String {
    let o = c_program(code, true, devices);
    let (out, err) = text(&o);
    assert_eq!(o.status.code(), Some(0), "{out}{err}");
    out
}

//! rnic's driver, unchanged, over devices that rnicd serves: bring-up,
//! queries, and SENDs between RC QPs, whose rings and buffers are memory
//! this process shares with rnicd; on one device, on two clients' devices
//! at once, and across two clients' devices.

mod common;

use std::ptr::NonNull;
use std::sync::mpsc::{channel, Receiver, Sender};
use std::time::{Duration, Instant};

use rnic_driver::{
    access, Context, Cq, Mr, Payload, Pd, Qp, QpCap, QpInit, QpType, RecvWr, SendOp, SendWr,
    WcOpcode, WcStatus, WorkCompletion,
};
use rnic_emu::net::Switch;
use rnic_emu::EmuConfig;
use rnic_hw_regs::pci;
use rnic_tests::{init_attr, rtr_attr_to, rts_attr, Conn};
use rnic_vfio_user::server;
use rnic_vfio_user::VfioUserHal;
use rnicd::Backend;

type H = VfioUserHal;

/// Takes `qp` from RESET to RTS as `c` says, connected to QP `dest`
/// behind `dgid`.
fn connect<P: rnic_queues::Hal>(qp: &Qp<P>, dest: u32, dgid: [u8; 16], c: &Conn) {
    for (attr, mask) in [init_attr(c), rtr_attr_to(dgid, dest, c), rts_attr(c)] {
        qp.modify(&attr, mask).expect("MODIFY_QP");
    }
}

/// Connects QPs `a` and `b` of the device whose GID is `gid` to each
/// other, as `c` says.
fn pair(a: &Qp<H>, b: &Qp<H>, gid: [u8; 16], c: &Conn) {
    connect(a, b.qp_num(), gid, c);
    connect(b, a.qp_num(), gid, c);
}

/// An RC QP completing into `cq`, every send signaled.
fn rc_qp<P: rnic_queues::Hal>(pd: &Pd<P>, cq: &Cq<P>) -> Qp<P> {
    let cap = QpCap {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    pd.create_qp(&QpInit {
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap,
        qp_type: QpType::Rc,
        sq_sig_all: true,
    })
    .expect("CREATE_QP")
}

fn post_recv(qp: &Qp<H>, mr: &Mr<H>, wr_id: u64) {
    let sge = mr.sge(0, 256).expect("sge");
    let wr = RecvWr {
        wr_id,
        sg_list: &[sge],
    };
    qp.post_recv(&[wr]).expect("post_recv");
}

/// SENDs `msg` from the start of `mr`.
fn post_send(qp: &Qp<H>, mr: &Mr<H>, wr_id: u64, msg: &[u8]) {
    mr.write(0, msg).expect("write MR");
    let sge = mr.sge(0, msg.len() as u32).expect("sge");
    qp.post_send(&[SendWr {
        wr_id,
        op: SendOp::Send,
        payload: Payload::Sgl(&[sge]),
        flags: rnic_driver::send_flags::SIGNALED,
    }])
    .expect("post_send");
}

fn next(cq: &Cq<H>) -> WorkCompletion {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut wc = [WorkCompletion::default()];
    while cq.poll(&mut wc).expect("poll") == 0 {
        assert!(Instant::now() < deadline, "no completion");
        std::thread::yield_now();
    }
    wc[0]
}

/// Waits for the receive `wr_id` and checks that it holds `msg`.
fn received(cq: &Cq<H>, mr: &Mr<H>, wr_id: u64, msg: &[u8]) {
    let wc = next(cq);
    assert_eq!(
        (wc.wr_id, wc.status, wc.opcode),
        (wr_id, WcStatus::Success, WcOpcode::Recv)
    );
    let mut back = vec![0u8; wc.byte_len as usize];
    mr.read(0, &mut back).expect("read MR");
    assert_eq!(back, msg);
}

/// Brings the device up and SENDs `msg` between two RC QPs on it, into a
/// buffer of this process's heap that rnicd reaches through the kernel.
fn send_on(hal: VfioUserHal, msg: &[u8]) {
    let ctx = Context::open(hal).expect("bring-up");
    assert!(ctx.hal().maps_process_memory());
    let attr = ctx.query_device().expect("QUERY_DEVICE");
    assert_eq!(attr.vendor_id, u32::from(pci::VENDOR_ID));
    let gid = ctx.query_gid(1, 0).expect("QUERY_GID");
    let pd = ctx.alloc_pd().expect("PD");
    let mr_a = pd.alloc_mr(4096, access::LOCAL_WRITE).expect("MR a");
    // Not page-aligned, not shared: an ordinary heap buffer.
    let mut heap = vec![0u8; 5000];
    let at = NonNull::new(heap[3..].as_mut_ptr()).expect("a heap address");
    // SAFETY: `heap` outlives the MR (dropped at the end of the function,
    // after it) and is not touched until the receive completed.
    let mr_b = unsafe { pd.reg_mr(at, 4096, access::LOCAL_WRITE) }.expect("MR b on the heap");
    let (cq_a, cq_b) = (
        ctx.create_cq(16).expect("CQ"),
        ctx.create_cq(16).expect("CQ"),
    );
    let (qp_a, qp_b) = (rc_qp(&pd, &cq_a), rc_qp(&pd, &cq_b));
    pair(&qp_a, &qp_b, gid, &Conn::default());
    post_recv(&qp_b, &mr_b, 9);
    post_send(&qp_a, &mr_a, 1, msg);
    let sent = next(&cq_a);
    assert_eq!(
        (sent.wr_id, sent.status, sent.opcode),
        (1, WcStatus::Success, WcOpcode::Send)
    );
    let got = next(&cq_b);
    assert_eq!((got.wr_id, got.status), (9, WcStatus::Success));
    assert_eq!(got.byte_len as usize, msg.len());
    drop((qp_a, qp_b, mr_b));
    assert_eq!(&heap[3..3 + msg.len()], msg, "the bytes are in the heap");
    assert_eq!(heap[..3], [0; 3], "and nowhere before them");
    // The doorbells went through the posted-write queue in shared memory.
    assert!(ctx.hal().posted() >= 2, "{} posted", ctx.hal().posted());
}

#[test]
fn the_driver_sends_between_two_qps_of_a_device_rnicd_serves() {
    let path = common::socket("driver");
    let listener = std::os::unix::net::UnixListener::bind(&path).expect("bind");
    let t = std::thread::spawn(move || {
        let (dev, q) = rnicd::device(&EmuConfig::default(), 0, &Switch::new()).expect("device");
        let mut backend = Backend::new(&dev, Some(q));
        drop(dev);
        let (stream, _) = listener.accept().expect("accept");
        server::serve(&stream, &mut backend).expect("served");
    });
    send_on(
        VfioUserHal::connect(&path).expect("connect"),
        b"from a process to rnicd's device and back",
    );
    t.join().unwrap();
    let _ = std::fs::remove_file(&path);
}

#[test]
fn two_clients_at_once_each_get_a_device_of_their_own() {
    let (daemon, path) = common::daemon("two", 2, 2);
    // Both connected before either goes on: each holds a device.
    let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
    let clients: Vec<_> = [&b"client one"[..], b"client two"]
        .into_iter()
        .map(|msg| {
            let (path, barrier) = (path.clone(), barrier.clone());
            std::thread::spawn(move || {
                let hal = VfioUserHal::connect(&path).expect("connect");
                barrier.wait();
                send_on(hal, msg);
            })
        })
        .collect();
    for c in clients {
        c.join().expect("a client's traffic");
    }
    common::exits(daemon);
}

/// What one client tells the other: the number of its QP and the GID of
/// its device.
type Side = (u32, [u8; 16]);

/// One client of [`qps_of_two_clients_meet_through_rnicd`]: connects its
/// QP to the other's, then sends `msg` or receives it.
fn meet(path: std::path::PathBuf, tell: Sender<Side>, hear: Receiver<Side>, msg: Option<&[u8]>) {
    let ctx = Context::open(VfioUserHal::connect(&path).expect("connect")).expect("bring-up");
    let gid = ctx.query_gid(1, 0).expect("QUERY_GID");
    let pd = ctx.alloc_pd().expect("PD");
    let mr = pd.alloc_mr(4096, access::LOCAL_WRITE).expect("MR");
    let cq = ctx.create_cq(16).expect("CQ");
    let qp = rc_qp(&pd, &cq);
    tell.send((qp.qp_num(), gid)).expect("tell");
    let (peer_qpn, peer_gid) = hear.recv().expect("hear");
    assert_ne!(
        peer_gid, gid,
        "each client's device has an address of its own"
    );
    connect(&qp, peer_qpn, peer_gid, &Conn::default());
    if msg.is_none() {
        post_recv(&qp, &mr, 9);
    }
    // Both connected, and the receive posted, before the SEND.
    tell.send((0, gid)).expect("ready");
    hear.recv().expect("peer ready");
    match msg {
        Some(m) => {
            post_send(&qp, &mr, 1, m);
            let wc = next(&cq);
            assert_eq!((wc.wr_id, wc.status), (1, WcStatus::Success));
        }
        None => received(&cq, &mr, 9, MEET),
    }
    // Neither tears down while the other may still need it.
    tell.send((0, gid)).expect("done");
    hear.recv().expect("peer done");
}

const MEET: &[u8] = b"across two clients' devices, through rnicd's switch";

#[test]
fn qps_of_two_clients_meet_through_rnicd() {
    let (daemon, path) = common::daemon("meet", 2, 2);
    let (to_b, from_a) = channel();
    let (to_a, from_b) = channel();
    let pa = path.clone();
    let a = std::thread::spawn(move || meet(pa, to_b, from_b, Some(MEET)));
    let b = std::thread::spawn(move || meet(path, to_a, from_a, None));
    a.join().expect("the sender");
    b.join().expect("the receiver");
    common::exits(daemon);
}

/// One end of a connection: its GID, PD, MR, CQ and RC QP.
type End<H> = ([u8; 16], Pd<H>, Mr<H>, Cq<H>, Qp<H>);

fn end<H: rnic_queues::Hal>(ctx: &Context<H>) -> End<H> {
    let pd = ctx.alloc_pd().expect("PD");
    let mr = pd.alloc_mr(4096, access::LOCAL_WRITE).expect("MR");
    let cq = ctx.create_cq(16).expect("CQ");
    let qp = rc_qp(&pd, &cq);
    (ctx.query_gid(1, 0).expect("GID"), pd, mr, cq, qp)
}

#[test]
fn a_client_reaches_a_nic_beyond_the_uplink() {
    use std::os::fd::AsRawFd;
    // Both ends of the UDP wire are bound here, once: rnicd's end is
    // handed to it as descriptor 3.
    let bind = || std::net::UdpSocket::bind("127.0.0.1:0").expect("bind");
    let (ours, theirs) = (bind(), bind());
    let ours_at = ours.local_addr().unwrap();
    let theirs_at = theirs.local_addr().unwrap();
    let up = format!("udp-fd:3={ours_at}");
    let (daemon, path) =
        common::daemon_with("uplink", 1, 1, &["--uplink", &up], Some(theirs.as_raw_fd()));
    drop(theirs);
    // A NIC of this process on the other end of the wire.
    let cfg = EmuConfig {
        mac: [0x02, 0, 0, 0, 0x10, 0x01],
        ipv4: [192, 0, 2, 77],
        ..EmuConfig::default()
    };
    let nic = rnic_emu::EmuDevice::builder(cfg)
        .wire(rnic_emu::net::UdpWire::from_socket(ours, theirs_at).expect("wire"))
        .build()
        .expect("NIC");
    let local = Context::open(nic.hal()).expect("bring-up");
    let remote = Context::open(VfioUserHal::connect(&path).expect("connect")).expect("bring-up");
    let (lgid, _lpd, lmr, lcq, lqp) = end(&local);
    let (rgid, rpd, rmr, rcq, rqp) = end(&remote);
    let c = Conn::default();
    connect(&lqp, rqp.qp_num(), rgid, &c);
    connect(&rqp, lqp.qp_num(), lgid, &c);
    // Both ways across the uplink.
    let there = b"from a NIC of this process to rnicd's device";
    let back = b"and back from rnicd's device";
    let sge = rmr.sge(0, 256).unwrap();
    rqp.post_recv(&[RecvWr {
        wr_id: 9,
        sg_list: &[sge],
    }])
    .unwrap();
    lmr.write(0, there).unwrap();
    let sge = lmr.sge(0, there.len() as u32).unwrap();
    let send = |wr_id| SendWr {
        wr_id,
        op: SendOp::Send,
        payload: Payload::Sgl(std::slice::from_ref(&sge)),
        flags: rnic_driver::send_flags::SIGNALED,
    };
    lqp.post_send(&[send(1)]).unwrap();
    received(&rcq, &rmr, 9, there);
    let mut wc = [WorkCompletion::default(); 1];
    let deadline = Instant::now() + Duration::from_secs(10);
    while lcq.poll(&mut wc).expect("poll") == 0 {
        assert!(Instant::now() < deadline, "no send completion");
    }
    assert_eq!((wc[0].wr_id, wc[0].status), (1, WcStatus::Success));
    let sge = lmr.sge(0, 256).unwrap();
    lqp.post_recv(&[RecvWr {
        wr_id: 8,
        sg_list: &[sge],
    }])
    .unwrap();
    post_send(&rqp, &rmr, 2, back);
    let wc = next(&rcq);
    assert_eq!((wc.wr_id, wc.status), (2, WcStatus::Success));
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut wc = [WorkCompletion::default(); 1];
    while lcq.poll(&mut wc).expect("poll") == 0 {
        assert!(Instant::now() < deadline, "nothing came back");
    }
    assert_eq!((wc[0].wr_id, wc[0].status), (8, WcStatus::Success));
    let mut got = vec![0u8; wc[0].byte_len as usize];
    lmr.read(0, &mut got).unwrap();
    assert_eq!(got, back);
    // The client goes: rnicd, told to serve one, exits.
    drop((rqp, rcq, rmr, rpd, remote));
    common::exits(daemon);
}

/// Kernel bypass through rnicd, at the driver: a stream of 8-byte WRITEs
/// kept 128 deep, posted in lists of 32 with the last signaled, makes no
/// system call per message. The only call the data path can make is a
/// wake-up of rnicd's device worker (a doorbell posted while it slept,
/// which it does after 10 µs without work): counted, and bounded by one
/// per list.
#[test]
fn a_stream_of_writes_wakes_rnicd_less_than_once_a_list() {
    let (daemon, path) = common::daemon("stream", 1, 1);
    let ctx = Context::open(VfioUserHal::connect(&path).expect("connect")).expect("bring-up");
    let gid = ctx.query_gid(1, 0).expect("QUERY_GID");
    let pd = ctx.alloc_pd().expect("PD");
    let target = pd
        .alloc_mr(4096, access::LOCAL_WRITE | access::REMOTE_WRITE)
        .expect("MR");
    let cq = ctx.create_cq(256).expect("CQ");
    let cap = QpCap {
        max_send_wr: 256,
        max_recv_wr: 1,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let qp = |sig_all| {
        pd.create_qp(&QpInit {
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            cap,
            qp_type: QpType::Rc,
            sq_sig_all: sig_all,
        })
        .expect("QP")
    };
    let (a, b) = (qp(false), qp(false));
    let c = Conn {
        access: access::REMOTE_WRITE,
        ..Conn::default()
    };
    pair(&a, &b, gid, &c);
    const LIST: usize = 32;
    const DEPTH: usize = 4;
    const MESSAGES: usize = 100_000;
    let value = 7u64.to_le_bytes();
    let list: Vec<SendWr> = (0..LIST)
        .map(|i| SendWr {
            wr_id: i as u64,
            op: SendOp::RdmaWrite {
                remote: rnic_driver::RemoteAddr {
                    addr: target.addr() + 8 * i as u64,
                    rkey: target.rkey(),
                },
            },
            payload: Payload::Inline(&value),
            flags: if i == LIST - 1 {
                rnic_driver::send_flags::SIGNALED
            } else {
                0
            },
        })
        .collect();
    let (mut posted, mut done, mut wc) = (0, 0, [WorkCompletion::default(); 16]);
    let deadline = Instant::now() + Duration::from_secs(120);
    while done < MESSAGES {
        while posted < MESSAGES && posted - done < DEPTH * LIST {
            a.post_send(&list).expect("post_send");
            posted += LIST;
        }
        let n = cq.poll(&mut wc).expect("poll");
        for w in &wc[..n] {
            assert_eq!(w.status, WcStatus::Success);
            done += LIST;
        }
        assert!(Instant::now() < deadline, "{done} of {MESSAGES} done");
    }
    let mut back = [0u8; 8];
    target.read(8 * (LIST - 1), &mut back).expect("read MR");
    assert_eq!(back, value, "the WRITEs arrived");
    let (kicks, lists) = (ctx.hal().kicks(), MESSAGES / LIST);
    eprintln!("{MESSAGES} WRITEs in {lists} lists woke rnicd's worker {kicks} times");
    assert!(kicks <= lists as u64, "{kicks} wake-ups for {lists} lists");
    drop((a, b, target, cq, pd, ctx));
    common::exits(daemon);
}

/// A buffer of this process's heap registered with rnicd's device: the
/// device reaches it through the kernel.
struct Heap {
    bytes: Vec<u8>,
}

impl Heap {
    fn new(len: usize, fill: impl Fn(usize) -> u8) -> Heap {
        Heap {
            bytes: (0..len).map(fill).collect(),
        }
    }

    /// Registers the buffer from byte 5 on (not page-aligned).
    fn register(&mut self, pd: &Pd<H>, rights: u32) -> Mr<H> {
        let len = self.bytes.len() - 5;
        let at = NonNull::new(self.bytes[5..].as_mut_ptr()).expect("heap");
        // SAFETY: the Heap outlives the MR in the test that uses it (the
        // MRs are dropped first), and is read only after the device's
        // completions say it is done with it.
        unsafe { pd.reg_mr(at, len, rights) }.expect("reg_mr of the heap")
    }

    /// What the device wrote, read behind Rust's back.
    fn read(&self) -> Vec<u8> {
        // SAFETY: the buffer's bytes, read volatile: the device wrote
        // them through the kernel, not through this Vec.
        self.bytes
            .iter()
            .map(|b| unsafe { std::ptr::read_volatile(b) })
            .collect()
    }
}

/// Messages of many packets between heap buffers of the client: an RDMA
/// READ into one, a SEND from it into another, an RDMA WRITE from that
/// into a third; every byte arrives, and nothing past the registration.
#[test]
fn messages_of_many_packets_move_between_heap_buffers() {
    let (daemon, path) = common::daemon("heap", 1, 1);
    let ctx = Context::open(VfioUserHal::connect(&path).expect("connect")).expect("bring-up");
    let gid = ctx.query_gid(1, 0).expect("QUERY_GID");
    let pd = ctx.alloc_pd().expect("PD");
    const LEN: usize = 20_005;
    let pattern = |i: usize| (i * 7 + i / 251) as u8;
    let mut src = Heap::new(LEN, pattern);
    let (mut read_into, mut recv_into, mut write_into) = (
        Heap::new(LEN, |_| 0),
        Heap::new(LEN, |_| 0),
        Heap::new(LEN + 64, |_| 0xee),
    );
    let all = access::LOCAL_WRITE | access::REMOTE_READ | access::REMOTE_WRITE;
    let (m_src, m_read, m_recv, m_write) = (
        src.register(&pd, all),
        read_into.register(&pd, all),
        recv_into.register(&pd, all),
        write_into.register(&pd, all),
    );
    let (cq_a, cq_b) = (
        ctx.create_cq(16).expect("CQ"),
        ctx.create_cq(16).expect("CQ"),
    );
    let (a, b) = (rc_qp(&pd, &cq_a), rc_qp(&pd, &cq_b));
    let c = Conn {
        access: access::REMOTE_READ | access::REMOTE_WRITE,
        ..Conn::default()
    };
    pair(&a, &b, gid, &c);
    let n = (LEN - 5) as u32;
    let remote = |m: &Mr<H>| rnic_driver::RemoteAddr {
        addr: m.addr(),
        rkey: m.rkey(),
    };
    let one = |qp: &Qp<H>, cq: &Cq<H>, op: SendOp, from: &Mr<H>, id: u64| {
        let sge = from.sge(0, n).expect("sge");
        qp.post_send(&[SendWr {
            wr_id: id,
            op,
            payload: Payload::Sgl(&[sge]),
            flags: rnic_driver::send_flags::SIGNALED,
        }])
        .expect("post_send");
        let wc = next(cq);
        assert_eq!((wc.wr_id, wc.status), (id, WcStatus::Success));
    };
    let body = |h: &Heap| h.read()[5..LEN].to_vec();
    let want: Vec<u8> = (5..LEN).map(pattern).collect();
    one(
        &b,
        &cq_b,
        SendOp::RdmaRead {
            remote: remote(&m_src),
        },
        &m_read,
        1,
    );
    assert_eq!(body(&read_into), want, "READ into the heap");
    let sge = m_recv.sge(0, n).expect("sge");
    a.post_recv(&[RecvWr {
        wr_id: 2,
        sg_list: &[sge],
    }])
    .expect("post_recv");
    one(&b, &cq_b, SendOp::Send, &m_read, 3);
    let got = next(&cq_a);
    assert_eq!(
        (got.wr_id, got.status, got.byte_len),
        (2, WcStatus::Success, n)
    );
    assert_eq!(body(&recv_into), want, "SEND into the heap");
    one(
        &a,
        &cq_a,
        SendOp::RdmaWrite {
            remote: remote(&m_write),
        },
        &m_recv,
        4,
    );
    let w = write_into.read();
    assert_eq!(w[5..LEN].to_vec(), want, "WRITE into the heap");
    assert!(
        w[..5].iter().chain(&w[LEN..]).all(|&b| b == 0xee),
        "nothing outside"
    );
    drop((a, b, m_src, m_read, m_recv, m_write, cq_a, cq_b, pd, ctx));
    common::exits(daemon);
}

//! rnic's driver, unchanged, over a device that rnicd serves: bring-up,
//! queries, and a SEND between two RC QPs of the device, whose rings and
//! buffers are memory this process shares with rnicd.

use std::time::{Duration, Instant};

use rnic_driver::{
    access, qp_attr, AhAttr, Context, Cq, Mtu, Payload, Qp, QpAttr, QpCap, QpInit, QpState, QpType,
    RecvWr, SendOp, SendWr, WcOpcode, WcStatus, WorkCompletion,
};
use rnic_emu::{EmuConfig, EmuDevice, ExecMode};
use rnic_hw_regs::pci;
use rnic_vfio_user::VfioUserHal;
use rnicd::Backend;
use vfio_user::Server;

type H = VfioUserHal;

fn connect(qp: &Qp<H>, dest_qpn: u32, ah_attr: AhAttr) {
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: access::REMOTE_WRITE,
        ..QpAttr::default()
    };
    let mask = qp_attr::STATE | qp_attr::PKEY_INDEX | qp_attr::PORT | qp_attr::ACCESS_FLAGS;
    qp.modify(&init, mask).expect("INIT");
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: Some(Mtu::Mtu1024),
        dest_qp_num: dest_qpn,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        ah_attr,
        ..QpAttr::default()
    };
    let mask = qp_attr::STATE
        | qp_attr::AV
        | qp_attr::PATH_MTU
        | qp_attr::DEST_QPN
        | qp_attr::RQ_PSN
        | qp_attr::MAX_DEST_RD_ATOMIC
        | qp_attr::MIN_RNR_TIMER;
    qp.modify(&rtr, mask).expect("RTR");
    let rts = QpAttr {
        qp_state: QpState::Rts,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 1,
        ..QpAttr::default()
    };
    let mask = qp_attr::STATE
        | qp_attr::SQ_PSN
        | qp_attr::TIMEOUT
        | qp_attr::RETRY_CNT
        | qp_attr::RNR_RETRY
        | qp_attr::MAX_QP_RD_ATOMIC;
    qp.modify(&rts, mask).expect("RTS");
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

#[test]
fn the_driver_sends_between_two_qps_of_a_device_rnicd_serves() {
    let path = std::env::temp_dir().join(format!("rnicd-{}-driver.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let dev = EmuDevice::new(EmuConfig::default(), ExecMode::Thread);
    let mut backend = Backend::new(&dev);
    let server = Server::new(&path, true, backend.irqs(), backend.regions()).expect("bind");
    let t = std::thread::spawn(move || {
        let _ = server.run(&mut backend);
    });
    send_between_two_qps(&path, b"from a process to rnicd's device and back");
    t.join().unwrap();
    let _ = std::fs::remove_file(&path);
}

#[test]
fn two_clients_at_once_each_get_a_device_of_their_own() {
    let path = std::env::temp_dir().join(format!("rnicd-{}-two.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let mut daemon = std::process::Command::new(env!("CARGO_BIN_EXE_rnicd"))
        .args(["--clients", "2", "--slots", "2", "--socket"])
        .arg(&path)
        .spawn()
        .expect("rnicd starts");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !path.exists() {
        assert!(Instant::now() < deadline, "no socket");
        std::thread::sleep(Duration::from_millis(10));
    }
    // Both connected before either finishes: each holds a device.
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
    let status = daemon.wait().expect("rnicd exits");
    assert!(status.success(), "{status}");
}

/// Connects to `path` and runs [`send_on`].
fn send_between_two_qps(path: &std::path::Path, msg: &[u8]) {
    send_on(VfioUserHal::connect(path).expect("connect"), msg);
}

/// Brings the device up and SENDs `msg` between two RC QPs on it.
fn send_on(hal: VfioUserHal, msg: &[u8]) {
    let ctx = Context::open(hal).expect("bring-up");
    let attr = ctx.query_device().expect("QUERY_DEVICE");
    assert_eq!(attr.vendor_id, u32::from(pci::VENDOR_ID));
    let port = ctx.query_port(1).expect("QUERY_PORT");
    let gid = ctx.query_gid(1, 0).expect("QUERY_GID");
    let pd = ctx.alloc_pd().expect("PD");
    let rights = access::LOCAL_WRITE | access::REMOTE_WRITE;
    let mr_a = pd.alloc_mr(4096, rights).expect("MR a");
    let mr_b = pd.alloc_mr(4096, rights).expect("MR b");
    let cq_a = ctx.create_cq(16).expect("CQ a");
    let cq_b = ctx.create_cq(16).expect("CQ b");
    let cap = QpCap {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 0,
    };
    let qp = |cq| {
        pd.create_qp(&QpInit {
            send_cq: cq,
            recv_cq: cq,
            srq: None,
            cap,
            qp_type: QpType::Rc,
            sq_sig_all: true,
        })
        .expect("QP")
    };
    let (qp_a, qp_b) = (qp(&cq_a), qp(&cq_b));
    let path_attr = AhAttr {
        dgid: gid,
        dmac: port.mac,
        hop_limit: 64,
        port_num: 1,
        is_global: true,
        ..AhAttr::default()
    };
    connect(&qp_a, qp_b.qp_num(), path_attr);
    connect(&qp_b, qp_a.qp_num(), path_attr);

    mr_a.write(0, msg).expect("write MR");
    qp_b.post_recv(&[RecvWr {
        wr_id: 9,
        sg_list: &[mr_b.sge(0, 256).expect("sge")],
    }])
    .expect("post_recv");
    qp_a.post_send(&[SendWr {
        wr_id: 1,
        op: SendOp::Send,
        payload: Payload::Sgl(&[mr_a.sge(0, msg.len() as u32).expect("sge")]),
        flags: rnic_driver::send_flags::SIGNALED,
    }])
    .expect("post_send");
    let sent = next(&cq_a);
    assert_eq!(
        (sent.wr_id, sent.status, sent.opcode),
        (1, WcStatus::Success, WcOpcode::Send)
    );
    let got = next(&cq_b);
    assert_eq!((got.wr_id, got.status), (9, WcStatus::Success));
    assert_eq!(got.byte_len as usize, msg.len());
    let mut back = vec![0u8; msg.len()];
    mr_b.read(0, &mut back).expect("read MR");
    assert_eq!(back, msg);
}

/// What one side tells the other to connect: its QPN and address.
#[derive(Clone, Copy)]
struct Side {
    qpn: u32,
    gid: [u8; 16],
    mac: [u8; 6],
}

#[test]
fn qps_of_two_clients_meet_through_rnicd() {
    let path = std::env::temp_dir().join(format!("rnicd-{}-meet.sock", std::process::id()));
    let _ = std::fs::remove_file(&path);
    let mut daemon = std::process::Command::new(env!("CARGO_BIN_EXE_rnicd"))
        .args(["--clients", "2", "--slots", "2", "--socket"])
        .arg(&path)
        .spawn()
        .expect("rnicd starts");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !path.exists() {
        assert!(Instant::now() < deadline, "no socket");
        std::thread::sleep(Duration::from_millis(10));
    }
    let (to_b, from_a) = std::sync::mpsc::channel::<Side>();
    let (to_a, from_b) = std::sync::mpsc::channel::<Side>();
    let msg = b"across two clients' devices, through rnicd's switch";
    let run = move |path: std::path::PathBuf,
                    tell: std::sync::mpsc::Sender<Side>,
                    hear: std::sync::mpsc::Receiver<Side>,
                    sender: bool| {
        let ctx = Context::open(VfioUserHal::connect(&path).expect("connect")).expect("bring-up");
        let port = ctx.query_port(1).expect("QUERY_PORT");
        let gid = ctx.query_gid(1, 0).expect("QUERY_GID");
        let pd = ctx.alloc_pd().expect("PD");
        let mr = pd.alloc_mr(4096, access::LOCAL_WRITE).expect("MR");
        let cq = ctx.create_cq(16).expect("CQ");
        let cap = QpCap {
            max_send_wr: 4,
            max_recv_wr: 4,
            max_send_sge: 1,
            max_recv_sge: 1,
            max_inline_data: 0,
        };
        let qp = pd
            .create_qp(&QpInit {
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                cap,
                qp_type: QpType::Rc,
                sq_sig_all: true,
            })
            .expect("QP");
        tell.send(Side {
            qpn: qp.qp_num(),
            gid,
            mac: port.mac,
        })
        .expect("tell");
        let peer = hear.recv().expect("hear");
        assert_ne!(
            peer.gid, gid,
            "each client's device has an address of its own"
        );
        let ah = AhAttr {
            dgid: peer.gid,
            dmac: peer.mac,
            hop_limit: 64,
            port_num: 1,
            is_global: true,
            ..AhAttr::default()
        };
        connect(&qp, peer.qpn, ah);
        if !sender {
            qp_post_recv(&qp, &mr);
        }
        // Both sides connected (and the receive posted) before the SEND.
        tell.send(Side { qpn: 0, ..peer }).expect("ready");
        hear.recv().expect("peer ready");
        if sender {
            mr.write(0, msg).expect("write MR");
            qp.post_send(&[SendWr {
                wr_id: 1,
                op: SendOp::Send,
                payload: Payload::Sgl(&[mr.sge(0, msg.len() as u32).expect("sge")]),
                flags: rnic_driver::send_flags::SIGNALED,
            }])
            .expect("post_send");
            let wc = next(&cq);
            assert_eq!((wc.wr_id, wc.status), (1, WcStatus::Success));
        } else {
            let wc = next(&cq);
            assert_eq!((wc.wr_id, wc.status), (9, WcStatus::Success));
            let mut back = vec![0u8; wc.byte_len as usize];
            mr.read(0, &mut back).expect("read MR");
            assert_eq!(back, msg);
        }
        // Neither tears down while the other may still need it.
        tell.send(Side { qpn: 1, ..peer }).expect("done");
        hear.recv().expect("peer done");
    };
    let (pa, pb) = (path.clone(), path.clone());
    let a = std::thread::spawn(move || run(pa, to_b, from_b, true));
    let b = std::thread::spawn(move || run(pb, to_a, from_a, false));
    a.join().expect("the sender");
    b.join().expect("the receiver");
    let status = daemon.wait().expect("rnicd exits");
    assert!(status.success(), "{status}");
}

fn qp_post_recv(qp: &Qp<H>, mr: &rnic_driver::Mr<H>) {
    qp.post_recv(&[RecvWr {
        wr_id: 9,
        sg_list: &[mr.sge(0, 256).expect("sge")],
    }])
    .expect("post_recv");
}

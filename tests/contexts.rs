//! Several user contexts on one device, in both execution modes: each has
//! doorbell pages of its own; opening the device again while a context
//! uses it is refused instead of resetting it; a context cannot use
//! another's objects (the driver refuses, and the device's keys and PDs
//! keep them apart on the data path; the device's own refusals are in
//! `emu/tests/commands.rs`); RDMA between contexts works as
//! between hosts, also on a point-to-point wire, which never sees it;
//! events go to the context owning their object, port events to all; a
//! context closing takes its objects and leaves the others running.

use rnic_tests::*;

/// A connected-to-be QP of `ctx` with its own PD, CQ and MR.
struct Side {
    pd: EPd,
    cq: ECq,
    qp: EQp,
    mr: EMr,
}

fn side(ctx: &Ctx) -> Side {
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let qp = create_qp(&pd, &cq, &cq, cap(8, 1, 64), false);
    let mr = pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    Side { pd, cq, qp, mr }
}

fn contexts(mode: ExecMode) {
    let dev = EmuDevice::new(EmuConfig::default(), mode);
    let a = Ctx::open(dev.hal()).unwrap();
    let b = a.open_another().unwrap();
    assert_ne!(a.uid(), b.uid());
    assert_eq!(a.uar_pages(), 0..8);
    assert_eq!(b.uar_pages(), 8..16);
    // Opening the device again would reset it under both: refused.
    let e = Ctx::open(dev.hal()).err().expect("a second bring-up");
    assert_eq!(e.kind(), ErrorKind::Busy, "{e}");

    let (sa, sb) = (side(&a), side(&b));
    // The driver keeps each context's objects to itself.
    let e = sb
        .pd
        .create_qp(&QpInit {
            send_cq: &sa.cq,
            recv_cq: &sb.cq,
            srq: None,
            cap: cap(4, 1, 0),
            qp_type: QpType::Rc,
            sq_sig_all: false,
        })
        .err()
        .unwrap();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    // Between contexts, RDMA works as between hosts; a's QP reports its
    // first packet in RTR to a alone.
    let c = Conn::default();
    to_init(&sa.qp, &c).unwrap();
    to_rtr(&a, &sa.qp, sb.qp.qp_num(), &c).unwrap();
    connect(&b, &sb.qp, sa.qp.qp_num(), &c);
    post_recv(&sa.qp, recv(9, &[sge(&sa.mr, 2000, 64)]));
    post_send(&sb.qp, send(9, &[sge(&sb.mr, 0, 8)]));
    assert_ok(&poll_one(&sa.cq), 9, WcOpcode::Recv);
    assert_ok(&poll_one(&sb.cq), 9, WcOpcode::Send);
    let ev = expect_event(&a);
    assert_eq!(
        (ev.event_type, ev.obj),
        (EventType::CommEst, sa.qp.qp_num())
    );
    assert_no_event(&b);
    to_rts(&sa.qp, &c).unwrap();
    write_mr(&sa.mr, 0, b"from context a");
    post_recv(&sb.qp, recv(1, &[sge(&sb.mr, 0, 64)]));
    post_send(&sa.qp, send(1, &[sge(&sa.mr, 0, 14)]));
    post_send(
        &sa.qp,
        write(2, &[sge(&sa.mr, 0, 14)], sb.mr.addr() + 100, sb.mr.rkey()),
    );
    assert_ok(&poll_one(&sb.cq), 1, WcOpcode::Recv);
    let s = poll_n(&sa.cq, 2);
    assert_ok(&s[0], 1, WcOpcode::Send);
    assert_ok(&s[1], 2, WcOpcode::RdmaWrite);
    assert_eq!(read_mr(&sb.mr, 0, 14), b"from context a");
    assert_eq!(read_mr(&sb.mr, 100, 14), b"from context a");
    // But another context's lkey is no key of this QP's PD.
    let foreign = Sge {
        addr: sb.mr.addr(),
        length: 8,
        lkey: sb.mr.lkey(),
    };
    post_send(&sa.qp, send(3, &[foreign]));
    assert_err(
        &poll_one(&sa.cq),
        3,
        WcStatus::LocProtErr,
        Syndrome::PdMismatch,
    );
    // The port's events go to every context.
    a.set_gid(
        1,
        5,
        [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8],
        GidType::RoceV2,
    )
    .unwrap();
    for ctx in [&a, &b] {
        let ev = expect_event(ctx);
        assert_eq!((ev.event_type, ev.obj), (EventType::GidChange, 1));
    }
    assert_no_event(&a);
    assert_no_event(&b);

    // Closing b: its objects go, a goes on, its pages are free again.
    let Side {
        qp: qp_b,
        cq: cq_b,
        mr: mr_b,
        pd: pd_b,
    } = sb;
    let b_qpn = qp_b.qp_num();
    drop((qp_b, cq_b, mr_b, pd_b, b));
    let c = a.open_another().unwrap();
    assert_eq!(c.uar_pages(), 8..16);
    let sc = side(&c);
    assert_eq!(sc.qp.qp_num(), b_qpn, "b's QP number is free");
    reset_and_loop(&a, &sa);
    reset_and_loop(&c, &sc);
}

/// Moves `s.qp` to RESET, connects it to itself and sends a message.
fn reset_and_loop(ctx: &Ctx, s: &Side) {
    set_state(&s.qp, QpState::Reset).unwrap();
    connect(ctx, &s.qp, s.qp.qp_num(), &Conn::default());
    post_recv(&s.qp, recv(7, &[sge(&s.mr, 1000, 64)]));
    post_send(&s.qp, send(8, &[sge(&s.mr, 0, 8)]));
    let got = poll_n(&s.cq, 2);
    assert!(got.iter().all(|w| w.status == WcStatus::Success), "{got:?}");
}

#[test]
fn a_device_left_up_can_be_taken_over() {
    let dev = EmuDevice::new(EmuConfig::default(), ExecMode::Inline);
    let a = Ctx::open(dev.hal()).unwrap();
    // A driver that cannot reach the old one resets the device only when
    // asked to.
    let b = Ctx::open_with(
        dev.hal(),
        DriverConfig {
            take_over: true,
            ..DriverConfig::default()
        },
    )
    .unwrap();
    b.alloc_pd().unwrap();
    // The old instance is gone as a crashed driver is: nothing of it runs.
    std::mem::forget(a);
}

/// On a point-to-point wire, which would carry a frame to the NIC's own MAC
/// to the peer, the NIC loops its own QPs' traffic back itself: a SEND and
/// a WRITE between two contexts land, and the peer receives nothing.
fn own_traffic_stays_off_a_point_to_point_wire(mode: ExecMode) {
    let peer = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let wire =
        rnic_emu::net::UdpWire::bind("127.0.0.1:0".parse().unwrap(), peer.local_addr().unwrap())
            .unwrap();
    let dev = EmuDevice::builder(EmuConfig::default())
        .mode(mode)
        .wire(wire)
        .build()
        .unwrap();
    let a = Ctx::open(dev.hal()).unwrap();
    let b = a.open_another().unwrap();
    let (sa, sb) = (side(&a), side(&b));
    let c = Conn::default();
    connect(&a, &sa.qp, sb.qp.qp_num(), &c);
    connect(&b, &sb.qp, sa.qp.qp_num(), &c);
    write_mr(&sa.mr, 0, b"through the NIC");
    post_recv(&sb.qp, recv(1, &[sge(&sb.mr, 0, 64)]));
    post_send(&sa.qp, send(1, &[sge(&sa.mr, 0, 15)]));
    post_send(
        &sa.qp,
        write(2, &[sge(&sa.mr, 0, 15)], sb.mr.addr() + 100, sb.mr.rkey()),
    );
    assert_ok(&poll_one(&sb.cq), 1, WcOpcode::Recv);
    let s = poll_n(&sa.cq, 2);
    assert_ok(&s[0], 1, WcOpcode::Send);
    assert_ok(&s[1], 2, WcOpcode::RdmaWrite);
    assert_eq!(read_mr(&sb.mr, 0, 15), b"through the NIC");
    assert_eq!(read_mr(&sb.mr, 100, 15), b"through the NIC");
    peer.set_nonblocking(true).unwrap();
    let mut buf = [0u8; 2048];
    let got = peer.recv(&mut buf);
    assert_eq!(
        got.map_err(|e| e.kind()).err(),
        Some(std::io::ErrorKind::WouldBlock),
        "a frame reached the wire's peer"
    );
}

both_modes!(contexts, own_traffic_stays_off_a_point_to_point_wire);

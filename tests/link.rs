//! The port's link: when the wire goes down the port reports PORT_ERR and
//! QUERY_PORT shows it down, frames go nowhere (the RC transport keeps
//! retrying); when it comes back, PORT_ACTIVE, and what was in flight
//! completes. In both execution modes.

use std::time::Duration;

use rnic_emu::net::FaultConfig;
use rnic_tests::fabric::Fabric;
use rnic_tests::*;

fn link_down_and_up(mode: ExecMode) {
    let f = Fabric::new(mode, 2, 5);
    let (na, nb) = (&f.nics[0], &f.nics[1]);
    let pa = na.ctx.alloc_pd().unwrap();
    let pb = nb.ctx.alloc_pd().unwrap();
    let (ca, cb) = (na.ctx.create_cq(16).unwrap(), nb.ctx.create_cq(16).unwrap());
    let a = create_qp(&pa, &ca, &ca, cap(4, 1, 0), false);
    let b = create_qp(&pb, &cb, &cb, cap(4, 1, 0), false);
    connect_to(&nb.ctx, &a, b.qp_num(), &Conn::default());
    connect_to(&na.ctx, &b, a.qp_num(), &Conn::default());
    assert_eq!(na.ctx.query_port(1).unwrap().state, PortState::Active);
    // The cable is pulled.
    na.faults.set(FaultConfig {
        link_down: true,
        ..FaultConfig::default()
    });
    let ev = expect_event(&na.ctx);
    assert_eq!((ev.event_type, ev.obj), (EventType::PortErr, 1));
    assert_eq!(na.ctx.query_port(1).unwrap().state, PortState::Down);
    // A WRITE goes nowhere meanwhile.
    let src = pa.alloc_mr(64, ALL_ACCESS).unwrap();
    let dst = pb.alloc_mr(64, ALL_ACCESS).unwrap();
    src.write(0, &[5; 64]).unwrap();
    let sg = [src.sge(0, 64).unwrap()];
    a.post_send(&[wr(
        1,
        SendOp::RdmaWrite {
            remote: RemoteAddr {
                addr: dst.addr(),
                rkey: dst.rkey(),
            },
        },
        &sg,
    )])
    .unwrap();
    // Until the WRITE has been sent into the dead link.
    let start = std::time::Instant::now();
    while na.faults.stats().dropped == 0 {
        assert!(start.elapsed() < TIMEOUT, "the WRITE never left");
        f.idle(Duration::from_millis(1));
    }
    let mut wc = [WorkCompletion::default(); 1];
    assert_eq!(ca.poll(&mut wc).unwrap(), 0, "delivered over a dead link");
    assert_eq!(
        nb.ctx.query_port(1).unwrap().state,
        PortState::Active,
        "the other end"
    );
    // Plugged back: PORT_ACTIVE, and the retransmission gets through.
    na.faults.set(FaultConfig::default());
    let ev = expect_event(&na.ctx);
    assert_eq!((ev.event_type, ev.obj), (EventType::PortActive, 1));
    assert_eq!(na.ctx.query_port(1).unwrap().state, PortState::Active);
    // Up to 5 s: virtual milliseconds inline, real ones with the device
    // thread (the retransmit timer is 67 ms either way).
    let mut done = false;
    for _ in 0..5000 {
        if ca.poll(&mut wc).unwrap() == 1 {
            done = true;
            break;
        }
        f.idle(Duration::from_millis(1));
        if mode == ExecMode::Thread {
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    assert!(done, "the WRITE never completed");
    assert_ok(&wc[0], 1, WcOpcode::RdmaWrite);
    let mut got = [0u8; 64];
    dst.read(0, &mut got).unwrap();
    assert_eq!(got, [5; 64]);
    assert_eq!(na.ctx.poll_event(), None);
}

#[test]
fn link_down_and_up_inline() {
    link_down_and_up(ExecMode::Inline);
}

#[test]
fn link_down_and_up_device_thread() {
    link_down_and_up(ExecMode::Thread);
}

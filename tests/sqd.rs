//! The send queue drained (SQD) and send queue error (SQE) states: a QP
//! moved to SQD takes no new send WQE, finishes what is in flight (through
//! retransmission if need be) and reports SQ_DRAINED once if asked, while
//! it still receives; SQD → SQD changes what libibverbs allows there, and
//! SQD → RTS resumes. A UD or UC send error moves the QP to SQE: its send
//! queue is flushed while its receive side goes on, and SQE → RTS resumes.

use std::time::Duration;

use rnic_emu::net::FaultConfig;
use rnic_tests::fabric::Fabric;
use rnic_tests::*;

fn to_sqd(qp: &EQp, notify: bool) -> Result<(), Error> {
    let a = QpAttr {
        qp_state: QpState::Sqd,
        en_sqd_async_notify: notify,
        ..QpAttr::default()
    };
    let mask = if notify {
        qp_attr::STATE | qp_attr::EN_SQD_ASYNC_NOTIFY
    } else {
        qp_attr::STATE
    };
    qp.modify(&a, mask)
}

fn write_to<'a>(wr_id: u64, sg: &'a [Sge], mr: &EMr) -> SendWr<'a> {
    wr(
        wr_id,
        SendOp::RdmaWrite {
            remote: RemoteAddr {
                addr: mr.addr(),
                rkey: mr.rkey(),
            },
        },
        sg,
    )
}

fn sqd_holds_new_work(mode: ExecMode) {
    let p = Pair::new(mode);
    let src = p.mr(4096, ALL_ACCESS);
    let dst = p.mr(4096, ALL_ACCESS);
    src.write(0, &[7; 4096]).unwrap();
    // Nothing in flight: drained at once, and the event comes.
    to_sqd(&p.a, true).unwrap();
    let ev = expect_event(&p.ctx);
    assert_eq!(
        (ev.event_type, ev.obj),
        (EventType::SqDrained, p.a.qp_num())
    );
    let q = p.a.query().unwrap();
    assert_eq!(
        (q.qp_state, q.sq_draining, q.en_sqd_async_notify),
        (QpState::Sqd, false, true)
    );
    // Posted in SQD: queued, not executed.
    let sg = [src.sge(0, 4096).unwrap()];
    p.a.post_send(&[write_to(1, &sg, &dst), write_to(2, &sg, &dst)])
        .unwrap();
    assert_cq_empty(&p.ctx, &p.cq_a);
    let mut got = [0u8; 16];
    dst.read(0, &mut got).unwrap();
    assert_eq!(got, [0; 16], "nothing was written in SQD");
    // SQD still receives: b's WRITE to a's memory lands.
    let from_b = p.mr(64, ALL_ACCESS);
    let landing = p.mr(64, ALL_ACCESS);
    from_b.write(0, &[3; 64]).unwrap();
    let sg_b = [from_b.sge(0, 64).unwrap()];
    p.b.post_send(&[write_to(3, &sg_b, &landing)]).unwrap();
    assert_ok(&poll_one(&p.cq_b), 3, WcOpcode::RdmaWrite);
    let mut got = [0u8; 64];
    landing.read(0, &mut got).unwrap();
    assert_eq!(got, [3; 64]);
    // SQD -> SQD: attributes libibverbs allows there; others refused.
    let retry = QpAttr {
        qp_state: QpState::Sqd,
        retry_cnt: 5,
        timeout: 12,
        ..QpAttr::default()
    };
    p.a.modify(
        &retry,
        qp_attr::STATE | qp_attr::RETRY_CNT | qp_attr::TIMEOUT,
    )
    .unwrap();
    let e =
        p.a.modify(
            &QpAttr {
                qp_state: QpState::Sqd,
                path_mtu: Some(Mtu::Mtu512),
                ..QpAttr::default()
            },
            qp_attr::STATE | qp_attr::PATH_MTU,
        )
        .unwrap_err();
    assert!(
        e.to_string().contains("does not allow attributes PATH_MTU"),
        "{e}"
    );
    let q = p.a.query().unwrap();
    assert_eq!((q.retry_cnt, q.timeout), (5, 12));
    // SQD -> RTS: the held WQEs run.
    set_state(&p.a, QpState::Rts).unwrap();
    let wc = poll_n(&p.cq_a, 2);
    assert_ok(&wc[0], 1, WcOpcode::RdmaWrite);
    assert_ok(&wc[1], 2, WcOpcode::RdmaWrite);
    let mut all = vec![0u8; 4096];
    dst.read(0, &mut all).unwrap();
    assert!(all.iter().all(|&b| b == 7), "the held WRITEs landed");
    // Transitions SQD does not have.
    assert!(to_sqd(&p.b, false).is_ok());
    let e = set_state(&p.b, QpState::Rtr).unwrap_err();
    assert!(
        e.to_string()
            .contains("illegal QP state transition Sqd -> Rtr"),
        "{e}"
    );
    p.assert_quiet();
}

#[test]
fn sqd_holds_new_work_inline() {
    sqd_holds_new_work(ExecMode::Inline);
}

#[test]
fn sqd_holds_new_work_device_thread() {
    sqd_holds_new_work(ExecMode::Thread);
}

#[test]
fn draining_waits_for_what_is_in_flight() {
    // Two NICs on a virtual clock: the responder's NIC drops everything
    // for a while, so the WRITE stays in flight.
    let f = Fabric::new(ExecMode::Inline, 2, 9);
    let (na, nb) = (&f.nics[0], &f.nics[1]);
    let pa = na.ctx.alloc_pd().unwrap();
    let pb = nb.ctx.alloc_pd().unwrap();
    let (ca, cb) = (na.ctx.create_cq(16).unwrap(), nb.ctx.create_cq(16).unwrap());
    let a = create_qp(&pa, &ca, &ca, cap(4, 1, 0), false);
    let b = create_qp(&pb, &cb, &cb, cap(4, 1, 0), false);
    connect_to(&nb.ctx, &a, b.qp_num(), &Conn::default());
    connect_to(&na.ctx, &b, a.qp_num(), &Conn::default());
    let src = pa.alloc_mr(64, ALL_ACCESS).unwrap();
    let dst = pb.alloc_mr(64, ALL_ACCESS).unwrap();
    src.write(0, &[9; 64]).unwrap();
    nb.faults.set(FaultConfig {
        drop: 1.0,
        ..FaultConfig::default()
    });
    let sg = [src.sge(0, 64).unwrap()];
    a.post_send(&[write_to(1, &sg, &dst)]).unwrap();
    f.idle(Duration::from_millis(1));
    to_sqd(&a, true).unwrap();
    assert!(a.query().unwrap().sq_draining, "the WRITE is in flight");
    f.idle(Duration::from_millis(1));
    assert_eq!(na.ctx.poll_event(), None, "not drained yet");
    // The wire comes back: the retransmission (after the 67 ms timeout) is
    // acknowledged, the WQE completes, the queue has drained.
    nb.faults.set(FaultConfig::default());
    let mut wc = [WorkCompletion::default(); 1];
    for _ in 0..2000 {
        if ca.poll(&mut wc).unwrap() == 1 {
            break;
        }
        f.idle(Duration::from_millis(1));
    }
    assert_ok(&wc[0], 1, WcOpcode::RdmaWrite);
    let ev = na.ctx.poll_event().expect("SQ_DRAINED");
    assert_eq!((ev.event_type, ev.obj), (EventType::SqDrained, a.qp_num()));
    assert!(!a.query().unwrap().sq_draining);
    assert!(
        na.ctx
            .query_port_counters(1)
            .unwrap()
            .get(counter::RETRANSMITS)
            > 0
    );
    let mut got = [0u8; 64];
    dst.read(0, &mut got).unwrap();
    assert_eq!(got, [9; 64]);
}

#[test]
fn a_ud_send_error_stops_the_send_queue_only() {
    for mode in [ExecMode::Inline, ExecMode::Thread] {
        let ctx = open(mode);
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(32).unwrap();
        let qp = pd
            .create_qp(&QpInit {
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                cap: cap(8, 1, 0),
                qp_type: QpType::Ud,
                sq_sig_all: false,
            })
            .unwrap();
        let init = QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            qkey: 0x42,
            ..QpAttr::default()
        };
        qp.modify(
            &init,
            qp_attr::STATE | qp_attr::PKEY_INDEX | qp_attr::PORT | qp_attr::QKEY,
        )
        .unwrap();
        set_state(&qp, QpState::Rtr).unwrap();
        qp.modify(
            &QpAttr {
                qp_state: QpState::Rts,
                ..QpAttr::default()
            },
            qp_attr::STATE | qp_attr::SQ_PSN,
        )
        .unwrap();
        let mr = pd.alloc_mr(4096, access::LOCAL_WRITE).unwrap();
        let ah = pd
            .create_ah(&AhAttr {
                dgid: ctx.query_gid(1, 0).unwrap(),
                is_global: true,
                ..AhAttr::default()
            })
            .unwrap();
        let dest = ah.dest(qp.qp_num(), 0x42);
        let send = |wr_id, sg: &[Sge]| {
            qp.post_send(&[SendWr {
                wr_id,
                op: SendOp::UdSend { dest, imm: None },
                payload: Payload::Sgl(sg),
                flags: send_flags::SIGNALED,
            }])
            .unwrap()
        };
        // A bad lkey: LOC_PROT_ERR, the QP in SQE.
        let bad = [Sge {
            addr: mr.addr(),
            length: 8,
            lkey: mr.lkey() ^ 0x100,
        }];
        send(1, &bad);
        let wc = poll_one(&cq);
        assert_eq!((wc.wr_id, wc.status), (1, WcStatus::LocProtErr));
        assert_eq!(qp.state(), QpState::Sqe);
        assert_eq!(query_state(&qp), QpState::Sqe);
        // Sends posted in SQE are flushed.
        let good = [mr.sge(64, 8).unwrap()];
        send(2, &good);
        let wc = poll_one(&cq);
        assert_eq!((wc.wr_id, wc.status), (2, WcStatus::WrFlushErr));
        // The receive side goes on: a receive WQE stays posted.
        let rsg = [mr.sge(1024, 1024).unwrap()];
        qp.post_recv(&[RecvWr {
            wr_id: 50,
            sg_list: &rsg,
        }])
        .unwrap();
        assert_cq_empty(&ctx, &cq);
        // SQE -> RTS, with UD's masks: a send to itself now goes and lands.
        let e = qp
            .modify(
                &QpAttr {
                    qp_state: QpState::Rts,
                    timeout: 3,
                    ..QpAttr::default()
                },
                qp_attr::STATE | qp_attr::TIMEOUT,
            )
            .unwrap_err();
        assert!(
            e.to_string().contains("does not allow attributes TIMEOUT"),
            "{e}"
        );
        set_state(&qp, QpState::Rts).unwrap();
        mr.write(64, b"resumed!").unwrap();
        send(3, &good);
        let wc = poll_n(&cq, 2);
        let ids: Vec<_> = wc.iter().map(|w| (w.wr_id, w.status)).collect();
        assert!(
            ids.contains(&(3, WcStatus::Success)) && ids.contains(&(50, WcStatus::Success)),
            "{ids:?}"
        );
        let mut got = [0u8; 8];
        mr.read(1024 + GRH_LEN, &mut got).unwrap();
        assert_eq!(&got, b"resumed!");
    }
}

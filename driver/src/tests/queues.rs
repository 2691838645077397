//! The QP state machine, posting, queue accounting, completions and
//! events, each QP connected to itself over the model's loopback wire.

use std::string::ToString;
use std::vec::Vec;

use rnic_hw_regs::eqe::EventType;
use rnic_verbs::{access, qp_attr, Mtu, QpState, WcOpcode, WcStatus};

use super::*;
use crate::{send_flags, wc_flags, ErrorKind, RecvWr, RemoteAddr};

/// `QpAttr` changing the state only.
fn state(s: QpState) -> QpAttr {
    QpAttr {
        qp_state: s,
        ..QpAttr::default()
    }
}

#[test]
fn qp_modify_checks_masks_and_values() {
    let (ctx, rig) = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8).unwrap();
    let q = qp(&pd, &cq, cap(4, 4));
    let port = ctx.query_port(1).unwrap();
    assert_eq!(q.state(), QpState::Reset);
    let err = |a: &QpAttr, m: u32| q.modify(a, m).unwrap_err();

    let e = err(&init_attr(), INIT_MASK & !qp_attr::PORT);
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(e.to_string().contains("requires attributes PORT"), "{e}");
    let e = err(&init_attr(), INIT_MASK | qp_attr::SQ_PSN);
    assert!(
        e.to_string().contains("does not allow attributes SQ_PSN"),
        "{e}"
    );
    assert!(err(&init_attr(), INIT_MASK | 1 << 25)
        .to_string()
        .contains("unknown"));
    let e = err(&rts_attr(), RTS_MASK);
    assert!(e.to_string().contains("illegal"), "{e}");
    let a = QpAttr {
        port_num: 2,
        ..init_attr()
    };
    assert!(err(&a, INIT_MASK).to_string().contains("port_num 2"));
    let a = QpAttr {
        qp_access_flags: access::LOCAL_WRITE,
        ..init_attr()
    };
    assert_eq!(err(&a, INIT_MASK).kind(), ErrorKind::InvalidArgument);
    let a = QpAttr {
        pkey_index: port.pkey_tbl_len,
        ..init_attr()
    };
    assert_eq!(err(&a, INIT_MASK).kind(), ErrorKind::InvalidArgument);
    assert_eq!(rig.count("MODIFY_QP"), 0, "refused by the driver");

    q.modify(&init_attr(), INIT_MASK).unwrap();
    assert_eq!(q.state(), QpState::Init);
    let dest = q.qp_num();
    let rtr = rtr_attr(&ctx, dest);
    let bad_rtr = [
        QpAttr {
            path_mtu: None,
            ..rtr
        },
        QpAttr {
            dest_qp_num: 1 << 24,
            ..rtr
        },
        QpAttr {
            rq_psn: 1 << 24,
            ..rtr
        },
        QpAttr {
            max_dest_rd_atomic: 17,
            ..rtr
        },
        QpAttr {
            min_rnr_timer: 32,
            ..rtr
        },
    ];
    for a in &bad_rtr {
        assert_eq!(err(a, RTR_MASK).kind(), ErrorKind::InvalidArgument, "{a:?}");
    }
    let mut a = rtr;
    a.ah_attr.is_global = false;
    assert!(err(&a, RTR_MASK).to_string().contains("GRH"));
    a.ah_attr.is_global = true;
    a.ah_attr.sgid_index = port.gid_tbl_len as u8;
    assert!(err(&a, RTR_MASK).to_string().contains("sgid_index"));
    q.modify(&rtr, RTR_MASK).unwrap();
    for a in [
        QpAttr {
            retry_cnt: 8,
            ..rts_attr()
        },
        QpAttr {
            rnr_retry: 8,
            ..rts_attr()
        },
        QpAttr {
            sq_psn: 1 << 24,
            ..rts_attr()
        },
        QpAttr {
            timeout: 32,
            ..rts_attr()
        },
        QpAttr {
            max_rd_atomic: 17,
            ..rts_attr()
        },
    ] {
        assert_eq!(
            err(&a, RTS_MASK).kind(),
            ErrorKind::InvalidArgument,
            "{a:?}"
        );
    }
    q.modify(&rts_attr(), RTS_MASK).unwrap();
    assert_eq!(rig.count("MODIFY_QP"), 3, "one per transition taken");
    // Without STATE the QP stays in RTS: RTS -> RTS allows MIN_RNR_TIMER.
    q.modify(
        &QpAttr {
            min_rnr_timer: 3,
            ..QpAttr::default()
        },
        qp_attr::MIN_RNR_TIMER,
    )
    .unwrap();
    // What the device reports.
    let got = q.query().unwrap();
    assert_eq!(got.qp_state, QpState::Rts);
    assert_eq!(
        (got.dest_qp_num, got.sq_psn, got.port_num),
        (dest, 0x12_3456, 1)
    );
    assert_eq!(got.path_mtu, Some(Mtu::Mtu1024));
    assert_eq!(got.min_rnr_timer, 3);
    assert_eq!(got.ah_attr.port_num, 1, "AV port defaults to the QP's port");
    assert_eq!(got.cap, q.cap());
    // CUR_STATE must be legal for the transition it names.
    let a = QpAttr {
        cur_qp_state: QpState::Init,
        ..rts_attr()
    };
    assert!(err(&a, qp_attr::STATE | qp_attr::CUR_STATE)
        .to_string()
        .contains("illegal"));
    q.modify(&state(QpState::Err), qp_attr::STATE).unwrap();
    assert_eq!(q.state(), QpState::Err);
    assert_eq!(q.query().unwrap().qp_state, QpState::Err);
}

#[test]
fn posting_depends_on_state() {
    let (ctx, _rig) = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8).unwrap();
    let q = qp(&pd, &cq, cap(4, 4));
    let mr = pd.alloc_mr(64, access::LOCAL_WRITE).unwrap();
    let sgl = [mr.sge(0, 64).unwrap()];
    let recv = [RecvWr {
        wr_id: 1,
        sg_list: &sgl,
    }];
    assert_eq!(q.post_recv(&recv).unwrap_err().index, 0, "RESET");
    assert_eq!(q.post_send(&[inline_send(1, 0)]).unwrap_err().index, 0);
    q.modify(&init_attr(), INIT_MASK).unwrap();
    q.post_recv(&recv).unwrap();
    let e = q.post_send(&[inline_send(1, 0)]).unwrap_err();
    assert_eq!(e.error.kind(), ErrorKind::InvalidArgument, "INIT");
    q.modify(&rtr_attr(&ctx, q.qp_num()), RTR_MASK).unwrap();
    assert!(q.post_send(&[inline_send(1, 0)]).is_err(), "RTR");
    q.modify(&rts_attr(), RTS_MASK).unwrap();
    q.post_send(&[inline_send(1, send_flags::SIGNALED)])
        .unwrap();
    let wc = poll_all(&cq);
    assert_eq!(wc.len(), 2, "the receive and the send: {wc:?}");
    let mut got = [0u8; 5];
    mr.read(0, &mut got).unwrap();
    assert_eq!(&got, b"hello");
    // In ERR, requests are taken and flushed.
    q.modify(&state(QpState::Err), qp_attr::STATE).unwrap();
    q.post_send(&[inline_send(2, send_flags::SIGNALED)])
        .unwrap();
    q.post_recv(&recv).unwrap();
    let wc = poll_all(&cq);
    assert_eq!(wc.len(), 2, "{wc:?}");
    assert!(wc.iter().all(|w| w.status == WcStatus::WrFlushErr));
}

#[test]
fn post_send_batch_rings_once_and_stops_at_bad_wr() {
    let (ctx, rig) = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8).unwrap();
    let q = qp(&pd, &cq, cap(8, 4));
    to_rts(&ctx, &q);
    let mr = pd.alloc_mr(4096, access::LOCAL_WRITE).unwrap();
    let three = [mr.sge(0, 8).unwrap(); 3];
    let one = [mr.sge(0, 8).unwrap()];
    let wrs = [
        inline_send(10, 0),
        SendWr {
            wr_id: 11,
            op: SendOp::RdmaWrite {
                remote: RemoteAddr {
                    addr: 0x1000,
                    rkey: 7,
                },
            },
            payload: Payload::Sgl(&one),
            flags: send_flags::SIGNALED,
        },
        SendWr {
            wr_id: 12,
            op: SendOp::Send,
            payload: Payload::Sgl(&three),
            flags: 0,
        },
        inline_send(13, 0),
    ];
    let before = rig.doorbells("SQ").len();
    let e = q.post_send(&wrs).unwrap_err();
    assert_eq!(e.index, 2, "max_send_sge is 2");
    assert_eq!(e.error.kind(), ErrorKind::InvalidArgument);
    let dbs = rig.doorbells("SQ");
    assert_eq!(dbs.len(), before + 1, "one doorbell per call");
    let db = &dbs[before];
    assert_eq!(field(db, "qpn"), q.qp_num().to_string());
    assert_eq!(field(db, "pi"), "2");
    // The WQEs the device was handed, as the trace read them.
    let wqes = rig.events("wqe");
    let w: Vec<_> = wqes[wqes.len() - 2..].iter().collect();
    assert_eq!(
        w.iter().map(|e| field(e, "wr_id")).collect::<Vec<_>>(),
        ["10", "11"]
    );
    assert_eq!(
        (field(w[0], "idx"), field(w[1], "idx")),
        ("0".into(), "1".into())
    );
    assert!(
        w[0].text.contains("SEND inline") && !w[0].text.contains("signaled"),
        "{}",
        w[0].text
    );
    assert!(w[1].text.contains("RDMA_WRITE signaled"), "{}", w[1].text);
    assert!(w[1].text.contains("rkey 0x7"), "{}", w[1].text);

    // An empty post rings nothing.
    let rung = rig.events("doorbell").len() + rig.events("blueflame").len();
    q.post_send(&[]).unwrap();
    assert_eq!(
        rig.events("doorbell").len() + rig.events("blueflame").len(),
        rung
    );
    let e = q
        .post_send(&[SendWr {
            flags: 1 << 3,
            ..inline_send(1, 0)
        }])
        .unwrap_err();
    assert!(e.to_string().contains("unknown send flags"), "{e}");
}

/// Unsignaled WQEs retire with the next signaled one's completion, and
/// the CQ's consumer index is published: more than twice the CQ's
/// entries pass through it without overflowing it.
#[test]
fn send_queue_accounting_retires_on_completions() {
    let (ctx, _rig) = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let mr = pd.alloc_mr(512, access::LOCAL_WRITE).unwrap();
    let q = qp(&pd, &cq, cap(4, 4));
    assert_eq!(q.cap().max_send_wr, 4);
    to_rts(&ctx, &q);
    let qpn = q.qp_num();
    let rounds = (2 * u64::from(cq.cqe())).div_ceil(5) + 1;
    for round in 0..rounds {
        post_recvs(&q, &mr, 0..4);
        let mut batch: Vec<_> = (0..5).map(|i| inline_send(10 * round + i, 0)).collect();
        batch[3].flags = send_flags::SIGNALED;
        let e = q.post_send(&batch).unwrap_err();
        assert_eq!((e.index, e.error.kind()), (4, ErrorKind::NoMemory), "full");
        assert_eq!(q.post_send(&batch[4..]).unwrap_err().index, 0);
        let wc = poll_all(&cq);
        assert_eq!(wc.len(), 5, "round {round}: {wc:?}");
        let sends: Vec<_> = wc.iter().filter(|w| w.opcode == WcOpcode::Send).collect();
        assert_eq!(sends.len(), 1, "only the signaled one completes");
        assert_eq!((sends[0].wr_id, sends[0].qp_num), (10 * round + 3, qpn));
        let recvs: Vec<_> = wc.iter().filter(|w| w.opcode == WcOpcode::Recv).collect();
        assert_eq!(recvs.len(), 4);
        assert!(recvs
            .iter()
            .all(|w| w.byte_len == 5 && w.status == WcStatus::Success));
    }
    assert!(ctx.poll_event().is_none(), "no CQ error");
}

#[test]
fn receive_queue_accounting_and_completion_fields() {
    let (ctx, rig) = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let q = qp(&pd, &cq, cap(4, 2));
    to_rts(&ctx, &q);
    let mr = pd.alloc_mr(64, access::LOCAL_WRITE).unwrap();
    let sgl = [mr.sge(0, 32).unwrap()];
    let two = [mr.sge(0, 8).unwrap(), mr.sge(8, 8).unwrap()];
    let e = q
        .post_recv(&[RecvWr {
            wr_id: 1,
            sg_list: &two,
        }])
        .unwrap_err();
    assert_eq!(
        e.error.kind(),
        ErrorKind::InvalidArgument,
        "max_recv_sge is 1"
    );
    let r = |id| RecvWr {
        wr_id: id,
        sg_list: &sgl,
    };
    let before = rig.doorbells("RQ").len();
    let e = q.post_recv(&[r(1), r(2), r(3)]).unwrap_err();
    assert_eq!((e.index, e.error.kind()), (2, ErrorKind::NoMemory));
    let dbs = rig.doorbells("RQ");
    assert_eq!(dbs.len(), before + 1, "one doorbell for the two taken");
    assert_eq!(field(&dbs[before], "pi"), "2");
    q.post_send(&[SendWr {
        wr_id: 9,
        op: SendOp::SendWithImm { imm: [1, 2, 3, 4] },
        payload: Payload::Inline(b"hello"),
        flags: 0,
    }])
    .unwrap();
    let wc = poll_all(&cq);
    assert_eq!(wc.len(), 1, "{wc:?}");
    assert_eq!(
        (wc[0].wr_id, wc[0].opcode, wc[0].byte_len, wc[0].qp_num),
        (1, WcOpcode::Recv, 5, q.qp_num())
    );
    assert_eq!(wc[0].imm_data, Some([1, 2, 3, 4]));
    assert_eq!(wc[0].flags & wc_flags::WITH_IMM, wc_flags::WITH_IMM);
    q.post_recv(&[r(3)]).unwrap();
    assert!(q.post_recv(&[r(4)]).is_err(), "2 and 3 are posted");
}

#[test]
fn error_completion_moves_qp_to_err() {
    let (ctx, _rig) = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let mr = pd.alloc_mr(64, access::LOCAL_WRITE).unwrap();
    // Two QPs connected to each other: the responder's violation takes the
    // responder to ERR, its NAK the requester.
    let (a, b) = (qp(&pd, &cq, cap(4, 4)), qp(&pd, &cq, cap(4, 4)));
    for (q, dest) in [(&a, b.qp_num()), (&b, a.qp_num())] {
        q.modify(&init_attr(), INIT_MASK).unwrap();
        q.modify(&rtr_attr(&ctx, dest), RTR_MASK).unwrap();
        q.modify(&rts_attr(), RTS_MASK).unwrap();
    }
    // An rkey nobody has.
    let sgl = [mr.sge(0, 8).unwrap()];
    a.post_send(&[SendWr {
        wr_id: 1,
        op: SendOp::RdmaWrite {
            remote: RemoteAddr {
                addr: mr.addr(),
                rkey: mr.rkey() ^ 0xff00,
            },
        },
        payload: Payload::Sgl(&sgl),
        flags: send_flags::SIGNALED,
    }])
    .unwrap();
    let wc = poll_all(&cq);
    assert_eq!(
        (wc.len(), wc[0].wr_id, wc[0].qp_num),
        (1, 1, a.qp_num()),
        "{wc:?}"
    );
    assert_eq!(wc[0].status, WcStatus::RemAccessErr);
    assert_eq!(a.state(), QpState::Err);
    // Taken, and flushed.
    a.post_send(&[inline_send(2, send_flags::SIGNALED)])
        .unwrap();
    let wc = poll_all(&cq);
    assert_eq!((wc[0].wr_id, wc[0].status), (2, WcStatus::WrFlushErr));
}

/// RESET removes the QP's completions from its CQ, others' stay, and the
/// QP's queues start again from index 0 (the device would not find its
/// WQEs otherwise); the CQ's ring wraps around the cleaned entries.
#[test]
fn reset_removes_the_qps_completions_and_restarts_queues() {
    let (ctx, _rig) = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8).unwrap();
    let mr = pd.alloc_mr(512, access::LOCAL_WRITE).unwrap();
    let a = qp(&pd, &cq, cap(4, 4));
    let b = qp(&pd, &cq, cap(4, 4));
    to_rts(&ctx, &a);
    to_rts(&ctx, &b);
    // Four CQEs per turn: the ring wraps around at least twice.
    for i in 0..u64::from(cq.cqe()) / 2 + 2 {
        send_to_self(&a, &mr, 100 + i);
        send_to_self(&b, &mr, 200 + i);
        // Four completions wait in the CQ; B's go with its reset.
        b.modify(&state(QpState::Reset), qp_attr::STATE).unwrap();
        assert_eq!(b.state(), QpState::Reset);
        let wc = poll_all(&cq);
        let ids: Vec<u64> = wc.iter().map(|w| w.wr_id).collect();
        assert_eq!(ids, [100 + i; 2], "iteration {i}: {wc:?}");
        assert!(wc.iter().all(|w| w.qp_num == a.qp_num()));
        to_rts(&ctx, &b);
    }
    // B's queues start from 0 after each reset, where the device looks.
    send_to_self(&b, &mr, 300);
    let wc = poll_all(&cq);
    assert_eq!(wc.len(), 2, "{wc:?}");
    assert!(wc.iter().all(|w| w.qp_num == b.qp_num() && w.wr_id == 300));
    assert!(ctx.poll_event().is_none(), "no CQ error");
}

#[test]
fn events_update_arm_sequence_and_qp_state() {
    let (ctx, rig) = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8).unwrap();
    let mr = pd.alloc_mr(512, access::LOCAL_WRITE).unwrap();
    let q = qp(&pd, &cq, cap(4, 4));
    to_rts(&ctx, &q);
    assert!(ctx.poll_event().is_none());
    cq.arm(false);
    let db = rig.doorbells("CQ").pop().unwrap();
    assert_eq!(field(&db, "cqn"), cq.cq_num().to_string());
    assert!(db.text.contains("cmd 0 sn 0"), "{}", db.text);
    send_to_self(&q, &mr, 1);
    let ev = ctx.poll_event().expect("a completion event");
    assert_eq!(
        (ev.event_type, ev.obj),
        (EventType::Completion, cq.cq_num())
    );
    assert!(ctx.poll_event().is_none(), "one event per arm");
    assert_eq!(poll_all(&cq).len(), 2);
    cq.arm(true);
    let db = rig.doorbells("CQ").pop().unwrap();
    assert!(
        db.text.contains("cmd 1 sn 1"),
        "the next arm, solicited: {}",
        db.text
    );

    // A receive CQ that overflows: the CQ in error, and the QP that
    // could not complete into it fatal.
    let small = ctx.create_cq(1).unwrap();
    assert!(small.cqe() < 8, "eight receive completions overflow it");
    let big = ctx.create_cq(64).unwrap();
    let f = pd
        .create_qp(&init(&big, &small, cap(8, 8)))
        .expect("create_qp");
    to_rts(&ctx, &f);
    post_recvs(&f, &mr, 0..8);
    let eight: Vec<_> = (0..8).map(|i| inline_send(i, 0)).collect();
    f.post_send(&eight).unwrap();
    let mut seen = Vec::new();
    while let Some(ev) = ctx.wait_event(10_000_000).unwrap() {
        seen.push((ev.event_type, ev.obj));
    }
    assert!(
        seen.contains(&(EventType::CqError, small.cq_num())),
        "{seen:?}"
    );
    assert!(seen.contains(&(EventType::QpFatal, f.qp_num())), "{seen:?}");
    assert_eq!(f.state(), QpState::Err);
    assert_eq!(q.state(), QpState::Rts, "the other QP is untouched");
}

//! Completion events and the event queue: one `Completion` event per arm,
//! solicited-only arms, arms that fire at once for completions already
//! waiting, the event queue wrapping around, and CQ overrun reporting.

use rnic_tests::*;

/// Sends one message from `a` to `b` (whose receive is posted here) with
/// `flags`, and waits for both completions.
fn exchange(p: &Pair, mr_a: &EMr, mr_b: &EMr, id: u64, flags: u32) {
    post_recv(&p.b, recv(id, &[sge(mr_b, 0, 64)]));
    post_send(
        &p.a,
        SendWr {
            flags,
            ..send(id, &[sge(mr_a, 0, 16)])
        },
    );
    if flags & send_flags::SIGNALED != 0 {
        assert_ok(&poll_one(&p.cq_a), id, WcOpcode::Send);
    }
    assert_ok(&poll_one(&p.cq_b), id, WcOpcode::Recv);
}

#[track_caller]
fn assert_completion_event(ev: AsyncEvent, cq: &ECq) {
    assert_eq!(
        (ev.event_type, ev.obj, ev.syndrome),
        (EventType::Completion, cq.cq_num(), 0),
        "{ev:?}"
    );
}

/// An armed CQ raises one Completion event for the next completion, and
/// none for later ones until it is armed again.
fn one_event_per_arm(mode: ExecMode) {
    let p = Pair::new(mode);
    let mr_a = p.mr(64, ALL_ACCESS);
    let mr_b = p.mr(64, ALL_ACCESS);
    // Not armed: completions raise no event.
    exchange(&p, &mr_a, &mr_b, 0, send_flags::SIGNALED);
    assert_no_event(&p.ctx);
    for round in 1..=5 {
        p.cq_b.arm(false);
        assert_no_event(&p.ctx);
        exchange(&p, &mr_a, &mr_b, round * 10, send_flags::SIGNALED);
        assert_completion_event(expect_event(&p.ctx), &p.cq_b);
        // The arm is used up.
        exchange(&p, &mr_a, &mr_b, round * 10 + 1, send_flags::SIGNALED);
        exchange(&p, &mr_a, &mr_b, round * 10 + 2, 0);
        assert_no_event(&p.ctx);
    }
    // Both CQs armed: one event each.
    p.cq_a.arm(false);
    p.cq_b.arm(false);
    exchange(&p, &mr_a, &mr_b, 99, send_flags::SIGNALED);
    let mut evs = [expect_event(&p.ctx), expect_event(&p.ctx)];
    evs.sort_by_key(|e| e.obj);
    let (first, second) = if p.cq_a.cq_num() < p.cq_b.cq_num() {
        (&p.cq_a, &p.cq_b)
    } else {
        (&p.cq_b, &p.cq_a)
    };
    assert_completion_event(evs[0], first);
    assert_completion_event(evs[1], second);
    p.assert_quiet();
}

/// A solicited-only arm ignores unsolicited completions and fires for a
/// solicited one, or for an error completion.
fn solicited_only_arm(mode: ExecMode) {
    let p = Pair::new(mode);
    let mr_a = p.mr(64, ALL_ACCESS);
    let mr_b = p.mr(64, ALL_ACCESS);
    p.cq_b.arm(true);
    exchange(&p, &mr_a, &mr_b, 1, send_flags::SIGNALED);
    exchange(&p, &mr_a, &mr_b, 2, 0);
    assert_no_event(&p.ctx);
    exchange(
        &p,
        &mr_a,
        &mr_b,
        3,
        send_flags::SIGNALED | send_flags::SOLICITED,
    );
    assert_completion_event(expect_event(&p.ctx), &p.cq_b);
    exchange(
        &p,
        &mr_a,
        &mr_b,
        4,
        send_flags::SIGNALED | send_flags::SOLICITED,
    );
    assert_no_event(&p.ctx);

    // A second arm replaces the first: Next, then Solicited, waits for a
    // solicited completion.
    p.cq_b.arm(false);
    p.cq_b.arm(true);
    exchange(&p, &mr_a, &mr_b, 6, send_flags::SIGNALED);
    assert_no_event(&p.ctx);
    exchange(&p, &mr_a, &mr_b, 7, send_flags::SOLICITED);
    assert_completion_event(expect_event(&p.ctx), &p.cq_b);
    assert_no_event(&p.ctx);

    // An error completion satisfies a solicited arm.
    p.cq_a.arm(true);
    let bad = [Sge {
        lkey: mr_a.lkey() ^ 0x0070_0000,
        ..sge(&mr_a, 0, 8)
    }];
    post_send(&p.a, send(5, &bad));
    assert_err(
        &poll_one(&p.cq_a),
        5,
        WcStatus::LocProtErr,
        Syndrome::BadLkey,
    );
    assert_completion_event(expect_event(&p.ctx), &p.cq_a);
    p.assert_quiet();
}

/// Arming a CQ that already holds unpolled completions fires at once (so
/// arming after an empty poll never misses one); once they are polled an
/// arm waits for the next.
fn arm_fires_for_waiting_completions(mode: ExecMode) {
    let p = Pair::new(mode);
    let mr_a = p.mr(64, ALL_ACCESS);
    let mr_b = p.mr(64, ALL_ACCESS);
    post_recv(&p.b, recv(1, &[sge(&mr_b, 0, 64)]));
    post_send(&p.a, send(1, &[sge(&mr_a, 0, 8)]));
    assert_ok(&poll_one(&p.cq_a), 1, WcOpcode::Send);
    // b's completion is waiting, unpolled.
    settle(&p.ctx);
    p.cq_b.arm(false);
    assert_completion_event(expect_event(&p.ctx), &p.cq_b);
    // A solicited arm does not fire for the unsolicited one waiting.
    p.cq_b.arm(true);
    assert_no_event(&p.ctx);
    assert_ok(&poll_one(&p.cq_b), 1, WcOpcode::Recv);
    // Polled: a new Next arm waits.
    p.cq_b.arm(false);
    assert_no_event(&p.ctx);
    exchange(&p, &mr_a, &mr_b, 2, send_flags::SIGNALED);
    assert_completion_event(expect_event(&p.ctx), &p.cq_b);

    // A waiting solicited completion fires a solicited arm at once.
    post_recv(&p.b, recv(3, &[sge(&mr_b, 0, 64)]));
    post_send(
        &p.a,
        SendWr {
            flags: send_flags::SIGNALED | send_flags::SOLICITED,
            ..send(3, &[sge(&mr_a, 0, 8)])
        },
    );
    assert_ok(&poll_one(&p.cq_a), 3, WcOpcode::Send);
    settle(&p.ctx);
    p.cq_b.arm(true);
    assert_completion_event(expect_event(&p.ctx), &p.cq_b);
    let r = poll_one(&p.cq_b);
    assert_ok(&r, 3, WcOpcode::Recv);
    assert_ne!(r.flags & wc_flags::SOLICITED, 0);
    p.assert_quiet();
}

/// `wait_event` returns `None` when nothing happens within its timeout,
/// and the event when one arrives.
fn wait_event_returns_none_or_the_event(mode: ExecMode) {
    let p = Pair::new(mode);
    assert_eq!(p.ctx.wait_event(1_000_000).expect("wait_event"), None);
    assert_eq!(p.ctx.poll_event(), None);
    let mr_a = p.mr(64, ALL_ACCESS);
    let mr_b = p.mr(64, ALL_ACCESS);
    p.cq_a.arm(false);
    post_recv(&p.b, recv(1, &[sge(&mr_b, 0, 64)]));
    post_send(&p.a, send(1, &[sge(&mr_a, 0, 8)]));
    let ev = p
        .ctx
        .wait_event(TIMEOUT.as_nanos() as u64)
        .expect("wait_event")
        .expect("an event");
    assert_completion_event(ev, &p.cq_a);
    assert_ok(&poll_one(&p.cq_a), 1, WcOpcode::Send);
    assert_ok(&poll_one(&p.cq_b), 1, WcOpcode::Recv);
    p.assert_quiet();
}

/// Hundreds of arm/complete cycles on two CQs: the 256-entry event queue
/// wraps around several times and every event arrives once, in order.
fn event_queue_wraps(mode: ExecMode) {
    let p = Pair::new(mode);
    let mr_a = p.mr(64, ALL_ACCESS);
    let mr_b = p.mr(64, ALL_ACCESS);
    for i in 0..700u64 {
        p.cq_a.arm(false);
        p.cq_b.arm(false);
        exchange(&p, &mr_a, &mr_b, i, send_flags::SIGNALED);
        let mut evs = [expect_event(&p.ctx), expect_event(&p.ctx)];
        evs.sort_by_key(|e| e.obj);
        let mut want = [p.cq_a.cq_num(), p.cq_b.cq_num()];
        want.sort();
        for (ev, cqn) in evs.iter().zip(want) {
            assert_eq!(
                (ev.event_type, ev.obj),
                (EventType::Completion, cqn),
                "cycle {i}: {ev:?}"
            );
        }
    }
    p.assert_quiet();
}

/// A CQ that overruns enters the error state (CqError event); the QP
/// whose completion was lost moves to ERR with a QpFatal event, the data
/// it received in place; the message whose completion was lost is not
/// acknowledged, so its requester runs out of retries.
fn cq_overrun(mode: ExecMode) {
    let p = Pair::with(
        mode,
        PairOpts {
            cq_size: 2,
            // The unacknowledged SEND fails soon: one retry, 1 ms apart.
            conn_a: Conn {
                timeout: 8,
                retry_cnt: 1,
                ..Conn::default()
            },
            ..PairOpts::default()
        },
    );
    assert_eq!(p.cq_b.cqe(), 2);
    let mr_a = p.mr(64, ALL_ACCESS);
    let mr_b = p.mr(256, ALL_ACCESS);
    for i in 0..3u64 {
        post_recv(&p.b, recv(i, &[sge(&mr_b, i as usize * 64, 64)]));
    }
    for i in 0..3u64 {
        write_mr(&mr_a, 0, &pattern(i, 16));
        post_send(&p.a, send(i, &[sge(&mr_a, 0, 16)]));
        let wc = poll_one(&p.cq_a);
        if i < 2 {
            assert_ok(&wc, i, WcOpcode::Send);
        } else {
            assert_eq!(
                (wc.wr_id, wc.status),
                (2, WcStatus::RetryExcErr),
                "no ACK for the message whose completion was lost"
            );
        }
    }
    let mut evs = [expect_event(&p.ctx), expect_event(&p.ctx)];
    evs.sort_by_key(|e| e.event_type as u8);
    assert_eq!(
        (evs[0].event_type, evs[0].obj, evs[0].syndrome),
        (
            EventType::CqError,
            p.cq_b.cq_num(),
            Syndrome::CqError as u32
        ),
        "{evs:?}"
    );
    assert_eq!(
        (evs[1].event_type, evs[1].obj, evs[1].syndrome),
        (EventType::QpFatal, p.b.qp_num(), Syndrome::CqError as u32),
        "{evs:?}"
    );
    assert_eq!(query_state(&p.b), QpState::Err);
    assert_eq!(query_state(&p.a), QpState::Err);
    // The two completions written before the overrun are still there.
    let r = poll_n(&p.cq_b, 2);
    assert_ok(&r[0], 0, WcOpcode::Recv);
    assert_ok(&r[1], 1, WcOpcode::Recv);
    for i in 0..3u64 {
        assert_eq!(
            read_mr(&mr_b, i as usize * 64, 16),
            pattern(i, 16),
            "message {i}"
        );
    }
    // A CQ in error ignores arms.
    p.cq_b.arm(false);
    p.assert_quiet();
}

/// A connected QP in RTR reports COMM_EST for its first packet, once; a
/// QP already in RTS does not.
fn comm_est(mode: ExecMode) {
    let p = Pair::with(
        mode,
        PairOpts {
            connect: false,
            ..PairOpts::default()
        },
    );
    let c = Conn::default();
    connect(&p.ctx, &p.a, p.b.qp_num(), &c);
    to_init(&p.b, &c).unwrap();
    to_rtr(&p.ctx, &p.b, p.a.qp_num(), &c).unwrap();
    let src = p.mr(64, ALL_ACCESS);
    let dst = p.mr(64, ALL_ACCESS);
    let sg = [src.sge(0, 64).unwrap()];
    let write = |id| {
        wr(
            id,
            SendOp::RdmaWrite {
                remote: RemoteAddr {
                    addr: dst.addr(),
                    rkey: dst.rkey(),
                },
            },
            &sg,
        )
    };
    p.a.post_send(&[write(1)]).unwrap();
    assert_ok(&poll_one(&p.cq_a), 1, WcOpcode::RdmaWrite);
    let ev = expect_event(&p.ctx);
    assert_eq!(
        (ev.event_type, ev.obj, ev.syndrome),
        (EventType::CommEst, p.b.qp_num(), 0)
    );
    p.a.post_send(&[write(2)]).unwrap();
    assert_ok(&poll_one(&p.cq_a), 2, WcOpcode::RdmaWrite);
    assert_no_event(&p.ctx);
    // In RTS, and for the requester, there is none.
    to_rts(&p.b, &c).unwrap();
    let sg_b = [dst.sge(0, 8).unwrap()];
    p.b.post_send(&[wr(
        3,
        SendOp::RdmaWrite {
            remote: RemoteAddr {
                addr: src.addr(),
                rkey: src.rkey(),
            },
        },
        &sg_b,
    )])
    .unwrap();
    assert_ok(&poll_one(&p.cq_b), 3, WcOpcode::RdmaWrite);
    p.assert_quiet();
}

/// Changing the GID table raises GID_CHANGE (obj the port); setting an
/// entry to what it holds does not.
fn gid_change(mode: ExecMode) {
    let ctx = open(mode);
    let gid = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x12, 0x34];
    ctx.set_gid(1, 3, gid, GidType::RoceV2).unwrap();
    let ev = expect_event(&ctx);
    assert_eq!((ev.event_type, ev.obj), (EventType::GidChange, 1));
    assert_eq!(ctx.query_gid(1, 3).unwrap(), gid);
    ctx.set_gid(1, 3, gid, GidType::RoceV2).unwrap();
    assert_no_event(&ctx);
    ctx.set_gid(1, 3, [0; 16], GidType::RoceV2).unwrap();
    let ev = expect_event(&ctx);
    assert_eq!((ev.event_type, ev.obj), (EventType::GidChange, 1));
    assert_eq!(ctx.query_gid(1, 3).unwrap(), [0; 16]);
    // What SET_GID refuses changes nothing and raises nothing.
    assert!(ctx.set_gid(1, 3, gid, GidType::Ib).is_err());
    assert!(ctx.set_gid(2, 0, gid, GidType::RoceV2).is_err());
    assert_no_event(&ctx);
}

/// A device that fails reports DEVICE_FATAL while its event queue works;
/// commands then fail instead of waiting.
fn device_fatal(mode: ExecMode) {
    let dev = EmuDevice::new(EmuConfig::default(), mode);
    let ctx = Ctx::open(dev.hal()).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    // Work outstanding when the device fails: two receives, and a SEND to
    // a QP that does not exist, waiting for its ACK.
    let cq = ctx.create_cq(16).unwrap();
    let qp = create_qp(&pd, &cq, &cq, cap(4, 1, 64), true);
    connect(&ctx, &qp, 0xabcd, &Conn::default());
    let mr = pd.alloc_mr(64, access::LOCAL_WRITE).unwrap();
    post_recv(&qp, recv(1, &[sge(&mr, 0, 64)]));
    post_recv(&qp, recv(2, &[sge(&mr, 0, 64)]));
    post_send(&qp, send(3, &[sge(&mr, 0, 8)]));
    settle(&ctx);
    assert_cq_empty(&ctx, &cq);
    dev.inject_internal_error();
    // None of it waits for work the device will never do.
    let wcs = poll_n(&cq, 3);
    let mut ids: Vec<u64> = wcs.iter().map(|w| w.wr_id).collect();
    ids.sort_unstable();
    assert_eq!(ids, [1, 2, 3]);
    for w in &wcs {
        assert_err(w, w.wr_id, WcStatus::FatalErr, Syndrome::DeviceFatal);
    }
    let ev = expect_event(&ctx);
    assert_eq!(
        (ev.event_type, ev.obj, ev.syndrome),
        (
            EventType::DeviceFatal,
            0,
            rnic_hw_regs::bar0::FatalSyndrome::Internal as u32
        )
    );
    if let Some(ev) = ctx.poll_event() {
        panic!("one DeviceFatal event, then {ev:?}");
    }
    let start = std::time::Instant::now();
    let e = ctx.alloc_pd().err().expect("a command on a fatal device");
    assert!(
        start.elapsed() < std::time::Duration::from_secs(2),
        "it waited"
    );
    assert!(e.to_string().contains("fatal"), "{e}");
}

both_modes!(
    one_event_per_arm,
    solicited_only_arm,
    arm_fires_for_waiting_completions,
    wait_event_returns_none_or_the_event,
    event_queue_wraps,
    cq_overrun,
    comm_est,
    gid_change,
    device_fatal,
);

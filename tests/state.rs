//! The QP state machine: illegal transitions, attribute-mask and value
//! checks (each refused with an `EINVAL` error naming the problem, the QP
//! left in its state), posting rules per state, ERR → RESET → RTS
//! reconnection with traffic flowing again, and QUERY_QP returning what
//! was set.

use rnic_driver::{CmdOpcode, CmdStatus};
use rnic_hw_regs::cmd::{ModifyQpIn, QpAttrs};
use rnic_tests::*;

/// A pair whose QPs are still in RESET.
fn unconnected(mode: ExecMode) -> Pair {
    Pair::with(
        mode,
        PairOpts {
            connect: false,
            ..PairOpts::default()
        },
    )
}

/// Asserts that `modify` fails with `kind`, its message containing every
/// string of `words`, and that the QP stays in `state`.
#[track_caller]
fn refused(
    qp: &EQp,
    (attr, mask): (QpAttr, u32),
    kind: ErrorKind,
    words: &[&str],
    state: QpState,
) -> Error {
    let e = qp
        .modify(&attr, mask)
        .expect_err("the modify should be refused");
    assert_eq!(e.kind(), kind, "{e}");
    for w in words {
        assert!(e.message().contains(w), "{w:?} not in {:?}", e.message());
    }
    assert_eq!(query_state(qp), state, "state after the refused modify");
    assert_eq!(qp.state(), state);
    e
}

fn illegal_transitions(mode: ExecMode) {
    let p = unconnected(mode);
    let c = Conn::default();
    let (qp, dest) = (&p.a, p.b.qp_num());
    let inval = ErrorKind::InvalidArgument;
    let illegal = |from: &'static str, to: &'static str| ["illegal", from, to];

    refused(
        qp,
        rtr_attr(&p.ctx, dest, &c),
        inval,
        &illegal("Reset", "Rtr"),
        QpState::Reset,
    );
    refused(
        qp,
        rts_attr(&c),
        inval,
        &illegal("Reset", "Rts"),
        QpState::Reset,
    );
    to_init(qp, &c).unwrap();
    refused(
        qp,
        rts_attr(&c),
        inval,
        &illegal("Init", "Rts"),
        QpState::Init,
    );
    to_rtr(&p.ctx, qp, dest, &c).unwrap();
    refused(
        qp,
        init_attr(&c),
        inval,
        &illegal("Rtr", "Init"),
        QpState::Rtr,
    );
    to_rts(qp, &c).unwrap();
    refused(
        qp,
        init_attr(&c),
        inval,
        &illegal("Rts", "Init"),
        QpState::Rts,
    );
    refused(
        qp,
        rtr_attr(&p.ctx, dest, &c),
        inval,
        &illegal("Rts", "Rtr"),
        QpState::Rts,
    );
    // ERR leads only to RESET (or ERR).
    set_state(qp, QpState::Err).unwrap();
    refused(
        qp,
        rts_attr(&c),
        inval,
        &illegal("Err", "Rts"),
        QpState::Err,
    );
    refused(
        qp,
        init_attr(&c),
        inval,
        &illegal("Err", "Init"),
        QpState::Err,
    );
    set_state(qp, QpState::Err).expect("ERR -> ERR");
    set_state(qp, QpState::Reset).expect("ERR -> RESET");
    set_state(qp, QpState::Reset).expect("RESET -> RESET");
    assert_eq!(query_state(qp), QpState::Reset);
}

fn attribute_mask_rules(mode: ExecMode) {
    let p = unconnected(mode);
    let c = Conn::default();
    let (qp, dest) = (&p.a, p.b.qp_num());
    let inval = ErrorKind::InvalidArgument;
    let without = |(a, m): (QpAttr, u32), bit: u32| (a, m & !bit);
    let with = |(a, m): (QpAttr, u32), bit: u32| (a, m | bit);

    // Required attributes missing.
    for (bit, name) in [
        (qp_attr::ACCESS_FLAGS, "ACCESS_FLAGS"),
        (qp_attr::PORT, "PORT"),
        (qp_attr::PKEY_INDEX, "PKEY_INDEX"),
    ] {
        refused(
            qp,
            without(init_attr(&c), bit),
            inval,
            &["requires", name],
            QpState::Reset,
        );
    }
    // Attributes the transition does not allow, and unknown mask bits.
    refused(
        qp,
        with(init_attr(&c), qp_attr::DEST_QPN),
        inval,
        &["does not allow", "DEST_QPN"],
        QpState::Reset,
    );
    refused(
        qp,
        with(init_attr(&c), qp_attr::CAP),
        inval,
        &["does not allow", "CAP"],
        QpState::Reset,
    );
    refused(
        qp,
        with(init_attr(&c), 1 << 25),
        inval,
        &["unknown"],
        QpState::Reset,
    );
    to_init(qp, &c).unwrap();
    for (bit, name) in [
        (qp_attr::DEST_QPN, "DEST_QPN"),
        (qp_attr::AV, "AV"),
        (qp_attr::PATH_MTU, "PATH_MTU"),
        (qp_attr::MIN_RNR_TIMER, "MIN_RNR_TIMER"),
    ] {
        refused(
            qp,
            without(rtr_attr(&p.ctx, dest, &c), bit),
            inval,
            &["requires", name],
            QpState::Init,
        );
    }
    refused(
        qp,
        with(rtr_attr(&p.ctx, dest, &c), qp_attr::SQ_PSN),
        inval,
        &["does not allow", "SQ_PSN"],
        QpState::Init,
    );
    to_rtr(&p.ctx, qp, dest, &c).unwrap();
    // Without STATE the target is the current state: RTR -> RTR is no
    // transition.
    let (a, _) = init_attr(&c);
    refused(
        qp,
        (a, qp_attr::ACCESS_FLAGS),
        inval,
        &["illegal", "Rtr -> Rtr"],
        QpState::Rtr,
    );
    refused(
        qp,
        without(rts_attr(&c), qp_attr::RNR_RETRY),
        inval,
        &["requires", "RNR_RETRY"],
        QpState::Rtr,
    );
    refused(
        qp,
        with(rts_attr(&c), qp_attr::PATH_MTU),
        inval,
        &["does not allow", "PATH_MTU"],
        QpState::Rtr,
    );
    // Alternate paths are optional in the IBA table but not implemented.
    refused(
        qp,
        with(rts_attr(&c), qp_attr::ALT_PATH),
        ErrorKind::NotSupported,
        &["alternate"],
        QpState::Rtr,
    );
    to_rts(qp, &c).unwrap();
    // To ERR and RESET nothing but STATE is allowed.
    let (mut a, _) = init_attr(&c);
    a.qp_state = QpState::Err;
    refused(
        qp,
        (a, qp_attr::STATE | qp_attr::PORT),
        inval,
        &["does not allow", "PORT"],
        QpState::Rts,
    );
}

fn attribute_value_checks(mode: ExecMode) {
    let p = unconnected(mode);
    let c = Conn::default();
    let (qp, dest) = (&p.a, p.b.qp_num());
    let inval = ErrorKind::InvalidArgument;
    let gid_len = p.ctx.query_port(1).unwrap().gid_tbl_len;

    let init = |f: fn(&mut QpAttr)| {
        let (mut a, m) = init_attr(&c);
        f(&mut a);
        (a, m)
    };
    refused(
        qp,
        init(|a| a.port_num = 2),
        inval,
        &["port"],
        QpState::Reset,
    );
    refused(
        qp,
        init(|a| a.port_num = 0),
        inval,
        &["port"],
        QpState::Reset,
    );
    refused(
        qp,
        init(|a| a.pkey_index = 1),
        inval,
        &["pkey_index"],
        QpState::Reset,
    );
    refused(
        qp,
        init(|a| a.qp_access_flags = access::LOCAL_WRITE),
        inval,
        &["qp_access_flags"],
        QpState::Reset,
    );
    to_init(qp, &c).unwrap();

    let rtr = |f: &dyn Fn(&mut QpAttr)| {
        let (mut a, m) = rtr_attr(&p.ctx, dest, &c);
        f(&mut a);
        (a, m)
    };
    refused(
        qp,
        rtr(&|a| a.rq_psn = 1 << 24),
        inval,
        &["rq_psn"],
        QpState::Init,
    );
    refused(
        qp,
        rtr(&|a| a.dest_qp_num = 1 << 24),
        inval,
        &["dest_qp_num"],
        QpState::Init,
    );
    refused(
        qp,
        rtr(&|a| a.path_mtu = None),
        inval,
        &["path_mtu"],
        QpState::Init,
    );
    refused(
        qp,
        rtr(&|a| a.min_rnr_timer = 32),
        inval,
        &["min_rnr_timer"],
        QpState::Init,
    );
    refused(
        qp,
        rtr(&|a| a.ah_attr.port_num = 2),
        inval,
        &["port_num"],
        QpState::Init,
    );
    refused(
        qp,
        rtr(&|a| a.ah_attr.is_global = false),
        inval,
        &["is_global"],
        QpState::Init,
    );
    refused(
        qp,
        rtr(&|a| a.ah_attr.sgid_index = gid_len as u8),
        inval,
        &["sgid_index"],
        QpState::Init,
    );
    refused(
        qp,
        rtr(&|a| a.max_dest_rd_atomic = 17),
        inval,
        &["max_dest_rd_atomic"],
        QpState::Init,
    );
    to_rtr(&p.ctx, qp, dest, &c).unwrap();

    let rts = |f: fn(&mut QpAttr)| {
        let (mut a, m) = rts_attr(&c);
        f(&mut a);
        (a, m)
    };
    refused(
        qp,
        rts(|a| a.retry_cnt = 8),
        inval,
        &["retry_cnt"],
        QpState::Rtr,
    );
    refused(
        qp,
        rts(|a| a.rnr_retry = 8),
        inval,
        &["rnr_retry"],
        QpState::Rtr,
    );
    refused(
        qp,
        rts(|a| a.timeout = 32),
        inval,
        &["timeout"],
        QpState::Rtr,
    );
    refused(
        qp,
        rts(|a| a.sq_psn = 1 << 24),
        inval,
        &["sq_psn"],
        QpState::Rtr,
    );
    refused(
        qp,
        rts(|a| a.max_rd_atomic = 17),
        inval,
        &["max_rd_atomic"],
        QpState::Rtr,
    );
    // The largest values are accepted.
    let (mut a, m) = rts_attr(&c);
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.timeout = 31;
    a.sq_psn = (1 << 24) - 1;
    qp.modify(&a, m).expect("largest valid values");
    let q = qp.query().unwrap();
    assert_eq!(
        (q.qp_state, q.retry_cnt, q.rnr_retry, q.timeout, q.sq_psn),
        (QpState::Rts, 7, 7, 31, (1 << 24) - 1)
    );
}

/// CUR_STATE is checked by the device: a claim that does not match the
/// QP's real state is refused with BadState.
fn cur_state_must_match(mode: ExecMode) {
    let p = unconnected(mode);
    let c = Conn::default();
    to_init(&p.a, &c).unwrap();
    to_rtr(&p.ctx, &p.a, p.b.qp_num(), &c).unwrap();
    // "RTS -> RTS" while the QP is in RTR.
    let attr = QpAttr {
        qp_state: QpState::Rts,
        cur_qp_state: QpState::Rts,
        ..QpAttr::default()
    };
    let e = refused(
        &p.a,
        (attr, qp_attr::STATE | qp_attr::CUR_STATE),
        ErrorKind::InvalidArgument,
        &["ModifyQp"],
        QpState::Rtr,
    );
    let cmd = rnic_driver::CmdFailure::of(&e).expect("refused by the device");
    assert_eq!(
        (cmd.opcode, cmd.status),
        (CmdOpcode::ModifyQp, CmdStatus::BadState)
    );
    // The syndrome names the offending input field.
    let field =
        std::mem::offset_of!(ModifyQpIn, attrs) + std::mem::offset_of!(QpAttrs, cur_qp_state);
    assert_eq!(cmd.field_offset(), Some(field as u32));
    // The matching claim is accepted.
    let (mut a, m) = rts_attr(&c);
    a.cur_qp_state = QpState::Rtr;
    p.a.modify(&a, m | qp_attr::CUR_STATE)
        .expect("RTR -> RTS with CUR_STATE");
    assert_eq!(query_state(&p.a), QpState::Rts);
}

/// Sends are refused before RTS, receives in RESET; requests refused are
/// never executed, receives posted in INIT and RTR are used once the QP
/// is connected.
fn posting_rules_per_state(mode: ExecMode) {
    let p = unconnected(mode);
    let c = Conn::default();
    let mr_a = p.mr(256, ALL_ACCESS);
    let mr_b = p.mr(256, ALL_ACCESS);
    write_mr(&mr_a, 0, b"0123456789");
    let refused_send = |qp: &EQp, id: u64| {
        let e = qp
            .post_send(&[send(id, &[sge(&mr_a, 0, 4)])])
            .expect_err("post_send before RTS");
        assert_eq!(e.index, 0);
        assert_eq!(e.error.kind(), ErrorKind::InvalidArgument, "{e}");
    };

    refused_send(&p.b, 90);
    let e =
        p.b.post_recv(&[recv(1, &[sge(&mr_b, 0, 8)])])
            .expect_err("post_recv in RESET");
    assert_eq!(
        (e.index, e.error.kind()),
        (0, ErrorKind::InvalidArgument),
        "{e}"
    );

    to_init(&p.b, &c).unwrap();
    refused_send(&p.b, 91);
    post_recv(&p.b, recv(2, &[sge(&mr_b, 0, 8)]));
    to_rtr(&p.ctx, &p.b, p.a.qp_num(), &c).unwrap();
    refused_send(&p.b, 92);
    post_recv(&p.b, recv(3, &[sge(&mr_b, 8, 8)]));
    to_rts(&p.b, &c).unwrap();
    connect(&p.ctx, &p.a, p.b.qp_num(), &c);

    p.a.post_send(&[send(10, &[sge(&mr_a, 0, 4)]), send(11, &[sge(&mr_a, 4, 6)])])
        .unwrap();
    let r = poll_n(&p.cq_b, 2);
    assert_ok(&r[0], 2, WcOpcode::Recv);
    assert_ok(&r[1], 3, WcOpcode::Recv);
    assert_eq!(read_mr(&mr_b, 0, 4), b"0123");
    assert_eq!(read_mr(&mr_b, 8, 6), b"456789");
    let s = poll_n(&p.cq_a, 2);
    assert_ok(&s[0], 10, WcOpcode::Send);
    assert_ok(&s[1], 11, WcOpcode::Send);
    // b sends in RTS; the refused 90..92 never ran.
    post_recv(&p.a, recv(20, &[sge(&mr_a, 128, 8)]));
    post_send(&p.b, send(93, &[sge(&mr_b, 0, 4)]));
    assert_ok(&poll_one(&p.cq_b), 93, WcOpcode::Send);
    assert_ok(&poll_one(&p.cq_a), 20, WcOpcode::Recv);
    assert_eq!(read_mr(&mr_a, 128, 4), b"0123");
    p.assert_quiet();
}

/// Moves both QPs of `p` from wherever they are through RESET back to RTS.
fn reconnect(p: &Pair) {
    let c = Conn::default();
    for qp in [&p.a, &p.b] {
        set_state(qp, QpState::Reset).expect("-> RESET");
        assert_eq!(query_state(qp), QpState::Reset);
    }
    connect(&p.ctx, &p.a, p.b.qp_num(), &c);
    connect(&p.ctx, &p.b, p.a.qp_num(), &c);
}

/// Sends `n` messages from `a` to `b` and checks each.
fn traffic(p: &Pair, mr_a: &EMr, mr_b: &EMr, n: u64, seed: u64) {
    for i in 0..n {
        let data = pattern(seed + i, 32);
        write_mr(mr_a, 0, &data);
        post_recv(&p.b, recv(seed + i, &[sge(mr_b, 0, 64)]));
        post_send(&p.a, send(seed + i, &[sge(mr_a, 0, 32)]));
        assert_ok(&poll_one(&p.cq_a), seed + i, WcOpcode::Send);
        let r = poll_one(&p.cq_b);
        assert_ok(&r, seed + i, WcOpcode::Recv);
        assert_eq!(r.byte_len, 32);
        assert_eq!(read_mr(mr_b, 0, 32), data, "message {}", seed + i);
    }
}

/// After an error put both QPs in ERR, RESET → INIT → RTR → RTS brings
/// them back: traffic flows again, through more requests than the queues
/// hold (the rings restarted consistently on both sides). Completions not
/// polled before the reset are discarded with it.
fn reconnect_after_error(mode: ExecMode) {
    let p = Pair::new(mode);
    let mr_a = p.mr(256, ALL_ACCESS);
    let mr_b = p.mr(256, ALL_ACCESS);
    traffic(&p, &mr_a, &mr_b, 5, 0);

    // An rkey error: both QPs to ERR (the responder with an event).
    post_send(&p.a, write(99, &[sge(&mr_a, 0, 8)], mr_b.addr(), 0));
    assert_err(
        &poll_one(&p.cq_a),
        99,
        WcStatus::RemAccessErr,
        Syndrome::RemoteAccess,
    );
    assert_eq!(expect_event(&p.ctx).event_type, EventType::QpAccessErr);
    assert_eq!(
        (query_state(&p.a), query_state(&p.b)),
        (QpState::Err, QpState::Err)
    );
    reconnect(&p);
    traffic(&p, &mr_a, &mr_b, 40, 100);

    // ERR by MODIFY_QP with flush completions left unpolled: the reset
    // takes them out of the CQs.
    for i in 0..3 {
        post_recv(&p.a, recv(500 + i, &[sge(&mr_a, 0, 8)]));
        post_recv(&p.b, recv(600 + i, &[sge(&mr_b, 0, 8)]));
    }
    set_state(&p.a, QpState::Err).unwrap();
    set_state(&p.b, QpState::Err).unwrap();
    reconnect(&p);
    assert_cq_empty(&p.ctx, &p.cq_a);
    assert_cq_empty(&p.ctx, &p.cq_b);
    traffic(&p, &mr_a, &mr_b, 40, 200);
    p.assert_quiet();
}

/// QUERY_QP returns every attribute set, the capacities, and after an
/// RTS → RTS change only the attributes in that mask differ.
fn query_returns_what_was_set(mode: ExecMode) {
    let p = unconnected(mode);
    let gid1 = p.ctx.query_gid(1, 1).unwrap();
    let c = Conn {
        access: access::REMOTE_READ | access::REMOTE_ATOMIC,
        rnr_retry: 3,
        retry_cnt: 5,
        timeout: 20,
        min_rnr_timer: 17,
        mtu: Mtu::Mtu2048,
        sq_psn: 0xab_cdef,
        rq_psn: 0x12_3456,
        max_rd_atomic: 4,
        max_dest_rd_atomic: 8,
    };
    // A new QP: RESET, every attribute 0.
    assert_eq!(
        p.a.query().unwrap(),
        QpAttr {
            cap: p.a.cap(),
            ..QpAttr::default()
        }
    );
    to_init(&p.a, &c).unwrap();
    let (mut rtr, mask) = rtr_attr(&p.ctx, p.b.qp_num(), &c);
    rtr.ah_attr = AhAttr {
        dgid: gid1,
        flow_label: 0x1_2345,
        sgid_index: 1,
        hop_limit: 17,
        traffic_class: 0x20,
        sl: 3,
        dmac: [0x02, 0, 0, 0, 0, 0x01],
        port_num: 1,
        is_global: true,
    };
    p.a.modify(&rtr, mask).unwrap();
    to_rts(&p.a, &c).unwrap();

    let q = p.a.query().unwrap();
    assert_eq!(q.qp_state, QpState::Rts);
    assert_eq!(q.qp_access_flags, c.access);
    assert_eq!(q.port_num, 1);
    assert_eq!(q.pkey_index, 0);
    assert_eq!(q.path_mtu, Some(Mtu::Mtu2048));
    assert_eq!(q.dest_qp_num, p.b.qp_num());
    assert_eq!(q.rq_psn, 0x12_3456);
    assert_eq!(q.sq_psn, 0xab_cdef);
    assert_eq!(q.min_rnr_timer, 17);
    assert_eq!(q.timeout, 20);
    assert_eq!(q.retry_cnt, 5);
    assert_eq!(q.rnr_retry, 3);
    assert_eq!(q.max_rd_atomic, 4);
    assert_eq!(q.max_dest_rd_atomic, 8);
    assert_eq!(q.ah_attr, rtr.ah_attr);
    assert_eq!(q.cap, p.a.cap());
    let want = QpCap {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 4,
        max_recv_sge: 4,
        max_inline_data: 64,
    };
    assert!(
        q.cap.max_send_wr >= want.max_send_wr
            && q.cap.max_recv_wr >= want.max_recv_wr
            && q.cap.max_send_sge >= want.max_send_sge
            && q.cap.max_recv_sge >= want.max_recv_sge
            && q.cap.max_inline_data >= want.max_inline_data,
        "capacities {:?} below the requested {want:?}",
        q.cap
    );

    // RTS -> RTS: only the attributes in the mask change.
    let change = QpAttr {
        qp_state: QpState::Rts,
        qp_access_flags: access::REMOTE_WRITE,
        min_rnr_timer: 5,
        ..QpAttr::default()
    };
    p.a.modify(
        &change,
        qp_attr::STATE | qp_attr::ACCESS_FLAGS | qp_attr::MIN_RNR_TIMER,
    )
    .unwrap();
    let q2 = p.a.query().unwrap();
    assert_eq!(
        q2,
        QpAttr {
            qp_access_flags: access::REMOTE_WRITE,
            min_rnr_timer: 5,
            ..q
        }
    );

    // Without STATE in the mask the QP keeps its state (RTS -> RTS).
    let change = QpAttr {
        qp_access_flags: access::REMOTE_READ,
        ..QpAttr::default()
    };
    p.a.modify(&change, qp_attr::ACCESS_FLAGS)
        .expect("RTS -> RTS without STATE");
    let q3 = p.a.query().unwrap();
    assert_eq!(
        (q3.qp_state, q3.qp_access_flags),
        (QpState::Rts, access::REMOTE_READ)
    );

    // RESET keeps the attributes.
    set_state(&p.a, QpState::Reset).unwrap();
    let q4 = p.a.query().unwrap();
    assert_eq!(
        q4,
        QpAttr {
            qp_state: QpState::Reset,
            cur_qp_state: QpState::Reset,
            ..q3
        }
    );

    // INIT -> INIT changes the access flags of b before it is connected.
    to_init(&p.b, &c).unwrap();
    let (mut a, _) = init_attr(&c);
    a.qp_access_flags = ALL_REMOTE;
    p.b.modify(&a, qp_attr::STATE | qp_attr::ACCESS_FLAGS)
        .unwrap();
    let qb = p.b.query().unwrap();
    assert_eq!(
        (qb.qp_state, qb.qp_access_flags),
        (QpState::Init, ALL_REMOTE)
    );
}

/// Every state can move to ERR and to RESET.
fn err_and_reset_from_every_state(mode: ExecMode) {
    let p = unconnected(mode);
    let c = Conn::default();
    let dest = p.b.qp_num();
    let steps: [&dyn Fn(&EQp); 3] = [
        &|qp| to_init(qp, &c).unwrap(),
        &|qp| to_rtr(&p.ctx, qp, dest, &c).unwrap(),
        &|qp| to_rts(qp, &c).unwrap(),
    ];
    for depth in 0..=3 {
        for target in [QpState::Err, QpState::Reset] {
            set_state(&p.a, QpState::Reset).unwrap();
            for step in &steps[..depth] {
                step(&p.a);
            }
            set_state(&p.a, target).unwrap_or_else(|e| panic!("depth {depth} -> {target:?}: {e}"));
            assert_eq!(query_state(&p.a), target);
        }
    }
    p.assert_quiet();
}

/// Two QPs completing into one CQ: moving one to RESET removes its
/// unpolled completions from the CQ and keeps the other's, in order, even
/// where they come after the removed ones and across the CQ's wrap-around.
fn reset_cleans_a_shared_cq(mode: ExecMode) {
    let ctx = open(mode);
    let pd = ctx.alloc_pd().unwrap();
    let shared = ctx.create_cq(16).unwrap();
    let peer_cq = ctx.create_cq(16).unwrap();
    let a = create_qp(&pd, &shared, &shared, cap(8, 1, 0), false);
    let c = create_qp(&pd, &shared, &shared, cap(8, 1, 0), false);
    let b = create_qp(&pd, &peer_cq, &peer_cq, cap(8, 1, 0), false);
    let conn = Conn::default();
    connect(&ctx, &a, b.qp_num(), &conn);
    connect(&ctx, &b, a.qp_num(), &conn);
    // c talks to itself.
    connect(&ctx, &c, c.qp_num(), &conn);
    let mr = pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    let c_exchange = |id: u64| {
        write_mr(&mr, 0, &pattern(id, 16));
        post_recv(&c, recv(id, &[sge(&mr, 1024 + (id % 8) as usize * 64, 64)]));
        post_send(&c, send(id + 1, &[sge(&mr, 0, 16)]));
    };
    for round in 0..10u64 {
        let id = round * 100;
        c_exchange(id);
        for i in 0..3 {
            post_recv(&a, recv(id + 50 + i, &[sge(&mr, 2048, 64)]));
        }
        set_state(&a, QpState::Err).unwrap();
        c_exchange(id + 10);
        settle(&ctx);
        set_state(&a, QpState::Reset).unwrap();

        let wcs = poll_n(&shared, 4);
        for (w, (wr_id, op)) in wcs.iter().zip([
            (id, WcOpcode::Recv),
            (id + 1, WcOpcode::Send),
            (id + 10, WcOpcode::Recv),
            (id + 11, WcOpcode::Send),
        ]) {
            assert_ok(w, wr_id, op);
            assert_eq!(w.qp_num, c.qp_num(), "round {round}: {w:#?}");
        }
        for rid in [id, id + 10] {
            let at = 1024 + (rid % 8) as usize * 64;
            assert_eq!(read_mr(&mr, at, 16), pattern(rid, 16), "round {round}");
        }
        assert_cq_empty(&ctx, &shared);

        // a works again after reconnecting, from the PSN b expects: b has
        // taken one SEND from a per round (the two sides of a connection
        // agree on PSNs, or b takes a's requests for duplicates).
        let again = Conn {
            sq_psn: round as u32,
            ..conn
        };
        connect(&ctx, &a, b.qp_num(), &again);
        post_recv(&b, recv(id + 60, &[sge(&mr, 3072, 64)]));
        post_send(&a, send(id + 61, &[sge(&mr, 0, 8)]));
        assert_ok(&poll_one(&shared), id + 61, WcOpcode::Send);
        assert_ok(&poll_one(&peer_cq), id + 60, WcOpcode::Recv);
    }
    assert_cq_empty(&ctx, &shared);
    assert_no_event(&ctx);
}

/// RESET discards posted work without completions: receives posted before
/// it are gone afterwards, and a send stalled on receiver-not-ready is
/// dropped, never delivered.
fn reset_discards_posted_work(mode: ExecMode) {
    let p = Pair::new(mode);
    let c = Conn::default();
    let mr_a = p.mr(256, ALL_ACCESS);
    let mr_b = p.mr(256, ALL_ACCESS);
    for i in 0..3 {
        post_recv(&p.b, recv(i, &[sge(&mr_b, 0, 64)]));
    }
    set_state(&p.b, QpState::Reset).unwrap();
    assert_cq_empty(&p.ctx, &p.cq_b);
    connect(&p.ctx, &p.b, p.a.qp_num(), &c);

    // The receives are gone: a's SEND finds none and stalls (rnr_retry 7).
    write_mr(&mr_a, 0, b"dropped");
    post_send(&p.a, send(1, &[sge(&mr_a, 0, 7)]));
    assert_cq_empty(&p.ctx, &p.cq_a);
    assert_eq!(query_state(&p.a), QpState::Rts);
    // RESET drops the stalled SEND.
    set_state(&p.a, QpState::Reset).unwrap();
    assert_cq_empty(&p.ctx, &p.cq_a);
    connect(&p.ctx, &p.a, p.b.qp_num(), &c);
    post_recv(&p.b, recv(10, &[sge(&mr_b, 0, 64)]));
    assert_cq_empty(&p.ctx, &p.cq_b);

    write_mr(&mr_a, 0, b"kept");
    post_send(&p.a, send(2, &[sge(&mr_a, 0, 4)]));
    assert_ok(&poll_one(&p.cq_a), 2, WcOpcode::Send);
    let r = poll_one(&p.cq_b);
    assert_ok(&r, 10, WcOpcode::Recv);
    assert_eq!(r.byte_len, 4);
    assert_eq!(read_mr(&mr_b, 0, 4), b"kept");
    p.assert_quiet();
}

both_modes!(
    illegal_transitions,
    attribute_mask_rules,
    attribute_value_checks,
    cur_state_must_match,
    posting_rules_per_state,
    reconnect_after_error,
    query_returns_what_was_set,
    err_and_reset_from_every_state,
    reset_cleans_a_shared_cq,
    reset_discards_posted_work,
);

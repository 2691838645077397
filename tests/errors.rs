//! Data-path errors: each error's completion status and syndrome on both
//! sides, the QP states afterwards (by QUERY_QP), the flush of everything
//! still outstanding, the async events (only for errors no completion
//! reports: responder rkey errors and invalid requests), and that no
//! data moves for a request that fails.

use rnic_tests::*;

const MR_LEN: usize = 4096;
const SENTINEL: u8 = 0x5a;

/// A pair and one MR on each side, both filled with [`SENTINEL`].
fn setup(mode: ExecMode, opts: PairOpts) -> (Pair, EMr, EMr) {
    let p = Pair::with(mode, opts);
    let mr_a = p.mr(MR_LEN, ALL_ACCESS);
    let mr_b = p.mr(MR_LEN, ALL_ACCESS);
    fill_mr(&mr_a, SENTINEL);
    fill_mr(&mr_b, SENTINEL);
    (p, mr_a, mr_b)
}

/// Splits completions into send queue and receive queue ones.
fn split(wcs: &[WorkCompletion]) -> (Vec<WorkCompletion>, Vec<WorkCompletion>) {
    wcs.iter()
        .partition(|w| !matches!(w.opcode, WcOpcode::Recv | WcOpcode::RecvRdmaWithImm))
}

#[track_caller]
fn assert_all_sentinel(mr: &EMr) {
    let got = read_mr(mr, 0, mr.len());
    if let Some(i) = got.iter().position(|&b| b != SENTINEL) {
        panic!("byte {i} of an MR was written by a failed request");
    }
}

#[track_caller]
fn assert_states(p: &Pair, a: QpState, b: QpState) {
    assert_eq!(
        (query_state(&p.a), query_state(&p.b)),
        (a, b),
        "states of (a, b) by QUERY_QP"
    );
    assert_eq!(
        (p.a.state(), p.b.state()),
        (a, b),
        "states the driver knows"
    );
}

/// A wrong lkey fails its request with LOC_PROT_ERR (even unsignaled);
/// the QP goes to ERR and every other outstanding request, send and
/// receive, is flushed in order. Requests posted in ERR are flushed too.
fn wrong_lkey_flushes_the_rest(mode: ExecMode) {
    let (p, mr_a, mr_b) = setup(mode, PairOpts::default());
    write_mr(&mr_a, 0, b"good");
    post_recv(&p.b, recv(500, &[sge(&mr_b, 0, 64)]));
    for i in 0..4 {
        post_recv(&p.a, recv(200 + i, &[sge(&mr_a, 1024, 64)]));
    }
    let good = [sge(&mr_a, 0, 4)];
    let bad = [Sge {
        lkey: mr_a.lkey() ^ 0x00ab_cd00,
        ..sge(&mr_a, 0, 4)
    }];
    let mut wrs = vec![
        send(1, &good),
        send(2, &bad),
        send(3, &good),
        write(4, &good, mr_b.addr() + 2048, mr_b.rkey()),
        send(5, &good),
    ];
    // The failing request and one flushed request are unsignaled: errors
    // and flushes complete regardless.
    wrs[1].flags = 0;
    wrs[2].flags = 0;
    p.a.post_send(&wrs).unwrap();

    let (s, r) = split(&poll_n(&p.cq_a, 9));
    assert_ok(&s[0], 1, WcOpcode::Send);
    assert_err(&s[1], 2, WcStatus::LocProtErr, Syndrome::BadLkey);
    assert_eq!(s[1].qp_num, p.a.qp_num());
    assert_flushed(&s[2..], &[3, 4, 5]);
    assert_flushed(&r, &[200, 201, 202, 203]);
    for w in r.iter().chain(&s[2..]) {
        assert_eq!(w.qp_num, p.a.qp_num());
    }
    let rb = poll_one(&p.cq_b);
    assert_ok(&rb, 500, WcOpcode::Recv);
    assert_eq!(read_mr(&mr_b, 0, 4), b"good");
    // The flushed WRITE did not happen.
    assert_eq!(read_mr(&mr_b, 2048, 4), [SENTINEL; 4]);
    assert_states(&p, QpState::Err, QpState::Rts);
    // The completion reports the error: no async event.
    p.assert_quiet();

    // Posting in ERR is allowed and flushes.
    post_send(&p.a, send(6, &good));
    post_recv(&p.a, recv(204, &[sge(&mr_a, 1024, 64)]));
    let (s, r) = split(&poll_n(&p.cq_a, 2));
    assert_flushed(&s, &[6]);
    assert_flushed(&r, &[204]);
    assert_states(&p, QpState::Err, QpState::Rts);
    p.assert_quiet();
}

/// Flushes go to the CQ of their queue: SQ flushes to the send CQ, RQ
/// flushes to the receive CQ. A MODIFY_QP to ERR raises no event.
fn flushes_go_to_their_own_cqs(mode: ExecMode) {
    let ctx = open(mode);
    let pd = ctx.alloc_pd().unwrap();
    let scq = ctx.create_cq(16).unwrap();
    let rcq = ctx.create_cq(16).unwrap();
    // Connected to a QP that never reaches RTR: nothing can complete.
    let peer_cq = ctx.create_cq(4).unwrap();
    let peer = create_qp(&pd, &peer_cq, &peer_cq, cap(4, 1, 0), false);
    let qp = create_qp(&pd, &scq, &rcq, cap(8, 1, 0), false);
    let c = Conn::default();
    to_init(&qp, &c).unwrap();
    let mr = pd.alloc_mr(256, ALL_ACCESS).unwrap();
    for i in 0..5 {
        post_recv(&qp, recv(100 + i, &[sge(&mr, 0, 256)]));
    }
    to_rtr(&ctx, &qp, peer.qp_num(), &c).unwrap();
    set_state(&qp, QpState::Err).expect("RTR -> ERR");
    assert_eq!(query_state(&qp), QpState::Err);
    assert_flushed(&poll_n(&rcq, 5), &[100, 101, 102, 103, 104]);
    assert_cq_empty(&ctx, &scq);
    post_send(&qp, send(7, &[sge(&mr, 0, 8)]));
    post_send(&qp, write(8, &[sge(&mr, 0, 8)], mr.addr(), mr.rkey()));
    assert_flushed(&poll_n(&scq, 2), &[7, 8]);
    assert_cq_empty(&ctx, &rcq);
    assert_cq_empty(&ctx, &peer_cq);
    assert_no_event(&ctx);
}

/// A stale rkey: REM_ACCESS_ERR / BadRkey at the requester; both QPs end
/// in ERR, both flush, and the responder reports a QpAccessErr event.
fn wrong_rkey(mode: ExecMode) {
    let (p, mr_a, mr_b) = setup(mode, PairOpts::default());
    let gone = p.mr(64, ALL_ACCESS);
    let stale = gone.rkey();
    gone.destroy().map_err(|e| e.error).unwrap();
    for i in 0..3 {
        post_recv(&p.b, recv(300 + i, &[sge(&mr_b, 0, 64)]));
    }
    post_recv(&p.a, recv(400, &[sge(&mr_a, 0, 64)]));
    p.a.post_send(&[
        write(1, &[sge(&mr_a, 0, 16)], mr_b.addr(), stale),
        send(2, &[sge(&mr_a, 0, 16)]),
    ])
    .unwrap();

    let (s, r) = split(&poll_n(&p.cq_a, 3));
    assert_err(&s[0], 1, WcStatus::RemAccessErr, Syndrome::RemoteAccess);
    assert_flushed(&s[1..], &[2]);
    assert_flushed(&r, &[400]);
    assert_flushed(&poll_n(&p.cq_b, 3), &[300, 301, 302]);
    let ev = expect_event(&p.ctx);
    assert_eq!(
        (ev.event_type, ev.obj, ev.syndrome),
        (
            EventType::QpAccessErr,
            p.b.qp_num(),
            Syndrome::BadRkey as u32
        ),
        "{ev:?}"
    );
    assert_states(&p, QpState::Err, QpState::Err);
    assert_all_sentinel(&mr_b);
    p.assert_quiet();
}

/// What a remote access violation test does at the requester.
#[derive(Debug, Clone, Copy)]
enum RemoteOp {
    Write,
    Read,
    CmpSwap,
    FetchAdd,
}

/// Runs `op` against `len` bytes at `offset` of a responder MR with
/// `mr_access`, the responder QP granting `qp_access`, and expects
/// REM_ACCESS_ERR at the requester (which knows only the NAK code), both
/// QPs in ERR, a QpAccessErr event with `syndrome` for the responder, and
/// no data moved either way.
fn remote_violation(
    mode: ExecMode,
    op: RemoteOp,
    mr_access: u32,
    qp_access: u32,
    offset: i64,
    len: u32,
    syndrome: Syndrome,
) {
    let what = format!("{op:?} with MR access {mr_access:#x}, QP access {qp_access:#x}");
    let opts = PairOpts {
        conn_b: Conn {
            access: qp_access,
            ..Conn::default()
        },
        ..PairOpts::default()
    };
    let p = Pair::with(mode, opts);
    let mr_a = p.mr(MR_LEN, ALL_ACCESS);
    fill_mr(&mr_a, SENTINEL);
    let target = p.mr(MR_LEN, mr_access);
    fill_mr(&target, SENTINEL);
    let before = read_mr(&target, 0, MR_LEN);
    let remote = RemoteAddr {
        addr: target.addr().wrapping_add_signed(offset),
        rkey: target.rkey(),
    };
    // A receive at the responder: not consumed, flushed when it fails.
    post_recv(&p.b, recv(900, &[sge(&mr_a, 0, 8)]));
    let sgl = [sge(&mr_a, 0, len)];
    let op = match op {
        RemoteOp::Write => SendOp::RdmaWrite { remote },
        RemoteOp::Read => SendOp::RdmaRead { remote },
        RemoteOp::CmpSwap => SendOp::AtomicCmpAndSwp {
            remote,
            compare: 0,
            swap: 1,
        },
        RemoteOp::FetchAdd => SendOp::AtomicFetchAndAdd { remote, add: 1 },
    };
    post_send(&p.a, wr(1, op, &sgl));
    let w = poll_one(&p.cq_a);
    assert_eq!(
        (w.wr_id, w.status, rnic_driver::syndrome(&w)),
        (1, WcStatus::RemAccessErr, Some(Syndrome::RemoteAccess)),
        "{what}: {w:#?}"
    );
    let ev = expect_event(&p.ctx);
    assert_eq!(
        (ev.event_type, ev.obj, ev.syndrome),
        (EventType::QpAccessErr, p.b.qp_num(), syndrome as u32),
        "{what}: {ev:?}"
    );
    assert_flushed(&poll_n(&p.cq_b, 1), &[900]);
    assert_states(&p, QpState::Err, QpState::Err);
    assert_eq!(
        read_mr(&target, 0, MR_LEN),
        before,
        "{what}: target changed"
    );
    assert_all_sentinel(&mr_a);
    p.assert_quiet();
}

/// RDMA WRITE with immediate failing the rkey check: REM_ACCESS_ERR at
/// the requester; the receive WQE it consumes completes LOC_ACCESS_ERR with
/// the same syndrome, which reports the error (no event); both QPs in ERR,
/// the rest flushed, no data written.
fn write_with_imm_rkey_violations(mode: ExecMode) {
    let no_write_qp = ALL_REMOTE & !access::REMOTE_WRITE;
    let end = MR_LEN as u64;
    // (MR access, QP access, offset, length, syndrome)
    let cases = [
        (NO_WRITE, ALL_REMOTE, 0, 16, Syndrome::AccessDenied),
        (ALL_ACCESS, no_write_qp, 0, 16, Syndrome::QpAccessDenied),
        (ALL_ACCESS, ALL_REMOTE, end - 4, 8, Syndrome::OutOfBounds),
        (ALL_ACCESS, ALL_REMOTE, 0, 16, Syndrome::BadRkey),
    ];
    for (mr_access, qp_access, offset, len, syndrome) in cases {
        let opts = PairOpts {
            conn_b: Conn {
                access: qp_access,
                ..Conn::default()
            },
            ..PairOpts::default()
        };
        let (p, mr_a, mr_b) = setup(mode, opts);
        let target = p.mr(MR_LEN, mr_access);
        fill_mr(&target, SENTINEL);
        let rkey = if syndrome == Syndrome::BadRkey {
            target.rkey() ^ 0x00ff_ff00
        } else {
            target.rkey()
        };
        post_recv(&p.b, recv(900, &[sge(&mr_b, 0, 64)]));
        post_recv(&p.b, recv(901, &[sge(&mr_b, 0, 64)]));
        let op = SendOp::RdmaWriteWithImm {
            remote: RemoteAddr {
                addr: target.addr() + offset,
                rkey,
            },
            imm: [1, 2, 3, 4],
        };
        p.a.post_send(&[
            wr(1, op, &[sge(&mr_a, 0, len)]),
            send(2, &[sge(&mr_a, 0, 4)]),
        ])
        .unwrap();
        let s = poll_n(&p.cq_a, 2);
        assert_eq!(
            (s[0].wr_id, s[0].status, rnic_driver::syndrome(&s[0])),
            (1, WcStatus::RemAccessErr, Some(Syndrome::RemoteAccess)),
            "{syndrome:?}: {:#?}",
            s[0]
        );
        assert_flushed(&s[1..], &[2]);
        let r = poll_n(&p.cq_b, 2);
        assert_eq!(
            (
                r[0].wr_id,
                r[0].status,
                rnic_driver::syndrome(&r[0]),
                r[0].opcode
            ),
            (900, WcStatus::LocAccessErr, Some(syndrome), WcOpcode::Recv),
            "{syndrome:?}: {:#?}",
            r[0]
        );
        assert_flushed(&r[1..], &[901]);
        assert_states(&p, QpState::Err, QpState::Err);
        assert_all_sentinel(&target);
        assert_all_sentinel(&mr_b);
        p.assert_quiet();
    }
}

/// READ and atomics need responder resources: to a responder whose
/// `max_dest_rd_atomic` is 0 they are invalid requests (REM_INV_REQ_ERR /
/// NoRdAtomic, responder in ERR with a QpReqErr event); WRITEs and SENDs
/// are not affected.
fn read_and_atomic_need_responder_resources(mode: ExecMode) {
    for op in ["write", "read", "atomic"] {
        let opts = PairOpts {
            conn_b: Conn {
                max_dest_rd_atomic: 0,
                ..Conn::default()
            },
            ..PairOpts::default()
        };
        let (p, mr_a, mr_b) = setup(mode, opts);
        assert_eq!(p.b.query().unwrap().max_dest_rd_atomic, 0);
        let remote = RemoteAddr {
            addr: mr_b.addr(),
            rkey: mr_b.rkey(),
        };
        let (sendop, len) = match op {
            "write" => (SendOp::RdmaWrite { remote }, 16),
            "read" => (SendOp::RdmaRead { remote }, 16),
            _ => (
                SendOp::AtomicCmpAndSwp {
                    remote,
                    compare: 0,
                    swap: 1,
                },
                8,
            ),
        };
        post_send(&p.a, wr(1, sendop, &[sge(&mr_a, 0, len)]));
        let w = poll_one(&p.cq_a);
        if op == "write" {
            assert_ok(&w, 1, WcOpcode::RdmaWrite);
            assert_eq!(read_mr(&mr_b, 0, 16), [SENTINEL; 16]);
            assert_states(&p, QpState::Rts, QpState::Rts);
        } else {
            assert_err(
                &w,
                1,
                WcStatus::RemInvReqErr,
                Syndrome::RemoteInvalidRequest,
            );
            let ev = expect_event(&p.ctx);
            assert_eq!(
                (ev.event_type, ev.obj, ev.syndrome),
                (
                    EventType::QpReqErr,
                    p.b.qp_num(),
                    Syndrome::NoRdAtomic as u32
                ),
                "{op}: {ev:?}"
            );
            assert_states(&p, QpState::Err, QpState::Err);
            assert_all_sentinel(&mr_a);
            assert_all_sentinel(&mr_b);
        }
        p.assert_quiet();
    }
}

const NO_WRITE: u32 = access::LOCAL_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;
const NO_READ: u32 = access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_ATOMIC;
const NO_ATOMIC: u32 = access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ;

fn mr_lacking_remote_rights(mode: ExecMode) {
    use RemoteOp::*;
    let denied = Syndrome::AccessDenied;
    remote_violation(mode, Write, NO_WRITE, ALL_REMOTE, 0, 16, denied);
    remote_violation(mode, Read, NO_READ, ALL_REMOTE, 0, 16, denied);
    remote_violation(mode, CmpSwap, NO_ATOMIC, ALL_REMOTE, 0, 8, denied);
    remote_violation(mode, FetchAdd, NO_ATOMIC, ALL_REMOTE, 0, 8, denied);
    // A local-only MR.
    remote_violation(mode, Read, 0, ALL_REMOTE, 0, 16, denied);
}

fn qp_lacking_remote_rights(mode: ExecMode) {
    use RemoteOp::*;
    let denied = Syndrome::QpAccessDenied;
    let qp = |lacking: u32| ALL_REMOTE & !lacking;
    remote_violation(
        mode,
        Write,
        ALL_ACCESS,
        qp(access::REMOTE_WRITE),
        0,
        16,
        denied,
    );
    remote_violation(
        mode,
        Read,
        ALL_ACCESS,
        qp(access::REMOTE_READ),
        0,
        16,
        denied,
    );
    remote_violation(
        mode,
        CmpSwap,
        ALL_ACCESS,
        qp(access::REMOTE_ATOMIC),
        0,
        8,
        denied,
    );
    remote_violation(mode, FetchAdd, ALL_ACCESS, 0, 0, 8, denied);
}

fn remote_out_of_bounds(mode: ExecMode) {
    use RemoteOp::*;
    let oob = Syndrome::OutOfBounds;
    let end = MR_LEN as i64;
    // Straddling the end, one byte past it, and before the start.
    remote_violation(mode, Write, ALL_ACCESS, ALL_REMOTE, end - 10, 20, oob);
    remote_violation(mode, Write, ALL_ACCESS, ALL_REMOTE, end, 1, oob);
    remote_violation(mode, Read, ALL_ACCESS, ALL_REMOTE, -8, 16, oob);
    remote_violation(mode, FetchAdd, ALL_ACCESS, ALL_REMOTE, end, 8, oob);
}

/// A remote MR in another PD than the responder QP.
fn remote_pd_mismatch(mode: ExecMode) {
    let (p, mr_a, _mr_b) = setup(mode, PairOpts::default());
    let other = p.ctx.alloc_pd().unwrap();
    let foreign = other.alloc_mr(256, ALL_ACCESS).unwrap();
    post_send(
        &p.a,
        write(1, &[sge(&mr_a, 0, 8)], foreign.addr(), foreign.rkey()),
    );
    assert_err(
        &poll_one(&p.cq_a),
        1,
        WcStatus::RemAccessErr,
        Syndrome::RemoteAccess,
    );
    let ev = expect_event(&p.ctx);
    assert_eq!(
        (ev.event_type, ev.obj, ev.syndrome),
        (
            EventType::QpAccessErr,
            p.b.qp_num(),
            Syndrome::PdMismatch as u32
        )
    );
    // b completed nothing: the driver learned its state from the event.
    assert_eq!(p.b.state(), QpState::Err);
    assert_states(&p, QpState::Err, QpState::Err);
    assert_eq!(read_mr(&foreign, 0, 8), [0; 8]);
    p.assert_quiet();
}

/// Local protection errors: LOC_PROT_ERR with the check's syndrome; the
/// requester goes to ERR, the responder is not involved (its receive stays
/// posted), and no event is raised.
fn local_protection_errors(mode: ExecMode) {
    // `keep` starts with a local MR and holds the MRs a case makes, which
    // must outlive its request (an MR keeps its PD alive).
    type Make = fn(&Pair, &EMr, &mut Vec<EMr>) -> (SendOp, Sge);
    let cases: [(&str, Make, Syndrome); 5] = [
        (
            "SGE past the MR's end",
            |_, _, k| {
                let mr = &k[0];
                let s = Sge {
                    addr: mr.addr() + MR_LEN as u64 - 10,
                    length: 20,
                    lkey: mr.lkey(),
                };
                (SendOp::Send, s)
            },
            Syndrome::OutOfBounds,
        ),
        (
            "SGE before the MR's start",
            |_, _, k| {
                let mr = &k[0];
                let s = Sge {
                    addr: mr.addr() - 1,
                    length: 4,
                    lkey: mr.lkey(),
                };
                (SendOp::Send, s)
            },
            Syndrome::OutOfBounds,
        ),
        (
            "lkey of an MR in another PD",
            |p, _, k| {
                let pd = p.ctx.alloc_pd().unwrap();
                let foreign = pd.alloc_mr(64, ALL_ACCESS).unwrap();
                let s = sge(&foreign, 0, 8);
                k.push(foreign);
                (SendOp::Send, s)
            },
            Syndrome::PdMismatch,
        ),
        (
            "READ into an MR without LOCAL_WRITE",
            |p, target, k| {
                let ro = p.mr(64, access::REMOTE_READ);
                let s = sge(&ro, 0, 16);
                k.push(ro);
                let remote = RemoteAddr {
                    addr: target.addr(),
                    rkey: target.rkey(),
                };
                (SendOp::RdmaRead { remote }, s)
            },
            Syndrome::AccessDenied,
        ),
        (
            "atomic result into an MR without LOCAL_WRITE",
            |p, target, k| {
                let ro = p.mr(64, 0);
                let s = sge(&ro, 0, 8);
                k.push(ro);
                let remote = RemoteAddr {
                    addr: target.addr(),
                    rkey: target.rkey(),
                };
                (SendOp::AtomicFetchAndAdd { remote, add: 1 }, s)
            },
            Syndrome::AccessDenied,
        ),
    ];
    for (what, make, syndrome) in cases {
        let (p, mr_a, mr_b) = setup(mode, PairOpts::default());
        let mut keep = vec![p.mr(MR_LEN, ALL_ACCESS)];
        post_recv(&p.b, recv(77, &[sge(&mr_b, 0, 64)]));
        // The remote side of READ and atomic cases is b's MR.
        let (op, s) = make(&p, &mr_b, &mut keep);
        let sgl = [s];
        post_send(&p.a, wr(1, op, &sgl));
        post_send(&p.a, send(2, &[sge(&mr_a, 0, 8)]));
        let w = poll_n(&p.cq_a, 2);
        assert_eq!(
            (w[0].wr_id, w[0].status, rnic_driver::syndrome(&w[0])),
            (1, WcStatus::LocProtErr, Some(syndrome)),
            "{what}: {:#?}",
            w[0]
        );
        assert_flushed(&w[1..], &[2]);
        assert_states(&p, QpState::Err, QpState::Rts);
        assert_all_sentinel(&mr_b);
        // b's receive is still posted: moving b to ERR flushes it.
        assert_cq_empty(&p.ctx, &p.cq_b);
        set_state(&p.b, QpState::Err).unwrap();
        assert_flushed(&poll_n(&p.cq_b, 1), &[77]);
        p.assert_quiet();
    }
}

/// A SEND larger than the receive buffer: REM_INV_REQ_ERR at the
/// requester, LOC_LEN_ERR at the responder, both in ERR, both flush; the
/// completions report it, so no event.
fn receive_buffer_too_small(mode: ExecMode) {
    let (p, mr_a, mr_b) = setup(mode, PairOpts::default());
    write_mr(&mr_a, 0, &pattern(1, 17));
    post_recv(&p.b, recv(10, &[sge(&mr_b, 0, 10), sge(&mr_b, 100, 6)]));
    post_recv(&p.b, recv(11, &[sge(&mr_b, 200, 64)]));
    p.a.post_send(&[send(1, &[sge(&mr_a, 0, 17)]), send(2, &[sge(&mr_a, 0, 1)])])
        .unwrap();
    let s = poll_n(&p.cq_a, 2);
    assert_err(
        &s[0],
        1,
        WcStatus::RemInvReqErr,
        Syndrome::RemoteInvalidRequest,
    );
    assert_flushed(&s[1..], &[2]);
    let r = poll_n(&p.cq_b, 2);
    assert_err(&r[0], 10, WcStatus::LocLenErr, Syndrome::RecvTooSmall);
    assert_eq!(r[0].opcode, WcOpcode::Recv);
    assert_flushed(&r[1..], &[11]);
    assert_states(&p, QpState::Err, QpState::Err);
    assert_all_sentinel(&mr_b);
    p.assert_quiet();
}

/// Receive SGEs the responder may not write: LOC_PROT_ERR at the
/// responder, REM_OP_ERR at the requester, both in ERR, no event.
fn receive_buffer_protection(mode: ExecMode) {
    // A case may make an MR that must outlive the request.
    type Make = fn(&Pair, &EMr, &mut Vec<EMr>) -> Sge;
    let cases: [(&str, Make, Syndrome); 4] = [
        (
            "receive MR without LOCAL_WRITE",
            |p, _, keep| {
                let ro = p.mr(64, access::REMOTE_READ);
                let s = sge(&ro, 0, 64);
                keep.push(ro);
                s
            },
            Syndrome::AccessDenied,
        ),
        (
            "receive SGE with a bad lkey",
            |_, mr, _| Sge {
                lkey: mr.lkey() ^ 0x00f0_0000,
                ..sge(mr, 0, 64)
            },
            Syndrome::BadLkey,
        ),
        (
            "receive SGE past its MR's end",
            |_, mr, _| Sge {
                addr: mr.addr() + MR_LEN as u64 - 8,
                length: 64,
                lkey: mr.lkey(),
            },
            Syndrome::OutOfBounds,
        ),
        (
            "receive MR in another PD",
            |p, _, keep| {
                let pd = p.ctx.alloc_pd().unwrap();
                let foreign = pd.alloc_mr(64, ALL_ACCESS).unwrap();
                let s = sge(&foreign, 0, 64);
                // The MR keeps its PD alive.
                keep.push(foreign);
                s
            },
            Syndrome::PdMismatch,
        ),
    ];
    for (what, make, syndrome) in cases {
        let (p, mr_a, mr_b) = setup(mode, PairOpts::default());
        let mut keep = Vec::new();
        let s = make(&p, &mr_b, &mut keep);
        post_recv(&p.b, recv(10, &[s]));
        post_send(&p.a, send(1, &[sge(&mr_a, 0, 32)]));
        let w = poll_one(&p.cq_a);
        assert_eq!(
            (w.wr_id, w.status, rnic_driver::syndrome(&w)),
            (1, WcStatus::RemOpErr, Some(Syndrome::RemoteError)),
            "{what}: {w:#?}"
        );
        let r = poll_one(&p.cq_b);
        assert_eq!(
            (r.wr_id, r.status, rnic_driver::syndrome(&r)),
            (10, WcStatus::LocProtErr, Some(syndrome)),
            "{what}: {r:#?}"
        );
        assert_states(&p, QpState::Err, QpState::Err);
        assert_all_sentinel(&mr_b);
        p.assert_quiet();
    }
}

/// No receive posted and `rnr_retry` 0: RNR_RETRY_EXC_ERR at once; the
/// responder is not affected.
fn rnr_retry_zero_fails(mode: ExecMode) {
    let opts = PairOpts {
        conn_a: Conn {
            rnr_retry: 0,
            ..Conn::default()
        },
        ..PairOpts::default()
    };
    let (p, mr_a, mr_b) = setup(mode, opts);
    p.a.post_send(&[send(1, &[sge(&mr_a, 0, 8)]), send(2, &[sge(&mr_a, 0, 8)])])
        .unwrap();
    let s = poll_n(&p.cq_a, 2);
    assert_err(&s[0], 1, WcStatus::RnrRetryExcErr, Syndrome::RnrExceeded);
    assert_flushed(&s[1..], &[2]);
    assert_states(&p, QpState::Err, QpState::Rts);
    assert_eq!(query_state(&p.a), QpState::Err);
    // b still works: a receive posted now waits, and b can send.
    post_recv(&p.b, recv(5, &[sge(&mr_b, 0, 8)]));
    assert_cq_empty(&p.ctx, &p.cq_b);
    assert_all_sentinel(&mr_b);
    p.assert_quiet();
}

/// No receive posted and `rnr_retry` > 0: the send queue stalls (no
/// completion, still RTS) until the responder posts a receive, then each
/// stalled SEND completes successfully with its data delivered. Each SEND
/// meets one RNR NAK here (its first attempt): the retry a receive brings
/// gets through, with `rnr_retry` 3 as with 7 (without limit). With 3,
/// a SEND fails once a receive comes more than three RNR timers after its
/// first NAK: b's timer is 20.48 ms (code 22), not the default 640 µs, so
/// that a test thread descheduled for a few milliseconds on a loaded
/// machine does not run the budget out.
fn rnr_retry_waits_for_receive(mode: ExecMode) {
    for (rnr_retry, min_rnr_timer) in [(3, 22), (7, 12)] {
        let opts = PairOpts {
            conn_a: Conn {
                rnr_retry,
                ..Conn::default()
            },
            conn_b: Conn {
                min_rnr_timer,
                ..Conn::default()
            },
            ..PairOpts::default()
        };
        let (p, mr_a, mr_b) = setup(mode, opts);
        write_mr(&mr_a, 0, b"first");
        write_mr(&mr_a, 8, b"second");
        p.a.post_send(&[send(1, &[sge(&mr_a, 0, 5)]), send(2, &[sge(&mr_a, 8, 6)])])
            .unwrap();
        assert_cq_empty(&p.ctx, &p.cq_a);
        // Posting while stalled rings the doorbell again: no retry (the
        // new SEND queues behind the stalled one, which nothing overtakes).
        write_mr(&mr_a, 16, b"third");
        post_send(&p.a, send(3, &[sge(&mr_a, 16, 5)]));
        assert_cq_empty(&p.ctx, &p.cq_a);
        assert_states(&p, QpState::Rts, QpState::Rts);

        post_recv(&p.b, recv(10, &[sge(&mr_b, 0, 64)]));
        assert_ok(&poll_one(&p.cq_a), 1, WcOpcode::Send);
        assert_ok(&poll_one(&p.cq_b), 10, WcOpcode::Recv);
        assert_eq!(read_mr(&mr_b, 0, 5), b"first");
        // The second SEND waits for the second receive.
        assert_cq_empty(&p.ctx, &p.cq_a);

        post_recv(&p.b, recv(11, &[sge(&mr_b, 64, 64)]));
        assert_ok(&poll_one(&p.cq_a), 2, WcOpcode::Send);
        let r = poll_one(&p.cq_b);
        assert_ok(&r, 11, WcOpcode::Recv);
        assert_eq!(r.byte_len, 6);
        assert_eq!(read_mr(&mr_b, 64, 6), b"second");
        assert_cq_empty(&p.ctx, &p.cq_a);
        post_recv(&p.b, recv(12, &[sge(&mr_b, 128, 64)]));
        assert_ok(&poll_one(&p.cq_a), 3, WcOpcode::Send);
        assert_ok(&poll_one(&p.cq_b), 12, WcOpcode::Recv);
        assert_eq!(read_mr(&mr_b, 128, 5), b"third");
        assert_states(&p, QpState::Rts, QpState::Rts);
        p.assert_quiet();
    }
}

/// A finite `rnr_retry` runs out when every retry meets receiver-not-ready
/// again: the first attempt and `rnr_retry` (2) retries, one RNR timer
/// apart, are three RNR NAKs, and the third completes a's SEND
/// RNR_RETRY_EXC_ERR and flushes the rest. Posting more while waiting
/// retries nothing. The responder is not affected and its receive posted
/// afterwards stays; both sides counted the NAKs.
fn rnr_retry_runs_out(mode: ExecMode) {
    let opts = PairOpts {
        conn_a: Conn {
            rnr_retry: 2,
            ..Conn::default()
        },
        ..PairOpts::default()
    };
    let (p, mr_a, mr_b) = setup(mode, opts);
    for wr_id in 1..=3 {
        post_send(&p.a, send(wr_id, &[sge(&mr_a, 16, 8)]));
    }
    let s = poll_n(&p.cq_a, 3);
    assert_err(&s[0], 1, WcStatus::RnrRetryExcErr, Syndrome::RnrExceeded);
    assert_flushed(&s[1..], &[2, 3]);
    assert_states(&p, QpState::Err, QpState::Rts);
    let a = p.a.query_counters().unwrap();
    assert_eq!(a.get(counter::RNR_NAKS_RECEIVED), 3);
    assert_eq!(a.get(counter::RNR_RETRY_EXCEEDED), 1);
    assert_eq!(p.b.query_counters().unwrap().get(counter::RNR_NAKS_SENT), 3);
    post_recv(&p.b, recv(7, &[sge(&mr_b, 16, 8)]));
    assert_cq_empty(&p.ctx, &p.cq_b);
    assert_all_sentinel(&mr_b);
    p.assert_quiet();
}

/// The destination QP missing, in RESET, in INIT or in ERR: it drops the
/// requests, so the requester retries at each local ACK timeout and
/// completes RETRY_EXC_ERR / RetryExceeded after `retry_cnt` retries;
/// nothing happens at the destination.
fn destination_not_ready(mode: ExecMode) {
    for dest in ["missing", "reset", "init", "err"] {
        let opts = PairOpts {
            connect: false,
            ..PairOpts::default()
        };
        let (p, mr_a, mr_b) = setup(mode, opts);
        // A 1 ms local ACK timeout, 3 retries.
        let c = Conn {
            timeout: 8,
            retry_cnt: 3,
            ..Conn::default()
        };
        let dest_qpn = if dest == "missing" {
            0x00ab_cdef
        } else {
            p.b.qp_num()
        };
        if dest != "reset" {
            to_init(&p.b, &c).unwrap();
            post_recv(&p.b, recv(50, &[sge(&mr_b, 0, 64)]));
        }
        if dest == "err" {
            set_state(&p.b, QpState::Err).unwrap();
            assert_flushed(&poll_n(&p.cq_b, 1), &[50]);
        }
        connect(&p.ctx, &p.a, dest_qpn, &c);
        p.a.post_send(&[
            send(1, &[sge(&mr_a, 0, 8)]),
            write(2, &[sge(&mr_a, 0, 8)], mr_b.addr(), mr_b.rkey()),
        ])
        .unwrap();
        let s = poll_n(&p.cq_a, 2);
        assert_eq!(
            (s[0].wr_id, s[0].status, rnic_driver::syndrome(&s[0])),
            (1, WcStatus::RetryExcErr, Some(Syndrome::RetryExceeded)),
            "destination {dest}: {:#?}",
            s[0]
        );
        assert_flushed(&s[1..], &[2]);
        assert_eq!(query_state(&p.a), QpState::Err);
        let b_state = match dest {
            "reset" => QpState::Reset,
            "err" => QpState::Err,
            _ => QpState::Init,
        };
        assert_eq!(query_state(&p.b), b_state, "destination {dest}");
        assert_all_sentinel(&mr_b);
        p.assert_quiet();
    }
}

/// A misaligned atomic: REM_INV_REQ_ERR / Misaligned, the responder in
/// ERR with a QpReqErr event.
fn misaligned_atomic(mode: ExecMode) {
    let (p, mr_a, mr_b) = setup(mode, PairOpts::default());
    let remote = RemoteAddr {
        addr: mr_b.addr() + 4,
        rkey: mr_b.rkey(),
    };
    post_send(
        &p.a,
        wr(
            1,
            SendOp::AtomicCmpAndSwp {
                remote,
                compare: 0,
                swap: 0,
            },
            &[sge(&mr_a, 0, 8)],
        ),
    );
    assert_err(
        &poll_one(&p.cq_a),
        1,
        WcStatus::RemInvReqErr,
        Syndrome::RemoteInvalidRequest,
    );
    let ev = expect_event(&p.ctx);
    assert_eq!(
        (ev.event_type, ev.obj, ev.syndrome),
        (
            EventType::QpReqErr,
            p.b.qp_num(),
            Syndrome::Misaligned as u32
        )
    );
    assert_states(&p, QpState::Err, QpState::Err);
    assert_all_sentinel(&mr_a);
    assert_all_sentinel(&mr_b);
    p.assert_quiet();
}

/// Nothing already accepted is lost: when a request fails in the middle of
/// a stream (posted in several batches, so in thread mode partly after
/// the failure), every posted request gets exactly one completion, and so
/// does every posted receive, on both QPs.
fn nothing_accepted_is_lost(mode: ExecMode) {
    let (p, mr_a, mr_b) = setup(mode, PairOpts::default());
    let rq_b = p.b.cap().max_recv_wr as u64;
    for i in 0..rq_b {
        post_recv(&p.b, recv(1000 + i, &[sge(&mr_b, 0, 64)]));
    }
    for i in 0..8 {
        post_recv(&p.a, recv(2000 + i, &[sge(&mr_a, 0, 64)]));
    }
    let good = [sge(&mr_a, 0, 16)];
    let bad = [Sge {
        addr: mr_a.addr() + MR_LEN as u64,
        length: 1,
        lkey: mr_a.lkey(),
    }];
    let mk = |i: u64| -> SendWr {
        let mut w = match i % 3 {
            0 => send(i, &good),
            1 => write(i, &good, mr_b.addr() + 1024, mr_b.rkey()),
            _ => read(i, &good, mr_b.addr() + 2048, mr_b.rkey()),
        };
        if i == 4 {
            w = send(i, &bad);
        }
        // Signal the first four (they succeed); later ones are flushed,
        // signaled or not.
        if i >= 5 && i % 2 == 0 {
            w.flags = 0;
        }
        w
    };
    let total = p.a.cap().max_send_wr as u64;
    let mut next = 0;
    for batch in [3u64, 1, 2, 5, 100] {
        let end = (next + batch).min(total);
        let wrs: Vec<SendWr> = (next..end).map(mk).collect();
        p.a.post_send(&wrs).unwrap();
        next = end;
    }
    assert_eq!(next, total);

    let n_send = total as usize;
    let (s, r) = split(&poll_n(&p.cq_a, n_send + 8));
    let ids: Vec<u64> = s.iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, (0..total).collect::<Vec<_>>(), "one completion each");
    for w in &s[..4] {
        assert_eq!(w.status, WcStatus::Success, "{w:#?}");
    }
    assert_err(&s[4], 4, WcStatus::LocProtErr, Syndrome::OutOfBounds);
    assert_flushed(&s[5..], &(5..total).collect::<Vec<_>>());
    // Flush completions name the operation of their request.
    for w in &s[5..] {
        let op = match w.wr_id % 3 {
            0 => WcOpcode::Send,
            1 => WcOpcode::RdmaWrite,
            _ => WcOpcode::RdmaRead,
        };
        assert_eq!(w.opcode, op, "{w:#?}");
    }
    assert_flushed(&r, &(2000..2008).collect::<Vec<_>>());

    // b consumed two receives (the SENDs 0 and 3), and still has the rest.
    let rb = poll_n(&p.cq_b, 2);
    assert_ok(&rb[0], 1000, WcOpcode::Recv);
    assert_ok(&rb[1], 1001, WcOpcode::Recv);
    assert_states(&p, QpState::Err, QpState::Rts);
    set_state(&p.b, QpState::Err).unwrap();
    assert_flushed(
        &poll_n(&p.cq_b, rq_b as usize - 2),
        &(1002..1000 + rq_b).collect::<Vec<_>>(),
    );
    p.assert_quiet();
}

/// A send queue waiting on receiver-not-ready at a responder that leaves
/// RTR/RTS (to ERR or RESET) or is destroyed: the responder drops the
/// retries, so the SEND completes RETRY_EXC_ERR after the requester's
/// timeouts and the rest is flushed. A requester moved to ERR while
/// waiting flushes the SEND itself.
fn rnr_stall_ends_when_a_side_goes_away(mode: ExecMode) {
    for how in [
        "responder err",
        "responder reset",
        "responder destroyed",
        "requester err",
    ] {
        let opts = PairOpts {
            conn_a: Conn {
                timeout: 8,
                retry_cnt: 2,
                ..Conn::default()
            },
            ..PairOpts::default()
        };
        let (p, mr_a, _mr_b) = setup(mode, opts);
        p.a.post_send(&[send(1, &[sge(&mr_a, 0, 8)]), send(2, &[sge(&mr_a, 0, 8)])])
            .unwrap();
        assert_cq_empty(&p.ctx, &p.cq_a);
        assert_eq!(
            query_state(&p.a),
            QpState::Rts,
            "{how}: stalled, not failed"
        );
        let Pair {
            ctx, cq_a, a, b, ..
        } = p;
        match how {
            "responder err" => set_state(&b, QpState::Err).unwrap(),
            "responder reset" => set_state(&b, QpState::Reset).unwrap(),
            "responder destroyed" => destroyed_qp(b),
            _ => set_state(&a, QpState::Err).unwrap(),
        }
        let s = poll_n(&cq_a, 2);
        if how == "requester err" {
            assert_flushed(&s, &[1, 2]);
        } else {
            assert_eq!(
                (s[0].wr_id, s[0].status, rnic_driver::syndrome(&s[0])),
                (1, WcStatus::RetryExcErr, Some(Syndrome::RetryExceeded)),
                "{how}: {:#?}",
                s[0]
            );
            assert_flushed(&s[1..], &[2]);
        }
        assert_eq!(query_state(&a), QpState::Err, "{how}");
        assert_cq_empty(&ctx, &cq_a);
        assert_no_event(&ctx);
    }
}

fn destroyed_qp(qp: EQp) {
    if let Err(e) = qp.destroy() {
        panic!("destroy QP: {}", e.error);
    }
}

/// A message longer than the device's maximum (4 KiB here): LOC_LEN_ERR /
/// TooLong before anything is sent, for SEND, WRITE and READ alike; a
/// message of exactly the maximum goes through.
fn message_too_long(mode: ExecMode) {
    let max = 1usize << 12;
    let opts = PairOpts {
        config: EmuConfig {
            log_max_msg: 12,
            ..EmuConfig::default()
        },
        ..PairOpts::default()
    };
    for op in ["send", "write", "read"] {
        let p = Pair::with(mode, opts.clone());
        assert_eq!(p.ctx.query_device().unwrap().max_msg_sz as usize, max);
        let mr_a = p.mr(2 * max, ALL_ACCESS);
        let mr_b = p.mr(2 * max, ALL_ACCESS);
        fill_mr(&mr_b, SENTINEL);
        post_recv(&p.b, recv(1, &[sge(&mr_b, 0, 2 * max as u32)]));
        post_recv(&p.b, recv(2, &[sge(&mr_b, 0, 2 * max as u32)]));
        // Two entries, together one byte over the maximum.
        let over = [
            sge(&mr_a, 0, max as u32 / 2),
            sge(&mr_a, 100, max as u32 / 2 + 1),
        ];
        let exact = [sge(&mr_a, 0, max as u32)];
        let make = |wr_id, sgl| match op {
            "send" => send(wr_id, sgl),
            "write" => write(wr_id, sgl, mr_b.addr(), mr_b.rkey()),
            _ => read(wr_id, sgl, mr_b.addr(), mr_b.rkey()),
        };
        post_send(&p.a, make(10, &exact));
        let w = poll_one(&p.cq_a);
        assert_eq!((w.wr_id, w.status), (10, WcStatus::Success), "{op}: {w:#?}");
        post_send(&p.a, make(11, &over));
        assert_err(
            &poll_one(&p.cq_a),
            11,
            WcStatus::LocLenErr,
            Syndrome::TooLong,
        );
        assert_eq!(query_state(&p.a), QpState::Err);
        assert_eq!(query_state(&p.b), QpState::Rts);
        let consumed = drain(&p.ctx, &p.cq_b);
        let want = usize::from(op == "send");
        assert_eq!(consumed.len(), want, "{op}: {consumed:#?}");
        assert_no_event(&p.ctx);
    }
}

/// ERR -> ERR flushes nothing twice; receives posted in ERR are flushed
/// once.
fn no_second_flush(mode: ExecMode) {
    let (p, mr_a, _mr_b) = setup(mode, PairOpts::default());
    for i in 0..3 {
        post_recv(&p.a, recv(i, &[sge(&mr_a, 0, 8)]));
    }
    set_state(&p.a, QpState::Err).unwrap();
    assert_flushed(&poll_n(&p.cq_a, 3), &[0, 1, 2]);
    set_state(&p.a, QpState::Err).unwrap();
    assert_cq_empty(&p.ctx, &p.cq_a);
    post_recv(&p.a, recv(3, &[sge(&mr_a, 0, 8)]));
    assert_flushed(&poll_n(&p.cq_a, 1), &[3]);
    set_state(&p.a, QpState::Err).unwrap();
    p.assert_quiet();
}

/// A QP connected to itself is requester and responder at once: an error
/// on its responder side during its own request (receive too small, bad
/// rkey) fails the receive (or raises the responder's event) and moves the
/// QP to ERR before the NAK returns, so the request is flushed with the
/// rest, each WQE once; an RNR wait on itself ends when it posts a
/// receive.
fn loopback_to_self_errors(mode: ExecMode) {
    for case in ["too small", "bad rkey", "rnr"] {
        let ctx = open(mode);
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(16).unwrap();
        let qp = create_qp(&pd, &cq, &cq, cap(8, 1, 0), false);
        connect(&ctx, &qp, qp.qp_num(), &Conn::default());
        let mr = pd.alloc_mr(256, ALL_ACCESS).unwrap();
        fill_mr(&mr, SENTINEL);
        let payload = [sge(&mr, 0, 20)];
        match case {
            "too small" => {
                post_recv(&qp, recv(1, &[sge(&mr, 128, 10)]));
                post_recv(&qp, recv(2, &[sge(&mr, 128, 64)]));
                qp.post_send(&[send(10, &payload), send(11, &payload)])
                    .unwrap();
            }
            "bad rkey" => {
                post_recv(&qp, recv(1, &[sge(&mr, 128, 64)]));
                post_recv(&qp, recv(2, &[sge(&mr, 128, 64)]));
                qp.post_send(&[
                    write(10, &payload, mr.addr() + 64, mr.rkey() ^ 0x00ee_0000),
                    send(11, &payload),
                ])
                .unwrap();
            }
            _ => {
                write_mr(&mr, 0, b"to myself");
                post_send(&qp, send(10, &[sge(&mr, 0, 9)]));
                assert_cq_empty(&ctx, &cq);
                assert_eq!(query_state(&qp), QpState::Rts);
                post_recv(&qp, recv(1, &[sge(&mr, 128, 64)]));
                let mut wcs = poll_n(&cq, 2);
                wcs.sort_by_key(|w| w.wr_id);
                assert_ok(&wcs[0], 1, WcOpcode::Recv);
                assert_eq!(wcs[0].src_qp, qp.qp_num());
                assert_ok(&wcs[1], 10, WcOpcode::Send);
                assert_eq!(read_mr(&mr, 128, 9), b"to myself");
                assert_cq_empty(&ctx, &cq);
                assert_no_event(&ctx);
                continue;
            }
        }
        // The QP fails the request as responder and moves to ERR before
        // its own NAK comes back: the request is flushed with the rest.
        let (s, r) = split(&poll_n(&cq, 4));
        if case == "too small" {
            assert_err(&r[0], 1, WcStatus::LocLenErr, Syndrome::RecvTooSmall);
            assert_flushed(&r[1..], &[2]);
            assert_no_event(&ctx);
        } else {
            assert_flushed(&r, &[1, 2]);
            let ev = expect_event(&ctx);
            assert_eq!(
                (ev.event_type, ev.obj),
                (EventType::QpAccessErr, qp.qp_num()),
                "{ev:?}"
            );
            assert_no_event(&ctx);
        }
        assert_flushed(&s, &[10, 11]);
        assert_eq!(query_state(&qp), QpState::Err, "{case}");
        assert_cq_empty(&ctx, &cq);
        assert_all_sentinel(&mr);
    }
}

/// A send stalled on receiver-not-ready whose source MR is destroyed
/// meanwhile: the retry re-checks the lkey and fails LOC_PROT_ERR; the
/// responder's new receive is not consumed.
fn stalled_send_rechecks_its_keys(mode: ExecMode) {
    let (p, _mr_a, mr_b) = setup(mode, PairOpts::default());
    let src = p.mr(64, ALL_ACCESS);
    write_mr(&src, 0, b"gone");
    post_send(&p.a, send(1, &[sge(&src, 0, 4)]));
    assert_cq_empty(&p.ctx, &p.cq_a);
    src.destroy().map_err(|e| e.error).unwrap();
    post_recv(&p.b, recv(5, &[sge(&mr_b, 0, 64)]));
    assert_err(
        &poll_one(&p.cq_a),
        1,
        WcStatus::LocProtErr,
        Syndrome::BadLkey,
    );
    assert_states(&p, QpState::Err, QpState::Rts);
    assert_cq_empty(&p.ctx, &p.cq_b);
    assert_all_sentinel(&mr_b);
    p.assert_quiet();
}

both_modes!(
    wrong_lkey_flushes_the_rest,
    flushes_go_to_their_own_cqs,
    wrong_rkey,
    mr_lacking_remote_rights,
    qp_lacking_remote_rights,
    remote_out_of_bounds,
    remote_pd_mismatch,
    local_protection_errors,
    receive_buffer_too_small,
    receive_buffer_protection,
    rnr_retry_zero_fails,
    rnr_retry_waits_for_receive,
    rnr_retry_runs_out,
    destination_not_ready,
    misaligned_atomic,
    nothing_accepted_is_lost,
    write_with_imm_rkey_violations,
    read_and_atomic_need_responder_resources,
    rnr_stall_ends_when_a_side_goes_away,
    message_too_long,
    no_second_flush,
    loopback_to_self_errors,
    stalled_send_rechecks_its_keys,
);

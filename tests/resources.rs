//! Resource rules: objects in use cannot be destroyed (EBUSY, the object
//! handed back alive), destroying and dropping really free device objects
//! (checked on a device with room for one or two of each), creation
//! limits, and bad batches: a request the driver refuses stops the batch
//! at its index, the requests before it run, nothing after it does, and
//! the queues stay consistent.

use std::ptr::NonNull;

use rnic_hw_regs::bar0::{self, Ctrl};
use rnic_hw_regs::pci::BAR_REGS;
use rnic_queues::Hal;
use rnic_tests::*;

/// A device with room for one PD, one MR, one CQ and one QP.
fn tiny() -> EmuConfig {
    EmuConfig {
        max_pd: 1,
        max_mr: 1,
        max_cq: 1,
        max_qp: 3,
        ..EmuConfig::default()
    }
}

#[track_caller]
fn assert_busy<T>(r: Result<(), DestroyError<T>>) -> T {
    match r {
        Ok(()) => panic!("destroy succeeded; the object is in use"),
        Err(e) => {
            assert_eq!(e.error.kind(), ErrorKind::Busy, "{}", e.error);
            assert_eq!(e.error.errno(), 16);
            e.object.expect("a busy object is handed back")
        }
    }
}

#[track_caller]
fn assert_no_memory<T>(r: Result<T, Error>) {
    match r {
        Ok(_) => panic!("creation succeeded beyond the device's limit"),
        Err(e) => assert_eq!(e.kind(), ErrorKind::NoMemory, "{e}"),
    }
}

fn destroyed<T>(r: Result<(), DestroyError<T>>) {
    if let Err(e) = r {
        panic!("destroy failed: {}", e.error);
    }
}

/// A PD with an MR is busy; the PD handed back still works; once the MR is
/// gone the PD is destroyed and the device has room for a new one.
fn pd_with_mr_is_busy(mode: ExecMode) {
    let ctx = open_with(tiny(), mode);
    let pd = ctx.alloc_pd().unwrap();
    assert_no_memory(ctx.alloc_pd());
    let mr = pd.alloc_mr(64, ALL_ACCESS).unwrap();
    let pd = assert_busy(pd.destroy());
    // Still alive and still the owner of the MR.
    assert_eq!(mr.pd_num(), pd.pd_num());
    let cq = ctx.create_cq(4).unwrap();
    let qp = create_qp(&pd, &cq, &cq, cap(2, 1, 0), false);
    destroyed(qp.destroy());
    let pd = assert_busy(pd.destroy());
    destroyed(mr.destroy());
    destroyed(pd.destroy());
    let pd = ctx
        .alloc_pd()
        .expect("the freed PD's room is available again");
    destroyed(pd.destroy());
}

/// A PD with a QP is busy until the QP is destroyed.
fn pd_with_qp_is_busy(mode: ExecMode) {
    let ctx = open_with(tiny(), mode);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(4).unwrap();
    let qp = create_qp(&pd, &cq, &cq, cap(2, 1, 0), false);
    let pd = assert_busy(pd.destroy());
    // The QP still works, through the PD handed back.
    connect(&ctx, &qp, qp.qp_num(), &Conn::default());
    let mr = pd.alloc_mr(64, ALL_ACCESS).unwrap();
    write_mr(&mr, 0, b"ping");
    post_recv(&qp, recv(1, &[sge(&mr, 32, 8)]));
    post_send(&qp, send(2, &[sge(&mr, 0, 4)]));
    let wcs = poll_n(&cq, 2);
    assert_ok(&wcs[0], 1, WcOpcode::Recv);
    assert_ok(&wcs[1], 2, WcOpcode::Send);
    assert_eq!(read_mr(&mr, 32, 4), b"ping");
    destroyed(mr.destroy());
    let pd = assert_busy(pd.destroy());
    destroyed(qp.destroy());
    destroyed(pd.destroy());
    destroyed(cq.destroy());
    let _ = ctx.alloc_pd().expect("PD room after destroy");
    let _ = ctx.create_cq(4).expect("CQ room after destroy");
}

/// A CQ is busy while any QP uses it, as send or receive CQ.
fn cq_with_qp_is_busy(mode: ExecMode) {
    let ctx = open(mode);
    let pd = ctx.alloc_pd().unwrap();
    let scq = ctx.create_cq(8).unwrap();
    let rcq = ctx.create_cq(8).unwrap();
    let qp = create_qp(&pd, &scq, &rcq, cap(2, 1, 0), false);
    let scq = assert_busy(scq.destroy());
    let rcq = assert_busy(rcq.destroy());
    // Both still deliver completions.
    connect(&ctx, &qp, qp.qp_num(), &Conn::default());
    let mr = pd.alloc_mr(64, ALL_ACCESS).unwrap();
    post_recv(&qp, recv(1, &[sge(&mr, 0, 8)]));
    post_send(&qp, send(2, &[sge(&mr, 8, 8)]));
    assert_ok(&poll_one(&rcq), 1, WcOpcode::Recv);
    assert_ok(&poll_one(&scq), 2, WcOpcode::Send);
    destroyed(qp.destroy());
    destroyed(scq.destroy());
    destroyed(rcq.destroy());
}

/// Dropping objects in any order is safe, and frees everything on the
/// device once the last one goes.
fn drop_in_any_order_frees_everything(mode: ExecMode) {
    let ctx = open_with(tiny(), mode);
    for order in 0..4 {
        let pd = ctx.alloc_pd().expect("PD");
        let mr = pd.alloc_mr(64, ALL_ACCESS).expect("MR");
        let cq = ctx.create_cq(4).expect("CQ");
        let qp = create_qp(&pd, &cq, &cq, cap(2, 1, 0), false);
        connect(&ctx, &qp, qp.qp_num(), &Conn::default());
        post_recv(&qp, recv(order, &[sge(&mr, 0, 8)]));
        match order {
            0 => drop((pd, cq, mr, qp)),
            1 => drop((qp, mr, cq, pd)),
            2 => drop((cq, qp, pd, mr)),
            _ => drop((mr, pd, qp, cq)),
        }
    }
    // The context outliving nothing: objects keep the device alive.
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd.alloc_mr(64, ALL_ACCESS).unwrap();
    drop(ctx);
    drop(pd);
    write_mr(&mr, 0, b"alive");
    assert_eq!(read_mr(&mr, 0, 5), b"alive");
}

/// Object limits: creating beyond them fails with ENOMEM, and destroying
/// one makes room.
fn object_limits(mode: ExecMode) {
    let cfg = EmuConfig {
        max_qp: 4,
        max_cq: 2,
        max_mr: 2,
        ..EmuConfig::default()
    };
    let ctx = open_with(cfg, mode);
    let pd = ctx.alloc_pd().unwrap();
    let cq1 = ctx.create_cq(4).unwrap();
    let cq2 = ctx.create_cq(4).unwrap();
    assert_no_memory(ctx.create_cq(4));
    let mr1 = pd.alloc_mr(64, 0).unwrap();
    let _mr2 = pd.alloc_mr(64, 0).unwrap();
    assert_no_memory(pd.alloc_mr(64, 0));
    let qp1 = create_qp(&pd, &cq1, &cq1, cap(2, 1, 0), false);
    let qp2 = create_qp(&pd, &cq2, &cq2, cap(2, 1, 0), false);
    let third = pd.create_qp(&QpInit {
        send_cq: &cq1,
        recv_cq: &cq2,
        srq: None,
        cap: cap(2, 1, 0),
        qp_type: QpType::Rc,
        sq_sig_all: false,
    });
    assert_no_memory(third);
    assert!(
        qp1.qp_num() >= 2 && qp2.qp_num() >= 2,
        "QPNs 0 and 1 are reserved"
    );
    destroyed(qp1.destroy());
    destroyed(mr1.destroy());
    let _ = create_qp(&pd, &cq1, &cq2, cap(2, 1, 0), false);
    let _ = pd.alloc_mr(64, 0).unwrap();
}

/// Bad creation parameters are refused with EINVAL (or EOPNOTSUPP).
fn bad_creation_parameters(mode: ExecMode) {
    let ctx = open(mode);
    let d = ctx.query_device().unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(4).unwrap();
    let inval = |r: Result<(), Error>, what: &str| {
        let e = r.expect_err(what);
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{what}: {e}");
    };
    let qp = |cap: QpCap, ty: QpType| {
        pd.create_qp(&QpInit {
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            cap,
            qp_type: ty,
            sq_sig_all: false,
        })
        .map(drop)
    };
    inval(qp(cap(4, d.max_sge + 1, 0), QpType::Rc), "max_sge + 1");
    inval(
        qp(cap(4, 1, d.max_inline_data + 1), QpType::Rc),
        "max_inline + 1",
    );
    inval(qp(cap(d.max_qp_wr + 1, 1, 0), QpType::Rc), "max_qp_wr + 1");
    inval(ctx.create_cq(0).map(drop), "CQ of 0 entries");
    inval(ctx.create_cq(d.max_cqe + 1).map(drop), "CQ over max_cqe");
    inval(
        pd.alloc_mr(64, access::REMOTE_WRITE).map(drop),
        "REMOTE_WRITE without LOCAL_WRITE",
    );
    inval(
        pd.alloc_mr(64, access::REMOTE_ATOMIC).map(drop),
        "REMOTE_ATOMIC without LOCAL_WRITE",
    );
    inval(pd.alloc_mr(64, 1 << 5).map(drop), "an unknown access bit");
    // The largest valid ones are accepted.
    qp(cap(4, d.max_sge, 0), QpType::Rc).expect("max_sge");
    qp(cap(4, 1, d.max_inline_data), QpType::Rc).expect("max_inline");
    pd.alloc_mr(64, access::REMOTE_READ)
        .expect("REMOTE_READ alone");
}

/// A send batch with too many SGEs at index 2: `PostError.index == 2`,
/// requests 0 and 1 complete, request 3 never runs; the queue works on.
fn send_batch_stops_at_bad_request(mode: ExecMode) {
    let p = Pair::with(
        mode,
        PairOpts {
            cap: cap(8, 2, 0),
            ..PairOpts::default()
        },
    );
    let mr_a = p.mr(1024, ALL_ACCESS);
    let mr_b = p.mr(1024, ALL_ACCESS);
    write_mr(&mr_a, 0, &pattern(1, 1024));
    for i in 0..4 {
        post_recv(&p.b, recv(100 + i, &[sge(&mr_b, i as usize * 64, 64)]));
    }
    let too_many: Vec<Sge> = (0..p.a.cap().max_send_sge + 1)
        .map(|i| sge(&mr_a, i as usize, 1))
        .collect();
    let one = [sge(&mr_a, 0, 10)];
    let two = [sge(&mr_a, 10, 10)];
    let four = [sge(&mr_a, 30, 10)];
    let e =
        p.a.post_send(&[
            send(0, &one),
            send(1, &two),
            send(2, &too_many),
            send(3, &four),
        ])
        .expect_err("too many SGEs");
    assert_eq!(e.index, 2, "{e}");
    assert_eq!(e.error.kind(), ErrorKind::InvalidArgument, "{e}");
    let s = poll_n(&p.cq_a, 2);
    assert_ok(&s[0], 0, WcOpcode::Send);
    assert_ok(&s[1], 1, WcOpcode::Send);
    let r = poll_n(&p.cq_b, 2);
    assert_ok(&r[0], 100, WcOpcode::Recv);
    assert_ok(&r[1], 101, WcOpcode::Recv);
    assert_eq!(read_mr(&mr_b, 0, 10), pattern(1, 1024)[0..10]);
    assert_eq!(read_mr(&mr_b, 64, 10), pattern(1, 1024)[10..20]);
    p.assert_quiet();

    // Other refusals at index 0 and 1 of a batch.
    let inline_too_big = vec![0u8; p.a.cap().max_inline_data as usize + 1];
    let short = [sge(&mr_a, 0, 4)];
    // An entry over 2^31 bytes.
    let huge = [Sge {
        length: (1 << 31) + 1,
        ..sge(&mr_a, 0, 4)
    }];
    let cases: Vec<(usize, SendWr)> = vec![
        (
            1,
            SendWr {
                payload: Payload::Inline(&inline_too_big),
                ..send(9, &[])
            },
        ),
        (
            0,
            SendWr {
                op: SendOp::RdmaRead {
                    remote: RemoteAddr {
                        addr: mr_b.addr(),
                        rkey: mr_b.rkey(),
                    },
                },
                payload: Payload::Inline(b"no"),
                ..send(9, &[])
            },
        ),
        (
            1,
            SendWr {
                op: SendOp::AtomicFetchAndAdd {
                    remote: RemoteAddr {
                        addr: mr_b.addr(),
                        rkey: mr_b.rkey(),
                    },
                    add: 1,
                },
                ..send(9, &short)
            },
        ),
        (
            0,
            SendWr {
                flags: 1 << 7,
                ..send(9, &one)
            },
        ),
        (1, send(9, &huge)),
    ];
    // b's receives are used in order: 102 and 103 are still posted.
    let (mut next_ok, mut consumed, mut posted) = (10, 102u64, 104u64);
    for (index, bad) in cases {
        let mut batch = Vec::new();
        if index == 1 {
            batch.push(send(next_ok, &four));
        }
        batch.push(bad);
        batch.push(send(99, &four));
        let e = p.a.post_send(&batch).expect_err("refused request");
        assert_eq!(
            (e.index, e.error.kind()),
            (index, ErrorKind::InvalidArgument),
            "{e}"
        );
        if index == 1 {
            assert_ok(&poll_one(&p.cq_a), next_ok, WcOpcode::Send);
            assert_ok(&poll_one(&p.cq_b), consumed, WcOpcode::Recv);
            next_ok += 1;
            consumed += 1;
            post_recv(
                &p.b,
                recv(posted, &[sge(&mr_b, posted as usize % 16 * 64, 64)]),
            );
            posted += 1;
        }
        p.assert_quiet();
    }
    // Empty batches post nothing.
    p.a.post_send(&[]).expect("empty send batch");
    p.b.post_recv(&[]).expect("empty receive batch");
    p.assert_quiet();
    // The queue is intact: the next request runs.
    post_send(&p.a, send(50, &four));
    assert_ok(&poll_one(&p.cq_a), 50, WcOpcode::Send);
    assert_ok(&poll_one(&p.cq_b), consumed, WcOpcode::Recv);
    let at = consumed as usize % 16 * 64;
    assert_eq!(read_mr(&mr_b, at, 10), pattern(1, 1024)[30..40]);
    assert_eq!(query_state(&p.a), QpState::Rts);
}

/// A receive batch with too many SGEs at index 2: receives 0 and 1 are
/// posted (and used), 2 and 3 are not.
fn recv_batch_stops_at_bad_request(mode: ExecMode) {
    let p = Pair::with(
        mode,
        PairOpts {
            cap: cap(8, 2, 0),
            ..PairOpts::default()
        },
    );
    let mr_a = p.mr(256, ALL_ACCESS);
    let mr_b = p.mr(256, ALL_ACCESS);
    let too_many: Vec<Sge> = (0..p.b.cap().max_recv_sge + 1)
        .map(|i| sge(&mr_b, i as usize, 1))
        .collect();
    let e =
        p.b.post_recv(&[
            recv(0, &[sge(&mr_b, 0, 16)]),
            recv(1, &[sge(&mr_b, 16, 16)]),
            recv(2, &too_many),
            recv(3, &[sge(&mr_b, 32, 16)]),
        ])
        .expect_err("too many SGEs");
    assert_eq!(
        (e.index, e.error.kind()),
        (2, ErrorKind::InvalidArgument),
        "{e}"
    );
    p.a.post_send(&[send(10, &[sge(&mr_a, 0, 4)]), send(11, &[sge(&mr_a, 0, 4)])])
        .unwrap();
    assert_eq!(
        poll_n(&p.cq_a, 2)
            .iter()
            .map(|w| w.wr_id)
            .collect::<Vec<_>>(),
        [10, 11]
    );
    let r = poll_n(&p.cq_b, 2);
    assert_ok(&r[0], 0, WcOpcode::Recv);
    assert_ok(&r[1], 1, WcOpcode::Recv);
    // Nothing else was posted: a flush finds no receive.
    set_state(&p.b, QpState::Err).unwrap();
    p.assert_quiet();
}

/// A full send queue refuses with ENOMEM at the first request that does
/// not fit; nothing posted is lost or corrupted, and room returns as
/// completions are polled.
fn full_send_queue(mode: ExecMode) {
    let p = Pair::with(
        mode,
        PairOpts {
            cap: cap(16, 1, 0),
            ..PairOpts::default()
        },
    );
    let n = p.a.cap().max_send_wr as u64;
    assert_eq!(p.b.cap().max_recv_wr as u64, n);
    let mr_a = p.mr(64 * 2 * n as usize, ALL_ACCESS);
    let mr_b = p.mr(64 * 2 * n as usize, ALL_ACCESS);
    let slots: Vec<[Sge; 1]> = (0..2 * n as usize)
        .map(|i| [sge(&mr_a, i * 64, 64)])
        .collect();
    for i in 0..2 * n as usize {
        write_mr(&mr_a, i * 64, &pattern(i as u64, 64));
    }
    let post_recvs = |from: u64| {
        for i in from..from + n {
            post_recv(&p.b, recv(i, &[sge(&mr_b, i as usize * 64, 64)]));
        }
    };
    post_recvs(0);
    let full =
        p.b.post_recv(&[recv(999, &[sge(&mr_b, 0, 64)])])
            .expect_err("RQ full");
    assert_eq!(
        (full.index, full.error.kind()),
        (0, ErrorKind::NoMemory),
        "{full}"
    );
    assert_eq!(full.error.errno(), 12);

    for i in 0..n {
        post_send(&p.a, send(i, &slots[i as usize]));
    }
    let e = p.a.post_send(&[send(n, &slots[0])]).expect_err("SQ full");
    assert_eq!((e.index, e.error.kind()), (0, ErrorKind::NoMemory), "{e}");
    assert_eq!(e.error.errno(), 12);
    let e =
        p.a.post_send(&[send(n, &slots[0]), send(n + 1, &slots[0])])
            .expect_err("SQ full");
    assert_eq!(e.index, 0, "{e}");

    let check = |from: u64| {
        let s = poll_n(&p.cq_a, n as usize);
        let r = poll_n(&p.cq_b, n as usize);
        for i in 0..n {
            assert_ok(&s[i as usize], from + i, WcOpcode::Send);
            assert_ok(&r[i as usize], from + i, WcOpcode::Recv);
            let at = (from + i) as usize * 64;
            assert_eq!(
                read_mr(&mr_b, at, 64),
                pattern(from + i, 64),
                "message {}",
                from + i
            );
        }
    };
    check(0);
    // Room again: a batch larger than the queue posts what fits.
    post_recvs(n);
    let batch: Vec<SendWr> = (n..n + n + 3)
        .map(|i| send(i, &slots[i.min(2 * n - 1) as usize]))
        .collect();
    let e = p.a.post_send(&batch).expect_err("batch over capacity");
    assert_eq!(
        (e.index, e.error.kind()),
        (n as usize, ErrorKind::NoMemory),
        "{e}"
    );
    check(n);
    p.assert_quiet();
}

/// Inline payloads: exactly `max_inline_data` is accepted, one byte more
/// is refused at its index.
fn inline_limit(mode: ExecMode) {
    let p = Pair::new(mode);
    let mr_b = p.mr(1024, ALL_ACCESS);
    let max = p.a.cap().max_inline_data as usize;
    let ok = pattern(3, max);
    let over = pattern(4, max + 1);
    post_recv(&p.b, recv(1, &[sge(&mr_b, 0, 1024)]));
    let inline = |wr_id, data| SendWr {
        wr_id,
        op: SendOp::Send,
        payload: Payload::Inline(data),
        flags: send_flags::SIGNALED,
    };
    let e =
        p.a.post_send(&[inline(1, &ok), inline(2, &over)])
            .expect_err("inline over the limit");
    assert_eq!(
        (e.index, e.error.kind()),
        (1, ErrorKind::InvalidArgument),
        "{e}"
    );
    assert!(e.error.message().contains("inline"), "{e}");
    assert_ok(&poll_one(&p.cq_a), 1, WcOpcode::Send);
    let r = poll_one(&p.cq_b);
    assert_ok(&r, 1, WcOpcode::Recv);
    assert_eq!(r.byte_len as usize, max);
    assert_eq!(read_mr(&mr_b, 0, max), ok);
    p.assert_quiet();
}

/// Destroying a QP removes its unpolled completions from a CQ it shares
/// with another QP; the other's stay, in order.
fn destroy_removes_its_completions(mode: ExecMode) {
    let ctx = open(mode);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let mr = pd.alloc_mr(256, ALL_ACCESS).unwrap();
    let x = create_qp(&pd, &cq, &cq, cap(4, 1, 0), false);
    let y = create_qp(&pd, &cq, &cq, cap(4, 1, 0), false);
    for qp in [&x, &y] {
        connect(&ctx, qp, qp.qp_num(), &Conn::default());
    }
    for (i, qp) in [&x, &y, &x, &y].into_iter().enumerate() {
        post_recv(qp, recv(i as u64, &[sge(&mr, 128, 64)]));
        post_send(qp, send(i as u64 + 10, &[sge(&mr, 0, 8)]));
    }
    settle(&ctx);
    let yqpn = y.qp_num();
    destroyed(y.destroy());
    let wcs = poll_n(&cq, 4);
    // x's completions, each queue's in order (a receive completes when its
    // SEND arrives, the SEND when its ACK does: the two interleave as the
    // transport pipelines).
    let of = |op| -> Vec<u64> {
        wcs.iter()
            .filter(|w| w.opcode == op)
            .map(|w| w.wr_id)
            .collect()
    };
    assert_eq!(of(WcOpcode::Recv), [0, 2], "{wcs:#?}");
    assert_eq!(of(WcOpcode::Send), [10, 12], "{wcs:#?}");
    assert!(wcs
        .iter()
        .all(|w| w.qp_num == x.qp_num() && w.qp_num != yqpn));
    assert_cq_empty(&ctx, &cq);
    // x goes on working.
    post_recv(&x, recv(5, &[sge(&mr, 128, 64)]));
    post_send(&x, send(15, &[sge(&mr, 0, 8)]));
    let mut ids: Vec<u64> = poll_n(&cq, 2).iter().map(|w| w.wr_id).collect();
    ids.sort();
    assert_eq!(ids, [5, 15]);
}

/// Dropping everything with work outstanding (a send stalled on
/// receiver-not-ready, receives posted, completions unpolled, an armed
/// CQ) finishes: nothing hangs and the device thread stops.
fn drop_with_work_outstanding(mode: ExecMode) {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let p = Pair::new(mode);
        let mr = p.mr(64, ALL_ACCESS);
        post_recv(&p.a, recv(1, &[sge(&mr, 0, 8)]));
        post_send(&p.b, send(2, &[sge(&mr, 0, 8)]));
        post_send(&p.a, send(3, &[sge(&mr, 0, 8)]));
        post_send(&p.a, send(4, &[sge(&mr, 0, 8)]));
        p.cq_b.arm(false);
        settle(&p.ctx);
        drop(p);
        drop(mr);
        tx.send(()).unwrap();
    });
    rx.recv_timeout(TIMEOUT)
        .expect("dropping a pair with outstanding work did not finish");
}

/// A device that stops answering commands (reset behind the driver's
/// back). A destroy that times out gives the object up: it is not handed
/// back, and its number is never named again (the device may have given
/// it to a new object); a registered user buffer is cut off from the
/// device, so it may be freed at once. Once the command queue's entries
/// are all still the device's, a command is not even issued: the error
/// says so, and a destroy hands the object back. Dropping everything
/// afterwards is safe.
fn unanswered_commands(mode: ExecMode) {
    let driver = DriverConfig {
        cmd_timeout_ns: 20_000_000,
        log_cmdq_size: 1,
        ..DriverConfig::default()
    };
    let ctx = open_with_driver(EmuConfig::default(), driver, mode);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let qp = create_qp(&pd, &cq, &cq, cap(4, 1, 0), false);
    let mr = pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    let mut user = vec![0u8; 8192];
    let ptr = NonNull::new(user.as_mut_ptr()).unwrap();
    // SAFETY: `user` lives until the MR is gone and its IOVAs retired (the
    // emulated platform can retire IOVAs).
    let umr = unsafe { pd.reg_mr(ptr, user.len(), ALL_ACCESS) }.unwrap();
    let reset = Ctrl::new().with_reset(true).into_bits().to_ne();
    ctx.hal().mmio_write32(BAR_REGS, bar0::CTRL, reset);

    // Two command queue entries: two commands time out.
    let e = qp.destroy().unwrap_err();
    assert!(e.object.is_none(), "the QP is gone: {e}");
    assert_eq!(e.error.kind(), ErrorKind::TimedOut);
    assert!(!e.error.is_not_issued());
    let e = umr.destroy().unwrap_err();
    assert!(e.object.is_none(), "the MR is gone: {e}");
    drop(user);
    // Both entries are still the device's: nothing more is issued.
    let e = mr.destroy().unwrap_err();
    assert_eq!(e.error.kind(), ErrorKind::TimedOut);
    assert!(e.error.is_not_issued(), "{}", e.error);
    let mr = e.object.expect("a command not issued hands the MR back");
    let e = ctx.create_cq(8).err().unwrap();
    assert!(e.is_not_issued(), "{e}");
    let e = cq.destroy().unwrap_err();
    assert!(e.error.is_not_issued(), "{}", e.error);
    let cq = e.object.expect("handed back");
    drop((mr, cq, pd, ctx));
}

/// A CQ resized with completions waiting keeps them, in order, and goes
/// on taking completions at its new size, smaller or larger; a size below
/// the waiting completions is refused.
fn resize_cq(mode: ExecMode) {
    let ctx = open(mode);
    let pd = ctx.alloc_pd().unwrap();
    let scq = ctx.create_cq(4).unwrap();
    let rcq = ctx.create_cq(4).unwrap();
    let qp = create_qp(&pd, &scq, &rcq, cap(128, 1, 64), true);
    connect(&ctx, &qp, qp.qp_num(), &Conn::default());
    let mr = pd.alloc_mr(64, ALL_ACCESS).unwrap();
    let mut next = 0u64;
    let mut post = |n: u64| {
        for _ in 0..n {
            post_send(
                &qp,
                write(next, &[sge(&mr, 0, 8)], mr.addr() + 8, mr.rkey()),
            );
            next += 1;
        }
    };
    let mut seen = 0u64;
    let mut take = |n: usize| {
        for wc in poll_n(&scq, n) {
            assert_ok(&wc, seen, WcOpcode::RdmaWrite);
            seen += 1;
        }
    };
    post(3);
    settle(&ctx);
    let e = scq.resize(2).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert_eq!(scq.cqe(), 4);
    scq.resize(100).unwrap();
    assert_eq!(scq.cqe(), 128);
    take(3);
    // Past the old ring's end, then down to 8 with five waiting.
    for _ in 0..3 {
        post(100);
        take(100);
    }
    post(5);
    settle(&ctx);
    scq.resize(8).unwrap();
    assert_eq!(scq.cqe(), 8);
    take(5);
    for _ in 0..10 {
        post(7);
        take(7);
    }
    assert_eq!(seen, 378);
    assert_cq_empty(&ctx, &scq);
    let e = scq.resize(0).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
}

both_modes!(
    unanswered_commands,
    resize_cq,
    pd_with_mr_is_busy,
    pd_with_qp_is_busy,
    cq_with_qp_is_busy,
    drop_in_any_order_frees_everything,
    object_limits,
    bad_creation_parameters,
    send_batch_stops_at_bad_request,
    recv_batch_stops_at_bad_request,
    full_send_queue,
    inline_limit,
    destroy_removes_its_completions,
    drop_with_work_outstanding,
);

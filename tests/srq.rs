//! Shared receive queues between two NICs on the in-memory switch, in both
//! execution modes: RC, UC and UD QPs taking from one SRQ (in another PD
//! than theirs), WQEs consumed in the order posted and completed in any
//! order, the ring reused many times over; the limit event; receiver not
//! ready until a post; resizing with requests outstanding; a message cut
//! off halfway keeping its WQE until its QP leaves service, then giving
//! it back (LAST_WQE_REACHED, a REM_ABORT_ERR completion, the slot free
//! again);
//! and the driver's checks.

use rnic_emu::wire::opcode;
use rnic_emu::wire::roce::RoceRepr;
use rnic_tests::fabric::{Fabric, Nic};
use rnic_tests::peer::Peer;
use rnic_tests::*;

const QKEY: u32 = 0x5151_0000;
/// Receive buffers: room for a GRH and a 4 KiB message.
const SLOT: usize = GRH_LEN + 4096;

/// A QP of `qp_type` in `pd`, completing into `cq`, taking receives from
/// `srq` if given.
fn qp(pd: &EPd, cq: &ECq, srq: Option<&Srq<EmuHal>>, qp_type: QpType) -> EQp {
    pd.create_qp(&QpInit {
        send_cq: cq,
        recv_cq: cq,
        srq,
        // Receive capacities are ignored on an SRQ, however large.
        cap: QpCap {
            max_send_wr: 32,
            max_recv_wr: if srq.is_some() { 1 << 20 } else { 8 },
            max_send_sge: 1,
            max_recv_sge: if srq.is_some() { 99 } else { 1 },
            max_inline_data: 0,
        },
        qp_type,
        sq_sig_all: false,
    })
    .unwrap()
}

/// RESET → RTS with the masks of `qp`'s type, connected to `dest` on
/// `peer` (RC, UC; a UD QP takes `QKEY`).
fn up(qp: &EQp, peer: &Nic, dest: u32) {
    let c = Conn::default();
    match qp.qp_type() {
        QpType::Rc => connect_to(&peer.ctx, qp, dest, &c),
        QpType::Uc => {
            let (init, _) = init_attr(&c);
            qp.modify(
                &init,
                qp_attr::STATE | qp_attr::PKEY_INDEX | qp_attr::PORT | qp_attr::ACCESS_FLAGS,
            )
            .unwrap();
            let (rtr, _) = rtr_attr(&peer.ctx, dest, &c);
            let m = qp_attr::STATE
                | qp_attr::AV
                | qp_attr::PATH_MTU
                | qp_attr::DEST_QPN
                | qp_attr::RQ_PSN;
            qp.modify(&rtr, m).unwrap();
            let (rts, _) = rts_attr(&c);
            qp.modify(&rts, qp_attr::STATE | qp_attr::SQ_PSN).unwrap();
        }
        _ => {
            let init = QpAttr {
                qp_state: QpState::Init,
                port_num: 1,
                qkey: QKEY,
                ..QpAttr::default()
            };
            qp.modify(
                &init,
                qp_attr::STATE | qp_attr::PKEY_INDEX | qp_attr::PORT | qp_attr::QKEY,
            )
            .unwrap();
            set_state(qp, QpState::Rtr).unwrap();
            let (rts, _) = rts_attr(&c);
            qp.modify(&rts, qp_attr::STATE | qp_attr::SQ_PSN).unwrap();
        }
    }
}

/// Posts `n` receives of one slot each on `srq`: buffer `first + i`,
/// work request ID `1000 + first + i`.
fn post_slots(srq: &Srq<EmuHal>, mr: &EMr, first: usize, n: usize) {
    let sges: Vec<[Sge; 1]> = (first..first + n)
        .map(|i| [mr.sge(i * SLOT, SLOT as u32).unwrap()])
        .collect();
    let wrs: Vec<RecvWr<'_>> = sges
        .iter()
        .enumerate()
        .map(|(k, sg)| RecvWr {
            wr_id: 1000 + (first + k) as u64,
            sg_list: sg,
        })
        .collect();
    srq.post_recv(&wrs).unwrap();
}

/// Sends `data` on `qp` from `mr`'s start: a SEND on RC or UC, a UD SEND
/// to QP `dest` through `ah` otherwise.
fn send(qp: &EQp, mr: &EMr, data: &[u8], wr_id: u64, ud: Option<(&Ah<EmuHal>, u32)>) {
    mr.write(0, data).unwrap();
    let sg = [mr.sge(0, data.len() as u32).unwrap()];
    let op = match ud {
        Some((ah, dest)) => SendOp::UdSend {
            dest: ah.dest(dest, QKEY),
            imm: None,
        },
        None => SendOp::Send,
    };
    qp.post_send(&[SendWr {
        wr_id,
        op,
        payload: Payload::Sgl(&sg),
        flags: send_flags::SIGNALED,
    }])
    .unwrap();
}

fn bytes(len: usize, seed: u64) -> Vec<u8> {
    pattern(seed, len)
}

fn srq_of(pd: &EPd, max_wr: u32) -> Srq<EmuHal> {
    pd.create_srq(&SrqAttr {
        max_wr,
        max_sge: 1,
        srq_limit: 0,
    })
    .unwrap()
}

fn shared_by_rc_uc_ud(mode: ExecMode) {
    let f = Fabric::new(mode, 2, 1);
    let (na, nb) = (&f.nics[0], &f.nics[1]);
    // B: the SRQ and its buffers in one PD, the QPs in another.
    let (srq_pd, qp_pd) = (nb.ctx.alloc_pd().unwrap(), nb.ctx.alloc_pd().unwrap());
    let srq = srq_of(&srq_pd, 8);
    assert_eq!(srq.attr().max_wr, 15, "16 slots, one ending the list");
    assert_eq!(srq.attr().max_sge, 1);
    let mr_b = srq_pd.alloc_mr(8 * SLOT, access::LOCAL_WRITE).unwrap();
    let cq_b = nb.ctx.create_cq(64).unwrap();
    let types = [QpType::Rc, QpType::Uc, QpType::Ud];
    let qps_b: Vec<EQp> = types
        .iter()
        .map(|&t| qp(&qp_pd, &cq_b, Some(&srq), t))
        .collect();
    for q in &qps_b {
        assert_eq!(q.srq_num(), Some(srq.srq_num()));
        assert_eq!((q.cap().max_recv_wr, q.cap().max_recv_sge), (0, 0));
    }
    // A: one QP of each type.
    let pd_a = na.ctx.alloc_pd().unwrap();
    let cq_a = na.ctx.create_cq(64).unwrap();
    let mr_a = pd_a.alloc_mr(SLOT, access::LOCAL_WRITE).unwrap();
    let qps_a: Vec<EQp> = types.iter().map(|&t| qp(&pd_a, &cq_a, None, t)).collect();
    for (a, b) in qps_a.iter().zip(&qps_b) {
        up(a, nb, b.qp_num());
        up(b, na, a.qp_num());
    }
    let ah = pd_a
        .create_ah(&AhAttr {
            dgid: nb.ctx.query_gid(1, 0).unwrap(),
            is_global: true,
            port_num: 1,
            ..AhAttr::default()
        })
        .unwrap();
    post_slots(&srq, &mr_b, 0, 8);
    // Three rounds of the ring for each type in turn; RC and UC messages
    // take three packets at MTU 1024.
    for k in 0..24u64 {
        let t = (k % 3) as usize;
        let len = [3000, 2500, 1000][t];
        let data = bytes(len, k);
        let ud = (types[t] == QpType::Ud).then_some((&ah, qps_b[2].qp_num()));
        send(&qps_a[t], &mr_a, &data, k, ud);
        assert_ok(&f.wait_one(&cq_a), k, WcOpcode::Send);
        let wc = f.wait_one(&cq_b);
        // The WQEs are taken in the order they were posted.
        let slot = (k % 8) as usize;
        assert_ok(&wc, 1000 + slot as u64, WcOpcode::Recv);
        assert_eq!(wc.qp_num, qps_b[t].qp_num(), "message {k}");
        let at = if types[t] == QpType::Ud {
            assert_eq!(wc.byte_len as usize, GRH_LEN + len);
            assert_eq!(wc.src_qp, qps_a[2].qp_num());
            slot * SLOT + GRH_LEN
        } else {
            assert_eq!(wc.byte_len as usize, len);
            slot * SLOT
        };
        assert_eq!(read_mr(&mr_b, at, len), data, "message {k}");
        post_slots(&srq, &mr_b, slot, 1);
    }
    // A QP on an SRQ has no receive queue of its own.
    let sg = [mr_b.sge(0, 8).unwrap()];
    let e = qps_b[0].post_recv(&[recv(1, &sg)]).unwrap_err();
    assert_eq!(e.error.kind(), ErrorKind::InvalidArgument);
    // The SRQ is busy while QPs use it.
    let e = srq.destroy().unwrap_err();
    assert_eq!(e.error.kind(), ErrorKind::Busy);
    let srq = e.object.unwrap();
    drop(qps_b);
    srq.destroy().unwrap();
    assert!(f.settle_all(&cq_b).is_empty());
}

#[test]
fn rc_uc_and_ud_share_an_srq_inline_device() {
    shared_by_rc_uc_ud(ExecMode::Inline);
}

#[test]
fn rc_uc_and_ud_share_an_srq_device_thread() {
    shared_by_rc_uc_ud(ExecMode::Thread);
}

/// Two RC QPs filling WQEs of one SRQ at once with 16 KiB messages: each
/// WQE holds one whole message of one QP, completions come in any order,
/// and every slot is free again once they are polled.
fn interleaved(mode: ExecMode) {
    const N: usize = 8;
    const MSG: usize = 16 << 10;
    let f = Fabric::new(mode, 2, 2);
    let (na, nb) = (&f.nics[0], &f.nics[1]);
    let pd_b = nb.ctx.alloc_pd().unwrap();
    let srq = srq_of(&pd_b, 2 * N as u32);
    let mr_b = pd_b.alloc_mr(2 * N * MSG, access::LOCAL_WRITE).unwrap();
    let cq_b = nb.ctx.create_cq(64).unwrap();
    let pd_a = na.ctx.alloc_pd().unwrap();
    let cq_a = na.ctx.create_cq(64).unwrap();
    let mr_a = pd_a.alloc_mr(2 * N * MSG, access::LOCAL_WRITE).unwrap();
    let qb: Vec<EQp> = (0..2)
        .map(|_| qp(&pd_b, &cq_b, Some(&srq), QpType::Rc))
        .collect();
    let qa: Vec<EQp> = (0..2).map(|_| qp(&pd_a, &cq_a, None, QpType::Rc)).collect();
    for (a, b) in qa.iter().zip(&qb) {
        up(a, nb, b.qp_num());
        up(b, na, a.qp_num());
    }
    let post_all = |first: u64| {
        let sges: Vec<[Sge; 1]> = (0..2 * N)
            .map(|i| [mr_b.sge(i * MSG, MSG as u32).unwrap()])
            .collect();
        let wrs: Vec<RecvWr<'_>> = sges
            .iter()
            .enumerate()
            .map(|(i, sg)| recv(first + i as u64, sg))
            .collect();
        srq.post_recv(&wrs).unwrap();
    };
    post_all(0);
    // The rest of its 31 requests, which no message takes, fill it.
    let sg = [mr_b.sge(0, 8).unwrap()];
    let room = srq.attr().max_wr as usize - 2 * N;
    let fill: Vec<RecvWr<'_>> = (0..room).map(|i| recv(500 + i as u64, &sg)).collect();
    srq.post_recv(&fill).unwrap();
    let e = srq.post_recv(&[recv(99, &sg)]).unwrap_err();
    assert_eq!(e.error.kind(), ErrorKind::NoMemory);
    // Both QPs' messages go out together, interleaved on the wire.
    for m in 0..N {
        for (q, a) in qa.iter().enumerate() {
            let at = (q * N + m) * MSG;
            write_mr(&mr_a, at, &bytes(MSG, (q * 100 + m) as u64));
            a.post_send(&[SendWr {
                wr_id: (q * 100 + m) as u64,
                op: SendOp::Send,
                payload: Payload::Sgl(&[mr_a.sge(at, MSG as u32).unwrap()]),
                flags: send_flags::SIGNALED,
            }])
            .unwrap();
        }
    }
    for _ in 0..2 * N {
        assert_eq!(f.wait_one(&cq_a).status, WcStatus::Success);
    }
    let mut seen = [0usize; 2];
    let mut slots = Vec::new();
    for _ in 0..2 * N {
        let wc = f.wait_one(&cq_b);
        assert_eq!(wc.status, WcStatus::Success);
        assert_eq!(wc.byte_len as usize, MSG);
        let q = qb.iter().position(|b| b.qp_num() == wc.qp_num).unwrap();
        // Each QP's messages arrive in its order, each in a whole WQE.
        let got = read_mr(&mr_b, wc.wr_id as usize * MSG, MSG);
        assert_eq!(got, bytes(MSG, (q * 100 + seen[q]) as u64), "QP {q}");
        seen[q] += 1;
        slots.push(wc.wr_id);
    }
    slots.sort_unstable();
    assert_eq!(slots, (0..2 * N as u64).collect::<Vec<_>>());
    assert_eq!(seen, [N, N]);
    // Every slot is free again.
    post_all(100);
    assert_eq!(
        srq.post_recv(&[recv(99, &sg)]).unwrap_err().error.kind(),
        ErrorKind::NoMemory
    );
}

#[test]
fn messages_of_two_qps_fill_one_srq_inline_device() {
    interleaved(ExecMode::Inline);
}

#[test]
fn messages_of_two_qps_fill_one_srq_device_thread() {
    interleaved(ExecMode::Thread);
}

/// The limit event fires once when fewer WQEs than the limit remain, and
/// disarms the limit; an empty SRQ makes RC senders wait (RNR) until a
/// post; a resize keeps the requests outstanding.
fn limit_rnr_and_resize(mode: ExecMode) {
    let f = Fabric::new(mode, 2, 3);
    let (na, nb) = (&f.nics[0], &f.nics[1]);
    let pd_b = nb.ctx.alloc_pd().unwrap();
    let srq = srq_of(&pd_b, 7);
    let mr_b = pd_b.alloc_mr(33 * SLOT, access::LOCAL_WRITE).unwrap();
    let cq_b = nb.ctx.create_cq(64).unwrap();
    let b = qp(&pd_b, &cq_b, Some(&srq), QpType::Rc);
    let pd_a = na.ctx.alloc_pd().unwrap();
    let cq_a = na.ctx.create_cq(64).unwrap();
    let mr_a = pd_a.alloc_mr(SLOT, access::LOCAL_WRITE).unwrap();
    let a = qp(&pd_a, &cq_a, None, QpType::Rc);
    up(&a, nb, b.qp_num());
    up(&b, na, a.qp_num());
    let srqn = srq.srq_num();

    post_slots(&srq, &mr_b, 0, 7);
    let limit = |n| SrqAttr {
        srq_limit: n,
        ..SrqAttr::default()
    };
    let e = srq.modify(&limit(8), srq_mask::LIMIT).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "above max_wr");
    assert_eq!(
        srq.modify(&limit(1), 4).unwrap_err().kind(),
        ErrorKind::InvalidArgument,
        "unknown mask bit"
    );
    srq.modify(&limit(4), srq_mask::LIMIT).unwrap();
    assert_eq!(
        srq.query().unwrap(),
        SrqAttr {
            max_wr: 7,
            max_sge: 1,
            srq_limit: 4
        }
    );
    let mut next = 0u64;
    let mut one = |f: &Fabric| {
        send(&a, &mr_a, &bytes(100, next), next, None);
        assert_ok(&f.wait_one(&cq_a), next, WcOpcode::Send);
        let wc = f.wait_one(&cq_b);
        assert_eq!(wc.status, WcStatus::Success);
        next += 1;
        wc
    };
    // Three taken leave four: not fewer than the limit.
    for _ in 0..3 {
        one(&f);
    }
    assert_no_event(&nb.ctx);
    // The fourth leaves three.
    one(&f);
    let ev = expect_event(&nb.ctx);
    assert_eq!((ev.event_type, ev.obj), (EventType::SrqLimitReached, srqn));
    assert_eq!(srq.query().unwrap().srq_limit, 0, "disarmed");
    for _ in 0..3 {
        one(&f);
    }
    assert_no_event(&nb.ctx);

    // Empty: the sender is told receiver-not-ready and retries until a
    // receive is posted.
    send(&a, &mr_a, &bytes(300, 77), 77, None);
    assert!(f.settle_all(&cq_b).is_empty());
    assert!(f.settle_all(&cq_a).is_empty());
    assert!(a.query_counters().unwrap().get(counter::RNR_NAKS_RECEIVED) > 0);
    post_slots(&srq, &mr_b, 0, 1);
    assert_ok(&f.wait_one(&cq_a), 77, WcOpcode::Send);
    let wc = f.wait_one(&cq_b);
    assert_ok(&wc, 1000, WcOpcode::Recv);
    assert_eq!(read_mr(&mr_b, 0, 300), bytes(300, 77));

    // Resize with six outstanding: not below them, then to 32.
    post_slots(&srq, &mr_b, 1, 6);
    let e = srq
        .modify(
            &SrqAttr {
                max_wr: 3,
                ..SrqAttr::default()
            },
            srq_mask::MAX_WR,
        )
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    srq.modify(
        &SrqAttr {
            max_wr: 20,
            srq_limit: 10,
            ..SrqAttr::default()
        },
        srq_mask::MAX_WR | srq_mask::LIMIT,
    )
    .unwrap();
    assert_eq!(srq.attr().max_wr, 31);
    assert_eq!(
        srq.query().unwrap(),
        SrqAttr {
            max_wr: 31,
            max_sge: 1,
            srq_limit: 10
        }
    );
    // The six posted before the resize come first, in order, then those
    // posted after it; 25 more fill the new SRQ of 31.
    post_slots(&srq, &mr_b, 7, 25);
    let e = srq
        .post_recv(&[recv(1, &[mr_b.sge(0, 8).unwrap()])])
        .unwrap_err();
    assert_eq!(e.error.kind(), ErrorKind::NoMemory, "31 outstanding");
    for k in 1..=31u64 {
        let wc = one(&f);
        assert_eq!(wc.wr_id, 1000 + k, "after the resize");
        if k == 22 {
            // Nine left, below the new limit of ten.
            let ev = expect_event(&nb.ctx);
            assert_eq!((ev.event_type, ev.obj), (EventType::SrqLimitReached, srqn));
        }
    }
    assert_no_event(&nb.ctx);
}

#[test]
fn limit_rnr_and_resize_inline_device() {
    limit_rnr_and_resize(ExecMode::Inline);
}

#[test]
fn limit_rnr_and_resize_device_thread() {
    limit_rnr_and_resize(ExecMode::Thread);
}

/// A UC message cut off after its first packet keeps the SRQ WQE it took;
/// `leave` takes the QP out of service. The WQE comes back in a flush
/// completion (which `leave` may remove again), and its slot is free.
fn cut_off(mode: ExecMode, leave: fn(&Fabric, EQp, &ECq, &EMr, &Srq<EmuHal>)) {
    let f = Fabric::new(mode, 2, 4);
    let nb = &f.nics[1];
    let pd = nb.ctx.alloc_pd().unwrap();
    let srq = srq_of(&pd, 3);
    let mr = pd.alloc_mr(3 * SLOT, access::LOCAL_WRITE).unwrap();
    let cq = nb.ctx.create_cq(16).unwrap();
    let b = qp(&pd, &cq, Some(&srq), QpType::Uc);
    let c = Conn::default();
    let (init, _) = init_attr(&c);
    b.modify(
        &init,
        qp_attr::STATE | qp_attr::PKEY_INDEX | qp_attr::PORT | qp_attr::ACCESS_FLAGS,
    )
    .unwrap();
    let (rtr, _) = rtr_attr(&nb.ctx, 0, &c);
    b.modify(
        &Peer::rtr(rtr),
        qp_attr::STATE | qp_attr::AV | qp_attr::PATH_MTU | qp_attr::DEST_QPN | qp_attr::RQ_PSN,
    )
    .unwrap();
    post_slots(&srq, &mr, 0, 3);
    let mut peer = Peer::new(&f);
    peer.send(
        2,
        RoceRepr {
            bth: Peer::bth(opcode::UC_SEND_FIRST, b.qp_num(), c.rq_psn),
            ..RoceRepr::default()
        },
        &[0xab; 1024],
    );
    assert!(f.settle_all(&cq).is_empty(), "the message is not over");
    assert_eq!(read_mr(&mr, 0, 4), [0xab; 4], "its first packet landed");
    let ev = expect_event(&nb.ctx);
    assert_eq!((ev.event_type, ev.obj), (EventType::CommEst, b.qp_num()));
    leave(&f, b, &cq, &mr, &srq);
    // Slot 0 is free again: one post fills the SRQ of three again.
    post_slots(&srq, &mr, 0, 1);
    let e = srq
        .post_recv(&[recv(9, &[mr.sge(0, 8).unwrap()])])
        .unwrap_err();
    assert_eq!(e.error.kind(), ErrorKind::NoMemory);
}

fn to_error(f: &Fabric, b: EQp, cq: &ECq, _: &EMr, _: &Srq<EmuHal>) {
    let ctx = &f.nics[1].ctx;
    set_state(&b, QpState::Err).unwrap();
    // Its message was cut off: aborted, not merely flushed.
    let wc = f.wait_one(cq);
    assert_err(&wc, 1000, WcStatus::RemAbortErr, Syndrome::Aborted);
    assert_eq!(wc.qp_num, b.qp_num());
    let ev = expect_event(ctx);
    assert_eq!(
        (ev.event_type, ev.obj),
        (EventType::QpLastWqeReached, b.qp_num())
    );
    // The other WQE stays in the SRQ: nothing else is flushed.
    assert!(f.settle_all(cq).is_empty());
    assert_no_event(ctx);
}

fn destroyed(f: &Fabric, b: EQp, cq: &ECq, _: &EMr, _: &Srq<EmuHal>) {
    b.destroy().unwrap();
    // The flush completion went with the QP.
    assert!(f.settle_all(cq).is_empty());
    assert_no_event(&f.nics[1].ctx);
}

fn reset(f: &Fabric, b: EQp, cq: &ECq, _: &EMr, _: &Srq<EmuHal>) {
    set_state(&b, QpState::Reset).unwrap();
    assert!(f.settle_all(cq).is_empty());
    assert_no_event(&f.nics[1].ctx);
}

#[test]
fn a_cut_off_message_gives_its_wqe_back() {
    for mode in [ExecMode::Inline, ExecMode::Thread] {
        for leave in [to_error, destroyed, reset] {
            cut_off(mode, leave);
        }
    }
}

#[test]
fn driver_checks() {
    let f = Fabric::new(ExecMode::Inline, 1, 5);
    let ctx = &f.nics[0].ctx;
    let attr = ctx.device_attr();
    assert_eq!(
        (attr.max_srq, attr.max_srq_wr, attr.max_srq_sge),
        (1024, (1 << 15) - 1, 16),
        "a ring of 2^15 slots, one ending the list"
    );
    let pd = ctx.alloc_pd().unwrap();
    let bad = |max_wr, max_sge| {
        pd.create_srq(&SrqAttr {
            max_wr,
            max_sge,
            srq_limit: 0,
        })
        .err()
        .unwrap()
        .kind()
    };
    assert_eq!(bad(0, 1), ErrorKind::InvalidArgument);
    assert_eq!(bad(1 << 15, 1), ErrorKind::InvalidArgument);
    assert_eq!(bad(4, 17), ErrorKind::InvalidArgument);
    // The limit given at creation is ignored, as ibv_create_srq does.
    let srq = pd
        .create_srq(&SrqAttr {
            max_wr: 5,
            max_sge: 3,
            srq_limit: 1000,
        })
        .unwrap();
    assert_eq!(
        srq.query().unwrap(),
        SrqAttr {
            max_wr: 7,
            max_sge: 3,
            srq_limit: 0
        }
    );
    let mr = pd.alloc_mr(4096, access::LOCAL_WRITE).unwrap();
    let sg: Vec<Sge> = (0..4).map(|i| mr.sge(i * 8, 8).unwrap()).collect();
    let e = srq
        .post_recv(&[recv(1, &sg[..1]), recv(2, &sg)])
        .unwrap_err();
    assert_eq!((e.index, e.error.kind()), (1, ErrorKind::InvalidArgument));
    // The PD is busy while the SRQ exists.
    let e = pd.destroy().unwrap_err();
    assert_eq!(e.error.kind(), ErrorKind::Busy);
    let pd = e.object.unwrap();
    srq.destroy().unwrap();
    drop(mr);
    pd.destroy().unwrap();

    // A device without SRQs says so.
    let no = open_with(
        EmuConfig {
            max_srq: 0,
            ..EmuConfig::default()
        },
        ExecMode::Inline,
    );
    let e = no
        .alloc_pd()
        .unwrap()
        .create_srq(&SrqAttr {
            max_wr: 1,
            max_sge: 1,
            srq_limit: 0,
        })
        .err()
        .unwrap();
    assert_eq!(e.kind(), ErrorKind::NotSupported);
}

//! Completion statuses only a misbehaving peer provokes, from a scripted
//! peer on the switch, in both execution modes: a READ response of the
//! wrong length, and an atomic ACK answering a SEND (`BAD_RESP_ERR`); a
//! NAK with the invalid RD request code (`REM_INV_RD_REQ_ERR`). Each fails
//! the request, moves the QP to ERR and flushes what follows. And a SEND
//! the peer leaves unfinished: its receive WQE completes `REM_ABORT_ERR`
//! when the QP leaves service, the WQEs behind it `WR_FLUSH_ERR`. And an
//! RNR NAK the wire duplicated, which costs one RNR retry.

use rnic_emu::wire::aeth::{AckKind, AethRepr, NakCode, CREDITS_INVALID};
use rnic_emu::wire::atomic_ack_eth::AtomicAckEthRepr;
use rnic_emu::wire::opcode;
use rnic_emu::wire::roce::RoceRepr;
use rnic_tests::fabric::Fabric;
use rnic_tests::peer::Peer;
use rnic_tests::*;

/// An RC QP of NIC 1 connected to the peer, its CQ and an MR.
struct Setup {
    f: Fabric,
    peer: Peer,
    cq: ECq,
    qp: EQp,
    mr: EMr,
}

fn setup(mode: ExecMode) -> Setup {
    setup_with(mode, Conn::default())
}

fn setup_with(mode: ExecMode, c: Conn) -> Setup {
    let f = Fabric::new(mode, 1, 9);
    let ctx = &f.nics[0].ctx;
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let qp = create_qp(&pd, &cq, &cq, cap(4, 1, 64), false);
    to_init(&qp, &c).unwrap();
    let (rtr, mask) = rtr_attr(ctx, 0, &c);
    qp.modify(&Peer::rtr(rtr), mask).unwrap();
    to_rts(&qp, &c).unwrap();
    let mr = pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    let peer = Peer::new(&f);
    Setup {
        f,
        peer,
        cq,
        qp,
        mr,
    }
}

impl Setup {
    /// The PSN of the one request the QP sent the peer. The wait is by
    /// the clock, not a count of turns: on a loaded machine a thread-mode
    /// NIC's worker may not run for a long while.
    fn request_psn(&mut self) -> u32 {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while std::time::Instant::now() < deadline {
            if let Some(r) = self.peer.received().first() {
                return r.bth.psn;
            }
            self.f.idle(std::time::Duration::from_micros(100));
        }
        panic!("no request reached the peer in 10 s");
    }

    /// The peer answers with `op` at `psn`, with `aeth`.
    fn answer(&mut self, op: u8, psn: u32, aeth: AckKind, payload: &[u8]) -> WorkCompletion {
        let mut roce = RoceRepr {
            bth: Peer::bth(op, self.qp.qp_num(), psn),
            aeth: Some(AethRepr { kind: aeth, msn: 1 }),
            ..RoceRepr::default()
        };
        if op == opcode::RC_ATOMIC_ACKNOWLEDGE {
            roce.atomic_ack_eth = Some(AtomicAckEthRepr { orig: 7 });
        }
        self.peer.send(1, roce, payload);
        self.f.wait_one(&self.cq)
    }

    /// A second WQE behind the failing one: flushed.
    fn then_flushed(&self) {
        post_send(&self.qp, send(99, &[sge(&self.mr, 0, 8)]));
        let wc = self.f.wait_one(&self.cq);
        assert_err(&wc, 99, WcStatus::WrFlushErr, Syndrome::Flushed);
        assert_eq!(query_state(&self.qp), QpState::Err);
    }
}

const ACK: AckKind = AckKind::Ack {
    credits: CREDITS_INVALID,
};

fn bad_responses(mode: ExecMode) {
    // A READ of 100 bytes answered with 50.
    let mut s = setup(mode);
    post_send(&s.qp, read(1, &[sge(&s.mr, 0, 100)], 0x1000, 0x1234));
    let psn = s.request_psn();
    let wc = s.answer(opcode::RC_RDMA_READ_RESPONSE_ONLY, psn, ACK, &[0xaa; 50]);
    assert_err(&wc, 1, WcStatus::BadRespErr, Syndrome::BadResponse);
    assert_eq!(read_mr(&s.mr, 0, 4), [0; 4], "nothing of it landed");
    s.then_flushed();
    // A SEND answered with an atomic ACK.
    let mut s = setup(mode);
    post_send(&s.qp, send(2, &[sge(&s.mr, 0, 8)]));
    let psn = s.request_psn();
    let wc = s.answer(opcode::RC_ATOMIC_ACKNOWLEDGE, psn, ACK, &[]);
    assert_err(&wc, 2, WcStatus::BadRespErr, Syndrome::BadResponse);
    s.then_flushed();
}

fn invalid_rd_request_nak(mode: ExecMode) {
    let mut s = setup(mode);
    post_send(&s.qp, send(3, &[sge(&s.mr, 0, 8)]));
    let psn = s.request_psn();
    let nak = AckKind::Nak(NakCode::InvalidRdRequest);
    let wc = s.answer(opcode::RC_ACKNOWLEDGE, psn, nak, &[]);
    assert_err(&wc, 3, WcStatus::RemInvRdReqErr, Syndrome::RemoteInvalidRd);
    s.then_flushed();
}

fn a_message_cut_off(mode: ExecMode) {
    let mut s = setup(mode);
    post_recv(&s.qp, recv(10, &[sge(&s.mr, 0, 4096)]));
    post_recv(&s.qp, recv(11, &[sge(&s.mr, 0, 4096)]));
    s.peer.send(
        1,
        RoceRepr {
            bth: Peer::bth(opcode::RC_SEND_FIRST, s.qp.qp_num(), 0),
            ..RoceRepr::default()
        },
        &[0x5a; 1024],
    );
    // The packet reaches a thread-mode NIC when its worker runs: wait for
    // its bytes by the clock, as a loaded machine may delay the worker.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while read_mr(&s.mr, 0, 2) != [0x5a; 2] && std::time::Instant::now() < deadline {
        s.f.idle(std::time::Duration::from_micros(100));
    }
    assert_eq!(read_mr(&s.mr, 0, 2), [0x5a; 2], "its first packet landed");
    assert!(s.f.settle_all(&s.cq).is_empty(), "the message is not over");
    set_state(&s.qp, QpState::Err).unwrap();
    let wcs = poll_n(&s.cq, 2);
    assert_err(&wcs[0], 10, WcStatus::RemAbortErr, Syndrome::Aborted);
    assert_err(&wcs[1], 11, WcStatus::WrFlushErr, Syndrome::Flushed);
}

/// An RNR NAK the wire duplicated costs one RNR retry, not two: with
/// `rnr_retry` 1 the SEND is sent again once after the wait, and completes
/// when the peer then takes it.
fn a_duplicated_rnr_nak_costs_one_retry(mode: ExecMode) {
    let mut s = setup_with(
        mode,
        Conn {
            rnr_retry: 1,
            ..Conn::default()
        },
    );
    post_send(&s.qp, send(4, &[sge(&s.mr, 0, 8)]));
    let psn = s.request_psn();
    // Timer code 20: a wait of 10.24 ms, which both NAKs reach the NIC
    // within, however loaded the machine.
    let rnr = AckKind::RnrNak { timer: 20 };
    for _ in 0..2 {
        let roce = RoceRepr {
            bth: Peer::bth(opcode::RC_ACKNOWLEDGE, s.qp.qp_num(), psn),
            aeth: Some(AethRepr { kind: rnr, msn: 0 }),
            ..RoceRepr::default()
        };
        s.peer.send(1, roce, &[]);
    }
    assert_eq!(
        s.request_psn(),
        psn,
        "the SEND again after the wait, not a failure"
    );
    let wc = s.answer(opcode::RC_ACKNOWLEDGE, psn, ACK, &[]);
    assert_eq!((wc.wr_id, wc.status), (4, WcStatus::Success));
    assert_eq!(query_state(&s.qp), QpState::Rts);
}

both_modes!(
    bad_responses,
    invalid_rd_request_nak,
    a_message_cut_off,
    a_duplicated_rnr_nak_costs_one_retry,
);

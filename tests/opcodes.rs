//! Every opcode end to end between two connected RC QPs, with the bytes
//! that arrived and every completion field checked: SEND, SEND with
//! immediate, RDMA WRITE (with immediate), RDMA READ, both atomics, inline
//! payloads, signaled and unsignaled requests, `sq_sig_all`, and the
//! solicited flag.

use rnic_tests::*;

const MR_LEN: usize = 8192;
const SENTINEL: u8 = 0xee;

/// A connected pair with an MR on each side: `a`'s MR is zeroed, `b`'s is
/// filled with [`SENTINEL`] so that bytes written outside the expected
/// range show up.
fn setup(mode: ExecMode) -> (Pair, EMr, EMr) {
    setup_with(mode, PairOpts::default())
}

fn setup_with(mode: ExecMode, opts: PairOpts) -> (Pair, EMr, EMr) {
    let p = Pair::with(mode, opts);
    let mr_a = p.mr(MR_LEN, ALL_ACCESS);
    let mr_b = p.mr(MR_LEN, ALL_ACCESS);
    fill_mr(&mr_b, SENTINEL);
    (p, mr_a, mr_b)
}

/// Asserts that `mr` holds [`SENTINEL`] in `range`.
#[track_caller]
fn assert_untouched(mr: &EMr, range: std::ops::Range<usize>) {
    let got = read_mr(mr, range.start, range.len());
    if let Some(i) = got.iter().position(|&b| b != SENTINEL) {
        panic!(
            "byte {} was written (now {:#04x}); {range:?} should be untouched",
            range.start + i,
            got[i]
        );
    }
}

fn send(mode: ExecMode) {
    let (p, mr_a, mr_b) = setup(mode);
    let data = pattern(1, 1000);
    write_mr(&mr_a, 0, &data);
    post_recv(&p.b, recv(100, &[sge(&mr_b, 64, 2048)]));
    post_send(&p.a, rnic_tests::send(1, &[sge(&mr_a, 0, 1000)]));

    let s = poll_one(&p.cq_a);
    assert_ok(&s, 1, WcOpcode::Send);
    assert_eq!(s.qp_num, p.a.qp_num());
    assert_eq!(s.imm_data, None);

    let r = poll_one(&p.cq_b);
    assert_ok(&r, 100, WcOpcode::Recv);
    assert_eq!(r.byte_len, 1000);
    assert_eq!(r.qp_num, p.b.qp_num());
    assert_eq!(r.src_qp, p.a.qp_num());
    assert_eq!(r.imm_data, None);
    assert_eq!(r.flags & (wc_flags::WITH_IMM | wc_flags::SOLICITED), 0);

    assert_eq!(read_mr(&mr_b, 64, 1000), data);
    assert_untouched(&mr_b, 0..64);
    assert_untouched(&mr_b, 1064..MR_LEN);
    assert_eq!(query_state(&p.a), QpState::Rts);
    assert_eq!(query_state(&p.b), QpState::Rts);
    p.assert_quiet();
}

fn send_with_imm(mode: ExecMode) {
    let (p, mr_a, mr_b) = setup(mode);
    let data = pattern(2, 333);
    write_mr(&mr_a, 100, &data);
    let imm = [0xde, 0xad, 0xbe, 0xef];
    post_recv(&p.b, recv(7, &[sge(&mr_b, 0, 512)]));
    post_send(
        &p.a,
        wr(5, SendOp::SendWithImm { imm }, &[sge(&mr_a, 100, 333)]),
    );

    assert_ok(&poll_one(&p.cq_a), 5, WcOpcode::Send);
    let r = poll_one(&p.cq_b);
    assert_ok(&r, 7, WcOpcode::Recv);
    assert_eq!(r.byte_len, 333);
    assert_ne!(r.flags & wc_flags::WITH_IMM, 0, "{r:?}");
    assert_eq!(r.imm_data, Some(imm), "immediate copied verbatim");
    assert_eq!(r.src_qp, p.a.qp_num());
    assert_eq!(read_mr(&mr_b, 0, 333), data);
    assert_untouched(&mr_b, 333..MR_LEN);
    p.assert_quiet();
}

fn rdma_write(mode: ExecMode) {
    let (p, mr_a, mr_b) = setup(mode);
    let data = pattern(3, 777);
    write_mr(&mr_a, 8, &data);
    // A posted receive must not be consumed by a plain WRITE.
    post_recv(&p.b, recv(100, &[sge(&mr_b, 4096, 64)]));
    post_send(
        &p.a,
        write(2, &[sge(&mr_a, 8, 777)], mr_b.addr() + 300, mr_b.rkey()),
    );

    let s = poll_one(&p.cq_a);
    assert_ok(&s, 2, WcOpcode::RdmaWrite);
    assert_eq!(s.byte_len, 0, "byte_len is 0 for RDMA WRITE");
    assert_eq!(read_mr(&mr_b, 300, 777), data);
    assert_untouched(&mr_b, 0..300);
    assert_untouched(&mr_b, 1077..MR_LEN);
    assert_cq_empty(&p.ctx, &p.cq_b);

    // The receive is still there: the next SEND lands in it.
    write_mr(&mr_a, 0, b"after");
    post_send(&p.a, rnic_tests::send(3, &[sge(&mr_a, 0, 5)]));
    assert_ok(&poll_one(&p.cq_a), 3, WcOpcode::Send);
    let r = poll_one(&p.cq_b);
    assert_ok(&r, 100, WcOpcode::Recv);
    assert_eq!(read_mr(&mr_b, 4096, 5), b"after");
    p.assert_quiet();
}

fn rdma_write_with_imm(mode: ExecMode) {
    let (p, mr_a, mr_b) = setup(mode);
    let data = pattern(4, 500);
    write_mr(&mr_a, 0, &data);
    let imm = [1, 2, 3, 4];
    post_recv(&p.b, recv(42, &[sge(&mr_b, 4096, 1024)]));
    post_send(
        &p.a,
        wr(
            9,
            SendOp::RdmaWriteWithImm {
                remote: RemoteAddr {
                    addr: mr_b.addr() + 100,
                    rkey: mr_b.rkey(),
                },
                imm,
            },
            &[sge(&mr_a, 0, 500)],
        ),
    );

    assert_ok(&poll_one(&p.cq_a), 9, WcOpcode::RdmaWrite);
    let r = poll_one(&p.cq_b);
    assert_ok(&r, 42, WcOpcode::RecvRdmaWithImm);
    assert_eq!(r.byte_len, 500, "byte_len is the write length");
    assert_ne!(r.flags & wc_flags::WITH_IMM, 0);
    assert_eq!(r.imm_data, Some(imm));
    assert_eq!(r.src_qp, p.a.qp_num());
    assert_eq!(read_mr(&mr_b, 100, 500), data);
    assert_untouched(&mr_b, 0..100);
    // The consumed receive's buffer is not used.
    assert_untouched(&mr_b, 600..MR_LEN);
    p.assert_quiet();
}

fn rdma_read(mode: ExecMode) {
    let (p, mr_a, mr_b) = setup(mode);
    let data = pattern(5, 1500);
    write_mr(&mr_b, 1000, &data);
    post_send(
        &p.a,
        read(4, &[sge(&mr_a, 10, 1500)], mr_b.addr() + 1000, mr_b.rkey()),
    );
    let s = poll_one(&p.cq_a);
    assert_ok(&s, 4, WcOpcode::RdmaRead);
    assert_eq!(s.byte_len, 1500);
    assert_eq!(read_mr(&mr_a, 10, 1500), data);
    assert_eq!(read_mr(&mr_a, 0, 10), [0; 10]);
    assert_eq!(read_mr(&mr_a, 1510, 100), [0; 100]);
    // The source is unchanged and the responder sees nothing.
    assert_eq!(read_mr(&mr_b, 1000, 1500), data);
    p.assert_quiet();
}

fn atomic_cmp_and_swp(mode: ExecMode) {
    let (p, mr_a, mr_b) = setup(mode);
    let target = mr_b.addr() + 64;
    let remote = RemoteAddr {
        addr: target,
        rkey: mr_b.rkey(),
    };
    write_u64(&mr_b, 64, 0x0102_0304_0506_0708);
    write_u64(&mr_a, 8, 0xffff_ffff_ffff_ffff);
    // Hit: the target takes the swap value, the original comes back.
    post_send(
        &p.a,
        wr(
            1,
            SendOp::AtomicCmpAndSwp {
                remote,
                compare: 0x0102_0304_0506_0708,
                swap: 0x1122_3344_5566_7788,
            },
            &[sge(&mr_a, 8, 8)],
        ),
    );
    let s = poll_one(&p.cq_a);
    assert_ok(&s, 1, WcOpcode::CompSwap);
    assert_eq!(s.byte_len, 8);
    assert_eq!(read_u64(&mr_a, 8), 0x0102_0304_0506_0708);
    assert_eq!(read_u64(&mr_b, 64), 0x1122_3344_5566_7788);

    // Miss: the target keeps its value, which comes back.
    post_send(
        &p.a,
        wr(
            2,
            SendOp::AtomicCmpAndSwp {
                remote,
                compare: 0x0102_0304_0506_0708,
                swap: 0xdead_beef,
            },
            &[sge(&mr_a, 16, 8)],
        ),
    );
    let s = poll_one(&p.cq_a);
    assert_ok(&s, 2, WcOpcode::CompSwap);
    assert_eq!(s.byte_len, 8);
    assert_eq!(read_u64(&mr_a, 16), 0x1122_3344_5566_7788);
    assert_eq!(read_u64(&mr_b, 64), 0x1122_3344_5566_7788);
    assert_untouched(&mr_b, 0..64);
    assert_untouched(&mr_b, 72..MR_LEN);
    p.assert_quiet();
}

fn atomic_fetch_and_add(mode: ExecMode) {
    let (p, mr_a, mr_b) = setup(mode);
    let remote = RemoteAddr {
        addr: mr_b.addr() + 128,
        rkey: mr_b.rkey(),
    };
    write_u64(&mr_b, 128, u64::MAX - 5);
    let adds = [10u64, 1, 0x0100_0000_0000];
    let mut expect = u64::MAX - 5;
    for (i, add) in adds.into_iter().enumerate() {
        let off = 64 + 8 * i;
        post_send(
            &p.a,
            wr(
                i as u64,
                SendOp::AtomicFetchAndAdd { remote, add },
                &[sge(&mr_a, off, 8)],
            ),
        );
        let s = poll_one(&p.cq_a);
        assert_ok(&s, i as u64, WcOpcode::FetchAdd);
        assert_eq!(s.byte_len, 8);
        assert_eq!(read_u64(&mr_a, off), expect, "original value of add {i}");
        expect = expect.wrapping_add(add);
        assert_eq!(read_u64(&mr_b, 128), expect, "target after add {i}");
    }
    assert_eq!(expect, 0x0100_0000_0005, "the first add wrapped around");
    assert_untouched(&mr_b, 0..128);
    assert_untouched(&mr_b, 136..MR_LEN);
    p.assert_quiet();
}

fn inline_payloads(mode: ExecMode) {
    let (p, _mr_a, mr_b) = setup(mode);
    let max = p.a.cap().max_inline_data as usize;
    assert!(max >= 64, "asked for 64 inline bytes, got {max}");
    let mut buf = pattern(6, max);
    let expect = buf.clone();
    post_recv(&p.b, recv(1, &[sge(&mr_b, 0, 1024)]));
    post_recv(&p.b, recv(2, &[sge(&mr_b, 1024, 1024)]));
    // A SEND of exactly max_inline_data bytes; the buffer is reusable as
    // soon as post_send returns, whether or not the device ran yet.
    p.a.post_send(&[SendWr {
        wr_id: 10,
        op: SendOp::Send,
        payload: Payload::Inline(&buf),
        flags: send_flags::SIGNALED,
    }])
    .expect("inline SEND");
    buf.fill(0);
    // Inline SEND with immediate, and an inline RDMA WRITE, of odd sizes.
    let small = pattern(7, 13);
    let imm = [9, 8, 7, 6];
    let wdata = pattern(8, 37);
    p.a.post_send(&[
        SendWr {
            wr_id: 11,
            op: SendOp::SendWithImm { imm },
            payload: Payload::Inline(&small),
            flags: send_flags::SIGNALED,
        },
        SendWr {
            wr_id: 12,
            op: SendOp::RdmaWrite {
                remote: RemoteAddr {
                    addr: mr_b.addr() + 4000,
                    rkey: mr_b.rkey(),
                },
            },
            payload: Payload::Inline(&wdata),
            flags: send_flags::SIGNALED,
        },
    ])
    .expect("inline batch");

    let s = poll_n(&p.cq_a, 3);
    assert_ok(&s[0], 10, WcOpcode::Send);
    assert_ok(&s[1], 11, WcOpcode::Send);
    assert_ok(&s[2], 12, WcOpcode::RdmaWrite);
    let r = poll_n(&p.cq_b, 2);
    assert_ok(&r[0], 1, WcOpcode::Recv);
    assert_eq!(r[0].byte_len as usize, max);
    assert_ok(&r[1], 2, WcOpcode::Recv);
    assert_eq!(r[1].byte_len, 13);
    assert_eq!(r[1].imm_data, Some(imm));
    assert_eq!(read_mr(&mr_b, 0, max), expect);
    assert_untouched(&mr_b, max..1024);
    assert_eq!(read_mr(&mr_b, 1024, 13), small);
    assert_untouched(&mr_b, 1037..4000);
    assert_eq!(read_mr(&mr_b, 4000, 37), wdata);
    assert_untouched(&mr_b, 4037..MR_LEN);
    p.assert_quiet();
}

fn unsignaled_requests_complete_silently(mode: ExecMode) {
    let (p, mr_a, mr_b) = setup(mode);
    for round in 0..3u64 {
        let sgl: Vec<[Sge; 1]> = (0..4).map(|i| [sge(&mr_a, i * 100, 100)]).collect();
        for i in 0..4u64 {
            write_mr(&mr_a, i as usize * 100, &pattern(round * 10 + i, 100));
            post_recv(
                &p.b,
                recv(round * 10 + i, &[sge(&mr_b, i as usize * 100, 100)]),
            );
        }
        let wrs: Vec<SendWr> = (0..4u64)
            .map(|i| SendWr {
                wr_id: round * 10 + i,
                op: SendOp::Send,
                payload: Payload::Sgl(&sgl[i as usize]),
                // Only the last one is signaled.
                flags: if i == 3 { send_flags::SIGNALED } else { 0 },
            })
            .collect();
        p.a.post_send(&wrs).expect("post_send");
        let r = poll_n(&p.cq_b, 4);
        for (i, w) in r.iter().enumerate() {
            let id = round * 10 + i as u64;
            assert_ok(w, id, WcOpcode::Recv);
            assert_eq!(read_mr(&mr_b, i * 100, 100), pattern(id, 100));
        }
        let s = poll_one(&p.cq_a);
        assert_ok(&s, round * 10 + 3, WcOpcode::Send);
        assert_cq_empty(&p.ctx, &p.cq_a);
    }

    // A lone unsignaled request: it runs (its data arrives) but completes
    // without a CQE.
    write_mr(&mr_a, 0, b"quiet");
    post_recv(&p.b, recv(77, &[sge(&mr_b, 0, 64)]));
    p.a.post_send(&[SendWr {
        wr_id: 76,
        op: SendOp::Send,
        payload: Payload::Sgl(&[sge(&mr_a, 0, 5)]),
        flags: 0,
    }])
    .unwrap();
    assert_ok(&poll_one(&p.cq_b), 77, WcOpcode::Recv);
    assert_eq!(read_mr(&mr_b, 0, 5), b"quiet");
    p.assert_quiet();
}

fn sq_sig_all_signals_everything(mode: ExecMode) {
    let opts = PairOpts {
        sq_sig_all: true,
        ..PairOpts::default()
    };
    let (p, mr_a, mr_b) = setup_with(mode, opts);
    write_mr(&mr_a, 0, &pattern(9, 64));
    for i in 0..6 {
        post_recv(&p.b, recv(100 + i, &[sge(&mr_b, 0, 64)]));
    }
    let sgl = [sge(&mr_a, 0, 64)];
    let wrs: Vec<SendWr> = (0..6u64)
        .map(|i| match i % 3 {
            0 => SendWr {
                wr_id: i,
                op: SendOp::Send,
                payload: Payload::Sgl(&sgl),
                flags: 0,
            },
            1 => SendWr {
                wr_id: i,
                op: SendOp::RdmaWrite {
                    remote: RemoteAddr {
                        addr: mr_b.addr() + 1024,
                        rkey: mr_b.rkey(),
                    },
                },
                payload: Payload::Sgl(&sgl),
                flags: 0,
            },
            _ => SendWr {
                wr_id: i,
                op: SendOp::Send,
                payload: Payload::Inline(b"inline"),
                flags: 0,
            },
        })
        .collect();
    p.a.post_send(&wrs).unwrap();
    let s = poll_n(&p.cq_a, 6);
    for (i, w) in s.iter().enumerate() {
        let op = if i % 3 == 1 {
            WcOpcode::RdmaWrite
        } else {
            WcOpcode::Send
        };
        assert_ok(w, i as u64, op);
    }
    let r = poll_n(&p.cq_b, 4);
    for (i, w) in r.iter().enumerate() {
        assert_ok(w, 100 + i as u64, WcOpcode::Recv);
    }
    assert_eq!(read_mr(&mr_b, 1024, 64), pattern(9, 64));
    p.assert_quiet();
}

fn solicited_flag_reaches_the_receiver(mode: ExecMode) {
    let (p, mr_a, mr_b) = setup(mode);
    for i in 0..4 {
        post_recv(&p.b, recv(i, &[sge(&mr_b, 0, 256)]));
    }
    let sgl = [sge(&mr_a, 0, 16)];
    let remote = RemoteAddr {
        addr: mr_b.addr() + 512,
        rkey: mr_b.rkey(),
    };
    let mk = |wr_id, op, flags| SendWr {
        wr_id,
        op,
        payload: Payload::Sgl(&sgl),
        flags,
    };
    let all = send_flags::SIGNALED | send_flags::SOLICITED;
    let imm = [0, 0, 0, 1];
    p.a.post_send(&[
        mk(0, SendOp::Send, all),
        mk(1, SendOp::Send, send_flags::SIGNALED),
        mk(2, SendOp::SendWithImm { imm }, all),
        mk(3, SendOp::RdmaWriteWithImm { remote, imm }, all),
    ])
    .unwrap();
    let s = poll_n(&p.cq_a, 4);
    for (i, w) in s.iter().enumerate() {
        let op = if i == 3 {
            WcOpcode::RdmaWrite
        } else {
            WcOpcode::Send
        };
        assert_ok(w, i as u64, op);
    }
    let r = poll_n(&p.cq_b, 4);
    let solicited: Vec<bool> = r
        .iter()
        .map(|w| w.flags & wc_flags::SOLICITED != 0)
        .collect();
    assert_eq!(solicited, [true, false, true, true], "{r:#?}");
    assert_ok(&r[3], 3, WcOpcode::RecvRdmaWithImm);
    p.assert_quiet();
}

/// Zero-length messages: a SEND with an empty gather list consumes a
/// receive with byte_len 0; zero-length RDMA WRITE and READ check no rkey.
fn zero_length_messages(mode: ExecMode) {
    let (p, _mr_a, mr_b) = setup(mode);
    post_recv(&p.b, recv(5, &[sge(&mr_b, 0, 64)]));
    post_send(&p.a, rnic_tests::send(1, &[]));
    post_send(&p.a, write(2, &[], 0, 0));
    post_send(&p.a, read(3, &[], 0, 0));
    assert_ok(&poll_one(&p.cq_a), 1, WcOpcode::Send);
    assert_ok(&poll_one(&p.cq_a), 2, WcOpcode::RdmaWrite);
    let w = poll_one(&p.cq_a);
    assert_ok(&w, 3, WcOpcode::RdmaRead);
    assert_eq!(w.byte_len, 0);
    // With immediate data: the immediate is the whole message.
    let imm = [7, 7, 0, 1];
    post_recv(&p.b, recv(6, &[sge(&mr_b, 0, 64)]));
    post_recv(&p.b, recv(7, &[sge(&mr_b, 0, 64)]));
    post_send(&p.a, wr(4, SendOp::SendWithImm { imm }, &[]));
    let remote = RemoteAddr { addr: 0, rkey: 0 };
    post_send(&p.a, wr(5, SendOp::RdmaWriteWithImm { remote, imm }, &[]));
    assert_ok(&poll_one(&p.cq_a), 4, WcOpcode::Send);
    assert_ok(&poll_one(&p.cq_a), 5, WcOpcode::RdmaWrite);
    let r = poll_n(&p.cq_b, 3);
    assert_ok(&r[0], 5, WcOpcode::Recv);
    assert_ok(&r[1], 6, WcOpcode::Recv);
    assert_ok(&r[2], 7, WcOpcode::RecvRdmaWithImm);
    for w in &r {
        assert_eq!(w.byte_len, 0, "{w:#?}");
    }
    assert_eq!(r[0].imm_data, None);
    assert_eq!((r[1].imm_data, r[2].imm_data), (Some(imm), Some(imm)));
    // An empty inline payload, into a receive whose only entry is empty
    // (a receive WQE without data segments).
    post_recv(&p.b, recv(8, &[sge(&mr_b, 0, 0)]));
    p.a.post_send(&[SendWr {
        payload: Payload::Inline(&[]),
        ..rnic_tests::send(6, &[])
    }])
    .unwrap();
    assert_ok(&poll_one(&p.cq_a), 6, WcOpcode::Send);
    let w = poll_one(&p.cq_b);
    assert_ok(&w, 8, WcOpcode::Recv);
    assert_eq!(w.byte_len, 0);
    assert_untouched(&mr_b, 0..MR_LEN);
    p.assert_quiet();
}

/// A QP may be connected to itself: its SENDs land in its own receives.
fn loopback_to_self(mode: ExecMode) {
    let ctx = open(mode);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8).unwrap();
    let qp = create_qp(&pd, &cq, &cq, cap(4, 1, 0), false);
    connect(&ctx, &qp, qp.qp_num(), &Conn::default());
    let mr = pd.alloc_mr(256, ALL_ACCESS).unwrap();
    write_mr(&mr, 0, b"myself");
    post_recv(&qp, recv(2, &[sge(&mr, 128, 64)]));
    post_send(&qp, rnic_tests::send(1, &[sge(&mr, 0, 6)]));
    let wcs = poll_n(&cq, 2);
    // Receive CQE first: it is written before the requester's.
    assert_ok(&wcs[0], 2, WcOpcode::Recv);
    assert_eq!(wcs[0].src_qp, qp.qp_num());
    assert_ok(&wcs[1], 1, WcOpcode::Send);
    assert_eq!(read_mr(&mr, 128, 6), b"myself");
}

/// Messages of 1 MiB + 1 byte: SEND, RDMA WRITE and RDMA READ move every
/// byte.
fn large_messages(mode: ExecMode) {
    const LEN: usize = (1 << 20) + 1;
    let p = Pair::new(mode);
    let mr_a = p.mr(LEN + 64, ALL_ACCESS);
    let mr_b = p.mr(LEN + 64, ALL_ACCESS);
    let data = pattern(21, LEN);
    write_mr(&mr_a, 1, &data);
    post_recv(&p.b, recv(1, &[sge(&mr_b, 3, LEN as u32)]));
    post_send(&p.a, rnic_tests::send(1, &[sge(&mr_a, 1, LEN as u32)]));
    assert_ok(&poll_one(&p.cq_a), 1, WcOpcode::Send);
    let r = poll_one(&p.cq_b);
    assert_ok(&r, 1, WcOpcode::Recv);
    assert_eq!(r.byte_len as usize, LEN);
    assert!(read_mr(&mr_b, 3, LEN) == data, "SEND payload differs");

    let data = pattern(22, LEN);
    write_mr(&mr_a, 7, &data);
    post_send(
        &p.a,
        write(
            2,
            &[sge(&mr_a, 7, LEN as u32)],
            mr_b.addr() + 5,
            mr_b.rkey(),
        ),
    );
    assert_ok(&poll_one(&p.cq_a), 2, WcOpcode::RdmaWrite);
    assert!(read_mr(&mr_b, 5, LEN) == data, "WRITE payload differs");

    let data = pattern(23, LEN);
    write_mr(&mr_b, 60, &data);
    post_send(
        &p.a,
        read(
            3,
            &[sge(&mr_a, 0, LEN as u32)],
            mr_b.addr() + 60,
            mr_b.rkey(),
        ),
    );
    let w = poll_one(&p.cq_a);
    assert_ok(&w, 3, WcOpcode::RdmaRead);
    assert_eq!(w.byte_len as usize, LEN);
    assert!(read_mr(&mr_a, 0, LEN) == data, "READ data differs");
    p.assert_quiet();
}

/// Fetch-and-adds on one target from two QPs driven by two threads at
/// once: every original value is returned exactly once and the target
/// ends at the total.
fn fetch_add_is_atomic_across_qps(mode: ExecMode) {
    const PER_QP: u64 = 300;
    let ctx = open(mode);
    let pd = ctx.alloc_pd().unwrap();
    let target = pd.alloc_mr(64, ALL_ACCESS).unwrap();
    write_u64(&target, 8, 1000);
    let conn = Conn::default();
    let make = || {
        let cq = ctx.create_cq(32).unwrap();
        let peer_cq = ctx.create_cq(4).unwrap();
        let qp = create_qp(&pd, &cq, &cq, cap(8, 1, 0), false);
        let peer = create_qp(&pd, &peer_cq, &peer_cq, cap(8, 1, 0), false);
        connect(&ctx, &qp, peer.qp_num(), &conn);
        connect(&ctx, &peer, qp.qp_num(), &conn);
        let results = pd.alloc_mr(8 * PER_QP as usize, ALL_ACCESS).unwrap();
        (cq, peer_cq, qp, peer, results)
    };
    let sides = [make(), make()];
    let remote = RemoteAddr {
        addr: target.addr() + 8,
        rkey: target.rkey(),
    };
    std::thread::scope(|s| {
        for (cq, _, qp, _, results) in &sides {
            s.spawn(move || {
                let mut done = 0;
                while done < PER_QP {
                    let n = (PER_QP - done).min(8);
                    let sgls: Vec<[Sge; 1]> = (done..done + n)
                        .map(|i| [sge(results, i as usize * 8, 8)])
                        .collect();
                    let wrs: Vec<SendWr> = (0..n)
                        .map(|j| {
                            wr(
                                done + j,
                                SendOp::AtomicFetchAndAdd { remote, add: 1 },
                                &sgls[j as usize],
                            )
                        })
                        .collect();
                    qp.post_send(&wrs).expect("post atomics");
                    for (j, w) in poll_n(cq, n as usize).iter().enumerate() {
                        assert_ok(w, done + j as u64, WcOpcode::FetchAdd);
                    }
                    done += n;
                }
            });
        }
    });
    let mut seen: Vec<u64> = sides
        .iter()
        .flat_map(|(_, _, _, _, r)| (0..PER_QP as usize).map(|i| read_u64(r, i * 8)))
        .collect();
    seen.sort_unstable();
    let want: Vec<u64> = (1000..1000 + 2 * PER_QP).collect();
    assert_eq!(seen, want, "each original value returned once");
    assert_eq!(read_u64(&target, 8), 1000 + 2 * PER_QP);
    for (cq, peer_cq, ..) in &sides {
        assert_cq_empty(&ctx, cq);
        assert_cq_empty(&ctx, peer_cq);
    }
}

/// A device with the smallest send WQEs (one BB), little inline room,
/// two SGEs and a single doorbell page shared by every queue: every
/// opcode still works within the capacities the driver reports.
fn minimal_device_limits(mode: ExecMode) {
    let config = EmuConfig {
        max_wqe_bbs: 1,
        max_inline: 32,
        max_sge: 2,
        uar_pages: 1,
        ..EmuConfig::default()
    };
    let opts = PairOpts {
        config,
        cap: cap(8, 2, 16),
        ..PairOpts::default()
    };
    let (p, mr_a, mr_b) = setup_with(mode, opts);
    let c = p.a.cap();
    assert!(c.max_send_sge >= 2 && c.max_inline_data >= 16, "{c:?}");
    let data = pattern(61, 64);
    write_mr(&mr_a, 0, &data);
    let inline = pattern(62, c.max_inline_data as usize);
    post_recv(&p.b, recv(1, &[sge(&mr_b, 0, 32), sge(&mr_b, 100, 32)]));
    post_recv(&p.b, recv(2, &[sge(&mr_b, 200, 64)]));
    let remote = |off: u64| RemoteAddr {
        addr: mr_b.addr() + off,
        rkey: mr_b.rkey(),
    };
    write_u64(&mr_b, 1000, 5);
    let two = [sge(&mr_a, 0, 30), sge(&mr_a, 30, 34)];
    let res = [sge(&mr_a, 512, 8)];
    let rd = [sge(&mr_a, 600, 64)];
    p.a.post_send(&[
        rnic_tests::send(10, &two),
        SendWr {
            payload: Payload::Inline(&inline),
            ..rnic_tests::send(11, &[])
        },
        SendWr {
            op: SendOp::RdmaWrite {
                remote: remote(300),
            },
            payload: Payload::Inline(&inline),
            ..rnic_tests::send(12, &[])
        },
        wr(
            13,
            SendOp::AtomicFetchAndAdd {
                remote: remote(1000),
                add: 3,
            },
            &res,
        ),
        wr(
            14,
            SendOp::RdmaRead {
                remote: remote(200),
            },
            &rd,
        ),
    ])
    .expect("post_send");
    let s = poll_n(&p.cq_a, 5);
    let ops = [
        WcOpcode::Send,
        WcOpcode::Send,
        WcOpcode::RdmaWrite,
        WcOpcode::FetchAdd,
        WcOpcode::RdmaRead,
    ];
    for (i, (w, op)) in s.iter().zip(ops).enumerate() {
        assert_ok(w, 10 + i as u64, op);
    }
    let r = poll_n(&p.cq_b, 2);
    assert_ok(&r[0], 1, WcOpcode::Recv);
    assert_ok(&r[1], 2, WcOpcode::Recv);
    assert_eq!(r[0].byte_len, 64);
    assert_eq!(read_mr(&mr_b, 0, 32), data[..32]);
    assert_eq!(read_mr(&mr_b, 100, 32), data[32..]);
    assert_eq!(read_mr(&mr_b, 200, inline.len()), inline);
    assert_eq!(read_mr(&mr_b, 300, inline.len()), inline);
    assert_eq!((read_u64(&mr_a, 512), read_u64(&mr_b, 1000)), (5, 8));
    assert_eq!(read_mr(&mr_a, 600, inline.len()), inline);
    p.assert_quiet();
}

both_modes!(
    send,
    send_with_imm,
    rdma_write,
    rdma_write_with_imm,
    rdma_read,
    atomic_cmp_and_swp,
    atomic_fetch_and_add,
    inline_payloads,
    unsignaled_requests_complete_silently,
    sq_sig_all_signals_everything,
    solicited_flag_reaches_the_receiver,
    zero_length_messages,
    loopback_to_self,
    large_messages,
    fetch_add_is_atomic_across_qps,
    minimal_device_limits,
);

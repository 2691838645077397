//! Several threads on one QP or CQ: `post_send` from four threads at once
//! while another thread posts receives and polls both CQs (the driver's
//! queue accounting is shared between posters and the poller);
//! `post_recv` from two threads at once; two threads polling one CQ. Every
//! message arrives exactly once, and each thread's requests are executed
//! in the order it posted them. Threads creating and destroying QPs at
//! once, so that QP numbers are reused immediately, never lose a QP's
//! completions or events to another. Threads ringing their own QPs'
//! doorbells at once lose none of them. On one inline NIC, a receiver
//! that rings a doorbell for every receive keeps up with a sender that
//! keeps its send queue full: neither thread runs the other's traffic
//! while the other waits to run its own.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use rnic_tests::*;

const THREADS: u64 = 4;
const PER_THREAD: u64 = 1000;
const MSG: usize = 32;

/// Inline payload of message `k` of thread `t`: its ID, then bytes that
/// depend on it.
fn payload(id: u64) -> Vec<u8> {
    let mut v = id.to_le_bytes().to_vec();
    v.extend(pattern(id, MSG - 8));
    v
}

fn concurrent_posters(mode: ExecMode) {
    let p = Pair::with(
        mode,
        PairOpts {
            cap: cap(32, 1, 64),
            cq_size: 64,
            ..PairOpts::default()
        },
    );
    let rq = p.b.cap().max_recv_wr as u64;
    let mr_b = p.mr(rq as usize * MSG, ALL_ACCESS);
    let total = THREADS * PER_THREAD;
    let failed = AtomicBool::new(false);

    std::thread::scope(|s| {
        for t in 0..THREADS {
            let (qp, failed, ctx) = (&p.a, &failed, &p.ctx);
            s.spawn(move || {
                let start = Instant::now();
                for k in 0..PER_THREAD {
                    let id = t << 32 | k;
                    let data = payload(id);
                    let wr = SendWr {
                        wr_id: id,
                        op: SendOp::Send,
                        payload: Payload::Inline(&data),
                        flags: send_flags::SIGNALED,
                    };
                    // A full queue is back-pressure: retry once the poller
                    // has made room.
                    loop {
                        match qp.post_send(&[wr]) {
                            Ok(()) => break,
                            Err(e) if e.error.kind() == ErrorKind::NoMemory => {
                                if failed.load(Ordering::Relaxed) || start.elapsed() > TIMEOUT {
                                    panic!("thread {t}: send queue stayed full");
                                }
                                ctx.hal().relax();
                            }
                            Err(e) => panic!("thread {t}: post_send: {e}"),
                        }
                    }
                }
            });
        }

        // This thread: keep receives posted, take every completion.
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut next_k = vec![0u64; THREADS as usize];
            let mut sent = vec![0u64; THREADS as usize];
            let (mut posted, mut received, mut send_done) = (0u64, 0u64, 0u64);
            let mut wc = [WorkCompletion::default(); 16];
            let mut last = Instant::now();
            while received < total || send_done < total {
                let mut moved = false;
                while posted < total && posted - received < rq {
                    let at = (posted % rq) as usize * MSG;
                    post_recv(&p.b, recv(posted, &[sge(&mr_b, at, MSG as u32)]));
                    posted += 1;
                }
                let n = p.cq_b.poll(&mut wc).expect("poll b");
                for w in &wc[..n] {
                    assert_ok(w, received, WcOpcode::Recv);
                    assert_eq!(w.byte_len as usize, MSG);
                    let data = read_mr(&mr_b, (received % rq) as usize * MSG, MSG);
                    let id = u64::from_le_bytes(data[..8].try_into().unwrap());
                    let (t, k) = ((id >> 32) as usize, id & 0xffff_ffff);
                    assert!(t < THREADS as usize, "message from nowhere: {id:#x}");
                    assert_eq!(k, next_k[t], "thread {t}'s messages out of order");
                    assert!(data == payload(id), "payload of {id:#x}");
                    next_k[t] += 1;
                    received += 1;
                }
                moved |= n > 0;
                let n = p.cq_a.poll(&mut wc).expect("poll a");
                for w in &wc[..n] {
                    assert_eq!(w.status, WcStatus::Success, "{w:#?}");
                    let (t, k) = ((w.wr_id >> 32) as usize, w.wr_id & 0xffff_ffff);
                    assert_eq!(k, sent[t], "thread {t}'s completions out of order");
                    sent[t] += 1;
                    send_done += 1;
                }
                moved |= n > 0;
                if moved {
                    last = Instant::now();
                } else {
                    assert!(
                        last.elapsed() < TIMEOUT,
                        "no progress: received {received}, sends done {send_done}"
                    );
                    p.ctx.hal().relax();
                }
            }
            assert_eq!(next_k, vec![PER_THREAD; THREADS as usize]);
        }));
        if let Err(e) = result {
            failed.store(true, Ordering::Relaxed);
            std::panic::resume_unwind(e);
        }
    });
    p.assert_quiet();
}

/// Two threads post receives at once; then two threads poll the send CQ
/// at once while this one sends. Each receive is used once, each thread's
/// receives in its posting order, every message lands in the receive that
/// took it, and the pollers together see every send completion once.
fn concurrent_receivers_and_pollers(mode: ExecMode) {
    const PER_THREAD: u64 = 128;
    let p = Pair::with(
        mode,
        PairOpts {
            cap: cap(256, 1, 16),
            cq_size: 512,
            ..PairOpts::default()
        },
    );
    let total = 2 * PER_THREAD;
    let mr_b = p.mr(total as usize * 16, ALL_ACCESS);
    // Receive `t << 32 | k` uses slot `t * PER_THREAD + k`.
    let slot = |id: u64| ((id >> 32) * PER_THREAD + (id & 0xffff_ffff)) as usize * 16;
    std::thread::scope(|s| {
        for t in 0..2u64 {
            let (qp, mr) = (&p.b, &mr_b);
            s.spawn(move || {
                let mut k = 0;
                while k < PER_THREAD {
                    let n = (k % 7 + 1).min(PER_THREAD - k);
                    let sgls: Vec<[Sge; 1]> = (k..k + n)
                        .map(|j| [sge(mr, slot(t << 32 | j), 16)])
                        .collect();
                    let wrs: Vec<RecvWr> = (0..n)
                        .map(|j| recv(t << 32 | (k + j), &sgls[j as usize]))
                        .collect();
                    qp.post_recv(&wrs).expect("post_recv");
                    k += n;
                }
            });
        }
    });

    let seen = std::sync::Mutex::new(Vec::new());
    std::thread::scope(|s| {
        for _ in 0..2 {
            let (cq, seen, ctx) = (&p.cq_a, &seen, &p.ctx);
            s.spawn(move || {
                let start = Instant::now();
                let mut wc = [WorkCompletion::default(); 3];
                while seen.lock().unwrap().len() < total as usize {
                    let n = cq.poll(&mut wc).expect("poll");
                    seen.lock().unwrap().extend(wc[..n].iter().map(|w| {
                        assert_ok(w, w.wr_id, WcOpcode::Send);
                        w.wr_id
                    }));
                    assert!(start.elapsed() < TIMEOUT, "pollers timed out");
                    ctx.hal().relax();
                }
            });
        }
        for i in 0..total {
            let data = payload(i)[..16].to_vec();
            let wr = SendWr {
                wr_id: i,
                op: SendOp::Send,
                payload: Payload::Inline(&data),
                flags: send_flags::SIGNALED,
            };
            p.a.post_send(&[wr]).expect("post_send");
        }
    });
    let mut ids = seen.into_inner().unwrap();
    ids.sort_unstable();
    assert_eq!(
        ids,
        (0..total).collect::<Vec<_>>(),
        "each send completion once"
    );

    let r = poll_n(&p.cq_b, total as usize);
    let mut next = [0u64; 2];
    for (i, w) in r.iter().enumerate() {
        assert_ok(w, w.wr_id, WcOpcode::Recv);
        let (t, k) = ((w.wr_id >> 32) as usize, w.wr_id & 0xffff_ffff);
        assert!(t < 2, "receive from nowhere: {:#x}", w.wr_id);
        assert_eq!(k, next[t], "thread {t}'s receives out of order");
        next[t] += 1;
        assert_eq!(
            read_mr(&mr_b, slot(w.wr_id), 16),
            payload(i as u64)[..16],
            "message {i} in receive {:#x}",
            w.wr_id
        );
    }
    p.assert_quiet();
}

/// Each thread repeatedly creates a QP on its own CQ, connects it to itself,
/// runs full send queues of RDMA WRITEs through it and destroys it. The
/// device hands out the lowest free QP number, so numbers move between
/// threads all the time; a completion credited to the wrong QP, or a QP
/// table entry removed by the wrong thread, shows up as a stuck queue, an
/// unknown-QP error or a foreign `qp_num`.
fn qp_churn(mode: ExecMode) {
    const CHURNERS: usize = 3;
    const ROUNDS: usize = 150;
    let ctx = open(mode);
    let pd = ctx.alloc_pd().expect("alloc_pd");
    std::thread::scope(|s| {
        for t in 0..CHURNERS {
            let (ctx, pd) = (&ctx, &pd);
            s.spawn(move || {
                let cq = ctx.create_cq(32).expect("create_cq");
                let mr = pd.alloc_mr(4096, ALL_ACCESS).expect("alloc_mr");
                for round in 0..ROUNDS {
                    let qp = create_qp(pd, &cq, &cq, cap(8, 1, 16), false);
                    let qpn = qp.qp_num();
                    connect(ctx, &qp, qpn, &Conn::default());
                    let max = qp.cap().max_send_wr as u64;
                    for batch in 0..3u64 {
                        let value = ((t as u64) << 48 | (round as u64) << 8 | batch).to_le_bytes();
                        let wrs: Vec<SendWr<'_>> = (0..max)
                            .map(|i| SendWr {
                                wr_id: batch * max + i,
                                op: SendOp::RdmaWrite {
                                    remote: RemoteAddr {
                                        addr: mr.addr() + 8 * t as u64,
                                        rkey: mr.rkey(),
                                    },
                                },
                                payload: Payload::Inline(&value),
                                flags: if i == max - 1 {
                                    send_flags::SIGNALED
                                } else {
                                    0
                                },
                            })
                            .collect();
                        qp.post_send(&wrs).unwrap_or_else(|e| {
                            panic!("thread {t} round {round} batch {batch}: {e}")
                        });
                        let wc = poll_one(&cq);
                        assert_ok(&wc, batch * max + max - 1, WcOpcode::RdmaWrite);
                        assert_eq!(wc.qp_num, qpn, "thread {t}: completion of another QP");
                        assert_eq!(read_mr(&mr, 8 * t, 8), value, "thread {t} round {round}");
                    }
                    qp.destroy()
                        .unwrap_or_else(|e| panic!("thread {t}: destroy: {}", e.error));
                }
                assert_cq_empty(ctx, &cq);
            });
        }
    });
    // Events still reach the right QP after all that reuse: a WRITE with a
    // bad rkey puts the responder in ERR, and its access error names it;
    // the requester learns of it from the NAK.
    let cq = ctx.create_cq(8).expect("create_cq");
    let a = create_qp(&pd, &cq, &cq, cap(4, 1, 16), false);
    let b = create_qp(&pd, &cq, &cq, cap(4, 1, 16), false);
    connect(&ctx, &a, b.qp_num(), &Conn::default());
    connect(&ctx, &b, a.qp_num(), &Conn::default());
    let mr = pd.alloc_mr(64, ALL_ACCESS).expect("alloc_mr");
    post_send(&a, write(2, &[sge(&mr, 0, 8)], 0x1000, 0xdead_0000));
    let wc = poll_one(&cq);
    assert_eq!(
        (wc.status, wc.qp_num),
        (WcStatus::RemAccessErr, a.qp_num()),
        "{wc:?}"
    );
    let ev = expect_event(&ctx);
    assert_eq!(
        (ev.event_type, ev.obj),
        (EventType::QpAccessErr, b.qp_num())
    );
    assert_eq!(query_state(&a), QpState::Err);
    assert_eq!(query_state(&b), QpState::Err);
}

/// Threads ringing the doorbells of their own QPs at once (a device
/// worker takes one doorbell at a time from its latch and the rest from
/// its queue): every thread's WRITEs all complete, in order, and land.
fn qps_ringing_at_once(mode: ExecMode) {
    let ctx = open(mode);
    let pd = ctx.alloc_pd().unwrap();
    let pairs: Vec<_> = (0..THREADS)
        .map(|_| {
            let cq = ctx.create_cq(64).unwrap();
            let a = create_qp(&pd, &cq, &cq, cap(32, 1, 64), false);
            let b = create_qp(&pd, &cq, &cq, cap(32, 1, 64), false);
            connect(&ctx, &a, b.qp_num(), &Conn::default());
            connect(&ctx, &b, a.qp_num(), &Conn::default());
            let mr = pd.alloc_mr(8 * 16, ALL_ACCESS).unwrap();
            (cq, a, b, mr)
        })
        .collect();
    std::thread::scope(|s| {
        for (t, (cq, a, _b, mr)) in pairs.iter().enumerate() {
            let ctx = &ctx;
            s.spawn(move || {
                let mut wc = [WorkCompletion::default(); 4];
                for round in 0..PER_THREAD {
                    let v = (t as u64) << 32 | round;
                    let bytes = v.to_le_bytes();
                    // Batches of 16, the last one signaled.
                    let wrs: Vec<SendWr> = (0..16u64)
                        .map(|i| SendWr {
                            wr_id: round,
                            op: SendOp::RdmaWrite {
                                remote: RemoteAddr {
                                    addr: mr.addr() + 8 * i,
                                    rkey: mr.rkey(),
                                },
                            },
                            payload: Payload::Inline(&bytes),
                            flags: if i == 15 { send_flags::SIGNALED } else { 0 },
                        })
                        .collect();
                    a.post_send(&wrs).unwrap();
                    let start = Instant::now();
                    let n = loop {
                        let n = cq.poll(&mut wc).unwrap();
                        if n > 0 {
                            break n;
                        }
                        assert!(
                            start.elapsed().as_secs() < 10,
                            "thread {t}: round {round} stalled"
                        );
                        ctx.hal().relax();
                    };
                    assert_eq!(n, 1);
                    assert_ok(&wc[0], round, WcOpcode::RdmaWrite);
                    let mut got = [0u8; 8 * 16];
                    mr.read(0, &mut got).unwrap();
                    assert!(
                        got.chunks(8).all(|c| c == bytes),
                        "thread {t} round {round}"
                    );
                }
            });
        }
    });
}

/// A thread's wait on its CQ: it spins on an empty poll and runs the NIC
/// on every 4096th spin only (as rnic-perf's inline runs do), so that the
/// NIC runs mostly in the threads that ring it; a poll that took nothing
/// for [`TIMEOUT`] fails the test.
struct Spin {
    last: Instant,
    spins: u32,
}

impl Spin {
    fn new() -> Self {
        Spin {
            last: Instant::now(),
            spins: 0,
        }
    }

    /// After a poll that took `n` completions.
    fn after(&mut self, ctx: &Ctx, n: usize, stalled: impl FnOnce() -> String) {
        if n > 0 {
            self.last = Instant::now();
            return;
        }
        assert!(self.last.elapsed() < TIMEOUT, "{}", stalled());
        self.spins = self.spins.wrapping_add(1);
        if self.spins % 4096 == 0 {
            ctx.hal().relax();
        } else {
            std::hint::spin_loop();
        }
    }
}

/// A sender thread keeps three QPs' send queues full of 4 KiB SENDs, one
/// doorbell per batch of 64, while the receiving thread rings a doorbell
/// for every receive, as a program reposting completion by completion
/// does; both spin on their CQs. On an inline NIC each doorbell runs the
/// device in the ringing thread: a thread running on from its own step
/// (the other side's traffic) hands the NIC over to a thread that comes to
/// step it, so the receiver gets back to its next post. Without that, in
/// an optimised build, the receiver ran the sender's traffic between two
/// posts for up to 65,536 steps, its receive queues ran dry, and every RNR
/// NAK sent a whole window again: nothing arrived for minutes (rnic-perf
/// send_bw -q 3 failed with no completion in 20 s). Every message arrives
/// whole and in order, and the NIC was handed over.
#[test]
fn a_reposting_receiver_keeps_up_with_a_sender_on_one_inline_nic() {
    const QPS: usize = 3;
    const DEPTH: u32 = 128;
    const BATCH: u64 = 64;
    const MESSAGES: u64 = 1024;
    const LEN: usize = 4096;
    let ctx = open(ExecMode::Inline);
    let pd = ctx.alloc_pd().expect("alloc_pd");
    let cq_a = ctx.create_cq(QPS as u32 * DEPTH).expect("create_cq a");
    let cq_b = ctx.create_cq(QPS as u32 * DEPTH).expect("create_cq b");
    let conn = Conn {
        min_rnr_timer: 1,
        timeout: 10,
        mtu: Mtu::Mtu4096,
        ..Conn::default()
    };
    let pairs: Vec<(EQp, EQp)> = (0..QPS)
        .map(|_| {
            let a = create_qp(&pd, &cq_a, &cq_a, cap(DEPTH, 1, 0), false);
            let b = create_qp(&pd, &cq_b, &cq_b, cap(DEPTH, 1, 0), false);
            connect(&ctx, &a, b.qp_num(), &conn);
            connect(&ctx, &b, a.qp_num(), &conn);
            (a, b)
        })
        .collect();
    // Message k of QP q goes from and to slot k % DEPTH of the QP's part
    // of each buffer: no more than DEPTH are outstanding on either side.
    let src = pd
        .alloc_mr(QPS * DEPTH as usize * LEN, ALL_ACCESS)
        .expect("alloc_mr");
    let dst = pd
        .alloc_mr(QPS * DEPTH as usize * LEN, ALL_ACCESS)
        .expect("alloc_mr");
    let slot = |q: usize, k: u64| (q * DEPTH as usize + (k % DEPTH as u64) as usize) * LEN;
    let data = |q: usize, k: u64| pattern((q as u64) << 32 | k, LEN);
    let before = ctx.hal().device().run_stats();
    std::thread::scope(|s| {
        let (pairs, src, cq_a, ctx) = (&pairs, &src, &cq_a, &ctx);
        s.spawn(move || {
            let mut sent = [0u64; QPS];
            let mut outstanding = [0u64; QPS];
            let mut wc = [WorkCompletion::default(); 16];
            let mut spin = Spin::new();
            while sent.iter().any(|&n| n < MESSAGES) || outstanding.iter().any(|&n| n > 0) {
                for q in 0..QPS {
                    if sent[q] < MESSAGES && outstanding[q] + BATCH <= DEPTH as u64 {
                        let sgls: Vec<[Sge; 1]> = (sent[q]..sent[q] + BATCH)
                            .map(|k| {
                                write_mr(src, slot(q, k), &data(q, k));
                                [sge(src, slot(q, k), LEN as u32)]
                            })
                            .collect();
                        let wrs: Vec<SendWr> = sgls
                            .iter()
                            .enumerate()
                            .map(|(j, sgl)| SendWr {
                                wr_id: q as u64,
                                op: SendOp::Send,
                                payload: Payload::Sgl(sgl),
                                // The last of a batch is signaled.
                                flags: if j as u64 == BATCH - 1 {
                                    send_flags::SIGNALED
                                } else {
                                    0
                                },
                            })
                            .collect();
                        pairs[q].0.post_send(&wrs).expect("post_send");
                        sent[q] += BATCH;
                        outstanding[q] += BATCH;
                    }
                }
                let n = cq_a.poll(&mut wc).expect("poll a");
                for w in &wc[..n] {
                    assert_eq!(w.status, WcStatus::Success, "{w:?}");
                    outstanding[w.wr_id as usize] -= BATCH;
                }
                spin.after(ctx, n, || {
                    format!("sends stalled: sent {sent:?}, outstanding {outstanding:?}")
                });
            }
        });
        let mut posted = [0u64; QPS];
        let mut received = [0u64; QPS];
        let mut wc = [WorkCompletion::default(); 16];
        let mut spin = Spin::new();
        while received.iter().any(|&n| n < MESSAGES) {
            for (q, (_, b)) in pairs.iter().enumerate() {
                while posted[q] < MESSAGES && posted[q] - received[q] < DEPTH as u64 {
                    let sgl = [sge(&dst, slot(q, posted[q]), LEN as u32)];
                    post_recv(b, recv(q as u64, &sgl));
                    posted[q] += 1;
                }
            }
            let n = cq_b.poll(&mut wc).expect("poll b");
            for w in &wc[..n] {
                assert_ok(w, w.wr_id, WcOpcode::Recv);
                assert_eq!(w.byte_len as usize, LEN);
                let (q, k) = (w.wr_id as usize, received[w.wr_id as usize]);
                assert!(
                    read_mr(&dst, slot(q, k), LEN) == data(q, k),
                    "QP {q}'s message {k}"
                );
                received[q] += 1;
            }
            spin.after(ctx, n, || {
                format!("no message for {TIMEOUT:?}: received {received:?}")
            });
        }
    });
    let after = ctx.hal().device().run_stats();
    assert!(
        after.handovers > before.handovers,
        "no thread handed the NIC over: {after:?}"
    );
}

both_modes!(
    concurrent_posters,
    concurrent_receivers_and_pollers,
    qp_churn,
    qps_ringing_at_once
);

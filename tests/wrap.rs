//! Ring wrap-around: thousands of operations through small queues (SQ and
//! RQ of 16, CQs of 32) so that every ring (SQ, RQ, CQ, command queue)
//! wraps many times, with every payload and every `wr_id` checked in
//! order. The posting loops are pipelined: they post whatever fits (a full
//! queue is an `ENOMEM` post error, which the loops treat as back-pressure)
//! and poll whatever completed, so in thread mode the device consumes
//! while the driver posts.

use std::time::Instant;

use rnic_tests::*;

/// Fails the test if a pipelined loop stops making progress.
struct Progress {
    last: Instant,
    what: &'static str,
}

impl Progress {
    fn new(what: &'static str) -> Self {
        Self {
            last: Instant::now(),
            what,
        }
    }

    /// Records whether the last pass did anything; panics after
    /// [`TIMEOUT`] without progress.
    fn tick(&mut self, moved: bool, state: impl FnOnce() -> String) {
        if moved {
            self.last = Instant::now();
        } else if self.last.elapsed() > TIMEOUT {
            panic!("{}: no progress for {TIMEOUT:?}: {}", self.what, state());
        } else {
            std::thread::yield_now();
        }
    }
}

/// Posts the requests `make` builds for `first..first + n`, as one batch;
/// returns how many were posted (a full queue stops the batch).
fn post_batch<T>(
    n: usize,
    post: impl FnOnce(&[T]) -> Result<(), PostError>,
    make: impl Fn(usize) -> T,
) -> usize {
    let wrs: Vec<T> = (0..n).map(make).collect();
    match post(&wrs) {
        Ok(()) => n,
        Err(e) if e.error.kind() == ErrorKind::NoMemory => e.index,
        Err(e) => panic!("post failed: {e}"),
    }
}

const SEND_N: usize = 5003;
const SLOT: usize = 256;

fn send_len(i: usize) -> usize {
    1 + (i * 37) % SLOT
}

/// 5000+ SEND/RECV pairs through 16-entry queues and 32-entry CQs; every
/// fifth SEND is unsignaled.
fn send_recv_wraps(mode: ExecMode) {
    send_recv_stream(mode, SEND_N);
}

/// 70 000 SEND/RECV pairs: the 16-bit work queue indices of the doorbell
/// records and of `wqe_counter` wrap past 65535.
fn indices_wrap_past_16_bits(mode: ExecMode) {
    send_recv_stream(mode, 70_001);
}

/// `n` SEND/RECV pairs from `a` to `b`, pipelined, every payload and
/// `wr_id` checked in order.
fn send_recv_stream(mode: ExecMode, n: usize) {
    let p = Pair::with(
        mode,
        PairOpts {
            cap: cap(16, 1, 0),
            cq_size: 32,
            ..PairOpts::default()
        },
    );
    assert_eq!(p.cq_a.cqe(), 32);
    let (sq, rq) = (
        p.a.cap().max_send_wr as usize,
        p.b.cap().max_recv_wr as usize,
    );
    assert_eq!((sq, rq), (16, 16), "capacities");
    let mr_a = p.mr(SLOT * sq, ALL_ACCESS);
    let mr_b = p.mr(SLOT * rq, ALL_ACCESS);
    let signaled = |i: usize| i % 5 != 4 || i == n - 1;

    let (mut recv_posted, mut send_posted) = (0usize, 0usize);
    let (mut recv_done, mut send_done) = (0usize, 0usize);
    let mut round = 0usize;
    let mut wc = [WorkCompletion::default(); 5];
    let mut progress = Progress::new("send/recv loop");
    while recv_done < n || send_done < n {
        round += 1;
        let mut moved = false;
        // Receives: as many as fit, in batches of varying size so that
        // the ring ends fall at different places in a batch.
        let want = (round % 7 + 1).min(n - recv_posted);
        if want > 0 {
            let slots: Vec<[Sge; 1]> = (0..want)
                .map(|j| [sge(&mr_b, (recv_posted + j) % rq * SLOT, SLOT as u32)])
                .collect();
            let n = post_batch(
                want,
                |w| p.b.post_recv(w),
                |j| recv((recv_posted + j) as u64, &slots[j]),
            );
            recv_posted += n;
            moved |= n > 0;
        }
        // Sends: never more than the receives posted, so none meets RNR.
        // Only requests whose slot is free are filled in and posted: the
        // driver frees send queue room as completions are polled, exactly
        // as `send_done` counts.
        let want = (round % 11 + 1)
            .min(recv_posted - send_posted)
            .min(sq + send_done - send_posted);
        if want > 0 {
            let slots: Vec<[Sge; 1]> = (0..want)
                .map(|j| {
                    let i = send_posted + j;
                    [sge(&mr_a, i % sq * SLOT, send_len(i) as u32)]
                })
                .collect();
            for j in 0..want {
                let i = send_posted + j;
                write_mr(&mr_a, i % sq * SLOT, &pattern(i as u64, send_len(i)));
            }
            let n = post_batch(
                want,
                |w| p.a.post_send(w),
                |j| {
                    let i = send_posted + j;
                    SendWr {
                        wr_id: i as u64,
                        op: SendOp::Send,
                        payload: Payload::Sgl(&slots[j]),
                        flags: if signaled(i) { send_flags::SIGNALED } else { 0 },
                    }
                },
            );
            send_posted += n;
            moved |= n > 0;
        }
        // Receive completions, in order, with their data.
        let n = p.cq_b.poll(&mut wc).expect("poll b");
        for w in &wc[..n] {
            let i = recv_done;
            assert_ok(w, i as u64, WcOpcode::Recv);
            assert_eq!(w.byte_len as usize, send_len(i), "recv {i}");
            assert_eq!(w.src_qp, p.a.qp_num());
            let got = read_mr(&mr_b, i % rq * SLOT, send_len(i));
            assert!(got == pattern(i as u64, send_len(i)), "payload of recv {i}");
            recv_done += 1;
        }
        moved |= n > 0;
        // Send completions: the signaled ones, in order; each also
        // completes the unsignaled ones before it.
        let n = p.cq_a.poll(&mut wc).expect("poll a");
        for w in &wc[..n] {
            let mut i = send_done;
            while !signaled(i) {
                i += 1;
            }
            assert_ok(w, i as u64, WcOpcode::Send);
            send_done = i + 1;
        }
        moved |= n > 0;
        progress.tick(moved, || {
            format!(
                "recv posted {recv_posted} done {recv_done}, send posted {send_posted} done \
                 {send_done}"
            )
        });
    }
    assert_eq!((recv_posted, send_posted), (n, n));
    p.assert_quiet();
    assert_eq!(query_state(&p.a), QpState::Rts);
    assert_eq!(query_state(&p.b), QpState::Rts);
}

const WRITE_N: usize = 6007;
const WSLOT: usize = 128;
const WSLOTS: usize = 64;

fn write_len(i: usize) -> usize {
    1 + (i * 53) % 100
}

/// 6000 RDMA WRITEs through a 16-request send queue whose WQEs take one to
/// three BBs (inline payloads up to 100 bytes), so WQEs also straddle the
/// ring's end; every fourth is signaled. Each write's bytes are checked
/// at the target once a completion covers it.
fn write_wraps(mode: ExecMode) {
    let p = Pair::with(
        mode,
        PairOpts {
            cap: cap(16, 1, 100),
            cq_size: 32,
            ..PairOpts::default()
        },
    );
    let sq = p.a.cap().max_send_wr as usize;
    assert!((16..WSLOTS).contains(&sq), "max_send_wr {sq}");
    let mr_a = p.mr(WSLOT * WSLOTS, ALL_ACCESS);
    let mr_b = p.mr(WSLOT * WSLOTS, ALL_ACCESS);
    let signaled = |i: usize| i % 4 == 3 || i == WRITE_N - 1;
    let inline = |i: usize| i % 3 != 0;

    let (mut posted, mut done) = (0usize, 0usize);
    let mut round = 0usize;
    let mut wc = [WorkCompletion::default(); 4];
    let mut progress = Progress::new("write loop");
    while done < WRITE_N {
        round += 1;
        let mut moved = false;
        // At most `sq` requests are outstanding, fewer than the slots, so
        // a slot is rewritten only after the write that used it was
        // checked.
        let want = (round % 13 + 1)
            .min(WRITE_N - posted)
            .min(sq + done - posted);
        if want > 0 {
            let payloads: Vec<Vec<u8>> = (0..want)
                .map(|j| pattern((posted + j) as u64, write_len(posted + j)))
                .collect();
            let sgls: Vec<[Sge; 1]> = (0..want)
                .map(|j| {
                    let i = posted + j;
                    if !inline(i) {
                        write_mr(&mr_a, i % WSLOTS * WSLOT, &payloads[j]);
                    }
                    [sge(&mr_a, i % WSLOTS * WSLOT, write_len(i) as u32)]
                })
                .collect();
            let n = post_batch(
                want,
                |w| p.a.post_send(w),
                |j| {
                    let i = posted + j;
                    SendWr {
                        wr_id: i as u64,
                        op: SendOp::RdmaWrite {
                            remote: RemoteAddr {
                                addr: mr_b.addr() + (i % WSLOTS * WSLOT) as u64,
                                rkey: mr_b.rkey(),
                            },
                        },
                        payload: if inline(i) {
                            Payload::Inline(&payloads[j])
                        } else {
                            Payload::Sgl(&sgls[j])
                        },
                        flags: if signaled(i) { send_flags::SIGNALED } else { 0 },
                    }
                },
            );
            posted += n;
            moved |= n > 0;
        }
        let n = p.cq_a.poll(&mut wc).expect("poll a");
        for w in &wc[..n] {
            let mut last = done;
            while !signaled(last) {
                last += 1;
            }
            assert_ok(w, last as u64, WcOpcode::RdmaWrite);
            for i in done..=last {
                let got = read_mr(&mr_b, i % WSLOTS * WSLOT, write_len(i));
                assert!(got == pattern(i as u64, write_len(i)), "bytes of write {i}");
            }
            done = last + 1;
        }
        moved |= n > 0;
        progress.tick(moved, || format!("posted {posted}, done {done}"));
    }
    assert_eq!(posted, WRITE_N);
    p.assert_quiet();
    assert_eq!(query_state(&p.a), QpState::Rts);
}

/// Object create/destroy cycles through a 16-entry command queue (about
/// 2000 commands) on a device with room for very few objects, so each
/// cycle must really free what the previous one made. Every cycle moves
/// data, and a freed MR's key is never valid again.
fn command_queue_and_object_reuse(mode: ExecMode) {
    const CYCLES: u64 = 150;
    let cfg = EmuConfig {
        max_qp: 4,
        max_cq: 2,
        max_mr: 2,
        max_pd: 2,
        ..EmuConfig::default()
    };
    let ctx = open_with(cfg, mode);
    let mut old_keys = Vec::new();
    for cycle in 0..CYCLES {
        let pd = ctx.alloc_pd().expect("alloc_pd");
        let mr = pd.alloc_mr(256, ALL_ACCESS).expect("alloc_mr");
        assert!(
            !old_keys.contains(&mr.lkey()),
            "cycle {cycle}: lkey {:#x} was handed out before",
            mr.lkey()
        );
        old_keys.push(mr.lkey());
        let cq = ctx.create_cq(4).expect("create_cq");
        let qp = create_qp(&pd, &cq, &cq, cap(2, 1, 0), false);
        connect(&ctx, &qp, qp.qp_num(), &Conn::default());
        let data = pattern(cycle, 64);
        write_mr(&mr, 0, &data);
        post_recv(&qp, recv(cycle * 2, &[sge(&mr, 128, 128)]));
        post_send(&qp, send(cycle * 2 + 1, &[sge(&mr, 0, 64)]));
        let wcs = poll_n(&cq, 2);
        assert_ok(&wcs[0], cycle * 2, WcOpcode::Recv);
        assert_eq!(wcs[0].byte_len, 64);
        assert_ok(&wcs[1], cycle * 2 + 1, WcOpcode::Send);
        assert_eq!(read_mr(&mr, 128, 64), data);
        qp.destroy().map_err(|e| e.error).expect("destroy QP");
        cq.destroy().map_err(|e| e.error).expect("destroy CQ");
        mr.destroy().map_err(|e| e.error).expect("destroy MR");
        pd.destroy().map_err(|e| e.error).expect("destroy PD");
    }

    // A key from an earlier cycle names nothing now, although its MR
    // index is in use again.
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd.alloc_mr(256, ALL_ACCESS).unwrap();
    let cq = ctx.create_cq(4).unwrap();
    let qp = create_qp(&pd, &cq, &cq, cap(2, 1, 0), false);
    connect(&ctx, &qp, qp.qp_num(), &Conn::default());
    assert!(old_keys.iter().any(|k| k >> 8 == mr.lkey() >> 8));
    let stale = Sge {
        addr: mr.addr(),
        length: 16,
        lkey: old_keys[0],
    };
    post_recv(&qp, recv(1, &[sge(&mr, 128, 64)]));
    post_send(&qp, send(2, &[stale]));
    let mut wcs = poll_n(&cq, 2);
    wcs.sort_by_key(|w| w.opcode == WcOpcode::Recv);
    assert_err(&wcs[0], 2, WcStatus::LocProtErr, Syndrome::BadLkey);
    assert_flushed(&wcs[1..], &[1]);
}

/// CQs of a single entry: the owner bit flips on every completion.
fn one_entry_cqs(mode: ExecMode) {
    let p = Pair::with(
        mode,
        PairOpts {
            cap: cap(4, 1, 0),
            cq_size: 1,
            ..PairOpts::default()
        },
    );
    assert_eq!((p.cq_a.cqe(), p.cq_b.cqe()), (1, 1));
    let mr_a = p.mr(64, ALL_ACCESS);
    let mr_b = p.mr(64, ALL_ACCESS);
    for i in 0..300u64 {
        let data = pattern(i, 24);
        write_mr(&mr_a, 0, &data);
        post_recv(&p.b, recv(i, &[sge(&mr_b, 0, 64)]));
        post_send(&p.a, send(i, &[sge(&mr_a, 0, 24)]));
        assert_ok(&poll_one(&p.cq_b), i, WcOpcode::Recv);
        assert_ok(&poll_one(&p.cq_a), i, WcOpcode::Send);
        assert_eq!(read_mr(&mr_b, 0, 24), data, "message {i}");
    }
    p.assert_quiet();
}

/// 5-BB send WQEs (16-entry gather lists, and inline payloads of up to
/// 256 bytes) in a 32-BB send queue: WQEs straddle the ring's end at
/// every possible offset, inline blocks included.
fn large_wqes_straddle_the_ring_end(mode: ExecMode) {
    let p = Pair::with(
        mode,
        PairOpts {
            cap: QpCap {
                max_send_wr: 4,
                max_recv_wr: 16,
                max_send_sge: 16,
                max_recv_sge: 1,
                max_inline_data: 256,
            },
            cq_size: 32,
            ..PairOpts::default()
        },
    );
    let sq = p.a.cap().max_send_wr as u64;
    let mr_a = p.mr(4096, ALL_ACCESS);
    let mr_b = p.mr(16 * 256, ALL_ACCESS);
    let src = pattern(41, 4096);
    write_mr(&mr_a, 0, &src);
    // Even requests gather 16 entries, odd ones carry 200..=256 bytes
    // inline.
    let list = |i: u64| -> Vec<Sge> {
        (0..16u64)
            .map(|j| {
                let off = ((i * 131 + j * 17) % 3800) as usize;
                sge(&mr_a, off, (1 + (i + j) % 13) as u32)
            })
            .collect()
    };
    let message = |i: u64| -> Vec<u8> {
        if i % 2 == 1 {
            return pattern(i, 200 + (i % 57) as usize);
        }
        list(i)
            .iter()
            .flat_map(|g| {
                let off = (g.addr - mr_a.addr()) as usize;
                src[off..off + g.length as usize].iter().copied()
            })
            .collect()
    };
    let mut next = 0u64;
    for round in 0..300u64 {
        let k = round % sq + 1;
        let lists: Vec<Vec<Sge>> = (next..next + k).map(list).collect();
        let msgs: Vec<Vec<u8>> = (next..next + k).map(message).collect();
        for i in next..next + k {
            post_recv(&p.b, recv(i, &[sge(&mr_b, (i % 16) as usize * 256, 256)]));
        }
        let wrs: Vec<SendWr> = (0..k as usize)
            .map(|j| {
                let i = next + j as u64;
                let payload = if i % 2 == 1 {
                    Payload::Inline(&msgs[j])
                } else {
                    Payload::Sgl(&lists[j])
                };
                SendWr {
                    payload,
                    ..send(i, &[])
                }
            })
            .collect();
        p.a.post_send(&wrs).expect("post_send");
        let s = poll_n(&p.cq_a, k as usize);
        let r = poll_n(&p.cq_b, k as usize);
        for j in 0..k as usize {
            let i = next + j as u64;
            assert_ok(&s[j], i, WcOpcode::Send);
            assert_ok(&r[j], i, WcOpcode::Recv);
            let msg = &msgs[j];
            assert_eq!(r[j].byte_len as usize, msg.len(), "send {i}");
            assert_eq!(
                &read_mr(&mr_b, (i % 16) as usize * 256, msg.len()),
                msg,
                "send {i}"
            );
        }
        next += k;
    }
    p.assert_quiet();
}

/// A one-entry command queue and a four-entry event queue: every command
/// wraps the command queue, hundreds of events wrap the event queue, and
/// events arriving while it is full are dropped (four kept), after which
/// it works on.
fn tiny_command_and_event_queues(mode: ExecMode) {
    let p = Pair::with(
        mode,
        PairOpts {
            driver: DriverConfig {
                log_cmdq_size: 0,
                log_eq_size: 2,
                ..DriverConfig::default()
            },
            ..PairOpts::default()
        },
    );
    let mr_a = p.mr(64, ALL_ACCESS);
    let mr_b = p.mr(64, ALL_ACCESS);
    for i in 0..300u64 {
        p.cq_b.arm(false);
        post_recv(&p.b, recv(i, &[sge(&mr_b, 0, 64)]));
        post_send(&p.a, send(i, &[sge(&mr_a, 0, 8)]));
        assert_ok(&poll_one(&p.cq_a), i, WcOpcode::Send);
        assert_ok(&poll_one(&p.cq_b), i, WcOpcode::Recv);
        let ev = expect_event(&p.ctx);
        assert_eq!(
            (ev.event_type, ev.obj),
            (EventType::Completion, p.cq_b.cq_num()),
            "cycle {i}"
        );
        if i % 50 == 0 {
            assert_eq!(query_state(&p.a), QpState::Rts);
        }
    }
    // A completion left unpolled makes every arm fire at once: six events
    // into a four-entry queue.
    post_recv(&p.b, recv(1000, &[sge(&mr_b, 0, 64)]));
    post_send(&p.a, send(1000, &[sge(&mr_a, 0, 8)]));
    assert_ok(&poll_one(&p.cq_a), 1000, WcOpcode::Send);
    settle(&p.ctx);
    for _ in 0..6 {
        p.cq_b.arm(false);
    }
    settle(&p.ctx);
    for i in 0..4 {
        let ev = p
            .ctx
            .poll_event()
            .unwrap_or_else(|| panic!("event {i} of 4"));
        assert_eq!(
            (ev.event_type, ev.obj),
            (EventType::Completion, p.cq_b.cq_num())
        );
    }
    assert_no_event(&p.ctx);
    // Room again: the next arm's event arrives.
    p.cq_b.arm(false);
    let ev = expect_event(&p.ctx);
    assert_eq!(
        (ev.event_type, ev.obj),
        (EventType::Completion, p.cq_b.cq_num())
    );
    assert_ok(&poll_one(&p.cq_b), 1000, WcOpcode::Recv);
    p.assert_quiet();
}

both_modes!(
    send_recv_wraps,
    indices_wrap_past_16_bits,
    write_wraps,
    command_queue_and_object_reuse,
    one_entry_cqs,
    large_wqes_straddle_the_ring_end,
    tiny_command_and_event_queues,
);

//! Randomized traffic against a reference model: batches of random
//! operations (every opcode, 1 to 4 gather/scatter entries of random
//! sizes and places, inline or not, signaled or not, with immediate data
//! or not) in both directions between two QPs. A software copy of both
//! MRs is updated as each operation should; after every batch the
//! completions are checked field by field, and the MRs are compared with
//! the model byte for byte. The generator is seeded, so a failure repeats.

use rnic_tests::*;

/// Slots of the MRs: each gather/scatter entry of an operation lies in a
/// different slot, so the entries of one list never overlap.
const SLOT: usize = 256;
const SLOTS: usize = 64;
const MR_LEN: usize = SLOT * SLOTS;
const ROUNDS: usize = 1500;

/// `n` entries `(offset, len)` in distinct slots, lengths in `min..=max`
/// (`max <= SLOT`), an entry empty one time in ten when `allow_empty`.
fn list(rng: &mut Rng, n: usize, min: usize, max: usize, allow_empty: bool) -> Vec<(usize, usize)> {
    let mut slots: Vec<usize> = Vec::with_capacity(n);
    while slots.len() < n {
        let s = rng.range(0, SLOTS - 1);
        if !slots.contains(&s) {
            slots.push(s);
        }
    }
    slots
        .into_iter()
        .map(|s| {
            let len = if allow_empty && rng.chance(10) {
                0
            } else {
                rng.range(min, max)
            };
            (s * SLOT + rng.range(0, SLOT - len), len)
        })
        .collect()
}

/// One side of the connection.
struct Side<'a> {
    qp: &'a EQp,
    cq: &'a ECq,
    mr: &'a EMr,
    /// What the MR should hold.
    model: Vec<u8>,
}

fn gather(model: &[u8], list: &[(usize, usize)]) -> Vec<u8> {
    list.iter()
        .flat_map(|&(o, l)| model[o..o + l].iter().copied())
        .collect()
}

fn scatter(model: &mut [u8], list: &[(usize, usize)], mut msg: &[u8]) {
    for &(o, l) in list {
        let n = l.min(msg.len());
        model[o..o + n].copy_from_slice(&msg[..n]);
        msg = &msg[n..];
    }
    assert!(msg.is_empty(), "the model's scatter list holds the message");
}

/// An operation of a batch, with what its completions should say.
struct Planned {
    wr_id: u64,
    op: SendOp,
    local: Vec<(usize, usize)>,
    inline: Option<Vec<u8>>,
    flags: u32,
    /// Opcode and byte_len of the send completion (if signaled).
    send_wc: (WcOpcode, u32),
    /// The receive it consumes at the peer: wr_id, opcode, byte_len, imm.
    recv_wc: Option<(u64, WcOpcode, u32, Option<[u8; 4]>)>,
}

fn random_traffic(mode: ExecMode) {
    let p = Pair::with(
        mode,
        PairOpts {
            cap: cap(8, 4, 64),
            cq_size: 32,
            ..PairOpts::default()
        },
    );
    let max_inline = p.a.cap().max_inline_data as usize;
    let mr_a = p.mr(MR_LEN, ALL_ACCESS);
    let mr_b = p.mr(MR_LEN, ALL_ACCESS);
    let mut sides = [
        Side {
            qp: &p.a,
            cq: &p.cq_a,
            mr: &mr_a,
            model: pattern(1, MR_LEN),
        },
        Side {
            qp: &p.b,
            cq: &p.cq_b,
            mr: &mr_b,
            model: pattern(2, MR_LEN),
        },
    ];
    for s in &sides {
        write_mr(s.mr, 0, &s.model);
    }
    let mut rng = Rng(0x5eed_0000_0001 + mode as u64);
    let mut next_id = 0u64;

    for round in 0..ROUNDS {
        let from = rng.range(0, 1);
        let to = 1 - from;
        let batch = rng.range(1, 6);
        let mut plans = Vec::new();
        let mut recvs: Vec<(u64, Vec<(usize, usize)>)> = Vec::new();
        // The model runs each batch in order. The device pipelines, so a
        // WQE after a READ or atomic could gather memory before the
        // response lands: such a WQE carries a FENCE, as the IB spec
        // requires of an application that depends on that order.
        let mut read_before = false;
        for i in 0..batch {
            next_id += 1;
            let wr_id = next_id;
            let kind = rng.range(0, 6);
            let imm = rng.chance(50).then(|| (rng.next() as u32).to_be_bytes());
            let signaled = i == batch - 1 || rng.chance(50);
            let mut flags = if signaled { send_flags::SIGNALED } else { 0 };
            if rng.chance(20) {
                flags |= send_flags::SOLICITED;
            }
            if read_before || rng.chance(20) {
                flags |= send_flags::FENCE;
            }
            read_before |= kind >= 4;
            let n = rng.range(1, 4);
            let local = list(&mut rng, n, 1, 120, true);
            let len: usize = local.iter().map(|e| e.1).sum();
            // SEND and WRITE kinds may carry their payload inline.
            let use_inline = kind <= 3 && len <= max_inline && rng.chance(30);
            let (model_from, model_to) = if from == 0 {
                let (x, y) = sides.split_at_mut(1);
                (&mut x[0].model, &mut y[0].model)
            } else {
                let (x, y) = sides.split_at_mut(1);
                (&mut y[0].model, &mut x[0].model)
            };
            let payload = gather(model_from, &local);
            let remote_off = rng.range(0, MR_LEN - len);
            let remote = |off: usize| RemoteAddr {
                addr: sides_addr(to, &mr_a, &mr_b) + off as u64,
                rkey: if to == 0 { mr_a.rkey() } else { mr_b.rkey() },
            };
            let mut recv_wc = None;
            let (op, send_wc) = match kind {
                // SEND, SEND with immediate: into a receive of 1..4
                // entries that holds it.
                0 | 1 => {
                    let rid = wr_id | 1 << 40;
                    // 1 to 4 entries that together hold the message.
                    let n = rng.range(len.div_ceil(SLOT).max(1), 4);
                    let list = list(&mut rng, n, len.div_ceil(n).max(1), SLOT, false);
                    scatter(model_to, &list, &payload);
                    let imm = if kind == 1 {
                        imm.or(Some([0; 4]))
                    } else {
                        None
                    };
                    recv_wc = Some((rid, WcOpcode::Recv, len as u32, imm));
                    recvs.push((rid, list));
                    let op = match imm {
                        Some(imm) => SendOp::SendWithImm { imm },
                        None => SendOp::Send,
                    };
                    (op, (WcOpcode::Send, 0))
                }
                // RDMA WRITE, with immediate.
                2 | 3 => {
                    model_to[remote_off..remote_off + len].copy_from_slice(&payload);
                    let op = if kind == 3 {
                        let rid = wr_id | 1 << 40;
                        let imm = imm.unwrap_or([9; 4]);
                        recv_wc = Some((rid, WcOpcode::RecvRdmaWithImm, len as u32, Some(imm)));
                        recvs.push((rid, list(&mut rng, 1, 1, 16, false)));
                        SendOp::RdmaWriteWithImm {
                            remote: remote(remote_off),
                            imm,
                        }
                    } else {
                        SendOp::RdmaWrite {
                            remote: remote(remote_off),
                        }
                    };
                    (op, (WcOpcode::RdmaWrite, 0))
                }
                // RDMA READ into the local scatter list.
                4 => {
                    let data = model_to[remote_off..remote_off + len].to_vec();
                    scatter(model_from, &local, &data);
                    let op = SendOp::RdmaRead {
                        remote: remote(remote_off),
                    };
                    (op, (WcOpcode::RdmaRead, len as u32))
                }
                // Atomics: 8 bytes at an aligned remote offset.
                _ => {
                    let at = rng.range(0, MR_LEN / 8 - 1) * 8;
                    let old = u64::from_le_bytes(model_to[at..at + 8].try_into().unwrap());
                    let (op, new, wc) = if kind == 5 {
                        let add = rng.next();
                        let op = SendOp::AtomicFetchAndAdd {
                            remote: remote(at),
                            add,
                        };
                        (op, old.wrapping_add(add), WcOpcode::FetchAdd)
                    } else {
                        // Hit or miss, evenly.
                        let compare = if rng.chance(50) { old } else { rng.next() };
                        let swap = rng.next();
                        let op = SendOp::AtomicCmpAndSwp {
                            remote: remote(at),
                            compare,
                            swap,
                        };
                        (
                            op,
                            if old == compare { swap } else { old },
                            WcOpcode::CompSwap,
                        )
                    };
                    model_to[at..at + 8].copy_from_slice(&new.to_le_bytes());
                    let (lo, _) = list(&mut rng, 1, 8, 8, false)[0];
                    let lo = lo - lo % 8;
                    model_from[lo..lo + 8].copy_from_slice(&old.to_le_bytes());
                    plans.push(Planned {
                        wr_id,
                        op,
                        local: vec![(lo, 8)],
                        inline: None,
                        flags,
                        send_wc: (wc, 8),
                        recv_wc: None,
                    });
                    continue;
                }
            };
            plans.push(Planned {
                wr_id,
                op,
                local,
                inline: use_inline.then_some(payload),
                flags,
                send_wc,
                recv_wc,
            });
        }

        // Post the receives, then the batch.
        let (src, dst) = (&sides[from], &sides[to]);
        for (rid, list) in &recvs {
            let sgl: Vec<Sge> = list
                .iter()
                .map(|&(o, l)| sge(dst.mr, o, l as u32))
                .collect();
            post_recv(dst.qp, recv(*rid, &sgl));
        }
        let sgls: Vec<Vec<Sge>> = plans
            .iter()
            .map(|pl| {
                pl.local
                    .iter()
                    .map(|&(o, l)| sge(src.mr, o, l as u32))
                    .collect()
            })
            .collect();
        let wrs: Vec<SendWr> = plans
            .iter()
            .zip(&sgls)
            .map(|(pl, sgl)| SendWr {
                wr_id: pl.wr_id,
                op: pl.op,
                payload: match &pl.inline {
                    Some(bytes) => Payload::Inline(bytes),
                    None => Payload::Sgl(sgl),
                },
                flags: pl.flags,
            })
            .collect();
        src.qp
            .post_send(&wrs)
            .unwrap_or_else(|e| panic!("round {round}: {e}"));

        // Completions, in order.
        let signaled: Vec<&Planned> = plans
            .iter()
            .filter(|pl| pl.flags & send_flags::SIGNALED != 0)
            .collect();
        let s = poll_n(src.cq, signaled.len());
        for (w, pl) in s.iter().zip(&signaled) {
            let what = format!("round {round}, {:?}", pl.op);
            assert_eq!(
                (w.wr_id, w.status, w.opcode, w.byte_len),
                (pl.wr_id, WcStatus::Success, pl.send_wc.0, pl.send_wc.1),
                "{what}: {w:#?}"
            );
        }
        let expected: Vec<_> = plans
            .iter()
            .filter_map(|pl| pl.recv_wc.map(|r| (r, pl.flags)))
            .collect();
        let r = poll_n(dst.cq, expected.len());
        for (w, ((rid, op, len, imm), flags)) in r.iter().zip(expected) {
            assert_ok(w, rid, op);
            assert_eq!(
                (w.byte_len, w.imm_data, w.src_qp),
                (len, imm, src.qp.qp_num()),
                "round {round}: {w:#?}"
            );
            assert_eq!(
                w.flags & wc_flags::SOLICITED != 0,
                flags & send_flags::SOLICITED != 0,
                "round {round}: {w:#?}"
            );
        }
        for side in &sides {
            let got = read_mr(side.mr, 0, MR_LEN);
            if let Some(i) = got.iter().zip(&side.model).position(|(g, m)| g != m) {
                panic!(
                    "round {round}: QP {}'s MR differs from the model at byte {i}",
                    side.qp.qp_num()
                );
            }
        }
    }
    p.assert_quiet();
}

fn sides_addr(side: usize, mr_a: &EMr, mr_b: &EMr) -> u64 {
    if side == 0 {
        mr_a.addr()
    } else {
        mr_b.addr()
    }
}

both_modes!(random_traffic);

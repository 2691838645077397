//! Scatter/gather lists: multi-entry gathers on the sender and scatters on
//! the receiver with uneven sizes, RDMA READ into several entries, entries
//! in different MRs (driver-allocated and user memory), and the largest
//! lists the device allows. Every test compares the whole destination
//! buffer with the image it should have, so a byte written in the wrong
//! place shows up.

use std::ptr::NonNull;

use rnic_tests::*;

const MR_LEN: usize = 4096;
const SENTINEL: u8 = 0xa5;

fn pair(mode: ExecMode, sge: u32) -> Pair {
    Pair::with(
        mode,
        PairOpts {
            cap: cap(8, sge, 0),
            ..PairOpts::default()
        },
    )
}

/// The bytes a gather list of `(offset, len)` entries over `src` reads, in
/// order.
fn gather(src: &[u8], list: &[(usize, u32)]) -> Vec<u8> {
    list.iter()
        .flat_map(|&(off, len)| src[off..off + len as usize].iter().copied())
        .collect()
}

/// Scatters `msg` over `(offset, len)` entries of `dst`, in order, as far
/// as the message reaches.
fn scatter(dst: &mut [u8], list: &[(usize, u32)], msg: &[u8]) {
    let mut at = 0;
    for &(off, len) in list {
        let n = (len as usize).min(msg.len() - at);
        dst[off..off + n].copy_from_slice(&msg[at..at + n]);
        at += n;
    }
    assert_eq!(at, msg.len(), "the scatter list holds the message");
}

fn sges(mr: &EMr, list: &[(usize, u32)]) -> Vec<Sge> {
    list.iter().map(|&(off, len)| sge(mr, off, len)).collect()
}

#[track_caller]
fn assert_image(what: &str, got: &[u8], want: &[u8]) {
    assert_eq!(got.len(), want.len());
    if let Some(i) = got.iter().zip(want).position(|(g, w)| g != w) {
        panic!(
            "{what}: first difference at byte {i}: got {:#04x}, want {:#04x}",
            got[i], want[i]
        );
    }
}

fn send_gather_and_scatter_uneven(mode: ExecMode) {
    let p = pair(mode, 8);
    let mr_a = p.mr(MR_LEN, ALL_ACCESS);
    let mr_b = p.mr(MR_LEN, ALL_ACCESS);
    let src = pattern(11, MR_LEN);
    write_mr(&mr_a, 0, &src);
    fill_mr(&mr_b, SENTINEL);

    // Out of order, with a zero-length entry that must be skipped.
    let g = [
        (5, 7),
        (3000, 100),
        (40, 1),
        (777, 33),
        (1024, 256),
        (2000, 0),
        (3901, 3),
    ];
    let s = [(10, 50), (100, 3), (200, 200), (1000, 1), (2000, 300)];
    let msg = gather(&src, &g);
    assert_eq!(msg.len(), 400);
    post_recv(&p.b, recv(1, &sges(&mr_b, &s)));
    post_send(&p.a, send(2, &sges(&mr_a, &g)));

    assert_ok(&poll_one(&p.cq_a), 2, WcOpcode::Send);
    let r = poll_one(&p.cq_b);
    assert_ok(&r, 1, WcOpcode::Recv);
    assert_eq!(r.byte_len, 400);
    let mut want = vec![SENTINEL; MR_LEN];
    // The last entry is only partly filled (146 of 300 bytes).
    scatter(&mut want, &s, &msg);
    assert_image("receive buffer", &read_mr(&mr_b, 0, MR_LEN), &want);
    p.assert_quiet();
}

fn rdma_write_gather(mode: ExecMode) {
    let p = pair(mode, 8);
    let mr_a = p.mr(MR_LEN, ALL_ACCESS);
    let mr_b = p.mr(MR_LEN, ALL_ACCESS);
    let src = pattern(12, MR_LEN);
    write_mr(&mr_a, 0, &src);
    fill_mr(&mr_b, SENTINEL);
    let g = [(4000, 96), (0, 1), (17, 300), (2048, 2)];
    let msg = gather(&src, &g);
    post_send(
        &p.a,
        write(3, &sges(&mr_a, &g), mr_b.addr() + 123, mr_b.rkey()),
    );
    assert_ok(&poll_one(&p.cq_a), 3, WcOpcode::RdmaWrite);
    let mut want = vec![SENTINEL; MR_LEN];
    want[123..123 + msg.len()].copy_from_slice(&msg);
    assert_image("write target", &read_mr(&mr_b, 0, MR_LEN), &want);
    p.assert_quiet();
}

fn rdma_read_scatter(mode: ExecMode) {
    let p = pair(mode, 8);
    let mr_a = p.mr(MR_LEN, ALL_ACCESS);
    let mr_b = p.mr(MR_LEN, ALL_ACCESS);
    let src = pattern(13, 524);
    write_mr(&mr_b, 3000, &src);
    fill_mr(&mr_a, SENTINEL);
    let s = [(0, 10), (20, 1), (100, 500), (4000, 13)];
    post_send(
        &p.a,
        read(4, &sges(&mr_a, &s), mr_b.addr() + 3000, mr_b.rkey()),
    );
    let w = poll_one(&p.cq_a);
    assert_ok(&w, 4, WcOpcode::RdmaRead);
    assert_eq!(w.byte_len, 524);
    let mut want = vec![SENTINEL; MR_LEN];
    scatter(&mut want, &s, &src);
    assert_image("read scatter list", &read_mr(&mr_a, 0, MR_LEN), &want);
    p.assert_quiet();
}

/// Gather and scatter lists mixing two MRs each: one driver-allocated, one
/// registered user memory, checked in the user memory itself once the MR
/// is gone.
fn sges_in_two_mrs(mode: ExecMode) {
    let p = pair(mode, 8);
    let mut user_a = pattern(14, MR_LEN);
    let mut user_b = vec![SENTINEL; MR_LEN];
    let a1 = p.mr(MR_LEN, ALL_ACCESS);
    let b1 = p.mr(MR_LEN, ALL_ACCESS);
    // SAFETY: the vectors outlive the MRs (dropped explicitly below before
    // the vectors are read) and are not otherwise touched meanwhile.
    let (a2, b2) = unsafe {
        (
            p.pd.reg_mr(
                NonNull::new(user_a.as_mut_ptr()).unwrap(),
                MR_LEN,
                ALL_ACCESS,
            )
            .expect("reg_mr a"),
            p.pd.reg_mr(
                NonNull::new(user_b.as_mut_ptr()).unwrap(),
                MR_LEN,
                ALL_ACCESS,
            )
            .expect("reg_mr b"),
        )
    };
    assert_ne!(a1.lkey(), a2.lkey());
    let src1 = pattern(15, MR_LEN);
    write_mr(&a1, 0, &src1);
    fill_mr(&b1, SENTINEL);
    let src2 = read_mr(&a2, 0, MR_LEN);

    let gl = [
        sge(&a1, 0, 10),
        sge(&a2, 5, 20),
        sge(&a1, 100, 30),
        sge(&a2, 0, 1),
    ];
    let mut msg = Vec::new();
    msg.extend_from_slice(&src1[0..10]);
    msg.extend_from_slice(&src2[5..25]);
    msg.extend_from_slice(&src1[100..130]);
    msg.extend_from_slice(&src2[0..1]);
    let sl = [sge(&b2, 0, 7), sge(&b1, 50, 30), sge(&b2, 100, 100)];
    post_recv(&p.b, recv(1, &sl));
    post_send(&p.a, send(2, &gl));
    assert_ok(&poll_one(&p.cq_a), 2, WcOpcode::Send);
    let r = poll_one(&p.cq_b);
    assert_ok(&r, 1, WcOpcode::Recv);
    assert_eq!(r.byte_len, 61);

    // READ from user memory back into both of a's MRs.
    let rl = [sge(&a1, 2000, 3), sge(&a2, 3000, 4)];
    post_send(&p.a, read(3, &rl, b2.addr() + 100, b2.rkey()));
    let w = poll_one(&p.cq_a);
    assert_ok(&w, 3, WcOpcode::RdmaRead);
    assert_eq!(w.byte_len, 7);
    // Atomic on user memory.
    write_u64(&b2, 1024, 41);
    post_send(
        &p.a,
        wr(
            4,
            SendOp::AtomicFetchAndAdd {
                remote: RemoteAddr {
                    addr: b2.addr() + 1024,
                    rkey: b2.rkey(),
                },
                add: 1,
            },
            &[sge(&a2, 8, 8)],
        ),
    );
    assert_ok(&poll_one(&p.cq_a), 4, WcOpcode::FetchAdd);

    let mut want_b1 = vec![SENTINEL; MR_LEN];
    want_b1[50..80].copy_from_slice(&msg[7..37]);
    assert_image("allocated receive MR", &read_mr(&b1, 0, MR_LEN), &want_b1);
    let mut want_a1 = src1.clone();
    want_a1[2000..2003].copy_from_slice(&msg[37..40]);
    assert_image("allocated read MR", &read_mr(&a1, 0, MR_LEN), &want_a1);
    p.assert_quiet();

    drop((a2, b2));
    let mut want_b2 = vec![SENTINEL; MR_LEN];
    want_b2[0..7].copy_from_slice(&msg[0..7]);
    want_b2[100..124].copy_from_slice(&msg[37..61]);
    want_b2[1024..1032].copy_from_slice(&42u64.to_le_bytes());
    assert_image("user receive memory", &user_b, &want_b2);
    let mut want_a2 = src2;
    want_a2[3000..3004].copy_from_slice(&msg[40..44]);
    want_a2[8..16].copy_from_slice(&41u64.to_le_bytes());
    assert_image("user read memory", &user_a, &want_a2);
}

/// The device's largest lists (16 entries) on both sides, entries of 1 to
/// 16 bytes.
fn sixteen_entries_each_way(mode: ExecMode) {
    let p = pair(mode, 16);
    assert!(p.a.cap().max_send_sge >= 16 && p.b.cap().max_recv_sge >= 16);
    let mr_a = p.mr(MR_LEN, ALL_ACCESS);
    let mr_b = p.mr(MR_LEN, ALL_ACCESS);
    let src = pattern(16, MR_LEN);
    write_mr(&mr_a, 0, &src);
    fill_mr(&mr_b, SENTINEL);
    let g: Vec<(usize, u32)> = (0..16).map(|i| (i * 200 + i, i as u32 + 1)).collect();
    let s: Vec<(usize, u32)> = (0..16).map(|i| (4000 - i * 100, 16 - i as u32)).collect();
    let msg = gather(&src, &g);
    assert_eq!(msg.len(), 136);
    post_recv(&p.b, recv(1, &sges(&mr_b, &s)));
    post_send(&p.a, send(2, &sges(&mr_a, &g)));
    assert_ok(&poll_one(&p.cq_a), 2, WcOpcode::Send);
    let r = poll_one(&p.cq_b);
    assert_ok(&r, 1, WcOpcode::Recv);
    assert_eq!(r.byte_len, 136);
    let mut want = vec![SENTINEL; MR_LEN];
    scatter(&mut want, &s, &msg);
    assert_image("16-entry scatter", &read_mr(&mr_b, 0, MR_LEN), &want);

    // And a 16-entry RDMA READ scatter list.
    fill_mr(&mr_a, SENTINEL);
    let remote = pattern(17, 136);
    write_mr(&mr_b, 0, &remote);
    post_send(&p.a, read(3, &sges(&mr_a, &s), mr_b.addr(), mr_b.rkey()));
    let w = poll_one(&p.cq_a);
    assert_ok(&w, 3, WcOpcode::RdmaRead);
    assert_eq!(w.byte_len, 136);
    let mut want = vec![SENTINEL; MR_LEN];
    scatter(&mut want, &s, &remote);
    assert_image("16-entry read scatter", &read_mr(&mr_a, 0, MR_LEN), &want);
    p.assert_quiet();
}

/// User memory registered at an unaligned address with an unaligned
/// length: SEND from it, SEND into it (with a zero-length receive entry
/// that must be skipped), RDMA WRITE and READ on it, checked in the user
/// memory itself.
fn unaligned_user_memory(mode: ExecMode) {
    let p = pair(mode, 4);
    let mut src = pattern(31, 6000);
    let mut dst = vec![SENTINEL; 6000];
    let (src_off, dst_off, len) = (3usize, 5usize, 4999usize);
    // SAFETY: both vectors outlive the MRs (dropped below before the
    // vectors are read) and are not otherwise touched meanwhile.
    let (ms, md) = unsafe {
        let sp = NonNull::new(src.as_mut_ptr().add(src_off)).unwrap();
        let dp = NonNull::new(dst.as_mut_ptr().add(dst_off)).unwrap();
        (
            p.pd.reg_mr(sp, len, ALL_ACCESS).expect("reg_mr src"),
            p.pd.reg_mr(dp, len, ALL_ACCESS).expect("reg_mr dst"),
        )
    };
    assert_eq!(ms.addr() % 8, (src.as_ptr() as u64 + 3) % 8);
    let orig = src.clone();
    let msg = gather(&orig[src_off..], &[(1, 700), (2000, 9)]);
    post_recv(
        &p.b,
        recv(
            1,
            &[sge(&md, 0, 100), sge(&md, 200, 0), sge(&md, 301, 1000)],
        ),
    );
    post_send(&p.a, send(2, &[sge(&ms, 1, 700), sge(&ms, 2000, 9)]));
    assert_ok(&poll_one(&p.cq_a), 2, WcOpcode::Send);
    let r = poll_one(&p.cq_b);
    assert_ok(&r, 1, WcOpcode::Recv);
    assert_eq!(r.byte_len, 709);
    // RDMA WRITE to the last bytes of the destination, READ back into the
    // source's last bytes.
    post_send(
        &p.a,
        write(
            3,
            &[sge(&ms, 0, 13)],
            md.addr() + len as u64 - 13,
            md.rkey(),
        ),
    );
    assert_ok(&poll_one(&p.cq_a), 3, WcOpcode::RdmaWrite);
    post_send(
        &p.a,
        read(4, &[sge(&ms, len - 100, 100)], md.addr() + 301, md.rkey()),
    );
    assert_ok(&poll_one(&p.cq_a), 4, WcOpcode::RdmaRead);
    p.assert_quiet();
    drop((ms, md));

    let mut want_dst = vec![SENTINEL; 6000];
    let d = &mut want_dst[dst_off..dst_off + len];
    scatter(d, &[(0, 100), (200, 0), (301, 1000)], &msg);
    d[len - 13..].copy_from_slice(&orig[src_off..src_off + 13]);
    assert_image("destination user memory", &dst, &want_dst);
    let mut want_src = orig.clone();
    want_src[src_off + len - 100..src_off + len].copy_from_slice(&msg[100..200]);
    assert_image("source user memory", &src, &want_src);
}

/// Gather lists need no access right (local read is always allowed), and
/// READ needs only REMOTE_READ at the source.
fn gather_needs_no_access_rights(mode: ExecMode) {
    let p = pair(mode, 2);
    let plain = p.mr(256, 0);
    let readable = p.mr(256, access::REMOTE_READ);
    let mr_a = p.mr(256, ALL_ACCESS);
    let mr_b = p.mr(256, ALL_ACCESS);
    write_mr(&plain, 0, b"no rights needed");
    write_mr(&readable, 100, b"remote read only");
    post_recv(&p.b, recv(1, &[sge(&mr_b, 0, 64)]));
    post_send(&p.a, send(1, &[sge(&plain, 0, 16)]));
    post_send(
        &p.a,
        write(2, &[sge(&plain, 3, 6)], mr_b.addr() + 100, mr_b.rkey()),
    );
    post_send(
        &p.a,
        read(
            3,
            &[sge(&mr_a, 0, 16)],
            readable.addr() + 100,
            readable.rkey(),
        ),
    );
    let s = poll_n(&p.cq_a, 3);
    assert_ok(&s[0], 1, WcOpcode::Send);
    assert_ok(&s[1], 2, WcOpcode::RdmaWrite);
    assert_ok(&s[2], 3, WcOpcode::RdmaRead);
    assert_ok(&poll_one(&p.cq_b), 1, WcOpcode::Recv);
    assert_eq!(read_mr(&mr_b, 0, 16), b"no rights needed");
    assert_eq!(read_mr(&mr_b, 100, 6), b"rights");
    assert_eq!(read_mr(&mr_a, 0, 16), b"remote read only");
    p.assert_quiet();
}

/// Zero-length MRs, allocated or of user memory: their keys serve
/// zero-length accesses, and one byte through them is out of bounds.
fn zero_length_mrs(mode: ExecMode) {
    let p = pair(mode, 1);
    let zero = p.mr(0, ALL_ACCESS);
    let mut byte = 0u8;
    // SAFETY: a zero-length registration reaches none of `byte`.
    let user = unsafe { p.pd.reg_mr(NonNull::from(&mut byte), 0, ALL_ACCESS) }.unwrap();
    for mr in [&zero, &user] {
        assert!(mr.is_empty());
        assert_ne!(mr.lkey(), 0);
        assert!(mr.sge(0, 1).is_err(), "no byte to name");
    }
    let buf = p.mr(64, ALL_ACCESS);
    post_recv(&p.b, recv(1, &[sge(&buf, 0, 64)]));
    post_send(&p.a, send(1, &[sge(&zero, 0, 0)]));
    post_send(
        &p.a,
        write(2, &[sge(&user, 0, 0)], zero.addr(), zero.rkey()),
    );
    let s = poll_n(&p.cq_a, 2);
    assert_ok(&s[0], 1, WcOpcode::Send);
    assert_ok(&s[1], 2, WcOpcode::RdmaWrite);
    let r = poll_one(&p.cq_b);
    assert_ok(&r, 1, WcOpcode::Recv);
    assert_eq!(r.byte_len, 0);
    // One byte through a zero-length MR's lkey.
    let one = Sge {
        addr: zero.addr(),
        length: 1,
        lkey: zero.lkey(),
    };
    post_send(&p.a, send(3, &[one]));
    assert_err(
        &poll_one(&p.cq_a),
        3,
        WcStatus::LocProtErr,
        Syndrome::OutOfBounds,
    );
    zero.destroy().unwrap();
    user.destroy().unwrap();
}

/// The format's limits: a device allowing 31 entries per list, a send
/// WQE of 32 segments (8 BBs: control, remote address, 30 data segments)
/// and a receive WQE of 31 entries (a 512-byte slot).
fn thirty_one_entry_lists(mode: ExecMode) {
    let p = Pair::with(
        mode,
        PairOpts {
            config: EmuConfig {
                max_sge: 31,
                ..EmuConfig::default()
            },
            cap: QpCap {
                max_send_wr: 4,
                max_recv_wr: 4,
                max_send_sge: 30,
                max_recv_sge: 31,
                max_inline_data: 0,
            },
            ..PairOpts::default()
        },
    );
    assert!(p.a.cap().max_send_sge >= 30 && p.b.cap().max_recv_sge >= 31);
    let mr_a = p.mr(MR_LEN, ALL_ACCESS);
    let mr_b = p.mr(MR_LEN, ALL_ACCESS);
    let src = pattern(51, MR_LEN);
    write_mr(&mr_a, 0, &src);
    fill_mr(&mr_b, SENTINEL);
    let g: Vec<(usize, u32)> = (0..30).map(|i| (i * 130 + 7, (i % 5 + 1) as u32)).collect();
    let s: Vec<(usize, u32)> = (0..31).map(|i| (4000 - i * 120, 3)).collect();
    let msg = gather(&src, &g);
    assert_eq!(msg.len(), 90);
    post_recv(&p.b, recv(1, &sges(&mr_b, &s)));
    post_send(&p.a, send(2, &sges(&mr_a, &g)));
    assert_ok(&poll_one(&p.cq_a), 2, WcOpcode::Send);
    let r = poll_one(&p.cq_b);
    assert_ok(&r, 1, WcOpcode::Recv);
    assert_eq!(r.byte_len, 90);
    let mut want = vec![SENTINEL; MR_LEN];
    scatter(&mut want, &s, &msg);
    assert_image("31-entry scatter", &read_mr(&mr_b, 0, MR_LEN), &want);
    // A 30-entry gather RDMA WRITE: 32 segments.
    post_send(
        &p.a,
        write(3, &sges(&mr_a, &g), mr_b.addr() + 10, mr_b.rkey()),
    );
    assert_ok(&poll_one(&p.cq_a), 3, WcOpcode::RdmaWrite);
    want[10..100].copy_from_slice(&msg);
    assert_image("30-entry write", &read_mr(&mr_b, 0, MR_LEN), &want);
    p.assert_quiet();
}

both_modes!(
    send_gather_and_scatter_uneven,
    rdma_write_gather,
    rdma_read_scatter,
    sges_in_two_mrs,
    sixteen_entries_each_way,
    unaligned_user_memory,
    gather_needs_no_access_rights,
    thirty_one_entry_lists,
    zero_length_mrs,
);

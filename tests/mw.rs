//! Memory windows, SEND with invalidate, local invalidate and re-registered
//! MRs, in both execution modes, between two RC QPs: a window grants
//! remote access to part of an MR that grants none itself, only through
//! its current key and (type 2) only to the QP that bound it; it is
//! invalidated by the peer's SEND with invalidate or a local invalidate,
//! after which its key reaches nothing; every bind rule failing gives
//! MW_BIND_ERR; an MR with windows bound cannot be deregistered;
//! `rereg` changes an MR's access, PD and memory under the same keys.

use std::ptr::NonNull;

use rnic_driver::{Mw, MwType};
use rnic_tests::*;

type EMw = Mw<EmuHal>;

/// A pair whose QP `b` owns `mr` (local write and window binding only,
/// no remote rights) and a window of `mw_type`.
struct Setup {
    p: Pair,
    mr: EMr,
    src: EMr,
    mw: EMw,
}

fn setup(mode: ExecMode, mw_type: MwType) -> Setup {
    let p = Pair::new(mode);
    let mr = p.mr(4096, access::LOCAL_WRITE | access::MW_BIND);
    let src = p.mr(4096, ALL_ACCESS);
    let mw = p.pd.alloc_mw(mw_type).unwrap();
    Setup { p, mr, src, mw }
}

impl Setup {
    /// `b` binds the window to `len` bytes at offset `off` of `mr`.
    fn bind(&self, off: u64, len: u64, acc: u32, wr_id: u64) -> WorkCompletion {
        let bind = self.mw.bind_wr(&self.mr, self.mr.addr() + off, len, acc);
        post_send(&self.p.b, wr(wr_id, SendOp::BindMw { bind }, &[]));
        poll_one(&self.p.cq_b)
    }

    /// `a` writes `data` at offset `off` of `mr` through `rkey`.
    fn write(&self, wr_id: u64, off: u64, data: &[u8], rkey: u32) -> WorkCompletion {
        write_mr(&self.src, 0, data);
        let sg = [sge(&self.src, 0, data.len() as u32)];
        post_send(&self.p.a, write(wr_id, &sg, self.mr.addr() + off, rkey));
        poll_one(&self.p.cq_a)
    }
}

/// `LOCAL_WRITE` in a bind's access, which programs pass (rdma-core's
/// tests do), is no right of a window: the driver drops it and the bind
/// gives the remote rights asked.
fn local_write_in_a_bind_is_dropped(mode: ExecMode) {
    let s = setup(mode, MwType::Type2);
    let wc = s.bind(0, 64, access::LOCAL_WRITE | access::REMOTE_WRITE, 1);
    assert_ok(&wc, 1, WcOpcode::BindMw);
    assert_ok(
        &s.write(2, 8, b"granted", s.mw.rkey()),
        2,
        WcOpcode::RdmaWrite,
    );
    assert_eq!(read_mr(&s.mr, 8, 7), b"granted");
}

fn type2_bound_used_and_invalidated_by_the_peer(mode: ExecMode) {
    let s = setup(mode, MwType::Type2);
    let old = s.mw.rkey();
    let wc = s.bind(100, 200, access::REMOTE_WRITE | access::REMOTE_READ, 1);
    assert_ok(&wc, 1, WcOpcode::BindMw);
    let rkey = s.mw.rkey();
    assert_eq!(rkey >> 8, old >> 8, "same index");
    assert_ne!(rkey, old, "a new key byte");
    assert_ok(
        &s.write(2, 120, b"through the window", rkey),
        2,
        WcOpcode::RdmaWrite,
    );
    assert_eq!(read_mr(&s.mr, 120, 18), b"through the window");
    // READ back through it.
    let dst = [sge(&s.src, 1000, 18)];
    post_send(&s.p.a, read(3, &dst, s.mr.addr() + 120, rkey));
    assert_ok(&poll_one(&s.p.cq_a), 3, WcOpcode::RdmaRead);
    assert_eq!(read_mr(&s.src, 1000, 18), b"through the window");
    // The peer's SEND with invalidate frees it.
    let rb = p_mr_recv(&s);
    post_send(
        &s.p.a,
        wr(4, SendOp::SendWithInv { rkey }, &[sge(&s.src, 0, 5)]),
    );
    assert_ok(&poll_one(&s.p.cq_a), 4, WcOpcode::Send);
    let wc = poll_one(&s.p.cq_b);
    assert_ok(&wc, 9, WcOpcode::Recv);
    assert!(wc.flags & wc_flags::WITH_INV != 0);
    assert_eq!(wc.invalidated_rkey(), Some(rkey));
    drop(rb);
    // Its key reaches nothing now.
    let wc = s.write(5, 120, b"x", rkey);
    assert_eq!(wc.status, WcStatus::RemAccessErr);
    let ev = expect_event(&s.p.ctx);
    assert_eq!(ev.event_type, EventType::QpAccessErr);
    assert_eq!(ev.syndrome, Syndrome::BadRkey as u32);
}

/// Posts a receive of 64 bytes on `b` (wr_id 9); the buffer.
fn p_mr_recv(s: &Setup) -> EMr {
    let buf = s.p.mr(64, access::LOCAL_WRITE);
    post_recv(&s.p.b, recv(9, &[sge(&buf, 0, 64)]));
    buf
}

fn local_invalidate_and_rebind(mode: ExecMode) {
    let s = setup(mode, MwType::Type2);
    assert_ok(&s.bind(0, 64, access::REMOTE_WRITE, 1), 1, WcOpcode::BindMw);
    let first = s.mw.rkey();
    post_send(&s.p.b, wr(2, SendOp::LocalInv { rkey: first }, &[]));
    assert_ok(&poll_one(&s.p.cq_b), 2, WcOpcode::LocalInv);
    // Free again: it binds anew, elsewhere, under the next key.
    assert_ok(
        &s.bind(1000, 64, access::REMOTE_WRITE, 3),
        3,
        WcOpcode::BindMw,
    );
    let second = s.mw.rkey();
    assert_ne!(second, first);
    assert_ok(
        &s.write(4, 1000, b"rebound", second),
        4,
        WcOpcode::RdmaWrite,
    );
    assert_eq!(read_mr(&s.mr, 1000, 7), b"rebound");
    // A bound window keeps its MR from being deregistered; deallocating
    // the window unbinds it.
    let Setup { p, mr, mw, .. } = s;
    let e = mr.destroy().unwrap_err();
    assert_eq!(e.error.kind(), ErrorKind::Busy, "{}", e.error);
    let mr = e.object.unwrap();
    mw.destroy().unwrap();
    mr.destroy().unwrap();
    p.assert_quiet();
}

fn type1_bound_by_ibv_bind_mw(mode: ExecMode) {
    let s = setup(mode, MwType::Type1);
    let before = s.mw.rkey();
    let rkey =
        s.p.b
            .bind_mw(
                &s.mw,
                &s.mr,
                (s.mr.addr(), 128, access::REMOTE_WRITE),
                1,
                send_flags::SIGNALED,
            )
            .unwrap();
    assert_eq!(rkey, s.mw.rkey());
    assert_ok(&poll_one(&s.p.cq_b), 1, WcOpcode::BindMw);
    // Any QP of the PD may use a type 1 window.
    assert_ok(&s.write(2, 8, b"type one", rkey), 2, WcOpcode::RdmaWrite);
    assert_eq!(read_mr(&s.mr, 8, 8), b"type one");
    // Rebinding moves it and retires the old key.
    let again =
        s.p.a
            .bind_mw(
                &s.mw,
                &s.mr,
                (s.mr.addr() + 2048, 128, access::REMOTE_WRITE),
                3,
                send_flags::SIGNALED,
            )
            .unwrap();
    assert_ok(&poll_one(&s.p.cq_a), 3, WcOpcode::BindMw);
    assert_ne!(again, rkey);
    assert_ne!(before, again);
    assert_ok(&s.write(4, 2048, b"moved", again), 4, WcOpcode::RdmaWrite);
    assert_eq!(s.write(5, 8, b"stale", rkey).status, WcStatus::RemAccessErr);
    assert_eq!(read_mr(&s.mr, 8, 8), b"type one", "untouched");
}

/// Each broken bind rule fails the bind with MW_BIND_ERR (a fresh pair
/// each time: the error moves the QP to ERR).
fn bind_errors(mode: ExecMode) {
    let bad = |what: &str, f: &dyn Fn(&Setup) -> WorkCompletion, syn: Syndrome| {
        let s = setup(mode, MwType::Type2);
        let wc = f(&s);
        assert_err(&wc, wc.wr_id, WcStatus::MwBindErr, syn);
        assert_eq!(wc.opcode, WcOpcode::BindMw, "{what}");
    };
    bad(
        "outside the MR",
        &|s| s.bind(4000, 200, access::REMOTE_WRITE, 1),
        Syndrome::OutOfBounds,
    );
    bad(
        "not a REMOTE_* flag",
        &|s| s.bind(0, 8, access::REMOTE_READ | access::MW_BIND, 1),
        Syndrome::AccessDenied,
    );
    bad(
        "an MR without MW_BIND",
        &|s| {
            let plain = s.p.mr(64, ALL_ACCESS);
            let bind = s.mw.bind_wr(&plain, plain.addr(), 8, access::REMOTE_READ);
            post_send(&s.p.b, wr(1, SendOp::BindMw { bind }, &[]));
            poll_one(&s.p.cq_b)
        },
        Syndrome::AccessDenied,
    );
    bad(
        "remote write over an MR without local write",
        &|s| {
            let ro = s.p.mr(64, access::MW_BIND);
            let bind = s.mw.bind_wr(&ro, ro.addr(), 8, access::REMOTE_WRITE);
            post_send(&s.p.b, wr(1, SendOp::BindMw { bind }, &[]));
            poll_one(&s.p.cq_b)
        },
        Syndrome::AccessDenied,
    );
    bad(
        "a bound type 2 window",
        &|s| {
            assert_ok(&s.bind(0, 8, access::REMOTE_READ, 1), 1, WcOpcode::BindMw);
            s.bind(0, 8, access::REMOTE_READ, 2)
        },
        Syndrome::BadRkey,
    );
    bad(
        "another PD's window",
        &|s| {
            let other = s.p.ctx.alloc_pd().unwrap().alloc_mw(MwType::Type2).unwrap();
            let bind = other.bind_wr(&s.mr, s.mr.addr(), 8, access::REMOTE_READ);
            post_send(&s.p.b, wr(1, SendOp::BindMw { bind }, &[]));
            poll_one(&s.p.cq_b)
        },
        Syndrome::PdMismatch,
    );
    // Invalidating what is no bound type 2 window fails the request.
    let s = setup(mode, MwType::Type2);
    post_send(&s.p.b, wr(1, SendOp::LocalInv { rkey: s.mr.rkey() }, &[]));
    assert_err(
        &poll_one(&s.p.cq_b),
        1,
        WcStatus::LocQpOpErr,
        Syndrome::BadRkey,
    );
    // A SEND with invalidate of a key that is no window of the receiving
    // QP: its receive fails, and so does the SEND.
    let s = setup(mode, MwType::Type2);
    let _buf = p_mr_recv(&s);
    post_send(
        &s.p.a,
        wr(
            2,
            SendOp::SendWithInv { rkey: s.mw.rkey() },
            &[sge(&s.src, 0, 4)],
        ),
    );
    assert_err(
        &poll_one(&s.p.cq_b),
        9,
        WcStatus::RemInvReqErr,
        Syndrome::BadRkey,
    );
    assert_err(
        &poll_one(&s.p.cq_a),
        2,
        WcStatus::RemInvReqErr,
        Syndrome::RemoteInvalidRequest,
    );
}

/// A window grants only its own rights, and a type 2 window serves (and
/// is invalidated by) only requests to the QP that bound it.
fn window_rights_and_owner(mode: ExecMode) {
    let s = setup(mode, MwType::Type2);
    assert_ok(&s.bind(0, 64, access::REMOTE_WRITE, 1), 1, WcOpcode::BindMw);
    post_send(
        &s.p.a,
        read(2, &[sge(&s.src, 0, 8)], s.mr.addr(), s.mw.rkey()),
    );
    assert_eq!(poll_one(&s.p.cq_a).status, WcStatus::RemAccessErr);
    assert_eq!(
        expect_event(&s.p.ctx).syndrome,
        Syndrome::AccessDenied as u32
    );
    // Bound by `a`, the window is not `b`'s: a WRITE to `b` through it
    // fails ...
    let s = setup(mode, MwType::Type2);
    let bind = s.mw.bind_wr(&s.mr, s.mr.addr(), 64, access::REMOTE_WRITE);
    post_send(&s.p.a, wr(1, SendOp::BindMw { bind }, &[]));
    assert_ok(&poll_one(&s.p.cq_a), 1, WcOpcode::BindMw);
    assert_eq!(
        s.write(2, 0, b"not yours", s.mw.rkey()).status,
        WcStatus::RemAccessErr
    );
    assert_eq!(expect_event(&s.p.ctx).syndrome, Syndrome::PdMismatch as u32);
    // ... and so does `b` being asked to invalidate it.
    let s = setup(mode, MwType::Type2);
    let bind = s.mw.bind_wr(&s.mr, s.mr.addr(), 64, access::REMOTE_WRITE);
    post_send(&s.p.a, wr(1, SendOp::BindMw { bind }, &[]));
    assert_ok(&poll_one(&s.p.cq_a), 1, WcOpcode::BindMw);
    let _buf = p_mr_recv(&s);
    let rkey = s.mw.rkey();
    post_send(
        &s.p.a,
        wr(2, SendOp::SendWithInv { rkey }, &[sge(&s.src, 0, 4)]),
    );
    assert_err(
        &poll_one(&s.p.cq_b),
        9,
        WcStatus::RemInvReqErr,
        Syndrome::PdMismatch,
    );
}

/// `rereg`: new access rights, a new PD, new memory, the same keys.
fn rereg_mr(mode: ExecMode) {
    let p = Pair::new(mode);
    let src = p.mr(64, ALL_ACCESS);
    write_mr(&src, 0, b"reregistered");
    let mut mr = p.mr(64, access::LOCAL_WRITE);
    let key = mr.rkey();
    mr.rereg(None, Some(access::LOCAL_WRITE | access::REMOTE_WRITE))
        .unwrap();
    assert_eq!(mr.access(), access::LOCAL_WRITE | access::REMOTE_WRITE);
    post_send(&p.a, write(1, &[sge(&src, 0, 12)], mr.addr(), key));
    assert_ok(&poll_one(&p.cq_a), 1, WcOpcode::RdmaWrite);
    assert_eq!(read_mr(&mr, 0, 12), b"reregistered");
    // New memory of the caller's, same key.
    let mut buf = vec![0u8; 256];
    let ptr = NonNull::new(buf.as_mut_ptr()).unwrap();
    // SAFETY: `buf` outlives the MR (dropped below first) and does not move.
    unsafe { mr.rereg_memory(ptr, buf.len()) }.unwrap();
    assert_eq!((mr.addr(), mr.len()), (ptr.as_ptr() as u64, 256));
    post_send(&p.a, write(2, &[sge(&src, 0, 12)], mr.addr() + 100, key));
    assert_ok(&poll_one(&p.cq_a), 2, WcOpcode::RdmaWrite);
    assert_eq!(read_mr(&mr, 100, 12), b"reregistered");
    // Another PD: the QPs' PD no longer reaches it.
    let other = p.ctx.alloc_pd().unwrap();
    assert_eq!(
        mr.rereg(None, None).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    mr.rereg(Some(&other), None).unwrap();
    assert_eq!(mr.pd_num(), other.pd_num());
    post_send(&p.a, write(3, &[sge(&src, 0, 1)], mr.addr(), key));
    assert_eq!(poll_one(&p.cq_a).status, WcStatus::RemAccessErr);
    let ev = expect_event(&p.ctx);
    assert_eq!(ev.syndrome, Syndrome::PdMismatch as u32);
    drop(mr);
    drop(buf);
}

both_modes!(
    type2_bound_used_and_invalidated_by_the_peer,
    local_invalidate_and_rebind,
    type1_bound_by_ibv_bind_mw,
    bind_errors,
    local_write_in_a_bind_is_dropped,
    window_rights_and_owner,
    rereg_mr,
);

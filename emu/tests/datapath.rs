//! Device-level tests of the data path: SEND, WRITE, READ, atomics, error
//! completions, flushes, RNR, events and DMA refusal, in both execution
//! modes.

mod common;

use common::*;
use rnic_emu::ExecMode;
use rnic_hw_regs::cmd::{AddressVector, CmdOpcode, CreateQpOut, QpAttrs, RegMrOut};
use rnic_hw_regs::counters::counter;
use rnic_hw_regs::cqe::{Cqe, Syndrome};
use rnic_hw_regs::eqe::EventType;
use rnic_hw_regs::le32;
use rnic_hw_regs::uar::{CqArmCmd, QP_DBREC_RQ, QP_DBREC_SQ};
use rnic_queues::{DmaRegion, Hal};
use rnic_verbs::{access, qp_attr, Mtu, QpState, WcOpcode, WcStatus, WrOpcode};

both_modes!(
    send_recv_sgl,
    send_imm_and_inline,
    write_and_write_imm,
    read_and_atomics,
    unsignaled_and_wqe_wrap,
    unmapped_iova_refused,
    retired_mapping_is_cut_off,
    local_errors,
    remote_access_error,
    write_imm_access_error,
    no_rd_atomic_resources,
    rnr_stall_and_resume,
    rnr_retry_zero,
    rnr_retry_waits_for_the_timer,
    rnr_retry_exhausted,
    rnr_retry_counts_per_wqe,
    sq_dbrec_beyond_ring,
    rq_dbrec_beyond_ring,
    recv_too_small,
    dest_not_ready,
    flush_on_err_and_reset,
    cq_overrun,
    cq_arm_events,
    self_feeding_send_queue,
);

const ALL: u32 =
    access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;

/// Two connected QPs (a → b, b → a) with their own CQs and a shared MR pool.
struct Pair {
    t: Tdev,
    pdn: u32,
    a: TQp,
    b: TQp,
    acq: TCq,
    bcq: TCq,
}

fn pair(mode: ExecMode, rnr_retry: u8) -> Pair {
    let mut t = bring_up(mode);
    let pdn = t.create_pd();
    let acq = t.create_cq(6);
    let bcq = t.create_cq(6);
    let a = t.create_qp(pdn, &acq, &acq);
    let b = t.create_qp(pdn, &bcq, &bcq);
    t.connect(a.qpn, b.qpn, rnr_retry);
    t.connect(b.qpn, a.qpn, rnr_retry);
    Pair {
        t,
        pdn,
        a,
        b,
        acq,
        bcq,
    }
}

fn assert_cqe(c: &Cqe, wr_id: u64, status: WcStatus, opcode: WcOpcode) {
    assert_eq!(
        (c.wr_id.to_ne(), WcStatus::from_raw(c.status), c.opcode),
        (wr_id, Some(status), opcode.raw()),
        "vendor_err {:?}",
        Syndrome::from_raw(c.vendor_err.to_ne())
    );
}

fn syndrome(c: &Cqe) -> Option<Syndrome> {
    Syndrome::from_raw(c.vendor_err.to_ne())
}

fn state(t: &mut Tdev, qpn: u32) -> QpState {
    QpState::from_raw(t.query_qp(qpn).qp_state).unwrap()
}

fn send_recv_sgl(mode: ExecMode) {
    let mut p = pair(mode, 7);
    let hal = p.t.hal.clone();
    let src = p.t.reg_mr(p.pdn, 4096, 0);
    let dst = p.t.reg_mr(p.pdn, 4096, access::LOCAL_WRITE);
    let msg: Vec<u8> = (0..100u8).collect();
    src.region.write_bytes(0, &msg[..30]);
    src.region.write_bytes(1000, &msg[30..]);
    // Three receive SGEs of 10, 50 and 100 bytes.
    let sges = [
        dseg(dst.key, dst.addr(0), 10),
        dseg(dst.key, dst.addr(100), 50),
        dseg(dst.key, dst.addr(200), 100),
    ];
    p.b.post_recv(&hal, 0xb1, &sges);
    let w = Wqe::new(WrOpcode::Send, 0xa1)
        .sge(src.key, src.addr(0), 30)
        .sge(src.key, src.addr(1000), 70);
    p.a.post_send(&hal, &w);
    let c = p.acq.wait(&hal);
    assert_cqe(&c, 0xa1, WcStatus::Success, WcOpcode::Send);
    assert!(c.flags.is_send());
    assert_eq!(c.wqe_counter.to_ne(), 1);
    assert_eq!(c.qpn.to_ne(), p.a.qpn);
    let c = p.bcq.wait(&hal);
    assert_cqe(&c, 0xb1, WcStatus::Success, WcOpcode::Recv);
    assert_eq!(c.byte_len.to_ne(), 100);
    assert!(!c.flags.is_send() && !c.flags.with_imm());
    assert_eq!(c.wqe_counter.to_ne(), 1);
    assert_eq!(c.src_qp.to_ne(), p.a.qpn);
    let mut got = vec![0u8; 100];
    dst.region.read_bytes(0, &mut got[..10]);
    dst.region.read_bytes(100, &mut got[10..60]);
    dst.region.read_bytes(200, &mut got[60..]);
    assert_eq!(got, msg);
}

fn send_imm_and_inline(mode: ExecMode) {
    let mut p = pair(mode, 7);
    let hal = p.t.hal.clone();
    let dst = p.t.reg_mr(p.pdn, 4096, access::LOCAL_WRITE);
    p.b.post_recv(&hal, 1, &[dseg(dst.key, dst.addr(0), 64)]);
    p.b.post_recv(&hal, 2, &[dseg(dst.key, dst.addr(64), 64)]);
    let w = Wqe::new(WrOpcode::SendWithImm, 10)
        .imm([1, 2, 3, 4])
        .inline(b"hello");
    p.a.post_send(&hal, &w);
    // Inline payload of 60 bytes spans two BBs.
    let long = [0x5a; 60];
    p.a.post_send(&hal, &Wqe::new(WrOpcode::Send, 11).inline(&long));
    let c = p.bcq.wait(&hal);
    assert_cqe(&c, 1, WcStatus::Success, WcOpcode::Recv);
    assert!(c.flags.with_imm());
    assert_eq!(c.imm, [1, 2, 3, 4]);
    assert_eq!(c.byte_len.to_ne(), 5);
    let c = p.bcq.wait(&hal);
    assert_cqe(&c, 2, WcStatus::Success, WcOpcode::Recv);
    assert_eq!(c.byte_len.to_ne(), 60);
    let mut got = [0u8; 5];
    dst.region.read_bytes(0, &mut got);
    assert_eq!(&got, b"hello");
    let mut got = [0u8; 60];
    dst.region.read_bytes(64, &mut got);
    assert_eq!(got, long);
    assert_eq!(p.acq.wait(&hal).wqe_counter.to_ne(), 1);
    assert_eq!(p.acq.wait(&hal).wqe_counter.to_ne(), 3);
}

fn write_and_write_imm(mode: ExecMode) {
    let mut p = pair(mode, 7);
    let hal = p.t.hal.clone();
    let src = p.t.reg_mr(p.pdn, 4096, 0);
    let dst = p.t.reg_mr(p.pdn, 8192, ALL);
    src.region.write_bytes(0, &[7u8; 3000]);
    let w = Wqe::new(WrOpcode::RdmaWrite, 1)
        .raddr(dst.addr(5000), dst.key)
        .sge(src.key, src.addr(0), 3000);
    p.a.post_send(&hal, &w);
    let c = p.acq.wait(&hal);
    assert_cqe(&c, 1, WcStatus::Success, WcOpcode::RdmaWrite);
    let mut got = vec![0u8; 3002];
    dst.region.read_bytes(4999, &mut got);
    assert_eq!((got[0], got[1], got[3000], got[3001]), (0, 7, 7, 0));
    // WRITE with immediate consumes a receive WQE and reports the length.
    p.b.post_recv(&hal, 9, &[]);
    let w = Wqe::new(WrOpcode::RdmaWriteWithImm, 2)
        .imm([0xde, 0xad, 0xbe, 0xef])
        .raddr(dst.addr(0), dst.key)
        .inline(&[1, 2, 3]);
    p.a.post_send(&hal, &w);
    assert_cqe(&p.acq.wait(&hal), 2, WcStatus::Success, WcOpcode::RdmaWrite);
    let c = p.bcq.wait(&hal);
    assert_cqe(&c, 9, WcStatus::Success, WcOpcode::RecvRdmaWithImm);
    assert_eq!(c.byte_len.to_ne(), 3);
    assert!(c.flags.with_imm());
    assert_eq!(c.imm, [0xde, 0xad, 0xbe, 0xef]);
    let mut got = [0u8; 3];
    dst.region.read_bytes(0, &mut got);
    assert_eq!(got, [1, 2, 3]);
    // A zero-length WRITE checks no rkey (InfiniBand rule).
    let w = Wqe::new(WrOpcode::RdmaWrite, 3).raddr(0, 0xdead);
    p.a.post_send(&hal, &w);
    assert_cqe(&p.acq.wait(&hal), 3, WcStatus::Success, WcOpcode::RdmaWrite);
}

fn read_and_atomics(mode: ExecMode) {
    let mut p = pair(mode, 7);
    let hal = p.t.hal.clone();
    let local = p.t.reg_mr(p.pdn, 4096, access::LOCAL_WRITE);
    let remote = p.t.reg_mr(p.pdn, 4096, ALL);
    let data: Vec<u8> = (0..200).map(|i| i as u8).collect();
    remote.region.write_bytes(100, &data);
    let w = Wqe::new(WrOpcode::RdmaRead, 1)
        .raddr(remote.addr(100), remote.key)
        .sge(local.key, local.addr(0), 50)
        .sge(local.key, local.addr(1000), 150);
    p.a.post_send(&hal, &w);
    let c = p.acq.wait(&hal);
    assert_cqe(&c, 1, WcStatus::Success, WcOpcode::RdmaRead);
    assert_eq!(c.byte_len.to_ne(), 200);
    let mut got = vec![0u8; 200];
    local.region.read_bytes(0, &mut got[..50]);
    local.region.read_bytes(1000, &mut got[50..]);
    assert_eq!(got, data);

    remote.region.write(0, 40u64.to_le());
    let faa = Wqe::new(WrOpcode::AtomicFetchAndAdd, 2)
        .raddr(remote.addr(0), remote.key)
        .atomic(2, 0)
        .sge(local.key, local.addr(8), 8);
    p.a.post_send(&hal, &faa);
    let c = p.acq.wait(&hal);
    assert_cqe(&c, 2, WcStatus::Success, WcOpcode::FetchAdd);
    assert_eq!(c.byte_len.to_ne(), 8);
    assert_eq!(u64::from_le(local.region.read(8)), 40);
    assert_eq!(u64::from_le(remote.region.read(0)), 42);
    // Compare and swap: a miss leaves memory alone, a hit swaps.
    for (i, (cmp, expect)) in [(1u64, 42u64), (42, 1000)].into_iter().enumerate() {
        let cas = Wqe::new(WrOpcode::AtomicCmpAndSwp, 3 + i as u64)
            .raddr(remote.addr(0), remote.key)
            .atomic(1000, cmp)
            .sge(local.key, local.addr(16), 8);
        p.a.post_send(&hal, &cas);
        assert_cqe(
            &p.acq.wait(&hal),
            3 + i as u64,
            WcStatus::Success,
            WcOpcode::CompSwap,
        );
        assert_eq!(u64::from_le(local.region.read(16)), 42);
        assert_eq!(u64::from_le(remote.region.read(0)), expect);
    }
}

fn unsignaled_and_wqe_wrap(mode: ExecMode) {
    let mut p = pair(mode, 7);
    let hal = p.t.hal.clone();
    let src = p.t.reg_mr(p.pdn, 4096, 0);
    let dst = p.t.reg_mr(p.pdn, 4096, ALL);
    // 64 BBs in the SQ: 200 WRITEs of 1-3 BBs wrap it several times; only
    // every 4th is signaled, and its counter covers the others.
    let mut expect_counter = 0u32;
    for i in 0..200u64 {
        let mut w = Wqe::new(WrOpcode::RdmaWrite, i).raddr(dst.addr(i as usize), dst.key);
        let n = 1 + (i % 5) as u32;
        for _ in 0..n {
            w = w.sge(src.key, src.addr(0), 1);
        }
        if i % 4 != 3 {
            w = w.unsignaled();
        }
        p.a.post_send(&hal, &w);
        expect_counter += rnic_hw_regs::wqe::wqe_bbs(2 + n as usize) as u32;
        if i % 4 == 3 {
            let c = p.acq.wait(&hal);
            assert_cqe(&c, i, WcStatus::Success, WcOpcode::RdmaWrite);
            assert_eq!(c.wqe_counter.to_ne(), expect_counter as u16);
        }
    }
    p.t.sync();
    assert!(p.acq.poll().is_none());
}

fn unmapped_iova_refused(mode: ExecMode) {
    let mut p = pair(mode, 7);
    let hal = p.t.hal.clone();
    let dst = p.t.reg_mr(p.pdn, 4096, ALL);
    // An MR whose memory the driver freed behind the device's back.
    let gone = p.t.reg_mr(p.pdn, 4096, 0);
    let (key, addr) = (gone.key, gone.addr(0));
    // SAFETY: the test only checks that the device refuses the access.
    unsafe { hal.dma_free(gone.region) };
    let w = Wqe::new(WrOpcode::RdmaWrite, 5)
        .raddr(dst.addr(0), dst.key)
        .sge(key, addr, 16);
    p.a.post_send(&hal, &w);
    p.a.post_send(&hal, &Wqe::new(WrOpcode::Send, 6).unsignaled());
    let c = p.acq.wait(&hal);
    assert_cqe(&c, 5, WcStatus::LocProtErr, WcOpcode::RdmaWrite);
    assert_eq!(syndrome(&c), Some(Syndrome::DmaFault));
    // The next WQE is flushed even though it was unsignaled.
    let c = p.acq.wait(&hal);
    assert_cqe(&c, 6, WcStatus::WrFlushErr, WcOpcode::Send);
    assert_eq!(state(&mut p.t, p.a.qpn), QpState::Err);
    // The error CQE reports the fault; no async event on top of it.
    assert_eq!(p.t.events(), vec![]);

    // A raw IOVA that was never mapped, as an rkey target: the MR cannot
    // even be registered, and the device keeps running.
    let mut q = pair(mode, 7);
    let bogus = q.t.hal.dma_alloc(4096).unwrap();
    let mut i = q.t.reg_mr_in(q.pdn, &bogus, ALL);
    i.iova = rnic_hw_regs::le64::from_ne(0x7_0000_0000);
    q.t.cmd(rnic_hw_regs::cmd::CmdOpcode::RegMr, &i).fails(
        rnic_hw_regs::cmd::CmdStatus::BadDma,
        std::mem::offset_of!(rnic_hw_regs::cmd::RegMrIn, iova),
    );
    // Freeing the responder's MR memory: the responder faults, the
    // requester sees a remote operational error.
    let src = q.t.reg_mr(q.pdn, 4096, 0);
    let rdst = q.t.reg_mr(q.pdn, 4096, ALL);
    let (rkey, raddr) = (rdst.key, rdst.addr(0));
    // SAFETY: as above.
    unsafe { q.t.hal.dma_free(rdst.region) };
    let w = Wqe::new(WrOpcode::RdmaWrite, 7)
        .raddr(raddr, rkey)
        .sge(src.key, src.addr(0), 16);
    q.a.post_send(&q.t.hal.clone(), &w);
    let c = q.acq.wait(&q.t.hal.clone());
    assert_cqe(&c, 7, WcStatus::RemOpErr, WcOpcode::RdmaWrite);
    assert_eq!(state(&mut q.t, q.b.qpn), QpState::Err);
    assert!(status(&q.t.hal).enabled());
}

/// `dma_unmap_retired` cuts the device off from caller memory that an MR
/// still registered points at: an RDMA WRITE to the MR faults at the
/// responder instead of landing in the memory, and the retired IOVAs are
/// not handed out again.
fn retired_mapping_is_cut_off(mode: ExecMode) {
    let mut p = pair(mode, 7);
    let hal = p.t.hal.clone();
    let src = p.t.reg_mr(p.pdn, 4096, 0);
    src.region.write_bytes(0, b"payload!");
    let mut user = vec![0x5au8; 4096];
    let ptr = std::ptr::NonNull::new(user.as_mut_ptr()).unwrap();
    // SAFETY: `user` outlives the mapping (retired below).
    let iova = unsafe { hal.dma_map(ptr, user.len()) }.unwrap();
    // SAFETY: the view is used only to describe the MR (va == IOVA).
    let view = unsafe { DmaRegion::new(ptr, iova, user.len()) };
    let i = p.t.reg_mr_in(p.pdn, &view, ALL);
    let rkey = p.t.cmd(CmdOpcode::RegMr, &i).ok::<RegMrOut>().rkey.to_ne();
    // SAFETY: exactly the mapping above, not yet unmapped.
    unsafe { hal.dma_unmap_retired(iova, user.len()) }.unwrap();
    // SAFETY: as above; it is gone now.
    let again = unsafe { hal.dma_unmap(iova, user.len()) };
    assert_eq!(again, Err(rnic_queues::HalError::NotMapped));
    let w = Wqe::new(WrOpcode::RdmaWrite, 1)
        .raddr(iova, rkey)
        .sge(src.key, src.addr(0), 8);
    p.a.post_send(&hal, &w);
    let c = p.acq.wait(&hal);
    // The requester learns what the wire carries: a remote operational
    // error NAK.
    assert_cqe(&c, 1, WcStatus::RemOpErr, WcOpcode::RdmaWrite);
    assert_eq!(syndrome(&c), Some(Syndrome::RemoteError));
    assert!(user.iter().all(|&b| b == 0x5a), "nothing landed");
    // Later mappings start past the retired pages.
    let end = iova + user.len() as u64;
    // SAFETY: `user` outlives the mapping, removed right after.
    let next = unsafe { hal.dma_map(ptr, 64) }.unwrap();
    assert!(
        next >= end,
        "{next:#x} reuses a retired IOVA below {end:#x}"
    );
    // SAFETY: the mapping just made.
    unsafe { hal.dma_unmap(next, 64) }.unwrap();
    let region = hal.dma_alloc(4096).unwrap();
    assert!(region.iova() >= end);
    // SAFETY: from dma_alloc, never given to the device.
    unsafe { hal.dma_free(region) };
    drop(user);
}

fn local_errors(mode: ExecMode) {
    // Each case on a fresh pair: (WQE, expected status, syndrome).
    type MakeWqe = Box<dyn Fn(&TMr, &TMr) -> Wqe>;
    let cases: Vec<(MakeWqe, WcStatus, Syndrome)> = vec![
        (
            Box::new(|s, d| {
                Wqe::new(WrOpcode::RdmaWrite, 1)
                    .raddr(d.addr(0), d.key)
                    .sge(s.key + 1, s.addr(0), 8)
            }),
            WcStatus::LocProtErr,
            Syndrome::BadLkey,
        ),
        (
            Box::new(|s, d| {
                Wqe::new(WrOpcode::RdmaWrite, 1)
                    .raddr(d.addr(0), d.key)
                    .sge(s.key, s.addr(4090), 8)
            }),
            WcStatus::LocProtErr,
            Syndrome::OutOfBounds,
        ),
        (
            // READ into an MR without LOCAL_WRITE.
            Box::new(|s, d| {
                Wqe::new(WrOpcode::RdmaRead, 1)
                    .raddr(d.addr(0), d.key)
                    .sge(s.key, s.addr(0), 8)
            }),
            WcStatus::LocProtErr,
            Syndrome::AccessDenied,
        ),
        (
            // A local invalidate of key 0: no window.
            Box::new(|_, _| Wqe::new(WrOpcode::LocalInv, 1)),
            WcStatus::LocQpOpErr,
            Syndrome::BadRkey,
        ),
        (
            // Inline on a READ.
            Box::new(|_, d| {
                Wqe::new(WrOpcode::RdmaRead, 1)
                    .raddr(d.addr(0), d.key)
                    .inline(&[1; 8])
            }),
            WcStatus::LocQpOpErr,
            Syndrome::BadWqe,
        ),
        (
            // Inline payload above the QP's max_inline (64).
            Box::new(|_, _| Wqe::new(WrOpcode::Send, 1).inline(&[1; 65])),
            WcStatus::LocQpOpErr,
            Syndrome::BadWqe,
        ),
        (
            // Atomic with a 4-byte result SGE.
            Box::new(|s, d| {
                Wqe::new(WrOpcode::AtomicFetchAndAdd, 1)
                    .raddr(d.addr(0), d.key)
                    .atomic(1, 0)
                    .sge(s.key, s.addr(0), 4)
            }),
            WcStatus::LocQpOpErr,
            Syndrome::BadWqe,
        ),
        (
            // Two 2^31-byte SGEs (byte_count 0) exceed the 2^31 message limit.
            Box::new(|s, d| {
                Wqe::new(WrOpcode::RdmaWrite, 1)
                    .raddr(d.addr(0), d.key)
                    .sge(s.key, s.addr(0), 0)
                    .sge(s.key, s.addr(0), 0)
            }),
            WcStatus::LocLenErr,
            Syndrome::TooLong,
        ),
    ];
    for (make, status, syn) in cases {
        let mut p = pair(mode, 7);
        let hal = p.t.hal.clone();
        let s = p.t.reg_mr(p.pdn, 4096, 0);
        let d = p.t.reg_mr(p.pdn, 4096, ALL);
        p.a.post_send(&hal, &make(&s, &d));
        let c = p.acq.wait(&hal);
        assert_eq!(WcStatus::from_raw(c.status), Some(status), "{syn:?}");
        assert_eq!(syndrome(&c), Some(syn));
        assert!(c.flags.is_send());
        assert_eq!(state(&mut p.t, p.a.qpn), QpState::Err);
        assert_eq!(
            state(&mut p.t, p.b.qpn),
            QpState::Rts,
            "responder untouched"
        );
    }

    // A PD mismatch, and a WQE with a stale wqe_index.
    let mut p = pair(mode, 7);
    let hal = p.t.hal.clone();
    let other_pd = p.t.create_pd();
    let s = p.t.reg_mr(other_pd, 4096, 0);
    p.a.post_send(&hal, &Wqe::new(WrOpcode::Send, 1).sge(s.key, s.addr(0), 8));
    assert_eq!(syndrome(&p.acq.wait(&hal)), Some(Syndrome::PdMismatch));
    let mut p = pair(mode, 7);
    let hal = p.t.hal.clone();
    let mut raw = [0u8; 64];
    let ctrl = rnic_hw_regs::wqe::CtrlWord::new()
        .with_opcode(WrOpcode::Send.raw())
        .with_ds(1)
        .with_wqe_index(5);
    raw[..4].copy_from_slice(&ctrl.into_bits().to_ne().to_le_bytes());
    raw[8] = 0x42;
    p.a.write_raw(&raw, 1);
    // ds = 0.
    p.a.write_raw(&[0u8; 64], 1);
    p.a.ring_sq(&hal);
    let c = p.acq.wait(&hal);
    assert_cqe(&c, 0x42, WcStatus::LocQpOpErr, WcOpcode::Send);
    assert_eq!(syndrome(&c), Some(Syndrome::BadWqe));
    let c = p.acq.wait(&hal);
    assert_eq!(WcStatus::from_raw(c.status), Some(WcStatus::WrFlushErr));
    assert_eq!(c.wqe_counter.to_ne(), 2);
}

fn remote_access_error(mode: ExecMode) {
    let mut p = pair(mode, 7);
    let hal = p.t.hal.clone();
    let s = p.t.reg_mr(p.pdn, 4096, 0);
    let d =
        p.t.reg_mr(p.pdn, 4096, access::LOCAL_WRITE | access::REMOTE_READ);
    p.b.post_recv(&hal, 77, &[]);
    let w = Wqe::new(WrOpcode::RdmaWrite, 1)
        .raddr(d.addr(0), d.key)
        .sge(s.key, s.addr(0), 8);
    p.a.post_send(&hal, &w);
    let c = p.acq.wait(&hal);
    // The requester knows only the NAK code; the responder's event says
    // which check failed.
    assert_cqe(&c, 1, WcStatus::RemAccessErr, WcOpcode::RdmaWrite);
    assert_eq!(syndrome(&c), Some(Syndrome::RemoteAccess));
    // Both sides are in ERR; the responder's posted receive is flushed.
    assert_eq!(state(&mut p.t, p.a.qpn), QpState::Err);
    assert_eq!(state(&mut p.t, p.b.qpn), QpState::Err);
    let c = p.bcq.wait(&hal);
    assert_cqe(&c, 77, WcStatus::WrFlushErr, WcOpcode::Recv);
    // The responder learns of the violation only by an event; the
    // requester by its error CQE.
    assert_eq!(
        p.t.events(),
        vec![(
            EventType::QpAccessErr.raw(),
            p.b.qpn,
            Syndrome::AccessDenied as u32
        )]
    );

    // Misaligned atomic: REM_INV_REQ_ERR.
    let mut p = pair(mode, 7);
    let hal = p.t.hal.clone();
    let l = p.t.reg_mr(p.pdn, 4096, access::LOCAL_WRITE);
    let r = p.t.reg_mr(p.pdn, 4096, ALL);
    let w = Wqe::new(WrOpcode::AtomicCmpAndSwp, 2)
        .raddr(r.addr(4), r.key)
        .atomic(1, 0)
        .sge(l.key, l.addr(0), 8);
    p.a.post_send(&hal, &w);
    let c = p.acq.wait(&hal);
    assert_cqe(&c, 2, WcStatus::RemInvReqErr, WcOpcode::CompSwap);
    assert_eq!(syndrome(&c), Some(Syndrome::RemoteInvalidRequest));
    let ev = p.t.events();
    assert!(ev.contains(&(
        EventType::QpReqErr.raw(),
        p.b.qpn,
        Syndrome::Misaligned as u32
    )));

    // The responder QP's own access flags matter too.
    let mut t = bring_up(mode);
    let hal = t.hal.clone();
    let pdn = t.create_pd();
    let cq = t.create_cq(6);
    let mut a = t.create_qp(pdn, &cq, &cq);
    let b = t.create_qp(pdn, &cq, &cq);
    t.connect(a.qpn, b.qpn, 7);
    t.modify_init(b.qpn, access::REMOTE_WRITE).ok::<u32>();
    t.modify_rtr(b.qpn, a.qpn).ok::<u32>();
    let l = t.reg_mr(pdn, 4096, access::LOCAL_WRITE);
    let r = t.reg_mr(pdn, 4096, ALL);
    let w = Wqe::new(WrOpcode::RdmaRead, 3)
        .raddr(r.addr(0), r.key)
        .sge(l.key, l.addr(0), 8);
    a.post_send(&hal, &w);
    let mut cq = cq;
    let c = cq.wait(&hal);
    assert_cqe(&c, 3, WcStatus::RemAccessErr, WcOpcode::RdmaRead);
    assert_eq!(syndrome(&c), Some(Syndrome::RemoteAccess));
    assert_eq!(state(&mut t, b.qpn), QpState::Err);
}

fn write_imm_access_error(mode: ExecMode) {
    let mut p = pair(mode, 7);
    let hal = p.t.hal.clone();
    let s = p.t.reg_mr(p.pdn, 4096, 0);
    let d = p.t.reg_mr(p.pdn, 4096, access::LOCAL_WRITE);
    p.b.post_recv(&hal, 77, &[]);
    p.b.post_recv(&hal, 78, &[]);
    let w = Wqe::new(WrOpcode::RdmaWriteWithImm, 1)
        .raddr(d.addr(0), d.key)
        .imm([1, 2, 3, 4])
        .sge(s.key, s.addr(0), 8);
    p.a.post_send(&hal, &w);
    let c = p.acq.wait(&hal);
    assert_cqe(&c, 1, WcStatus::RemAccessErr, WcOpcode::RdmaWrite);
    assert_eq!(syndrome(&c), Some(Syndrome::RemoteAccess));
    // The receive WQE the immediate needed reports the violation itself
    // (IBV_WC_LOC_ACCESS_ERR); the next one is flushed; no async event.
    let c = p.bcq.wait(&hal);
    assert_eq!(c.wr_id.to_ne(), 77);
    assert_eq!(WcStatus::from_raw(c.status), Some(WcStatus::LocAccessErr));
    assert_eq!(syndrome(&c), Some(Syndrome::AccessDenied));
    let c = p.bcq.wait(&hal);
    assert_cqe(&c, 78, WcStatus::WrFlushErr, WcOpcode::Recv);
    assert_eq!(state(&mut p.t, p.b.qpn), QpState::Err);
    assert_eq!(p.t.events(), vec![]);
}

fn no_rd_atomic_resources(mode: ExecMode) {
    let mut t = bring_up(mode);
    let hal = t.hal.clone();
    let pdn = t.create_pd();
    let mut cq = t.create_cq(6);
    let mut a = t.create_qp(pdn, &cq, &cq);
    let b = t.create_qp(pdn, &cq, &cq);
    t.connect(a.qpn, b.qpn, 7);
    let all = access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;
    t.modify_init(b.qpn, all).ok::<u32>();
    // The responder offers no READ/atomic resources.
    let rtr = QpAttrs {
        qp_state: QpState::Rtr.raw(),
        path_mtu: Mtu::Mtu1024.raw(),
        dest_qp_num: le32::from_ne(a.qpn),
        max_dest_rd_atomic: 0,
        ah: AddressVector {
            dgid: t.dev.config().ipv4_gid(),
            is_global: 1,
            port_num: 1,
            hop_limit: 64,
            ..AddressVector::default()
        },
        ..QpAttrs::default()
    };
    let mask = qp_attr::STATE
        | qp_attr::AV
        | qp_attr::PATH_MTU
        | qp_attr::DEST_QPN
        | qp_attr::RQ_PSN
        | qp_attr::MAX_DEST_RD_ATOMIC
        | qp_attr::MIN_RNR_TIMER;
    t.modify(b.qpn, mask, rtr).ok::<u32>();
    let l = t.reg_mr(pdn, 4096, access::LOCAL_WRITE);
    let r = t.reg_mr(pdn, 4096, ALL);
    let w = Wqe::new(WrOpcode::RdmaRead, 3)
        .raddr(r.addr(0), r.key)
        .sge(l.key, l.addr(0), 8);
    a.post_send(&hal, &w);
    let c = cq.wait(&hal);
    assert_cqe(&c, 3, WcStatus::RemInvReqErr, WcOpcode::RdmaRead);
    assert_eq!(syndrome(&c), Some(Syndrome::RemoteInvalidRequest));
    assert_eq!(state(&mut t, b.qpn), QpState::Err);
    // b, left in RTR, first reports that communication is established.
    assert_eq!(
        t.events(),
        vec![
            (EventType::CommEst.raw(), b.qpn, 0),
            (
                EventType::QpReqErr.raw(),
                b.qpn,
                Syndrome::NoRdAtomic as u32
            )
        ]
    );
}

fn rnr_stall_and_resume(mode: ExecMode) {
    let mut p = pair(mode, 7);
    let hal = p.t.hal.clone();
    let s = p.t.reg_mr(p.pdn, 4096, 0);
    let d = p.t.reg_mr(p.pdn, 4096, access::LOCAL_WRITE);
    s.region.write_bytes(0, b"abcd");
    p.a.post_send(&hal, &Wqe::new(WrOpcode::Send, 1).sge(s.key, s.addr(0), 4));
    p.a.post_send(&hal, &Wqe::new(WrOpcode::Send, 2).sge(s.key, s.addr(0), 4));
    p.t.sync();
    assert!(p.acq.poll().is_none(), "waiting out an RNR NAK");
    assert_eq!(state(&mut p.t, p.a.qpn), QpState::Rts);
    // A receive alone retries nothing: the requester waits for its RNR
    // timer, as on a wire.
    p.b.post_recv(&hal, 10, &[dseg(d.key, d.addr(0), 4)]);
    p.t.sync();
    assert!(p.acq.poll().is_none(), "the RNR timer has not run out");
    p.t.advance(RNR_WAIT);
    assert_cqe(&p.acq.wait(&hal), 1, WcStatus::Success, WcOpcode::Send);
    assert_cqe(&p.bcq.wait(&hal), 10, WcStatus::Success, WcOpcode::Recv);
    p.t.sync();
    assert!(
        p.acq.poll().is_none(),
        "second SEND waits for a second receive"
    );
    p.b.post_recv(&hal, 11, &[dseg(d.key, d.addr(4), 4)]);
    p.t.advance(RNR_WAIT);
    assert_cqe(&p.acq.wait(&hal), 2, WcStatus::Success, WcOpcode::Send);
    assert_cqe(&p.bcq.wait(&hal), 11, WcStatus::Success, WcOpcode::Recv);
    let mut got = [0u8; 8];
    d.region.read_bytes(0, &mut got);
    assert_eq!(&got, b"abcdabcd");
}

fn rnr_retry_zero(mode: ExecMode) {
    let mut p = pair(mode, 0);
    let hal = p.t.hal.clone();
    p.a.post_send(&hal, &Wqe::new(WrOpcode::Send, 1).inline(b"x"));
    let c = p.acq.wait(&hal);
    assert_cqe(&c, 1, WcStatus::RnrRetryExcErr, WcOpcode::Send);
    assert_eq!(syndrome(&c), Some(Syndrome::RnrExceeded));
    assert_eq!(state(&mut p.t, p.a.qpn), QpState::Err);
    assert_eq!(state(&mut p.t, p.b.qpn), QpState::Rts);
}

/// Only the RNR timer retries a SEND that met receiver-not-ready: the
/// requester's own SQ doorbells and RQ doorbells of the responder that
/// publish no receive WQE retry nothing, however many, so `rnr_retry` 1 is
/// not spent by them; a receive posted within each timer period lets one
/// SEND through.
fn rnr_retry_waits_for_the_timer(mode: ExecMode) {
    let mut p = pair(mode, 1);
    let hal = p.t.hal.clone();
    for wr_id in 1..=4 {
        p.a.post_send(&hal, &Wqe::new(WrOpcode::Send, wr_id));
        p.a.ring_sq(&hal);
        p.b.ring_rq(&hal);
    }
    p.t.sync();
    assert!(p.acq.poll().is_none(), "waiting, not failed");
    assert_eq!(state(&mut p.t, p.a.qpn), QpState::Rts);
    for wr_id in 1..=4 {
        p.b.post_recv(&hal, 10 + wr_id, &[]);
        p.t.advance(RNR_WAIT);
        assert_cqe(&p.acq.wait(&hal), wr_id, WcStatus::Success, WcOpcode::Send);
        let r = p.bcq.wait(&hal);
        assert_cqe(&r, 10 + wr_id, WcStatus::Success, WcOpcode::Recv);
        assert_eq!(r.src_qp.to_ne(), p.a.qpn);
        p.t.sync();
        assert!(p.acq.poll().is_none(), "one receive, one SEND");
    }
    assert_eq!(state(&mut p.t, p.a.qpn), QpState::Rts);
}

/// `rnr_retry` 2: the first attempt and two retries meet receiver-not-ready,
/// three RNR NAKs; the third completes the WQE RNR_RETRY_EXC_ERR and
/// flushes the rest. The responder is not affected. With 7 the retries
/// never run out.
fn rnr_retry_exhausted(mode: ExecMode) {
    let mut p = pair(mode, 2);
    let hal = p.t.hal.clone();
    p.a.write_wqe(&Wqe::new(WrOpcode::Send, 1));
    p.a.write_wqe(&Wqe::new(WrOpcode::Send, 2));
    p.a.ring_sq(&hal);
    for round in 1..=2 {
        p.t.sync();
        assert!(p.acq.poll().is_none(), "waiting before retry {round}");
        assert_eq!(state(&mut p.t, p.a.qpn), QpState::Rts);
        p.t.advance(RNR_WAIT);
    }
    let e = p.acq.wait(&hal);
    assert_cqe(&e, 1, WcStatus::RnrRetryExcErr, WcOpcode::Send);
    assert_eq!(syndrome(&e), Some(Syndrome::RnrExceeded));
    assert_cqe(&p.acq.wait(&hal), 2, WcStatus::WrFlushErr, WcOpcode::Send);
    assert!(p.acq.poll().is_none());
    assert_eq!(state(&mut p.t, p.a.qpn), QpState::Err);
    assert_eq!(state(&mut p.t, p.b.qpn), QpState::Rts);
    assert!(p.bcq.poll().is_none());
    assert!(p.t.events().is_empty(), "the error CQE reports it");
    let a = p.t.counters_qp(p.a.qpn);
    assert_eq!(a[counter::RNR_NAKS_RECEIVED], 3);
    assert_eq!(a[counter::RNR_RETRY_EXCEEDED], 1);
    assert_eq!(p.t.counters_qp(p.b.qpn)[counter::RNR_NAKS_SENT], 3);

    // 7 retries without limit.
    let mut p = pair(mode, 7);
    let hal = p.t.hal.clone();
    p.a.post_send(&hal, &Wqe::new(WrOpcode::Send, 1));
    p.t.sync();
    for _ in 0..20 {
        p.t.advance(RNR_WAIT);
    }
    assert!(p.acq.poll().is_none(), "still waiting");
    assert_eq!(p.t.counters_qp(p.a.qpn)[counter::RNR_NAKS_RECEIVED], 21);
    p.b.post_recv(&hal, 10, &[]);
    p.t.advance(RNR_WAIT);
    assert_cqe(&p.acq.wait(&hal), 1, WcStatus::Success, WcOpcode::Send);
}

/// `rnr_retry` 2: the count starts afresh for each WQE. SEND 1 meets two
/// RNR NAKs (its first attempt and a retry) and then gets through; SEND 2
/// meets its first right after, which would be the third had the count
/// not restarted, and a second one later, and still gets through.
fn rnr_retry_counts_per_wqe(mode: ExecMode) {
    let mut p = pair(mode, 2);
    let hal = p.t.hal.clone();
    let d = p.t.reg_mr(p.pdn, 4096, access::LOCAL_WRITE);
    p.a.write_wqe(&Wqe::new(WrOpcode::Send, 1).inline(b"one"));
    p.a.write_wqe(&Wqe::new(WrOpcode::Send, 2).inline(b"two"));
    p.a.ring_sq(&hal);
    p.t.sync();
    // RNR NAK 2 for SEND 1.
    p.t.advance(RNR_WAIT);
    p.b.post_recv(&hal, 11, &[dseg(d.key, d.addr(0), 3)]);
    // SEND 1 gets through; SEND 2 meets its first RNR NAK.
    p.t.advance(RNR_WAIT);
    assert_cqe(&p.acq.wait(&hal), 1, WcStatus::Success, WcOpcode::Send);
    assert_cqe(&p.bcq.wait(&hal), 11, WcStatus::Success, WcOpcode::Recv);
    // SEND 2's second RNR NAK.
    p.t.advance(RNR_WAIT);
    p.t.sync();
    assert!(p.acq.poll().is_none(), "SEND 2 waiting, not failed");
    assert_eq!(state(&mut p.t, p.a.qpn), QpState::Rts);
    p.b.post_recv(&hal, 12, &[dseg(d.key, d.addr(4), 3)]);
    p.t.advance(RNR_WAIT);
    assert_cqe(&p.acq.wait(&hal), 2, WcStatus::Success, WcOpcode::Send);
    assert_cqe(&p.bcq.wait(&hal), 12, WcStatus::Success, WcOpcode::Recv);
    let mut got = [0u8; 7];
    d.region.read_bytes(0, &mut got);
    assert_eq!(&got, b"one\0two");
    assert_eq!(state(&mut p.t, p.a.qpn), QpState::Rts);
    assert_eq!(p.t.counters_qp(p.a.qpn)[counter::RNR_NAKS_RECEIVED], 4);
}

fn qp_sized(t: &mut Tdev, pdn: u32, scq: &TCq, rcq: &TCq, log_sq: u32, log_rq: u32) -> TQp {
    let mut qp = t.qp_mem(log_sq, log_rq, 6);
    let i = Tdev::create_qp_in(pdn, scq.cqn, rcq.cqn, &qp);
    qp.qpn = t
        .cmd(CmdOpcode::CreateQp, &i)
        .ok::<CreateQpOut>()
        .qpn
        .to_ne();
    qp
}

/// An SQ producer index more than the ring size ahead of the consumer
/// index is a malformed doorbell record: the QP moves to ERR with QpFatal /
/// BadWqe, no stale WQE runs again, and only the WQEs really outstanding are
/// flushed.
fn sq_dbrec_beyond_ring(mode: ExecMode) {
    // A 256-BB ring (where `wqe_index` cannot tell passes apart), filled
    // with one-BB FETCH_ADDs to a counter, all executed.
    let mut t = bring_up(mode);
    let hal = t.hal.clone();
    let pdn = t.create_pd();
    let mut cq = t.create_cq(6);
    let mut a = qp_sized(&mut t, pdn, &cq, &cq, 8, 6);
    t.connect(a.qpn, a.qpn, 7);
    let m = t.reg_mr(pdn, 4096, ALL);
    for i in 0..256 {
        let w = Wqe::new(WrOpcode::AtomicFetchAndAdd, i)
            .unsignaled()
            .raddr(m.addr(0), m.key)
            .atomic(1, 0)
            .sge(m.key, m.addr(64), 8);
        a.write_wqe(&w);
    }
    // Exactly one ring ahead is fine.
    a.ring_sq(&hal);
    t.sync();
    assert_eq!(m.region.read::<u64>(0), 256);
    assert!(cq.poll().is_none());
    // One ring and one BB ahead: every slot holds an executed WQE whose
    // wqe_index matches its next pass.
    a.sq_pi += 257;
    a.ring_sq(&hal);
    let ev = t.events();
    assert_eq!(m.region.read::<u64>(0), 256, "stale WQEs ran again");
    assert_eq!(
        ev,
        vec![(EventType::QpFatal.raw(), a.qpn, Syndrome::BadWqe as u32)]
    );
    assert_eq!(state(&mut t, a.qpn), QpState::Err);
    assert!(cq.poll().is_none(), "nothing was outstanding");

    // Two SENDs stalled on RNR are outstanding; a record far ahead flushes
    // those two, not a ring's worth of garbage.
    let mut p = pair(mode, 7);
    let hal = p.t.hal.clone();
    p.a.post_send(&hal, &Wqe::new(WrOpcode::Send, 1).inline(b"x"));
    p.a.post_send(&hal, &Wqe::new(WrOpcode::Send, 2).inline(b"y"));
    p.t.sync();
    assert!(p.acq.poll().is_none());
    p.a.sq_pi += 1 << p.a.log_sq;
    p.a.ring_sq(&hal);
    let ev = p.t.events();
    assert_eq!(
        ev,
        vec![(EventType::QpFatal.raw(), p.a.qpn, Syndrome::BadWqe as u32)]
    );
    for wr_id in [1, 2] {
        let c = p.acq.poll().expect("flush CQE");
        assert_cqe(&c, wr_id, WcStatus::WrFlushErr, WcOpcode::Send);
        assert_eq!(c.wqe_counter.to_ne() as u64, wr_id);
    }
    assert!(p.acq.poll().is_none());
    assert_eq!(state(&mut p.t, p.a.qpn), QpState::Err);
    assert_eq!(state(&mut p.t, p.b.qpn), QpState::Rts);
}

/// An RQ producer index more than the ring size ahead of the consumer
/// index: no stale receive WQE is consumed again; the responder moves to
/// ERR with QpFatal / BadWqe (the requester gets REM_OP_ERR) and flushes
/// only the receives really outstanding.
fn rq_dbrec_beyond_ring(mode: ExecMode) {
    let setup = || {
        let mut t = bring_up(mode);
        let pdn = t.create_pd();
        let acq = t.create_cq(6);
        let bcq = t.create_cq(6);
        let a = qp_sized(&mut t, pdn, &acq, &acq, 6, 6);
        // Four receive slots.
        let b = qp_sized(&mut t, pdn, &bcq, &bcq, 6, 2);
        t.connect(a.qpn, b.qpn, 7);
        t.connect(b.qpn, a.qpn, 7);
        Pair {
            t,
            pdn,
            a,
            b,
            acq,
            bcq,
        }
    };

    // Every slot consumed once; then the record runs five ahead (detected
    // when the next SEND needs a receive WQE).
    let mut p = setup();
    let hal = p.t.hal.clone();
    for i in 0..4 {
        p.b.post_recv(&hal, 10 + i, &[]);
        p.a.post_send(&hal, &Wqe::new(WrOpcode::Send, i).unsignaled());
        assert_cqe(&p.bcq.wait(&hal), 10 + i, WcStatus::Success, WcOpcode::Recv);
    }
    p.b.rq_pi += 5;
    p.b.dbrec.write(QP_DBREC_RQ, le32::from_ne(p.b.rq_pi));
    p.a.post_send(&hal, &Wqe::new(WrOpcode::Send, 4).unsignaled());
    let c = p.acq.wait(&hal);
    assert_cqe(&c, 4, WcStatus::RemOpErr, WcOpcode::Send);
    assert_eq!(syndrome(&c), Some(Syndrome::RemoteError));
    assert!(p.bcq.poll().is_none(), "a stale receive WQE was consumed");
    assert_eq!(
        p.t.events(),
        vec![(EventType::QpFatal.raw(), p.b.qpn, Syndrome::BadWqe as u32)]
    );
    assert_eq!(state(&mut p.t, p.b.qpn), QpState::Err);

    // One receive outstanding, then an RQ doorbell with a record a ring and
    // two ahead: that receive alone is flushed.
    let mut p = setup();
    let hal = p.t.hal.clone();
    p.b.post_recv(&hal, 20, &[]);
    // The device has read the record (the flush covers the receives it knew
    // of when the record went bad).
    p.t.sync();
    p.b.rq_pi += (1 << p.b.log_rq) + 1;
    p.b.ring_rq(&hal);
    assert_eq!(
        p.t.events(),
        vec![(EventType::QpFatal.raw(), p.b.qpn, Syndrome::BadWqe as u32)]
    );
    let c = p.bcq.poll().expect("flush CQE");
    assert_cqe(&c, 20, WcStatus::WrFlushErr, WcOpcode::Recv);
    assert_eq!(c.wqe_counter.to_ne(), 1);
    assert!(p.bcq.poll().is_none());
    assert_eq!(state(&mut p.t, p.b.qpn), QpState::Err);
    assert_eq!(state(&mut p.t, p.a.qpn), QpState::Rts);
}

fn recv_too_small(mode: ExecMode) {
    let mut p = pair(mode, 7);
    let hal = p.t.hal.clone();
    let d = p.t.reg_mr(p.pdn, 4096, access::LOCAL_WRITE);
    p.b.post_recv(&hal, 5, &[dseg(d.key, d.addr(0), 4)]);
    p.a.post_send(&hal, &Wqe::new(WrOpcode::Send, 1).inline(b"too long"));
    let c = p.bcq.wait(&hal);
    assert_cqe(&c, 5, WcStatus::LocLenErr, WcOpcode::Recv);
    let c = p.acq.wait(&hal);
    assert_cqe(&c, 1, WcStatus::RemInvReqErr, WcOpcode::Send);
    assert_eq!(state(&mut p.t, p.b.qpn), QpState::Err);

    // A receive SGE without LOCAL_WRITE: LOC_PROT_ERR / REM_OP_ERR.
    let mut p = pair(mode, 7);
    let hal = p.t.hal.clone();
    let d = p.t.reg_mr(p.pdn, 4096, 0);
    p.b.post_recv(&hal, 6, &[dseg(d.key, d.addr(0), 64)]);
    p.a.post_send(&hal, &Wqe::new(WrOpcode::Send, 2).inline(b"hi"));
    let c = p.bcq.wait(&hal);
    assert_cqe(&c, 6, WcStatus::LocProtErr, WcOpcode::Recv);
    assert_eq!(syndrome(&c), Some(Syndrome::AccessDenied));
    assert_cqe(&p.acq.wait(&hal), 2, WcStatus::RemOpErr, WcOpcode::Send);
}

fn dest_not_ready(mode: ExecMode) {
    let mut t = bring_up(mode);
    let hal = t.hal.clone();
    let pdn = t.create_pd();
    let mut cq = t.create_cq(6);
    let mut a = t.create_qp(pdn, &cq, &cq);
    let b = t.create_qp(pdn, &cq, &cq);
    t.connect(a.qpn, b.qpn, 7);
    t.modify_init(b.qpn, 0).ok::<u32>();
    a.post_send(&hal, &Wqe::new(WrOpcode::Send, 1).inline(b"x"));
    // b drops what it cannot take: a hears nothing, and retries at each
    // local ACK timeout, `retry_cnt` (7) times.
    t.sync();
    for _ in 0..7 {
        t.advance(ACK_WAIT);
        assert!(cq.poll().is_none(), "still retrying");
    }
    t.advance(ACK_WAIT);
    let c = cq.wait(&hal);
    assert_cqe(&c, 1, WcStatus::RetryExcErr, WcOpcode::Send);
    assert_eq!(syndrome(&c), Some(Syndrome::RetryExceeded));
    // Eight timeouts, seven retransmissions of the one packet.
    let k = t.counters_qp(a.qpn);
    assert_eq!(
        (
            k[counter::LOCAL_ACK_TIMEOUTS],
            k[counter::RETRANSMITS],
            k[counter::RETRY_EXCEEDED],
            k[counter::TX_FRAMES]
        ),
        (8, 7, 1, 8)
    );
    assert_eq!(
        t.counters_port()[counter::RX_UNKNOWN_QP],
        8,
        "b dropped each one"
    );
    // WQEs wait while the QP is not in RTS.
    let mut c2 = t.create_qp(pdn, &cq, &cq);
    t.modify_init(c2.qpn, access::REMOTE_WRITE).ok::<u32>();
    t.modify_rtr(c2.qpn, c2.qpn).ok::<u32>();
    let m = t.reg_mr(pdn, 4096, ALL);
    c2.post_send(
        &hal,
        &Wqe::new(WrOpcode::RdmaWrite, 2)
            .raddr(m.addr(0), m.key)
            .inline(b"q"),
    );
    t.sync();
    assert!(cq.poll().is_none());
    t.modify_rts(c2.qpn, 7).ok::<u32>();
    // Loopback to itself once in RTS.
    assert_cqe(&cq.wait(&hal), 2, WcStatus::Success, WcOpcode::RdmaWrite);
    assert_eq!(m.region.read::<u8>(0), b'q');
}

fn flush_on_err_and_reset(mode: ExecMode) {
    let mut p = pair(mode, 7);
    let hal = p.t.hal.clone();
    let d = p.t.reg_mr(p.pdn, 4096, access::LOCAL_WRITE);
    for i in 0..3 {
        p.b.post_recv(&hal, 100 + i, &[dseg(d.key, d.addr(0), 8)]);
    }
    p.t.modify_state(p.b.qpn, QpState::Err).ok::<u32>();
    for i in 0..3 {
        let c = p.bcq.wait(&hal);
        assert_cqe(&c, 100 + i, WcStatus::WrFlushErr, WcOpcode::Recv);
        assert_eq!(c.wqe_counter.to_ne() as u64, i + 1);
    }
    // Receives posted in ERR are flushed when the RQ doorbell rings; sends
    // when the SQ doorbell rings.
    p.b.post_recv(&hal, 200, &[]);
    assert_cqe(&p.bcq.wait(&hal), 200, WcStatus::WrFlushErr, WcOpcode::Recv);
    p.b.post_send(&hal, &Wqe::new(WrOpcode::RdmaRead, 201).unsignaled());
    let c = p.bcq.wait(&hal);
    assert_cqe(&c, 201, WcStatus::WrFlushErr, WcOpcode::RdmaRead);
    assert!(c.flags.is_send());
    assert!(p.t.events().is_empty(), "a requested ERR raises no event");

    // RESET discards without completions and restarts the indices.
    p.t.modify_state(p.b.qpn, QpState::Reset).ok::<u32>();
    p.b.dbrec.write(0, 0u64);
    p.b.sq_pi = 0;
    p.b.rq_pi = 0;
    p.t.connect(p.b.qpn, p.a.qpn, 7);
    p.b.post_recv(&hal, 300, &[dseg(d.key, d.addr(0), 8)]);
    p.a.post_send(&hal, &Wqe::new(WrOpcode::Send, 301).inline(b"again"));
    let c = p.bcq.wait(&hal);
    assert_cqe(&c, 300, WcStatus::Success, WcOpcode::Recv);
    assert_eq!(c.wqe_counter.to_ne(), 1);
    assert!(p.bcq.poll().is_none());
}

fn cq_overrun(mode: ExecMode) {
    let mut t = bring_up(mode);
    let hal = t.hal.clone();
    let pdn = t.create_pd();
    let mut cq = t.create_cq(1);
    let mut a = t.create_qp(pdn, &cq, &cq);
    t.connect(a.qpn, a.qpn, 7);
    let m = t.reg_mr(pdn, 4096, ALL);
    for i in 0..3 {
        a.post_send(
            &hal,
            &Wqe::new(WrOpcode::RdmaWrite, i)
                .raddr(m.addr(0), m.key)
                .inline(b"z"),
        );
    }
    t.sync();
    // Two CQEs fit; the third overruns: CQ error, QP error.
    assert_eq!(cq.poll().unwrap().wr_id.to_ne(), 0);
    assert_eq!(cq.poll().unwrap().wr_id.to_ne(), 1);
    assert!(cq.poll().is_none());
    let ev = t.events();
    assert!(
        ev.contains(&(EventType::CqError.raw(), cq.cqn, Syndrome::CqError as u32)),
        "{ev:?}"
    );
    assert!(
        ev.contains(&(EventType::QpFatal.raw(), a.qpn, Syndrome::CqError as u32)),
        "{ev:?}"
    );
    assert_eq!(state(&mut t, a.qpn), QpState::Err);
}

fn cq_arm_events(mode: ExecMode) {
    let mut p = pair(mode, 7);
    let hal = p.t.hal.clone();
    let d = p.t.reg_mr(p.pdn, 4096, access::LOCAL_WRITE);
    p.bcq.arm(&hal, CqArmCmd::Solicited);
    p.b.post_recv(&hal, 1, &[dseg(d.key, d.addr(0), 8)]);
    p.b.post_recv(&hal, 2, &[dseg(d.key, d.addr(0), 8)]);
    p.a.post_send(&hal, &Wqe::new(WrOpcode::Send, 1).inline(b"a"));
    assert!(p.t.events().is_empty(), "not solicited");
    let mut w = Wqe::new(WrOpcode::Send, 2).inline(b"b");
    w.ctrl.word.set_solicited(true);
    p.a.post_send(&hal, &w);
    let ev = p.t.events();
    assert_eq!(ev, vec![(EventType::Completion.raw(), p.bcq.cqn, 0)]);
    // One event per arm.
    p.b.post_recv(&hal, 3, &[dseg(d.key, d.addr(0), 8)]);
    p.a.post_send(&hal, &Wqe::new(WrOpcode::Send, 3).inline(b"c"));
    assert!(p.t.events().is_empty());
    // Arming with unpolled CQEs fires at once.
    p.bcq.arm(&hal, CqArmCmd::Next);
    assert_eq!(
        p.t.events(),
        vec![(EventType::Completion.raw(), p.bcq.cqn, 0)]
    );
    // The EQ interrupt fires for an armed EQ (drop interrupts latched so far).
    while hal.wait_irq(0, 0) == Ok(true) {}
    hal.mmio_write32(0, rnic_hw_regs::bar0::EQ_DB, 0x8000_0000 | 2);
    for _ in 0..3 {
        p.bcq.poll().unwrap();
    }
    p.bcq.arm(&hal, CqArmCmd::Next);
    p.b.post_recv(&hal, 4, &[dseg(d.key, d.addr(0), 8)]);
    p.a.post_send(&hal, &Wqe::new(WrOpcode::Send, 4).inline(b"d"));
    assert_eq!(hal.wait_irq(0, 5_000_000_000), Ok(true));
    assert_eq!(
        p.t.events(),
        vec![(EventType::Completion.raw(), p.bcq.cqn, 0)]
    );
}

/// A send queue that feeds itself: 256 one-BB FETCH_ADDs on the QP's own
/// doorbell record (registered as an MR), each adding one to the SQ
/// producer index, so that every WQE executed publishes the next, without
/// end. The device serves it in quanta: commands complete, another QP
/// pair's SEND gets through, and a reset stops it.
fn self_feeding_send_queue(mode: ExecMode) {
    let mut t = bring_up(mode);
    let hal = t.hal.clone();
    let pdn = t.create_pd();
    let mut cq = t.create_cq(8);
    let mut a = qp_sized(&mut t, pdn, &cq, &cq, 8, 6);
    t.connect(a.qpn, a.qpn, 7);
    let i = t.reg_mr_in(pdn, &a.dbrec, ALL);
    let rkey = t.cmd(CmdOpcode::RegMr, &i).ok::<RegMrOut>().rkey.to_ne();
    let m = t.reg_mr(pdn, 4096, ALL);
    for _ in 0..256 {
        // The SQ producer index is the high half of the record's first
        // 8 bytes.
        let w = Wqe::new(WrOpcode::AtomicFetchAndAdd, 1)
            .unsignaled()
            .raddr(a.dbrec.iova(), rkey)
            .atomic(1 << 32, 0)
            .sge(m.key, m.addr(64), 8);
        a.write_wqe(&w);
    }
    a.sq_pi = 1;
    a.ring_sq(&hal);
    let sq_pi = |a: &TQp| a.dbrec.load_u32_acquire(QP_DBREC_SQ);
    // It runs: the producer index keeps moving while commands complete.
    let mut last = sq_pi(&a);
    for _ in 0..5 {
        t.sync();
        let now = sq_pi(&a);
        assert_ne!(now, last, "the send queue feeds itself");
        last = now;
    }
    assert_eq!(state(&mut t, a.qpn), QpState::Rts);
    // Another pair's SEND gets through.
    let mut p2 = (t.create_cq(6), t.create_cq(6));
    let mut b = t.create_qp(pdn, &p2.0, &p2.0);
    let mut c = t.create_qp(pdn, &p2.1, &p2.1);
    t.connect(b.qpn, c.qpn, 7);
    t.connect(c.qpn, b.qpn, 7);
    c.post_recv(&hal, 5, &[dseg(m.key, m.addr(128), 16)]);
    b.post_send(&hal, &Wqe::new(WrOpcode::Send, 6).inline(b"not starved"));
    assert_cqe(&p2.0.wait(&hal), 6, WcStatus::Success, WcOpcode::Send);
    assert_cqe(&p2.1.wait(&hal), 5, WcStatus::Success, WcOpcode::Recv);
    assert!(cq.poll().is_none(), "the FETCH_ADDs are unsignaled");
    // A reset ends it.
    reset(&hal);
    let stopped = sq_pi(&a);
    std::thread::sleep(std::time::Duration::from_millis(5));
    t.dev.poll();
    assert_eq!(sq_pi(&a), stopped, "nothing runs after the reset");
}

//! BlueFlame writes (spec 8.1): a 64-byte write of an SQ doorbell and the
//! WQE it announces. The device runs the WQE from the write when it is the
//! next one, whole, with its index: the ring then holds another WQE, which
//! does not run. Otherwise the write is an SQ doorbell and the ring's WQE
//! runs; on another QP's page, or at a wrong offset, it does nothing.

mod common;

use common::*;
use rnic_emu::ExecMode;
use rnic_hw_regs::bar0::{self, DevCaps};
use rnic_hw_regs::cqe::Syndrome;
use rnic_hw_regs::uar::{self, SqDoorbell, BF, BF_WQE_BYTES, UAR_PAGE_SIZE};
use rnic_hw_regs::wqe::SEG_SIZE;
use rnic_queues::Hal;
use rnic_verbs::{access, WcOpcode, WcStatus, WrOpcode};

both_modes!(
    blueflame_wqe_runs_instead_of_the_ring,
    blueflame_with_a_wrong_index_is_a_doorbell,
    blueflame_too_long_is_a_doorbell,
    blueflame_on_another_page_or_offset_does_nothing,
);

const ALL: u32 = access::LOCAL_WRITE | access::REMOTE_WRITE;

struct Rig {
    t: Tdev,
    a: TQp,
    acq: TCq,
    dst: TMr,
}

fn rig(mode: ExecMode) -> Rig {
    let mut t = bring_up(mode);
    let caps = DevCaps::from_bits(rnic_hw_regs::le32::from_ne(
        t.hal.mmio_read32(0, bar0::CAP_DEV),
    ));
    assert!(caps.bf(), "the device takes BlueFlame writes");
    let pdn = t.create_pd();
    let acq = t.create_cq(6);
    let bcq = t.create_cq(6);
    let a = t.create_qp(pdn, &acq, &acq);
    let b = t.create_qp(pdn, &bcq, &bcq);
    t.connect(a.qpn, b.qpn, 7);
    t.connect(b.qpn, a.qpn, 7);
    let dst = t.reg_mr(pdn, 4096, ALL);
    Rig { t, a, acq, dst }
}

/// An 8-byte inline WRITE of `v` to the start of `dst`.
fn write(dst: &TMr, wr_id: u64, v: &[u8]) -> Wqe {
    Wqe::new(WrOpcode::RdmaWrite, wr_id)
        .raddr(dst.addr(0), dst.key)
        .inline(v)
}

/// The bytes of `w` as the WQE at BB `index` (ds and index filled in).
fn wqe_bytes(w: &Wqe, index: u32) -> Vec<u8> {
    let mut ctrl = w.ctrl;
    ctrl.word.set_ds((1 + w.segs.len() / SEG_SIZE) as u8);
    ctrl.word.set_wqe_index(index as u8);
    let mut bytes = bytes_of(&ctrl).to_vec();
    bytes.extend_from_slice(&w.segs);
    bytes
}

/// A BlueFlame write at `off` of BAR 2: the SQ doorbell for QP `qpn` with
/// producer index `pi`, then the first bytes of `wqe`.
fn blueflame(hal: &rnic_emu::EmuHal, off: usize, qpn: u32, pi: u32, wqe: &[u8]) {
    let mut bytes = [0u8; BF_WQE_BYTES];
    let n = wqe.len().min(BF_WQE_BYTES);
    bytes[..n].copy_from_slice(&wqe[..n]);
    let mut block = [0u64; 8];
    block[0] = SqDoorbell::new()
        .with_qpn(qpn)
        .with_pi(pi as u16)
        .into_bits();
    for (w, c) in block[1..7].iter_mut().zip(bytes.chunks_exact(8)) {
        *w = u64::from_le_bytes(c.try_into().unwrap());
    }
    hal.mmio_write_block(2, off, &block)
        .expect("the model takes 64-byte writes");
}

/// The ring gets WQE `ring`, the doorbell record its producer index; the
/// BlueFlame write at `off` carries the WQE bytes `bf`.
fn post_both(r: &mut Rig, ring: &Wqe, bf: &[u8], off: usize) {
    r.a.write_wqe(ring);
    // Release: the WQE before the doorbell record.
    r.a.dbrec.store_u32_release(uar::QP_DBREC_SQ, r.a.sq_pi);
    let hal = r.t.hal.clone();
    blueflame(&hal, off, r.a.qpn, r.a.sq_pi, bf);
}

fn bf_off(page: u32) -> usize {
    page as usize * UAR_PAGE_SIZE + BF
}

fn landed(r: &Rig) -> [u8; 8] {
    let mut got = [0u8; 8];
    r.dst.region.read_bytes(0, &mut got);
    got
}

fn blueflame_wqe_runs_instead_of_the_ring(mode: ExecMode) {
    let mut r = rig(mode);
    let hal = r.t.hal.clone();
    for i in 0..20u64 {
        let index = r.a.sq_pi;
        let from_bf = wqe_bytes(&write(&r.dst, 100 + i, &[i as u8 + 1; 8]), index);
        let (ring, off) = (write(&r.dst, 200 + i, &[0xee; 8]), bf_off(r.a.page));
        post_both(&mut r, &ring, &from_bf, off);
        let c = r.acq.wait(&hal);
        assert_eq!(c.wr_id.to_ne(), 100 + i, "the BlueFlame WQE completed");
        assert_eq!(WcStatus::from_raw(c.status), Some(WcStatus::Success));
        assert_eq!(c.opcode, WcOpcode::RdmaWrite.raw());
        assert_eq!(landed(&r), [i as u8 + 1; 8]);
    }
    r.t.sync();
    assert!(r.acq.poll().is_none(), "the ring's WQEs never ran");
    // A plain doorbell still reads the ring.
    r.a.post_send(&hal, &write(&r.dst, 7, &[0x42; 8]));
    assert_eq!(r.acq.wait(&hal).wr_id.to_ne(), 7);
    assert_eq!(landed(&r), [0x42; 8]);
}

fn blueflame_with_a_wrong_index_is_a_doorbell(mode: ExecMode) {
    let mut r = rig(mode);
    let hal = r.t.hal.clone();
    let index = r.a.sq_pi;
    let stale = wqe_bytes(&write(&r.dst, 1, &[1; 8]), index + 1);
    let (ring, off) = (write(&r.dst, 2, &[2; 8]), bf_off(r.a.page));
    post_both(&mut r, &ring, &stale, off);
    let c = r.acq.wait(&hal);
    assert_eq!(c.wr_id.to_ne(), 2, "the ring's WQE ran");
    assert_eq!(landed(&r), [2; 8]);
}

fn blueflame_too_long_is_a_doorbell(mode: ExecMode) {
    let mut r = rig(mode);
    let hal = r.t.hal.clone();
    let index = r.a.sq_pi;
    // 40 inline bytes: 5 segments, more than a BlueFlame write carries.
    let long = wqe_bytes(&write(&r.dst, 1, &[1; 40]), index);
    let (ring, off) = (write(&r.dst, 2, &[2; 40]), bf_off(r.a.page));
    post_both(&mut r, &ring, &long, off);
    let c = r.acq.wait(&hal);
    assert_eq!(c.wr_id.to_ne(), 2, "the ring's WQE ran");
    let mut got = [0u8; 40];
    r.dst.region.read_bytes(0, &mut got);
    assert_eq!(got, [2; 40]);
}

fn blueflame_on_another_page_or_offset_does_nothing(mode: ExecMode) {
    let mut r = rig(mode);
    let hal = r.t.hal.clone();
    let index = r.a.sq_pi;
    let bf = wqe_bytes(&write(&r.dst, 1, &[1; 8]), index);
    let (ring, off) = (write(&r.dst, 2, &[2; 8]), bf_off(r.a.page + 1));
    post_both(&mut r, &ring, &bf, off);
    // Misaligned, and past the doorbell pages.
    let qpn = r.a.qpn;
    blueflame(&hal, bf_off(r.a.page) + 8, qpn, r.a.sq_pi, &bf);
    blueflame(&hal, bf_off(1 << 20), qpn, r.a.sq_pi, &bf);
    r.t.sync();
    assert!(r.acq.poll().is_none(), "nothing ran");
    assert_eq!(landed(&r), [0; 8]);
    // The QP is unharmed: its doorbell runs the ring's WQE.
    r.a.ring_sq(&hal);
    let c = r.acq.wait(&hal);
    assert_eq!(c.wr_id.to_ne(), 2);
    assert_eq!(
        Syndrome::from_raw(c.vendor_err.to_ne()),
        Some(Syndrome::None)
    );
    assert_eq!(landed(&r), [2; 8]);
}

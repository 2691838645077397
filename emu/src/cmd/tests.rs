//! Commands run on a device state alone: objects created, changed and
//! destroyed through `execute`, and the status and syndrome of a bad input.

use std::sync::Arc;

use rnic_hw_regs::cmd::*;
use rnic_hw_regs::{le32, le64};
use rnic_verbs::{access, qp_attr, Mtu, QpState, QpType};

use super::{execute, CmdError};
use rnic_queues::Pod;

use crate::iommu::{from_bytes, to_bytes};
use crate::irq::IrqLines;
use crate::state::State;
use crate::EmuConfig;

fn state() -> State {
    State::new(EmuConfig::default(), Arc::new(IrqLines::new(1)))
}

/// Runs `op` with `input` as context 0.
fn run<I: Pod, O: Pod>(st: &mut State, op: CmdOpcode, input: &I) -> Result<O, CmdError> {
    let mut inb = [0u8; CMD_IN_SIZE];
    to_bytes(input, &mut inb);
    let mut out = [0u8; CMD_OUT_SIZE];
    execute(st, 0, op.raw(), &inb, &mut out)?;
    Ok(from_bytes(&out))
}

/// The IOVA of `len` fresh bytes of device-visible memory.
fn dma(st: &mut State, len: usize) -> u64 {
    st.dev.iommu.alloc(len).expect("test memory").1
}

/// A PD, a CQ and an RC QP; their numbers.
fn rc_qp(st: &mut State) -> (u32, u32, u32) {
    let pd: CreatePdOut = run(st, CmdOpcode::CreatePd, &[0u8; 4]).expect("CREATE_PD");
    let pdn = pd.pdn.to_ne();
    let cq_in = CreateCqIn {
        log_size: le32::from_ne(4),
        eqn: le32::from_ne(NONE),
        buf_iova: le64::from_ne(dma(st, 4096)),
        dbrec_iova: le64::from_ne(dma(st, 64)),
        ..CreateCqIn::default()
    };
    let cq: CreateCqOut = run(st, CmdOpcode::CreateCq, &cq_in).expect("CREATE_CQ");
    let cqn = cq.cqn.to_ne();
    let qp_in = CreateQpIn {
        qp_type: QpType::Rc.raw(),
        log_rq_stride: 5,
        pdn: le32::from_ne(pdn),
        send_cqn: le32::from_ne(cqn),
        recv_cqn: le32::from_ne(cqn),
        srqn: le32::from_ne(NONE),
        log_sq_bbs: le32::from_ne(4),
        log_rq_wqes: le32::from_ne(4),
        sq_iova: le64::from_ne(dma(st, 4096)),
        rq_iova: le64::from_ne(dma(st, 4096)),
        dbrec_iova: le64::from_ne(dma(st, 64)),
        ..CreateQpIn::default()
    };
    let qp: CreateQpOut = run(st, CmdOpcode::CreateQp, &qp_in).expect("CREATE_QP");
    (pdn, cqn, qp.qpn.to_ne())
}

fn modify(st: &mut State, qpn: u32, mask: u32, attrs: QpAttrs) -> Result<(), CmdError> {
    let i = ModifyQpIn {
        qpn: le32::from_ne(qpn),
        attr_mask: le32::from_ne(mask),
        attrs,
    };
    run::<_, [u8; 4]>(st, CmdOpcode::ModifyQp, &i).map(|_| ())
}

fn init(st: &mut State, qpn: u32) -> Result<(), CmdError> {
    let attrs = QpAttrs {
        qp_state: QpState::Init.raw(),
        port_num: 1,
        qp_access_flags: le32::from_ne(access::REMOTE_WRITE),
        ..QpAttrs::default()
    };
    let mask = qp_attr::STATE | qp_attr::PKEY_INDEX | qp_attr::PORT | qp_attr::ACCESS_FLAGS;
    modify(st, qpn, mask, attrs)
}

/// The syndrome of the field at `off` in MODIFY_QP's attributes.
fn attr_syndrome(off: usize) -> u32 {
    (core::mem::offset_of!(ModifyQpIn, attrs) + off + 1) as u32
}

#[test]
fn a_qp_goes_from_reset_to_rts_with_the_attributes_each_step_requires() {
    let mut st = state();
    let (_, _, qpn) = rc_qp(&mut st);
    init(&mut st, qpn).expect("INIT");
    let mut rtr = QpAttrs {
        qp_state: QpState::Rtr.raw(),
        path_mtu: Mtu::Mtu1024.raw(),
        dest_qp_num: le32::from_ne(7),
        rq_psn: le32::from_ne(0x123),
        max_dest_rd_atomic: 2,
        min_rnr_timer: 3,
        ..QpAttrs::default()
    };
    rtr.ah.dgid = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 9];
    rtr.ah.port_num = 1;
    let rtr_mask = qp_attr::STATE
        | qp_attr::AV
        | qp_attr::PATH_MTU
        | qp_attr::DEST_QPN
        | qp_attr::RQ_PSN
        | qp_attr::MAX_DEST_RD_ATOMIC;
    // MIN_RNR_TIMER is required too.
    let missing = modify(&mut st, qpn, rtr_mask, rtr);
    assert_eq!(missing.map_err(|e| e.status), Err(CmdStatus::BadParam));
    let all = rtr_mask | qp_attr::MIN_RNR_TIMER;
    // RoCE carries a GRH: an address vector without one names its field.
    let e = modify(&mut st, qpn, all, rtr).expect_err("no GRH");
    let is_global =
        core::mem::offset_of!(QpAttrs, ah) + core::mem::offset_of!(AddressVector, is_global);
    assert_eq!(
        (e.status, e.syndrome),
        (CmdStatus::BadParam, attr_syndrome(is_global))
    );
    rtr.ah.is_global = 1;
    modify(&mut st, qpn, all, rtr).expect("RTR");
    let rts = QpAttrs {
        qp_state: QpState::Rts.raw(),
        sq_psn: le32::from_ne(0x456),
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 2,
        ..QpAttrs::default()
    };
    let rts_mask = qp_attr::STATE
        | qp_attr::SQ_PSN
        | qp_attr::TIMEOUT
        | qp_attr::RETRY_CNT
        | qp_attr::RNR_RETRY
        | qp_attr::MAX_QP_RD_ATOMIC;
    modify(&mut st, qpn, rts_mask, rts).expect("RTS");
    let qp = st.qps.get(qpn).expect("the QP");
    assert_eq!(qp.state, QpState::Rts);
    assert_eq!((qp.resp.epsn, qp.resp.ack_psn), (0x123, 0x123));
    assert_eq!((qp.req.next_psn, qp.req.retry_left), (0x456, 7));
    let path = qp.path.expect("a path from the address vector");
    assert_eq!(path.dst_ip.to_gid(), rtr.ah.dgid);
}

#[test]
fn a_bad_modify_names_its_field() {
    let mut st = state();
    let (_, _, qpn) = rc_qp(&mut st);
    let rts = QpAttrs {
        qp_state: QpState::Rts.raw(),
        ..QpAttrs::default()
    };
    let e = modify(&mut st, qpn, qp_attr::STATE, rts).expect_err("RESET to RTS");
    assert_eq!(
        (e.status, e.syndrome),
        (CmdStatus::BadState, attr_syndrome(0))
    );
    init(&mut st, qpn).expect("INIT");
    let draining = QpAttrs {
        qp_state: QpState::Init.raw(),
        sq_draining: 1,
        ..QpAttrs::default()
    };
    let e = modify(&mut st, qpn, qp_attr::STATE, draining).expect_err("sq_draining");
    assert_eq!((e.status, e.syndrome), (CmdStatus::BadParam, 74));
    let e = modify(&mut st, 999, qp_attr::STATE, rts).expect_err("no such QP");
    assert_eq!((e.status, e.syndrome), (CmdStatus::BadResource, 1));
    assert_eq!(st.qps.get(qpn).map(|q| q.state), Some(QpState::Init));
}

#[test]
fn an_object_in_use_is_not_destroyed() {
    let mut st = state();
    let (pdn, cqn, qpn) = rc_qp(&mut st);
    let obj = |n: u32| ObjIn {
        id: le32::from_ne(n),
    };
    let busy = |r: Result<[u8; 4], CmdError>| r.map(|_| ()).map_err(|e| e.status);
    assert_eq!(
        busy(run(&mut st, CmdOpcode::DestroyPd, &obj(pdn))),
        Err(CmdStatus::Busy)
    );
    assert_eq!(
        busy(run(&mut st, CmdOpcode::DestroyCq, &obj(cqn))),
        Err(CmdStatus::Busy)
    );
    for (op, n) in [
        (CmdOpcode::DestroyQp, qpn),
        (CmdOpcode::DestroyCq, cqn),
        (CmdOpcode::DestroyPd, pdn),
    ] {
        assert_eq!(busy(run(&mut st, op, &obj(n))), Ok(()), "{op:?}");
    }
    assert_eq!(
        busy(run(&mut st, CmdOpcode::DestroyQp, &obj(qpn))),
        Err(CmdStatus::BadResource),
        "destroyed twice"
    );
}

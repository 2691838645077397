//! Driver tests against the fake device: bring-up, commands, object
//! lifetimes, the QP state machine, posting and completion accounting.

extern crate std;

use std::boxed::Box;
use std::string::ToString;
use std::sync::{mpsc, Arc};
use std::vec::Vec;

use rnic_hw_regs::bar0::FatalSyndrome;
use rnic_hw_regs::cmd::{CmdOpcode, CmdStatus};
use rnic_hw_regs::cqe::{Cqe, CqeFlags};
use rnic_hw_regs::eqe::{Eqe, EqeWord, EventType};
use rnic_hw_regs::uar::{CqDoorbell, QpDbRec, SqDoorbell, CQ_DB, RQ_DB, SQ_DB, UAR_PAGE_SIZE};
use rnic_hw_regs::verbs::{access, qp_attr, Mtu, QpState, QpType, WcOpcode, WcStatus};
use rnic_hw_regs::wqe::CtrlSeg;
use rnic_hw_regs::{le16, le32, le64};

use super::{FakeHal, Knobs};
use crate::{
    Config, Context, Cq, ErrorKind, Payload, Pd, Qp, QpAttr, QpCap, QpInitAttr, RecvWr, RemoteAddr,
    SendOp, SendWr, Sge, WorkCompletion,
};

fn open() -> Context<FakeHal> {
    Context::open(FakeHal::new()).expect("bring-up")
}

fn short() -> Config {
    Config {
        reset_timeout_ns: 20_000_000,
        enable_timeout_ns: 20_000_000,
        cmd_timeout_ns: 20_000_000,
        ..Config::default()
    }
}

fn cap(send: u32, recv: u32) -> QpCap {
    QpCap {
        max_send_wr: send,
        max_recv_wr: recv,
        max_send_sge: 2,
        max_recv_sge: 1,
        max_inline_data: 16,
    }
}

fn qp(pd: &Pd<FakeHal>, cq: &Cq<FakeHal>, cap: QpCap) -> Qp<FakeHal> {
    pd.create_qp(&QpInitAttr {
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap,
        qp_type: QpType::Rc,
        sq_sig_all: false,
    })
    .expect("create_qp")
}

const INIT_MASK: u32 = qp_attr::STATE | qp_attr::PKEY_INDEX | qp_attr::PORT | qp_attr::ACCESS_FLAGS;
const RTR_MASK: u32 = qp_attr::STATE
    | qp_attr::AV
    | qp_attr::PATH_MTU
    | qp_attr::DEST_QPN
    | qp_attr::RQ_PSN
    | qp_attr::MAX_DEST_RD_ATOMIC
    | qp_attr::MIN_RNR_TIMER;
const RTS_MASK: u32 = qp_attr::STATE
    | qp_attr::SQ_PSN
    | qp_attr::TIMEOUT
    | qp_attr::RETRY_CNT
    | qp_attr::RNR_RETRY
    | qp_attr::MAX_QP_RD_ATOMIC;

fn init_attr() -> QpAttr {
    QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: access::REMOTE_WRITE | access::REMOTE_READ,
        ..QpAttr::default()
    }
}

fn rtr_attr(dest: u32) -> QpAttr {
    let mut a = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: Some(Mtu::Mtu1024),
        dest_qp_num: dest,
        rq_psn: 0x12_3456,
        max_dest_rd_atomic: 4,
        min_rnr_timer: 12,
        ..QpAttr::default()
    };
    a.ah_attr.is_global = true;
    a
}

fn rts_attr() -> QpAttr {
    QpAttr {
        qp_state: QpState::Rts,
        sq_psn: 7,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 4,
        ..QpAttr::default()
    }
}

fn to_rts(qp: &Qp<FakeHal>) {
    qp.modify(&init_attr(), INIT_MASK).unwrap();
    qp.modify(&rtr_attr(qp.qp_num()), RTR_MASK).unwrap();
    qp.modify(&rts_attr(), RTS_MASK).unwrap();
}

fn send_cqe(qpn: u32, wr_id: u64, counter: u16, status: WcStatus) -> Cqe {
    Cqe {
        wr_id: le64::from_ne(wr_id),
        qpn: le32::from_ne(qpn),
        wqe_counter: le16::from_ne(counter),
        opcode: WcOpcode::Send.raw(),
        status: status.raw(),
        flags: CqeFlags::new().with_is_send(true),
        ..Cqe::default()
    }
}

fn recv_cqe(qpn: u32, wr_id: u64, counter: u16) -> Cqe {
    Cqe {
        wr_id: le64::from_ne(wr_id),
        byte_len: le32::from_ne(5),
        imm: [1, 2, 3, 4],
        qpn: le32::from_ne(qpn),
        wqe_counter: le16::from_ne(counter),
        opcode: WcOpcode::Recv.raw(),
        flags: CqeFlags::new().with_with_imm(true),
        ..Cqe::default()
    }
}

fn inline_send(wr_id: u64, flags: u32) -> SendWr<'static> {
    SendWr {
        wr_id,
        op: SendOp::Send,
        payload: Payload::Inline(b"hello"),
        flags,
    }
}

fn poll_all(cq: &Cq<FakeHal>) -> Vec<WorkCompletion> {
    let mut wc = [WorkCompletion::default(); 16];
    let n = cq.poll(&mut wc).unwrap();
    wc[..n].to_vec()
}

#[test]
fn bring_up_and_queries() {
    let ctx = open();
    let dev = ctx.query_device().unwrap();
    assert_eq!(dev, *ctx.device_attr());
    assert_eq!((dev.vendor_id, dev.max_qp, dev.max_sge), (0x1b36, 1024, 16));
    let port = ctx.query_port(1).unwrap();
    assert_eq!(port.max_mtu, Mtu::Mtu4096);
    assert_eq!(port.gid_tbl_len, 16);
    assert_eq!(
        ctx.query_port(2).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    let gid = ctx.query_gid(1, 0).unwrap();
    assert_eq!((gid[0], gid[1], gid[15]), (0xfe, 0x80, 1));
    assert_eq!(
        ctx.query_gid(1, 1).unwrap(),
        [0; 16],
        "invalid entries read as zero"
    );
    let e = ctx.query_gid(1, 99).unwrap_err();
    let f = e.command().expect("a device refusal");
    assert_eq!(
        (f.opcode, f.status),
        (CmdOpcode::QueryGid, CmdStatus::BadParam)
    );
    assert_eq!(f.field_offset(), Some(4), "the index field");
    assert!(e.to_string().contains("QueryGid"), "{e}");
}

#[test]
fn bring_up_failures() {
    let fail = |knobs: Knobs| {
        Context::open_with(FakeHal::with(knobs), short())
            .err()
            .expect("bring-up must fail")
    };
    // A device that is no rnic is refused before anything is written to
    // it: not even the reset.
    let hal = FakeHal::with(Knobs {
        magic: 0xdead_beef,
        ..Knobs::default()
    });
    let e = Context::open_with(hal.clone(), short()).err().unwrap();
    assert_eq!(e.kind(), ErrorKind::NoDevice);
    assert!(e.to_string().contains("0xdeadbeef"), "{e}");
    assert!(hal.state().regs.is_empty(), "no register written");
    let e = fail(Knobs {
        version_major: 2,
        ..Knobs::default()
    });
    assert_eq!(e.kind(), ErrorKind::NoDevice);
    assert!(e.to_string().contains("2.0"), "{e}");
    let e = fail(Knobs {
        never_ready: true,
        ..Knobs::default()
    });
    assert_eq!(e.kind(), ErrorKind::TimedOut);
    let hal = FakeHal::with(Knobs {
        fatal_on_enable: Some(FatalSyndrome::EqDma),
        ..Knobs::default()
    });
    let e = Context::open_with(hal.clone(), short()).err().unwrap();
    assert_eq!(e.kind(), ErrorKind::Io);
    assert!(e.to_string().contains("EqDma"), "{e}");
    assert!(
        hal.state().maps.is_empty(),
        "queues freed after the failure"
    );
}

#[test]
fn command_timeout_and_failure_status() {
    let ctx = Context::open_with(FakeHal::new(), short()).unwrap();
    ctx.hal().state().knobs.fail_next = Some((CmdStatus::NoResources, 0));
    let e = ctx.alloc_pd().err().unwrap();
    assert_eq!(e.kind(), ErrorKind::NoMemory);
    assert_eq!(e.command().unwrap().status, CmdStatus::NoResources);
    ctx.hal().state().knobs.hang_commands = true;
    let e = ctx.alloc_pd().err().unwrap();
    assert_eq!(e.kind(), ErrorKind::TimedOut);
    assert!(e.to_string().contains("CreatePd"), "{e}");
}

#[test]
fn pd_busy_until_its_mrs_and_qps_are_gone() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8).unwrap();
    let mr = pd.alloc_mr(100, access::LOCAL_WRITE).unwrap();
    let q = qp(&pd, &cq, cap(4, 4));
    let e = pd.destroy().unwrap_err();
    assert_eq!(e.error.kind(), ErrorKind::Busy);
    let pd = e.object.expect("handed back");
    let e = cq.destroy().unwrap_err();
    assert_eq!(e.error.kind(), ErrorKind::Busy);
    let cq = e.object.expect("handed back");
    mr.destroy().unwrap();
    q.destroy().unwrap();
    cq.destroy().unwrap();
    pd.destroy().unwrap();
    let st = ctx.hal().state();
    assert!(st.pds.is_empty() && st.mrs.is_empty() && st.qps.is_empty() && st.cqs.is_empty());
}

#[test]
fn drop_in_any_order_releases_everything() {
    let hal = FakeHal::new();
    {
        let ctx = Context::open(hal.clone()).unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(8).unwrap();
        let q = qp(&pd, &cq, cap(4, 4));
        let mr = pd.alloc_mr(64, 0).unwrap();
        drop(ctx);
        drop(pd);
        drop(cq);
        assert_eq!(
            hal.state().pds.len(),
            1,
            "the PD lives while its QP and MR do"
        );
        drop(q);
        assert_eq!(hal.state().cqs.len(), 0, "the CQ went with its last QP");
        drop(mr);
        assert!(hal.state().pds.is_empty());
    }
    assert!(hal.state().maps.is_empty(), "all DMA memory freed");
    assert!(hal
        .state()
        .commands
        .ends_with(&[CmdOpcode::DeregMr, CmdOpcode::DestroyPd]));
}

#[test]
fn mr_checks_and_accessors() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let bad = pd.alloc_mr(64, access::REMOTE_WRITE).err().unwrap();
    assert_eq!(bad.kind(), ErrorKind::InvalidArgument);
    assert_eq!(
        pd.alloc_mr(64, 1 << 7).err().unwrap().kind(),
        ErrorKind::InvalidArgument
    );
    let mr = pd
        .alloc_mr(100, access::LOCAL_WRITE | access::REMOTE_READ)
        .unwrap();
    assert_eq!(mr.len(), 100);
    assert_eq!(mr.lkey(), mr.rkey());
    let data: Vec<u8> = (0..37).collect();
    mr.write(3, &data).unwrap();
    let mut back = [0u8; 37];
    mr.read(3, &mut back).unwrap();
    assert_eq!(&back[..], &data[..]);
    assert_eq!(
        mr.write(90, &data).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    let sge = mr.sge(10, 20).unwrap();
    assert_eq!(
        (sge.addr, sge.length, sge.lkey),
        (mr.addr() + 10, 20, mr.lkey())
    );
    assert!(mr.sge(90, 20).is_err());

    let mut user = std::vec![0u8; 3000];
    let ptr = core::ptr::NonNull::new(user.as_mut_ptr()).unwrap();
    // SAFETY: `user` outlives the MR (destroyed below).
    let umr = unsafe { pd.reg_mr(ptr, user.len(), access::LOCAL_WRITE) }.unwrap();
    assert_eq!(umr.addr(), ptr.as_ptr() as u64);
    umr.write(2990, b"0123456789").unwrap();
    let maps = ctx.hal().state().maps.len();
    umr.destroy().unwrap();
    assert_eq!(ctx.hal().state().maps.len(), maps - 1, "unmapped");
    assert_eq!(&user[2990..], b"0123456789");
}

#[test]
fn qp_modify_checks_masks_and_values() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8).unwrap();
    let q = qp(&pd, &cq, cap(4, 4));
    assert_eq!(q.state(), QpState::Reset);
    let err = |a: &QpAttr, m: u32| q.modify(a, m).unwrap_err();

    let e = err(&init_attr(), INIT_MASK & !qp_attr::PORT);
    assert_eq!(e.kind(), ErrorKind::InvalidArgument);
    assert!(e.to_string().contains("requires attributes PORT"), "{e}");
    let e = err(&init_attr(), INIT_MASK | qp_attr::SQ_PSN);
    assert!(
        e.to_string().contains("does not allow attributes SQ_PSN"),
        "{e}"
    );
    assert!(err(&init_attr(), INIT_MASK | 1 << 25)
        .to_string()
        .contains("unknown"));
    let e = err(&rts_attr(), RTS_MASK);
    assert!(e.to_string().contains("illegal"), "{e}");
    let a = QpAttr {
        port_num: 2,
        ..init_attr()
    };
    assert!(err(&a, INIT_MASK).to_string().contains("port_num 2"));
    let a = QpAttr {
        qp_access_flags: access::LOCAL_WRITE,
        ..init_attr()
    };
    assert_eq!(err(&a, INIT_MASK).kind(), ErrorKind::InvalidArgument);
    let a = QpAttr {
        pkey_index: 1,
        ..init_attr()
    };
    assert_eq!(err(&a, INIT_MASK).kind(), ErrorKind::InvalidArgument);
    assert!(ctx
        .hal()
        .state()
        .commands
        .iter()
        .all(|c| *c != CmdOpcode::ModifyQp));

    q.modify(&init_attr(), INIT_MASK).unwrap();
    assert_eq!(q.state(), QpState::Init);
    let dest = q.qp_num();
    let bad_rtr = [
        QpAttr {
            path_mtu: None,
            ..rtr_attr(dest)
        },
        QpAttr {
            dest_qp_num: 1 << 24,
            ..rtr_attr(dest)
        },
        QpAttr {
            rq_psn: 1 << 24,
            ..rtr_attr(dest)
        },
        QpAttr {
            max_dest_rd_atomic: 17,
            ..rtr_attr(dest)
        },
        QpAttr {
            min_rnr_timer: 32,
            ..rtr_attr(dest)
        },
    ];
    for a in &bad_rtr {
        assert_eq!(err(a, RTR_MASK).kind(), ErrorKind::InvalidArgument, "{a:?}");
    }
    let mut a = rtr_attr(dest);
    a.ah_attr.is_global = false;
    assert!(err(&a, RTR_MASK).to_string().contains("GRH"));
    a.ah_attr.is_global = true;
    a.ah_attr.sgid_index = 16;
    assert!(err(&a, RTR_MASK).to_string().contains("sgid_index"));
    q.modify(&rtr_attr(dest), RTR_MASK).unwrap();
    for a in [
        QpAttr {
            retry_cnt: 8,
            ..rts_attr()
        },
        QpAttr {
            rnr_retry: 8,
            ..rts_attr()
        },
        QpAttr {
            sq_psn: 1 << 24,
            ..rts_attr()
        },
        QpAttr {
            timeout: 32,
            ..rts_attr()
        },
        QpAttr {
            max_rd_atomic: 17,
            ..rts_attr()
        },
    ] {
        assert_eq!(
            err(&a, RTS_MASK).kind(),
            ErrorKind::InvalidArgument,
            "{a:?}"
        );
    }
    q.modify(&rts_attr(), RTS_MASK).unwrap();
    // Without STATE the QP stays in RTS: RTS -> RTS allows MIN_RNR_TIMER.
    q.modify(
        &QpAttr {
            min_rnr_timer: 3,
            ..QpAttr::default()
        },
        qp_attr::MIN_RNR_TIMER,
    )
    .unwrap();
    let got = q.query().unwrap();
    assert_eq!(got.qp_state, QpState::Rts);
    assert_eq!((got.dest_qp_num, got.sq_psn, got.port_num), (dest, 7, 1));
    assert_eq!(got.path_mtu, Some(Mtu::Mtu1024));
    assert_eq!(got.ah_attr.port_num, 1, "AV port defaults to the QP's port");
    assert_eq!(got.cap, q.cap());
    // CUR_STATE must be legal for the transition it names.
    let a = QpAttr {
        cur_qp_state: QpState::Init,
        ..rts_attr()
    };
    assert!(err(&a, qp_attr::STATE | qp_attr::CUR_STATE)
        .to_string()
        .contains("illegal"));
    q.modify(
        &QpAttr {
            qp_state: QpState::Err,
            ..QpAttr::default()
        },
        qp_attr::STATE,
    )
    .unwrap();
    assert_eq!(q.state(), QpState::Err);
}

#[test]
fn posting_depends_on_state() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8).unwrap();
    let q = qp(&pd, &cq, cap(4, 4));
    let mr = pd.alloc_mr(64, access::LOCAL_WRITE).unwrap();
    let sgl = [mr.sge(0, 64).unwrap()];
    let recv = [RecvWr {
        wr_id: 1,
        sg_list: &sgl,
    }];
    assert_eq!(q.post_recv(&recv).unwrap_err().index, 0);
    assert_eq!(q.post_send(&[inline_send(1, 0)]).unwrap_err().index, 0);
    q.modify(&init_attr(), INIT_MASK).unwrap();
    q.post_recv(&recv).unwrap();
    let e = q.post_send(&[inline_send(1, 0)]).unwrap_err();
    assert_eq!(e.error.kind(), ErrorKind::InvalidArgument);
    q.modify(&rtr_attr(q.qp_num()), RTR_MASK).unwrap();
    assert!(q.post_send(&[inline_send(1, 0)]).is_err());
    q.modify(&rts_attr(), RTS_MASK).unwrap();
    q.post_send(&[inline_send(1, 0)]).unwrap();
    q.modify(
        &QpAttr {
            qp_state: QpState::Err,
            ..QpAttr::default()
        },
        qp_attr::STATE,
    )
    .unwrap();
    q.post_send(&[inline_send(2, 0)]).unwrap();
    q.post_recv(&recv).unwrap();
}

#[test]
fn post_send_batch_rings_once_and_stops_at_bad_wr() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8).unwrap();
    let q = qp(&pd, &cq, cap(8, 4));
    to_rts(&q);
    let mr = pd.alloc_mr(4096, access::LOCAL_WRITE).unwrap();
    let three = [mr.sge(0, 8).unwrap(); 3];
    let one = [mr.sge(0, 8).unwrap()];
    let wrs = [
        inline_send(10, 0),
        SendWr {
            wr_id: 11,
            op: SendOp::RdmaWrite {
                remote: RemoteAddr {
                    addr: 0x1000,
                    rkey: 7,
                },
            },
            payload: Payload::Sgl(&one),
            flags: crate::send_flags::SIGNALED,
        },
        SendWr {
            wr_id: 12,
            op: SendOp::Send,
            payload: Payload::Sgl(&three),
            flags: 0,
        },
        inline_send(13, 0),
    ];
    ctx.hal().state().doorbells.clear();
    let e = q.post_send(&wrs).unwrap_err();
    assert_eq!(e.index, 2);
    assert_eq!(e.error.kind(), ErrorKind::InvalidArgument);
    let st = ctx.hal().state();
    assert_eq!(st.doorbells.len(), 1, "one doorbell per call");
    let (off, value) = st.doorbells[0];
    assert_eq!(off % UAR_PAGE_SIZE, SQ_DB);
    let db = SqDoorbell::from_bits(value);
    assert_eq!((db.qpn(), db.pi()), (q.qp_num(), 2));
    let fq = st.qps[&q.qp_num()];
    let rec: QpDbRec = st.read_obj(fq.create.dbrec_iova.to_ne());
    assert_eq!(rec.sq_pi.to_ne(), 2);
    let sq = fq.create.sq_iova.to_ne();
    let c0: CtrlSeg = st.read_obj(sq);
    let c1: CtrlSeg = st.read_obj(sq + 64);
    assert_eq!((c0.wr_id.to_ne(), c1.wr_id.to_ne()), (10, 11));
    assert_eq!((c0.word.wqe_index(), c1.word.wqe_index()), (0, 1));
    assert!(c1.word.signaled() && !c0.word.signaled() && c0.word.inline());
    drop(st);

    // An empty post rings nothing.
    q.post_send(&[]).unwrap();
    assert_eq!(ctx.hal().state().doorbells.len(), 1);
    let e = q
        .post_send(&[SendWr {
            flags: 1 << 3,
            ..inline_send(1, 0)
        }])
        .unwrap_err();
    assert!(e.to_string().contains("unknown send flags"), "{e}");
}

#[test]
fn send_queue_accounting_retires_on_completions() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let q = qp(&pd, &cq, cap(4, 4));
    assert_eq!(q.cap().max_send_wr, 4);
    to_rts(&q);
    let qpn = q.qp_num();
    let cqn = cq.cq_num();
    let batch: Vec<_> = (0..5).map(|i| inline_send(i, 0)).collect();
    let e = q.post_send(&batch).unwrap_err();
    assert_eq!((e.index, e.error.kind()), (4, ErrorKind::NoMemory));
    assert_eq!(q.post_send(&batch[..1]).unwrap_err().index, 0);
    // One signaled completion at BB 3 retires the unsignaled run before it.
    ctx.hal()
        .state()
        .push_cqe(cqn, send_cqe(qpn, 2, 3, WcStatus::Success));
    let wc = poll_all(&cq);
    assert_eq!(wc.len(), 1);
    assert_eq!(
        (wc[0].wr_id, wc[0].qp_num, wc[0].opcode),
        (2, qpn, WcOpcode::Send)
    );
    let e = q.post_send(&batch).unwrap_err();
    assert_eq!(e.index, 3, "three slots were freed");
    // The CQ's consumer index was published.
    let st = ctx.hal().state();
    let cqbuf = st.cqs[&cqn].buf;
    let ci: u32 = st.read_obj(cqbuf + 16 * 64);
    assert_eq!(ci, 1);
    drop(st);
    // A completion beyond the posted WQEs is a device error, reported after
    // the completions before it and never returned as a completion.
    {
        let mut st = ctx.hal().state();
        st.push_cqe(cqn, send_cqe(qpn, 3, 4, WcStatus::Success));
        st.push_cqe(cqn, send_cqe(qpn, 9, 40, WcStatus::Success));
    }
    let mut wc = [WorkCompletion::default(); 4];
    assert_eq!(cq.poll(&mut wc).unwrap(), 1);
    assert_eq!(wc[0].wr_id, 3);
    assert_eq!(cq.poll(&mut wc).unwrap_err().kind(), ErrorKind::Io);
    assert_eq!(cq.poll(&mut wc).unwrap(), 0);
}

#[test]
fn receive_queue_accounting_and_completion_fields() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let q = qp(&pd, &cq, cap(4, 2));
    q.modify(&init_attr(), INIT_MASK).unwrap();
    let mr = pd.alloc_mr(64, access::LOCAL_WRITE).unwrap();
    let sgl = [mr.sge(0, 32).unwrap(), Sge::default()];
    let two = [mr.sge(0, 8).unwrap(), mr.sge(8, 8).unwrap()];
    let e = q
        .post_recv(&[RecvWr {
            wr_id: 1,
            sg_list: &two,
        }])
        .unwrap_err();
    assert_eq!(
        e.error.kind(),
        ErrorKind::InvalidArgument,
        "max_recv_sge is 1"
    );
    let r = |id| RecvWr {
        wr_id: id,
        sg_list: &sgl[..1],
    };
    ctx.hal().state().doorbells.clear();
    let e = q.post_recv(&[r(1), r(2), r(3)]).unwrap_err();
    assert_eq!((e.index, e.error.kind()), (2, ErrorKind::NoMemory));
    {
        let st = ctx.hal().state();
        assert_eq!(st.doorbells.len(), 1);
        assert_eq!(st.doorbells[0].0 % UAR_PAGE_SIZE, RQ_DB);
        let fq = st.qps[&q.qp_num()];
        let rec: QpDbRec = st.read_obj(fq.create.dbrec_iova.to_ne());
        assert_eq!(rec.rq_pi.to_ne(), 2);
    }
    ctx.hal()
        .state()
        .push_cqe(cq.cq_num(), recv_cqe(q.qp_num(), 1, 1));
    let wc = poll_all(&cq);
    assert_eq!(wc[0].wr_id, 1);
    assert_eq!(wc[0].opcode, WcOpcode::Recv);
    assert_eq!(wc[0].byte_len, 5);
    assert_eq!(wc[0].imm_data, Some([1, 2, 3, 4]));
    assert_eq!(wc[0].flags, crate::wc_flags::WITH_IMM);
    q.post_recv(&[r(3)]).unwrap();
    assert!(q.post_recv(&[r(4)]).is_err());
}

#[test]
fn error_completion_moves_qp_to_err() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let q = qp(&pd, &cq, cap(4, 4));
    to_rts(&q);
    q.post_send(&[inline_send(1, 0)]).unwrap();
    ctx.hal().state().push_cqe(
        cq.cq_num(),
        send_cqe(q.qp_num(), 1, 1, WcStatus::RemAccessErr),
    );
    let wc = poll_all(&cq);
    assert_eq!(wc[0].status, WcStatus::RemAccessErr);
    assert_eq!(q.state(), QpState::Err);
    q.post_send(&[inline_send(2, 0)]).unwrap();
}

#[test]
fn reset_removes_the_qps_completions_and_restarts_queues() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8).unwrap();
    let a = qp(&pd, &cq, cap(4, 4));
    let b = qp(&pd, &cq, cap(4, 4));
    to_rts(&a);
    to_rts(&b);
    a.post_send(&[inline_send(1, 0), inline_send(2, 0)])
        .unwrap();
    b.post_send(&[inline_send(3, 0), inline_send(4, 0)])
        .unwrap();
    {
        let mut st = ctx.hal().state();
        st.push_cqe(cq.cq_num(), send_cqe(a.qp_num(), 1, 1, WcStatus::Success));
        st.push_cqe(cq.cq_num(), send_cqe(b.qp_num(), 3, 1, WcStatus::Success));
        st.push_cqe(cq.cq_num(), send_cqe(a.qp_num(), 2, 2, WcStatus::Success));
        st.push_cqe(cq.cq_num(), send_cqe(b.qp_num(), 4, 2, WcStatus::Success));
    }
    a.modify(&QpAttr::default(), qp_attr::STATE).unwrap();
    assert_eq!(a.state(), QpState::Reset);
    let ids: Vec<u64> = poll_all(&cq).iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, [3, 4]);
    let st = ctx.hal().state();
    let rec: QpDbRec = st.read_obj(st.qps[&a.qp_num()].create.dbrec_iova.to_ne());
    assert_eq!((rec.sq_pi.to_ne(), rec.rq_pi.to_ne()), (0, 0));
    drop(st);
    to_rts(&a);
    let four: Vec<_> = (0..4).map(|i| inline_send(i, 0)).collect();
    a.post_send(&four).unwrap();
    // Entries wrap around the ring after the cleaned ones.
    for i in 0..6u16 {
        ctx.hal().state().push_cqe(
            cq.cq_num(),
            send_cqe(b.qp_num(), 0, 3 + i % 2, WcStatus::Success),
        );
        ctx.hal()
            .state()
            .push_cqe(cq.cq_num(), send_cqe(a.qp_num(), 0, 1, WcStatus::Success));
        b.modify(&QpAttr::default(), qp_attr::STATE).unwrap();
        to_rts(&b);
        b.post_send(&four[..2]).unwrap();
        let wc = poll_all(&cq);
        assert_eq!(wc.len(), 1, "iteration {i}");
        assert_eq!(wc[0].qp_num, a.qp_num());
        a.modify(&QpAttr::default(), qp_attr::STATE).unwrap();
        to_rts(&a);
        a.post_send(&four).unwrap();
    }
}

#[test]
fn events_update_arm_sequence_and_qp_state() {
    let ctx = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8).unwrap();
    let q = qp(&pd, &cq, cap(4, 4));
    to_rts(&q);
    assert!(ctx.poll_event().is_none());
    let eqe = |t: EventType, obj: u32| Eqe {
        word: EqeWord::new().with_event_type(t.raw()),
        obj: le32::from_ne(obj),
        ..Eqe::default()
    };
    cq.arm(false);
    {
        let mut st = ctx.hal().state();
        let (off, v) = *st.doorbells.last().unwrap();
        assert_eq!(off % UAR_PAGE_SIZE, CQ_DB);
        assert_eq!(CqDoorbell::from_bits(v).sn(), 0);
        st.push_eqe(eqe(EventType::CmdDone, 0));
        st.push_eqe(eqe(EventType::Completion, cq.cq_num()));
        st.push_eqe(eqe(EventType::QpFatal, q.qp_num()));
    }
    let ev = ctx.poll_event().unwrap();
    assert_eq!(
        (ev.event_type, ev.obj),
        (EventType::Completion, cq.cq_num())
    );
    cq.arm(true);
    let v = ctx.hal().state().doorbells.last().unwrap().1;
    let db = CqDoorbell::from_bits(v);
    assert_eq!((db.sn(), db.cmd(), db.cqn()), (1, 1, cq.cq_num()));
    assert_eq!(
        ctx.wait_event(1_000_000).unwrap().unwrap().event_type,
        EventType::QpFatal
    );
    assert_eq!(q.state(), QpState::Err);
    assert!(ctx.wait_event(1_000_000).unwrap().is_none());
}

/// Regression: a QP number the device reuses while the QP that had it is
/// being destroyed belongs to the new QP. The old QP's release must not
/// remove the new QP from the tables, nor its completions from the CQ,
/// and the old QP's completions must not be taken for the new QP's.
#[test]
fn qp_number_reused_during_destroy_belongs_to_the_new_qp() {
    let ctx = open();
    let pd = Arc::new(ctx.alloc_pd().unwrap());
    let cq = Arc::new(ctx.create_cq(16).unwrap());
    let cqn = cq.cq_num();
    let a = qp(&pd, &cq, cap(4, 4));
    to_rts(&a);
    let n = a.qp_num();
    a.post_send(&[inline_send(1, 0)]).unwrap();
    // A's completion is still in the CQ when A is destroyed.
    ctx.hal()
        .state()
        .push_cqe(cqn, send_cqe(n, 1, 1, WcStatus::Success));
    // Right after DESTROY_QP, before A's release has cleaned up, the
    // device gives A's number to B, created, used and completing as
    // another thread could.
    let (tx, rx) = mpsc::channel();
    let (hal, pd2, cq2) = (ctx.hal().clone(), Arc::clone(&pd), Arc::clone(&cq));
    *ctx.shared.after_destroy.lock() = Some(Box::new(move |op, id| {
        assert_eq!((op, id), (CmdOpcode::DestroyQp, n));
        hal.state().knobs.next_number = Some(n);
        let b = qp(&pd2, &cq2, cap(4, 4));
        to_rts(&b);
        b.post_send(&[inline_send(2, 0)]).unwrap();
        hal.state()
            .push_cqe(cqn, send_cqe(n, 2, 1, WcStatus::Success));
        tx.send(b).unwrap();
    }));
    a.destroy().unwrap();
    let b = rx.recv().unwrap();
    assert_eq!(b.qp_num(), n);
    let ids: Vec<u64> = poll_all(&cq).iter().map(|w| w.wr_id).collect();
    assert_eq!(ids, [2], "A's completion removed, B's kept");
    // B's send queue retires: it can be filled and drained repeatedly.
    let four: Vec<_> = (10..14).map(|i| inline_send(i, 0)).collect();
    for round in 1..=3u16 {
        b.post_send(&four).unwrap();
        ctx.hal()
            .state()
            .push_cqe(cqn, send_cqe(n, 13, 1 + 4 * round, WcStatus::Success));
        assert_eq!(poll_all(&cq).len(), 1, "round {round}");
    }
    // Events for the number reach B.
    ctx.hal().state().push_eqe(Eqe {
        word: EqeWord::new().with_event_type(EventType::QpFatal.raw()),
        obj: le32::from_ne(n),
        ..Eqe::default()
    });
    assert_eq!(ctx.poll_event().unwrap().event_type, EventType::QpFatal);
    assert_eq!(b.state(), QpState::Err);
    b.destroy().unwrap();
    assert!(ctx.shared.qps.read().is_empty());
}

/// Regression: a CQ number reused while the CQ that had it is being
/// destroyed keeps the new CQ's arm state.
#[test]
fn cq_number_reused_during_destroy_belongs_to_the_new_cq() {
    let ctx = open();
    let a = ctx.create_cq(8).unwrap();
    let n = a.cq_num();
    let (tx, rx) = mpsc::channel();
    let ctx2 = ctx.clone();
    *ctx.shared.after_destroy.lock() = Some(Box::new(move |op, id| {
        assert_eq!((op, id), (CmdOpcode::DestroyCq, n));
        ctx2.hal().state().knobs.next_number = Some(n);
        tx.send(ctx2.create_cq(8).unwrap()).unwrap();
    }));
    a.destroy().unwrap();
    let b = rx.recv().unwrap();
    assert_eq!(b.cq_num(), n);
    b.arm(false);
    ctx.hal().state().push_eqe(Eqe {
        word: EqeWord::new().with_event_type(EventType::Completion.raw()),
        obj: le32::from_ne(n),
        ..Eqe::default()
    });
    assert_eq!(ctx.poll_event().unwrap().obj, n);
    b.arm(false);
    let v = ctx.hal().state().doorbells.last().unwrap().1;
    assert_eq!(CqDoorbell::from_bits(v).sn(), 1, "B's arm state was kept");
}

/// Memory a failed command leaves with the device: freed when the device
/// refused the command, kept until the reset at shutdown when it may still
/// use it (a timed-out create, a failed destroy or deregistration), except
/// registered user memory, whose IOVAs are retired at once.
#[test]
fn memory_the_device_may_use_is_kept_until_the_reset() {
    let hal = FakeHal::new();
    let mut user = std::vec![0u8; 4096];
    let ptr = core::ptr::NonNull::new(user.as_mut_ptr()).unwrap();
    {
        let ctx = Context::open_with(hal.clone(), short()).unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(8).unwrap();
        let maps = || hal.state().maps.len();
        let fail = |status| hal.state().knobs.fail_next = Some((status, 0));
        let before = maps();

        fail(CmdStatus::NoResources);
        assert!(ctx.create_cq(8).is_err());
        fail(CmdStatus::NoResources);
        assert!(pd
            .create_qp(&QpInitAttr {
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                cap: cap(4, 4),
                qp_type: QpType::Rc,
                sq_sig_all: false,
            })
            .is_err());
        fail(CmdStatus::BadParam);
        assert!(pd.alloc_mr(64, 0).is_err());
        fail(CmdStatus::BadParam);
        // SAFETY: `user` outlives the context.
        assert!(unsafe { pd.reg_mr(ptr, user.len(), 0) }.is_err());
        assert_eq!(maps(), before, "refused: freed or unmapped at once");

        // SAFETY: `user` outlives the context.
        let umr = unsafe { pd.reg_mr(ptr, user.len(), 0) }.unwrap();
        let mr = pd.alloc_mr(64, 0).unwrap();
        let q = qp(&pd, &cq, cap(4, 4));
        let objects = maps();
        fail(CmdStatus::Internal);
        drop(umr);
        assert_eq!(maps(), objects - 1, "user memory retired at once");
        assert_eq!(hal.state().retired.len(), 1);
        fail(CmdStatus::Internal);
        drop(mr);
        fail(CmdStatus::Busy);
        drop(q);
        assert_eq!(maps(), objects - 1, "not released: the device may use them");
        let e = cq.destroy().unwrap_err();
        assert_eq!(e.error.kind(), ErrorKind::Busy, "the QP still exists");
        let cq = e.object.expect("handed back");

        hal.state().knobs.hang_commands = true;
        let e = ctx.create_cq(8).err().unwrap();
        assert_eq!(e.kind(), ErrorKind::TimedOut);
        assert!(!e.is_not_issued());
        assert_eq!(maps(), objects, "the device may yet create the CQ");
        drop((cq, pd));
        assert_eq!(maps(), objects);
    }
    assert!(
        hal.state().maps.is_empty(),
        "everything freed or unmapped after the reset"
    );
    drop(user);
}

/// Registered user memory the device may still reference (a deregistration
/// that failed or timed out, a registration that timed out) is cut off at
/// once by retiring its IOVAs, so its owner may free it; where the platform
/// cannot retire IOVAs it stays mapped until the reset at shutdown.
#[test]
fn user_memory_the_device_may_reference_is_retired() {
    let hal = FakeHal::new();
    let ctx = Context::open_with(hal.clone(), short()).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let maps = || hal.state().maps.len();
    let retired = || hal.state().retired.clone();
    let reg = |buf: &mut Vec<u8>| {
        let ptr = core::ptr::NonNull::new(buf.as_mut_ptr()).unwrap();
        // SAFETY: each buffer outlives its MR, or its IOVAs are retired
        // (checked) before it is freed.
        unsafe { pd.reg_mr(ptr, buf.len(), access::LOCAL_WRITE) }
    };
    let before = maps();

    // DEREG_MR refused when the MR is dropped.
    let mut buf = std::vec![0u8; 3000];
    let mr = reg(&mut buf).unwrap();
    let lkey = mr.lkey();
    hal.state().knobs.fail_next = Some((CmdStatus::Internal, 0));
    drop(mr);
    assert_eq!(maps(), before, "unmapped");
    assert_eq!(retired().len(), 1);
    assert_eq!(retired()[0].1, 3000);
    assert!(hal.state().mrs.contains_key(&lkey), "still registered");
    drop(buf);

    // DEREG_MR timed out on destroy: the MR is gone, its memory retired.
    let mut buf = std::vec![0u8; 100];
    let mr = reg(&mut buf).unwrap();
    hal.state().knobs.hang_commands = true;
    let e = mr.destroy().unwrap_err();
    assert!(e.object.is_none(), "the MR is gone");
    assert_eq!(e.error.kind(), ErrorKind::TimedOut);
    assert_eq!((maps(), retired().len()), (before, 2));
    drop(buf);

    // REG_MR timed out: the device may yet register the memory.
    let mut buf = std::vec![0u8; 100];
    assert_eq!(reg(&mut buf).err().unwrap().kind(), ErrorKind::TimedOut);
    assert_eq!((maps(), retired().len()), (before, 3));
    drop(buf);
    hal.state().resume_commands();
    let ops = hal.state().commands.clone();
    assert_eq!(ops[ops.len() - 2..], [CmdOpcode::DeregMr, CmdOpcode::RegMr]);

    // A platform that cannot retire IOVAs keeps the mapping until the
    // reset, and the caller's memory must live until then.
    hal.state().knobs.retire_unsupported = true;
    let mut kept = std::vec![0u8; 100];
    let mr = reg(&mut kept).unwrap();
    hal.state().knobs.fail_next = Some((CmdStatus::Internal, 0));
    drop(mr);
    assert_eq!((maps(), retired().len()), (before + 1, 3), "kept mapped");
    drop((pd, ctx));
    assert!(hal.state().maps.is_empty(), "unmapped after the reset");
    drop(kept);
}

/// A destroy whose outcome is unknown (the command timed out) gives the
/// object up: it is not handed back, and the driver never names its number
/// again, since the device may have given it to a new object. A destroy
/// the device refuses hands the object back.
#[test]
fn destroy_with_unknown_outcome_gives_the_object_up() {
    let hal = FakeHal::new();
    let ctx = Context::open_with(hal.clone(), short()).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let cqn = cq.cq_num();
    let maps = || hal.state().maps.len();
    let count = |op| hal.state().commands.iter().filter(|c| **c == op).count();
    let hang = || hal.state().knobs.hang_commands = true;
    let resume = || hal.state().resume_commands();

    // A QP with a completion still in the CQ.
    let a = qp(&pd, &cq, cap(4, 4));
    to_rts(&a);
    let n = a.qp_num();
    a.post_send(&[inline_send(1, 0)]).unwrap();
    hal.state()
        .push_cqe(cqn, send_cqe(n, 1, 1, WcStatus::Success));
    let objects = maps();
    hang();
    let e = a.destroy().unwrap_err();
    assert!(e.object.is_none(), "the QP is gone");
    assert_eq!(e.error.kind(), ErrorKind::TimedOut);
    assert!(e.to_string().contains("gone"), "{e}");
    assert_eq!(maps(), objects, "its queues are kept until the reset");
    assert!(poll_all(&cq).is_empty(), "its completions are removed");
    // The device executes the DESTROY_QP late, and gives the number to B.
    resume();
    hal.state().knobs.next_number = Some(n);
    let b = qp(&pd, &cq, cap(4, 4));
    assert_eq!(b.qp_num(), n);
    to_rts(&b);
    b.post_send(&[inline_send(2, 0)]).unwrap();
    hal.state()
        .push_cqe(cqn, send_cqe(n, 2, 1, WcStatus::Success));
    let wc = poll_all(&cq);
    assert_eq!((wc.len(), wc[0].wr_id), (1, 2), "B's completion reaches B");
    assert_eq!(count(CmdOpcode::DestroyQp), 1, "never sent again");
    assert!(hal.state().qps.contains_key(&n), "B lives");

    // The same for a CQ, an MR and a PD.
    let c = ctx.create_cq(8).unwrap();
    let m = c.cq_num();
    hang();
    assert!(c.destroy().unwrap_err().object.is_none());
    resume();
    hal.state().knobs.next_number = Some(m);
    let c2 = ctx.create_cq(8).unwrap();
    assert_eq!(c2.cq_num(), m);
    let mr = pd.alloc_mr(64, 0).unwrap();
    hang();
    assert!(mr.destroy().unwrap_err().object.is_none());
    resume();
    let pd2 = ctx.alloc_pd().unwrap();
    hang();
    assert!(pd2.destroy().unwrap_err().object.is_none());
    resume();
    let sent = [
        CmdOpcode::DestroyCq,
        CmdOpcode::DeregMr,
        CmdOpcode::DestroyPd,
    ]
    .map(count);
    assert_eq!(sent, [1, 1, 1]);
    assert!(hal.state().cqs.contains_key(&m), "the new CQ lives");

    // Refused: handed back, and destroyed later.
    hal.state().knobs.fail_next = Some((CmdStatus::Internal, 0));
    let e = b.destroy().unwrap_err();
    assert!(!e.to_string().contains("gone"), "{e}");
    let b = e.object.expect("handed back");
    b.destroy().unwrap();
    hal.state().knobs.fail_next = Some((CmdStatus::Internal, 0));
    let c2 = c2.destroy().unwrap_err().object.expect("handed back");
    c2.destroy().unwrap();
    assert_eq!(count(CmdOpcode::DestroyQp), 2);
    drop((cq, pd, ctx));
    assert!(hal.state().maps.is_empty(), "freed after the reset");
}

/// A command the driver could not issue (its command queue entry is still
/// the device's after a timeout) is known not to have run: a create frees
/// its memory at once, a destroy hands the object back.
#[test]
fn commands_not_issued_free_their_memory_at_once() {
    let hal = FakeHal::new();
    let config = Config {
        log_cmdq_size: 0,
        ..short()
    };
    let ctx = Context::open_with(hal.clone(), config).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8).unwrap();
    let q = qp(&pd, &cq, cap(4, 4));
    let mut user = std::vec![0u8; 256];
    let ptr = core::ptr::NonNull::new(user.as_mut_ptr()).unwrap();
    // SAFETY: `user` outlives the context.
    let umr = unsafe { pd.reg_mr(ptr, user.len(), 0) }.unwrap();
    let maps = || hal.state().maps.len();
    let before = maps();

    hal.state().knobs.hang_commands = true;
    let e = ctx.alloc_pd().err().unwrap();
    assert!(!e.is_not_issued(), "issued, and timed out");
    // The only command queue entry is the device's now.
    let not_issued = |e: crate::Error| {
        assert_eq!(e.kind(), ErrorKind::TimedOut);
        assert!(e.is_not_issued(), "{e}");
        assert!(e.to_string().contains("not issued"), "{e}");
    };
    not_issued(ctx.create_cq(8).err().unwrap());
    not_issued(pd.alloc_mr(64, 0).err().unwrap());
    // SAFETY: `user` outlives the context.
    not_issued(unsafe { pd.reg_mr(ptr, 64, 0) }.err().unwrap());
    not_issued(
        pd.create_qp(&QpInitAttr {
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            cap: cap(4, 4),
            qp_type: QpType::Rc,
            sq_sig_all: false,
        })
        .err()
        .unwrap(),
    );
    assert_eq!(maps(), before, "freed or unmapped at once");
    assert!(hal.state().retired.is_empty());
    let e = q.destroy().unwrap_err();
    not_issued(e.error.clone());
    let q = e.object.expect("handed back");
    let e = umr.destroy().unwrap_err();
    not_issued(e.error.clone());
    let umr = e.object.expect("handed back");
    assert_eq!(maps(), before);

    hal.state().resume_commands();
    q.destroy().unwrap();
    umr.destroy().unwrap();
    let st = hal.state();
    let creates = st.commands.iter().filter(|c| **c == CmdOpcode::CreateCq);
    assert_eq!(creates.count(), 1, "only the first CQ was created");
    assert!(st.qps.is_empty() && st.mrs.is_empty());
    drop(st);
    drop((cq, pd, ctx));
    drop(user);
}

/// A device that gives a new QP the number of a live QP (a device bug)
/// gets the create refused with EIO: the live QP keeps its completions.
#[test]
fn qp_number_in_use_is_refused() {
    let hal = FakeHal::new();
    let ctx = Context::open(hal.clone()).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let other = ctx.create_cq(16).unwrap();
    let a = qp(&pd, &cq, cap(4, 4));
    to_rts(&a);
    let n = a.qp_num();
    a.post_send(&[inline_send(1, 0)]).unwrap();
    hal.state()
        .push_cqe(cq.cq_num(), send_cqe(n, 1, 1, WcStatus::Success));
    let maps = hal.state().maps.len();
    for (send_cq, recv_cq) in [(&cq, &cq), (&other, &cq), (&cq, &other)] {
        hal.state().knobs.duplicate_number = Some(n);
        let e = pd
            .create_qp(&QpInitAttr {
                send_cq,
                recv_cq,
                srq: None,
                cap: cap(4, 4),
                qp_type: QpType::Rc,
                sq_sig_all: false,
            })
            .err()
            .unwrap();
        assert_eq!(e.kind(), ErrorKind::Io, "{e}");
        assert!(!other.inner.routes(n), "nothing left attached");
    }
    assert_eq!(
        hal.state().maps.len(),
        maps + 3,
        "the device may use the refused QPs' memory"
    );
    let wc = poll_all(&cq);
    assert_eq!((wc.len(), wc[0].qp_num), (1, n), "A's completion kept");
    assert!(ctx.shared.qps.read().get(&n).is_some());
    // A's queue accounting was untouched: it can fill its send queue.
    let four: Vec<_> = (0..4).map(|i| inline_send(i, 0)).collect();
    a.post_send(&four).unwrap();
}

/// A device that gives a new CQ the number of a live CQ (a device bug)
/// gets the create refused with EIO: the live CQ keeps its number.
#[test]
fn cq_number_in_use_is_refused() {
    let hal = FakeHal::new();
    let ctx = Context::open(hal.clone()).unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let n = cq.cq_num();
    let maps = hal.state().maps.len();
    hal.state().knobs.duplicate_number = Some(n);
    let e = ctx.create_cq(16).err().unwrap();
    assert_eq!(e.kind(), ErrorKind::Io, "{e}");
    assert!(e.to_string().contains("which a live CQ has"), "{e}");
    assert_eq!(
        hal.state().maps.len(),
        maps + 1,
        "the device may use the refused CQ's memory"
    );
    assert!(ctx.shared.cqs.read().get(&n).is_some());
    // The next CQ gets a number of its own.
    let other = ctx.create_cq(16).unwrap();
    assert_ne!(other.cq_num(), n);
}

#[test]
fn objects_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Context<FakeHal>>();
    check::<Pd<FakeHal>>();
    check::<crate::Mr<FakeHal>>();
    check::<Cq<FakeHal>>();
    check::<Qp<FakeHal>>();
    check::<crate::Error>();
}

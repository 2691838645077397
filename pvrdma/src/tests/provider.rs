//! PVRDMA as a provider, against the fake device: what the verbs core
//! checks before any command, what each verb asks of the device, the GID
//! the context binds, objects that outlive their users, and channels.

extern crate std;

use std::vec::Vec;

use rnic_pvrdma_regs::bar1;
use rnic_pvrdma_regs::cmd::{
    CmdHdr, CmdOpcode, CreateBind, CreateCq, CreateQp, DestroyBind, ModifyQp, PortAttr,
};
use rnic_verbs::provider::{
    CompletionChannel, CompletionQueue, MemoryRegion, ProtectionDomain, Provider, QpInit, QueuePair,
};
use rnic_verbs::{
    access, qp_attr, ErrorKind, GidType, Mtu, MwType, Payload, QpAttr, QpCap, QpState, QpType,
    RecvWr, SendOp, SendWr, Sge, SrqAttr,
};

use super::fake::{answer, Fake};
use super::objects::{listed_pages, read};
use crate::provider::Context;

fn opcode(req: &[u8]) -> u32 {
    read::<CmdHdr>(req).cmd.to_ne()
}

fn bytes<T: Copy>(v: &T) -> Vec<u8> {
    // SAFETY: `T` is a plain layout of the device's, read as bytes.
    unsafe { core::slice::from_raw_parts((v as *const T).cast::<u8>(), core::mem::size_of::<T>()) }
        .to_vec()
}

/// A device with one active port (MTU 1024 of 4096, six GIDs) that gives
/// handles 7, 8, 9 ... and grants what is asked.
fn device() -> Fake {
    let fake = Fake::new(bar1::VERSION_ROCEV1);
    fake.state().caps.node_guid = rnic_pvrdma_regs::le64::from_ne(0x0807_0605_0403_0201);
    fake.state().caps.phys_port_cnt = 1;
    fake.state().caps.max_qp_rd_atom = rnic_pvrdma_regs::le32::from_ne(4);
    fake.state().caps.max_qp_init_rd_atom = rnic_pvrdma_regs::le32::from_ne(4);
    fake.state().caps.max_srq = rnic_pvrdma_regs::le32::from_ne(16);
    let mut next = 7u32;
    fake.state().handler = std::boxed::Box::new(move |req| {
        let handle = next;
        next += 1;
        match opcode(req) {
            op if op == CmdOpcode::QueryPort.raw() => {
                let port = PortAttr {
                    state: 4.into(),
                    max_mtu: 5.into(),
                    active_mtu: 3.into(),
                    gid_tbl_len: 6.into(),
                    pkey_tbl_len: 1.into(),
                    max_msg_sz: (1 << 31).into(),
                    ..Default::default()
                };
                answer(req, 0, &bytes(&port))
            }
            op if op == CmdOpcode::CreateCq.raw() => {
                let mut body = handle.to_le_bytes().to_vec();
                body.extend(read::<CreateCq>(req).cqe.to_ne().to_le_bytes());
                answer(req, 0, &body)
            }
            op if op == CmdOpcode::CreateQp.raw() => {
                let q = read::<CreateQp>(req);
                let mut body = handle.to_le_bytes().to_vec();
                for cap in [q.max_send_wr, q.max_recv_wr, q.max_send_sge, q.max_recv_sge] {
                    body.extend(cap.to_ne().to_le_bytes());
                }
                answer(req, 0, &body)
            }
            _ => answer(req, 0, &handle.to_le_bytes()),
        }
    });
    fake
}

fn open(fake: &Fake) -> Context<Fake> {
    Context::open(fake.clone()).expect("open")
}

fn requests(fake: &Fake, op: CmdOpcode) -> Vec<Vec<u8>> {
    let st = fake.state();
    st.requests
        .iter()
        .filter(|r| opcode(r) == op.raw())
        .cloned()
        .collect()
}

const GID0: [u8; 16] = [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8];

#[test]
fn the_context_binds_gid_0_and_reports_what_the_device_carries() {
    let fake = device();
    let ctx = open(&fake);
    let bind = requests(&fake, CmdOpcode::CreateBind);
    assert_eq!(bind.len(), 1);
    let b: CreateBind = read(&bind[0]);
    assert_eq!((b.index.to_ne(), b.new_gid), (0, GID0));
    assert_eq!(ctx.query_gid(1, 0).unwrap(), GID0);
    assert_eq!(ctx.query_gid(1, 5).unwrap(), [0; 16], "an unbound entry");
    assert_eq!(
        ctx.query_gid_entry(1, 0).unwrap(),
        (GID0, GidType::RoceV1),
        "as bound"
    );
    assert_eq!(
        ctx.query_gid(1, 6).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    assert_eq!(
        ctx.query_port(2).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    let port = ctx.query_port(1).unwrap();
    assert_eq!(
        (port.max_mtu, port.active_mtu, port.gid_tbl_len),
        (Mtu::Mtu4096, Mtu::Mtu1024, 6)
    );
    let a = ctx.device_attr();
    assert_eq!(a.node_guid, [1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(
        (a.max_inline_data, a.atomic_cap, a.max_msg_sz),
        (0, 0, 1 << 31),
        "no inline data or atomics: QEMU's pvrdma cannot carry them"
    );
    assert_eq!(a.max_srq, 16, "SRQs as the device offers them");

    let pd = ctx.alloc_pd().unwrap();
    assert_eq!(
        pd.create_srq(&SrqAttr::default()).err().map(|e| e.kind()),
        Some(ErrorKind::InvalidArgument),
        "an SRQ of no WQEs"
    );
    assert_eq!(
        pd.alloc_mw(MwType::Type2).err().map(|e| e.kind()),
        Some(ErrorKind::NotSupported)
    );
    pd.destroy().unwrap();
    drop(ctx);
    let unbind = requests(&fake, CmdOpcode::DestroyBind);
    assert_eq!(unbind.len(), 1, "closing unbinds the GID");
    assert_eq!(read::<DestroyBind>(&unbind[0]).dest_gid, GID0);
    assert_eq!(requests(&fake, CmdOpcode::DestroyUc).len(), 1);
}

fn rc_init<'a>(cq: &'a crate::provider::Cq<Fake>, cap: QpCap) -> QpInit<'a, Context<Fake>> {
    QpInit {
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap,
        qp_type: QpType::Rc,
        sq_sig_all: false,
    }
}

/// What an RC QP's RESET -> INIT requires.
const INIT_MASK: u32 = qp_attr::STATE | qp_attr::PKEY_INDEX | qp_attr::PORT | qp_attr::ACCESS_FLAGS;

/// What an RC QP's INIT -> RTR requires.
const RTR_MASK: u32 = qp_attr::STATE
    | qp_attr::AV
    | qp_attr::PATH_MTU
    | qp_attr::DEST_QPN
    | qp_attr::RQ_PSN
    | qp_attr::MAX_DEST_RD_ATOMIC
    | qp_attr::MIN_RNR_TIMER;

const CAP: QpCap = QpCap {
    max_send_wr: 4,
    max_recv_wr: 4,
    max_send_sge: 1,
    max_recv_sge: 1,
    max_inline_data: 0,
};

#[test]
fn modify_is_checked_by_the_verbs_core_before_the_device_sees_it() {
    let fake = device();
    let ctx = open(&fake);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8, None, 0).unwrap();
    assert_eq!(
        pd.create_qp(&rc_init(
            &cq,
            QpCap {
                max_inline_data: 16,
                ..CAP
            }
        ))
        .err()
        .map(|e| e.kind()),
        Some(ErrorKind::InvalidArgument),
        "inline data"
    );
    let uc = QpInit {
        qp_type: QpType::Uc,
        ..rc_init(&cq, CAP)
    };
    assert_eq!(
        pd.create_qp(&uc).err().map(|e| e.kind()),
        Some(ErrorKind::NotSupported)
    );
    let qp = pd.create_qp(&rc_init(&cq, CAP)).unwrap();
    assert_eq!(qp.cap(), CAP);

    // RESET -> RTR skips INIT: refused with no command.
    let before = fake.state().requests.len();
    let rtr = QpAttr {
        qp_state: QpState::Rtr,
        ..QpAttr::default()
    };
    let e = qp.modify(&rtr, qp_attr::STATE).unwrap_err();
    assert!(e.message().contains("illegal"), "{e}");
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: access::REMOTE_WRITE,
        ..QpAttr::default()
    };
    let e = qp
        .modify(&init, qp_attr::STATE | qp_attr::PORT)
        .unwrap_err();
    assert!(e.message().contains("requires"), "{e}");
    assert_eq!(
        fake.state().requests.len(),
        before,
        "nothing reached the device"
    );

    let mask = INIT_MASK;
    qp.modify(&init, mask).unwrap();
    let m: ModifyQp = read(requests(&fake, CmdOpcode::ModifyQp).last().unwrap());
    assert_eq!(m.attr_mask.to_ne(), mask);
    assert_eq!(
        (
            m.attrs.qp_state.to_ne(),
            m.attrs.port_num,
            m.attrs.qp_access_flags.to_ne()
        ),
        (1, 1, access::REMOTE_WRITE)
    );

    let mut rtr = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: Some(Mtu::Mtu1024),
        dest_qp_num: 0x12,
        rq_psn: 0x345,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        ..QpAttr::default()
    };
    rtr.ah_attr.dgid = [9; 16];
    rtr.ah_attr.is_global = true;
    rtr.ah_attr.hop_limit = 1;
    rtr.ah_attr.sgid_index = 1;
    let mask = RTR_MASK;
    let before = fake.state().requests.len();
    let e = qp.modify(&rtr, mask).unwrap_err();
    assert!(e.message().contains("only GID 0"), "{e}");
    assert_eq!(
        fake.state().requests.len(),
        before,
        "an unbound GID never reaches QEMU"
    );
    rtr.ah_attr.sgid_index = 0;
    qp.modify(&rtr, mask).unwrap();
    let m: ModifyQp = read(requests(&fake, CmdOpcode::ModifyQp).last().unwrap());
    let av = m.attrs.ah_attr;
    assert_eq!(
        (
            av.grh.dgid,
            av.ah_flags,
            av.port_num,
            m.attrs.path_mtu.to_ne()
        ),
        ([9; 16], 1, 1, 3),
        "the AV's port 0 is the QP's"
    );
    assert_eq!(
        (m.attrs.dest_qp_num.to_ne(), m.attrs.rq_psn.to_ne()),
        (0x12, 0x345)
    );
    assert_eq!(m.attrs.sq_psn.to_ne(), 0, "outside the mask: zero");
    qp.destroy().unwrap();
}

#[test]
fn a_qp_takes_work_requests_only_in_the_states_that_allow_them() {
    let fake = device();
    let ctx = open(&fake);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8, None, 0).unwrap();
    let qp = pd.create_qp(&rc_init(&cq, CAP)).unwrap();
    let sge = [Sge {
        addr: 0x1000,
        length: 8,
        lkey: 1,
    }];
    let recv = RecvWr {
        wr_id: 1,
        sg_list: &sge,
    };
    let send = SendWr {
        wr_id: 2,
        op: SendOp::Send,
        flags: 0,
        payload: Payload::Sgl(&sge),
    };
    let e = qp.post_recv(&[recv]).unwrap_err();
    assert_eq!((e.index, e.error.kind()), (0, ErrorKind::InvalidArgument));
    assert!(e.error.message().contains("state Reset"), "{}", e.error);
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        ..QpAttr::default()
    };
    qp.modify(&init, INIT_MASK).unwrap();
    let e = qp.post_send(&[send]).unwrap_err();
    assert_eq!((e.index, e.error.kind()), (0, ErrorKind::InvalidArgument));
    assert!(e.error.message().contains("state Init"), "{}", e.error);
    assert!(
        fake.state().uar_writes.is_empty(),
        "no doorbell for what was refused"
    );
    qp.post_recv(&[recv]).expect("a receive in INIT");
    assert_eq!(
        fake.state().uar_writes.len(),
        1,
        "the receive's doorbell, and nothing else"
    );
    qp.destroy().unwrap();
}

#[test]
fn objects_in_use_are_not_destroyed_and_are_handed_back() {
    let fake = device();
    let ctx = open(&fake);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8, None, 0).unwrap();
    let qp = pd.create_qp(&rc_init(&cq, CAP)).unwrap();
    let mut buf = std::vec![0u8; 8192];
    let page = (buf.as_ptr() as usize).next_multiple_of(4096) - buf.as_ptr() as usize;
    let ptr = core::ptr::NonNull::new(buf[page..].as_mut_ptr()).unwrap();
    // SAFETY: `buf` outlives the MR, deregistered below.
    let mr = unsafe { pd.reg_mr(ptr, 4096, access::LOCAL_WRITE) }.unwrap();

    let e = pd.destroy().unwrap_err();
    assert_eq!(e.error.kind(), ErrorKind::Busy);
    let pd = e.object.expect("handed back");
    let e = cq.destroy().unwrap_err();
    assert_eq!(e.error.kind(), ErrorKind::Busy);
    let cq = e.object.expect("handed back");
    assert!(requests(&fake, CmdOpcode::DestroyPd).is_empty());
    assert!(requests(&fake, CmdOpcode::DestroyCq).is_empty());

    qp.destroy().unwrap();
    mr.destroy().unwrap();
    cq.destroy().unwrap();
    pd.destroy().unwrap();
    assert_eq!(requests(&fake, CmdOpcode::DestroyQp).len(), 1);
    assert_eq!(requests(&fake, CmdOpcode::DestroyMr).len(), 1);
    assert_eq!(requests(&fake, CmdOpcode::DestroyCq).len(), 1);
    assert_eq!(requests(&fake, CmdOpcode::DestroyPd).len(), 1);
    drop(buf);
}

#[test]
fn a_dropped_qp_is_destroyed_before_its_cq() {
    let fake = device();
    let ctx = open(&fake);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8, None, 0).unwrap();
    let qp = pd.create_qp(&rc_init(&cq, CAP)).unwrap();
    drop(cq);
    drop(pd);
    assert!(
        requests(&fake, CmdOpcode::DestroyCq).is_empty(),
        "the QP holds its CQ"
    );
    drop(qp);
    let order: Vec<u32> = fake
        .state()
        .requests
        .iter()
        .map(|r| opcode(r))
        .filter(|&op| {
            op == CmdOpcode::DestroyQp.raw()
                || op == CmdOpcode::DestroyCq.raw()
                || op == CmdOpcode::DestroyPd.raw()
        })
        .collect();
    assert_eq!(
        order,
        [
            CmdOpcode::DestroyQp.raw(),
            CmdOpcode::DestroyPd.raw(),
            CmdOpcode::DestroyCq.raw()
        ]
    );
}

#[test]
fn each_channel_gets_the_notifications_of_its_own_cqs() {
    let fake = device();
    let ctx = open(&fake);
    let (ch1, ch2) = (
        ctx.create_comp_channel().unwrap(),
        ctx.create_comp_channel().unwrap(),
    );
    assert_eq!(
        ctx.create_cq(8, Some(&ch1), 1).err().map(|e| e.kind()),
        Some(ErrorKind::InvalidArgument)
    );
    let a = ctx.create_cq(8, Some(&ch1), 0).unwrap();
    let b = ctx.create_cq(8, Some(&ch2), 0).unwrap();

    // B's notification arrives while channel 1 waits: it is kept for 2.
    a.arm(false);
    b.arm(false);
    fake.state().notify_cq = Some(b.cq_num());
    assert_eq!(ch1.get_cq_event(5_000_000_000).unwrap(), None);
    assert_eq!(ch2.get_cq_event(5_000_000_000).unwrap(), Some(b.cq_num()));
    fake.state().notify_cq = Some(a.cq_num());
    assert_eq!(ch1.get_cq_event(5_000_000_000).unwrap(), Some(a.cq_num()));

    let e = ch1.destroy().unwrap_err();
    assert_eq!(e.error.kind(), ErrorKind::Busy, "a CQ is on it");
    let ch1 = e.object.unwrap();
    a.destroy().unwrap();
    ch1.destroy().unwrap();
    drop((b, ch2));
}

#[test]
fn async_events_name_qps_by_number_and_unknown_ones_are_dropped() {
    use rnic_pvrdma_regs::cqe::EventType as Pv;
    use rnic_verbs::{AsyncEvent, EventType};
    let fake = device();
    let ctx = open(&fake);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8, None, 0).unwrap();
    let qp = pd.create_qp(&rc_init(&cq, CAP)).unwrap();
    let dsr = fake.state().dsr.unwrap();
    let ring = super::ring_of(&fake, dsr.async_ring_pages);
    // A QP event of a handle the device never gave, one of an unknown
    // type, then ours and a port's.
    let qp_handle = qp.qp_num(); // version 17: the handle is the number
    super::produce(
        &fake,
        ring,
        &[
            [Pv::QpFatal.raw(), 0x999],
            [77, 1],
            [Pv::CommEst.raw(), qp_handle],
            [Pv::PortActive.raw(), 1],
        ],
    );
    assert_eq!(
        ctx.poll_event().unwrap(),
        Some(AsyncEvent {
            event_type: EventType::CommEst,
            obj: qp.qp_num()
        })
    );
    assert_eq!(
        ctx.poll_event().unwrap(),
        Some(AsyncEvent {
            event_type: EventType::PortActive,
            obj: 1
        })
    );
    assert_eq!(ctx.poll_event().unwrap(), None);
    assert_eq!(
        ctx.wait_event(3_000_000_000).unwrap(),
        None,
        "the fake's clock runs out"
    );
    qp.destroy().unwrap();
}

#[test]
fn without_read_resources_a_qp_takes_rd_atomic_counts_as_0() {
    let fake = device();
    fake.state().caps.max_qp_rd_atom = rnic_pvrdma_regs::le32::from_ne(0);
    fake.state().caps.max_qp_init_rd_atom = rnic_pvrdma_regs::le32::from_ne(0);
    let ctx = open(&fake);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8, None, 0).unwrap();
    let qp = pd.create_qp(&rc_init(&cq, CAP)).unwrap();
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        ..QpAttr::default()
    };
    let mask = INIT_MASK;
    qp.modify(&init, mask).unwrap();
    let mut rtr = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: Some(Mtu::Mtu1024),
        max_dest_rd_atomic: 1,
        ..QpAttr::default()
    };
    rtr.ah_attr.is_global = true;
    let mask = RTR_MASK;
    qp.modify(&rtr, mask)
        .expect("ibv_rc_pingpong's RTR, asking for 1");
    let m: ModifyQp = read(requests(&fake, CmdOpcode::ModifyQp).last().unwrap());
    assert_eq!(m.attrs.max_dest_rd_atomic, 0);
    qp.destroy().unwrap();
}

#[test]
fn an_srq_feeds_the_qps_made_on_it() {
    use rnic_pvrdma_regs::cmd::{CreateSrq, ModifySrq};
    use rnic_pvrdma_regs::uar::{SRQ_DB, SRQ_RECV};
    use rnic_pvrdma_regs::wqe::RqWqeHdr;
    use rnic_verbs::provider::SharedReceiveQueue;
    use rnic_verbs::{srq_mask, RecvWr, Sge};

    let fake = device();
    let ctx = open(&fake);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8, None, 0).unwrap();
    let srq = pd
        .create_srq(&SrqAttr {
            max_wr: 5,
            max_sge: 2,
            srq_limit: 0,
        })
        .unwrap();
    let req: CreateSrq = read(requests(&fake, CmdOpcode::CreateSrq).last().unwrap());
    assert_eq!(
        (
            req.attrs.max_wr.to_ne(),
            req.attrs.max_sge.to_ne(),
            req.nchunks.to_ne()
        ),
        (8, 2, 2),
        "8 WQEs of 64 B: the state page and one page of WQEs"
    );
    let pages = listed_pages(&fake, req.pdir_dma.to_ne(), 2);
    let (state, wqes) = (pages[0], pages[1]);

    let qp = pd
        .create_qp(&QpInit {
            srq: Some(&srq),
            ..rc_init(&cq, CAP)
        })
        .unwrap();
    let q: CreateQp = read(requests(&fake, CmdOpcode::CreateQp).last().unwrap());
    assert_eq!(
        (q.is_srq, q.srq_handle.to_ne(), q.max_recv_wr.to_ne()),
        (1, srq.srq_num(), 0),
        "the QP takes its receives from the SRQ and has no receive queue"
    );
    assert_eq!(q.total_chunks.to_ne(), q.send_chunks.to_ne() + 1);
    let e = qp
        .post_recv(&[RecvWr {
            wr_id: 1,
            sg_list: &[],
        }])
        .unwrap_err();
    assert_eq!(e.error.kind(), ErrorKind::InvalidArgument, "{}", e.error);

    let sge = [Sge {
        addr: 0x5000,
        length: 64,
        lkey: 3,
    }];
    fake.state().uar_writes.clear();
    srq.post_recv(&[
        RecvWr {
            wr_id: 7,
            sg_list: &sge,
        },
        RecvWr {
            wr_id: 8,
            sg_list: &sge,
        },
    ])
    .unwrap();
    let hdr: RqWqeHdr = read(fake.state().dma(wqes + 64, 16).unwrap());
    assert_eq!(
        (hdr.wr_id.to_ne(), hdr.num_sge.to_ne()),
        (8, 1),
        "the second WQE"
    );
    let tail = u32::from_le_bytes(
        fake.state()
            .dma(state + rnic_pvrdma_regs::ring::RX_PROD_TAIL as u64, 4)
            .unwrap()
            .try_into()
            .unwrap(),
    );
    assert_eq!(tail, 2);
    assert_eq!(
        fake.state().uar_writes,
        [(SRQ_DB, srq.srq_num() | SRQ_RECV)],
        "one SRQ doorbell for the post"
    );
    let e = srq
        .post_recv(&[RecvWr {
            wr_id: 9,
            sg_list: &[sge[0]; 3],
        }])
        .unwrap_err();
    assert_eq!(e.error.kind(), ErrorKind::InvalidArgument, "3 SGEs of 2");

    let grow = SrqAttr {
        max_wr: 16,
        ..srq.attr()
    };
    assert_eq!(
        srq.modify(&grow, srq_mask::MAX_WR).unwrap_err().kind(),
        ErrorKind::NotSupported
    );
    let limit = SrqAttr {
        srq_limit: 2,
        ..srq.attr()
    };
    srq.modify(&limit, srq_mask::LIMIT).unwrap();
    let m: ModifySrq = read(requests(&fake, CmdOpcode::ModifySrq).last().unwrap());
    assert_eq!(
        (m.attr_mask.to_ne(), m.attrs.srq_limit.to_ne()),
        (srq_mask::LIMIT, 2)
    );
    assert_eq!(srq.attr().srq_limit, 2);

    let e = srq.destroy().unwrap_err();
    assert_eq!(e.error.kind(), ErrorKind::Busy, "its QP");
    let srq = e.object.unwrap();
    qp.destroy().unwrap();
    srq.destroy().unwrap();
    assert_eq!(requests(&fake, CmdOpcode::DestroySrq).len(), 1);
}

#[test]
fn a_channel_gives_one_event_per_arm_and_drops_the_rest() {
    let fake = device();
    let ctx = open(&fake);
    let ch = ctx.create_comp_channel().unwrap();
    let cq = ctx.create_cq(8, Some(&ch), 0).unwrap();
    let n = cq.cq_num();
    let wait = || ch.get_cq_event(3_000_000_000).unwrap();

    // QEMU's pvrdma notifies every completion: one of a CQ nobody armed
    // is not an event (and is taken off the ring).
    fake.state().notify_cq = Some(n);
    assert_eq!(wait(), None, "not armed");
    // Completions before the arm are taken by it, not given as its event.
    assert!(fake.state().notify(n) && fake.state().notify(n));
    cq.arm(false);
    assert_eq!(wait(), None, "the two before the arm");
    fake.state().notify_cq = Some(n);
    assert_eq!(wait(), Some(n), "the one after the arm");
    fake.state().notify_cq = Some(n);
    assert_eq!(wait(), None, "one event per arm");
    cq.arm(true);
    fake.state().notify_cq = Some(n);
    assert_eq!(wait(), Some(n), "armed again");
    drop(cq);
    drop(ch);
}

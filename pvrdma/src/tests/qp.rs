//! QPs against the fake device: CREATE_QP as the device sees it, and
//! posting, including what is refused before the device sees it.

extern crate std;

use std::string::ToString;
use std::vec::Vec;

use rnic_pvrdma_regs::bar1;
use rnic_pvrdma_regs::cmd::{CmdOpcode, CreateQp, QpType};
use rnic_pvrdma_regs::ring::{RX_PROD_TAIL, TX_PROD_TAIL};
use rnic_pvrdma_regs::uar::{QP_DB, QP_RECV, QP_SEND};
use rnic_pvrdma_regs::wqe::{
    self, RqWqeHdr, SqWqeCtrl, UdWr, WrOpcode, SQ_WQE_HDR_SIZE, SQ_WQE_WR_OFFSET,
};
use rnic_pvrdma_regs::PAGE_SIZE;
use rnic_verbs::ErrorKind;
use rnic_verbs::{
    send_flags, wc_flags, AhAttr, Payload, RecvWr, RemoteAddr, SendOp, SendWr, Sge, UdDest,
    WcOpcode, WcStatus,
};

use super::fake::Fake;
use super::objects::{handing_out, listed_pages, read};
use super::{open, u64_at};
use crate::{Cq, Device, Qp, QpInit};

struct Setup {
    fake: Fake,
    dev: Device<Fake>,
    cq: Option<Cq>,
    qp: Option<Qp>,
    /// The QP's state page and first entry page, as the device sees them.
    state: u64,
    entries: u64,
}

fn setup(send_wr: u32, qp_type: QpType) -> Setup {
    let fake = Fake::new(bar1::VERSION_ROCEV1);
    let dev = open(&fake);
    handing_out(&fake, None);
    let uc = dev.create_uc().unwrap();
    let pd = dev.create_pd(&uc).unwrap();
    let cq = dev.create_cq(&uc, 64).unwrap();
    let init = QpInit {
        qp_type,
        send_cq: &cq,
        recv_cq: &cq,
        srq: None,
        max_send_wr: send_wr,
        max_recv_wr: 100,
        max_send_sge: 2,
        max_recv_sge: 1,
        sq_sig_all: false,
    };
    let qp = dev.create_qp(&uc, &pd, &init).unwrap();
    let req: CreateQp = read(fake.state().requests.last().unwrap());
    let pages = listed_pages(&fake, req.pdir_dma.to_ne(), 2);
    Setup {
        fake,
        dev,
        cq: Some(cq),
        qp: Some(qp),
        state: pages[0],
        entries: pages[1],
    }
}

fn word(fake: &Fake, iova: u64) -> u32 {
    u64_at(fake, iova) as u32
}

#[test]
fn a_qp_lists_its_state_send_and_receive_pages_as_the_device_expects() {
    let mut s = setup(100, QpType::Rc);
    let req: CreateQp = read(s.fake.state().requests.last().unwrap());
    let qp = s.qp.take().unwrap();
    assert_eq!(
        (qp.handle(), qp.qpn()),
        (10, 10),
        "version 17: the number is the handle"
    );
    assert_eq!((qp.send_capacity(), qp.recv_capacity()), (128, 128));
    // Send WQEs: 80 + 2 × 16 → 128 B, 128 of them: 4 pages. Receive WQEs:
    // 16 + 16 → 32 B, 128 of them: 1 page.
    assert_eq!(
        (req.total_chunks.to_ne(), req.send_chunks.to_ne()),
        (6, 4),
        "the state page, four send pages, one receive page"
    );
    assert_eq!(
        (
            req.qp_type,
            req.max_send_wr.to_ne(),
            req.max_recv_sge.to_ne()
        ),
        (2, 128, 1)
    );
    assert_eq!(req.send_cq_handle.to_ne(), s.cq.as_ref().unwrap().handle());
    let pages = listed_pages(&s.fake, req.pdir_dma.to_ne(), 7);
    assert_eq!(
        pages[5],
        pages[1] + 4 * PAGE_SIZE as u64,
        "receive pages after the send's"
    );
    assert_eq!(pages[6], 0);
    let before = s.fake.state().allocated();
    s.dev.destroy_qp(qp).unwrap();
    assert_eq!(
        s.fake.state().allocated(),
        before - 4,
        "directory, table, state, entries"
    );
}

#[test]
fn sends_and_receives_are_written_at_the_tail_and_the_doorbell_rung_once() {
    let mut s = setup(4, QpType::Rc);
    let mut qp = s.qp.take().unwrap();
    let sges = [
        Sge {
            addr: 0x1000,
            length: 64,
            lkey: 5,
        },
        Sge {
            addr: 0x2000,
            length: 32,
            lkey: 5,
        },
    ];
    let wr = |id| SendWr {
        wr_id: id,
        op: SendOp::Send,
        flags: send_flags::SIGNALED,
        payload: Payload::Sgl(&sges),
    };
    // Whatever the slot held before: an RC WQE's `wr` union must read 0
    // (QEMU resolves `wr.ud.av.gid_index` for every WQE).
    s.fake.state().dma(s.entries, 128).unwrap().fill(0xff);
    s.dev.post_send(&mut qp, &[wr(1), wr(2)]).unwrap();
    assert_eq!(
        s.fake.state().dma(s.entries + 32, 48).unwrap(),
        [0; 48],
        "the wr union of an RC send, cleared"
    );
    assert_eq!(word(&s.fake, s.state + TX_PROD_TAIL as u64), 2);
    let stride = 128u64;
    let ctrl: SqWqeCtrl = read(s.fake.state().dma(s.entries + stride, 32).unwrap());
    assert_eq!(
        (
            ctrl.wr_id.to_ne(),
            ctrl.num_sge.to_ne(),
            ctrl.opcode.to_ne()
        ),
        (2, 2, WrOpcode::Send.raw())
    );
    let sge: wqe::Sge = read(
        s.fake
            .state()
            .dma(s.entries + stride + SQ_WQE_HDR_SIZE as u64 + 16, 16)
            .unwrap(),
    );
    assert_eq!((sge.addr.to_ne(), sge.length.to_ne()), (0x2000, 32));

    s.dev
        .post_recv(
            &mut qp,
            &[RecvWr {
                wr_id: 9,
                sg_list: &sges[..1],
            }],
        )
        .unwrap();
    // The receive queue starts after the send queue's page (4 × 128 B).
    let hdr: RqWqeHdr = read(
        s.fake
            .state()
            .dma(s.entries + PAGE_SIZE as u64, 16)
            .unwrap(),
    );
    assert_eq!((hdr.wr_id.to_ne(), hdr.num_sge.to_ne()), (9, 1));
    assert_eq!(word(&s.fake, s.state + RX_PROD_TAIL as u64), 1);
    let db: Vec<(usize, u32)> = s.fake.state().uar_writes.clone();
    assert_eq!(
        db,
        [
            (QP_DB, qp.handle() | QP_SEND),
            (QP_DB, qp.handle() | QP_RECV)
        ],
        "one doorbell per post, on the context's UAR page"
    );

    // Two more fill the four-entry queue; a fifth is refused with ENOMEM
    // and the two before it stay posted.
    let err = s
        .dev
        .post_send(&mut qp, &[wr(3), wr(4), wr(5)])
        .unwrap_err();
    assert_eq!(
        (err.index, err.error.kind()),
        (2, ErrorKind::NoMemory),
        "{}",
        err.error
    );
    assert_eq!(word(&s.fake, s.state + TX_PROD_TAIL as u64), 4);
}

#[test]
fn what_the_device_cannot_carry_is_refused_and_nothing_posted() {
    let mut s = setup(4, QpType::Rc);
    let mut qp = s.qp.take().unwrap();
    let sge = [Sge::default(); 3];
    let remote = RemoteAddr { addr: 0, rkey: 1 };
    let sgl = |n| Payload::Sgl(&sge[..n]);
    let cases = [
        (
            SendOp::RdmaWrite { remote },
            0,
            sgl(1),
            ErrorKind::NotSupported,
            "only SEND",
        ),
        (
            SendOp::RdmaRead { remote },
            0,
            sgl(1),
            ErrorKind::NotSupported,
            "only SEND",
        ),
        (
            SendOp::AtomicFetchAndAdd { remote, add: 1 },
            0,
            sgl(1),
            ErrorKind::NotSupported,
            "only SEND",
        ),
        (
            SendOp::SendWithImm { imm: [1; 4] },
            0,
            sgl(1),
            ErrorKind::NotSupported,
            "only SEND",
        ),
        (
            SendOp::Send,
            0,
            Payload::Inline(b"hi"),
            ErrorKind::NotSupported,
            "inline",
        ),
        (
            SendOp::Send,
            1 << 9,
            sgl(1),
            ErrorKind::InvalidArgument,
            "flags",
        ),
        (SendOp::Send, 0, sgl(3), ErrorKind::InvalidArgument, "SGEs"),
    ];
    for (op, flags, payload, kind, why) in cases {
        let wr = SendWr {
            wr_id: 1,
            op,
            flags,
            payload,
        };
        let err = s.dev.post_send(&mut qp, &[wr]).unwrap_err();
        assert_eq!(
            (err.index, err.error.kind()),
            (0, kind),
            "{op:?}: {}",
            err.error
        );
        assert!(err.error.to_string().contains(why), "{}", err.error);
    }
    let dest = UdDest::new(1, AhAttr::default(), 2, 3);
    let wr = SendWr {
        wr_id: 1,
        op: SendOp::UdSend { dest, imm: None },
        flags: 0,
        payload: sgl(0),
    };
    let err = s.dev.post_send(&mut qp, &[wr]).unwrap_err();
    assert_eq!(
        err.error.kind(),
        ErrorKind::InvalidArgument,
        "{}",
        err.error
    );
    assert_eq!(
        word(&s.fake, s.state + TX_PROD_TAIL as u64),
        0,
        "nothing posted"
    );
    assert!(s.fake.state().uar_writes.is_empty(), "no doorbell");
    let _ = s.dev.destroy_qp(qp);

    // A UD QP's send needs its destination.
    let mut s = setup(4, QpType::Ud);
    let mut qp = s.qp.take().unwrap();
    let wr = SendWr {
        wr_id: 1,
        op: SendOp::Send,
        flags: 0,
        payload: Payload::Sgl(&[]),
    };
    let err = s.dev.post_send(&mut qp, &[wr]).unwrap_err();
    assert!(
        err.error.to_string().contains("destination"),
        "{}",
        err.error
    );
    let imm = SendWr {
        op: SendOp::UdSend {
            dest: UdDest::new(1, AhAttr::default(), 2, 3),
            imm: Some([0; 4]),
        },
        ..wr
    };
    let err = s.dev.post_send(&mut qp, &[imm]).unwrap_err();
    assert_eq!(err.error.kind(), ErrorKind::NotSupported, "{}", err.error);

    // A UD send carries its address handle's path in the wr union.
    let ah = AhAttr {
        dgid: [7; 16],
        flow_label: 0x12345,
        sgid_index: 0,
        hop_limit: 64,
        traffic_class: 0x2a,
        sl: 3,
        dmac: [2, 0, 0, 0, 0, 9],
        port_num: 1,
        is_global: true,
    };
    let ud = SendWr {
        op: SendOp::UdSend {
            dest: UdDest::new(0x42, ah, 0x0abcde, 0x1111),
            imm: None,
        },
        ..wr
    };
    s.dev.post_send(&mut qp, &[ud]).unwrap();
    let got: UdWr = read(
        s.fake
            .state()
            .dma(s.entries + SQ_WQE_WR_OFFSET as u64, 48)
            .unwrap(),
    );
    assert_eq!(
        (got.remote_qpn.to_ne(), got.remote_qkey.to_ne()),
        (0x0abcde, 0x1111)
    );
    assert_eq!(got.av.port_pd.to_ne(), 1 << 24 | 0x42);
    assert_eq!(
        got.av.sl_tclass_flowlabel.to_ne(),
        3 << 28 | 0x2a << 20 | 0x12345
    );
    assert_eq!(
        (got.av.dgid, got.av.hop_limit, got.av.dmac),
        (ah.dgid, 64, ah.dmac)
    );
    let _ = s.dev.destroy_qp(qp);
}

#[test]
fn a_qp_the_device_grants_less_is_destroyed_again() {
    let fake = Fake::new(bar1::VERSION_ROCEV1);
    let dev = open(&fake);
    handing_out(&fake, None);
    let uc = dev.create_uc().unwrap();
    let pd = dev.create_pd(&uc).unwrap();
    let cq = dev.create_cq(&uc, 64).unwrap();
    let before = fake.state().allocated();
    // Grants every capacity as 0 (the plain handle answer).
    fake.state().handler = std::boxed::Box::new(|req| super::fake::answer(req, 0, &[3]));
    let init = QpInit {
        qp_type: QpType::Rc,
        send_cq: &cq,
        recv_cq: &cq,
        srq: None,
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
        sq_sig_all: false,
    };
    let err = dev.create_qp(&uc, &pd, &init).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Io, "{err}");
    let last: CreateQp = read(fake.state().requests.last().unwrap());
    assert_eq!(
        last.hdr.cmd.to_ne(),
        CmdOpcode::DestroyQp.raw(),
        "destroyed again"
    );
    assert_eq!(fake.state().allocated(), before, "and its pages freed");
    let bad = QpInit {
        qp_type: QpType::Uc,
        ..init
    };
    assert_eq!(
        dev.create_qp(&uc, &pd, &bad).unwrap_err().kind(),
        ErrorKind::NotSupported
    );
    let bad = QpInit {
        max_send_sge: crate::MAX_SGE + 1,
        ..init
    };
    assert_eq!(
        dev.create_qp(&uc, &pd, &bad).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
}

#[test]
fn a_completion_is_taken_only_for_a_qp_the_device_holds() {
    let mut s = setup(4, QpType::Rc);
    let qp = s.qp.take().unwrap();
    let cq = s.cq.take().unwrap();
    let req: rnic_pvrdma_regs::cmd::CreateCq = read(&s.fake.state().requests[2]);
    assert_eq!(req.hdr.cmd.to_ne(), CmdOpcode::CreateCq.raw());
    let pages = listed_pages(&s.fake, req.pdir_dma.to_ne(), 2);
    let (state, cqes) = (pages[0], pages[1]);
    // Three CQEs: ours, one naming QP 77, ours again.
    {
        let mut st = s.fake.state();
        for (i, (wr_id, qpn)) in [
            (1u64, u64::from(qp.handle())),
            (2, 77),
            (3, u64::from(qp.handle())),
        ]
        .into_iter()
        .enumerate()
        {
            let at = cqes + i as u64 * 64;
            st.dma(at, 8).unwrap().copy_from_slice(&wr_id.to_le_bytes());
            st.dma(at + 8, 8)
                .unwrap()
                .copy_from_slice(&qpn.to_le_bytes());
        }
        st.dma(state + RX_PROD_TAIL as u64, 4)
            .unwrap()
            .copy_from_slice(&3u32.to_le_bytes());
    }
    let qpn = qp.qpn();
    assert_eq!(
        s.dev.poll_cq(&cq).unwrap().map(|c| (c.wr_id, c.qp_num)),
        Some((1, qpn)),
        "a CQE names its QP by handle, a completion by number"
    );
    let err = s.dev.poll_cq(&cq).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Io, "{err}");
    assert!(err.to_string().contains("names QP 0x4d"), "{err}");
    assert_eq!(
        s.dev.poll_cq(&cq).unwrap().map(|c| c.wr_id),
        Some(3),
        "the bad CQE is consumed and polling goes on"
    );
    // Once the QP is destroyed, its late completions name no QP of ours.
    let handle = u64::from(qp.handle());
    s.dev.destroy_qp(qp).unwrap();
    {
        let mut st = s.fake.state();
        st.dma(cqes + 3 * 64 + 8, 8)
            .unwrap()
            .copy_from_slice(&handle.to_le_bytes());
        st.dma(state + RX_PROD_TAIL as u64, 4)
            .unwrap()
            .copy_from_slice(&4u32.to_le_bytes());
    }
    assert_eq!(s.dev.poll_cq(&cq).unwrap_err().kind(), ErrorKind::Io);
}

#[test]
fn cqes_become_verbs_completions() {
    let mut s = setup(4, QpType::Rc);
    let qp = s.qp.take().unwrap();
    let cq = s.cq.take().unwrap();
    let req: rnic_pvrdma_regs::cmd::CreateCq = read(&s.fake.state().requests[2]);
    let pages = listed_pages(&s.fake, req.pdir_dma.to_ne(), 2);
    let (state, cqes) = (pages[0], pages[1]);
    // (opcode, status, wc_flags) as PVRDMA writes them.
    let written = [
        (7u32, 0u32, 1u32 << 2), // LOCAL_INV, WITH_INVALIDATE
        (128, 0, 1 << 1 | 1),    // RECV, WITH_IMM | GRH
        (6, 0, 0),               // LSO: no verbs opcode
        (0, 99, 0),              // a status libibverbs does not have
    ];
    {
        let mut st = s.fake.state();
        for (i, (opcode, status, flags)) in written.into_iter().enumerate() {
            let at = cqes + i as u64 * 64;
            st.dma(at + 8, 8)
                .unwrap()
                .copy_from_slice(&u64::from(qp.handle()).to_le_bytes());
            st.dma(at + 16, 4)
                .unwrap()
                .copy_from_slice(&opcode.to_le_bytes());
            st.dma(at + 20, 4)
                .unwrap()
                .copy_from_slice(&status.to_le_bytes());
            st.dma(at + 28, 4).unwrap().copy_from_slice(&[1, 2, 3, 4]);
            st.dma(at + 36, 4)
                .unwrap()
                .copy_from_slice(&flags.to_le_bytes());
        }
        st.dma(state + RX_PROD_TAIL as u64, 4)
            .unwrap()
            .copy_from_slice(&4u32.to_le_bytes());
    }
    let poll = || s.dev.poll_cq(&cq).unwrap().unwrap();
    let w = poll();
    assert_eq!(
        (w.opcode, w.status, w.flags),
        (WcOpcode::LocalInv, WcStatus::Success, wc_flags::WITH_INV)
    );
    let w = poll();
    assert_eq!(
        (w.opcode, w.flags, w.imm_data),
        (
            WcOpcode::Recv,
            wc_flags::WITH_IMM | wc_flags::GRH,
            Some([1, 2, 3, 4])
        )
    );
    assert_eq!(
        poll().status,
        WcStatus::GeneralErr,
        "an opcode without a verbs name"
    );
    assert_eq!(poll().status, WcStatus::GeneralErr, "an unknown status");
    let _ = s.dev.destroy_qp(qp);
}

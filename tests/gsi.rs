//! The general services QP, QP1 (device spec 13.8.1): one per port at QPN
//! 1, a UD QP whose Q_Key is the well-known `GSI_QKEY`, carrying the
//! management datagrams the communication manager speaks; MADs between
//! two NICs on the in-memory switch, with the device's MAD counters and
//! every way a MAD is dropped.

use std::time::Duration;

use rnic_emu::pcap;
use rnic_emu::wire::frame::{classify, Received};
use rnic_emu::wire::opcode;
use rnic_hw_regs::cmd::{ModifyQpIn, QpAttrs};
use rnic_tests::fabric::{Fabric, Nic};
use rnic_tests::*;
use rnic_verbs::GSI_QKEY;

/// A MAD: the common header and a 232-byte payload (IBA 13.4.2).
const MAD: usize = 256;
const BUF: usize = GRH_LEN + MAD;
const RECVS: usize = 4;

/// A QP of `ty` (GSI or UD) in RTS with Q_Key `qkey`, and buffers.
struct Q {
    pd: EPd,
    cq: ECq,
    qp: EQp,
    mr: EMr,
}

fn create(pd: &EPd, cq: &ECq, ty: QpType) -> rnic_verbs::Result<EQp> {
    pd.create_qp(&QpInit {
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        cap: cap(16, 1, 0),
        qp_type: ty,
        sq_sig_all: false,
    })
}

impl Q {
    fn new(nic: &Nic, ty: QpType, qkey: u32) -> Q {
        let pd = nic.ctx.alloc_pd().unwrap();
        let cq = nic.ctx.create_cq(64).unwrap();
        let qp = create(&pd, &cq, ty).unwrap();
        let mut mask = qp_attr::STATE | qp_attr::PKEY_INDEX | qp_attr::QKEY;
        if ty == QpType::Ud {
            mask |= qp_attr::PORT;
        }
        let init = QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            qkey,
            ..QpAttr::default()
        };
        qp.modify(&init, mask).unwrap();
        set_state(&qp, QpState::Rtr).unwrap();
        let rts = QpAttr {
            qp_state: QpState::Rts,
            sq_psn: 0,
            ..QpAttr::default()
        };
        qp.modify(&rts, qp_attr::STATE | qp_attr::SQ_PSN).unwrap();
        let mr = pd.alloc_mr(BUF * (RECVS + 1), access::LOCAL_WRITE).unwrap();
        for i in 0..RECVS {
            let sg = [mr.sge(i * BUF, BUF as u32).unwrap()];
            qp.post_recv(&[RecvWr {
                wr_id: 100 + i as u64,
                sg_list: &sg,
            }])
            .unwrap();
        }
        Q { pd, cq, qp, mr }
    }

    /// Sends `data` to QP `qpn` of `peer` with Q_Key `qkey`, signaled.
    fn send(&self, peer: &Nic, qpn: u32, qkey: u32, data: &[u8], wr_id: u64) {
        let ah = self
            .pd
            .create_ah(&AhAttr {
                dgid: peer.ctx.query_gid(1, 0).unwrap(),
                is_global: true,
                port_num: 1,
                ..AhAttr::default()
            })
            .unwrap();
        let at = RECVS * BUF;
        self.mr.write(at, data).unwrap();
        let sg = [self.mr.sge(at, data.len() as u32).unwrap()];
        self.qp
            .post_send(&[SendWr {
                wr_id,
                op: SendOp::UdSend {
                    dest: ah.dest(qpn, qkey),
                    imm: None,
                },
                payload: Payload::Sgl(&sg),
                flags: send_flags::SIGNALED,
            }])
            .unwrap();
    }

    fn buf(&self, i: usize, len: usize) -> Vec<u8> {
        let mut b = vec![0; len];
        self.mr.read(i * BUF, &mut b).unwrap();
        b
    }
}

fn mad(seed: u8) -> Vec<u8> {
    (0..MAD)
        .map(|i| (i as u8).wrapping_mul(13) ^ seed)
        .collect()
}

fn port_counter(nic: &Nic, idx: usize) -> u64 {
    nic.ctx.query_port_counters(1).unwrap().get(idx)
}

/// Lets the NICs run, then checks that `cq` stays empty.
fn assert_none(f: &Fabric, cq: &ECq) {
    for _ in 0..50 {
        f.idle(Duration::from_micros(100));
    }
    let mut wc = [WorkCompletion::default(); 1];
    assert_eq!(cq.poll(&mut wc).unwrap(), 0, "unexpected {:?}", wc[0]);
}

#[test]
fn mads_cross_between_the_gsi_qps_of_two_nics() {
    for mode in [ExecMode::Inline, ExecMode::Thread] {
        let f = Fabric::new(mode, 2, 3);
        let (a, b) = (
            Q::new(&f.nics[0], QpType::Gsi, GSI_QKEY),
            Q::new(&f.nics[1], QpType::Gsi, GSI_QKEY),
        );
        assert_eq!((a.qp.qp_num(), b.qp.qp_num()), (1, 1));
        for k in 0..2u8 {
            a.send(&f.nics[1], 1, GSI_QKEY, &mad(k), k.into());
            assert_ok(&f.wait_one(&a.cq), k.into(), WcOpcode::Send);
            let wc = f.wait_one(&b.cq);
            assert_ok(&wc, 100 + u64::from(k), WcOpcode::Recv);
            assert_eq!((wc.src_qp, wc.qp_num), (1, 1));
            assert_eq!(wc.byte_len as usize, BUF);
            assert!(wc.flags & wc_flags::GRH != 0);
            assert_eq!(b.buf(k.into(), BUF)[GRH_LEN..], mad(k)[..]);
        }
        // And back.
        b.send(&f.nics[0], 1, GSI_QKEY, &mad(9), 9);
        assert_ok(&f.wait_one(&b.cq), 9, WcOpcode::Send);
        let wc = f.wait_one(&a.cq);
        assert_eq!((wc.status, wc.src_qp), (WcStatus::Success, 1));
        assert_eq!(a.buf(0, BUF)[GRH_LEN..], mad(9)[..]);
        let counts = |n: &Nic| {
            [
                counter::MADS_SENT,
                counter::MADS_RECEIVED,
                counter::MADS_DROPPED,
            ]
            .map(|c| port_counter(n, c))
        };
        assert_eq!(counts(&f.nics[0]), [2, 1, 0]);
        assert_eq!(counts(&f.nics[1]), [1, 2, 0]);
        let qp_sent = b.qp.query_counters().unwrap().get(counter::MADS_SENT);
        assert_eq!(qp_sent, 1);
    }
}

#[test]
fn one_gsi_qp_per_port_with_the_well_known_q_key() {
    let f = Fabric::new(ExecMode::Inline, 1, 4);
    let nic = &f.nics[0];
    let pd = nic.ctx.alloc_pd().unwrap();
    let cq = nic.ctx.create_cq(8).unwrap();
    let gsi = create(&pd, &cq, QpType::Gsi).unwrap();
    assert_eq!(gsi.qp_num(), 1);
    let again = create(&pd, &cq, QpType::Gsi)
        .err()
        .expect("a second GSI QP");
    assert_eq!(again.errno(), libc::EBUSY, "{again}");
    // Other QPs never get QPN 1.
    let ud = create(&pd, &cq, QpType::Ud).unwrap();
    assert!(ud.qp_num() >= 2);
    // INIT needs the P_Key index and the Q_Key, which must be GSI_QKEY;
    // the port is QP1's own.
    let init = |qkey| QpAttr {
        qp_state: QpState::Init,
        qkey,
        port_num: 1,
        ..QpAttr::default()
    };
    let base = qp_attr::STATE | qp_attr::PKEY_INDEX;
    assert!(gsi.modify(&init(GSI_QKEY), base).is_err(), "no Q_Key");
    let e = gsi
        .modify(&init(0x1234), base | qp_attr::QKEY)
        .expect_err("another Q_Key");
    let at = std::mem::offset_of!(ModifyQpIn, attrs) + std::mem::offset_of!(QpAttrs, qkey);
    assert!(e.to_string().contains(&format!("offset {at}")), "{e}");
    gsi.modify(&init(GSI_QKEY), base | qp_attr::QKEY).unwrap();
    // Destroyed, QPN 1 is free for the next GSI QP.
    drop(gsi);
    assert_eq!(create(&pd, &cq, QpType::Gsi).unwrap().qp_num(), 1);
}

#[test]
fn mads_with_no_gsi_qp_a_wrong_q_key_or_for_qp0_are_dropped_and_counted() {
    let f = Fabric::new(ExecMode::Thread, 2, 5);
    let (a, b) = (
        Q::new(&f.nics[0], QpType::Ud, 0x1111),
        Q::new(&f.nics[1], QpType::Gsi, GSI_QKEY),
    );
    let dropped = |n: &Nic| port_counter(n, counter::MADS_DROPPED);
    // GSI_QKEY is a controlled Q_Key (its high bit): a QP that names it
    // in a work request sends its own (IBA 10.2.5), so an ordinary UD QP
    // cannot reach QP1.
    a.send(&f.nics[1], 1, GSI_QKEY, &mad(1), 1);
    assert_ok(&f.wait_one(&a.cq), 1, WcOpcode::Send);
    assert_none(&f, &b.cq);
    assert_eq!(dropped(&f.nics[1]), 1);
    // Any other Q_Key.
    a.send(&f.nics[1], 1, 0x2222, &mad(2), 2);
    assert_ok(&f.wait_one(&a.cq), 2, WcOpcode::Send);
    assert_none(&f, &b.cq);
    assert_eq!(dropped(&f.nics[1]), 2);
    assert_eq!(port_counter(&f.nics[1], counter::RX_BAD_QKEY), 2);
    // QP0: RoCE has no subnet management.
    a.send(&f.nics[1], 0, GSI_QKEY, &mad(3), 3);
    assert_ok(&f.wait_one(&a.cq), 3, WcOpcode::Send);
    assert_none(&f, &b.cq);
    assert_eq!(dropped(&f.nics[1]), 3);
    // No GSI QP on A's NIC.
    b.send(&f.nics[0], 1, GSI_QKEY, &mad(4), 4);
    assert_ok(&f.wait_one(&b.cq), 4, WcOpcode::Send);
    assert_none(&f, &a.cq);
    assert_eq!(dropped(&f.nics[0]), 1);
    assert_eq!(port_counter(&f.nics[0], counter::RX_UNKNOWN_QP), 1);
    assert_eq!(port_counter(&f.nics[1], counter::MADS_RECEIVED), 0);
    assert_eq!(port_counter(&f.nics[1], counter::MADS_SENT), 1);
}

#[test]
fn a_mad_on_the_wire_is_a_ud_send_from_qp1_to_qp1_with_the_gsi_q_key() {
    let dir = std::env::temp_dir().join(format!("rnic-gsi-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("nic0.pcap");
    {
        let f = Fabric::with_capture(ExecMode::Inline, 2, 8, Some(&file));
        let (a, b) = (
            Q::new(&f.nics[0], QpType::Gsi, GSI_QKEY),
            Q::new(&f.nics[1], QpType::Gsi, GSI_QKEY),
        );
        a.send(&f.nics[1], 1, GSI_QKEY, &mad(5), 1);
        assert_ok(&f.wait_one(&b.cq), 100, WcOpcode::Recv);
    }
    let frames = pcap::read(&std::fs::read(&file).unwrap()).unwrap();
    let roce: Vec<_> = frames
        .iter()
        .filter_map(|f| match classify(&f.frame) {
            Ok(Received::Roce(r, payload)) => Some((r, payload.to_vec())),
            _ => None,
        })
        .collect();
    assert_eq!(roce.len(), 1, "one RoCEv2 frame: {roce:?}");
    let (r, payload) = &roce[0];
    assert_eq!(r.roce.bth.opcode, opcode::UD_SEND_ONLY);
    assert_eq!((r.roce.bth.dest_qp, r.roce.bth.pkey), (1, 0xffff));
    let deth = r.roce.deth.expect("a DETH");
    assert_eq!((deth.qkey, deth.src_qp), (GSI_QKEY, 1));
    assert_eq!(payload, &mad(5));
    std::fs::remove_dir_all(&dir).unwrap();
}

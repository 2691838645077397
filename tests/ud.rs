//! UD QPs between two NICs on the in-memory switch, in both execution
//! modes: address handles from a GID (the MAC resolved by ARP or neighbour
//! discovery) and from a received completion, the GRH at the head of the
//! receive buffer, immediate data and inline sends, the Q_Key rules,
//! messages longer than the MTU, a missing receive WQE, a buffer too
//! small, and the driver's checks; the frames on the wire are RoCEv2 UD
//! SENDs with a DETH.

use std::time::Duration;

use rnic_emu::pcap;
use rnic_emu::wire::frame::{classify, Received};
use rnic_emu::wire::opcode;
use rnic_hw_regs::cqe::{SL_ROCE_V2_IPV4, SL_ROCE_V2_IPV6};
use rnic_tests::fabric::{Fabric, Nic};
use rnic_tests::*;

const QKEY: u32 = 0x1111_1111;
/// Receive buffers: a GRH and a full 4096-byte MTU.
const BUF: usize = GRH_LEN + 4096;
const RECVS: usize = 8;

/// A UD QP in RTS on one NIC, with its receive buffers.
struct Ud {
    pd: EPd,
    cq: ECq,
    qp: EQp,
    mr: EMr,
}

impl Ud {
    fn new(nic: &Nic, qkey: u32) -> Ud {
        let ctx = &nic.ctx;
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(64).unwrap();
        let qp = pd
            .create_qp(&QpInit {
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                cap: cap(16, 2, 64),
                qp_type: QpType::Ud,
                sq_sig_all: false,
            })
            .unwrap();
        let init = QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            qkey,
            ..QpAttr::default()
        };
        qp.modify(
            &init,
            qp_attr::STATE | qp_attr::PKEY_INDEX | qp_attr::PORT | qp_attr::QKEY,
        )
        .unwrap();
        set_state(&qp, QpState::Rtr).unwrap();
        let rts = QpAttr {
            qp_state: QpState::Rts,
            sq_psn: 0x123,
            ..QpAttr::default()
        };
        qp.modify(&rts, qp_attr::STATE | qp_attr::SQ_PSN).unwrap();
        let mr = pd.alloc_mr(BUF * (RECVS + 1), access::LOCAL_WRITE).unwrap();
        Ud { pd, cq, qp, mr }
    }

    /// Posts receive `i` (buffer `i`, `len` bytes).
    fn recv(&self, i: usize, len: u32) {
        let sg = [self.mr.sge(i * BUF, len).unwrap()];
        self.qp
            .post_recv(&[RecvWr {
                wr_id: 100 + i as u64,
                sg_list: &sg,
            }])
            .unwrap();
    }

    /// An address handle to `peer`'s GID `gid_index` from this side's.
    fn ah_to(&self, peer: &Nic, gid_index: u8) -> Ah<EmuHal> {
        self.pd
            .create_ah(&AhAttr {
                dgid: peer.ctx.query_gid(1, gid_index.into()).unwrap(),
                sgid_index: gid_index,
                is_global: true,
                port_num: 1,
                ..AhAttr::default()
            })
            .unwrap()
    }

    /// Sends `data` (from the last buffer) to `dest`, signaled.
    fn send(&self, dest: UdDest, data: &[u8], imm: Option<[u8; 4]>, wr_id: u64) {
        let at = RECVS * BUF;
        self.mr.write(at, data).unwrap();
        let sg = [self.mr.sge(at, data.len() as u32).unwrap()];
        self.qp
            .post_send(&[SendWr {
                wr_id,
                op: SendOp::UdSend { dest, imm },
                payload: Payload::Sgl(&sg),
                flags: send_flags::SIGNALED,
            }])
            .unwrap();
    }

    /// Buffer `i`'s first `len` bytes.
    fn buf(&self, i: usize, len: usize) -> Vec<u8> {
        let mut b = vec![0; len];
        self.mr.read(i * BUF, &mut b).unwrap();
        b
    }
}

fn bytes(len: usize, seed: u8) -> Vec<u8> {
    (0..len).map(|i| (i as u8).wrapping_mul(7) ^ seed).collect()
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

fn exchange(mode: ExecMode, gid_index: u8) {
    let f = Fabric::new(mode, 2, 1);
    let (a, b) = (Ud::new(&f.nics[0], QKEY), Ud::new(&f.nics[1], QKEY));
    for i in 0..RECVS {
        b.recv(i, BUF as u32);
    }
    let ah = a.ah_to(&f.nics[1], gid_index);
    let sizes = [0usize, 1, 100, 1500, 4096];
    for (k, &len) in sizes.iter().enumerate() {
        let imm = (k % 2 == 1).then_some([0xde, 0xad, 0, k as u8]);
        a.send(
            ah.dest(b.qp.qp_num(), QKEY),
            &bytes(len, k as u8),
            imm,
            k as u64,
        );
        assert_ok(&f.wait_one(&a.cq), k as u64, WcOpcode::Send);
        let wc = f.wait_one(&b.cq);
        assert_ok(&wc, 100 + k as u64, WcOpcode::Recv);
        assert_eq!(wc.byte_len as usize, GRH_LEN + len);
        assert_eq!(wc.src_qp, a.qp.qp_num());
        assert_eq!(wc.qp_num, b.qp.qp_num());
        assert!(wc.flags & wc_flags::GRH != 0);
        assert_eq!(wc.imm_data, imm);
        // `sl` tells the packet's network header type, as a ConnectX CQE
        // does (UCX reads it to find the destination in the GRH).
        let ty = if gid_index == 0 {
            SL_ROCE_V2_IPV4
        } else {
            SL_ROCE_V2_IPV6
        };
        assert_eq!((wc.pkey_index, wc.sl, wc.slid), (0, ty, 0));
        let got = b.buf(k, GRH_LEN + len);
        assert_eq!(&got[GRH_LEN..], &bytes(len, k as u8)[..], "message {k}");
        // The GRH: the IPv4 header in its last 20 bytes, or the IPv6
        // header, from A to B.
        let (ga, gb) = (
            f.nics[0].ctx.query_gid(1, gid_index.into()).unwrap(),
            f.nics[1].ctx.query_gid(1, gid_index.into()).unwrap(),
        );
        if gid_index == 0 {
            assert_eq!(&got[..20], &[0; 20]);
            assert_eq!(got[20] >> 4, 4);
            assert_eq!(got[20 + 9], 17, "UDP");
            assert_eq!((&got[32..36], &got[36..40]), (&ga[12..], &gb[12..]));
        } else {
            assert_eq!(got[0] >> 4, 6);
            assert_eq!(got[6], 17, "UDP");
            assert_eq!((&got[8..24], &got[24..40]), (&ga[..], &gb[..]));
        }
    }
    // B answers along the received path (ibv_create_ah_from_wc), inline.
    a.recv(0, BUF as u32);
    let last = sizes.len() - 1;
    let grh = b.buf(last, GRH_LEN);
    let wc = WorkCompletion {
        flags: wc_flags::GRH,
        src_qp: a.qp.qp_num(),
        ..WorkCompletion::default()
    };
    let back = b.pd.create_ah_from_wc(&wc, &grh).unwrap();
    assert_eq!(back.attr().sgid_index, gid_index);
    let reply = b"a reply along the path it came";
    b.qp.post_send(&[SendWr {
        wr_id: 7,
        op: SendOp::UdSend {
            dest: back.dest(wc.src_qp, QKEY),
            imm: None,
        },
        payload: Payload::Inline(reply),
        flags: send_flags::SIGNALED,
    }])
    .unwrap();
    assert_ok(&f.wait_one(&b.cq), 7, WcOpcode::Send);
    let wc = f.wait_one(&a.cq);
    assert_ok(&wc, 100, WcOpcode::Recv);
    assert_eq!(wc.src_qp, b.qp.qp_num());
    assert_eq!(&a.buf(0, GRH_LEN + reply.len())[GRH_LEN..], reply);
    // The MACs were resolved by asking (ARP or neighbour discovery).
    assert!(port_counter(&f.nics[0], counter::NEIGH_REQUESTS_SENT) >= 1);
    for n in &f.nics {
        for bad in [
            counter::RX_BAD_QKEY,
            counter::RX_NO_RECV_WQE,
            counter::UD_TOO_LONG,
        ] {
            assert_eq!(port_counter(n, bad), 0);
        }
    }
}

#[test]
fn ipv4_both_ways_inline_device() {
    exchange(ExecMode::Inline, 0);
}

#[test]
fn ipv4_both_ways_device_thread() {
    exchange(ExecMode::Thread, 0);
}

#[test]
fn ipv6_link_local_both_ways() {
    exchange(ExecMode::Inline, 1);
    exchange(ExecMode::Thread, 1);
}

#[test]
fn q_keys_are_checked_and_the_high_bit_sends_the_qps_own() {
    for mode in [ExecMode::Inline, ExecMode::Thread] {
        let f = Fabric::new(mode, 2, 2);
        let (a, b) = (Ud::new(&f.nics[0], QKEY), Ud::new(&f.nics[1], QKEY));
        b.recv(0, BUF as u32);
        let ah = a.ah_to(&f.nics[1], 0);
        // A wrong Q_Key: sent (UD has no acknowledgement), dropped there.
        a.send(ah.dest(b.qp.qp_num(), 0x2222), b"wrong key", None, 1);
        assert_ok(&f.wait_one(&a.cq), 1, WcOpcode::Send);
        assert_none(&f, &b.cq);
        assert_eq!(port_counter(&f.nics[1], counter::RX_BAD_QKEY), 1);
        assert_eq!(f.nics[1].ctx.query_port(1).unwrap().qkey_viol_cntr, 1);
        // The high bit: A's own Q_Key goes out, which is B's.
        a.send(ah.dest(b.qp.qp_num(), 0x8000_0000), b"own key", None, 2);
        assert_ok(&f.wait_one(&a.cq), 2, WcOpcode::Send);
        let wc = f.wait_one(&b.cq);
        assert_ok(&wc, 100, WcOpcode::Recv);
        assert_eq!(&b.buf(0, GRH_LEN + 7)[GRH_LEN..], b"own key");
        assert_eq!(port_counter(&f.nics[1], counter::RX_BAD_QKEY), 1);
    }
}

#[test]
fn a_message_longer_than_the_mtu_completes_unsent() {
    let f = Fabric::new(ExecMode::Inline, 2, 3);
    let (a, b) = (Ud::new(&f.nics[0], QKEY), Ud::new(&f.nics[1], QKEY));
    b.recv(0, BUF as u32);
    let ah = a.ah_to(&f.nics[1], 0);
    // Resolve the MAC first, so that the long send is the only frame.
    a.send(ah.dest(b.qp.qp_num(), QKEY), b"first", None, 1);
    assert_ok(&f.wait_one(&a.cq), 1, WcOpcode::Send);
    assert_ok(&f.wait_one(&b.cq), 100, WcOpcode::Recv);
    let tx = port_counter(&f.nics[0], counter::TX_FRAMES);
    // IBA C10-93.1.1: no packet, no error.
    a.send(ah.dest(b.qp.qp_num(), QKEY), &bytes(4097, 1), None, 2);
    assert_ok(&f.wait_one(&a.cq), 2, WcOpcode::Send);
    assert_eq!(port_counter(&f.nics[0], counter::UD_TOO_LONG), 1);
    assert_eq!(port_counter(&f.nics[0], counter::TX_FRAMES), tx);
    b.recv(1, BUF as u32);
    assert_none(&f, &b.cq);
    // The QP goes on.
    a.send(ah.dest(b.qp.qp_num(), QKEY), b"after", None, 3);
    assert_ok(&f.wait_one(&a.cq), 3, WcOpcode::Send);
    assert_ok(&f.wait_one(&b.cq), 101, WcOpcode::Recv);
}

#[test]
fn a_message_with_no_receive_wqe_is_dropped_and_counted() {
    let f = Fabric::new(ExecMode::Inline, 2, 4);
    let (a, b) = (Ud::new(&f.nics[0], QKEY), Ud::new(&f.nics[1], QKEY));
    let ah = a.ah_to(&f.nics[1], 0);
    a.send(ah.dest(b.qp.qp_num(), QKEY), b"nobody listens", None, 1);
    assert_ok(&f.wait_one(&a.cq), 1, WcOpcode::Send);
    assert_none(&f, &b.cq);
    assert_eq!(port_counter(&f.nics[1], counter::RX_NO_RECV_WQE), 1);
    assert_eq!(
        b.qp.query_counters().unwrap().get(counter::RX_NO_RECV_WQE),
        1
    );
    // Nothing waits: the next message takes the next receive.
    b.recv(0, BUF as u32);
    a.send(ah.dest(b.qp.qp_num(), QKEY), b"now", None, 2);
    assert_ok(&f.wait_one(&a.cq), 2, WcOpcode::Send);
    assert_ok(&f.wait_one(&b.cq), 100, WcOpcode::Recv);
    assert_eq!(&b.buf(0, GRH_LEN + 3)[GRH_LEN..], b"now");
}

#[test]
fn a_receive_buffer_too_small_fails_with_loc_len_err() {
    let f = Fabric::new(ExecMode::Inline, 2, 5);
    let (a, b) = (Ud::new(&f.nics[0], QKEY), Ud::new(&f.nics[1], QKEY));
    // Room for the GRH and 10 bytes: a 100-byte message does not fit.
    b.recv(0, GRH_LEN as u32 + 10);
    b.recv(1, BUF as u32);
    let ah = a.ah_to(&f.nics[1], 0);
    a.send(ah.dest(b.qp.qp_num(), QKEY), &bytes(100, 0), None, 1);
    let wc = f.wait_one(&b.cq);
    assert_eq!((wc.wr_id, wc.status), (100, WcStatus::LocLenErr));
    assert_eq!(rnic_driver::syndrome(&wc), Some(Syndrome::RecvTooSmall));
    // The QP is in error: the other receive is flushed.
    let wc = f.wait_one(&b.cq);
    assert_eq!((wc.wr_id, wc.status), (101, WcStatus::WrFlushErr));
    assert_eq!(query_state(&b.qp), QpState::Err);
}

#[test]
fn the_driver_refuses_what_ud_cannot_do() {
    let f = Fabric::new(ExecMode::Inline, 2, 6);
    let a = Ud::new(&f.nics[0], QKEY);
    let ah = a.ah_to(&f.nics[1], 0);
    let sg = [a.mr.sge(0, 8).unwrap()];
    let post = |qp: &EQp, op: SendOp| {
        qp.post_send(&[SendWr {
            wr_id: 1,
            op,
            payload: Payload::Sgl(&sg),
            flags: 0,
        }])
        .unwrap_err()
        .error
        .to_string()
    };
    let remote = RemoteAddr { addr: 0, rkey: 1 };
    for op in [
        SendOp::Send,
        SendOp::RdmaWrite { remote },
        SendOp::RdmaRead { remote },
    ] {
        assert!(post(&a.qp, op).contains("UD QP takes UdSend"), "{op:?}");
    }
    // An RC QP takes no UdSend.
    let rc = create_qp(&a.pd, &a.cq, &a.cq, cap(4, 1, 0), false);
    to_init(&rc, &Conn::default()).unwrap();
    let dest = ah.dest(5, QKEY);
    let (attr, mask) = rtr_attr(&f.nics[1].ctx, 5, &Conn::default());
    rc.modify(&attr, mask).unwrap();
    let (attr, mask) = rts_attr(&Conn::default());
    rc.modify(&attr, mask).unwrap();
    assert!(post(&rc, SendOp::UdSend { dest, imm: None }).contains("for UD QPs"));
    // An address handle of another PD.
    let pd2 = f.nics[0].ctx.alloc_pd().unwrap();
    let other = pd2
        .create_ah(&AhAttr {
            dgid: f.nics[1].ctx.query_gid(1, 0).unwrap(),
            is_global: true,
            ..AhAttr::default()
        })
        .unwrap();
    let e = post(
        &a.qp,
        SendOp::UdSend {
            dest: other.dest(5, QKEY),
            imm: None,
        },
    );
    assert!(e.contains("address handle is of PD"), "{e}");
    // Address handles that cannot be.
    let gid = |i| f.nics[1].ctx.query_gid(1, i).unwrap();
    for (attr, what) in [
        (
            AhAttr {
                dgid: gid(0),
                is_global: false,
                ..AhAttr::default()
            },
            "is_global",
        ),
        (
            AhAttr {
                dgid: gid(0),
                sgid_index: 200,
                is_global: true,
                ..AhAttr::default()
            },
            "sgid_index",
        ),
        (
            AhAttr {
                dgid: gid(0),
                sgid_index: 5,
                is_global: true,
                ..AhAttr::default()
            },
            "unused GID",
        ),
        (
            AhAttr {
                dgid: gid(1),
                sgid_index: 0,
                is_global: true,
                ..AhAttr::default()
            },
            "both be IPv4",
        ),
        (
            AhAttr {
                dgid: gid(0),
                port_num: 2,
                is_global: true,
                ..AhAttr::default()
            },
            "port",
        ),
    ] {
        let e = a.pd.create_ah(&attr).err().expect(what).to_string();
        assert!(e.contains(what), "{what}: {e}");
    }
    let e =
        a.pd.create_ah_from_wc(&WorkCompletion::default(), &[0; GRH_LEN])
            .err()
            .unwrap()
            .to_string();
    assert!(e.contains("no GRH"), "{e}");
    // UD transitions: no AV or PATH_MTU, QKEY required to leave RESET.
    let ud =
        a.pd.create_qp(&QpInit {
            send_cq: &a.cq,
            recv_cq: &a.cq,
            srq: None,
            cap: cap(4, 1, 0),
            qp_type: QpType::Ud,
            sq_sig_all: false,
        })
        .unwrap();
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        ..QpAttr::default()
    };
    let e = ud
        .modify(&init, qp_attr::STATE | qp_attr::PKEY_INDEX | qp_attr::PORT)
        .unwrap_err()
        .to_string();
    assert!(e.contains("requires attributes QKEY"), "{e}");
}

#[test]
fn the_frames_are_rocev2_ud_sends_with_a_deth() {
    let dir = std::env::temp_dir().join(format!("rnic-ud-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("nic0.pcap");
    {
        let f = Fabric::with_capture(ExecMode::Inline, 2, 7, Some(&file));
        let (a, b) = (Ud::new(&f.nics[0], QKEY), Ud::new(&f.nics[1], QKEY));
        b.recv(0, BUF as u32);
        let ah = a.ah_to(&f.nics[1], 0);
        a.send(
            ah.dest(b.qp.qp_num(), QKEY),
            b"on the wire",
            Some([1, 2, 3, 4]),
            1,
        );
        assert_ok(&f.wait_one(&b.cq), 100, WcOpcode::Recv);
    }
    let frames = pcap::read(&std::fs::read(&file).unwrap()).unwrap();
    let ud: Vec<_> = frames
        .iter()
        .filter_map(|f| match classify(&f.frame) {
            Ok(Received::Roce(r, payload)) => Some((r.roce, payload.to_vec())),
            _ => None,
        })
        .collect();
    assert_eq!(ud.len(), 1, "one RoCEv2 frame: {ud:?}");
    let (roce, payload) = &ud[0];
    assert_eq!(roce.bth.opcode, opcode::UD_SEND_ONLY_WITH_IMMEDIATE);
    assert_eq!(roce.bth.psn, 0x123);
    let deth = roce.deth.expect("a DETH");
    assert_eq!(deth.qkey, QKEY);
    assert_eq!(roce.immdt.map(|i| i.imm), Some([1, 2, 3, 4]));
    assert_eq!(payload.as_slice(), b"on the wire");
    std::fs::remove_dir_all(&dir).unwrap();
}

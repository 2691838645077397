//! UC QPs between two NICs on the in-memory switch, in both execution
//! modes: SEND and RDMA WRITE (with immediate), segmented at the path
//! MTU, no RDMA READ or atomics; through a lossy wire every message either
//! arrives whole or not at all, each dropped packet counted, and the
//! receive WQEs of lost messages take later ones; a missing receive WQE or
//! a bad rkey drops the message and the QP goes on; a receive buffer too
//! small fails with LOC_LEN_ERR.

use rnic_emu::net::FaultConfig;
use rnic_tests::fabric::{Fabric, Nic};
use rnic_tests::*;

const LEN: usize = 64 << 10;

/// A UC QP connected to its peer, and a memory region.
struct Uc {
    cq: ECq,
    qp: EQp,
    mr: EMr,
}

impl Uc {
    fn new(nic: &Nic) -> Uc {
        let pd = nic.ctx.alloc_pd().unwrap();
        let cq = nic.ctx.create_cq(256).unwrap();
        let qp = pd
            .create_qp(&QpInit {
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                cap: cap(64, 2, 64),
                qp_type: QpType::Uc,
                sq_sig_all: false,
            })
            .unwrap();
        let mr = pd
            .alloc_mr(4 * LEN, access::LOCAL_WRITE | access::REMOTE_WRITE)
            .unwrap();
        Uc { cq, qp, mr }
    }

    /// RESET → RTS connected to `peer`'s QP `dest`: UC's masks.
    fn connect(&self, peer: &Nic, dest: u32) {
        let init = QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            qp_access_flags: access::REMOTE_WRITE,
            ..QpAttr::default()
        };
        self.qp
            .modify(
                &init,
                qp_attr::STATE | qp_attr::PKEY_INDEX | qp_attr::PORT | qp_attr::ACCESS_FLAGS,
            )
            .unwrap();
        let (mut rtr, _) = rtr_attr(&peer.ctx, dest, &Conn::default());
        rtr.rq_psn = 0x77;
        self.qp
            .modify(
                &rtr,
                qp_attr::STATE
                    | qp_attr::AV
                    | qp_attr::PATH_MTU
                    | qp_attr::DEST_QPN
                    | qp_attr::RQ_PSN,
            )
            .unwrap();
        let rts = QpAttr {
            qp_state: QpState::Rts,
            sq_psn: 0x77,
            ..QpAttr::default()
        };
        self.qp
            .modify(&rts, qp_attr::STATE | qp_attr::SQ_PSN)
            .unwrap();
    }

    fn recv(&self, wr_id: u64, off: usize, len: usize) {
        let sg = [self.mr.sge(off, len as u32).unwrap()];
        self.qp
            .post_recv(&[RecvWr {
                wr_id,
                sg_list: &sg,
            }])
            .unwrap();
    }

    fn post(&self, wr_id: u64, op: SendOp, off: usize, len: usize) {
        let sg = [self.mr.sge(off, len as u32).unwrap()];
        self.qp
            .post_send(&[SendWr {
                wr_id,
                op,
                payload: Payload::Sgl(&sg),
                flags: send_flags::SIGNALED,
            }])
            .unwrap();
    }

    fn read(&self, off: usize, len: usize) -> Vec<u8> {
        let mut b = vec![0; len];
        self.mr.read(off, &mut b).unwrap();
        b
    }
}

fn pair(mode: ExecMode, seed: u64) -> (Fabric, Uc, Uc) {
    let f = Fabric::new(mode, 2, seed);
    let (a, b) = (Uc::new(&f.nics[0]), Uc::new(&f.nics[1]));
    a.connect(&f.nics[1], b.qp.qp_num());
    b.connect(&f.nics[0], a.qp.qp_num());
    (f, a, b)
}

fn bytes(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13) ^ (i >> 8) as u8 ^ seed)
        .collect()
}

fn dropped(nic: &Nic) -> u64 {
    nic.ctx
        .query_port_counters(1)
        .unwrap()
        .get(counter::UC_DROPPED)
}

fn send_and_write(mode: ExecMode) {
    let (f, a, b) = pair(mode, 1);
    // A SEND of 64 KiB: 64 packets at MTU 1024, into a receive WQE.
    a.mr.write(0, &bytes(LEN, 1)).unwrap();
    b.recv(1, 0, LEN);
    a.post(10, SendOp::Send, 0, LEN);
    assert_ok(&f.wait_one(&a.cq), 10, WcOpcode::Send);
    let wc = f.wait_one(&b.cq);
    assert_ok(&wc, 1, WcOpcode::Recv);
    assert_eq!((wc.byte_len as usize, wc.src_qp), (LEN, a.qp.qp_num()));
    assert_eq!(b.read(0, LEN), bytes(LEN, 1));
    // An RDMA WRITE, and one with immediate, which takes a receive WQE.
    a.mr.write(LEN, &bytes(5000, 2)).unwrap();
    let remote = RemoteAddr {
        addr: b.mr.addr() + 2 * LEN as u64,
        rkey: b.mr.rkey(),
    };
    a.post(11, SendOp::RdmaWrite { remote }, LEN, 5000);
    assert_ok(&f.wait_one(&a.cq), 11, WcOpcode::RdmaWrite);
    b.recv(2, 0, 16);
    let imm = [9, 8, 7, 6];
    a.post(12, SendOp::RdmaWriteWithImm { remote, imm }, LEN, 3000);
    assert_ok(&f.wait_one(&a.cq), 12, WcOpcode::RdmaWrite);
    let wc = f.wait_one(&b.cq);
    assert_ok(&wc, 2, WcOpcode::RecvRdmaWithImm);
    assert_eq!((wc.byte_len, wc.imm_data), (3000, Some(imm)));
    assert_eq!(b.read(2 * LEN, 5000), bytes(5000, 2));
    // Nothing was acknowledged: no ACK left either NIC.
    for n in &f.nics {
        let c = n.ctx.query_port_counters(1).unwrap();
        assert_eq!(c.get(counter::ACKS_SENT), 0);
        assert_eq!(c.get(counter::UC_DROPPED), 0);
    }
    // READ and atomics are not UC operations.
    for op in [
        SendOp::RdmaRead { remote },
        SendOp::AtomicFetchAndAdd { remote, add: 1 },
    ] {
        let sg = [a.mr.sge(0, 8).unwrap()];
        let e =
            a.qp.post_send(&[SendWr {
                wr_id: 1,
                op,
                payload: Payload::Sgl(&sg),
                flags: 0,
            }])
            .unwrap_err();
        assert!(
            e.error.to_string().contains("UC QPs do no RDMA READ"),
            "{e}"
        );
    }
}

#[test]
fn send_and_write_inline_device() {
    send_and_write(ExecMode::Inline);
}

#[test]
fn send_and_write_device_thread() {
    send_and_write(ExecMode::Thread);
}

#[test]
fn a_message_that_lost_a_packet_is_dropped_whole() {
    let (f, a, b) = pair(ExecMode::Inline, 2);
    const N: usize = 40;
    const MSG: usize = 8 << 10; // 8 packets
    for i in 0..N {
        b.recv(i as u64, (i % 4) * MSG, MSG);
    }
    f.nics[0].faults.set(FaultConfig {
        drop: 0.03,
        rx: false,
        ..FaultConfig::default()
    });
    for i in 0..N {
        a.mr.write(0, &bytes(MSG, i as u8)).unwrap();
        a.post(100 + i as u64, SendOp::Send, 0, MSG);
        // Every send completes, delivered or not.
        assert_ok(&f.wait_one(&a.cq), 100 + i as u64, WcOpcode::Send);
    }
    let got = f.settle_all(&b.cq);
    let lost = f.nics[0].faults.stats().dropped;
    assert!(lost > 0, "the injector dropped nothing");
    assert!(
        got.len() < N,
        "{} of {N} messages arrived through {lost} drops",
        got.len()
    );
    // The receive WQEs complete in order, every one with a whole message
    // (each message overwrote the same buffer, so its bytes are those of
    // some message: the last one's for the last WQE).
    for (k, wc) in got.iter().enumerate() {
        assert_ok(wc, k as u64, WcOpcode::Recv);
        assert_eq!(wc.byte_len as usize, MSG);
    }
    assert!(dropped(&f.nics[1]) > 0);
    // With the loss gone, the next message takes the next receive WQE.
    f.nics[0].faults.set(FaultConfig::default());
    a.mr.write(0, &bytes(MSG, 0xee)).unwrap();
    a.post(999, SendOp::Send, 0, MSG);
    assert_ok(&f.wait_one(&a.cq), 999, WcOpcode::Send);
    let wc = f.wait_one(&b.cq);
    assert_ok(&wc, got.len() as u64, WcOpcode::Recv);
    assert_eq!(b.read((got.len() % 4) * MSG, MSG), bytes(MSG, 0xee));
    assert_eq!(query_state(&b.qp), QpState::Rts);
}

#[test]
fn no_receive_wqe_or_a_bad_rkey_drops_the_message() {
    for mode in [ExecMode::Inline, ExecMode::Thread] {
        let (f, a, b) = pair(mode, 3);
        a.mr.write(0, &bytes(3000, 5)).unwrap();
        // No receive WQE: dropped, counted (all three packets).
        a.post(1, SendOp::Send, 0, 3000);
        assert_ok(&f.wait_one(&a.cq), 1, WcOpcode::Send);
        assert!(f.settle_all(&b.cq).is_empty());
        assert_eq!(dropped(&f.nics[1]), 3);
        // A bad rkey: dropped, counted; the target untouched.
        let remote = RemoteAddr {
            addr: b.mr.addr(),
            rkey: b.mr.rkey() ^ 0x100,
        };
        a.post(2, SendOp::RdmaWrite { remote }, 0, 3000);
        assert_ok(&f.wait_one(&a.cq), 2, WcOpcode::RdmaWrite);
        assert!(f.settle_all(&b.cq).is_empty());
        assert_eq!(dropped(&f.nics[1]), 6);
        assert_eq!(b.read(0, 3000), vec![0; 3000]);
        // The QP goes on.
        b.recv(7, 0, 4096);
        a.post(3, SendOp::Send, 0, 3000);
        assert_ok(&f.wait_one(&a.cq), 3, WcOpcode::Send);
        assert_ok(&f.wait_one(&b.cq), 7, WcOpcode::Recv);
        assert_eq!(b.read(0, 3000), bytes(3000, 5));
        assert_eq!(query_state(&b.qp), QpState::Rts);
    }
}

#[test]
fn a_receive_buffer_too_small_fails_with_loc_len_err() {
    let (f, a, b) = pair(ExecMode::Inline, 4);
    b.recv(1, 0, 1000);
    b.recv(2, 4096, 4096);
    a.post(1, SendOp::Send, 0, 3000);
    assert_ok(&f.wait_one(&a.cq), 1, WcOpcode::Send);
    let wc = f.wait_one(&b.cq);
    assert_eq!((wc.wr_id, wc.status), (1, WcStatus::LocLenErr));
    let wc = f.wait_one(&b.cq);
    assert_eq!((wc.wr_id, wc.status), (2, WcStatus::WrFlushErr));
    assert_eq!(query_state(&b.qp), QpState::Err);
}

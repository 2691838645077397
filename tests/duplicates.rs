//! Duplicate requests as a requester sends them after losing answers,
//! from a scripted peer on the switch, in both execution modes: the
//! responder's answers must be the ones an rxe requester accepts (IBA
//! 9.7.5.1.2, Linux rxe's `duplicate_request`).
//!
//! - A duplicate WRITE behind a READ is acknowledged at the WRITE's PSN,
//!   not the READ's: an ACK at the READ's PSN would complete the READ
//!   with no data.
//! - A READ retried from its middle is answered from there with MIDDLE
//!   and LAST, as the READ's own answer went on.
//! - A duplicate READ that asks for anything but a part of a READ held,
//!   under its key, is dropped.

use rnic_emu::wire::opcode;
use rnic_emu::wire::reth::RethRepr;
use rnic_emu::wire::roce::RoceRepr;
use rnic_tests::fabric::Fabric;
use rnic_tests::peer::Peer;
use rnic_tests::*;

/// An RC QP of NIC 1 in RTS, connected to the peer, and an MR of 4 KiB
/// holding bytes 0, 1, 2, … (mod 251).
struct Setup {
    f: Fabric,
    peer: Peer,
    qp: EQp,
    mr: EMr,
    _cq: ECq,
}

fn setup(mode: ExecMode) -> Setup {
    let f = Fabric::new(mode, 1, 9);
    let ctx = &f.nics[0].ctx;
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let qp = create_qp(&pd, &cq, &cq, cap(4, 1, 0), false);
    let c = Conn {
        max_dest_rd_atomic: 4,
        ..Conn::default()
    };
    to_init(&qp, &c).unwrap();
    let (rtr, mask) = rtr_attr(ctx, 0, &c);
    qp.modify(&Peer::rtr(rtr), mask).unwrap();
    to_rts(&qp, &c).unwrap();
    let mr = pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    let pattern: Vec<u8> = (0..4096).map(|i| (i % 251) as u8).collect();
    write_mr(&mr, 0, &pattern);
    let peer = Peer::new(&f);
    Setup {
        f,
        peer,
        qp,
        mr,
        _cq: cq,
    }
}

impl Setup {
    /// The peer sends a WRITE ONLY of `data` to offset `off` at `psn`,
    /// asking for an ACK.
    fn write(&mut self, psn: u32, off: u64, data: &[u8]) {
        let mut bth = Peer::bth(opcode::RC_RDMA_WRITE_ONLY, self.qp.qp_num(), psn);
        bth.ack_req = true;
        let roce = RoceRepr {
            bth,
            reth: Some(RethRepr {
                va: self.mr.addr() + off,
                rkey: self.mr.rkey(),
                dma_len: data.len() as u32,
            }),
            ..RoceRepr::default()
        };
        self.peer.send(1, roce, data);
    }

    /// The peer sends a READ request of `len` bytes at offset `off` under
    /// `rkey` at `psn`.
    fn read(&mut self, psn: u32, off: u64, len: u32, rkey: u32) {
        let roce = RoceRepr {
            bth: Peer::bth(opcode::RC_RDMA_READ_REQUEST, self.qp.qp_num(), psn),
            reth: Some(RethRepr {
                va: self.mr.addr() + off,
                rkey,
                dma_len: len,
            }),
            ..RoceRepr::default()
        };
        self.peer.send(1, roce, &[]);
    }

    /// What the NIC answers, as (opcode, PSN, payload), once `n` answers
    /// have come (or 10 s passed) and a little after: `answers(0)` is what
    /// comes soon after, for a request that must get no answer.
    fn answers(&mut self, n: usize) -> Vec<(u8, u32, Vec<u8>)> {
        self.peer
            .expect(&self.f, n)
            .into_iter()
            .map(|(r, p)| (r.bth.opcode, r.bth.psn, p))
            .collect()
    }

    /// The MR's bytes at `off..off + len`, as the peer must read them.
    fn bytes(&self, off: usize, len: usize) -> Vec<u8> {
        read_mr(&self.mr, off, len)
    }
}

fn a_duplicate_write_behind_a_read_is_acked_at_its_own_psn(mode: ExecMode) {
    let mut s = setup(mode);
    s.write(0, 0, &[7; 8]);
    let rkey = s.mr.rkey();
    s.read(1, 64, 8, rkey);
    let first = s.answers(2);
    assert_eq!(
        first,
        [
            (opcode::RC_ACKNOWLEDGE, 0, vec![]),
            (opcode::RC_RDMA_READ_RESPONSE_ONLY, 1, s.bytes(64, 8)),
        ]
    );
    // Both answers lost: the requester sends both requests again.
    s.write(0, 0, &[7; 8]);
    s.read(1, 64, 8, rkey);
    let again = s.answers(2);
    assert_eq!(
        again,
        [
            (opcode::RC_ACKNOWLEDGE, 0, vec![]),
            (opcode::RC_RDMA_READ_RESPONSE_ONLY, 1, s.bytes(64, 8)),
        ],
        "the duplicate WRITE's ACK names PSN 0, not the READ's 1"
    );
}

fn a_read_retried_from_its_middle_goes_on_with_middle_and_last(mode: ExecMode) {
    let mut s = setup(mode);
    let rkey = s.mr.rkey();
    // 3 KiB at MTU 1024: FIRST, MIDDLE, LAST at PSNs 0, 1, 2.
    s.read(0, 0, 3072, rkey);
    let first = s.answers(3);
    let ops: Vec<(u8, u32)> = first.iter().map(|a| (a.0, a.1)).collect();
    assert_eq!(
        ops,
        [
            (opcode::RC_RDMA_READ_RESPONSE_FIRST, 0),
            (opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 1),
            (opcode::RC_RDMA_READ_RESPONSE_LAST, 2),
        ]
    );
    // The MIDDLE was lost: the requester asks for the rest from PSN 1.
    s.read(1, 1024, 2048, rkey);
    let again = s.answers(2);
    assert_eq!(
        again,
        [
            (opcode::RC_RDMA_READ_RESPONSE_MIDDLE, 1, s.bytes(1024, 1024)),
            (opcode::RC_RDMA_READ_RESPONSE_LAST, 2, s.bytes(2048, 1024)),
        ],
        "from the middle, MIDDLE and LAST, never FIRST or ONLY"
    );
    // From its first PSN, the answer starts again with FIRST.
    s.read(0, 0, 3072, rkey);
    let whole: Vec<(u8, u32)> = s.answers(3).iter().map(|a| (a.0, a.1)).collect();
    assert_eq!(whole, ops);
}

fn a_duplicate_read_that_is_no_part_of_one_held_is_dropped(mode: ExecMode) {
    let mut s = setup(mode);
    let rkey = s.mr.rkey();
    s.read(0, 0, 2048, rkey);
    assert_eq!(s.answers(2).len(), 2);
    for (psn, off, len, key, what) in [
        (1, 1024, 1024, rkey ^ 0x100, "another key"),
        (1, 1024, 2048, rkey, "past the READ's end"),
        (0, 0, 3072, rkey, "longer than the READ"),
        (1, 512, 1024, rkey, "a part of it, from PSN 1"),
    ] {
        s.read(psn, off, len, key);
        let got = s.answers(if what.starts_with("a part") { 1 } else { 0 });
        // Only the last is a part of the READ held: 512..1536 of 0..2048,
        // answered from PSN 1 as one LAST of 1024 bytes.
        if what.starts_with("a part") {
            assert_eq!(
                got,
                [(opcode::RC_RDMA_READ_RESPONSE_LAST, 1, s.bytes(512, 1024))],
                "{what}"
            );
        } else {
            assert!(got.is_empty(), "{what}: {got:?}");
        }
    }
    // A duplicate with no READ at its PSN (a WRITE was there) is no READ.
    let mut s = setup(mode);
    s.write(0, 0, &[1; 4]);
    s.read(1, 0, 8, rkey);
    assert_eq!(s.answers(2).len(), 2);
    s.read(0, 0, 8, s.mr.rkey());
    assert!(s.answers(0).is_empty(), "a READ duplicating a WRITE's PSN");
}

both_modes!(
    a_duplicate_write_behind_a_read_is_acked_at_its_own_psn,
    a_read_retried_from_its_middle_goes_on_with_middle_and_last,
    a_duplicate_read_that_is_no_part_of_one_held_is_dropped,
);

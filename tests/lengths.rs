//! Transfers at the edge of the PSN space and of IBA's 2^31-byte message,
//! in both execution modes: a RETH asking for more than 2^31 bytes, or a
//! READ whose response would take half the PSN space (2^31 bytes at MTU
//! 256: 2^23 PSNs, where a 24-bit PSN no longer tells before from after),
//! is refused by the responder with an invalid-request NAK; the requester
//! never sends such a READ, completing it `LOC_LEN_ERR`.

use rnic_emu::wire::aeth::{AckKind, NakCode};
use rnic_emu::wire::opcode;
use rnic_emu::wire::reth::RethRepr;
use rnic_emu::wire::roce::RoceRepr;
use rnic_tests::fabric::Fabric;
use rnic_tests::peer::Peer;
use rnic_tests::*;

/// An RC QP of NIC 1 at path MTU 256, connected to the peer.
fn qp_at_mtu_256(f: &Fabric) -> (EPd, ECq, EQp) {
    let ctx = &f.nics[0].ctx;
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let qp = create_qp(&pd, &cq, &cq, cap(4, 1, 0), false);
    let c = Conn {
        mtu: Mtu::Mtu256,
        ..Conn::default()
    };
    to_init(&qp, &c).unwrap();
    let (rtr, mask) = rtr_attr(ctx, 0, &c);
    qp.modify(&Peer::rtr(rtr), mask).unwrap();
    to_rts(&qp, &c).unwrap();
    (pd, cq, qp)
}

fn a_reth_past_a_message_or_half_the_psns_is_an_invalid_request(mode: ExecMode) {
    for (op, len, what) in [
        (
            opcode::RC_RDMA_READ_REQUEST,
            (1u32 << 31) + 1,
            "a READ past 2^31 bytes",
        ),
        (
            opcode::RC_RDMA_READ_REQUEST,
            1 << 31,
            "a READ of 2^23 PSNs at MTU 256",
        ),
        (
            opcode::RC_RDMA_WRITE_FIRST,
            (1 << 31) + 1,
            "a WRITE past 2^31 bytes",
        ),
    ] {
        let f = Fabric::new(mode, 1, 11);
        let (pd, _cq, qp) = qp_at_mtu_256(&f);
        let mr = pd.alloc_mr(4096, ALL_ACCESS).unwrap();
        let mut peer = Peer::new(&f);
        let roce = RoceRepr {
            bth: Peer::bth(op, qp.qp_num(), 0),
            reth: Some(RethRepr {
                va: mr.addr(),
                rkey: mr.rkey(),
                dma_len: len,
            }),
            ..RoceRepr::default()
        };
        let payload = if op == opcode::RC_RDMA_WRITE_FIRST {
            vec![0u8; 256]
        } else {
            Vec::new()
        };
        peer.send(1, roce, &payload);
        let got = peer.expect(&f, 1);
        let naks: Vec<(u32, Option<AckKind>)> = got
            .iter()
            .map(|(r, _)| (r.bth.psn, r.aeth.map(|a| a.kind)))
            .collect();
        assert_eq!(
            naks,
            [(0, Some(AckKind::Nak(NakCode::InvalidRequest)))],
            "{what}"
        );
        assert_eq!(query_state(&qp), QpState::Err, "{what}");
        drop(mr);
    }
}

fn a_read_of_half_the_psns_completes_loc_len_err_unsent(mode: ExecMode) {
    let f = Fabric::new(mode, 1, 12);
    let (pd, cq, qp) = qp_at_mtu_256(&f);
    let mut peer = Peer::new(&f);
    // 2 GiB the MR spans and nothing touches: calloc's pages stay unmapped.
    let len = 1usize << 31;
    let layout = std::alloc::Layout::from_size_align(len, 4096).unwrap();
    // SAFETY: a non-zero size.
    let buf = unsafe { std::alloc::alloc_zeroed(layout) };
    let ptr = std::ptr::NonNull::new(buf).expect("2 GiB of address space");
    // SAFETY: the buffer outlives the MR, dropped before it is freed.
    let mr = unsafe { pd.reg_mr(ptr, len, ALL_ACCESS) }.unwrap();
    let sge = Sge {
        addr: mr.addr(),
        length: len as u32,
        lkey: mr.lkey(),
    };
    post_send(&qp, read(5, &[sge], 0x1000, 0x77));
    let wc = f.wait_one(&cq);
    assert_eq!((wc.wr_id, wc.status), (5, WcStatus::LocLenErr));
    assert!(peer.received().is_empty(), "nothing sent");
    drop(mr);
    // SAFETY: allocated above with this layout; the MR is gone.
    unsafe { std::alloc::dealloc(buf, layout) };
}

both_modes!(
    a_reth_past_a_message_or_half_the_psns_is_an_invalid_request,
    a_read_of_half_the_psns_completes_loc_len_err_unsent,
);

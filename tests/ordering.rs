//! A responder executes a QP's requests in order (IBA 9.5): a READ's data
//! is what the memory held when the READ arrived, even when its answer
//! cannot leave at once and a WRITE of the same bytes follows it, in both
//! execution modes.

use rnic_emu::net::FaultConfig;
use rnic_tests::fabric::{nic_config, Fabric};
use rnic_tests::*;

/// The requester's QP knows the responder's MAC; the responder's QP does
/// not, and its ARP request was lost, so its READ answer waits, while the
/// WRITE behind the READ arrives with it.
fn a_read_is_not_overtaken_by_a_later_write(mode: ExecMode) {
    let f = Fabric::new(mode, 2, 3);
    let (a, b) = (&f.nics[0].ctx, &f.nics[1].ctx);
    let (pa, pb) = (a.alloc_pd().unwrap(), b.alloc_pd().unwrap());
    let (ca, cb) = (a.create_cq(16).unwrap(), b.create_cq(16).unwrap());
    let qa = create_qp(&pa, &ca, &ca, cap(4, 1, 0), false);
    let qb = create_qp(&pb, &cb, &cb, cap(4, 1, 0), false);
    // The responder drops the WRITE while the READ's answer waits; the
    // requester sends it again after its local ACK timeout (code 10: 4 ms).
    let c = Conn {
        timeout: 10,
        ..Conn::default()
    };
    to_init(&qa, &c).unwrap();
    let (mut rtr, mask) = rtr_attr(b, qb.qp_num(), &c);
    rtr.ah_attr.dmac = nic_config(2).mac;
    qa.modify(&rtr, mask).unwrap();
    to_rts(&qa, &c).unwrap();
    // The responder asks for the requester's MAC as its QP enters RTR;
    // that request is lost, and it asks again only a millisecond later.
    let lossy = FaultConfig {
        drop: 1.0,
        rx: false,
        ..FaultConfig::default()
    };
    f.nics[1].faults.set(lossy);
    connect_to(a, &qb, qa.qp_num(), &c);
    f.nics[1].faults.set(FaultConfig::default());
    let ma = pa.alloc_mr(64, ALL_ACCESS).unwrap();
    let mb = pb.alloc_mr(64, ALL_ACCESS).unwrap();
    write_mr(&mb, 0, &[1; 8]);
    write_mr(&ma, 32, &[2; 8]);
    post_send(&qa, read(1, &[sge(&ma, 0, 8)], mb.addr(), mb.rkey()));
    post_send(&qa, write(2, &[sge(&ma, 32, 8)], mb.addr(), mb.rkey()));
    let got: Vec<(u64, WcStatus)> = (0..2)
        .map(|_| f.wait_one(&ca))
        .map(|w| (w.wr_id, w.status))
        .collect();
    assert_eq!(got, [(1, WcStatus::Success), (2, WcStatus::Success)]);
    assert_eq!(
        read_mr(&ma, 0, 8),
        [1; 8],
        "the READ reads what was there before the WRITE"
    );
    assert_eq!(read_mr(&mb, 0, 8), [2; 8], "and the WRITE landed after it");
}

both_modes!(a_read_is_not_overtaken_by_a_later_write);

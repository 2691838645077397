//! What the middleware's tests share: connecting two RC QPs and polling.

#![allow(dead_code)] // Each test binary uses its own part.

use rnic_driver::{access, qp_attr, AhAttr, Context, Cq, Mtu, Qp, QpAttr, QpState, WorkCompletion};
use rnic_queues::Hal;

/// Takes `qp` through INIT, RTR and RTS to QP `dest` on `path`, with
/// remote write.
pub fn connect<H: Hal>(qp: &Qp<H>, dest: u32, path: AhAttr) {
    let a = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: access::REMOTE_WRITE,
        ..QpAttr::default()
    };
    qp.modify(
        &a,
        qp_attr::STATE | qp_attr::PKEY_INDEX | qp_attr::PORT | qp_attr::ACCESS_FLAGS,
    )
    .unwrap();
    let a = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: Some(Mtu::Mtu1024),
        dest_qp_num: dest,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
        ah_attr: path,
        ..QpAttr::default()
    };
    let m = qp_attr::STATE
        | qp_attr::AV
        | qp_attr::PATH_MTU
        | qp_attr::DEST_QPN
        | qp_attr::RQ_PSN
        | qp_attr::MAX_DEST_RD_ATOMIC
        | qp_attr::MIN_RNR_TIMER;
    qp.modify(&a, m).unwrap();
    let a = QpAttr {
        qp_state: QpState::Rts,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 1,
        ..QpAttr::default()
    };
    let m = qp_attr::STATE
        | qp_attr::SQ_PSN
        | qp_attr::TIMEOUT
        | qp_attr::RETRY_CNT
        | qp_attr::RNR_RETRY
        | qp_attr::MAX_QP_RD_ATOMIC;
    qp.modify(&a, m).unwrap();
}

/// The next completion of `cq` (panics after a million empty polls).
pub fn one<H: Hal>(cq: &Cq<H>) -> WorkCompletion {
    let mut wc = [WorkCompletion::default()];
    for _ in 0..1_000_000 {
        if cq.poll(&mut wc).unwrap() == 1 {
            return wc[0];
        }
        std::thread::yield_now();
    }
    panic!("no completion");
}

/// The loopback path to port 1 of `ctx`'s own device.
pub fn self_path<H: Hal>(ctx: &Context<H>) -> AhAttr {
    let port = ctx.query_port(1).unwrap();
    AhAttr {
        dgid: ctx.query_gid(1, 0).unwrap(),
        dmac: port.mac,
        hop_limit: 64,
        port_num: 1,
        is_global: true,
        ..AhAttr::default()
    }
}

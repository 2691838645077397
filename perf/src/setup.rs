//! The measured setups: two sides, each an application thread's QPs with
//! their CQ and buffer, on one device (two contexts, the device's own
//! loopback wire) or on two devices on an in-memory switch; the device
//! inline or on its own thread.

use std::sync::Arc;

use rnic_driver::{
    access, qp_attr, AhAttr, Context, Cq, Mr, Mtu, Pd, Qp, QpAttr, QpCap, QpInitAttr, QpState,
    QpType,
};
use rnic_emu::net::Switch;
use rnic_emu::{EmuConfig, EmuDevice, EmuHal, ExecMode};

/// Where the two sides run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Wire {
    /// One device, both sides on it (two contexts), frames on its loopback.
    Loopback,
    /// Two devices on an in-memory switch.
    Switch,
}

/// One side: its QPs, their CQ, and a registered buffer.
pub struct Side {
    pub ctx: Context<EmuHal>,
    pub cq: Cq<EmuHal>,
    pub qps: Vec<Qp<EmuHal>>,
    pub mr: Mr<EmuHal>,
    _pd: Pd<EmuHal>,
}

/// The devices and the two sides.
pub struct Setup {
    pub a: Side,
    pub b: Side,
    _devs: Vec<Arc<EmuDevice>>,
}

/// What a setup is made of.
pub struct Params {
    pub mode: ExecMode,
    pub wire: Wire,
    pub qps: usize,
    pub depth: u32,
    pub inline: u32,
    pub buf: usize,
    pub mtu: Mtu,
}

fn side(ctx: Context<EmuHal>, p: &Params) -> Side {
    let pd = ctx.alloc_pd().expect("alloc_pd");
    let cqe = (2 * p.depth * p.qps as u32).max(64);
    let cq = ctx.create_cq(cqe).expect("create_cq");
    let cap = QpCap {
        max_send_wr: p.depth,
        max_recv_wr: p.depth,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: p.inline,
    };
    let qps = (0..p.qps)
        .map(|_| {
            pd.create_qp(&QpInitAttr {
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                cap,
                qp_type: QpType::Rc,
                sq_sig_all: false,
            })
            .expect("create_qp")
        })
        .collect();
    let rights =
        access::LOCAL_WRITE | access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC;
    let mr = pd.alloc_mr(p.buf, rights).expect("alloc_mr");
    Side {
        ctx,
        cq,
        qps,
        mr,
        _pd: pd,
    }
}

/// RESET → RTS, connected to QP `dest` of the side whose GID is `dgid`.
fn connect(qp: &Qp<EmuHal>, dgid: [u8; 16], dest: u32, mtu: Mtu) {
    let init = QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC,
        ..QpAttr::default()
    };
    qp.modify(
        &init,
        qp_attr::STATE | qp_attr::PKEY_INDEX | qp_attr::PORT | qp_attr::ACCESS_FLAGS,
    )
    .expect("INIT");
    let mut rtr = QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: Some(mtu),
        dest_qp_num: dest,
        max_dest_rd_atomic: 16,
        min_rnr_timer: 1,
        ..QpAttr::default()
    };
    rtr.ah_attr = AhAttr {
        dgid,
        port_num: 1,
        is_global: true,
        ..AhAttr::default()
    };
    qp.modify(
        &rtr,
        qp_attr::STATE
            | qp_attr::AV
            | qp_attr::PATH_MTU
            | qp_attr::DEST_QPN
            | qp_attr::RQ_PSN
            | qp_attr::MAX_DEST_RD_ATOMIC
            | qp_attr::MIN_RNR_TIMER,
    )
    .expect("RTR");
    let rts = QpAttr {
        qp_state: QpState::Rts,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 16,
        ..QpAttr::default()
    };
    qp.modify(
        &rts,
        qp_attr::STATE
            | qp_attr::SQ_PSN
            | qp_attr::TIMEOUT
            | qp_attr::RETRY_CNT
            | qp_attr::RNR_RETRY
            | qp_attr::MAX_QP_RD_ATOMIC,
    )
    .expect("RTS");
}

impl Setup {
    pub fn new(p: &Params) -> Setup {
        let (devs, ca, cb) = match p.wire {
            Wire::Loopback => {
                let dev = EmuDevice::new(EmuConfig::default(), p.mode);
                let a = Context::open(dev.hal()).expect("open");
                let b = a.open_another().expect("a second context");
                (vec![dev], a, b)
            }
            Wire::Switch => {
                let sw = Switch::new();
                let devs: Vec<Arc<EmuDevice>> = (1..=2u8)
                    .map(|n| {
                        let cfg = EmuConfig {
                            mac: [0x02, 0, 0, 0, 0, n],
                            ipv4: [192, 0, 2, n],
                            ..EmuConfig::default()
                        };
                        EmuDevice::builder(cfg)
                            .mode(p.mode)
                            .wire(sw.port())
                            .build()
                            .expect("device")
                    })
                    .collect();
                let a = Context::open(devs[0].hal()).expect("open");
                let b = Context::open(devs[1].hal()).expect("open");
                (devs, a, b)
            }
        };
        let (a, b) = (side(ca, p), side(cb, p));
        let gid = |s: &Side| s.ctx.query_gid(1, 0).expect("GID 0");
        let (ga, gb) = (gid(&a), gid(&b));
        for (qa, qb) in a.qps.iter().zip(&b.qps) {
            connect(qa, gb, qb.qp_num(), p.mtu);
            connect(qb, ga, qa.qp_num(), p.mtu);
        }
        Setup { a, b, _devs: devs }
    }
}

//! The checks a modify makes before the provider sends it to its device:
//! the libibverbs attribute-mask rules of each state transition, then the
//! value of each attribute in the mask against the device and port.

use alloc::format;
use alloc::string::String;

use crate::attr::{DeviceAttr, PortAttr};
use crate::enums::{access, qp_attr, LinkLayer, QpState, QpType};
use crate::error::{Error, ErrorKind, Result};
use crate::qp::{AhAttr, QpAttr};
use crate::transition::qp_transition;

const MASK_NAMES: [(u32, &str); 21] = [
    (qp_attr::STATE, "STATE"),
    (qp_attr::CUR_STATE, "CUR_STATE"),
    (qp_attr::EN_SQD_ASYNC_NOTIFY, "EN_SQD_ASYNC_NOTIFY"),
    (qp_attr::ACCESS_FLAGS, "ACCESS_FLAGS"),
    (qp_attr::PKEY_INDEX, "PKEY_INDEX"),
    (qp_attr::PORT, "PORT"),
    (qp_attr::QKEY, "QKEY"),
    (qp_attr::AV, "AV"),
    (qp_attr::PATH_MTU, "PATH_MTU"),
    (qp_attr::TIMEOUT, "TIMEOUT"),
    (qp_attr::RETRY_CNT, "RETRY_CNT"),
    (qp_attr::RNR_RETRY, "RNR_RETRY"),
    (qp_attr::RQ_PSN, "RQ_PSN"),
    (qp_attr::MAX_QP_RD_ATOMIC, "MAX_QP_RD_ATOMIC"),
    (qp_attr::ALT_PATH, "ALT_PATH"),
    (qp_attr::MIN_RNR_TIMER, "MIN_RNR_TIMER"),
    (qp_attr::SQ_PSN, "SQ_PSN"),
    (qp_attr::MAX_DEST_RD_ATOMIC, "MAX_DEST_RD_ATOMIC"),
    (qp_attr::PATH_MIG_STATE, "PATH_MIG_STATE"),
    (qp_attr::CAP, "CAP"),
    (qp_attr::DEST_QPN, "DEST_QPN"),
];

/// Every defined mask bit.
const ALL_MASK: u32 = (qp_attr::DEST_QPN << 1) - 1;

/// `"PORT|ACCESS_FLAGS"` for a mask.
fn mask_names(mask: u32) -> String {
    let mut s = String::new();
    for (bit, name) in MASK_NAMES {
        if mask & bit != 0 {
            if !s.is_empty() {
                s.push('|');
            }
            s.push_str(name);
        }
    }
    s
}

/// What the value checks need to know about the device and the QP.
pub struct ModifyEnv<'a> {
    /// The device's attributes (its RDMA READ/atomic limits).
    pub dev: &'a DeviceAttr,
    /// Ports 1..=n (index 0 is port 1).
    pub ports: &'a [PortAttr],
    /// The QP's current state as the provider knows it.
    pub cur: QpState,
    /// The QP's port, 0 before INIT.
    pub port: u8,
    /// The QP's transport, whose transitions apply.
    pub qp_type: QpType,
}

/// A checked modify request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Modify {
    /// The caller's mask, with [`qp_attr::STATE`] always set.
    pub mask: u32,
    /// The state the QP moves to.
    pub next: QpState,
    /// The QP's port after the change.
    pub port: u8,
}

const PSN_LIMIT: u32 = 1 << 24;

/// Checks `attr`/`mask` for a QP of `env.qp_type`: the mask against the
/// transition's rules, then each attribute's value against the device and
/// port. Without `STATE` in the mask the QP stays in its state (the
/// kernel's rule); the checked mask always has `STATE`.
pub fn check_modify(attr: &QpAttr, mask: u32, env: &ModifyEnv<'_>) -> Result<Modify> {
    if mask & !ALL_MASK != 0 {
        return Err(Error::invalid(format!(
            "unknown QP attribute mask bits {:#x}",
            mask & !ALL_MASK
        )));
    }
    let next = if mask & qp_attr::STATE != 0 {
        attr.qp_state
    } else {
        env.cur
    };
    let mask = mask | qp_attr::STATE;
    let cur = if mask & qp_attr::CUR_STATE != 0 {
        attr.cur_qp_state
    } else {
        env.cur
    };
    let t = qp_transition(env.qp_type, cur, next).ok_or_else(|| {
        Error::invalid(format!("illegal QP state transition {cur:?} -> {next:?}"))
    })?;
    let missing = t.required & !mask;
    if missing != 0 {
        return Err(Error::invalid(format!(
            "QP transition {cur:?} -> {next:?} requires attributes {}",
            mask_names(missing)
        )));
    }
    let extra = mask & !(t.required | t.optional);
    if extra != 0 {
        return Err(Error::invalid(format!(
            "QP transition {cur:?} -> {next:?} does not allow attributes {}",
            mask_names(extra)
        )));
    }
    if mask & (qp_attr::ALT_PATH | qp_attr::PATH_MIG_STATE) != 0 {
        return Err(Error::new(
            ErrorKind::NotSupported,
            "alternate paths and path migration are not supported",
        ));
    }
    check_values(attr, mask, env)?;
    let port = if mask & qp_attr::PORT != 0 {
        attr.port_num
    } else {
        env.port
    };
    Ok(Modify { mask, next, port })
}

fn port_attr<'a>(ports: &'a [PortAttr], port: u8, what: &str) -> Result<&'a PortAttr> {
    usize::from(port)
        .checked_sub(1)
        .and_then(|i| ports.get(i))
        .ok_or_else(|| {
            Error::invalid(format!(
                "{what} {port} is not a port of the device (1..={})",
                ports.len()
            ))
        })
}

fn check_values(a: &QpAttr, mask: u32, env: &ModifyEnv<'_>) -> Result<()> {
    let has = |bit: u32| mask & bit != 0;
    let port = if has(qp_attr::PORT) {
        a.port_num
    } else {
        env.port
    };
    // Before the first INIT the QP has no port (0): RESET -> INIT requires
    // PORT, so the attributes that depend on it come with one.
    if has(qp_attr::PORT) {
        port_attr(env.ports, port, "port_num")?;
    }
    if has(qp_attr::PKEY_INDEX) {
        let p = port_attr(env.ports, port, "port_num")?;
        if a.pkey_index >= p.pkey_tbl_len {
            return Err(Error::invalid(format!(
                "pkey_index {} is outside port {port}'s P_Key table of {}",
                a.pkey_index, p.pkey_tbl_len
            )));
        }
    }
    if has(qp_attr::ACCESS_FLAGS) && a.qp_access_flags & !access::QP_SUPPORTED != 0 {
        return Err(Error::invalid(format!(
            "qp_access_flags {:#x} has bits outside REMOTE_WRITE|REMOTE_READ|REMOTE_ATOMIC",
            a.qp_access_flags
        )));
    }
    if has(qp_attr::PATH_MTU) {
        let Some(mtu) = a.path_mtu else {
            return Err(Error::invalid(
                "PATH_MTU is in the mask but path_mtu is None",
            ));
        };
        let p = port_attr(env.ports, port, "port_num")?;
        if mtu.raw() > p.max_mtu.raw() {
            return Err(Error::invalid(format!(
                "path_mtu {mtu:?} exceeds port {port}'s max_mtu {:?}",
                p.max_mtu
            )));
        }
    }
    if has(qp_attr::AV) {
        check_ah(&a.ah_attr, port, env.ports)?;
    }
    let limit = |bit: u32, name: &str, v: u32, max: u32| {
        if has(bit) && v > max {
            Err(Error::invalid(format!("{name} {v} exceeds {max}")))
        } else {
            Ok(())
        }
    };
    limit(
        qp_attr::DEST_QPN,
        "dest_qp_num",
        a.dest_qp_num,
        PSN_LIMIT - 1,
    )?;
    limit(qp_attr::RQ_PSN, "rq_psn", a.rq_psn, PSN_LIMIT - 1)?;
    limit(qp_attr::SQ_PSN, "sq_psn", a.sq_psn, PSN_LIMIT - 1)?;
    limit(qp_attr::TIMEOUT, "timeout", a.timeout.into(), 31)?;
    limit(
        qp_attr::MIN_RNR_TIMER,
        "min_rnr_timer",
        a.min_rnr_timer.into(),
        31,
    )?;
    limit(qp_attr::RETRY_CNT, "retry_cnt", a.retry_cnt.into(), 7)?;
    limit(qp_attr::RNR_RETRY, "rnr_retry", a.rnr_retry.into(), 7)?;
    limit(
        qp_attr::MAX_QP_RD_ATOMIC,
        "max_rd_atomic",
        a.max_rd_atomic.into(),
        env.dev.max_qp_init_rd_atom,
    )?;
    limit(
        qp_attr::MAX_DEST_RD_ATOMIC,
        "max_dest_rd_atomic",
        a.max_dest_rd_atomic.into(),
        env.dev.max_qp_rd_atom,
    )
}

/// Checks an address vector for a QP on `qp_port` (an address handle's
/// gives its own port).
pub fn check_ah(ah: &AhAttr, qp_port: u8, ports: &[PortAttr]) -> Result<()> {
    let port = if ah.port_num == 0 {
        qp_port
    } else {
        ah.port_num
    };
    let p = port_attr(ports, port, "ah_attr.port_num")?;
    if p.link_layer == LinkLayer::Ethernet && !ah.is_global {
        return Err(Error::invalid(
            "ah_attr.is_global must be set: RoCE paths carry a GRH",
        ));
    }
    if u32::from(ah.sgid_index) >= p.gid_tbl_len {
        return Err(Error::invalid(format!(
            "ah_attr.sgid_index {} is outside port {port}'s GID table of {}",
            ah.sgid_index, p.gid_tbl_len
        )));
    }
    if ah.flow_label >= 1 << 20 {
        return Err(Error::invalid(format!(
            "ah_attr.flow_label {:#x} exceeds 20 bits",
            ah.flow_label
        )));
    }
    if ah.sl > 15 {
        return Err(Error::invalid(format!("ah_attr.sl {} exceeds 15", ah.sl)));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::enums::{Mtu, PortState};

    fn dev() -> DeviceAttr {
        DeviceAttr {
            fw_ver: 0,
            node_guid: [0; 8],
            sys_image_guid: [0; 8],
            max_mr_size: 0,
            page_size_cap: 0,
            vendor_id: 0,
            vendor_part_id: 0,
            hw_ver: 0,
            max_qp: 0,
            max_qp_wr: 0,
            device_cap_flags: 0,
            max_sge: 0,
            max_sge_rd: 0,
            max_cq: 0,
            max_cqe: 0,
            max_mr: 0,
            max_pd: 0,
            max_qp_rd_atom: 4,
            max_qp_init_rd_atom: 2,
            max_inline_data: 0,
            atomic_cap: 0,
            phys_port_cnt: 1,
            max_msg_sz: 0,
            local_ca_ack_delay: 0,
            max_srq: 0,
            max_srq_wr: 0,
            max_srq_sge: 0,
        }
    }

    fn port() -> PortAttr {
        PortAttr {
            state: PortState::Active,
            max_mtu: Mtu::Mtu2048,
            active_mtu: Mtu::Mtu1024,
            link_layer: LinkLayer::Ethernet,
            gid_tbl_len: 4,
            port_cap_flags: 0,
            max_msg_sz: 0,
            bad_pkey_cntr: 0,
            qkey_viol_cntr: 0,
            pkey_tbl_len: 1,
            lid: 0,
            sm_lid: 0,
            lmc: 0,
            max_vl_num: 0,
            sm_sl: 0,
            subnet_timeout: 0,
            active_width: 0,
            active_speed: 0,
            phys_state: 5,
            mac: [0; 6],
        }
    }

    fn check(attr: &QpAttr, mask: u32, cur: QpState, qp_port: u8) -> Result<Modify> {
        let (dev, ports) = (dev(), [port()]);
        let env = ModifyEnv {
            dev: &dev,
            ports: &ports,
            cur,
            port: qp_port,
            qp_type: QpType::Rc,
        };
        check_modify(attr, mask, &env)
    }

    #[test]
    fn every_rc_transition_follows_the_table() {
        use QpState::*;
        let states = [Reset, Init, Rtr, Rts, Sqd, Sqe, Err];
        for cur in states {
            for next in states {
                let attr = QpAttr {
                    qp_state: next,
                    ..QpAttr::default()
                };
                let got = check(&attr, qp_attr::STATE, cur, 1);
                match qp_transition(QpType::Rc, cur, next) {
                    None => assert!(got.unwrap_err().message().contains("illegal")),
                    Some(t) if t.required == qp_attr::STATE => {
                        assert_eq!(got.unwrap().next, next, "{cur:?} -> {next:?}")
                    }
                    Some(_) => assert!(got.unwrap_err().message().contains("requires")),
                }
            }
        }
    }

    #[test]
    fn value_checks_use_the_device_and_port_limits() {
        let mut rtr = QpAttr {
            qp_state: QpState::Rtr,
            path_mtu: Some(Mtu::Mtu2048),
            max_dest_rd_atomic: 4,
            ..QpAttr::default()
        };
        rtr.ah_attr.is_global = true;
        rtr.ah_attr.sgid_index = 3;
        let mask = qp_attr::STATE
            | qp_attr::AV
            | qp_attr::PATH_MTU
            | qp_attr::DEST_QPN
            | qp_attr::RQ_PSN
            | qp_attr::MAX_DEST_RD_ATOMIC
            | qp_attr::MIN_RNR_TIMER;
        let m = check(&rtr, mask, QpState::Init, 1).unwrap();
        assert_eq!((m.next, m.port), (QpState::Rtr, 1));
        let bad = |a: QpAttr| check(&a, mask, QpState::Init, 1).unwrap_err();
        assert!(bad(QpAttr {
            path_mtu: Some(Mtu::Mtu4096),
            ..rtr
        })
        .message()
        .contains("max_mtu"));
        assert!(bad(QpAttr {
            max_dest_rd_atomic: 5,
            ..rtr
        })
        .message()
        .contains("max_dest_rd_atomic"));
        let mut a = rtr;
        a.ah_attr.port_num = 2;
        assert!(bad(a).message().contains("ah_attr.port_num"));
        let mut a = rtr;
        a.ah_attr.flow_label = 1 << 20;
        assert!(bad(a).message().contains("flow_label"));
        let mut a = rtr;
        a.ah_attr.sl = 16;
        assert!(bad(a).message().contains("sl"));

        let rts = QpAttr {
            qp_state: QpState::Rts,
            max_rd_atomic: 3,
            ..QpAttr::default()
        };
        let mask = qp_attr::STATE
            | qp_attr::SQ_PSN
            | qp_attr::TIMEOUT
            | qp_attr::RETRY_CNT
            | qp_attr::RNR_RETRY
            | qp_attr::MAX_QP_RD_ATOMIC;
        let e = check(&rts, mask, QpState::Rtr, 1).unwrap_err();
        assert!(e.message().contains("max_rd_atomic 3 exceeds 2"), "{e}");
        let e = check(&rts, mask | qp_attr::ALT_PATH, QpState::Rtr, 1).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::NotSupported);
    }

    #[test]
    fn mask_names_join_with_bars() {
        assert_eq!(
            mask_names(qp_attr::PORT | qp_attr::DEST_QPN),
            "PORT|DEST_QPN"
        );
        assert_eq!(ALL_MASK, 0x1f_ffff);
    }
}

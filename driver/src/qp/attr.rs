//! QP attributes (`struct ibv_qp_attr`) and the checks `modify` makes
//! before sending MODIFY_QP: the libibverbs attribute-mask rules of each
//! state transition, then the value of each attribute in the mask.

use alloc::format;
use alloc::string::String;
use rnic_hw_regs::cmd::{AddressVector, QpAttrs};
use rnic_hw_regs::{le16, le32};
use rnic_verbs::{access, qp_attr, qp_transition, LinkLayer, Mtu, QpState, QpType};

use crate::attr::{DeviceAttr, Gid, PortAttr};
use crate::error::{Error, ErrorKind, Result};
use crate::qp::QpCap;

/// Address vector of the primary path (`struct ibv_ah_attr` with its GRH),
/// RoCE form.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AhAttr {
    /// Destination GID, network byte order.
    pub dgid: Gid,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Source GID table index.
    pub sgid_index: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Service level (4 bits).
    pub sl: u8,
    /// Destination MAC, network byte order.
    pub dmac: [u8; 6],
    /// Port, from 1; 0 means the QP's port.
    pub port_num: u8,
    /// A GRH is present (required on RoCE).
    pub is_global: bool,
}

/// QP attributes (`struct ibv_qp_attr`): the input of [`crate::Qp::modify`]
/// (only the fields named in the mask are used) and the output of
/// [`crate::Qp::query`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QpAttr {
    /// The state to move to (modify) or the current state (query).
    pub qp_state: QpState,
    /// The state the caller believes the QP is in (`CUR_STATE`).
    pub cur_qp_state: QpState,
    /// Path MTU; `None` before it was set.
    pub path_mtu: Option<Mtu>,
    /// [`access`] `REMOTE_*` flags allowed to remote requesters.
    pub qp_access_flags: u32,
    /// P_Key index.
    pub pkey_index: u16,
    /// Port, from 1.
    pub port_num: u8,
    /// Q_Key (UD only).
    pub qkey: u32,
    /// Primary path.
    pub ah_attr: AhAttr,
    /// Minimum RNR NAK timer (5-bit code).
    pub min_rnr_timer: u8,
    /// Local ACK timeout (5-bit code, 0 = infinite).
    pub timeout: u8,
    /// Transport retry count, at most 7.
    pub retry_cnt: u8,
    /// RNR retry count, at most 7 (7 = infinite).
    pub rnr_retry: u8,
    /// Outstanding RDMA READ/atomics as requester.
    pub max_rd_atomic: u8,
    /// Outstanding RDMA READ/atomics as responder.
    pub max_dest_rd_atomic: u8,
    /// Send PSN (24 bits).
    pub sq_psn: u32,
    /// Expected receive PSN (24 bits).
    pub rq_psn: u32,
    /// Destination QP number (24 bits).
    pub dest_qp_num: u32,
    /// Moving to SQD: ask for [`crate::EventType::SqDrained`] once the
    /// send queue is drained (`EN_SQD_ASYNC_NOTIFY`).
    pub en_sqd_async_notify: bool,
    /// Query: the QP is in SQD and its send queue is still draining.
    pub sq_draining: bool,
    /// Queue capacities (query only; not modifiable).
    pub cap: QpCap,
}

impl Default for QpAttr {
    fn default() -> Self {
        Self {
            qp_state: QpState::Reset,
            cur_qp_state: QpState::Reset,
            path_mtu: None,
            qp_access_flags: 0,
            pkey_index: 0,
            port_num: 0,
            qkey: 0,
            ah_attr: AhAttr::default(),
            min_rnr_timer: 0,
            timeout: 0,
            retry_cnt: 0,
            rnr_retry: 0,
            max_rd_atomic: 0,
            max_dest_rd_atomic: 0,
            sq_psn: 0,
            rq_psn: 0,
            dest_qp_num: 0,
            en_sqd_async_notify: false,
            sq_draining: false,
            cap: QpCap::default(),
        }
    }
}

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
pub(crate) struct ModifyEnv<'a> {
    pub(crate) dev: &'a DeviceAttr,
    pub(crate) ports: &'a [PortAttr],
    /// The QP's current state as the driver knows it.
    pub(crate) cur: QpState,
    /// The QP's port, 0 before INIT.
    pub(crate) port: u8,
    /// The QP's transport, whose transitions apply.
    pub(crate) qp_type: QpType,
}

/// A checked MODIFY_QP request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Modify {
    pub(crate) mask: u32,
    pub(crate) attrs: QpAttrs,
    pub(crate) next: QpState,
    /// The QP's port after the change.
    pub(crate) port: u8,
}

const PSN_LIMIT: u32 = 1 << 24;

/// Checks `attr`/`mask` for a QP of `env.qp_type` and builds the MODIFY_QP attributes.
/// Without `STATE` in the mask the QP stays in its state (the kernel's
/// rule); the command always carries `STATE`.
pub(crate) fn check_modify(attr: &QpAttr, mask: u32, env: &ModifyEnv<'_>) -> Result<Modify> {
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
    Ok(Modify {
        mask,
        attrs: wire_attrs(attr, mask, next, port),
        next,
        port,
    })
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
pub(crate) fn check_ah(ah: &AhAttr, qp_port: u8, ports: &[PortAttr]) -> Result<()> {
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

/// MODIFY_QP attributes: the fields in `mask`, zero elsewhere.
fn wire_attrs(a: &QpAttr, mask: u32, next: QpState, port: u8) -> QpAttrs {
    let pick = |bit: u32, v: u32| if mask & bit != 0 { v } else { 0 };
    let pick8 = |bit: u32, v: u8| if mask & bit != 0 { v } else { 0 };
    let ah = if mask & qp_attr::AV != 0 {
        let h = &a.ah_attr;
        AddressVector {
            dgid: h.dgid,
            flow_label: le32::from_ne(h.flow_label),
            sgid_index: h.sgid_index,
            hop_limit: h.hop_limit,
            traffic_class: h.traffic_class,
            sl: h.sl,
            dmac: h.dmac,
            port_num: if h.port_num == 0 { port } else { h.port_num },
            is_global: h.is_global.into(),
        }
    } else {
        AddressVector::default()
    };
    QpAttrs {
        qp_state: next.raw(),
        cur_qp_state: pick8(qp_attr::CUR_STATE, a.cur_qp_state.raw()),
        path_mtu: pick8(qp_attr::PATH_MTU, a.path_mtu.map_or(0, Mtu::raw)),
        port_num: pick8(qp_attr::PORT, a.port_num),
        qp_access_flags: le32::from_ne(pick(qp_attr::ACCESS_FLAGS, a.qp_access_flags)),
        pkey_index: le16::from_ne(pick(qp_attr::PKEY_INDEX, a.pkey_index.into()) as u16),
        min_rnr_timer: pick8(qp_attr::MIN_RNR_TIMER, a.min_rnr_timer),
        timeout: pick8(qp_attr::TIMEOUT, a.timeout),
        retry_cnt: pick8(qp_attr::RETRY_CNT, a.retry_cnt),
        rnr_retry: pick8(qp_attr::RNR_RETRY, a.rnr_retry),
        max_rd_atomic: pick8(qp_attr::MAX_QP_RD_ATOMIC, a.max_rd_atomic),
        max_dest_rd_atomic: pick8(qp_attr::MAX_DEST_RD_ATOMIC, a.max_dest_rd_atomic),
        sq_psn: le32::from_ne(pick(qp_attr::SQ_PSN, a.sq_psn)),
        rq_psn: le32::from_ne(pick(qp_attr::RQ_PSN, a.rq_psn)),
        dest_qp_num: le32::from_ne(pick(qp_attr::DEST_QPN, a.dest_qp_num)),
        qkey: le32::from_ne(pick(qp_attr::QKEY, a.qkey)),
        ah,
        en_sqd_async_notify: pick8(qp_attr::EN_SQD_ASYNC_NOTIFY, a.en_sqd_async_notify.into()),
        sq_draining: 0,
        reserved: [0; 2],
    }
}

/// Decodes QUERY_QP's output.
pub(crate) fn from_wire(w: &QpAttrs, cap: QpCap) -> Result<QpAttr> {
    let state = QpState::from_raw(w.qp_state).ok_or_else(|| {
        Error::new(
            ErrorKind::Io,
            format!("QUERY_QP returned an invalid state {}", w.qp_state),
        )
    })?;
    let ah = &w.ah;
    Ok(QpAttr {
        qp_state: state,
        cur_qp_state: state,
        path_mtu: Mtu::from_raw(w.path_mtu),
        qp_access_flags: w.qp_access_flags.to_ne(),
        pkey_index: w.pkey_index.to_ne(),
        port_num: w.port_num,
        qkey: w.qkey.to_ne(),
        ah_attr: AhAttr {
            dgid: ah.dgid,
            flow_label: ah.flow_label.to_ne(),
            sgid_index: ah.sgid_index,
            hop_limit: ah.hop_limit,
            traffic_class: ah.traffic_class,
            sl: ah.sl,
            dmac: ah.dmac,
            port_num: ah.port_num,
            is_global: ah.is_global != 0,
        },
        min_rnr_timer: w.min_rnr_timer,
        timeout: w.timeout,
        retry_cnt: w.retry_cnt,
        rnr_retry: w.rnr_retry,
        max_rd_atomic: w.max_rd_atomic,
        max_dest_rd_atomic: w.max_dest_rd_atomic,
        sq_psn: w.sq_psn.to_ne(),
        rq_psn: w.rq_psn.to_ne(),
        dest_qp_num: w.dest_qp_num.to_ne(),
        en_sqd_async_notify: w.en_sqd_async_notify != 0,
        sq_draining: w.sq_draining != 0,
        cap,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use rnic_verbs::PortState;

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
    fn attributes_outside_the_mask_are_zeroed() {
        let attr = QpAttr {
            qp_state: QpState::Init,
            port_num: 1,
            qp_access_flags: access::REMOTE_READ,
            sq_psn: 99,
            dest_qp_num: 77,
            path_mtu: Some(Mtu::Mtu512),
            ..QpAttr::default()
        };
        let mask = qp_attr::STATE | qp_attr::PKEY_INDEX | qp_attr::PORT | qp_attr::ACCESS_FLAGS;
        let m = check(&attr, mask, QpState::Reset, 0).unwrap();
        assert_eq!(m.port, 1);
        assert_eq!(m.attrs.qp_state, QpState::Init.raw());
        assert_eq!(m.attrs.port_num, 1);
        assert_eq!(m.attrs.qp_access_flags.to_ne(), access::REMOTE_READ);
        assert_eq!(m.attrs.sq_psn.to_ne(), 0);
        assert_eq!(m.attrs.dest_qp_num.to_ne(), 0);
        assert_eq!(m.attrs.path_mtu, 0);
        assert_eq!(m.attrs.ah, AddressVector::default());
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
        assert_eq!(m.attrs.ah.port_num, 1, "AV port 0 means the QP's port");
        assert_eq!(m.attrs.path_mtu, Mtu::Mtu2048.raw());
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

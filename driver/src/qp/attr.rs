//! rnic's MODIFY_QP and QUERY_QP attributes (`QpAttrs`) from and to the
//! verbs core's [`QpAttr`].

use alloc::format;
use rnic_hw_regs::cmd::{AddressVector, QpAttrs};
use rnic_hw_regs::{le16, le32};
use rnic_verbs::{qp_attr, AhAttr, Mtu, QpAttr, QpCap, QpState};

use crate::error::{Error, ErrorKind, Result};

/// MODIFY_QP attributes: the fields in `mask`, zero elsewhere.
pub(crate) fn wire_attrs(a: &QpAttr, mask: u32, next: QpState, port: u8) -> QpAttrs {
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
    use rnic_verbs::access;

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
        let w = wire_attrs(&attr, mask, QpState::Init, 1);
        assert_eq!(w.qp_state, QpState::Init.raw());
        assert_eq!(w.port_num, 1);
        assert_eq!(w.qp_access_flags.to_ne(), access::REMOTE_READ);
        assert_eq!(w.sq_psn.to_ne(), 0);
        assert_eq!(w.dest_qp_num.to_ne(), 0);
        assert_eq!(w.path_mtu, 0);
        assert_eq!(w.ah, AddressVector::default());
    }

    #[test]
    fn an_address_vector_on_port_0_takes_the_qps_port() {
        let mut attr = QpAttr {
            qp_state: QpState::Rtr,
            path_mtu: Some(Mtu::Mtu2048),
            ..QpAttr::default()
        };
        attr.ah_attr.is_global = true;
        let w = wire_attrs(
            &attr,
            qp_attr::STATE | qp_attr::AV | qp_attr::PATH_MTU,
            QpState::Rtr,
            2,
        );
        assert_eq!((w.ah.port_num, w.ah.is_global), (2, 1));
        assert_eq!(w.path_mtu, Mtu::Mtu2048.raw());
    }
}

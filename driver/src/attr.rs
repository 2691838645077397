//! Device and port attributes from QUERY_DEVICE and QUERY_PORT.

use alloc::format;
use rnic_hw_regs::cmd::{QueryDeviceOut, QueryPortOut};
use rnic_verbs::{DeviceAttr, LinkLayer, Mtu, PortAttr, PortState};

use crate::error::{Error, ErrorKind, Result};

/// Decodes QUERY_DEVICE's output.
pub(crate) fn device_attr(o: &QueryDeviceOut) -> DeviceAttr {
    DeviceAttr {
        fw_ver: o.fw_ver.to_ne(),
        node_guid: o.node_guid,
        sys_image_guid: o.sys_image_guid,
        max_mr_size: o.max_mr_size.to_ne(),
        page_size_cap: o.page_size_cap.to_ne(),
        vendor_id: o.vendor_id.to_ne(),
        vendor_part_id: o.vendor_part_id.to_ne(),
        hw_ver: o.hw_ver.to_ne(),
        max_qp: o.max_qp.to_ne(),
        max_qp_wr: o.max_qp_wr.to_ne(),
        device_cap_flags: o.device_cap_flags.to_ne(),
        max_sge: o.max_sge.to_ne(),
        max_sge_rd: o.max_sge_rd.to_ne(),
        max_cq: o.max_cq.to_ne(),
        max_cqe: o.max_cqe.to_ne(),
        max_mr: o.max_mr.to_ne(),
        max_pd: o.max_pd.to_ne(),
        max_qp_rd_atom: o.max_qp_rd_atom.to_ne(),
        max_qp_init_rd_atom: o.max_qp_init_rd_atom.to_ne(),
        max_inline_data: o.max_inline_data.to_ne(),
        atomic_cap: o.atomic_cap.to_ne(),
        phys_port_cnt: o.phys_port_cnt.to_ne(),
        max_msg_sz: o.max_msg_sz.to_ne(),
        local_ca_ack_delay: o.local_ca_ack_delay.to_ne(),
        max_srq: o.max_srq.to_ne(),
        // An SRQ's list ends at a slot it does not fill.
        max_srq_wr: o.max_srq_wr.to_ne().saturating_sub(1),
        max_srq_sge: o.max_srq_sge.to_ne(),
    }
}

/// Decodes QUERY_PORT's output; an out-of-range enumeration value is a
/// device error.
pub(crate) fn port_attr(port: u8, o: &QueryPortOut) -> Result<PortAttr> {
    let bad = |what: &str, v: u8| {
        Error::new(
            ErrorKind::Io,
            format!("QUERY_PORT({port}) returned an invalid {what} value {v}"),
        )
    };
    Ok(PortAttr {
        state: PortState::from_raw(o.state).ok_or_else(|| bad("state", o.state))?,
        max_mtu: Mtu::from_raw(o.max_mtu).ok_or_else(|| bad("max_mtu", o.max_mtu))?,
        active_mtu: Mtu::from_raw(o.active_mtu).ok_or_else(|| bad("active_mtu", o.active_mtu))?,
        link_layer: LinkLayer::from_raw(o.link_layer)
            .ok_or_else(|| bad("link_layer", o.link_layer))?,
        gid_tbl_len: o.gid_tbl_len.to_ne(),
        port_cap_flags: o.port_cap_flags.to_ne(),
        max_msg_sz: o.max_msg_sz.to_ne(),
        bad_pkey_cntr: o.bad_pkey_cntr.to_ne(),
        qkey_viol_cntr: o.qkey_viol_cntr.to_ne(),
        pkey_tbl_len: o.pkey_tbl_len.to_ne(),
        lid: o.lid.to_ne(),
        sm_lid: o.sm_lid.to_ne(),
        lmc: o.lmc,
        max_vl_num: o.max_vl_num,
        sm_sl: o.sm_sl,
        subnet_timeout: o.subnet_timeout,
        active_width: o.active_width,
        active_speed: o.active_speed,
        phys_state: o.phys_state,
        mac: o.mac,
    })
}

//! Device and port attributes (`ibv_device_attr`, `ibv_port_attr`).

use alloc::format;
use rnic_hw_regs::cmd::{QueryDeviceOut, QueryPortOut};
use rnic_verbs::{LinkLayer, Mtu, PortState};

use crate::error::{Error, ErrorKind, Result};

/// A GID, in network byte order.
pub type Gid = [u8; 16];

/// Device attributes (`struct ibv_device_attr`), from QUERY_DEVICE.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Firmware version.
    pub fw_ver: u64,
    /// Node GUID, network byte order.
    pub node_guid: [u8; 8],
    /// System image GUID, network byte order.
    pub sys_image_guid: [u8; 8],
    /// Largest MR in bytes.
    pub max_mr_size: u64,
    /// Supported page sizes (bit n = 2^n bytes).
    pub page_size_cap: u64,
    /// PCI vendor ID.
    pub vendor_id: u32,
    /// PCI device ID.
    pub vendor_part_id: u32,
    /// Hardware revision.
    pub hw_ver: u32,
    /// Number of QPs.
    pub max_qp: u32,
    /// Largest work queue, in work requests.
    pub max_qp_wr: u32,
    /// `IBV_DEVICE_*` capability flags.
    pub device_cap_flags: u32,
    /// Largest scatter/gather list in a send or receive request.
    pub max_sge: u32,
    /// Largest scatter list in an RDMA READ.
    pub max_sge_rd: u32,
    /// Number of CQs.
    pub max_cq: u32,
    /// Largest CQ, in entries.
    pub max_cqe: u32,
    /// Number of MRs.
    pub max_mr: u32,
    /// Number of PDs.
    pub max_pd: u32,
    /// Outstanding RDMA READ/atomics a QP accepts as responder.
    pub max_qp_rd_atom: u32,
    /// Outstanding RDMA READ/atomics a QP issues as requester.
    pub max_qp_init_rd_atom: u32,
    /// Largest inline payload in bytes.
    pub max_inline_data: u32,
    /// `enum ibv_atomic_cap` value.
    pub atomic_cap: u32,
    /// Number of ports.
    pub phys_port_cnt: u32,
    /// Largest message in bytes.
    pub max_msg_sz: u32,
    /// Local CA ACK delay.
    pub local_ca_ack_delay: u32,
    /// Number of shared receive queues (0: none).
    pub max_srq: u32,
    /// Largest shared receive queue, in work requests.
    pub max_srq_wr: u32,
    /// Largest scatter list in a shared receive queue's request.
    pub max_srq_sge: u32,
}

impl From<&QueryDeviceOut> for DeviceAttr {
    fn from(o: &QueryDeviceOut) -> Self {
        Self {
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
            max_srq_wr: o.max_srq_wr.to_ne(),
            max_srq_sge: o.max_srq_sge.to_ne(),
        }
    }
}

/// Port attributes (`struct ibv_port_attr`), from QUERY_PORT.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortAttr {
    /// Logical port state.
    pub state: PortState,
    /// Largest MTU the port supports.
    pub max_mtu: Mtu,
    /// MTU in use.
    pub active_mtu: Mtu,
    /// Link layer.
    pub link_layer: LinkLayer,
    /// GID table length.
    pub gid_tbl_len: u32,
    /// `IBV_PORT_*` capability flags.
    pub port_cap_flags: u32,
    /// Largest message in bytes.
    pub max_msg_sz: u32,
    /// Bad P_Key counter.
    pub bad_pkey_cntr: u32,
    /// Q_Key violation counter.
    pub qkey_viol_cntr: u32,
    /// P_Key table length.
    pub pkey_tbl_len: u16,
    /// LID (0 on RoCE).
    pub lid: u16,
    /// Subnet manager LID (0 on RoCE).
    pub sm_lid: u16,
    /// LMC.
    pub lmc: u8,
    /// Number of VLs.
    pub max_vl_num: u8,
    /// Subnet manager SL.
    pub sm_sl: u8,
    /// Subnet timeout.
    pub subnet_timeout: u8,
    /// Active link width (`IBV_WIDTH_*`).
    pub active_width: u8,
    /// Active link speed (`IBV_SPEED_*`).
    pub active_speed: u8,
    /// Physical port state (5 = LinkUp).
    pub phys_state: u8,
    /// Port MAC address, network byte order.
    pub mac: [u8; 6],
}

impl PortAttr {
    /// Decodes QUERY_PORT's output; an out-of-range enumeration value is a
    /// device error.
    pub(crate) fn decode(port: u8, o: &QueryPortOut) -> Result<Self> {
        let bad = |what: &str, v: u8| {
            Error::new(
                ErrorKind::Io,
                format!("QUERY_PORT({port}) returned an invalid {what} value {v}"),
            )
        };
        Ok(Self {
            state: PortState::from_raw(o.state).ok_or_else(|| bad("state", o.state))?,
            max_mtu: Mtu::from_raw(o.max_mtu).ok_or_else(|| bad("max_mtu", o.max_mtu))?,
            active_mtu: Mtu::from_raw(o.active_mtu)
                .ok_or_else(|| bad("active_mtu", o.active_mtu))?,
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
}

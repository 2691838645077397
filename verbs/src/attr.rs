//! Device and port attributes (`ibv_device_attr`, `ibv_port_attr`).

use crate::enums::{LinkLayer, Mtu, PortState};

/// A GID, in network byte order.
pub type Gid = [u8; 16];

/// Device attributes (`struct ibv_device_attr`).
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

/// Port attributes (`struct ibv_port_attr`).
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

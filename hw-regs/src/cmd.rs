//! The command queue: entry layout, opcodes, statuses, and the input and
//! output of every command.
//!
//! The command queue is a ring of `1 << CMDQ_CTRL.log_size` [`CmdEntry`]s
//! (512 bytes each) at `CMDQ_BASE`. To issue a command the driver fills the
//! entry at its producer index with the opcode and input, sets
//! [`CmdHeader::owner`] to 1 (device-owned), issues a release fence, and writes
//! its new free-running producer index to `CMDQ_DB`. The device executes
//! entries in order, writes the output and status, and then (after a release
//! fence) clears the owner byte. The driver polls the owner byte, then reads
//! status and output after an acquire fence.
//!
//! Inputs and outputs are little-endian structs at offsets
//! [`CMD_IN_OFFSET`] and [`CMD_OUT_OFFSET`] of the entry. A field that a
//! command does not use must be zero.

use endian_num::{le16, le32, le64};
use static_assertions::{assert_eq_size, const_assert, const_assert_eq};

use rnic_queues::wire_enum;

/// Size of one command entry.
pub const CMD_ENTRY_SIZE: usize = 512;
/// Offset of the input area in an entry.
pub const CMD_IN_OFFSET: usize = 16;
/// Size of the input area.
pub const CMD_IN_SIZE: usize = 240;
/// Offset of the output area in an entry.
pub const CMD_OUT_OFFSET: usize = 256;
/// Size of the output area.
pub const CMD_OUT_SIZE: usize = 256;
/// Value of [`CmdHeader::owner`] while the device owns the entry.
pub const OWNER_DEVICE: u8 = 1;
/// "No object" value for optional object numbers (SRQN, EQN).
pub const NONE: u32 = 0xFFFF_FFFF;

wire_enum! {
    /// Command opcodes.
    CmdOpcode: u16 {
        /// Read device attributes: [`QueryDeviceOut`].
        QueryDevice = 0x0100,
        /// Read port attributes: [`QueryPortIn`] / [`QueryPortOut`].
        QueryPort = 0x0101,
        /// Read a GID table entry: [`QueryGidIn`] / [`QueryGidOut`].
        QueryGid = 0x0102,
        /// Set a GID table entry: [`SetGidIn`].
        SetGid = 0x0103,
        /// Create a protection domain: [`CreatePdOut`].
        CreatePd = 0x0200,
        /// Destroy a protection domain: [`ObjIn`] (PDN).
        DestroyPd = 0x0201,
        /// Register a memory region: [`RegMrIn`] / [`RegMrOut`].
        RegMr = 0x0210,
        /// Deregister a memory region: [`ObjIn`] (lkey).
        DeregMr = 0x0211,
        /// Change a memory region: [`ReregMrIn`] (device 1.3).
        ReregMr = 0x0212,
        /// Allocate a memory window: [`AllocMwIn`] / [`AllocMwOut`] (device
        /// 1.3).
        AllocMw = 0x0213,
        /// Deallocate a memory window: [`ObjIn`] (rkey) (device 1.3).
        DeallocMw = 0x0214,
        /// Create a completion queue: [`CreateCqIn`] / [`CreateCqOut`].
        CreateCq = 0x0300,
        /// Destroy a completion queue: [`ObjIn`] (CQN).
        DestroyCq = 0x0301,
        /// Resize a completion queue: [`ResizeCqIn`] (device 1.3).
        ResizeCq = 0x0302,
        /// Create a queue pair: [`CreateQpIn`] / [`CreateQpOut`].
        CreateQp = 0x0400,
        /// Modify a queue pair: [`ModifyQpIn`].
        ModifyQp = 0x0401,
        /// Query a queue pair: [`ObjIn`] (QPN) / [`QpAttrs`].
        QueryQp = 0x0402,
        /// Destroy a queue pair: [`ObjIn`] (QPN).
        DestroyQp = 0x0403,
        /// Create a shared receive queue: [`CreateSrqIn`] / [`CreateSrqOut`]
        /// (device 1.3; earlier versions answer `BadOpcode`).
        CreateSrq = 0x0500,
        /// Destroy a shared receive queue: [`ObjIn`] (SRQN).
        DestroySrq = 0x0501,
        /// Modify a shared receive queue: [`ModifySrqIn`].
        ModifySrq = 0x0502,
        /// Query a shared receive queue: [`ObjIn`] (SRQN) / [`QuerySrqOut`].
        QuerySrq = 0x0503,
        /// Create a completion event queue: [`CreateEqIn`] / [`CreateEqOut`]
        /// (device 1.3; earlier versions answer `BadOpcode`).
        CreateEq = 0x0600,
        /// Destroy a completion event queue: [`ObjIn`] (EQN).
        DestroyEq = 0x0601,
        /// Open a user context: [`AllocUctxIn`] / [`AllocUctxOut`] (device
        /// 1.3).
        AllocUctx = 0x0800,
        /// Close a user context, destroying its objects: [`ObjIn`] (uid)
        /// (device 1.3).
        DeallocUctx = 0x0801,
        /// Read a port's or a QP's counters:
        /// [`crate::counters::QueryCountersIn`] /
        /// [`crate::counters::CountersOut`] (device 1.1).
        QueryCounters = 0x0700,
    }
}

wire_enum! {
    /// Command completion statuses, in [`CmdHeader::status`].
    CmdStatus: u8 {
        /// Success.
        Ok = 0,
        /// Unknown or unimplemented opcode.
        BadOpcode = 1,
        /// An input field is out of range or inconsistent.
        BadParam = 2,
        /// The object is not in a state that allows the command (e.g. an
        /// illegal QP state transition).
        BadState = 3,
        /// An object number names no object of that type.
        BadResource = 4,
        /// The object is still in use (a PD with MRs or QPs, a CQ with QPs).
        Busy = 5,
        /// No free object of that type.
        NoResources = 6,
        /// An IOVA in the input is not mapped by the IOMMU.
        BadDma = 7,
        /// Internal device error.
        Internal = 8,
    }
}

/// First 16 bytes of a command entry.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CmdHeader {
    /// [`CmdOpcode`] value.
    pub opcode: le16,
    /// Opcode modifier, zero for every current command.
    pub op_mod: le16,
    /// [`CmdStatus`] value, written by the device.
    pub status: u8,
    /// Token chosen by the driver, left unchanged by the device (lets a
    /// driver match a completed entry to its request).
    pub token: u8,
    /// Reserved, zero.
    pub reserved0: u8,
    /// [`OWNER_DEVICE`] while the device owns the entry; 0 when done.
    pub owner: u8,
    /// Detail for a failed command: the byte offset into the input of the
    /// offending field, plus 1 (0 = no detail).
    pub syndrome: le32,
    /// The user context issuing the command (device 1.3; 0: none). Its
    /// objects are invisible to commands of other contexts.
    pub uid: le32,
}

/// One command queue entry.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct CmdEntry {
    /// Header.
    pub hdr: CmdHeader,
    /// Input area.
    pub input: [u8; CMD_IN_SIZE],
    /// Output area.
    pub output: [u8; CMD_OUT_SIZE],
}

/// Offset of [`CmdHeader::owner`] in an entry.
pub const CMD_OWNER_OFFSET: usize = 7;
/// Offset of [`CmdHeader::status`] in an entry.
pub const CMD_STATUS_OFFSET: usize = 4;

/// Input naming one object (PDN, lkey, CQN or QPN).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ObjIn {
    /// The object's number or key.
    pub id: le32,
}

/// Output of QUERY_DEVICE (`struct ibv_device_attr`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct QueryDeviceOut {
    /// Firmware version.
    pub fw_ver: le64,
    /// Node GUID, network byte order.
    pub node_guid: [u8; 8],
    /// System image GUID, network byte order.
    pub sys_image_guid: [u8; 8],
    /// Largest MR.
    pub max_mr_size: le64,
    /// Supported page sizes (bit n = 2^n bytes).
    pub page_size_cap: le64,
    /// PCI vendor ID.
    pub vendor_id: le32,
    /// PCI device ID.
    pub vendor_part_id: le32,
    /// Hardware revision.
    pub hw_ver: le32,
    /// Number of QPs.
    pub max_qp: le32,
    /// Largest work queue, in WRs.
    pub max_qp_wr: le32,
    /// `IBV_DEVICE_*` capability flags.
    pub device_cap_flags: le32,
    /// Largest SGL in a send or receive WR.
    pub max_sge: le32,
    /// Largest SGL in an RDMA READ.
    pub max_sge_rd: le32,
    /// Number of CQs.
    pub max_cq: le32,
    /// Largest CQ, in CQEs.
    pub max_cqe: le32,
    /// Number of MRs.
    pub max_mr: le32,
    /// Number of PDs.
    pub max_pd: le32,
    /// Outstanding RDMA READ/atomics a QP accepts as responder.
    pub max_qp_rd_atom: le32,
    /// Outstanding RDMA READ/atomics a QP issues as requester.
    pub max_qp_init_rd_atom: le32,
    /// Largest inline payload.
    pub max_inline_data: le32,
    /// `enum ibv_atomic_cap`.
    pub atomic_cap: le32,
    /// Number of ports.
    pub phys_port_cnt: le32,
    /// Largest message.
    pub max_msg_sz: le32,
    /// Local CA ACK delay (log2 of 4.096 µs units).
    pub local_ca_ack_delay: le32,
    /// Number of SRQs (device 1.3; 0 without `CAP_DEV.srq`).
    pub max_srq: le32,
    /// Largest SRQ, in WRs.
    pub max_srq_wr: le32,
    /// Largest SGL in an SRQ receive WR.
    pub max_srq_sge: le32,
}

/// Input of QUERY_PORT.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct QueryPortIn {
    /// Port number, from 1.
    pub port: le32,
}

/// Output of QUERY_PORT (`struct ibv_port_attr`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct QueryPortOut {
    /// `rnic_verbs::PortState`.
    pub state: u8,
    /// Largest MTU, `rnic_verbs::Mtu`.
    pub max_mtu: u8,
    /// Active MTU, `rnic_verbs::Mtu`.
    pub active_mtu: u8,
    /// `rnic_verbs::LinkLayer`.
    pub link_layer: u8,
    /// GID table length.
    pub gid_tbl_len: le32,
    /// `IBV_PORT_*` capability flags.
    pub port_cap_flags: le32,
    /// Largest message.
    pub max_msg_sz: le32,
    /// Bad P_Key counter.
    pub bad_pkey_cntr: le32,
    /// Q_Key violation counter.
    pub qkey_viol_cntr: le32,
    /// P_Key table length.
    pub pkey_tbl_len: le16,
    /// LID (0 on RoCE).
    pub lid: le16,
    /// Subnet manager LID (0 on RoCE).
    pub sm_lid: le16,
    /// LMC.
    pub lmc: u8,
    /// Number of VLs.
    pub max_vl_num: u8,
    /// Subnet manager SL.
    pub sm_sl: u8,
    /// Subnet timeout.
    pub subnet_timeout: u8,
    /// Active link width (`IBV_WIDTH_*` bit).
    pub active_width: u8,
    /// Active link speed (`IBV_SPEED_*` value).
    pub active_speed: u8,
    /// Physical state (5 = LinkUp).
    pub phys_state: u8,
    /// Reserved, zero.
    pub reserved0: [u8; 3],
    /// Port MAC address, network byte order.
    pub mac: [u8; 6],
    /// Reserved, zero.
    pub reserved1: [u8; 2],
}

/// Input of QUERY_GID.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct QueryGidIn {
    /// Port number, from 1.
    pub port: le32,
    /// GID table index.
    pub index: le32,
}

/// Output of QUERY_GID.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct QueryGidOut {
    /// The GID, network byte order; all zero for an empty entry.
    pub gid: [u8; 16],
    /// `rnic_verbs::GidType`.
    pub gid_type: u8,
    /// 1 if the entry is valid.
    pub valid: u8,
    /// Reserved, zero.
    pub reserved: [u8; 2],
}

/// Input of SET_GID.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct SetGidIn {
    /// Port number, from 1.
    pub port: le32,
    /// GID table index.
    pub index: le32,
    /// The GID, network byte order; all zero clears the entry.
    pub gid: [u8; 16],
    /// `rnic_verbs::GidType`.
    pub gid_type: u8,
    /// Reserved, zero.
    pub reserved: [u8; 3],
}

/// Output of CREATE_PD.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CreatePdOut {
    /// The new PD number.
    pub pdn: le32,
}

/// Input of REG_MR.
///
/// The MR covers virtual addresses `[va, va + length)`, which the device
/// translates to IOVAs `[iova, iova + length)`: the driver has mapped the
/// buffer contiguously in IOVA space.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct RegMrIn {
    /// PD number.
    pub pdn: le32,
    /// `IBV_ACCESS_*` flags (`rnic_verbs::access`).
    pub access: le32,
    /// Start virtual address.
    pub va: le64,
    /// Length in bytes (may be 0).
    pub length: le64,
    /// IOVA of `va`.
    pub iova: le64,
}

/// Output of REG_MR. For MRs the lkey and rkey are equal: `index << 8 |
/// tag`, the tag changing each time the index is reused so that stale keys
/// miss.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct RegMrOut {
    /// Local key.
    pub lkey: le32,
    /// Remote key.
    pub rkey: le32,
}

/// `ReregMrIn::flags` bits (`enum ibv_rereg_mr_flags`).
pub mod rereg {
    /// `IBV_REREG_MR_CHANGE_TRANSLATION`: `va`, `length`, `iova`.
    pub const TRANSLATION: u32 = 1;
    /// `IBV_REREG_MR_CHANGE_PD`: `pdn`.
    pub const PD: u32 = 2;
    /// `IBV_REREG_MR_CHANGE_ACCESS`: `access`.
    pub const ACCESS: u32 = 4;
}

/// Input of REREG_MR (`ibv_rereg_mr`): the MR keeps its keys.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ReregMrIn {
    /// The MR's lkey.
    pub lkey: le32,
    /// [`rereg`] bits: what changes.
    pub flags: le32,
    /// New PD ([`rereg::PD`]).
    pub pdn: le32,
    /// New access flags ([`rereg::ACCESS`]).
    pub access: le32,
    /// New start address ([`rereg::TRANSLATION`]).
    pub va: le64,
    /// New length ([`rereg::TRANSLATION`]).
    pub length: le64,
    /// New IOVA of `va` ([`rereg::TRANSLATION`]).
    pub iova: le64,
}

/// Input of ALLOC_MW (`ibv_alloc_mw`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct AllocMwIn {
    /// PD number.
    pub pdn: le32,
    /// 1 (`IBV_MW_TYPE_1`) or 2 (`IBV_MW_TYPE_2`).
    pub mw_type: le32,
}

/// Output of ALLOC_MW.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct AllocMwOut {
    /// The window's rkey, `(index << 8) | key`; not bound.
    pub rkey: le32,
}

/// Input of CREATE_CQ.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CreateCqIn {
    /// log2 of the number of CQEs.
    pub log_size: le32,
    /// Doorbell page this CQ is armed through.
    pub uar_page: le32,
    /// EQ receiving this CQ's completion events: 0 (EQ 0, the only EQ in
    /// this version), or [`NONE`] for a CQ that is never armed.
    pub eqn: le32,
    /// Reserved, zero.
    pub reserved: le32,
    /// IOVA of the CQE ring (4 KiB aligned, zeroed).
    pub buf_iova: le64,
    /// IOVA of the CQ's doorbell record (8-byte aligned).
    pub dbrec_iova: le64,
}

/// Output of CREATE_CQ.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CreateCqOut {
    /// The new CQ number.
    pub cqn: le32,
}

/// Input of RESIZE_CQ (`ibv_resize_cq`): the CQ moves to a new ring and
/// doorbell record; the device moves the CQEs not yet consumed to their
/// indices in it.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ResizeCqIn {
    /// CQ number.
    pub cqn: le32,
    /// log2 of the new ring's CQEs.
    pub log_size: le32,
    /// IOVA of the new ring (4 KiB aligned, zeroed).
    pub buf_iova: le64,
    /// IOVA of the new doorbell record (8-byte aligned), holding the
    /// current consumer index.
    pub dbrec_iova: le64,
}

/// Input of CREATE_QP.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CreateQpIn {
    /// `rnic_verbs::QpType`.
    pub qp_type: u8,
    /// 1: every send WQE is signaled (`sq_sig_all`).
    pub sq_sig_all: u8,
    /// log2 of the receive WQE stride in bytes.
    pub log_rq_stride: u8,
    /// Reserved, zero.
    pub reserved0: u8,
    /// PD number.
    pub pdn: le32,
    /// CQ for send completions.
    pub send_cqn: le32,
    /// CQ for receive completions.
    pub recv_cqn: le32,
    /// SRQ number, or [`NONE`].
    pub srqn: le32,
    /// log2 of the send queue size in BBs.
    pub log_sq_bbs: le32,
    /// log2 of the receive queue size in WQEs (0 with an SRQ).
    pub log_rq_wqes: le32,
    /// Largest inline payload the driver will post.
    pub max_inline: le32,
    /// Doorbell page this QP is rung through.
    pub uar_page: le32,
    /// Reserved, zero.
    pub reserved1: le32,
    /// IOVA of the send queue (4 KiB aligned).
    pub sq_iova: le64,
    /// IOVA of the receive queue (4 KiB aligned).
    pub rq_iova: le64,
    /// IOVA of the QP's doorbell record (8-byte aligned).
    pub dbrec_iova: le64,
}

/// Output of CREATE_QP.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CreateQpOut {
    /// The new QP number (24 bits; 0 and 1 are reserved).
    pub qpn: le32,
}

/// Address vector (`struct ibv_ah_attr` with its GRH), RoCE form.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AddressVector {
    /// Destination GID, network byte order.
    pub dgid: [u8; 16],
    /// Flow label (20 bits).
    pub flow_label: le32,
    /// Source GID table index.
    pub sgid_index: u8,
    /// Hop limit (IP TTL).
    pub hop_limit: u8,
    /// Traffic class (IP DSCP/ECN).
    pub traffic_class: u8,
    /// Service level.
    pub sl: u8,
    /// Destination MAC, network byte order (resolved by the driver).
    pub dmac: [u8; 6],
    /// Port number, from 1.
    pub port_num: u8,
    /// 1: a GRH is present (always on RoCE).
    pub is_global: u8,
}

/// QP attributes (`struct ibv_qp_attr`): the input of MODIFY_QP and the
/// output of QUERY_QP.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QpAttrs {
    /// `rnic_verbs::QpState`: the new state (MODIFY_QP) or current state
    /// (QUERY_QP).
    pub qp_state: u8,
    /// `rnic_verbs::QpState` the caller believes the QP is in
    /// (`IBV_QP_CUR_STATE`).
    pub cur_qp_state: u8,
    /// `rnic_verbs::Mtu`.
    pub path_mtu: u8,
    /// Port number, from 1.
    pub port_num: u8,
    /// `IBV_ACCESS_REMOTE_*` flags allowed on this QP as responder.
    pub qp_access_flags: le32,
    /// P_Key index.
    pub pkey_index: le16,
    /// Minimum RNR NAK timer (5-bit encoded).
    pub min_rnr_timer: u8,
    /// Local ACK timeout (4.096 µs · 2^timeout; 0 = infinite).
    pub timeout: u8,
    /// Transport retry count (0..=7).
    pub retry_cnt: u8,
    /// RNR retry count (0..=7; 7 = infinite).
    pub rnr_retry: u8,
    /// Outstanding RDMA READ/atomics as requester.
    pub max_rd_atomic: u8,
    /// Outstanding RDMA READ/atomics as responder.
    pub max_dest_rd_atomic: u8,
    /// Send PSN (24 bits).
    pub sq_psn: le32,
    /// Expected receive PSN (24 bits).
    pub rq_psn: le32,
    /// Destination QP number (24 bits).
    pub dest_qp_num: le32,
    /// Q_Key (UD).
    pub qkey: le32,
    /// Primary path.
    pub ah: AddressVector,
    /// MODIFY_QP to SQD: 1 asks for an `SqDrained` event once the send
    /// queue is drained (`EN_SQD_ASYNC_NOTIFY`). QUERY_QP: as last set.
    pub en_sqd_async_notify: u8,
    /// QUERY_QP: 1 while the QP is in SQD and its send queue is not yet
    /// drained (`sq_draining`). MODIFY_QP: 0.
    pub sq_draining: u8,
    /// Reserved, zero.
    pub reserved: [u8; 2],
}

/// Input of MODIFY_QP.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ModifyQpIn {
    /// QP number.
    pub qpn: le32,
    /// `IBV_QP_*` mask ([`crate::verbs::qp_attr`]) of the fields to apply.
    pub attr_mask: le32,
    /// The attributes.
    pub attrs: QpAttrs,
}

/// Input of CREATE_SRQ. Receive WQEs on an SRQ have the receive WQE format
/// ([`crate::wqe::RecvWqeHdr`] and data segments); its doorbell record is a
/// little-endian 32-bit producer index, rung through
/// [`crate::uar::SRQ_DB`].
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CreateSrqIn {
    /// PD number: the receive WQEs' L_Keys are checked against it.
    pub pdn: le32,
    /// log2 of the number of receive WQEs.
    pub log_wqes: le32,
    /// log2 of the receive WQE stride in bytes.
    pub log_stride: le32,
    /// Limit: when fewer WQEs remain, an `SrqLimitReached` event fires
    /// (0 = off).
    pub srq_limit: le32,
    /// Doorbell page this SRQ is rung through.
    pub uar_page: le32,
    /// Reserved, zero.
    pub reserved: le32,
    /// IOVA of the receive WQE ring (4 KiB aligned).
    pub buf_iova: le64,
    /// IOVA of the SRQ's doorbell record (4-byte aligned).
    pub dbrec_iova: le64,
}

/// Output of CREATE_SRQ.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CreateSrqOut {
    /// The new SRQ number (24 bits).
    pub srqn: le32,
}

/// `ModifySrqIn::attr_mask` bits (`enum ibv_srq_attr_mask`).
pub mod srq_attr {
    /// `IBV_SRQ_MAX_WR`: resize the ring (`log_wqes`, `buf_iova`).
    pub const MAX_WR: u32 = 1;
    /// `IBV_SRQ_LIMIT`: set the limit (`srq_limit`), arming its event.
    pub const LIMIT: u32 = 2;
}

/// Input of MODIFY_SRQ (`ibv_modify_srq`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ModifySrqIn {
    /// SRQ number.
    pub srqn: le32,
    /// [`srq_attr`] bits.
    pub attr_mask: le32,
    /// With [`srq_attr::MAX_WR`]: log2 of the new ring's size in WQEs.
    pub log_wqes: le32,
    /// With [`srq_attr::LIMIT`]: the new limit (0 disarms).
    pub srq_limit: le32,
    /// With [`srq_attr::MAX_WR`]: IOVA of the new ring (4 KiB aligned),
    /// holding the WQEs not yet taken at the same indices.
    pub buf_iova: le64,
}

/// Output of QUERY_SRQ (`struct ibv_srq_attr`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct QuerySrqOut {
    /// Size in WQEs.
    pub max_wr: le32,
    /// Scatter/gather entries per WQE.
    pub max_sge: le32,
    /// Current limit (0 once the limit event fired).
    pub srq_limit: le32,
    /// Reserved, zero.
    pub reserved: le32,
}

/// Input of ALLOC_UCTX.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct AllocUctxIn {
    /// Doorbell pages wanted (at least 1), given to the context alone.
    pub uar_pages: le32,
}

/// Output of ALLOC_UCTX.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct AllocUctxOut {
    /// The context's number, for `CmdHeader::uid` (from 1).
    pub uid: le32,
    /// Its first doorbell page.
    pub uar_first: le32,
    /// Its number of doorbell pages (consecutive).
    pub uar_count: le32,
}

/// Input of CREATE_EQ: a completion event queue with the EQ 0 format,
/// armed and consumed through [`crate::uar::EQ_DB`].
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CreateEqIn {
    /// log2 of the number of 64-byte EQEs.
    pub log_size: le32,
    /// MSI-X vector raised when an EQE is written while the EQ is armed.
    pub vector: le32,
    /// Doorbell page this EQ is armed through.
    pub uar_page: le32,
    /// Reserved, zero.
    pub reserved: le32,
    /// IOVA of the EQE ring (4 KiB aligned, zeroed).
    pub buf_iova: le64,
}

/// Output of CREATE_EQ.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CreateEqOut {
    /// The new EQ number (EQ 0 is the asynchronous EQ of BAR 0).
    pub eqn: le32,
}

assert_eq_size!(ResizeCqIn, [u8; 24]);
assert_eq_size!(ReregMrIn, [u8; 40]);
const_assert_eq!(core::mem::offset_of!(ReregMrIn, va), 16);
assert_eq_size!(AllocMwIn, [u8; 8]);
assert_eq_size!(AllocMwOut, [u8; 4]);
assert_eq_size!(CreateSrqIn, [u8; 40]);
const_assert_eq!(core::mem::offset_of!(CreateSrqIn, buf_iova), 24);
assert_eq_size!(ModifySrqIn, [u8; 24]);
const_assert_eq!(core::mem::offset_of!(ModifySrqIn, buf_iova), 16);
assert_eq_size!(QuerySrqOut, [u8; 16]);
assert_eq_size!(CreateEqIn, [u8; 24]);
assert_eq_size!(AllocUctxIn, [u8; 4]);
assert_eq_size!(AllocUctxOut, [u8; 12]);
const_assert_eq!(core::mem::offset_of!(CmdHeader, uid), 12);
const_assert_eq!(core::mem::offset_of!(CreateEqIn, buf_iova), 16);
assert_eq_size!(CmdHeader, [u8; 16]);
assert_eq_size!(CmdEntry, [u8; CMD_ENTRY_SIZE]);
const_assert_eq!(core::mem::offset_of!(CmdEntry, input), CMD_IN_OFFSET);
const_assert_eq!(core::mem::offset_of!(CmdEntry, output), CMD_OUT_OFFSET);
const_assert_eq!(core::mem::offset_of!(CmdHeader, status), CMD_STATUS_OFFSET);
const_assert_eq!(core::mem::offset_of!(CmdHeader, owner), CMD_OWNER_OFFSET);
const_assert_eq!(core::mem::offset_of!(CmdHeader, syndrome), 8);
assert_eq_size!(QueryDeviceOut, [u8; 128]);
const_assert_eq!(core::mem::offset_of!(QueryDeviceOut, max_srq), 116);
const_assert_eq!(core::mem::offset_of!(QueryDeviceOut, vendor_id), 40);
const_assert_eq!(
    core::mem::offset_of!(QueryDeviceOut, local_ca_ack_delay),
    112
);
assert_eq_size!(QueryPortOut, [u8; 48]);
const_assert_eq!(core::mem::offset_of!(QueryPortOut, mac), 40);
assert_eq_size!(QueryGidOut, [u8; 20]);
assert_eq_size!(SetGidIn, [u8; 28]);
assert_eq_size!(RegMrIn, [u8; 32]);
const_assert_eq!(core::mem::offset_of!(RegMrIn, va), 8);
const_assert_eq!(core::mem::offset_of!(RegMrIn, iova), 24);
assert_eq_size!(CreateCqIn, [u8; 32]);
const_assert_eq!(core::mem::offset_of!(CreateCqIn, buf_iova), 16);
assert_eq_size!(CreateQpIn, [u8; 64]);
const_assert_eq!(core::mem::offset_of!(CreateQpIn, sq_iova), 40);
const_assert_eq!(core::mem::offset_of!(CreateQpIn, dbrec_iova), 56);
assert_eq_size!(AddressVector, [u8; 32]);
const_assert_eq!(core::mem::offset_of!(AddressVector, dmac), 24);
assert_eq_size!(QpAttrs, [u8; 68]);
const_assert_eq!(core::mem::offset_of!(QpAttrs, sq_psn), 16);
const_assert_eq!(core::mem::offset_of!(QpAttrs, ah), 32);
assert_eq_size!(ModifyQpIn, [u8; 76]);
const_assert!(core::mem::size_of::<ModifyQpIn>() <= CMD_IN_SIZE);
const_assert!(core::mem::size_of::<QueryDeviceOut>() <= CMD_OUT_SIZE);
const_assert!(core::mem::size_of::<CreateQpIn>() <= CMD_IN_SIZE);

// Plain data for DMA memory: every field listed, so padding fails the build.
rnic_queues::pod_struct! {
    CmdHeader { opcode, op_mod, status, token, reserved0, owner, syndrome, uid }
    CmdEntry { hdr, input, output }
    ObjIn { id }
    QueryDeviceOut {
        fw_ver, node_guid, sys_image_guid, max_mr_size, page_size_cap, vendor_id,
        vendor_part_id, hw_ver, max_qp, max_qp_wr, device_cap_flags, max_sge, max_sge_rd,
        max_cq, max_cqe, max_mr, max_pd, max_qp_rd_atom, max_qp_init_rd_atom, max_inline_data,
        atomic_cap, phys_port_cnt, max_msg_sz, local_ca_ack_delay, max_srq, max_srq_wr, max_srq_sge,
    }
    QueryPortIn { port }
    QueryPortOut {
        state, max_mtu, active_mtu, link_layer, gid_tbl_len, port_cap_flags, max_msg_sz,
        bad_pkey_cntr, qkey_viol_cntr, pkey_tbl_len, lid, sm_lid, lmc, max_vl_num, sm_sl,
        subnet_timeout, active_width, active_speed, phys_state, reserved0, mac, reserved1,
    }
    QueryGidIn { port, index }
    QueryGidOut { gid, gid_type, valid, reserved }
    SetGidIn { port, index, gid, gid_type, reserved }
    CreatePdOut { pdn }
    RegMrIn { pdn, access, va, length, iova }
    RegMrOut { lkey, rkey }
    ReregMrIn { lkey, flags, pdn, access, va, length, iova }
    AllocMwIn { pdn, mw_type }
    AllocMwOut { rkey }
    CreateCqIn { log_size, uar_page, eqn, reserved, buf_iova, dbrec_iova }
    CreateCqOut { cqn }
    ResizeCqIn { cqn, log_size, buf_iova, dbrec_iova }
    CreateQpIn {
        qp_type, sq_sig_all, log_rq_stride, reserved0, pdn, send_cqn, recv_cqn, srqn,
        log_sq_bbs, log_rq_wqes, max_inline, uar_page, reserved1, sq_iova, rq_iova, dbrec_iova,
    }
    CreateQpOut { qpn }
    AddressVector {
        dgid, flow_label, sgid_index, hop_limit, traffic_class, sl, dmac, port_num, is_global,
    }
    QpAttrs {
        qp_state, cur_qp_state, path_mtu, port_num, qp_access_flags, pkey_index, min_rnr_timer,
        timeout, retry_cnt, rnr_retry, max_rd_atomic, max_dest_rd_atomic, sq_psn, rq_psn,
        dest_qp_num, qkey, ah, en_sqd_async_notify, sq_draining, reserved,
    }
    ModifyQpIn { qpn, attr_mask, attrs }
    CreateSrqIn {
        pdn, log_wqes, log_stride, srq_limit, uar_page, reserved, buf_iova, dbrec_iova,
    }
    CreateSrqOut { srqn }
    ModifySrqIn { srqn, attr_mask, log_wqes, srq_limit, buf_iova }
    QuerySrqOut { max_wr, max_sge, srq_limit, reserved }
    CreateEqIn { log_size, vector, uar_page, reserved, buf_iova }
    CreateEqOut { eqn }
    AllocUctxIn { uar_pages }
    AllocUctxOut { uid, uar_first, uar_count }
}

//! Commands (`union pvrdma_cmd_req`) and their responses (`union
//! pvrdma_cmd_resp`).
//!
//! The driver writes one request into the command slot (a page whose DMA
//! address the DSR gives), writes 0 to `bar1::REQUEST`, and takes the
//! response from the response slot once the device raises the response
//! vector. A request starts with a [`CmdHdr`]; its response starts with a
//! [`RespHdr`] whose `response` repeats the request's cookie and whose
//! `ack` is the request's opcode with [`RESP_BIT`] set. Objects are named
//! by the handles the create commands answer.

use endian_num::{le16, le32, le64};
use rnic_queues::wire_enum;
use static_assertions::{assert_eq_size, const_assert, const_assert_eq};

/// Bytes of the largest request (`sizeof(union pvrdma_cmd_req)`).
pub const CMD_REQ_SIZE: usize = 184;
/// Bytes of the largest response (`sizeof(union pvrdma_cmd_resp)`).
pub const CMD_RESP_SIZE: usize = 176;
/// The bit a response's `ack` adds to its request's opcode.
pub const RESP_BIT: u32 = 1 << 31;

wire_enum! {
    /// Command opcodes (`PVRDMA_CMD_*`).
    CmdOpcode: u32 {
        /// [`QueryPort`].
        QueryPort = 0,
        /// [`QueryPkey`].
        QueryPkey = 1,
        /// [`CreatePd`].
        CreatePd = 2,
        /// [`DestroyPd`].
        DestroyPd = 3,
        /// [`CreateMr`].
        CreateMr = 4,
        /// [`DestroyMr`].
        DestroyMr = 5,
        /// [`CreateCq`].
        CreateCq = 6,
        /// [`ResizeCq`].
        ResizeCq = 7,
        /// [`DestroyCq`].
        DestroyCq = 8,
        /// [`CreateQp`].
        CreateQp = 9,
        /// [`ModifyQp`].
        ModifyQp = 10,
        /// [`QueryQp`].
        QueryQp = 11,
        /// [`DestroyQp`].
        DestroyQp = 12,
        /// [`CreateUc`].
        CreateUc = 13,
        /// [`DestroyUc`].
        DestroyUc = 14,
        /// [`CreateBind`].
        CreateBind = 15,
        /// [`DestroyBind`].
        DestroyBind = 16,
        /// [`CreateSrq`].
        CreateSrq = 17,
        /// [`ModifySrq`].
        ModifySrq = 18,
        /// [`QuerySrq`].
        QuerySrq = 19,
        /// [`DestroySrq`].
        DestroySrq = 20,
    }
}

impl CmdOpcode {
    /// The `ack` a response to this command carries.
    pub const fn ack(self) -> u32 {
        self.raw() | RESP_BIT
    }
}

/// Header of every request.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CmdHdr {
    /// A cookie the response repeats.
    pub response: le64,
    /// A [`CmdOpcode`] value.
    pub cmd: le32,
    /// Reserved, zero.
    pub reserved: le32,
}

/// Header of every response.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct RespHdr {
    /// The request's cookie.
    pub response: le64,
    /// The request's opcode with [`RESP_BIT`] set.
    pub ack: le32,
    /// 0, or the error the command failed with (an errno value).
    pub err: u8,
    /// Reserved.
    pub reserved: [u8; 3],
}

/// A GID (`union pvrdma_gid`), in network byte order.
pub type Gid = [u8; 16];

/// Port attributes (`struct pvrdma_port_attr`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(missing_docs)] // the fields of `struct ibv_port_attr`, named alike
pub struct PortAttr {
    /// `enum pvrdma_port_state` (4: active).
    pub state: le32,
    /// `enum pvrdma_mtu` (1: 256 ... 5: 4096).
    pub max_mtu: le32,
    /// `enum pvrdma_mtu`.
    pub active_mtu: le32,
    pub gid_tbl_len: le32,
    pub port_cap_flags: le32,
    pub max_msg_sz: le32,
    pub bad_pkey_cntr: le32,
    pub qkey_viol_cntr: le32,
    pub pkey_tbl_len: le16,
    pub lid: le16,
    pub sm_lid: le16,
    pub lmc: u8,
    pub max_vl_num: u8,
    pub sm_sl: u8,
    pub subnet_timeout: u8,
    pub init_type_reply: u8,
    pub active_width: u8,
    pub active_speed: u8,
    pub phys_state: u8,
    pub reserved: [u8; 2],
}

/// The global route of an address (`struct pvrdma_global_route`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct GlobalRoute {
    /// Destination GID.
    pub dgid: Gid,
    /// Flow label (20 bits).
    pub flow_label: le32,
    /// Index of the source GID.
    pub sgid_index: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Reserved.
    pub reserved: u8,
}

/// An address (`struct pvrdma_ah_attr`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct AhAttr {
    /// The global route.
    pub grh: GlobalRoute,
    /// Destination LID (unused on RoCE).
    pub dlid: le16,
    /// VLAN ID.
    pub vlan_id: le16,
    /// Service level.
    pub sl: u8,
    /// Source path bits.
    pub src_path_bits: u8,
    /// Static rate (`enum pvrdma_rate`).
    pub static_rate: u8,
    /// 1: the GRH is valid (`PVRDMA_AH_GRH`).
    pub ah_flags: u8,
    /// Port number.
    pub port_num: u8,
    /// Destination MAC address.
    pub dmac: [u8; 6],
    /// Reserved.
    pub reserved: u8,
}

/// QP capacities (`struct pvrdma_qp_cap`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(missing_docs)] // the fields of `struct ibv_qp_cap`
pub struct QpCap {
    pub max_send_wr: le32,
    pub max_recv_wr: le32,
    pub max_send_sge: le32,
    pub max_recv_sge: le32,
    pub max_inline_data: le32,
    pub reserved: le32,
}

/// SRQ attributes (`struct pvrdma_srq_attr`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(missing_docs)] // the fields of `struct ibv_srq_attr`
pub struct SrqAttr {
    pub max_wr: le32,
    pub max_sge: le32,
    pub srq_limit: le32,
    pub reserved: le32,
}

/// QP attributes (`struct pvrdma_qp_attr`), with a mask of [`QpAttrMask`]
/// bits saying which MODIFY_QP sets.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(missing_docs)] // the fields of `struct ibv_qp_attr`, named alike
pub struct QpAttr {
    /// A [`QpState`] value.
    pub qp_state: le32,
    /// A [`QpState`] value.
    pub cur_qp_state: le32,
    /// `enum pvrdma_mtu` (1: 256 ... 5: 4096).
    pub path_mtu: le32,
    pub path_mig_state: le32,
    pub qkey: le32,
    pub rq_psn: le32,
    pub sq_psn: le32,
    pub dest_qp_num: le32,
    pub qp_access_flags: le32,
    pub pkey_index: le16,
    pub alt_pkey_index: le16,
    pub en_sqd_async_notify: u8,
    pub sq_draining: u8,
    pub max_rd_atomic: u8,
    pub max_dest_rd_atomic: u8,
    pub min_rnr_timer: u8,
    pub port_num: u8,
    pub timeout: u8,
    pub retry_cnt: u8,
    pub rnr_retry: u8,
    pub alt_port_num: u8,
    pub alt_timeout: u8,
    pub reserved: [u8; 5],
    pub cap: QpCap,
    pub ah_attr: AhAttr,
    pub alt_ah_attr: AhAttr,
}

wire_enum! {
    /// QP states (`enum pvrdma_qp_state`: libibverbs' values).
    QpState: u32 {
        /// Reset.
        Reset = 0,
        /// Initialised.
        Init = 1,
        /// Ready to receive.
        Rtr = 2,
        /// Ready to send.
        Rts = 3,
        /// Send queue drained.
        Sqd = 4,
        /// Send queue error.
        Sqe = 5,
        /// Error.
        Err = 6,
    }
}

wire_enum! {
    /// QP types (`enum pvrdma_qp_type`).
    QpType: u8 {
        /// The subnet management QP (QP0).
        Smi = 0,
        /// The general services QP (QP1).
        Gsi = 1,
        /// Reliable connected.
        Rc = 2,
        /// Unreliable connected.
        Uc = 3,
        /// Unreliable datagram.
        Ud = 4,
    }
}

/// MODIFY_QP and QUERY_QP attribute mask bits (`enum pvrdma_qp_attr_mask`:
/// libibverbs' `IBV_QP_*` values).
pub mod qp_attr_mask {
    /// `qp_state`.
    pub const STATE: u32 = 1 << 0;
    /// `cur_qp_state`.
    pub const CUR_STATE: u32 = 1 << 1;
    /// `en_sqd_async_notify`.
    pub const EN_SQD_ASYNC_NOTIFY: u32 = 1 << 2;
    /// `qp_access_flags`.
    pub const ACCESS_FLAGS: u32 = 1 << 3;
    /// `pkey_index`.
    pub const PKEY_INDEX: u32 = 1 << 4;
    /// `port_num`.
    pub const PORT: u32 = 1 << 5;
    /// `qkey`.
    pub const QKEY: u32 = 1 << 6;
    /// `ah_attr`.
    pub const AV: u32 = 1 << 7;
    /// `path_mtu`.
    pub const PATH_MTU: u32 = 1 << 8;
    /// `timeout`.
    pub const TIMEOUT: u32 = 1 << 9;
    /// `retry_cnt`.
    pub const RETRY_CNT: u32 = 1 << 10;
    /// `rnr_retry`.
    pub const RNR_RETRY: u32 = 1 << 11;
    /// `rq_psn`.
    pub const RQ_PSN: u32 = 1 << 12;
    /// `max_rd_atomic`.
    pub const MAX_QP_RD_ATOMIC: u32 = 1 << 13;
    /// The alternate path.
    pub const ALT_PATH: u32 = 1 << 14;
    /// `min_rnr_timer`.
    pub const MIN_RNR_TIMER: u32 = 1 << 15;
    /// `sq_psn`.
    pub const SQ_PSN: u32 = 1 << 16;
    /// `max_dest_rd_atomic`.
    pub const MAX_DEST_RD_ATOMIC: u32 = 1 << 17;
    /// `path_mig_state`.
    pub const PATH_MIG_STATE: u32 = 1 << 18;
    /// `cap`.
    pub const CAP: u32 = 1 << 19;
    /// `dest_qp_num`.
    pub const DEST_QPN: u32 = 1 << 20;
}

/// Memory access flags (`enum pvrdma_access_flags`: libibverbs' values).
pub mod access {
    /// Local write.
    pub const LOCAL_WRITE: u32 = 1 << 0;
    /// Remote write.
    pub const REMOTE_WRITE: u32 = 1 << 1;
    /// Remote read.
    pub const REMOTE_READ: u32 = 1 << 2;
    /// Remote atomics.
    pub const REMOTE_ATOMIC: u32 = 1 << 3;
    /// Memory window binding.
    pub const MW_BIND: u32 = 1 << 4;
}

/// CREATE_MR `flags` bit: a DMA MR covering all memory (no page list).
pub const MR_FLAG_DMA: u32 = 1 << 0;
/// CREATE_MR `flags` bit: a fast-registration MR.
pub const MR_FLAG_FRMR: u32 = 1 << 1;

/// QUERY_PORT.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct QueryPort {
    /// Header.
    pub hdr: CmdHdr,
    /// Port number (1).
    pub port_num: u8,
    /// Reserved.
    pub reserved: [u8; 7],
}

/// QUERY_PORT's response.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct QueryPortResp {
    /// Header.
    pub hdr: RespHdr,
    /// The port.
    pub attrs: PortAttr,
}

/// QUERY_PKEY.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct QueryPkey {
    /// Header.
    pub hdr: CmdHdr,
    /// Port number.
    pub port_num: u8,
    /// P_Key table index.
    pub index: u8,
    /// Reserved.
    pub reserved: [u8; 6],
}

/// QUERY_PKEY's response.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct QueryPkeyResp {
    /// Header.
    pub hdr: RespHdr,
    /// The P_Key.
    pub pkey: le16,
    /// Reserved.
    pub reserved: [u8; 6],
}

/// CREATE_UC: a user context and its UAR page.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CreateUc {
    /// Header.
    pub hdr: CmdHdr,
    /// Page frame of the context's UAR page (32 bits before version 19,
    /// whose `pfn64` shares the field).
    pub pfn: le64,
}

/// A response that answers one handle: CREATE_UC's context, CREATE_PD's
/// PD, CREATE_SRQ's SRQ number.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct HandleResp {
    /// Header.
    pub hdr: RespHdr,
    /// The new object's handle.
    pub handle: le32,
    /// Reserved.
    pub reserved: [u8; 4],
}

/// A request that names one object by its handle: DESTROY_UC, CREATE_PD
/// (the context), DESTROY_PD, DESTROY_MR, DESTROY_CQ, DESTROY_QP,
/// QUERY_SRQ, DESTROY_SRQ.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct HandleCmd {
    /// Header.
    pub hdr: CmdHdr,
    /// The object's handle.
    pub handle: le32,
    /// Reserved.
    pub reserved: [u8; 4],
}

/// CREATE_MR.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CreateMr {
    /// Header.
    pub hdr: CmdHdr,
    /// Virtual address of the region's first byte.
    pub start: le64,
    /// Length in bytes.
    pub length: le64,
    /// DMA address of the page directory of the region's pages.
    pub pdir_dma: le64,
    /// The PD.
    pub pd_handle: le32,
    /// [`access`] bits.
    pub access_flags: le32,
    /// [`MR_FLAG_DMA`] and [`MR_FLAG_FRMR`] bits.
    pub flags: le32,
    /// Pages in the directory.
    pub nchunks: le32,
}

/// CREATE_MR's response.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CreateMrResp {
    /// Header.
    pub hdr: RespHdr,
    /// The MR's handle.
    pub mr_handle: le32,
    /// Local key.
    pub lkey: le32,
    /// Remote key.
    pub rkey: le32,
    /// Reserved.
    pub reserved: [u8; 4],
}

/// CREATE_CQ.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CreateCq {
    /// Header.
    pub hdr: CmdHdr,
    /// DMA address of the page directory: the state page, then the CQE
    /// pages.
    pub pdir_dma: le64,
    /// The user context.
    pub ctx_handle: le32,
    /// CQEs asked for.
    pub cqe: le32,
    /// Pages in the directory, the state page included.
    pub nchunks: le32,
    /// Reserved.
    pub reserved: [u8; 4],
}

/// CREATE_CQ's response.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CreateCqResp {
    /// Header.
    pub hdr: RespHdr,
    /// The CQ's handle.
    pub cq_handle: le32,
    /// CQEs granted.
    pub cqe: le32,
}

/// RESIZE_CQ (QEMU 7.2 does not implement it).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ResizeCq {
    /// Header.
    pub hdr: CmdHdr,
    /// The CQ.
    pub cq_handle: le32,
    /// CQEs asked for.
    pub cqe: le32,
}

/// RESIZE_CQ's response.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ResizeCqResp {
    /// Header.
    pub hdr: RespHdr,
    /// CQEs granted.
    pub cqe: le32,
    /// Reserved.
    pub reserved: [u8; 4],
}

/// CREATE_SRQ.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CreateSrq {
    /// Header.
    pub hdr: CmdHdr,
    /// DMA address of the page directory: the state page, then the WQE
    /// pages.
    pub pdir_dma: le64,
    /// The PD.
    pub pd_handle: le32,
    /// Pages in the directory.
    pub nchunks: le32,
    /// Capacities asked for.
    pub attrs: SrqAttr,
    /// SRQ type (0: basic).
    pub srq_type: u8,
    /// Reserved.
    pub reserved: [u8; 7],
}

/// MODIFY_SRQ.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ModifySrq {
    /// Header.
    pub hdr: CmdHdr,
    /// The SRQ.
    pub srq_handle: le32,
    /// `IBV_SRQ_*` bits: which attributes are set.
    pub attr_mask: le32,
    /// The attributes.
    pub attrs: SrqAttr,
}

/// QUERY_SRQ's response.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct QuerySrqResp {
    /// Header.
    pub hdr: RespHdr,
    /// The SRQ's attributes.
    pub attrs: SrqAttr,
}

/// CREATE_QP.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CreateQp {
    /// Header.
    pub hdr: CmdHdr,
    /// DMA address of the page directory: the state page, the send
    /// queue's `send_chunks` pages, then the receive queue's.
    pub pdir_dma: le64,
    /// The PD.
    pub pd_handle: le32,
    /// The send CQ.
    pub send_cq_handle: le32,
    /// The receive CQ.
    pub recv_cq_handle: le32,
    /// The SRQ, if `is_srq`.
    pub srq_handle: le32,
    /// Send WQEs.
    pub max_send_wr: le32,
    /// Receive WQEs.
    pub max_recv_wr: le32,
    /// SGEs per send WQE.
    pub max_send_sge: le32,
    /// SGEs per receive WQE.
    pub max_recv_sge: le32,
    /// Inline bytes per send WQE.
    pub max_inline_data: le32,
    /// Unused.
    pub lkey: le32,
    /// [`access`] bits.
    pub access_flags: le32,
    /// Pages in the directory, the state page included.
    pub total_chunks: le16,
    /// Pages of the send queue (after the state page).
    pub send_chunks: le16,
    /// Largest atomic argument.
    pub max_atomic_arg: le16,
    /// 1: every send WQE completes with a CQE.
    pub sq_sig_all: u8,
    /// A [`QpType`] value.
    pub qp_type: u8,
    /// 1: receives come from `srq_handle`.
    pub is_srq: u8,
    /// Reserved.
    pub reserved: [u8; 3],
}

/// CREATE_QP's response before version 20 (the QP number is its handle).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CreateQpResp {
    /// Header.
    pub hdr: RespHdr,
    /// The QP number.
    pub qpn: le32,
    /// Capacities granted.
    pub max_send_wr: le32,
    /// Capacities granted.
    pub max_recv_wr: le32,
    /// Capacities granted.
    pub max_send_sge: le32,
    /// Capacities granted.
    pub max_recv_sge: le32,
    /// Capacities granted.
    pub max_inline_data: le32,
}

/// CREATE_QP's response from version 20.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CreateQpRespV2 {
    /// Header.
    pub hdr: RespHdr,
    /// The QP number (on the wire).
    pub qpn: le32,
    /// The QP's handle (in commands and doorbells).
    pub qp_handle: le32,
    /// Capacities granted.
    pub max_send_wr: le32,
    /// Capacities granted.
    pub max_recv_wr: le32,
    /// Capacities granted.
    pub max_send_sge: le32,
    /// Capacities granted.
    pub max_recv_sge: le32,
    /// Capacities granted.
    pub max_inline_data: le32,
    /// The C struct's tail padding (its size is a multiple of 8).
    pub pad: le32,
}

/// MODIFY_QP.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ModifyQp {
    /// Header.
    pub hdr: CmdHdr,
    /// The QP.
    pub qp_handle: le32,
    /// [`qp_attr_mask`] bits: which attributes are set.
    pub attr_mask: le32,
    /// The attributes.
    pub attrs: QpAttr,
}

/// QUERY_QP.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct QueryQp {
    /// Header.
    pub hdr: CmdHdr,
    /// The QP.
    pub qp_handle: le32,
    /// [`qp_attr_mask`] bits: which attributes to report.
    pub attr_mask: le32,
}

/// QUERY_QP's response.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct QueryQpResp {
    /// Header.
    pub hdr: RespHdr,
    /// The attributes.
    pub attrs: QpAttr,
}

/// DESTROY_QP's response.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct DestroyQpResp {
    /// Header.
    pub hdr: RespHdr,
    /// Async events the device reported for the QP.
    pub events_reported: le32,
    /// Reserved.
    pub reserved: [u8; 4],
}

/// CREATE_BIND: a GID at an index of the port's GID table.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CreateBind {
    /// Header.
    pub hdr: CmdHdr,
    /// MTU (unused by QEMU).
    pub mtu: le32,
    /// VLAN (unused by QEMU).
    pub vlan: le32,
    /// GID table index.
    pub index: le32,
    /// The GID.
    pub new_gid: Gid,
    /// [`crate::dsr::GID_TYPE_ROCE_V1`] or
    /// [`crate::dsr::GID_TYPE_ROCE_V2`].
    pub gid_type: u8,
    /// Reserved.
    pub reserved: [u8; 3],
}

/// DESTROY_BIND.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct DestroyBind {
    /// Header.
    pub hdr: CmdHdr,
    /// GID table index.
    pub index: le32,
    /// The GID.
    pub dest_gid: Gid,
    /// Reserved.
    pub reserved: [u8; 4],
}

assert_eq_size!(CmdHdr, [u8; 16]);
assert_eq_size!(RespHdr, [u8; 16]);
assert_eq_size!(PortAttr, [u8; 48]);
assert_eq_size!(GlobalRoute, [u8; 24]);
assert_eq_size!(AhAttr, [u8; 40]);
assert_eq_size!(QpCap, [u8; 24]);
assert_eq_size!(SrqAttr, [u8; 16]);
assert_eq_size!(QpAttr, [u8; 160]);
assert_eq_size!(QueryPort, [u8; 24]);
assert_eq_size!(QueryPortResp, [u8; 64]);
assert_eq_size!(QueryPkey, [u8; 24]);
assert_eq_size!(QueryPkeyResp, [u8; 24]);
assert_eq_size!(CreateUc, [u8; 24]);
assert_eq_size!(HandleResp, [u8; 24]);
assert_eq_size!(HandleCmd, [u8; 24]);
assert_eq_size!(CreateMr, [u8; 56]);
assert_eq_size!(CreateMrResp, [u8; 32]);
assert_eq_size!(CreateCq, [u8; 40]);
assert_eq_size!(CreateCqResp, [u8; 24]);
assert_eq_size!(ResizeCq, [u8; 24]);
assert_eq_size!(ResizeCqResp, [u8; 24]);
assert_eq_size!(CreateSrq, [u8; 56]);
assert_eq_size!(ModifySrq, [u8; 40]);
assert_eq_size!(QuerySrqResp, [u8; 32]);
assert_eq_size!(CreateQp, [u8; 80]);
assert_eq_size!(CreateQpResp, [u8; 40]);
assert_eq_size!(CreateQpRespV2, [u8; 48]);
assert_eq_size!(ModifyQp, [u8; CMD_REQ_SIZE]);
assert_eq_size!(QueryQp, [u8; 24]);
assert_eq_size!(QueryQpResp, [u8; CMD_RESP_SIZE]);
assert_eq_size!(DestroyQpResp, [u8; 24]);
assert_eq_size!(CreateBind, [u8; 48]);
assert_eq_size!(DestroyBind, [u8; 40]);
const_assert_eq!(core::mem::offset_of!(RespHdr, err), 12);
const_assert_eq!(core::mem::offset_of!(QpAttr, cap), 56);
const_assert_eq!(core::mem::offset_of!(QpAttr, ah_attr), 80);
const_assert_eq!(core::mem::offset_of!(AhAttr, dmac), 33);
const_assert_eq!(core::mem::offset_of!(CreateQp, total_chunks), 68);
const_assert_eq!(core::mem::offset_of!(CreateBind, new_gid), 28);
const_assert!(core::mem::size_of::<CreateSrq>() <= CMD_REQ_SIZE);

// Plain data for DMA memory: every field listed, so padding fails the build.
rnic_queues::pod_struct! {
    CmdHdr { response, cmd, reserved }
    RespHdr { response, ack, err, reserved }
    PortAttr {
        state, max_mtu, active_mtu, gid_tbl_len, port_cap_flags, max_msg_sz, bad_pkey_cntr,
        qkey_viol_cntr, pkey_tbl_len, lid, sm_lid, lmc, max_vl_num, sm_sl, subnet_timeout,
        init_type_reply, active_width, active_speed, phys_state, reserved,
    }
    GlobalRoute { dgid, flow_label, sgid_index, hop_limit, traffic_class, reserved }
    AhAttr {
        grh, dlid, vlan_id, sl, src_path_bits, static_rate, ah_flags, port_num, dmac, reserved,
    }
    QpCap { max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data, reserved }
    SrqAttr { max_wr, max_sge, srq_limit, reserved }
    QpAttr {
        qp_state, cur_qp_state, path_mtu, path_mig_state, qkey, rq_psn, sq_psn, dest_qp_num,
        qp_access_flags, pkey_index, alt_pkey_index, en_sqd_async_notify, sq_draining,
        max_rd_atomic, max_dest_rd_atomic, min_rnr_timer, port_num, timeout, retry_cnt,
        rnr_retry, alt_port_num, alt_timeout, reserved, cap, ah_attr, alt_ah_attr,
    }
    QueryPort { hdr, port_num, reserved }
    QueryPortResp { hdr, attrs }
    QueryPkey { hdr, port_num, index, reserved }
    QueryPkeyResp { hdr, pkey, reserved }
    CreateUc { hdr, pfn }
    HandleResp { hdr, handle, reserved }
    HandleCmd { hdr, handle, reserved }
    CreateMr { hdr, start, length, pdir_dma, pd_handle, access_flags, flags, nchunks }
    CreateMrResp { hdr, mr_handle, lkey, rkey, reserved }
    CreateCq { hdr, pdir_dma, ctx_handle, cqe, nchunks, reserved }
    CreateCqResp { hdr, cq_handle, cqe }
    ResizeCq { hdr, cq_handle, cqe }
    ResizeCqResp { hdr, cqe, reserved }
    CreateSrq { hdr, pdir_dma, pd_handle, nchunks, attrs, srq_type, reserved }
    ModifySrq { hdr, srq_handle, attr_mask, attrs }
    QuerySrqResp { hdr, attrs }
    CreateQp {
        hdr, pdir_dma, pd_handle, send_cq_handle, recv_cq_handle, srq_handle, max_send_wr,
        max_recv_wr, max_send_sge, max_recv_sge, max_inline_data, lkey, access_flags,
        total_chunks, send_chunks, max_atomic_arg, sq_sig_all, qp_type, is_srq, reserved,
    }
    CreateQpResp {
        hdr, qpn, max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline_data,
    }
    CreateQpRespV2 {
        hdr, qpn, qp_handle, max_send_wr, max_recv_wr, max_send_sge, max_recv_sge,
        max_inline_data, pad,
    }
    ModifyQp { hdr, qp_handle, attr_mask, attrs }
    QueryQp { hdr, qp_handle, attr_mask }
    QueryQpResp { hdr, attrs }
    DestroyQpResp { hdr, events_reported, reserved }
    CreateBind { hdr, mtu, vlan, index, new_gid, gid_type, reserved }
    DestroyBind { hdr, index, dest_gid, reserved }
}

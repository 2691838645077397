//! The structures of rdma-core 44's `infiniband/verbs.h` that programs
//! see, field for field (rnic-ibverbs' tests compare every size and offset
//! with the header, through a C probe). Types only, and no state: both of
//! rnic's drop-in libraries (`libibverbs.so.1`, whose objects these are,
//! and `librdmacm.so.1`, which uses them as a program does) build on them.
#![no_std]

use core::ffi::{c_char, c_int, c_void};

/// `IBV_SYSFS_NAME_MAX`.
pub const SYSFS_NAME_MAX: usize = 64;
/// `IBV_SYSFS_PATH_MAX`.
pub const SYSFS_PATH_MAX: usize = 256;

/// `IBV_NODE_CA`.
pub const NODE_CA: c_int = 1;
/// `IBV_TRANSPORT_IB`.
pub const TRANSPORT_IB: c_int = 0;

/// `struct _ibv_device_ops`: two entry points libibverbs no longer calls.
#[repr(C)]
#[derive(Debug)]
pub struct DeviceOps {
    /// `_dummy1`: NULL.
    pub dummy1: *mut c_void,
    /// `_dummy2`: NULL.
    pub dummy2: *mut c_void,
}

/// `struct ibv_device`.
#[repr(C)]
#[derive(Debug)]
pub struct IbvDevice {
    /// `_ops`.
    pub ops: DeviceOps,
    /// `enum ibv_node_type`.
    pub node_type: c_int,
    /// `enum ibv_transport_type`.
    pub transport_type: c_int,
    /// The device's name (`ibv_get_device_name`).
    pub name: [c_char; SYSFS_NAME_MAX],
    /// The uverbs device's name.
    pub dev_name: [c_char; SYSFS_NAME_MAX],
    /// The uverbs device's sysfs path.
    pub dev_path: [c_char; SYSFS_PATH_MAX],
    /// The device's sysfs path.
    pub ibdev_path: [c_char; SYSFS_PATH_MAX],
}

/// Copies `s` into the C string field `dst`, cut to fit with its NUL.
pub fn set_str(dst: &mut [c_char], s: &str) {
    let n = s.len().min(dst.len() - 1);
    for (d, &b) in dst.iter_mut().zip(&s.as_bytes()[..n]) {
        *d = b as c_char;
    }
    dst[n..].fill(0);
}

/// Entries of `struct ibv_context_ops`: the compatibility slots and the
/// data-path calls the header's inline functions make through it.
pub const CONTEXT_OPS: usize = 32;

/// `struct ibv_context`.
#[repr(C)]
pub struct IbvContext {
    /// The device it was opened on.
    pub device: *mut IbvDevice,
    /// `struct ibv_context_ops`.
    pub ops: [*mut c_void; CONTEXT_OPS],
    /// No kernel command channel: -1.
    pub cmd_fd: c_int,
    /// Readable while an asynchronous event waits (`ibv_get_async_event`);
    /// -1 where the platform has no interrupts.
    pub async_fd: c_int,
    /// Completion vectors.
    pub num_comp_vectors: c_int,
    /// libibverbs' own lock, unused here.
    pub mutex: libc::pthread_mutex_t,
    /// NULL: not a `struct verbs_context`, so the header's inline helpers
    /// call the exported functions.
    pub abi_compat: *mut c_void,
}

/// `struct ibv_device_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct IbvDeviceAttr {
    /// Firmware version, a C string.
    pub fw_ver: [c_char; 64],
    /// Network byte order.
    pub node_guid: u64,
    /// Network byte order.
    pub sys_image_guid: u64,
    /// Largest MR.
    pub max_mr_size: u64,
    /// Page sizes supported.
    pub page_size_cap: u64,
    /// PCI vendor ID.
    pub vendor_id: u32,
    /// PCI device ID.
    pub vendor_part_id: u32,
    /// Hardware revision.
    pub hw_ver: u32,
    /// QPs.
    pub max_qp: c_int,
    /// Work requests per queue.
    pub max_qp_wr: c_int,
    /// `IBV_DEVICE_*` flags.
    pub device_cap_flags: u32,
    /// SGEs per request.
    pub max_sge: c_int,
    /// SGEs per RDMA READ.
    pub max_sge_rd: c_int,
    /// CQs.
    pub max_cq: c_int,
    /// CQEs per CQ.
    pub max_cqe: c_int,
    /// MRs.
    pub max_mr: c_int,
    /// PDs.
    pub max_pd: c_int,
    /// READ/atomics a QP takes as responder.
    pub max_qp_rd_atom: c_int,
    /// EE contexts' (none).
    pub max_ee_rd_atom: c_int,
    /// READ/atomic resources of the device.
    pub max_res_rd_atom: c_int,
    /// READ/atomics a QP issues.
    pub max_qp_init_rd_atom: c_int,
    /// EE contexts' (none).
    pub max_ee_init_rd_atom: c_int,
    /// `enum ibv_atomic_cap`.
    pub atomic_cap: c_int,
    /// EE contexts (none).
    pub max_ee: c_int,
    /// RD domains (none).
    pub max_rdd: c_int,
    /// Memory windows.
    pub max_mw: c_int,
    /// Raw IPv6 QPs (none).
    pub max_raw_ipv6_qp: c_int,
    /// Raw Ethertype QPs (none).
    pub max_raw_ethy_qp: c_int,
    /// Multicast groups (none).
    pub max_mcast_grp: c_int,
    /// QPs per multicast group (none).
    pub max_mcast_qp_attach: c_int,
    /// QPs attached to multicast groups (none).
    pub max_total_mcast_qp_attach: c_int,
    /// Address handles.
    pub max_ah: c_int,
    /// FMRs (none).
    pub max_fmr: c_int,
    /// FMR maps (none).
    pub max_map_per_fmr: c_int,
    /// SRQs.
    pub max_srq: c_int,
    /// Work requests per SRQ.
    pub max_srq_wr: c_int,
    /// SGEs per SRQ request.
    pub max_srq_sge: c_int,
    /// P_Keys per port.
    pub max_pkeys: u16,
    /// Local CA ACK delay.
    pub local_ca_ack_delay: u8,
    /// Ports.
    pub phys_port_cnt: u8,
}

/// `struct ibv_port_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct IbvPortAttr {
    /// `enum ibv_port_state`.
    pub state: c_int,
    /// `enum ibv_mtu`.
    pub max_mtu: c_int,
    /// `enum ibv_mtu`.
    pub active_mtu: c_int,
    /// GID table entries.
    pub gid_tbl_len: c_int,
    /// `IBV_PORT_*` flags.
    pub port_cap_flags: u32,
    /// Largest message.
    pub max_msg_sz: u32,
    /// Bad P_Key counter.
    pub bad_pkey_cntr: u32,
    /// Q_Key violation counter.
    pub qkey_viol_cntr: u32,
    /// P_Key table entries.
    pub pkey_tbl_len: u16,
    /// LID (0 on RoCE).
    pub lid: u16,
    /// Subnet manager LID (0 on RoCE).
    pub sm_lid: u16,
    /// LMC.
    pub lmc: u8,
    /// VLs.
    pub max_vl_num: u8,
    /// Subnet manager SL.
    pub sm_sl: u8,
    /// Subnet timeout.
    pub subnet_timeout: u8,
    /// Init type reply.
    pub init_type_reply: u8,
    /// `IBV_WIDTH_*`.
    pub active_width: u8,
    /// `IBV_SPEED_*`.
    pub active_speed: u8,
    /// Physical state (5: LinkUp).
    pub phys_state: u8,
    /// `IBV_LINK_LAYER_*`.
    pub link_layer: u8,
    /// `IBV_QPF_*` flags.
    pub flags: u8,
    /// `IBV_PORT_*2` flags.
    pub port_cap_flags2: u16,
}

/// Bytes of `struct _compat_ibv_port_attr`, the layout the exported
/// `ibv_query_port` fills (the header's inline wrapper zeroes the rest
/// of a `struct ibv_port_attr` first): everything before
/// `port_cap_flags2`.
pub const COMPAT_PORT_ATTR_LEN: usize = core::mem::offset_of!(IbvPortAttr, port_cap_flags2);

/// `IBV_GID_TYPE_SYSFS_IB_ROCE_V1` (rdma-core's `enum ibv_gid_type_sysfs`).
pub const GID_TYPE_SYSFS_IB_ROCE_V1: c_int = 0;
/// `IBV_GID_TYPE_SYSFS_ROCE_V2` (rdma-core's `enum ibv_gid_type_sysfs`).
pub const GID_TYPE_SYSFS_ROCE_V2: c_int = 1;

/// `struct ibv_pd`.
#[repr(C)]
#[derive(Debug)]
pub struct IbvPd {
    /// The context it was allocated on.
    pub context: *mut IbvContext,
    /// The PD number.
    pub handle: u32,
}

/// `struct ibv_mr`.
#[repr(C)]
#[derive(Debug)]
pub struct IbvMr {
    /// The context of its PD.
    pub context: *mut IbvContext,
    /// Its PD.
    pub pd: *mut IbvPd,
    /// The registered memory's start.
    pub addr: *mut c_void,
    /// Its length.
    pub length: usize,
    /// The MR's handle: its lkey.
    pub handle: u32,
    /// Local key.
    pub lkey: u32,
    /// Remote key.
    pub rkey: u32,
}

/// Index of `poll_cq` in `struct ibv_context_ops`.
pub const OP_POLL_CQ: usize = 11;
/// Index of `req_notify_cq` in `struct ibv_context_ops`.
pub const OP_REQ_NOTIFY_CQ: usize = 12;

/// `struct ibv_cq`.
#[repr(C)]
pub struct IbvCq {
    /// The context it was created on.
    pub context: *mut IbvContext,
    /// Its completion channel (NULL: none).
    pub channel: *mut c_void,
    /// The program's pointer, handed back with its events.
    pub cq_context: *mut c_void,
    /// The CQ number.
    pub handle: u32,
    /// CQEs it holds.
    pub cqe: c_int,
    /// libibverbs' lock for event counting.
    pub mutex: libc::pthread_mutex_t,
    /// libibverbs' condition for event counting.
    pub cond: libc::pthread_cond_t,
    /// Completion events acknowledged.
    pub comp_events_completed: u32,
    /// Asynchronous events acknowledged.
    pub async_events_completed: u32,
}

/// `struct ibv_wc`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct IbvWc {
    /// The work request's ID.
    pub wr_id: u64,
    /// `enum ibv_wc_status`.
    pub status: c_int,
    /// `enum ibv_wc_opcode`.
    pub opcode: c_int,
    /// Device-specific detail of an error.
    pub vendor_err: u32,
    /// Bytes transferred.
    pub byte_len: u32,
    /// Immediate data (network byte order) or the invalidated rkey.
    pub imm_data: u32,
    /// Local QP number.
    pub qp_num: u32,
    /// Source QP number (UD).
    pub src_qp: u32,
    /// `IBV_WC_*` flags.
    pub wc_flags: u32,
    /// P_Key index (UD).
    pub pkey_index: u16,
    /// Source LID.
    pub slid: u16,
    /// Service level.
    pub sl: u8,
    /// Destination LID path bits.
    pub dlid_path_bits: u8,
}

/// `struct ibv_qp_cap`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct IbvQpCap {
    /// Outstanding send work requests.
    pub max_send_wr: u32,
    /// Outstanding receive work requests.
    pub max_recv_wr: u32,
    /// SGEs per send request.
    pub max_send_sge: u32,
    /// SGEs per receive request.
    pub max_recv_sge: u32,
    /// Inline bytes per send request.
    pub max_inline_data: u32,
}

/// `struct ibv_qp_init_attr`.
#[repr(C)]
#[derive(Debug)]
pub struct IbvQpInitAttr {
    /// The program's pointer, handed back with its events.
    pub qp_context: *mut c_void,
    /// CQ of send completions.
    pub send_cq: *mut IbvCq,
    /// CQ of receive completions.
    pub recv_cq: *mut IbvCq,
    /// The SRQ receives come from (NULL: the QP's own RQ).
    pub srq: *mut c_void,
    /// Requested capacities; the ones provided are written back.
    pub cap: IbvQpCap,
    /// `enum ibv_qp_type`.
    pub qp_type: c_int,
    /// Every send request completes with a CQE.
    pub sq_sig_all: c_int,
}

/// `struct ibv_qp`.
#[repr(C)]
pub struct IbvQp {
    /// The context of its PD.
    pub context: *mut IbvContext,
    /// The program's pointer.
    pub qp_context: *mut c_void,
    /// Its PD.
    pub pd: *mut IbvPd,
    /// CQ of send completions.
    pub send_cq: *mut IbvCq,
    /// CQ of receive completions.
    pub recv_cq: *mut IbvCq,
    /// Its SRQ (NULL: none).
    pub srq: *mut c_void,
    /// The QP number.
    pub handle: u32,
    /// The QP number.
    pub qp_num: u32,
    /// `enum ibv_qp_state` as last set.
    pub state: c_int,
    /// `enum ibv_qp_type`.
    pub qp_type: c_int,
    /// libibverbs' lock for event counting.
    pub mutex: libc::pthread_mutex_t,
    /// libibverbs' condition for event counting.
    pub cond: libc::pthread_cond_t,
    /// Asynchronous events acknowledged.
    pub events_completed: u32,
}

/// `union ibv_gid`: 16 bytes, aligned as its two `__be64` halves.
#[repr(C, align(8))]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct IbvGid {
    /// The GID, network byte order.
    pub raw: [u8; 16],
}

/// `struct ibv_global_route`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct IbvGlobalRoute {
    /// Destination GID.
    pub dgid: IbvGid,
    /// Flow label.
    pub flow_label: u32,
    /// Source GID index.
    pub sgid_index: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
}

/// `struct ibv_ah_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct IbvAhAttr {
    /// The GRH.
    pub grh: IbvGlobalRoute,
    /// Destination LID (0 on RoCE).
    pub dlid: u16,
    /// Service level.
    pub sl: u8,
    /// Source path bits.
    pub src_path_bits: u8,
    /// Static rate.
    pub static_rate: u8,
    /// The GRH is used (always on RoCE).
    pub is_global: u8,
    /// Port.
    pub port_num: u8,
}

/// `struct ibv_qp_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct IbvQpAttr {
    /// `enum ibv_qp_state`.
    pub qp_state: c_int,
    /// `enum ibv_qp_state`.
    pub cur_qp_state: c_int,
    /// `enum ibv_mtu`.
    pub path_mtu: c_int,
    /// `enum ibv_mig_state`.
    pub path_mig_state: c_int,
    /// Q_Key.
    pub qkey: u32,
    /// Receive PSN.
    pub rq_psn: u32,
    /// Send PSN.
    pub sq_psn: u32,
    /// Destination QP.
    pub dest_qp_num: u32,
    /// `IBV_ACCESS_REMOTE_*`.
    pub qp_access_flags: u32,
    /// Capacities (query).
    pub cap: IbvQpCap,
    /// Primary path.
    pub ah_attr: IbvAhAttr,
    /// Alternate path.
    pub alt_ah_attr: IbvAhAttr,
    /// P_Key index.
    pub pkey_index: u16,
    /// Alternate P_Key index.
    pub alt_pkey_index: u16,
    /// Ask for SQ-drained events.
    pub en_sqd_async_notify: u8,
    /// The send queue is draining (query).
    pub sq_draining: u8,
    /// READ/atomics as requester.
    pub max_rd_atomic: u8,
    /// READ/atomics as responder.
    pub max_dest_rd_atomic: u8,
    /// Minimum RNR NAK timer.
    pub min_rnr_timer: u8,
    /// Port.
    pub port_num: u8,
    /// Local ACK timeout.
    pub timeout: u8,
    /// Retry count.
    pub retry_cnt: u8,
    /// RNR retry count.
    pub rnr_retry: u8,
    /// Alternate port.
    pub alt_port_num: u8,
    /// Alternate timeout.
    pub alt_timeout: u8,
    /// Rate limit in kbps.
    pub rate_limit: u32,
}

/// Index of `post_send` in `struct ibv_context_ops`.
pub const OP_POST_SEND: usize = 25;
/// Index of `post_recv` in `struct ibv_context_ops`.
pub const OP_POST_RECV: usize = 26;

/// `struct ibv_sge`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct IbvSge {
    /// Start address.
    pub addr: u64,
    /// Length.
    pub length: u32,
    /// Local key.
    pub lkey: u32,
}

/// `wr.rdma` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct WrRdma {
    /// Remote address.
    pub remote_addr: u64,
    /// Remote key.
    pub rkey: u32,
}

/// `wr.atomic` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct WrAtomic {
    /// Remote address.
    pub remote_addr: u64,
    /// Compare (CMP_AND_SWP) or add (FETCH_AND_ADD) value.
    pub compare_add: u64,
    /// Swap value.
    pub swap: u64,
    /// Remote key.
    pub rkey: u32,
}

/// `wr.ud` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct WrUd {
    /// Address handle.
    pub ah: *mut c_void,
    /// Destination QP.
    pub remote_qpn: u32,
    /// Destination Q_Key.
    pub remote_qkey: u32,
}

/// The `wr` union of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union WrUnion {
    /// RDMA operations.
    pub rdma: WrRdma,
    /// Atomics.
    pub atomic: WrAtomic,
    /// UD sends.
    pub ud: WrUd,
}

/// `struct ibv_mw_bind_info`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct IbvMwBindInfo {
    /// The MR the window lies in.
    pub mr: *mut IbvMr,
    /// Start.
    pub addr: u64,
    /// Length.
    pub length: u64,
    /// `IBV_ACCESS_REMOTE_*`.
    pub mw_access_flags: u32,
}

/// `bind_mw` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct WrBindMw {
    /// The window.
    pub mw: *mut c_void,
    /// The window's new rkey.
    pub rkey: u32,
    /// What it binds.
    pub bind_info: IbvMwBindInfo,
}

/// `tso` of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct WrTso {
    /// Header.
    pub hdr: *mut c_void,
    /// Header size.
    pub hdr_sz: u16,
    /// Segment size.
    pub mss: u16,
}

/// The last, anonymous union of `struct ibv_send_wr`.
#[repr(C)]
#[derive(Clone, Copy)]
pub union WrExt {
    /// Memory window binds.
    pub bind_mw: WrBindMw,
    /// TCP segmentation offload (raw packet QPs).
    pub tso: WrTso,
}

/// `struct ibv_send_wr`.
#[repr(C)]
pub struct IbvSendWr {
    /// Echoed in the completion.
    pub wr_id: u64,
    /// The next request of the list (NULL: the last).
    pub next: *mut IbvSendWr,
    /// Gather list.
    pub sg_list: *mut IbvSge,
    /// Its entries.
    pub num_sge: c_int,
    /// `enum ibv_wr_opcode`.
    pub opcode: c_int,
    /// `IBV_SEND_*`.
    pub send_flags: u32,
    /// Immediate data (network byte order) or the rkey to invalidate.
    pub imm_data: u32,
    /// The operation's own fields.
    pub wr: WrUnion,
    /// `qp_type.xrc.remote_srqn`.
    pub qp_type: u32,
    /// Bind or TSO fields.
    pub ext: WrExt,
}

/// `struct ibv_recv_wr`.
#[repr(C)]
pub struct IbvRecvWr {
    /// Echoed in the completion.
    pub wr_id: u64,
    /// The next request of the list (NULL: the last).
    pub next: *mut IbvRecvWr,
    /// Scatter list.
    pub sg_list: *mut IbvSge,
    /// Its entries.
    pub num_sge: c_int,
}

/// `struct ibv_ah`.
#[repr(C)]
#[derive(Debug)]
pub struct IbvAh {
    /// The context of its PD.
    pub context: *mut IbvContext,
    /// Its PD.
    pub pd: *mut IbvPd,
    /// A number naming it.
    pub handle: u32,
}

/// Index of `post_srq_recv` in `struct ibv_context_ops`.
pub const OP_POST_SRQ_RECV: usize = 20;

/// `struct ibv_srq_attr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct IbvSrqAttr {
    /// Receive requests it holds.
    pub max_wr: u32,
    /// SGEs per request.
    pub max_sge: u32,
    /// Limit event threshold.
    pub srq_limit: u32,
}

/// `struct ibv_srq_init_attr`.
#[repr(C)]
#[derive(Debug)]
pub struct IbvSrqInitAttr {
    /// The program's pointer.
    pub srq_context: *mut c_void,
    /// Requested attributes; the ones provided are written back.
    pub attr: IbvSrqAttr,
}

/// `struct ibv_srq`.
#[repr(C)]
pub struct IbvSrq {
    /// The context of its PD.
    pub context: *mut IbvContext,
    /// The program's pointer.
    pub srq_context: *mut c_void,
    /// Its PD.
    pub pd: *mut IbvPd,
    /// The SRQ number.
    pub handle: u32,
    /// libibverbs' lock for event counting.
    pub mutex: libc::pthread_mutex_t,
    /// libibverbs' condition for event counting.
    pub cond: libc::pthread_cond_t,
    /// Asynchronous events acknowledged.
    pub events_completed: u32,
}

/// `struct ibv_comp_channel`.
#[repr(C)]
#[derive(Debug)]
pub struct IbvCompChannel {
    /// The context it was made on.
    pub context: *mut IbvContext,
    /// Readable when an event may be waiting.
    pub fd: c_int,
    /// CQs using it.
    pub refcnt: c_int,
}

/// `struct ibv_gid_entry`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct IbvGidEntry {
    /// The GID, network byte order.
    pub gid: [u8; 16],
    /// Its index.
    pub gid_index: u32,
    /// Its port.
    pub port_num: u32,
    /// `enum ibv_gid_type`.
    pub gid_type: u32,
    /// The network interface it belongs to: 0, none.
    pub ndev_ifindex: u32,
}

/// `struct ibv_async_event`: the object (`element`, a union of the CQ,
/// QP, SRQ and WQ pointers and the port number) and `enum
/// ibv_event_type`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct IbvAsyncEvent {
    /// The object's pointer, or the port number in its low 32 bits.
    pub element: *mut c_void,
    /// `enum ibv_event_type`.
    pub event_type: c_int,
}

/// `alloc_mw`, `bind_mw` and `dealloc_mw` of `struct ibv_context_ops`,
/// which the header's inline `ibv_alloc_mw`, `ibv_bind_mw` and
/// `ibv_dealloc_mw` call.
pub const OP_ALLOC_MW: usize = 7;
/// See [`OP_ALLOC_MW`].
pub const OP_BIND_MW: usize = 8;
/// See [`OP_ALLOC_MW`].
pub const OP_DEALLOC_MW: usize = 9;

/// `struct ibv_mw`.
#[repr(C)]
#[derive(Debug)]
pub struct IbvMw {
    /// The context of its PD.
    pub context: *mut IbvContext,
    /// Its PD.
    pub pd: *mut IbvPd,
    /// Its rkey (after the last bind `ibv_bind_mw` made).
    pub rkey: u32,
    /// Handle.
    pub handle: u32,
    /// `enum ibv_mw_type`: 1 or 2.
    pub mw_type: c_int,
}

/// `struct ibv_mw_bind`: what `ibv_bind_mw` takes.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct IbvMwBind {
    /// Echoed in the completion.
    pub wr_id: u64,
    /// `IBV_SEND_*`.
    pub send_flags: u32,
    /// What it binds.
    pub bind_info: IbvMwBindInfo,
}

/// `__VERBS_ABI_IS_EXTENDED`: the `abi_compat` of a context that is a
/// `struct verbs_context`, whose extended operations the header's inline
/// helpers then call.
pub const VERBS_ABI_IS_EXTENDED: *mut c_void = usize::MAX as *mut c_void;

/// `struct verbs_context`: the extended operations, in the header's order
/// (newest first), then `sz` and the `struct ibv_context` programs hold,
/// last. An operation left NULL is one the header's helper reports as
/// unsupported (`EOPNOTSUPP`) or serves another way.
#[repr(C)]
#[allow(missing_docs)] // The header's operation names.
pub struct VerbsContext {
    pub query_port: *mut c_void,
    pub advise_mr: *mut c_void,
    pub alloc_null_mr: *mut c_void,
    pub read_counters: *mut c_void,
    pub attach_counters_point_flow: *mut c_void,
    pub create_counters: *mut c_void,
    pub destroy_counters: *mut c_void,
    pub reg_dm_mr: *mut c_void,
    pub alloc_dm: *mut c_void,
    pub free_dm: *mut c_void,
    pub modify_flow_action_esp: *mut c_void,
    pub destroy_flow_action: *mut c_void,
    pub create_flow_action_esp: *mut c_void,
    pub modify_qp_rate_limit: *mut c_void,
    pub alloc_parent_domain: *mut c_void,
    pub dealloc_td: *mut c_void,
    pub alloc_td: *mut c_void,
    pub modify_cq: *mut c_void,
    pub post_srq_ops: *mut c_void,
    pub destroy_rwq_ind_table: *mut c_void,
    pub create_rwq_ind_table: *mut c_void,
    pub destroy_wq: *mut c_void,
    pub modify_wq: *mut c_void,
    pub create_wq: *mut c_void,
    pub query_rt_values: *mut c_void,
    pub create_cq_ex: *mut c_void,
    /// libibverbs' private part: NULL.
    pub priv_: *mut c_void,
    pub query_device_ex: *mut c_void,
    pub ibv_destroy_flow: *mut c_void,
    pub abi_placeholder2: *mut c_void,
    pub ibv_create_flow: *mut c_void,
    pub abi_placeholder1: *mut c_void,
    pub open_qp: *mut c_void,
    pub create_qp_ex: *mut c_void,
    pub get_srq_num: *mut c_void,
    pub create_srq_ex: *mut c_void,
    pub open_xrcd: *mut c_void,
    pub close_xrcd: *mut c_void,
    pub abi_placeholder3: u64,
    /// This structure's size: the header's helpers use an operation only
    /// if `sz` reaches it.
    pub sz: usize,
    /// What programs hold.
    pub context: IbvContext,
}

/// `struct ibv_odp_caps`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(missing_docs)]
pub struct IbvOdpCaps {
    pub general_caps: u64,
    pub rc_odp_caps: u32,
    pub uc_odp_caps: u32,
    pub ud_odp_caps: u32,
}

/// `struct ibv_rss_caps`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
#[allow(missing_docs)]
pub struct IbvRssCaps {
    pub supported_qpts: u32,
    pub max_rwq_indirection_tables: u32,
    pub max_rwq_indirection_table_size: u32,
    pub rx_hash_fields_mask: u64,
    pub rx_hash_function: u8,
}

/// `struct ibv_device_attr_ex`: `struct ibv_device_attr` and the
/// capabilities of the extended verbs (on-demand paging, TSO, RSS, rate
/// limits, tag matching, CQ moderation, device memory, PCI atomics), all
/// of which rnic lacks.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
#[allow(missing_docs)] // The header's names; the capability groups are flattened.
pub struct IbvDeviceAttrEx {
    pub orig_attr: IbvDeviceAttr,
    pub comp_mask: u32,
    pub odp_caps: IbvOdpCaps,
    pub completion_timestamp_mask: u64,
    pub hca_core_clock: u64,
    pub device_cap_flags_ex: u64,
    /// `struct ibv_tso_caps`: max_tso, supported_qpts.
    pub tso_caps: [u32; 2],
    pub rss_caps: IbvRssCaps,
    pub max_wq_type_rq: u32,
    /// `struct ibv_packet_pacing_caps`: min, max (kb/s), supported_qpts.
    pub packet_pacing_caps: [u32; 3],
    pub raw_packet_caps: u32,
    /// `struct ibv_tm_caps`: max_rndv_hdr_size, max_num_tags, flags,
    /// max_ops, max_sge.
    pub tm_caps: [u32; 5],
    /// `struct ibv_cq_moderation_caps`: max_cq_count, max_cq_period.
    pub cq_mod_caps: [u16; 2],
    pub max_dm_size: u64,
    /// `struct ibv_pci_atomic_caps`: fetch_add, swap, compare_swap.
    pub pci_atomic_caps: [u16; 3],
    pub xrc_odp_caps: u32,
    pub phys_port_cnt_ex: u32,
}

/// `struct ibv_srq_init_attr_ex`: `struct ibv_srq_init_attr`, then what
/// the mask names.
#[repr(C)]
#[allow(missing_docs)] // The header's names.
pub struct IbvSrqInitAttrEx {
    pub srq_context: *mut c_void,
    pub attr: IbvSrqAttr,
    pub comp_mask: u32,
    /// `enum ibv_srq_type`: 0 basic, 1 XRC, 2 tag matching.
    pub srq_type: c_int,
    pub pd: *mut IbvPd,
    pub xrcd: *mut c_void,
    pub cq: *mut IbvCq,
    /// `struct ibv_tm_cap`: max_num_tags, max_ops.
    pub tm_cap: [u32; 2],
}

/// `struct ibv_cq_ex`: `struct ibv_cq`, then the polling interface the
/// header's inline `ibv_start_poll`, `ibv_next_poll`, `ibv_end_poll` and
/// `ibv_wc_read_*` call: the current completion's status and `wr_id` in
/// fields, the rest through its `read_*` entries.
#[repr(C)]
#[allow(missing_docs)] // The header's names.
pub struct IbvCqEx {
    pub cq: IbvCq,
    pub comp_mask: u32,
    /// `enum ibv_wc_status` of the current completion.
    pub status: c_int,
    /// `wr_id` of the current completion.
    pub wr_id: u64,
    pub start_poll: *mut c_void,
    pub next_poll: *mut c_void,
    pub end_poll: *mut c_void,
    pub read_opcode: *mut c_void,
    pub read_vendor_err: *mut c_void,
    pub read_byte_len: *mut c_void,
    pub read_imm_data: *mut c_void,
    pub read_qp_num: *mut c_void,
    pub read_src_qp: *mut c_void,
    pub read_wc_flags: *mut c_void,
    pub read_slid: *mut c_void,
    pub read_sl: *mut c_void,
    pub read_dlid_path_bits: *mut c_void,
    pub read_completion_ts: *mut c_void,
    pub read_cvlan: *mut c_void,
    pub read_flow_tag: *mut c_void,
    pub read_tm_info: *mut c_void,
    pub read_completion_wallclock_ns: *mut c_void,
}

/// `struct ibv_cq_init_attr_ex`.
#[repr(C)]
#[allow(missing_docs)] // The header's names.
pub struct IbvCqInitAttrEx {
    pub cqe: u32,
    pub cq_context: *mut c_void,
    pub channel: *mut IbvCompChannel,
    pub comp_vector: u32,
    /// `IBV_WC_EX_WITH_*`: what the program will read.
    pub wc_flags: u64,
    pub comp_mask: u32,
    /// `IBV_CREATE_CQ_ATTR_*`.
    pub flags: u32,
    pub parent_domain: *mut IbvPd,
}

/// `struct ibv_qp_ex`: `struct ibv_qp`, then the work-request interface
/// the header's inline `ibv_wr_*` call.
#[repr(C)]
#[allow(missing_docs)] // The header's names.
pub struct IbvQpEx {
    pub qp_base: IbvQp,
    pub comp_mask: u64,
    /// `wr_id` of the requests the next `wr_*` operation starts.
    pub wr_id: u64,
    /// `IBV_SEND_*` of the requests the next `wr_*` operation starts.
    pub wr_flags: u32,
    pub wr_atomic_cmp_swp: *mut c_void,
    pub wr_atomic_fetch_add: *mut c_void,
    pub wr_bind_mw: *mut c_void,
    pub wr_local_inv: *mut c_void,
    pub wr_rdma_read: *mut c_void,
    pub wr_rdma_write: *mut c_void,
    pub wr_rdma_write_imm: *mut c_void,
    pub wr_send: *mut c_void,
    pub wr_send_imm: *mut c_void,
    pub wr_send_inv: *mut c_void,
    pub wr_send_tso: *mut c_void,
    pub wr_set_ud_addr: *mut c_void,
    pub wr_set_xrc_srqn: *mut c_void,
    pub wr_set_inline_data: *mut c_void,
    pub wr_set_inline_data_list: *mut c_void,
    pub wr_set_sge: *mut c_void,
    pub wr_set_sge_list: *mut c_void,
    pub wr_start: *mut c_void,
    pub wr_complete: *mut c_void,
    pub wr_abort: *mut c_void,
    pub wr_atomic_write: *mut c_void,
}

/// `struct ibv_qp_init_attr_ex`: the fields of `struct
/// ibv_qp_init_attr`, then what the mask names.
#[repr(C)]
#[allow(missing_docs)] // The header's names.
pub struct IbvQpInitAttrEx {
    /// `struct ibv_qp_init_attr`'s fields, inline (so `comp_mask` takes
    /// that structure's tail padding).
    pub qp_context: *mut c_void,
    pub send_cq: *mut IbvCq,
    pub recv_cq: *mut IbvCq,
    pub srq: *mut c_void,
    pub cap: IbvQpCap,
    pub qp_type: c_int,
    pub sq_sig_all: c_int,
    pub comp_mask: u32,
    pub pd: *mut IbvPd,
    pub xrcd: *mut c_void,
    pub create_flags: u32,
    pub max_tso_header: u16,
    pub rwq_ind_tbl: *mut c_void,
    /// `struct ibv_rx_hash_conf`: function, key length, key, fields mask.
    pub rx_hash_conf: [u64; 3],
    pub source_qpn: u32,
    /// `IBV_QP_EX_WITH_*`.
    pub send_ops_flags: u64,
}

/// `struct ibv_data_buf`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
#[allow(missing_docs)]
pub struct IbvDataBuf {
    pub addr: *mut c_void,
    pub length: usize,
}

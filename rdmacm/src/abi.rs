//! The structures of rdma-core 44's `rdma/rdma_cma.h` (and
//! `infiniband/sa.h`'s path record) that programs see, field for field;
//! the tests compare every size and offset with the headers.

use std::ffi::{c_char, c_int, c_void};

use rnic_verbs_abi::{IbvAhAttr, IbvCompChannel, IbvContext, IbvCq, IbvGid, IbvPd, IbvQp};

/// `enum rdma_cm_event_type`.
pub mod event {
    /// Address resolved.
    pub const ADDR_RESOLVED: i32 = 0;
    /// Address resolution failed.
    pub const ADDR_ERROR: i32 = 1;
    /// Route resolved.
    pub const ROUTE_RESOLVED: i32 = 2;
    /// Route resolution failed.
    pub const ROUTE_ERROR: i32 = 3;
    /// A connection request on a listener.
    pub const CONNECT_REQUEST: i32 = 4;
    /// A connection response (no QP on the ID).
    pub const CONNECT_RESPONSE: i32 = 5;
    /// Connecting failed.
    pub const CONNECT_ERROR: i32 = 6;
    /// The peer is unreachable (the CM timed out).
    pub const UNREACHABLE: i32 = 7;
    /// The peer rejected.
    pub const REJECTED: i32 = 8;
    /// Connected.
    pub const ESTABLISHED: i32 = 9;
    /// Disconnected.
    pub const DISCONNECTED: i32 = 10;
    /// The device went away.
    pub const DEVICE_REMOVAL: i32 = 11;
    /// Multicast join done.
    pub const MULTICAST_JOIN: i32 = 12;
    /// Multicast failed.
    pub const MULTICAST_ERROR: i32 = 13;
    /// The address changed.
    pub const ADDR_CHANGE: i32 = 14;
    /// TimeWait is over.
    pub const TIMEWAIT_EXIT: i32 = 15;
}

/// `struct rdma_event_channel`.
#[repr(C)]
#[derive(Debug)]
pub struct RdmaEventChannel {
    /// Readable while an event waits.
    pub fd: c_int,
}

/// `struct rdma_ib_addr`.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct RdmaIbAddr {
    /// The local GID.
    pub sgid: IbvGid,
    /// The remote GID.
    pub dgid: IbvGid,
    /// The P_Key, network byte order.
    pub pkey: u16,
}

/// `struct rdma_addr`: the source and destination socket addresses (each
/// a union whose largest member is a `sockaddr_storage`) and the IB
/// addresses.
#[repr(C)]
pub struct RdmaAddr {
    /// Source address.
    pub src: libc::sockaddr_storage,
    /// Destination address.
    pub dst: libc::sockaddr_storage,
    /// `addr.ibaddr`.
    pub ibaddr: RdmaIbAddr,
}

/// `struct ibv_sa_path_rec` (`infiniband/sa.h`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct IbvSaPathRec {
    /// Destination GID.
    pub dgid: IbvGid,
    /// Source GID.
    pub sgid: IbvGid,
    /// Destination LID (network order).
    pub dlid: u16,
    /// Source LID (network order).
    pub slid: u16,
    /// Raw traffic.
    pub raw_traffic: c_int,
    /// Flow label (network order).
    pub flow_label: u32,
    /// Hop limit.
    pub hop_limit: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Reversible path.
    pub reversible: c_int,
    /// Paths.
    pub numb_path: u8,
    /// P_Key (network order).
    pub pkey: u16,
    /// Service level.
    pub sl: u8,
    /// MTU selector.
    pub mtu_selector: u8,
    /// `enum ibv_mtu`.
    pub mtu: u8,
    /// Rate selector.
    pub rate_selector: u8,
    /// `enum ibv_rate`.
    pub rate: u8,
    /// Packet lifetime selector.
    pub packet_life_time_selector: u8,
    /// Packet lifetime (4.096 µs · 2^n).
    pub packet_life_time: u8,
    /// Preference.
    pub preference: u8,
}

/// `struct rdma_route`.
#[repr(C)]
pub struct RdmaRoute {
    /// The addresses.
    pub addr: RdmaAddr,
    /// The path records (NULL until the route is resolved).
    pub path_rec: *mut IbvSaPathRec,
    /// How many.
    pub num_paths: c_int,
}

/// `struct rdma_cm_id`.
#[repr(C)]
pub struct RdmaCmId {
    /// The device's context, once bound to one.
    pub verbs: *mut IbvContext,
    /// Its event channel.
    pub channel: *mut RdmaEventChannel,
    /// The program's pointer.
    pub context: *mut c_void,
    /// The QP made by `rdma_create_qp`.
    pub qp: *mut IbvQp,
    /// Addresses and path.
    pub route: RdmaRoute,
    /// `enum rdma_port_space`.
    pub ps: c_int,
    /// The port.
    pub port_num: u8,
    /// The event `rdma_get_request` or a synchronous call left.
    pub event: *mut RdmaCmEvent,
    /// Completion channel of `send_cq` (`rdma_create_ep`).
    pub send_cq_channel: *mut IbvCompChannel,
    /// Send CQ made by `rdma_create_qp` without one.
    pub send_cq: *mut IbvCq,
    /// Completion channel of `recv_cq`.
    pub recv_cq_channel: *mut IbvCompChannel,
    /// Receive CQ.
    pub recv_cq: *mut IbvCq,
    /// SRQ.
    pub srq: *mut c_void,
    /// PD.
    pub pd: *mut IbvPd,
    /// `enum ibv_qp_type`.
    pub qp_type: c_int,
}

/// `struct rdma_conn_param`.
#[repr(C)]
#[derive(Debug, Clone, Copy)]
pub struct RdmaConnParam {
    /// Private data.
    pub private_data: *const c_void,
    /// Its length.
    pub private_data_len: u8,
    /// READs and atomics answered at once.
    pub responder_resources: u8,
    /// READs and atomics outstanding.
    pub initiator_depth: u8,
    /// End-to-end flow control.
    pub flow_control: u8,
    /// Transport retries.
    pub retry_count: u8,
    /// RNR retries.
    pub rnr_retry_count: u8,
    /// The QP uses an SRQ (without a QP on the ID).
    pub srq: u8,
    /// The QP number (without a QP on the ID).
    pub qp_num: u32,
}

/// `struct rdma_ud_param`.
#[repr(C)]
#[derive(Clone, Copy)]
pub struct RdmaUdParam {
    /// Private data.
    pub private_data: *const c_void,
    /// Its length.
    pub private_data_len: u8,
    /// The address of the remote QP.
    pub ah_attr: IbvAhAttr,
    /// The remote QP.
    pub qp_num: u32,
    /// Its Q_Key.
    pub qkey: u32,
}

/// The union of `struct rdma_cm_event`'s parameters.
#[repr(C)]
#[derive(Clone, Copy)]
pub union RdmaCmEventParam {
    /// Connected.
    pub conn: RdmaConnParam,
    /// Datagrams.
    pub ud: RdmaUdParam,
}

/// `struct rdma_cm_event`.
#[repr(C)]
pub struct RdmaCmEvent {
    /// The ID (a new one for a connection request).
    pub id: *mut RdmaCmId,
    /// The listener of a connection request.
    pub listen_id: *mut RdmaCmId,
    /// `enum rdma_cm_event_type`.
    pub event: c_int,
    /// 0, or an error (a negative errno, or a REJ's reason).
    pub status: c_int,
    /// The parameters.
    pub param: RdmaCmEventParam,
}

/// `struct rdma_addrinfo`.
#[repr(C)]
pub struct RdmaAddrinfo {
    /// `RAI_*` flags.
    pub ai_flags: c_int,
    /// Address family.
    pub ai_family: c_int,
    /// `enum ibv_qp_type`.
    pub ai_qp_type: c_int,
    /// `enum rdma_port_space`.
    pub ai_port_space: c_int,
    /// Source address length.
    pub ai_src_len: libc::socklen_t,
    /// Destination address length.
    pub ai_dst_len: libc::socklen_t,
    /// Source address.
    pub ai_src_addr: *mut libc::sockaddr,
    /// Destination address.
    pub ai_dst_addr: *mut libc::sockaddr,
    /// Source name.
    pub ai_src_canonname: *mut c_char,
    /// Destination name.
    pub ai_dst_canonname: *mut c_char,
    /// Route data length.
    pub ai_route_len: usize,
    /// Route data.
    pub ai_route: *mut c_void,
    /// Connection data length.
    pub ai_connect_len: usize,
    /// Connection data.
    pub ai_connect: *mut c_void,
    /// The next.
    pub ai_next: *mut RdmaAddrinfo,
}

/// `RAI_PASSIVE`: a listener's address.
pub const RAI_PASSIVE: c_int = 1;
/// `RAI_NUMERICHOST`: the node is an address, not a name.
pub const RAI_NUMERICHOST: c_int = 2;
/// The Q_Key of rdma_cm's UD QPs (`RDMA_UDP_QKEY`).
pub const RDMA_UDP_QKEY: u32 = 0x0123_4567;

//! QP attributes (`struct ibv_qp_attr`, `struct ibv_ah_attr`,
//! `struct ibv_qp_cap`).

use crate::attr::Gid;
use crate::enums::{Mtu, QpState};

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

/// QP attributes (`struct ibv_qp_attr`): the input of a modify (only the
/// fields named in the mask are used) and the output of a query.
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
    /// Moving to SQD: ask for the SQ-drained event once the
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

/// Queue capacities (`struct ibv_qp_cap`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QpCap {
    /// Outstanding send work requests.
    pub max_send_wr: u32,
    /// Outstanding receive work requests.
    pub max_recv_wr: u32,
    /// Scatter/gather entries per send request.
    pub max_send_sge: u32,
    /// Scatter/gather entries per receive request.
    pub max_recv_sge: u32,
    /// Inline payload bytes per send request.
    pub max_inline_data: u32,
}

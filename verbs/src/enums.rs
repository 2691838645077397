//! The verbs enumerations and flags, with libibverbs' numeric values
//! (`<infiniband/verbs.h>`). A device whose formats use the same values
//! (rnic's) carries them as they are; another (PVRDMA's) converts.

use rnic_queues::wire_enum;

wire_enum! {
    /// QP states (`enum ibv_qp_state`).
    QpState: u8 {
        /// Reset: no work is processed.
        Reset = 0,
        /// Initialized: receives may be posted.
        Init = 1,
        /// Ready to receive.
        Rtr = 2,
        /// Ready to send.
        Rts = 3,
        /// Send queue drain.
        Sqd = 4,
        /// Send queue error (UD/UC only).
        Sqe = 5,
        /// Error: outstanding work is flushed.
        Err = 6,
    }
}

wire_enum! {
    /// QP transport types (`enum ibv_qp_type`, and the kernel's
    /// `IB_QPT_GSI`, which libibverbs does not name).
    QpType: u8 {
        /// The general services QP, QP1 (IBA 13.5.2): a UD QP at QPN 1
        /// that carries management datagrams (the communication manager's),
        /// with the well-known Q_Key [`GSI_QKEY`]; one per port.
        Gsi = 1,
        /// Reliable connected.
        Rc = 2,
        /// Unreliable connected.
        Uc = 3,
        /// Unreliable datagram.
        Ud = 4,
    }
}

/// The Q_Key of the general services QP (IBA 13.5.2): every MAD it
/// sends carries it, and it takes no datagram with another.
pub const GSI_QKEY: u32 = 0x8001_0000;

impl QpType {
    /// Whether the QP sends and receives datagrams (UD, and the general
    /// services QP, which is UD).
    pub const fn is_datagram(self) -> bool {
        matches!(self, QpType::Ud | QpType::Gsi)
    }
}

wire_enum! {
    /// Path MTU (`enum ibv_mtu`).
    Mtu: u8 {
        /// 256 bytes.
        Mtu256 = 1,
        /// 512 bytes.
        Mtu512 = 2,
        /// 1024 bytes.
        Mtu1024 = 3,
        /// 2048 bytes.
        Mtu2048 = 4,
        /// 4096 bytes.
        Mtu4096 = 5,
    }
}

impl Mtu {
    /// The MTU in bytes.
    pub const fn bytes(self) -> u32 {
        128 << (self as u32)
    }
}

wire_enum! {
    /// Port states (`enum ibv_port_state`).
    PortState: u8 {
        /// No state change.
        Nop = 0,
        /// Link down.
        Down = 1,
        /// Link up, not configured.
        Init = 2,
        /// Armed.
        Armed = 3,
        /// Active: traffic flows.
        Active = 4,
    }
}

wire_enum! {
    /// Link layers (`IBV_LINK_LAYER_*`).
    LinkLayer: u8 {
        /// Unspecified.
        Unspecified = 0,
        /// InfiniBand.
        Infiniband = 1,
        /// Ethernet (RoCE).
        Ethernet = 2,
    }
}

wire_enum! {
    /// GID types (`enum ibv_gid_type`).
    GidType: u8 {
        /// InfiniBand GID.
        Ib = 0,
        /// RoCE v1.
        RoceV1 = 1,
        /// RoCE v2 (UDP port 4791).
        RoceV2 = 2,
    }
}

wire_enum! {
    /// Work request opcodes (`enum ibv_wr_opcode`).
    WrOpcode: u8 {
        /// RDMA WRITE.
        RdmaWrite = 0,
        /// RDMA WRITE with immediate.
        RdmaWriteWithImm = 1,
        /// SEND.
        Send = 2,
        /// SEND with immediate.
        SendWithImm = 3,
        /// RDMA READ.
        RdmaRead = 4,
        /// Atomic compare and swap.
        AtomicCmpAndSwp = 5,
        /// Atomic fetch and add.
        AtomicFetchAndAdd = 6,
        /// Local invalidate.
        LocalInv = 7,
        /// Bind memory window.
        BindMw = 8,
        /// SEND with invalidate.
        SendWithInv = 9,
    }
}

wire_enum! {
    /// Work completion opcodes (`enum ibv_wc_opcode`).
    WcOpcode: u8 {
        /// SEND completed.
        Send = 0,
        /// RDMA WRITE completed.
        RdmaWrite = 1,
        /// RDMA READ completed.
        RdmaRead = 2,
        /// Compare and swap completed.
        CompSwap = 3,
        /// Fetch and add completed.
        FetchAdd = 4,
        /// Memory window bind completed.
        BindMw = 5,
        /// Local invalidate completed.
        LocalInv = 6,
        /// A SEND was received.
        Recv = 128,
        /// An RDMA WRITE with immediate was received.
        RecvRdmaWithImm = 129,
    }
}

wire_enum! {
    /// Work completion statuses (`enum ibv_wc_status`).
    WcStatus: u8 {
        /// Success.
        Success = 0,
        /// Local length error: a received message did not fit.
        LocLenErr = 1,
        /// Local QP operation error: a malformed WQE.
        LocQpOpErr = 2,
        /// Local EE context operation error.
        LocEecOpErr = 3,
        /// Local protection error: bad lkey, bounds or PD.
        LocProtErr = 4,
        /// Flushed: the QP was in the error state.
        WrFlushErr = 5,
        /// Memory window bind error.
        MwBindErr = 6,
        /// Bad response.
        BadRespErr = 7,
        /// Local access error.
        LocAccessErr = 8,
        /// Remote invalid request: the responder rejected the request.
        RemInvReqErr = 9,
        /// Remote access error: bad rkey, bounds or access rights.
        RemAccessErr = 10,
        /// Remote operation error: the responder could not complete it.
        RemOpErr = 11,
        /// Transport retry counter exceeded.
        RetryExcErr = 12,
        /// Receiver-not-ready retry counter exceeded.
        RnrRetryExcErr = 13,
        /// Local RDD violation.
        LocRddViolErr = 14,
        /// Remote invalid RD request.
        RemInvRdReqErr = 15,
        /// Remote aborted.
        RemAbortErr = 16,
        /// Invalid EE context number.
        InvEecnErr = 17,
        /// Invalid EE context state.
        InvEecStateErr = 18,
        /// Fatal error.
        FatalErr = 19,
        /// Response timeout.
        RespTimeoutErr = 20,
        /// General error.
        GeneralErr = 21,
        /// Tag matching error.
        TmErr = 22,
        /// Tag matching rendezvous incomplete.
        TmRndvIncomplete = 23,
    }
}

/// Memory access flags (`enum ibv_access_flags`).
pub mod access {
    /// The device may write the memory locally (receive, READ response).
    pub const LOCAL_WRITE: u32 = 1 << 0;
    /// Remote RDMA WRITE is allowed.
    pub const REMOTE_WRITE: u32 = 1 << 1;
    /// Remote RDMA READ is allowed.
    pub const REMOTE_READ: u32 = 1 << 2;
    /// Remote atomics are allowed.
    pub const REMOTE_ATOMIC: u32 = 1 << 3;
    /// Memory windows may be bound.
    pub const MW_BIND: u32 = 1 << 4;
    /// Every flag this device version implements for MRs.
    pub const MR_SUPPORTED: u32 =
        LOCAL_WRITE | REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC | MW_BIND;
    /// Every flag a memory window may grant.
    pub const MW_SUPPORTED: u32 = REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC;
    /// Every flag that may be set in a QP's access flags.
    pub const QP_SUPPORTED: u32 = REMOTE_WRITE | REMOTE_READ | REMOTE_ATOMIC;
}

/// QP attribute mask bits (`enum ibv_qp_attr_mask`).
pub mod qp_attr {
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
    /// `ah_attr` (address vector).
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
    /// `alt_ah_attr` and friends.
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_match_libibverbs() {
        assert_eq!(WcStatus::from_raw(5), Some(WcStatus::WrFlushErr));
        assert_eq!(WcStatus::RemAccessErr.raw(), 10);
        assert_eq!(WcStatus::from_raw(24), None);
        assert_eq!(QpState::from_raw(6), Some(QpState::Err));
        assert_eq!(WcOpcode::from_raw(129), Some(WcOpcode::RecvRdmaWithImm));
        assert_eq!(Mtu::Mtu1024.bytes(), 1024);
        assert_eq!(Mtu::Mtu4096.bytes(), 4096);
        assert_eq!(qp_attr::DEST_QPN, 0x0010_0000);
    }
}

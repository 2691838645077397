//! Verbs-level enumerations carried in commands, WQEs and CQEs.
//!
//! Their numeric values are those of libibverbs (`<infiniband/verbs.h>`), so
//! a value read from the device is the value an application expects.

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
    /// QP transport types (`enum ibv_qp_type`).
    QpType: u8 {
        /// Reliable connected.
        Rc = 2,
        /// Unreliable connected.
        Uc = 3,
        /// Unreliable datagram.
        Ud = 4,
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
    /// Work request opcodes (`enum ibv_wr_opcode`), as written in
    /// [`crate::wqe::CtrlWord::opcode`].
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

/// Attribute masks a QP state transition requires and allows, as the
/// InfiniBand spec (and the kernel's `ib_modify_qp_is_ok`) define them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Transition {
    /// Bits of [`qp_attr`] that must be set.
    pub required: u32,
    /// Further bits that may be set.
    pub optional: u32,
}

/// The masks for moving a QP of type `ty` from `cur` to `next`, or `None`
/// if the transition is not allowed. Any state may move to `Reset` or `Err`;
/// `Sqe` is entered by the device only (a UC or UD send error), and RC QPs
/// never are in it.
pub const fn qp_transition(ty: QpType, cur: QpState, next: QpState) -> Option<Transition> {
    use qp_attr::*;
    use QpState::*;
    const fn t(required: u32, optional: u32) -> Option<Transition> {
        Some(Transition {
            required: required | STATE,
            optional,
        })
    }
    match (cur, next) {
        (_, Reset) | (_, Err) => t(0, 0),
        (Reset, Init) => match ty {
            QpType::Rc | QpType::Uc => t(PKEY_INDEX | PORT | ACCESS_FLAGS, 0),
            QpType::Ud => t(PKEY_INDEX | PORT | QKEY, 0),
        },
        (Init, Init) => match ty {
            QpType::Rc | QpType::Uc => t(0, PKEY_INDEX | PORT | ACCESS_FLAGS),
            QpType::Ud => t(0, PKEY_INDEX | PORT | QKEY),
        },
        (Init, Rtr) => match ty {
            QpType::Rc => t(
                AV | PATH_MTU | DEST_QPN | RQ_PSN | MAX_DEST_RD_ATOMIC | MIN_RNR_TIMER,
                ALT_PATH | ACCESS_FLAGS | PKEY_INDEX,
            ),
            QpType::Uc => t(
                AV | PATH_MTU | DEST_QPN | RQ_PSN,
                ALT_PATH | ACCESS_FLAGS | PKEY_INDEX,
            ),
            QpType::Ud => t(0, PKEY_INDEX | QKEY),
        },
        (Rtr, Rts) => match ty {
            QpType::Rc => t(
                SQ_PSN | TIMEOUT | RETRY_CNT | RNR_RETRY | MAX_QP_RD_ATOMIC,
                CUR_STATE | ALT_PATH | ACCESS_FLAGS | MIN_RNR_TIMER | PATH_MIG_STATE,
            ),
            QpType::Uc => t(SQ_PSN, CUR_STATE | ALT_PATH | ACCESS_FLAGS | PATH_MIG_STATE),
            QpType::Ud => t(SQ_PSN, CUR_STATE | QKEY),
        },
        (Rts, Rts) => match ty {
            QpType::Rc => t(
                0,
                CUR_STATE | ACCESS_FLAGS | ALT_PATH | PATH_MIG_STATE | MIN_RNR_TIMER,
            ),
            QpType::Uc => t(0, CUR_STATE | ACCESS_FLAGS | ALT_PATH | PATH_MIG_STATE),
            QpType::Ud => t(0, CUR_STATE | QKEY),
        },
        (Rts, Sqd) => t(0, EN_SQD_ASYNC_NOTIFY),
        (Sqd, Rts) => match ty {
            QpType::Rc => t(
                0,
                CUR_STATE | ALT_PATH | ACCESS_FLAGS | MIN_RNR_TIMER | PATH_MIG_STATE,
            ),
            QpType::Uc => t(0, CUR_STATE | ALT_PATH | ACCESS_FLAGS | PATH_MIG_STATE),
            QpType::Ud => t(0, CUR_STATE | QKEY),
        },
        (Sqd, Sqd) => match ty {
            QpType::Rc => t(
                0,
                PORT | AV
                    | TIMEOUT
                    | RETRY_CNT
                    | RNR_RETRY
                    | MAX_QP_RD_ATOMIC
                    | MAX_DEST_RD_ATOMIC
                    | ALT_PATH
                    | ACCESS_FLAGS
                    | PKEY_INDEX
                    | MIN_RNR_TIMER
                    | PATH_MIG_STATE,
            ),
            QpType::Uc => t(
                0,
                AV | ALT_PATH | ACCESS_FLAGS | PKEY_INDEX | PATH_MIG_STATE,
            ),
            QpType::Ud => t(0, PKEY_INDEX | QKEY),
        },
        (Sqe, Rts) => match ty {
            QpType::Rc => None,
            QpType::Uc => t(0, CUR_STATE | ACCESS_FLAGS),
            QpType::Ud => t(0, CUR_STATE | QKEY),
        },
        _ => None,
    }
}

#[cfg(test)]
mod transition_tests {
    use super::*;

    #[test]
    fn rc_path_masks() {
        let t = qp_transition(QpType::Rc, QpState::Reset, QpState::Init).unwrap();
        assert_eq!(
            t.required,
            qp_attr::STATE | qp_attr::PKEY_INDEX | qp_attr::PORT | qp_attr::ACCESS_FLAGS
        );
        let t = qp_transition(QpType::Rc, QpState::Init, QpState::Rtr).unwrap();
        assert_ne!(t.required & qp_attr::DEST_QPN, 0);
        assert!(qp_transition(QpType::Rc, QpState::Reset, QpState::Rts).is_none());
        assert!(qp_transition(QpType::Rc, QpState::Init, QpState::Rts).is_none());
        assert!(qp_transition(QpType::Rc, QpState::Err, QpState::Rts).is_none());
        assert_eq!(
            qp_transition(QpType::Rc, QpState::Rts, QpState::Err)
                .unwrap()
                .required,
            qp_attr::STATE
        );
        assert_eq!(
            qp_transition(QpType::Rc, QpState::Err, QpState::Reset)
                .unwrap()
                .required,
            qp_attr::STATE
        );
    }

    #[test]
    fn sqd_and_sqe_masks() {
        use qp_attr::*;
        use QpState::*;
        let opt = |ty, a, b| qp_transition(ty, a, b).map(|t| (t.required, t.optional));
        for ty in [QpType::Rc, QpType::Uc, QpType::Ud] {
            assert_eq!(opt(ty, Rts, Sqd), Some((STATE, EN_SQD_ASYNC_NOTIFY)));
            assert!(qp_transition(ty, Rtr, Sqd).is_none());
            assert!(qp_transition(ty, Sqd, Rtr).is_none());
            assert!(qp_transition(ty, Rts, Sqe).is_none(), "the device's only");
        }
        assert_eq!(opt(QpType::Ud, Sqd, Sqd), Some((STATE, PKEY_INDEX | QKEY)));
        assert_eq!(opt(QpType::Ud, Sqe, Rts), Some((STATE, CUR_STATE | QKEY)));
        assert_eq!(
            opt(QpType::Uc, Sqe, Rts),
            Some((STATE, CUR_STATE | ACCESS_FLAGS))
        );
        assert!(qp_transition(QpType::Rc, Sqe, Rts).is_none());
        let rc = opt(QpType::Rc, Sqd, Sqd).unwrap().1;
        assert!(rc & AV != 0 && rc & TIMEOUT != 0 && rc & QKEY == 0);
    }
}

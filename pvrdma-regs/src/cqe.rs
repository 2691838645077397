//! Completion queue entries, and the entries of the async event and
//! CQ-notification rings (`vmw_pvrdma-abi.h`, `pvrdma_dev_api.h`).
//!
//! A CQ's CQEs follow its state page; the device produces on the state
//! page's `rx` ring and the driver consumes, then tells the device with
//! the CQ doorbell's POLL bit. The async event ring ([`Eqe`]) and the
//! CQ-notification ring ([`Cqne`]: the handle of a CQ that has new
//! entries, when armed) are rings of the same kind, reached through the
//! DSR.

use endian_num::{le16, le32, le64};
use rnic_queues::wire_enum;
use static_assertions::{assert_eq_size, const_assert_eq};

/// Size of a CQE.
pub const CQE_SIZE: usize = 64;

/// A completion (`struct pvrdma_cqe`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Cqe {
    /// The work request ID.
    pub wr_id: le64,
    /// The QP's handle.
    pub qp: le64,
    /// A [`WcOpcode`] value.
    pub opcode: le32,
    /// A [`WcStatus`] value.
    pub status: le32,
    /// Bytes received, or read.
    pub byte_len: le32,
    /// Immediate data.
    pub imm_data: le32,
    /// Source QP (UD receives).
    pub src_qp: le32,
    /// [`wc_flags`] bits.
    pub wc_flags: le32,
    /// Vendor error.
    pub vendor_err: le32,
    /// P_Key index.
    pub pkey_index: le16,
    /// Source LID.
    pub slid: le16,
    /// Service level.
    pub sl: u8,
    /// Destination LID path bits.
    pub dlid_path_bits: u8,
    /// Port number.
    pub port_num: u8,
    /// Source MAC address.
    pub smac: [u8; 6],
    /// `enum pvrdma_network_type`.
    pub network_hdr_type: u8,
    /// Reserved, to 64 bytes.
    pub reserved2: [u8; 6],
}

wire_enum! {
    /// Completion opcodes (`enum pvrdma_wc_opcode`: libibverbs' values).
    WcOpcode: u32 {
        /// SEND.
        Send = 0,
        /// RDMA WRITE.
        RdmaWrite = 1,
        /// RDMA READ.
        RdmaRead = 2,
        /// Compare and swap.
        CompSwap = 3,
        /// Fetch and add.
        FetchAdd = 4,
        /// Memory window bind.
        BindMw = 5,
        /// Large send offload.
        Lso = 6,
        /// Local invalidate.
        LocalInv = 7,
        /// Fast registration.
        FastRegMr = 8,
        /// Masked compare and swap.
        MaskedCompSwap = 9,
        /// Masked fetch and add.
        MaskedFetchAdd = 10,
        /// A receive.
        Recv = 128,
        /// A receive of an RDMA WRITE with immediate.
        RecvRdmaWithImm = 129,
    }
}

wire_enum! {
    /// Completion statuses (`enum pvrdma_wc_status`: libibverbs' values).
    WcStatus: u32 {
        /// Success.
        Success = 0,
        /// Local length error.
        LocLenErr = 1,
        /// Local QP operation error.
        LocQpOpErr = 2,
        /// Local EE context operation error.
        LocEecOpErr = 3,
        /// Local protection error.
        LocProtErr = 4,
        /// Flushed.
        WrFlushErr = 5,
        /// Memory window bind error.
        MwBindErr = 6,
        /// Bad response.
        BadRespErr = 7,
        /// Local access error.
        LocAccessErr = 8,
        /// Remote invalid request.
        RemInvReqErr = 9,
        /// Remote access error.
        RemAccessErr = 10,
        /// Remote operation error.
        RemOpErr = 11,
        /// Transport retries exceeded.
        RetryExcErr = 12,
        /// RNR retries exceeded.
        RnrRetryExcErr = 13,
        /// Local RDD violation.
        LocRddViolErr = 14,
        /// Remote invalid RD request.
        RemInvRdReqErr = 15,
        /// Remote abort.
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
    }
}

/// `wc_flags` bits (`enum pvrdma_wc_flags`).
pub mod wc_flags {
    /// A GRH precedes the received data.
    pub const GRH: u32 = 1 << 0;
    /// `imm_data` is valid.
    pub const WITH_IMM: u32 = 1 << 1;
    /// An rkey was invalidated.
    pub const WITH_INVALIDATE: u32 = 1 << 2;
    /// IP checksum verified.
    pub const IP_CSUM_OK: u32 = 1 << 3;
    /// `smac` is valid.
    pub const WITH_SMAC: u32 = 1 << 4;
    /// A VLAN tag was present.
    pub const WITH_VLAN: u32 = 1 << 5;
    /// `network_hdr_type` is valid.
    pub const WITH_NETWORK_HDR_TYPE: u32 = 1 << 6;
}

wire_enum! {
    /// Async event types (`enum pvrdma_eqe_type`: libibverbs' values).
    EventType: u32 {
        /// CQ error.
        CqErr = 0,
        /// QP fatal.
        QpFatal = 1,
        /// QP invalid request.
        QpReqErr = 2,
        /// QP access error.
        QpAccessErr = 3,
        /// Communication established.
        CommEst = 4,
        /// Send queue drained.
        SqDrained = 5,
        /// Path migrated.
        PathMig = 6,
        /// Path migration error.
        PathMigErr = 7,
        /// Device fatal.
        DeviceFatal = 8,
        /// Port active.
        PortActive = 9,
        /// Port error.
        PortErr = 10,
        /// LID change.
        LidChange = 11,
        /// P_Key change.
        PkeyChange = 12,
        /// SM change.
        SmChange = 13,
        /// SRQ error.
        SrqErr = 14,
        /// SRQ limit reached.
        SrqLimitReached = 15,
        /// Last WQE reached.
        QpLastWqeReached = 16,
        /// Client reregister.
        ClientReregister = 17,
        /// GID change.
        GidChange = 18,
    }
}

/// An async event (`struct pvrdma_eqe`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Eqe {
    /// An [`EventType`] value.
    pub kind: le32,
    /// The object's handle, or the port.
    pub info: le32,
}

/// A CQ notification (`struct pvrdma_cqne`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct Cqne {
    /// The CQ's handle.
    pub info: le32,
}

assert_eq_size!(Cqe, [u8; CQE_SIZE]);
assert_eq_size!(Eqe, [u8; 8]);
assert_eq_size!(Cqne, [u8; 4]);
const_assert_eq!(core::mem::offset_of!(Cqe, vendor_err), 40);
const_assert_eq!(core::mem::offset_of!(Cqe, sl), 48);
const_assert_eq!(core::mem::offset_of!(Cqe, smac), 51);
const_assert_eq!(core::mem::offset_of!(Cqe, network_hdr_type), 57);

// Plain data for DMA memory: every field listed, so padding fails the build.
rnic_queues::pod_struct! {
    Cqe {
        wr_id, qp, opcode, status, byte_len, imm_data, src_qp, wc_flags, vendor_err, pkey_index,
        slid, sl, dlid_path_bits, port_num, smac, network_hdr_type, reserved2,
    }
    Eqe { kind, info }
    Cqne { info }
}

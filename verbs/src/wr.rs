//! Work requests: what `post_send` and `post_recv` take.

use crate::qp::AhAttr;

/// One scatter/gather entry (`struct ibv_sge`): `length` bytes at `addr`
/// in the MR named by `lkey`. Zero-length entries are skipped. Laid out as
/// `struct ibv_sge`, so that a program's list can be passed as it is.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sge {
    /// Start address, in the MR's address space (an MR's address as the provider reports it).
    pub addr: u64,
    /// Length in bytes, at most 2^31.
    pub length: u32,
    /// Local key of the MR.
    pub lkey: u32,
}

/// Remote buffer of an RDMA or atomic operation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RemoteAddr {
    /// Remote virtual address (8-byte aligned for atomics).
    pub addr: u64,
    /// Remote key of the MR holding it.
    pub rkey: u32,
}

/// Where a UD send goes (`ibv_send_wr.wr.ud`): an address handle's path,
/// the destination QP and its Q_Key. Made by a provider's address handle
/// (rnic's `Ah::dest`); the path is copied into each WQE, as libibverbs
/// providers do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdDest {
    pdn: u32,
    ah: AhAttr,
    /// Destination QP number (24 bits).
    pub remote_qpn: u32,
    /// Q_Key of the destination QP; with its high bit set, the sending
    /// QP's own Q_Key is sent instead (IBA 10.2.5).
    pub remote_qkey: u32,
}

impl UdDest {
    /// The destination through an address handle of PD `pdn` whose
    /// attributes (checked when it was made) are `ah`. Providers make it.
    pub fn new(pdn: u32, ah: AhAttr, remote_qpn: u32, remote_qkey: u32) -> Self {
        Self {
            pdn,
            ah,
            remote_qpn,
            remote_qkey,
        }
    }

    /// The address handle's PD: it must be the QP's.
    pub fn pdn(&self) -> u32 {
        self.pdn
    }

    /// The address handle's attributes.
    pub fn ah(&self) -> &AhAttr {
        &self.ah
    }
}

/// The type of a memory window (`enum ibv_mw_type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MwType {
    /// Bound with a bind call (`ibv_bind_mw`) by any QP of its PD, which
    /// any QP of the PD may then use; rebinding replaces the binding.
    Type1 = 1,
    /// Bound with a [`SendOp::BindMw`] work request to the QP that posts
    /// it, which alone may use it until it is invalidated
    /// ([`SendOp::LocalInv`], or the peer's [`SendOp::SendWithInv`]).
    Type2 = 2,
}

/// A memory window bind (`struct ibv_mw_bind` with its `bind_info`): the
/// window of rkey `mw_rkey` becomes `new_rkey` and reaches `length` bytes
/// at `addr` of the MR of `mr_lkey` with `access`. Made by
/// a provider's memory window (rnic's `Mw::bind_wr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MwBind {
    /// The window's rkey before the bind.
    pub mw_rkey: u32,
    /// Its rkey after it: the same index, the next key byte.
    pub new_rkey: u32,
    /// The MR (which must allow [`crate::access::MW_BIND`]).
    pub mr_lkey: u32,
    /// Start address, inside the MR.
    pub addr: u64,
    /// Length in bytes (0 unbinds a type 1 window).
    pub length: u64,
    /// `REMOTE_*` access the window grants.
    pub access: u32,
}

/// The operation of a send work request, with its operands
/// (`ibv_send_wr.opcode` and `wr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SendOp {
    /// A UD SEND (with immediate data if `imm` is given) to `dest`: the
    /// only operation of a UD QP, and one message of at most the port's
    /// MTU (a longer one is completed without being sent, IBA
    /// C10-93.1.1).
    UdSend {
        /// The destination.
        dest: UdDest,
        /// Immediate data, network byte order.
        imm: Option<[u8; 4]>,
    },
    /// SEND: the payload lands in the peer's next receive WQE.
    Send,
    /// SEND with immediate data (network byte order), delivered in the
    /// peer's receive completion.
    SendWithImm {
        /// Immediate data, network byte order.
        imm: [u8; 4],
    },
    /// SEND that invalidates the peer's type 2 memory window `rkey`
    /// (bound to the receiving QP) as it completes (RC only).
    SendWithInv {
        /// The peer's window to invalidate.
        rkey: u32,
    },
    /// Binds a memory window (`IBV_WR_BIND_MW`); no payload. RC and UC.
    BindMw {
        /// What to bind.
        bind: MwBind,
    },
    /// Invalidates the local type 2 memory window `rkey`
    /// (`IBV_WR_LOCAL_INV`); no payload. RC and UC.
    LocalInv {
        /// The window to invalidate.
        rkey: u32,
    },
    /// RDMA WRITE of the payload to `remote`.
    RdmaWrite {
        /// Destination.
        remote: RemoteAddr,
    },
    /// RDMA WRITE with immediate: also consumes a peer receive WQE.
    RdmaWriteWithImm {
        /// Destination.
        remote: RemoteAddr,
        /// Immediate data, network byte order.
        imm: [u8; 4],
    },
    /// RDMA READ from `remote` into the scatter list.
    RdmaRead {
        /// Source.
        remote: RemoteAddr,
    },
    /// Atomic compare and swap of the 8 bytes at `remote`; the original
    /// value lands in the (single, 8-byte) scatter entry.
    AtomicCmpAndSwp {
        /// Target, 8-byte aligned.
        remote: RemoteAddr,
        /// Value compared with the target.
        compare: u64,
        /// Value stored if they are equal.
        swap: u64,
    },
    /// Atomic fetch and add on the 8 bytes at `remote`; the original value
    /// lands in the (single, 8-byte) scatter entry.
    AtomicFetchAndAdd {
        /// Target, 8-byte aligned.
        remote: RemoteAddr,
        /// Value added.
        add: u64,
    },
}

impl SendOp {
    /// The remote buffer, for operations that have one.
    pub fn remote(&self) -> Option<RemoteAddr> {
        match *self {
            Self::Send
            | Self::SendWithImm { .. }
            | Self::SendWithInv { .. }
            | Self::UdSend { .. }
            | Self::BindMw { .. }
            | Self::LocalInv { .. } => None,
            Self::RdmaWrite { remote }
            | Self::RdmaWriteWithImm { remote, .. }
            | Self::RdmaRead { remote }
            | Self::AtomicCmpAndSwp { remote, .. }
            | Self::AtomicFetchAndAdd { remote, .. } => Some(remote),
        }
    }

    /// Whether the device does it itself, sending nothing (a window bind
    /// or local invalidate): it carries no payload.
    pub fn is_local(&self) -> bool {
        matches!(self, Self::BindMw { .. } | Self::LocalInv { .. })
    }

    /// Whether this is an atomic operation.
    pub fn is_atomic(&self) -> bool {
        matches!(
            self,
            Self::AtomicCmpAndSwp { .. } | Self::AtomicFetchAndAdd { .. }
        )
    }

    /// Whether the payload may be inline (SEND and RDMA WRITE kinds).
    pub fn allows_inline(&self) -> bool {
        matches!(
            self,
            Self::Send
                | Self::SendWithImm { .. }
                | Self::SendWithInv { .. }
                | Self::UdSend { .. }
                | Self::RdmaWrite { .. }
                | Self::RdmaWriteWithImm { .. }
        )
    }
}

/// Where a send work request's data is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Payload<'a> {
    /// A gather list (SEND, WRITE) or scatter list (READ, atomics) of
    /// registered memory.
    Sgl(&'a [Sge]),
    /// Inline data (`IBV_SEND_INLINE`): the bytes are copied into the WQE
    /// when posting, so the buffer is free again as soon as `post_send`
    /// returns and needs no MR. At most the QP's `max_inline_data` bytes;
    /// SEND and RDMA WRITE kinds only.
    Inline(&'a [u8]),
}

/// Send flags (`enum ibv_send_flags` values). Inline data is selected with
/// [`Payload::Inline`] rather than a flag.
pub mod send_flags {
    /// Wait for earlier RDMA READs and atomics to complete first.
    pub const FENCE: u32 = 1 << 0;
    /// Generate a completion on success (always on error).
    pub const SIGNALED: u32 = 1 << 1;
    /// Set the solicited event bit (SEND, WRITE with immediate).
    pub const SOLICITED: u32 = 1 << 2;
    /// Every flag `post_send` accepts.
    pub const ALL: u32 = FENCE | SIGNALED | SOLICITED;
}

/// A send work request (`struct ibv_send_wr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendWr<'a> {
    /// Echoed in the completion.
    pub wr_id: u64,
    /// Operation and operands.
    pub op: SendOp,
    /// Data.
    pub payload: Payload<'a>,
    /// [`send_flags`] bits.
    pub flags: u32,
}

/// A receive work request (`struct ibv_recv_wr`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvWr<'a> {
    /// Echoed in the completion.
    pub wr_id: u64,
    /// Where the incoming message lands, in order.
    pub sg_list: &'a [Sge],
}

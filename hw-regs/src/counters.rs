//! Transport and port counters, read with the QUERY_COUNTERS command.
//!
//! One index space serves a port and a QP: a QP's query fills the
//! counters that belong to a QP (frames and bytes it sent and received,
//! and its transport events) and leaves the port-only ones (frames the
//! port dropped before any QP saw them) at 0; a port's query fills every
//! counter, the transport ones summed over all QPs, past and present,
//! since the last reset. Every counter is a 64-bit count that only grows
//! and wraps.

use endian_num::le32;
use endian_num::le64;
use static_assertions::assert_eq_size;

/// Number of counter slots in [`CountersOut`]: one page of the index
/// space.
pub const COUNTER_SLOTS: usize = 32;
/// Size of the counter index space: [`QueryCountersIn::first`] picks the
/// page a query returns.
pub const MAX_COUNTERS: usize = 64;

macro_rules! counters {
    ($($(#[$m:meta])* $name:ident = $idx:literal;)*) => {
        $( $(#[$m])* pub const $name: usize = $idx; )*
        /// Every counter's index and name (lower case, as `rdma statistic`
        /// spells counters), in index order.
        pub const NAMES: &[(usize, &str)] = &[$(($idx, stringify!($name)),)*];
    };
}

/// Counter indices into [`CountersOut::values`].
pub mod counter {
    counters! {
        /// Frames sent (port) or transport packets sent (QP).
        TX_FRAMES = 0;
        /// Bytes of those frames, Ethernet header to ICRC.
        TX_BYTES = 1;
        /// Frames received (port) or transport packets received (QP).
        RX_FRAMES = 2;
        /// Bytes of those frames.
        RX_BYTES = 3;
        /// Port: RoCEv2 frames dropped for a bad ICRC.
        RX_ICRC_ERRORS = 4;
        /// Port: frames dropped as malformed (truncated, inconsistent
        /// lengths, bad IP or UDP checksum, bad header values).
        RX_MALFORMED = 5;
        /// Port: RoCEv2 frames dropped for an unsupported BTH version.
        RX_BAD_VERSION = 6;
        /// Port: RoCEv2 frames dropped for a P_Key not in the P_Key table.
        RX_BAD_PKEY = 7;
        /// Port: RoCEv2 frames for a QP that does not exist, does not
        /// accept them in its state, or is connected to another source.
        RX_UNKNOWN_QP = 8;
        /// Port: frames that are not for this port (other addresses, other
        /// protocols and UDP ports, unknown opcodes), ignored.
        RX_IGNORED = 9;
        /// Request packets sent again (go-back-N after a timeout or NAK).
        RETRANSMITS = 10;
        /// Retransmit timer expiries (local ACK timeouts).
        LOCAL_ACK_TIMEOUTS = 11;
        /// PSN-sequence-error NAKs sent (out-of-sequence requests).
        SEQ_NAKS_SENT = 12;
        /// PSN-sequence-error NAKs received.
        SEQ_NAKS_RECEIVED = 13;
        /// RNR NAKs sent.
        RNR_NAKS_SENT = 14;
        /// RNR NAKs received.
        RNR_NAKS_RECEIVED = 15;
        /// Invalid-request NAKs sent.
        INV_REQ_NAKS_SENT = 16;
        /// Invalid-request NAKs received.
        INV_REQ_NAKS_RECEIVED = 17;
        /// Remote-access-error NAKs sent.
        ACCESS_NAKS_SENT = 18;
        /// Remote-access-error NAKs received.
        ACCESS_NAKS_RECEIVED = 19;
        /// Remote-operational-error NAKs sent.
        OP_NAKS_SENT = 20;
        /// Remote-operational-error NAKs received.
        OP_NAKS_RECEIVED = 21;
        /// Duplicate requests received (re-ACKed, re-executed or replayed).
        DUPLICATE_REQUESTS = 22;
        /// WQEs completed with `RETRY_EXC_ERR`.
        RETRY_EXCEEDED = 23;
        /// WQEs completed with `RNR_RETRY_EXC_ERR`.
        RNR_RETRY_EXCEEDED = 24;
        /// Responses ignored: duplicates, or out of sequence.
        RESPONSES_IGNORED = 25;
        /// ACKs sent (each may acknowledge several requests).
        ACKS_SENT = 26;
        /// Port: ARP requests and neighbour solicitations sent.
        NEIGH_REQUESTS_SENT = 27;
        /// Requests dropped because the responder's queue of answers was
        /// full (a peer sending beyond its window).
        RX_BUSY_DROPS = 28;
        /// UD messages dropped for a Q_Key other than the QP's.
        RX_BAD_QKEY = 29;
        /// UD messages dropped because no receive WQE was posted.
        RX_NO_RECV_WQE = 30;
        /// UD sends longer than the port's MTU: completed successfully
        /// without a packet, as IBA C10-93.1.1 requires.
        UD_TOO_LONG = 31;
        /// UC request packets dropped: after a lost packet until the next
        /// message starts, with no receive WQE, or refused by the
        /// responder's checks (rkey, access, opcode sequence, lengths).
        UC_DROPPED = 32;
        /// Port: management datagrams the general services QP sent
        /// (version 1.5).
        MADS_SENT = 33;
        /// Port: management datagrams the general services QP received.
        MADS_RECEIVED = 34;
        /// Port: management datagrams dropped: for QP0 (no subnet
        /// management on RoCE), for QP1 with no GSI QP ready, or with a
        /// Q_Key other than `GSI_QKEY`.
        MADS_DROPPED = 35;
    }
}

/// Which counters QUERY_COUNTERS reads.
pub mod scope {
    /// A port's counters; `id` is the port number (1).
    pub const PORT: u32 = 0;
    /// A QP's counters; `id` is the QPN.
    pub const QP: u32 = 1;
}

/// Input of QUERY_COUNTERS.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct QueryCountersIn {
    /// [`scope`] value.
    pub scope: le32,
    /// Port number or QPN.
    pub id: le32,
    /// Index of the first counter returned: 0 or [`COUNTER_SLOTS`] (device
    /// 1.2; a 1.1 driver's zero reads the first page).
    pub first: le32,
}

/// Output of QUERY_COUNTERS: every counter by its [`counter`] index;
/// unused slots read 0.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct CountersOut {
    /// The counts.
    pub values: [le64; COUNTER_SLOTS],
}

assert_eq_size!(QueryCountersIn, [u8; 12]);
assert_eq_size!(CountersOut, [u8; 256]);
static_assertions::const_assert!(core::mem::size_of::<CountersOut>() <= crate::cmd::CMD_OUT_SIZE);
static_assertions::const_assert!(counter::UC_DROPPED < MAX_COUNTERS);
static_assertions::const_assert!(MAX_COUNTERS % COUNTER_SLOTS == 0);

// Plain data for DMA memory: every field listed, so padding fails the build.
rnic_queues::pod_struct! {
    QueryCountersIn { scope, id, first }
    CountersOut { values }
}

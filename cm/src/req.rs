//! REQ, the request for communication (IBA 12.6.5, table 106): the active
//! side's QP, its starting PSN and the path, to a service ID.

use crate::field::{be24, be32, be64, bits, put24, put32, put64, with_bits};
use crate::path::{PathRepr, PATH_LEN};
use crate::{Error, CM_DATA_LEN};

/// Bytes of a REQ's private data.
pub const PRIVATE_DATA_LEN: usize = 92;
const PRIMARY_AT: usize = 52;
const ALTERNATE_AT: usize = 96;
const PRIVATE_AT: usize = 140;

/// The transport service a REQ asks for (its `Transport Service Type`).
pub mod transport {
    /// Reliable connection.
    pub const RC: u8 = 0;
    /// Unreliable connection.
    pub const UC: u8 = 1;
    /// Reliable datagram.
    pub const RD: u8 = 2;
    /// See the extended transport type (XRC).
    pub const EXTENDED: u8 = 3;
}

/// A REQ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReqRepr {
    /// The active side's communication ID.
    pub local_comm_id: u32,
    /// The sender's vendor ID (24 bits).
    pub vendor_id: u32,
    /// The service asked for.
    pub service_id: u64,
    /// The sender's CA GUID (its node GUID).
    pub local_ca_guid: u64,
    /// The sender QP's Q_Key (RD only).
    pub local_qkey: u32,
    /// The sender's QP number (24 bits).
    pub local_qpn: u32,
    /// READs and atomics the sender will answer at once (its
    /// `max_dest_rd_atomic`).
    pub responder_resources: u8,
    /// The sender's EE context (RD only; 24 bits).
    pub local_eecn: u32,
    /// READs and atomics the sender will have outstanding (its
    /// `max_rd_atomic`).
    pub initiator_depth: u8,
    /// The receiver's EE context (RD only; 24 bits).
    pub remote_eecn: u32,
    /// How long the receiver's CM takes to answer (5 bits, 4.096 µs ·
    /// 2^n): the sender waits that and the packet lifetime before it
    /// sends again.
    pub remote_cm_response_timeout: u8,
    /// [`transport`] (2 bits).
    pub transport: u8,
    /// End-to-end flow control.
    pub end_to_end_flow_control: bool,
    /// A starting PSN (24 bits): the PSN the sender's receive queue
    /// expects first, which the receiver's QP sends from (the Linux
    /// kernel's CM, as tests/vectors/cm captures it).
    pub starting_psn: u32,
    /// How long the sender's CM takes to answer (5 bits).
    pub local_cm_response_timeout: u8,
    /// Transport retries (3 bits).
    pub retry_count: u8,
    /// The partition key.
    pub pkey: u16,
    /// The path MTU (4 bits, `enum ibv_mtu`).
    pub path_mtu: u8,
    /// An RD channel exists.
    pub rdc_exists: bool,
    /// RNR retries (3 bits).
    pub rnr_retry_count: u8,
    /// Times the sender's CM sends this REQ again (4 bits).
    pub max_cm_retries: u8,
    /// The sender's QP takes receives from an SRQ.
    pub srq: bool,
    /// The extended transport type (3 bits; XRC 1).
    pub extended_transport: u8,
    /// The primary path.
    pub primary: PathRepr,
    /// The alternate path (all zero: none).
    pub alternate: PathRepr,
    /// Send and answer alternate path migration requests.
    pub sap_supported: bool,
    /// The consumer's private data (rdma_cm's header first, [`crate::cma`]).
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl ReqRepr {
    /// Reads a REQ from the CM data of a MAD (after its header).
    pub fn parse(d: &[u8]) -> Result<ReqRepr, Error> {
        if d.len() < CM_DATA_LEN {
            return Err(Error::Truncated);
        }
        let mut private_data = [0; PRIVATE_DATA_LEN];
        private_data.copy_from_slice(&d[PRIVATE_AT..PRIVATE_AT + PRIVATE_DATA_LEN]);
        Ok(ReqRepr {
            local_comm_id: be32(d, 0),
            vendor_id: be24(d, 5),
            service_id: be64(d, 8),
            local_ca_guid: be64(d, 16),
            local_qkey: be32(d, 28),
            local_qpn: be24(d, 32),
            responder_resources: d[35],
            local_eecn: be24(d, 36),
            initiator_depth: d[39],
            remote_eecn: be24(d, 40),
            remote_cm_response_timeout: bits(d[43], 0, 5),
            transport: bits(d[43], 5, 2),
            end_to_end_flow_control: bits(d[43], 7, 1) == 1,
            starting_psn: be24(d, 44),
            local_cm_response_timeout: bits(d[47], 0, 5),
            retry_count: bits(d[47], 5, 3),
            pkey: u16::from_be_bytes([d[48], d[49]]),
            path_mtu: bits(d[50], 0, 4),
            rdc_exists: bits(d[50], 4, 1) == 1,
            rnr_retry_count: bits(d[50], 5, 3),
            max_cm_retries: bits(d[51], 0, 4),
            srq: bits(d[51], 4, 1) == 1,
            extended_transport: bits(d[51], 5, 3),
            primary: PathRepr::parse(&d[PRIMARY_AT..PRIMARY_AT + PATH_LEN]),
            alternate: PathRepr::parse(&d[ALTERNATE_AT..ALTERNATE_AT + PATH_LEN]),
            sap_supported: bits(d[ALTERNATE_AT + 43], 5, 1) == 1,
            private_data,
        })
    }

    /// Writes the REQ into the CM data of a MAD (at least
    /// [`CM_DATA_LEN`] bytes), reserved bits 0.
    pub fn emit(&self, d: &mut [u8]) {
        d[..CM_DATA_LEN].fill(0);
        put32(d, 0, self.local_comm_id);
        put24(d, 5, self.vendor_id);
        put64(d, 8, self.service_id);
        put64(d, 16, self.local_ca_guid);
        put32(d, 28, self.local_qkey);
        put24(d, 32, self.local_qpn);
        d[35] = self.responder_resources;
        put24(d, 36, self.local_eecn);
        d[39] = self.initiator_depth;
        put24(d, 40, self.remote_eecn);
        d[43] = with_bits(
            with_bits(
                with_bits(0, 0, 5, self.remote_cm_response_timeout),
                5,
                2,
                self.transport,
            ),
            7,
            1,
            self.end_to_end_flow_control.into(),
        );
        put24(d, 44, self.starting_psn);
        d[47] = with_bits(
            with_bits(0, 0, 5, self.local_cm_response_timeout),
            5,
            3,
            self.retry_count,
        );
        d[48..50].copy_from_slice(&self.pkey.to_be_bytes());
        d[50] = with_bits(
            with_bits(
                with_bits(0, 0, 4, self.path_mtu),
                4,
                1,
                self.rdc_exists.into(),
            ),
            5,
            3,
            self.rnr_retry_count,
        );
        d[51] = with_bits(
            with_bits(
                with_bits(0, 0, 4, self.max_cm_retries),
                4,
                1,
                self.srq.into(),
            ),
            5,
            3,
            self.extended_transport,
        );
        self.primary.emit(&mut d[PRIMARY_AT..PRIMARY_AT + PATH_LEN]);
        self.alternate
            .emit(&mut d[ALTERNATE_AT..ALTERNATE_AT + PATH_LEN]);
        d[ALTERNATE_AT + 43] = with_bits(d[ALTERNATE_AT + 43], 5, 1, self.sap_supported.into());
        d[PRIVATE_AT..PRIVATE_AT + PRIVATE_DATA_LEN].copy_from_slice(&self.private_data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A REQ whose every field has a value of its own, at its widest.
    pub(crate) fn sample() -> ReqRepr {
        let path = |seed: u8| PathRepr {
            local_lid: 0xffff,
            remote_lid: 0xfffe,
            local_gid: [seed; 16],
            remote_gid: [seed + 1; 16],
            flow_label: 0xf_edcb,
            packet_rate: 0x3f,
            traffic_class: 0x6a,
            hop_limit: 64,
            sl: 0xf,
            subnet_local: true,
            local_ack_timeout: 0x1f,
        };
        ReqRepr {
            local_comm_id: 0x1234_5678,
            vendor_id: 0x00_02c9,
            service_id: 0x0000_0000_0106_4a5b,
            local_ca_guid: 0x0250_56ff_fe00_000a,
            local_qkey: 0,
            local_qpn: 0xab_cdef,
            responder_resources: 16,
            local_eecn: 0,
            initiator_depth: 15,
            remote_eecn: 0x12_3456,
            remote_cm_response_timeout: 20,
            transport: transport::UC,
            end_to_end_flow_control: true,
            starting_psn: 0x00_ba98,
            local_cm_response_timeout: 19,
            retry_count: 7,
            pkey: 0xffff,
            path_mtu: 5,
            rdc_exists: false,
            rnr_retry_count: 6,
            max_cm_retries: 15,
            srq: true,
            extended_transport: 1,
            primary: path(0x10),
            alternate: path(0x20),
            sap_supported: true,
            private_data: core::array::from_fn(|i| i as u8),
        }
    }

    #[test]
    fn every_field_round_trips_at_its_offset() {
        let r = sample();
        let mut d = [0xaau8; CM_DATA_LEN];
        r.emit(&mut d);
        assert_eq!(ReqRepr::parse(&d), Ok(r.clone()));
        // Table 106's positions, a few by hand.
        assert_eq!(&d[32..36], &[0xab, 0xcd, 0xef, 16]);
        assert_eq!(d[43], 20 << 3 | 1 << 1 | 1, "timeout, UC, e2e");
        assert_eq!(d[47], 19 << 3 | 7);
        assert_eq!(d[50], 5 << 4 | 6, "MTU 4096, RNR retry 6");
        assert_eq!(d[51], 15 << 4 | 1 << 3 | 1);
        assert_eq!(&d[88..92], &[0xfe, 0xdc, 0xb0, 0x3f], "flow label, rate");
        assert_eq!(d[94], 0xf << 4 | 1 << 3, "SL, subnet local");
        assert_eq!(d[95], 0x1f << 3);
        assert_eq!(d[139], 0x1f << 3 | 1 << 2, "the alternate timeout, SAP");
        assert_eq!(d[140..144], [0, 1, 2, 3]);
        assert_eq!(ReqRepr::parse(&d[..CM_DATA_LEN - 1]), Err(Error::Truncated));
    }

    #[test]
    fn reserved_bits_are_ignored_when_read_and_zero_when_written() {
        let r = sample();
        let mut d = [0u8; CM_DATA_LEN];
        r.emit(&mut d);
        // Bytes 4, 24..28 and the reserved bits of 90..91 set by a peer.
        let mut noisy = d;
        noisy[4] = 0xff;
        noisy[24..28].fill(0xff);
        noisy[90] |= 0x0f;
        noisy[91] |= 0xc0;
        noisy[94] |= 0x07;
        assert_eq!(ReqRepr::parse(&noisy), Ok(r.clone()));
        let mut again = [0xffu8; CM_DATA_LEN];
        ReqRepr::parse(&noisy).unwrap().emit(&mut again);
        assert_eq!(again, d);
    }
}

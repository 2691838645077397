//! REP, the reply to a REQ (IBA 12.6.8, table 110): the passive side's QP
//! and starting PSN, and what it accepted.

use crate::field::{be24, be32, be64, bits, put24, put32, put64, with_bits};
use crate::{Error, CM_DATA_LEN};

/// Bytes of a REP's private data.
pub const PRIVATE_DATA_LEN: usize = 196;
const PRIVATE_AT: usize = 36;

/// A REP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepRepr {
    /// The passive side's communication ID.
    pub local_comm_id: u32,
    /// The REQ's communication ID.
    pub remote_comm_id: u32,
    /// The sender QP's Q_Key (RD only).
    pub local_qkey: u32,
    /// The sender's QP number (24 bits).
    pub local_qpn: u32,
    /// The sender's EE context (RD only; 24 bits).
    pub local_eecn: u32,
    /// A starting PSN (24 bits): the PSN the sender expects first, which
    /// the REQ's sender sends from.
    pub starting_psn: u32,
    /// The sender's vendor ID (24 bits, spread over three bytes).
    pub vendor_id: u32,
    /// READs and atomics the sender will answer at once.
    pub responder_resources: u8,
    /// READs and atomics the sender will have outstanding.
    pub initiator_depth: u8,
    /// The sender's ACK delay (5 bits).
    pub target_ack_delay: u8,
    /// What the sender made of the REQ's alternate path (2 bits: 0
    /// accepted, 1 its port refused, 2 not supported, 3 unsupported
    /// channel).
    pub failover_accepted: u8,
    /// End-to-end flow control.
    pub end_to_end_flow_control: bool,
    /// RNR retries (3 bits).
    pub rnr_retry_count: u8,
    /// The sender's QP takes receives from an SRQ.
    pub srq: bool,
    /// The sender's CA GUID.
    pub local_ca_guid: u64,
    /// The consumer's private data.
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl RepRepr {
    /// Reads a REP from the CM data of a MAD.
    pub fn parse(d: &[u8]) -> Result<RepRepr, Error> {
        if d.len() < CM_DATA_LEN {
            return Err(Error::Truncated);
        }
        let mut private_data = [0; PRIVATE_DATA_LEN];
        private_data.copy_from_slice(&d[PRIVATE_AT..PRIVATE_AT + PRIVATE_DATA_LEN]);
        Ok(RepRepr {
            local_comm_id: be32(d, 0),
            remote_comm_id: be32(d, 4),
            local_qkey: be32(d, 8),
            local_qpn: be24(d, 12),
            local_eecn: be24(d, 16),
            starting_psn: be24(d, 20),
            vendor_id: u32::from_be_bytes([0, d[15], d[19], d[23]]),
            responder_resources: d[24],
            initiator_depth: d[25],
            target_ack_delay: bits(d[26], 0, 5),
            failover_accepted: bits(d[26], 5, 2),
            end_to_end_flow_control: bits(d[26], 7, 1) == 1,
            rnr_retry_count: bits(d[27], 0, 3),
            srq: bits(d[27], 3, 1) == 1,
            local_ca_guid: be64(d, 28),
            private_data,
        })
    }

    /// Writes the REP into the CM data of a MAD, reserved bits 0.
    pub fn emit(&self, d: &mut [u8]) {
        d[..CM_DATA_LEN].fill(0);
        put32(d, 0, self.local_comm_id);
        put32(d, 4, self.remote_comm_id);
        put32(d, 8, self.local_qkey);
        put24(d, 12, self.local_qpn);
        put24(d, 16, self.local_eecn);
        put24(d, 20, self.starting_psn);
        let v = self.vendor_id.to_be_bytes();
        (d[15], d[19], d[23]) = (v[1], v[2], v[3]);
        d[24] = self.responder_resources;
        d[25] = self.initiator_depth;
        d[26] = with_bits(
            with_bits(
                with_bits(0, 0, 5, self.target_ack_delay),
                5,
                2,
                self.failover_accepted,
            ),
            7,
            1,
            self.end_to_end_flow_control.into(),
        );
        d[27] = with_bits(
            with_bits(0, 0, 3, self.rnr_retry_count),
            3,
            1,
            self.srq.into(),
        );
        put64(d, 28, self.local_ca_guid);
        d[PRIVATE_AT..PRIVATE_AT + PRIVATE_DATA_LEN].copy_from_slice(&self.private_data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_round_trips_at_its_offset() {
        let r = RepRepr {
            local_comm_id: 0x0102_0304,
            remote_comm_id: 0x0506_0708,
            local_qkey: 0,
            local_qpn: 0x11_2233,
            local_eecn: 0x44_5566,
            starting_psn: 0x77_8899,
            vendor_id: 0xaa_bbcc,
            responder_resources: 4,
            initiator_depth: 5,
            target_ack_delay: 0x1f,
            failover_accepted: 2,
            end_to_end_flow_control: true,
            rnr_retry_count: 7,
            srq: true,
            local_ca_guid: 0x0250_56ff_fe00_0014,
            private_data: core::array::from_fn(|i| !(i as u8)),
        };
        let mut d = [0x55u8; CM_DATA_LEN];
        r.emit(&mut d);
        assert_eq!(RepRepr::parse(&d), Ok(r.clone()));
        assert_eq!(
            &d[12..24],
            &[0x11, 0x22, 0x33, 0xaa, 0x44, 0x55, 0x66, 0xbb, 0x77, 0x88, 0x99, 0xcc]
        );
        assert_eq!((d[26], d[27]), (0x1f << 3 | 2 << 1 | 1, 7 << 5 | 1 << 4));
        assert_eq!(d[36], 0xff);
    }
}

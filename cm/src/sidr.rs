//! SIDR REQ and SIDR REP (IBA 12.11, tables 119 and 120): service ID
//! resolution, how a UD consumer learns a service's QP number and Q_Key.

use crate::field::{be16, be24, be32, be64, put16, put24, put32, put64};
use crate::{Error, CM_DATA_LEN};

/// Bytes of a SIDR REQ's private data.
pub const REQ_PRIVATE_DATA_LEN: usize = 216;
/// Bytes of a SIDR REP's additional information.
pub const ADDITIONAL_INFO_LEN: usize = 72;
/// Bytes of a SIDR REP's private data.
pub const REP_PRIVATE_DATA_LEN: usize = 136;

/// SIDR REP statuses (IBA table 120).
pub mod status {
    /// The QP and Q_Key are valid.
    pub const SUCCESS: u8 = 0;
    /// No service with that ID.
    pub const UNSUPPORTED: u8 = 1;
    /// The service refused.
    pub const REJECT: u8 = 2;
    /// No QP available.
    pub const NO_QP: u8 = 3;
    /// Redirected (additional information: a ClassPortInfo).
    pub const REDIRECT: u8 = 4;
    /// Unsupported class version.
    pub const UNSUPPORTED_VERSION: u8 = 5;
}

/// A SIDR REQ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrReqRepr {
    /// The requester's ID for this resolution.
    pub request_id: u32,
    /// The partition key.
    pub pkey: u16,
    /// The service asked for.
    pub service_id: u64,
    /// The consumer's private data (rdma_cm's header first).
    pub private_data: [u8; REQ_PRIVATE_DATA_LEN],
}

impl SidrReqRepr {
    /// Reads a SIDR REQ from the CM data of a MAD.
    pub fn parse(d: &[u8]) -> Result<SidrReqRepr, Error> {
        if d.len() < CM_DATA_LEN {
            return Err(Error::Truncated);
        }
        let mut private_data = [0; REQ_PRIVATE_DATA_LEN];
        private_data.copy_from_slice(&d[16..16 + REQ_PRIVATE_DATA_LEN]);
        Ok(SidrReqRepr {
            request_id: be32(d, 0),
            pkey: be16(d, 4),
            service_id: be64(d, 8),
            private_data,
        })
    }

    /// Writes the SIDR REQ into the CM data of a MAD, reserved bytes 0.
    pub fn emit(&self, d: &mut [u8]) {
        put32(d, 0, self.request_id);
        put16(d, 4, self.pkey);
        put16(d, 6, 0);
        put64(d, 8, self.service_id);
        d[16..16 + REQ_PRIVATE_DATA_LEN].copy_from_slice(&self.private_data);
    }
}

/// A SIDR REP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SidrRepRepr {
    /// The SIDR REQ's request ID.
    pub request_id: u32,
    /// [`status`].
    pub status: u8,
    /// Bytes of `additional_info` that count.
    pub additional_info_len: u8,
    /// The sender's vendor ID (24 bits).
    pub vendor_id: u32,
    /// The service's QP (24 bits).
    pub qpn: u32,
    /// The service ID.
    pub service_id: u64,
    /// The service QP's Q_Key.
    pub qkey: u32,
    /// Additional information.
    pub additional_info: [u8; ADDITIONAL_INFO_LEN],
    /// The consumer's private data.
    pub private_data: [u8; REP_PRIVATE_DATA_LEN],
}

impl SidrRepRepr {
    /// Reads a SIDR REP from the CM data of a MAD.
    pub fn parse(d: &[u8]) -> Result<SidrRepRepr, Error> {
        if d.len() < CM_DATA_LEN {
            return Err(Error::Truncated);
        }
        let mut additional_info = [0; ADDITIONAL_INFO_LEN];
        additional_info.copy_from_slice(&d[24..24 + ADDITIONAL_INFO_LEN]);
        let mut private_data = [0; REP_PRIVATE_DATA_LEN];
        private_data.copy_from_slice(&d[96..96 + REP_PRIVATE_DATA_LEN]);
        Ok(SidrRepRepr {
            request_id: be32(d, 0),
            status: d[4],
            additional_info_len: d[5],
            vendor_id: u32::from(be16(d, 6)) << 8 | u32::from(d[11]),
            qpn: be24(d, 8),
            service_id: be64(d, 12),
            qkey: be32(d, 20),
            additional_info,
            private_data,
        })
    }

    /// Writes the SIDR REP into the CM data of a MAD.
    pub fn emit(&self, d: &mut [u8]) {
        put32(d, 0, self.request_id);
        d[4] = self.status;
        d[5] = self.additional_info_len;
        put16(d, 6, (self.vendor_id >> 8) as u16);
        put24(d, 8, self.qpn);
        d[11] = self.vendor_id as u8;
        put64(d, 12, self.service_id);
        put32(d, 20, self.qkey);
        d[24..24 + ADDITIONAL_INFO_LEN].copy_from_slice(&self.additional_info);
        d[96..96 + REP_PRIVATE_DATA_LEN].copy_from_slice(&self.private_data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips() {
        let q = SidrReqRepr {
            request_id: 0xdead_beef,
            pkey: 0xffff,
            service_id: 0x0000_0000_0111_1234,
            private_data: core::array::from_fn(|i| i as u8),
        };
        let mut d = [0x77u8; CM_DATA_LEN];
        q.emit(&mut d);
        assert_eq!(&d[4..8], &[0xff, 0xff, 0, 0]);
        assert_eq!(SidrReqRepr::parse(&d), Ok(q));
        let p = SidrRepRepr {
            request_id: 0xdead_beef,
            status: status::SUCCESS,
            additional_info_len: 0,
            vendor_id: 0x12_3456,
            qpn: 0xab_cdef,
            service_id: 0x0000_0000_0111_1234,
            qkey: 0x1234_5678,
            additional_info: [0; ADDITIONAL_INFO_LEN],
            private_data: [9; REP_PRIVATE_DATA_LEN],
        };
        p.emit(&mut d);
        assert_eq!(&d[6..12], &[0x12, 0x34, 0xab, 0xcd, 0xef, 0x56]);
        assert_eq!(SidrRepRepr::parse(&d), Ok(p));
    }
}

//! REJ, reject (IBA 12.6.7, table 108): a REQ or REP refused, or a
//! connection given up, with a reason.

use crate::field::{be16, be32, bits, put16, put32, with_bits};
use crate::{Error, CM_DATA_LEN};

/// Bytes of a REJ's additional rejection information.
pub const ARI_LEN: usize = 72;
/// Bytes of a REJ's private data.
pub const PRIVATE_DATA_LEN: usize = 148;

/// Rejection reasons (IBA 12.6.7.2, table 109), the kernel's
/// `enum ib_cm_rej_reason`.
pub mod reason {
    /// No QP available.
    pub const NO_QP: u16 = 1;
    /// No resources.
    pub const NO_RESOURCES: u16 = 3;
    /// The sender timed out waiting (ARI: the message's CA GUID).
    pub const TIMEOUT: u16 = 4;
    /// Unsupported request.
    pub const UNSUPPORTED: u16 = 5;
    /// Invalid communication ID.
    pub const INVALID_COMM_ID: u16 = 6;
    /// Invalid communication instance.
    pub const INVALID_COMM_INSTANCE: u16 = 7;
    /// No listener for the service ID.
    pub const INVALID_SERVICE_ID: u16 = 8;
    /// Invalid transport service type.
    pub const INVALID_TRANSPORT_TYPE: u16 = 9;
    /// A stale connection: the QP or comm ID is still in use.
    pub const STALE_CONN: u16 = 10;
    /// Invalid GID (ARI: the GID).
    pub const INVALID_GID: u16 = 12;
    /// Invalid path MTU.
    pub const INVALID_MTU: u16 = 26;
    /// Insufficient responder resources.
    pub const INSUFFICIENT_RESP_RESOURCES: u16 = 27;
    /// The consumer refused (`rdma_reject`): its private data says why.
    pub const CONSUMER_DEFINED: u16 = 28;
    /// Invalid RNR retry count.
    pub const INVALID_RNR_RETRY: u16 = 29;
    /// Duplicate local communication ID.
    pub const DUPLICATE_LOCAL_COMM_ID: u16 = 30;
    /// Unsupported class version.
    pub const INVALID_CLASS_VERSION: u16 = 31;
}

/// A REJ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RejRepr {
    /// The sender's communication ID (0 if it has none: a REQ refused
    /// before one was made).
    pub local_comm_id: u32,
    /// The receiver's.
    pub remote_comm_id: u32,
    /// The message rejected ([`crate::mra::message`], 2 bits).
    pub message: u8,
    /// Bytes of `ari` that count (7 bits).
    pub ari_len: u8,
    /// [`reason`].
    pub reason: u16,
    /// Additional rejection information.
    pub ari: [u8; ARI_LEN],
    /// The consumer's private data.
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl RejRepr {
    /// Reads a REJ from the CM data of a MAD.
    pub fn parse(d: &[u8]) -> Result<RejRepr, Error> {
        if d.len() < CM_DATA_LEN {
            return Err(Error::Truncated);
        }
        let mut ari = [0; ARI_LEN];
        ari.copy_from_slice(&d[12..12 + ARI_LEN]);
        let mut private_data = [0; PRIVATE_DATA_LEN];
        private_data.copy_from_slice(&d[84..84 + PRIVATE_DATA_LEN]);
        Ok(RejRepr {
            local_comm_id: be32(d, 0),
            remote_comm_id: be32(d, 4),
            message: bits(d[8], 0, 2),
            ari_len: bits(d[9], 0, 7),
            reason: be16(d, 10),
            ari,
            private_data,
        })
    }

    /// Writes the REJ into the CM data of a MAD, reserved bits 0.
    pub fn emit(&self, d: &mut [u8]) {
        put32(d, 0, self.local_comm_id);
        put32(d, 4, self.remote_comm_id);
        d[8] = with_bits(0, 0, 2, self.message);
        d[9] = with_bits(0, 0, 7, self.ari_len);
        put16(d, 10, self.reason);
        d[12..12 + ARI_LEN].copy_from_slice(&self.ari);
        d[84..84 + PRIVATE_DATA_LEN].copy_from_slice(&self.private_data);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip() {
        let r = RejRepr {
            local_comm_id: 7,
            remote_comm_id: 9,
            message: crate::mra::message::REQ,
            ari_len: 8,
            reason: reason::CONSUMER_DEFINED,
            ari: [3; ARI_LEN],
            private_data: [4; PRIVATE_DATA_LEN],
        };
        let mut d = [0xffu8; CM_DATA_LEN];
        r.emit(&mut d);
        assert_eq!(&d[8..12], &[0, 8 << 1, 0, 28]);
        assert_eq!(RejRepr::parse(&d), Ok(r));
    }
}

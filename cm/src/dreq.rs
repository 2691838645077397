//! DREQ, the request for disconnection (IBA 12.6.10, table 112).

use crate::field::{be24, be32, put24, put32};
use crate::{Error, CM_DATA_LEN};

/// Bytes of a DREQ's private data.
pub const PRIVATE_DATA_LEN: usize = 220;

/// A DREQ.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DreqRepr {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The receiver's.
    pub remote_comm_id: u32,
    /// The receiver's QP (or EE context) of the connection (24 bits).
    pub remote_qpn: u32,
    /// The consumer's private data.
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl DreqRepr {
    /// Reads a DREQ from the CM data of a MAD.
    pub fn parse(d: &[u8]) -> Result<DreqRepr, Error> {
        if d.len() < CM_DATA_LEN {
            return Err(Error::Truncated);
        }
        let mut private_data = [0; PRIVATE_DATA_LEN];
        private_data.copy_from_slice(&d[12..12 + PRIVATE_DATA_LEN]);
        Ok(DreqRepr {
            local_comm_id: be32(d, 0),
            remote_comm_id: be32(d, 4),
            remote_qpn: be24(d, 8),
            private_data,
        })
    }

    /// Writes the DREQ into the CM data of a MAD, reserved bits 0.
    pub fn emit(&self, d: &mut [u8]) {
        put32(d, 0, self.local_comm_id);
        put32(d, 4, self.remote_comm_id);
        put24(d, 8, self.remote_qpn);
        d[11] = 0;
        d[12..12 + PRIVATE_DATA_LEN].copy_from_slice(&self.private_data);
    }
}

//! RTU, ready to use (IBA 12.6.9, table 111): the active side's last word
//! of a connection's set-up.

use crate::field::{be32, put32};
use crate::{Error, CM_DATA_LEN};

/// Bytes of an RTU's private data.
pub const PRIVATE_DATA_LEN: usize = 224;

/// An RTU.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RtuRepr {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The receiver's.
    pub remote_comm_id: u32,
    /// The consumer's private data.
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl RtuRepr {
    /// Reads an RTU from the CM data of a MAD.
    pub fn parse(d: &[u8]) -> Result<RtuRepr, Error> {
        if d.len() < CM_DATA_LEN {
            return Err(Error::Truncated);
        }
        let mut private_data = [0; PRIVATE_DATA_LEN];
        private_data.copy_from_slice(&d[8..8 + PRIVATE_DATA_LEN]);
        Ok(RtuRepr {
            local_comm_id: be32(d, 0),
            remote_comm_id: be32(d, 4),
            private_data,
        })
    }

    /// Writes the RTU into the CM data of a MAD.
    pub fn emit(&self, d: &mut [u8]) {
        put32(d, 0, self.local_comm_id);
        put32(d, 4, self.remote_comm_id);
        d[8..8 + PRIVATE_DATA_LEN].copy_from_slice(&self.private_data);
    }
}

//! DREP, the reply to a DREQ (IBA 12.6.11, table 113).

use crate::field::{be32, put32};
use crate::{Error, CM_DATA_LEN};

/// Bytes of a DREP's private data.
pub const PRIVATE_DATA_LEN: usize = 224;

/// A DREP.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DrepRepr {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The receiver's.
    pub remote_comm_id: u32,
    /// The consumer's private data.
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl DrepRepr {
    /// Reads a DREP from the CM data of a MAD.
    pub fn parse(d: &[u8]) -> Result<DrepRepr, Error> {
        if d.len() < CM_DATA_LEN {
            return Err(Error::Truncated);
        }
        let mut private_data = [0; PRIVATE_DATA_LEN];
        private_data.copy_from_slice(&d[8..8 + PRIVATE_DATA_LEN]);
        Ok(DrepRepr {
            local_comm_id: be32(d, 0),
            remote_comm_id: be32(d, 4),
            private_data,
        })
    }

    /// Writes the DREP into the CM data of a MAD.
    pub fn emit(&self, d: &mut [u8]) {
        put32(d, 0, self.local_comm_id);
        put32(d, 4, self.remote_comm_id);
        d[8..8 + PRIVATE_DATA_LEN].copy_from_slice(&self.private_data);
    }
}

//! MRA, message receipt acknowledgement (IBA 12.6.6, table 107): "I have
//! your REQ, REP or LAP; wait longer for my answer".

use crate::field::{be32, bits, put32, with_bits};
use crate::{Error, CM_DATA_LEN};

/// Bytes of an MRA's private data.
pub const PRIVATE_DATA_LEN: usize = 222;

/// What an MRA or a REJ is about (its `Message MRAed` or `Message
/// Rejected`, 2 bits).
pub mod message {
    /// A REQ.
    pub const REQ: u8 = 0;
    /// A REP.
    pub const REP: u8 = 1;
    /// A LAP (MRA) or no message (REJ: "other").
    pub const OTHER: u8 = 2;
}

/// An MRA.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MraRepr {
    /// The sender's communication ID.
    pub local_comm_id: u32,
    /// The receiver's (for an MRA of a REQ, the REQ's local one).
    pub remote_comm_id: u32,
    /// [`message`] acknowledged (2 bits).
    pub message: u8,
    /// How much longer to wait (5 bits, 4.096 µs · 2^n).
    pub service_timeout: u8,
    /// The consumer's private data.
    pub private_data: [u8; PRIVATE_DATA_LEN],
}

impl MraRepr {
    /// Reads an MRA from the CM data of a MAD.
    pub fn parse(d: &[u8]) -> Result<MraRepr, Error> {
        if d.len() < CM_DATA_LEN {
            return Err(Error::Truncated);
        }
        let mut private_data = [0; PRIVATE_DATA_LEN];
        private_data.copy_from_slice(&d[10..10 + PRIVATE_DATA_LEN]);
        Ok(MraRepr {
            local_comm_id: be32(d, 0),
            remote_comm_id: be32(d, 4),
            message: bits(d[8], 0, 2),
            service_timeout: bits(d[9], 0, 5),
            private_data,
        })
    }

    /// Writes the MRA into the CM data of a MAD, reserved bits 0.
    pub fn emit(&self, d: &mut [u8]) {
        put32(d, 0, self.local_comm_id);
        put32(d, 4, self.remote_comm_id);
        d[8] = with_bits(0, 0, 2, self.message);
        d[9] = with_bits(0, 0, 5, self.service_timeout);
        d[10..10 + PRIVATE_DATA_LEN].copy_from_slice(&self.private_data);
    }
}

//! The common MAD header (IBA 13.4.3), 24 bytes before every management
//! class's data, and the values the communication manager puts in it.

use crate::field::{be16, be32, be64, put16, put32, put64};
use crate::Error;

/// Bytes of the common header.
pub const HEADER_LEN: usize = 24;
/// `BaseVersion` of every MAD.
pub const BASE_VERSION: u8 = 1;
/// `MgmtClass` of communication management.
pub const CLASS_CM: u8 = 0x07;
/// `ClassVersion` of communication management (IBA 1.2 and on).
pub const CM_CLASS_VERSION: u8 = 2;
/// The method of every CM message: `Send` (IBA 12.6, table 104).
pub const METHOD_SEND: u8 = 0x03;

/// CM attribute IDs (IBA 12.6, table 104): which message a CM MAD is.
pub mod attr {
    /// `ClassPortInfo`.
    pub const CLASS_PORT_INFO: u16 = 0x0001;
    /// Request for communication.
    pub const REQ: u16 = 0x0010;
    /// Message receipt acknowledgement.
    pub const MRA: u16 = 0x0011;
    /// Reject.
    pub const REJ: u16 = 0x0012;
    /// Reply to a request.
    pub const REP: u16 = 0x0013;
    /// Ready to use.
    pub const RTU: u16 = 0x0014;
    /// Request for disconnection.
    pub const DREQ: u16 = 0x0015;
    /// Reply to a disconnection request.
    pub const DREP: u16 = 0x0016;
    /// Service ID resolution request (UD).
    pub const SIDR_REQ: u16 = 0x0017;
    /// Service ID resolution reply.
    pub const SIDR_REP: u16 = 0x0018;
    /// Load alternate path.
    pub const LAP: u16 = 0x0019;
    /// Alternate path response.
    pub const APR: u16 = 0x001A;
}

/// The common MAD header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MadHdr {
    /// `BaseVersion`: [`BASE_VERSION`].
    pub base_version: u8,
    /// `MgmtClass`.
    pub mgmt_class: u8,
    /// `ClassVersion`.
    pub class_version: u8,
    /// `R` (bit 7, a response) and `Method`.
    pub method: u8,
    /// `Status`.
    pub status: u16,
    /// `ClassSpecific`.
    pub class_specific: u16,
    /// `TransactionID`: the sender's, echoed by a response.
    pub tid: u64,
    /// `AttributeID`.
    pub attr_id: u16,
    /// `AttributeModifier`.
    pub attr_mod: u32,
}

impl MadHdr {
    /// The header of a CM message `attr_id` with transaction ID `tid`.
    pub fn cm(attr_id: u16, tid: u64) -> MadHdr {
        MadHdr {
            base_version: BASE_VERSION,
            mgmt_class: CLASS_CM,
            class_version: CM_CLASS_VERSION,
            method: METHOD_SEND,
            tid,
            attr_id,
            ..MadHdr::default()
        }
    }

    /// Reads the header at the start of `b`.
    pub fn parse(b: &[u8]) -> Result<MadHdr, Error> {
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(MadHdr {
            base_version: b[0],
            mgmt_class: b[1],
            class_version: b[2],
            method: b[3],
            status: be16(b, 4),
            class_specific: be16(b, 6),
            tid: be64(b, 8),
            attr_id: be16(b, 16),
            attr_mod: be32(b, 20),
        })
    }

    /// Writes the header at the start of `b` (at least [`HEADER_LEN`]
    /// bytes); the reserved bytes 18 and 19 are 0.
    pub fn emit(&self, b: &mut [u8]) {
        b[0] = self.base_version;
        b[1] = self.mgmt_class;
        b[2] = self.class_version;
        b[3] = self.method;
        put16(b, 4, self.status);
        put16(b, 6, self.class_specific);
        put64(b, 8, self.tid);
        put16(b, 16, self.attr_id);
        put16(b, 18, 0);
        put32(b, 20, self.attr_mod);
    }

    /// Whether this is a CM MAD this implementation speaks (base version
    /// 1, class CM, class version 2).
    pub fn is_cm(&self) -> bool {
        (self.base_version, self.mgmt_class, self.class_version)
            == (BASE_VERSION, CLASS_CM, CM_CLASS_VERSION)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_at_the_tables_offsets() {
        let h = MadHdr {
            status: 0x0102,
            class_specific: 0x0304,
            attr_mod: 0x0a0b_0c0d,
            ..MadHdr::cm(attr::REP, 0x1122_3344_5566_7788)
        };
        let mut b = [0xffu8; HEADER_LEN];
        h.emit(&mut b);
        assert_eq!(
            b,
            [
                1, 7, 2, 3, 1, 2, 3, 4, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88, 0, 0x13, 0,
                0, 0x0a, 0x0b, 0x0c, 0x0d
            ]
        );
        assert_eq!(MadHdr::parse(&b), Ok(h));
        assert!(h.is_cm());
        assert_eq!(MadHdr::parse(&b[..23]), Err(Error::Truncated));
    }
}

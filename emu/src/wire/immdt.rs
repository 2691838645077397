//! The Immediate Data Extended Transport Header (IBA 9.3.7): 4 bytes the
//! requester hands to the responder's completion, kept in network order.

use super::{Error, Result};

/// Header length.
pub const HEADER_LEN: usize = 4;

/// A read/write view of an ImmDt.
#[derive(Debug, Clone)]
pub struct ImmDtPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ImmDtPacket<T> {
    /// Wraps `buffer` without checking it.
    pub fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps `buffer` and checks that it holds the header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks that the buffer holds the header.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// The immediate data, network order.
    pub fn imm(&self) -> [u8; 4] {
        let b = self.buffer.as_ref();
        [b[0], b[1], b[2], b[3]]
    }
}

/// The meaning of an ImmDt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct ImmDtRepr {
    /// The immediate data, network order (copied verbatim into the CQE).
    pub imm: [u8; 4],
}

impl ImmDtRepr {
    /// Parses an ImmDt.
    pub fn parse<T: AsRef<[u8]>>(p: &ImmDtPacket<T>) -> Result<Self> {
        p.check_len()?;
        Ok(Self { imm: p.imm() })
    }

    /// Header length.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut ImmDtPacket<T>) {
        p.buffer.as_mut()[..4].copy_from_slice(&self.imm);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_emit() {
        let bytes = [0xde, 0xad, 0xbe, 0xef];
        let r = ImmDtRepr::parse(&ImmDtPacket::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(r.imm, bytes);
        let mut out = [0u8; 4];
        r.emit(&mut ImmDtPacket::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
        assert!(ImmDtPacket::new_checked(&bytes[..3]).is_err());
    }
}

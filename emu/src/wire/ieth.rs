//! The Invalidate Extended Transport Header (IBA 9.3.8): the R_Key a
//! SEND WITH INVALIDATE asks the responder to invalidate.

use super::{be32, put32, Error, Result};

/// Header length.
pub const HEADER_LEN: usize = 4;

/// A read/write view of an IETH.
#[derive(Debug, Clone)]
pub struct IethPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> IethPacket<T> {
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

    /// The R_Key to invalidate.
    pub fn rkey(&self) -> u32 {
        be32(self.buffer.as_ref(), 0)
    }
}

/// The meaning of an IETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct IethRepr {
    /// The R_Key to invalidate.
    pub rkey: u32,
}

impl IethRepr {
    /// Parses an IETH.
    pub fn parse<T: AsRef<[u8]>>(p: &IethPacket<T>) -> Result<Self> {
        p.check_len()?;
        Ok(Self { rkey: p.rkey() })
    }

    /// Header length.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut IethPacket<T>) {
        put32(p.buffer.as_mut(), 0, self.rkey);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_emit() {
        // The write_imm capture's SEND ONLY WITH INVALIDATE of an MW rkey.
        let bytes = [0x08, 0x00, 0x01, 0xfa];
        let r = IethRepr::parse(&IethPacket::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(r.rkey, 0x0800_01fa);
        let mut out = [0u8; 4];
        r.emit(&mut IethPacket::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
        assert!(IethPacket::new_checked(&bytes[..2]).is_err());
    }
}

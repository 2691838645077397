//! The Atomic Acknowledge Extended Transport Header (IBA 9.3.6): the
//! original value of an atomic's operand, in an ATOMIC ACKNOWLEDGE.
//!
//! ```text
//! | original remote data (8) |
//! ```

use super::{be64, put64, Error, Result};

/// Header length.
pub const HEADER_LEN: usize = 8;

/// A read/write view of an AtomicAckETH.
#[derive(Debug, Clone)]
pub struct AtomicAckEthPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> AtomicAckEthPacket<T> {
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

    /// The original value.
    pub fn orig(&self) -> u64 {
        be64(self.buffer.as_ref(), 0)
    }
}

/// The meaning of an AtomicAckETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AtomicAckEthRepr {
    /// The operand's value before the operation.
    pub orig: u64,
}

impl AtomicAckEthRepr {
    /// Parses an AtomicAckETH.
    pub fn parse<T: AsRef<[u8]>>(p: &AtomicAckEthPacket<T>) -> Result<Self> {
        p.check_len()?;
        Ok(Self { orig: p.orig() })
    }

    /// Header length.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut AtomicAckEthPacket<T>) {
        put64(p.buffer.as_mut(), 0, self.orig);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_emit() {
        // The atomic_cs capture's ATOMIC ACKNOWLEDGE.
        let bytes = [0x9e, 0xdf, 0x8f, 0x3a, 0xb2, 0xf8, 0x61, 0xa1];
        let r =
            AtomicAckEthRepr::parse(&AtomicAckEthPacket::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(r.orig, 0x9edf_8f3a_b2f8_61a1);
        let mut out = [0u8; 8];
        r.emit(&mut AtomicAckEthPacket::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
        assert_eq!(
            AtomicAckEthPacket::new_checked(&bytes[..7]).unwrap_err(),
            Error::Truncated
        );
    }
}

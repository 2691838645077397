//! The Datagram Extended Transport Header (IBA 9.3.2) of UD packets.
//!
//! ```text
//! | Q_Key (4) | reserved (1) | source QP (24 bits) |
//! ```

use super::{be24, be32, put24, put32, Error, Result};

/// Header length.
pub const HEADER_LEN: usize = 8;

/// A read/write view of a DETH.
#[derive(Debug, Clone)]
pub struct DethPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> DethPacket<T> {
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

    /// Queue key.
    pub fn qkey(&self) -> u32 {
        be32(self.buffer.as_ref(), 0)
    }

    /// Source QP.
    pub fn src_qp(&self) -> u32 {
        be24(self.buffer.as_ref(), 5)
    }
}

/// The meaning of a DETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct DethRepr {
    /// Queue key.
    pub qkey: u32,
    /// Source QP (24 bits).
    pub src_qp: u32,
}

impl DethRepr {
    /// Parses a DETH.
    pub fn parse<T: AsRef<[u8]>>(p: &DethPacket<T>) -> Result<Self> {
        p.check_len()?;
        Ok(Self {
            qkey: p.qkey(),
            src_qp: p.src_qp(),
        })
    }

    /// Header length.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header (reserved byte zero).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut DethPacket<T>) {
        let b = p.buffer.as_mut();
        put32(b, 0, self.qkey);
        b[4] = 0;
        put24(b, 5, self.src_qp);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_emit() {
        // The ud_pingpong capture: Q_Key 0x11111111, source QP 0x1f.
        let bytes = [0x11, 0x11, 0x11, 0x11, 0x00, 0x00, 0x00, 0x1f];
        let r = DethRepr::parse(&DethPacket::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(
            r,
            DethRepr {
                qkey: 0x1111_1111,
                src_qp: 0x1f
            }
        );
        let mut out = [0u8; 8];
        r.emit(&mut DethPacket::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
        assert!(DethPacket::new_checked(&bytes[..7]).is_err());
    }
}

//! The RDMA Extended Transport Header (IBA 9.3.3): where an RDMA WRITE or
//! READ goes. Carried by the first (or only) packet of a WRITE and by a
//! READ request.
//!
//! ```text
//! | virtual address (8) | R_Key (4) | DMA length (4) |
//! ```

use super::{be32, be64, put32, put64, Error, Result};

/// Header length.
pub const HEADER_LEN: usize = 16;

/// A read/write view of a RETH.
#[derive(Debug, Clone)]
pub struct RethPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> RethPacket<T> {
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

    /// Virtual address at the responder.
    pub fn va(&self) -> u64 {
        be64(self.buffer.as_ref(), 0)
    }

    /// Remote key.
    pub fn rkey(&self) -> u32 {
        be32(self.buffer.as_ref(), 8)
    }

    /// Length of the whole transfer.
    pub fn dma_len(&self) -> u32 {
        be32(self.buffer.as_ref(), 12)
    }
}

/// The meaning of a RETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RethRepr {
    /// Virtual address at the responder.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Length of the whole transfer.
    pub dma_len: u32,
}

impl RethRepr {
    /// Parses a RETH.
    pub fn parse<T: AsRef<[u8]>>(p: &RethPacket<T>) -> Result<Self> {
        p.check_len()?;
        Ok(Self {
            va: p.va(),
            rkey: p.rkey(),
            dma_len: p.dma_len(),
        })
    }

    /// Header length.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut RethPacket<T>) {
        let b = p.buffer.as_mut();
        put64(b, 0, self.va);
        put32(b, 8, self.rkey);
        put32(b, 12, self.dma_len);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The RETH of a READ request in the read_lat capture.
    const BYTES: [u8; 16] = [
        0x00, 0x00, 0x55, 0xa1, 0x9e, 0x42, 0xb0, 0x00, 0x00, 0x00, 0x08, 0xb7, 0x00, 0x00, 0x00,
        0x02,
    ];

    #[test]
    fn parse_emit() {
        let r = RethRepr::parse(&RethPacket::new_checked(&BYTES[..]).unwrap()).unwrap();
        assert_eq!(
            r,
            RethRepr {
                va: 0x55a1_9e42_b000,
                rkey: 0x8b7,
                dma_len: 2
            }
        );
        let mut out = [0u8; 16];
        r.emit(&mut RethPacket::new_unchecked(&mut out[..]));
        assert_eq!(out, BYTES);
        assert_eq!(
            RethPacket::new_checked(&BYTES[..15]).unwrap_err(),
            Error::Truncated
        );
    }
}

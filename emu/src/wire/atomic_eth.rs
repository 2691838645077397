//! The Atomic Extended Transport Header (IBA 9.3.4) of a COMPARE SWAP or
//! FETCH ADD request.
//!
//! ```text
//! | virtual address (8) | R_Key (4) | swap or add data (8) | compare data (8) |
//! ```

use super::{be32, be64, put32, put64, Error, Result};

/// Header length.
pub const HEADER_LEN: usize = 28;

/// A read/write view of an AtomicETH.
#[derive(Debug, Clone)]
pub struct AtomicEthPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> AtomicEthPacket<T> {
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

    /// Virtual address of the 8-byte operand at the responder.
    pub fn va(&self) -> u64 {
        be64(self.buffer.as_ref(), 0)
    }

    /// Remote key.
    pub fn rkey(&self) -> u32 {
        be32(self.buffer.as_ref(), 8)
    }

    /// Swap value (compare and swap) or addend (fetch and add).
    pub fn swap_add(&self) -> u64 {
        be64(self.buffer.as_ref(), 12)
    }

    /// Compare value (compare and swap).
    pub fn compare(&self) -> u64 {
        be64(self.buffer.as_ref(), 20)
    }
}

/// The meaning of an AtomicETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AtomicEthRepr {
    /// Virtual address of the operand.
    pub va: u64,
    /// Remote key.
    pub rkey: u32,
    /// Swap value or addend.
    pub swap_add: u64,
    /// Compare value.
    pub compare: u64,
}

impl AtomicEthRepr {
    /// Parses an AtomicETH.
    pub fn parse<T: AsRef<[u8]>>(p: &AtomicEthPacket<T>) -> Result<Self> {
        p.check_len()?;
        Ok(Self {
            va: p.va(),
            rkey: p.rkey(),
            swap_add: p.swap_add(),
            compare: p.compare(),
        })
    }

    /// Header length.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut AtomicEthPacket<T>) {
        let b = p.buffer.as_mut();
        put64(b, 0, self.va);
        put32(b, 8, self.rkey);
        put64(b, 12, self.swap_add);
        put64(b, 20, self.compare);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_emit() {
        // The atomic_cs capture's COMPARE SWAP.
        let mut bytes = [0u8; 28];
        bytes[..8].copy_from_slice(&0x0000_55f6_fc55_d000u64.to_be_bytes());
        bytes[8..12].copy_from_slice(&[0, 0, 0x0e, 0x5b]);
        bytes[12..20].copy_from_slice(&0x1122_3344_5566_7788u64.to_be_bytes());
        bytes[20..].copy_from_slice(&0x99aa_bbcc_ddee_ff00u64.to_be_bytes());
        let r = AtomicEthRepr::parse(&AtomicEthPacket::new_checked(&bytes[..]).unwrap()).unwrap();
        assert_eq!(
            r,
            AtomicEthRepr {
                va: 0x55f6_fc55_d000,
                rkey: 0xe5b,
                swap_add: 0x1122_3344_5566_7788,
                compare: 0x99aa_bbcc_ddee_ff00,
            }
        );
        let mut out = [0u8; 28];
        r.emit(&mut AtomicEthPacket::new_unchecked(&mut out[..]));
        assert_eq!(out, bytes);
        assert_eq!(
            AtomicEthPacket::new_checked(&bytes[..27]).unwrap_err(),
            Error::Truncated
        );
    }
}

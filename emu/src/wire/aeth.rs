//! The ACK Extended Transport Header (IBA 9.3.5): an ACK, an RNR NAK or a
//! NAK, and the responder's message sequence number.
//!
//! ```text
//! | syndrome (1) | MSN (24 bits) |
//! syndrome: 0 | kind (2 bits) | value (5 bits)
//!   kind 00 ACK, value = credit count (31: invalid, end-to-end flow
//!           control off)
//!   kind 01 RNR NAK, value = RNR timer code (IBA table 45)
//!   kind 11 NAK, value = NAK code
//! ```

use super::{be24, put24, Error, Result};

/// Header length.
pub const HEADER_LEN: usize = 4;

/// The credit count of an ACK that carries no credits ("invalid"), as rxe
/// and RoCE NICs without end-to-end flow control send.
pub const CREDITS_INVALID: u8 = 0x1f;

/// NAK codes (IBA table 44).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NakCode {
    /// PSN sequence error: the AETH's PSN is the one the responder expects.
    PsnSeqError,
    /// Invalid request.
    InvalidRequest,
    /// Remote access error.
    RemoteAccess,
    /// Remote operational error.
    RemoteOperational,
    /// Invalid RD request.
    InvalidRdRequest,
}

impl NakCode {
    fn value(self) -> u8 {
        match self {
            NakCode::PsnSeqError => 0,
            NakCode::InvalidRequest => 1,
            NakCode::RemoteAccess => 2,
            NakCode::RemoteOperational => 3,
            NakCode::InvalidRdRequest => 4,
        }
    }

    fn from_value(v: u8) -> Option<Self> {
        Some(match v {
            0 => NakCode::PsnSeqError,
            1 => NakCode::InvalidRequest,
            2 => NakCode::RemoteAccess,
            3 => NakCode::RemoteOperational,
            4 => NakCode::InvalidRdRequest,
            _ => return None,
        })
    }
}

/// What an AETH says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AckKind {
    /// Positive acknowledgement, with a credit count.
    Ack {
        /// Credit count (0..=31; [`CREDITS_INVALID`] for none).
        credits: u8,
    },
    /// Receiver not ready: retry after the timer.
    RnrNak {
        /// RNR timer code (0..=31).
        timer: u8,
    },
    /// Negative acknowledgement.
    Nak(NakCode),
}

/// A read/write view of an AETH.
#[derive(Debug, Clone)]
pub struct AethPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> AethPacket<T> {
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

    /// The syndrome byte.
    pub fn syndrome(&self) -> u8 {
        self.buffer.as_ref()[0]
    }

    /// Message sequence number.
    pub fn msn(&self) -> u32 {
        be24(self.buffer.as_ref(), 1)
    }
}

/// The meaning of an AETH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct AethRepr {
    /// ACK, RNR NAK or NAK.
    pub kind: AckKind,
    /// Message sequence number (24 bits).
    pub msn: u32,
}

impl AethRepr {
    /// Parses an AETH; the reserved syndrome kind (10), a set top bit and
    /// undefined NAK codes are malformed.
    pub fn parse<T: AsRef<[u8]>>(p: &AethPacket<T>) -> Result<Self> {
        p.check_len()?;
        let s = p.syndrome();
        let value = s & 0x1f;
        let kind = match s >> 5 {
            0b000 => AckKind::Ack { credits: value },
            0b001 => AckKind::RnrNak { timer: value },
            0b011 => AckKind::Nak(NakCode::from_value(value).ok_or(Error::Malformed)?),
            _ => return Err(Error::Malformed),
        };
        Ok(Self { kind, msn: p.msn() })
    }

    /// Header length.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// The syndrome byte of this AETH.
    pub fn syndrome(&self) -> u8 {
        match self.kind {
            AckKind::Ack { credits } => credits & 0x1f,
            AckKind::RnrNak { timer } => 0x20 | (timer & 0x1f),
            AckKind::Nak(code) => 0x60 | code.value(),
        }
    }

    /// Writes the header.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut AethPacket<T>) {
        let b = p.buffer.as_mut();
        b[0] = self.syndrome();
        put24(b, 1, self.msn);
    }
}

/// The delay an RNR timer code stands for, in microseconds (IBA table 45:
/// code 0 is 655.36 ms, codes 1..=31 run from 0.01 ms to 491.52 ms).
pub fn rnr_timer_us(code: u8) -> u64 {
    // In units of 10 µs.
    const TABLE: [u32; 32] = [
        65536, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024,
        1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152,
    ];
    TABLE[(code & 0x1f) as usize] as u64 * 10
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn captured_aeths() {
        // rc_pingpong: ACK, credits invalid, MSN 1.
        let ack = [0x1f, 0x00, 0x00, 0x01];
        let r = AethRepr::parse(&AethPacket::new_checked(&ack[..]).unwrap()).unwrap();
        assert_eq!(
            r,
            AethRepr {
                kind: AckKind::Ack {
                    credits: CREDITS_INVALID
                },
                msn: 1
            }
        );
        let mut out = [0u8; 4];
        r.emit(&mut AethPacket::new_unchecked(&mut out[..]));
        assert_eq!(out, ack);
        // rnr_nak: RNR NAK with timer 26 (81.92 ms).
        let rnr = [0x3a, 0x00, 0x00, 0x00];
        let r = AethRepr::parse(&AethPacket::new_checked(&rnr[..]).unwrap()).unwrap();
        assert_eq!(r.kind, AckKind::RnrNak { timer: 26 });
        assert_eq!(rnr_timer_us(26), 81_920);
        // fault_write_bw_nak_seq: PSN sequence error NAK.
        let nak = [0x60, 0x00, 0x00, 0x02];
        let r = AethRepr::parse(&AethPacket::new_checked(&nak[..]).unwrap()).unwrap();
        assert_eq!(r.kind, AckKind::Nak(NakCode::PsnSeqError));
        assert_eq!(r.syndrome(), 0x60);
    }

    #[test]
    fn nak_codes_and_reserved() {
        for (code, byte) in [
            (NakCode::InvalidRequest, 0x61),
            (NakCode::RemoteAccess, 0x62),
            (NakCode::RemoteOperational, 0x63),
            (NakCode::InvalidRdRequest, 0x64),
        ] {
            let b = [byte, 0, 0, 7];
            let r = AethRepr::parse(&AethPacket::new_unchecked(&b[..])).unwrap();
            assert_eq!((r.kind, r.msn), (AckKind::Nak(code), 7));
        }
        for bad in [0x65u8, 0x40, 0x5f, 0x80] {
            let b = [bad, 0, 0, 0];
            assert_eq!(
                AethRepr::parse(&AethPacket::new_unchecked(&b[..])),
                Err(Error::Malformed),
                "{bad:#x}"
            );
        }
        assert_eq!(rnr_timer_us(0), 655_360);
        assert_eq!(rnr_timer_us(1), 10);
        assert_eq!(rnr_timer_us(31), 491_520);
    }
}

//! The InfiniBand Base Transport Header (IBA 9.2), the first header of
//! every RoCEv2 transport packet.
//!
//! ```text
//! 0        1             2        3
//! | opcode |S|M|pad|tver | P_Key           |
//! |F|B|resv| destination QP (24 bits)      |
//! |A| resv | PSN (24 bits)                 |
//! ```
//! S solicited event, M migration request, pad the pad count (0–3 bytes
//! after the payload), tver the transport header version (0), F/B the
//! FECN/BECN congestion bits (masked out of the ICRC), A the ACK request.

use super::{be16, be24, put16, put24, Error, Result};

/// Header length.
pub const HEADER_LEN: usize = 12;

/// The P_Key every RoCE port has at index 0: the full-member default
/// partition.
pub const DEFAULT_PKEY: u16 = 0xffff;

/// The transport header version this port speaks.
pub const TVER: u8 = 0;

/// PSNs are 24 bits wide.
pub const PSN_MASK: u32 = 0x00ff_ffff;

/// A read/write view of a BTH.
#[derive(Debug, Clone)]
pub struct BthPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> BthPacket<T> {
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

    /// Checks that the buffer holds the 12-byte header.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Opcode.
    pub fn opcode(&self) -> u8 {
        self.b()[0]
    }

    /// Solicited event.
    pub fn solicited(&self) -> bool {
        self.b()[1] & 0x80 != 0
    }

    /// Migration request.
    pub fn mig_req(&self) -> bool {
        self.b()[1] & 0x40 != 0
    }

    /// Pad count.
    pub fn pad_count(&self) -> u8 {
        (self.b()[1] >> 4) & 3
    }

    /// Transport header version.
    pub fn tver(&self) -> u8 {
        self.b()[1] & 0xf
    }

    /// Partition key.
    pub fn pkey(&self) -> u16 {
        be16(self.b(), 2)
    }

    /// Forward explicit congestion notification.
    pub fn fecn(&self) -> bool {
        self.b()[4] & 0x80 != 0
    }

    /// Backward explicit congestion notification.
    pub fn becn(&self) -> bool {
        self.b()[4] & 0x40 != 0
    }

    /// Destination QP.
    pub fn dest_qp(&self) -> u32 {
        be24(self.b(), 5)
    }

    /// ACK request.
    pub fn ack_req(&self) -> bool {
        self.b()[8] & 0x80 != 0
    }

    /// Packet sequence number.
    pub fn psn(&self) -> u32 {
        be24(self.b(), 9)
    }
}

/// The meaning of a BTH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct BthRepr {
    /// Opcode (see [`super::opcode`]).
    pub opcode: u8,
    /// Solicited event.
    pub solicited: bool,
    /// Migration request.
    pub mig_req: bool,
    /// Pad count (0..=3).
    pub pad_count: u8,
    /// Partition key.
    pub pkey: u16,
    /// FECN.
    pub fecn: bool,
    /// BECN.
    pub becn: bool,
    /// Destination QP (24 bits).
    pub dest_qp: u32,
    /// ACK request.
    pub ack_req: bool,
    /// PSN (24 bits).
    pub psn: u32,
}

impl BthRepr {
    /// Parses a BTH of version [`TVER`]; another version is
    /// [`Error::Version`].
    /// Reserved bits are ignored, as the IBA requires of receivers.
    pub fn parse<T: AsRef<[u8]>>(p: &BthPacket<T>) -> Result<Self> {
        p.check_len()?;
        if p.tver() != TVER {
            return Err(Error::Version);
        }
        Ok(Self {
            opcode: p.opcode(),
            solicited: p.solicited(),
            mig_req: p.mig_req(),
            pad_count: p.pad_count(),
            pkey: p.pkey(),
            fecn: p.fecn(),
            becn: p.becn(),
            dest_qp: p.dest_qp(),
            ack_req: p.ack_req(),
            psn: p.psn(),
        })
    }

    /// Header length.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header (reserved bits zero).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut BthPacket<T>) {
        let b = p.buffer.as_mut();
        b[0] = self.opcode;
        b[1] = (self.solicited as u8) << 7
            | (self.mig_req as u8) << 6
            | (self.pad_count & 3) << 4
            | TVER;
        put16(b, 2, self.pkey);
        b[4] = (self.fecn as u8) << 7 | (self.becn as u8) << 6;
        put24(b, 5, self.dest_qp);
        b[8] = (self.ack_req as u8) << 7;
        put24(b, 9, self.psn);
    }
}

/// `a - b` in 24-bit PSN space, as a signed distance in
/// `-2^23 .. 2^23`: positive when `a` is after `b`.
pub fn psn_diff(a: u32, b: u32) -> i32 {
    ((a.wrapping_sub(b) << 8) as i32) >> 8
}

/// `psn + n` modulo 2^24.
pub fn psn_add(psn: u32, n: u32) -> u32 {
    psn.wrapping_add(n) & PSN_MASK
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The BTH of the first SEND ONLY in the rc_pingpong capture.
    const SEND_ONLY: [u8; 12] = [
        0x04, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x11, 0x80, 0xac, 0x75, 0xd3,
    ];

    #[test]
    fn parse_emit() {
        let p = BthPacket::new_checked(&SEND_ONLY[..]).unwrap();
        let r = BthRepr::parse(&p).unwrap();
        assert_eq!(
            r,
            BthRepr {
                opcode: 0x04,
                pkey: DEFAULT_PKEY,
                dest_qp: 0x11,
                ack_req: true,
                psn: 0xac75d3,
                ..BthRepr::default()
            }
        );
        let mut out = [0u8; 12];
        r.emit(&mut BthPacket::new_unchecked(&mut out[..]));
        assert_eq!(out, SEND_ONLY);
    }

    #[test]
    fn every_bit() {
        let r = BthRepr {
            opcode: 0x64,
            solicited: true,
            mig_req: true,
            pad_count: 3,
            pkey: 0x8001,
            fecn: true,
            becn: true,
            dest_qp: 0xabcdef,
            ack_req: true,
            psn: 0xffffff,
        };
        let mut out = [0u8; 12];
        r.emit(&mut BthPacket::new_unchecked(&mut out[..]));
        assert_eq!(
            out,
            [0x64, 0xf0, 0x80, 0x01, 0xc0, 0xab, 0xcd, 0xef, 0x80, 0xff, 0xff, 0xff]
        );
        assert_eq!(BthRepr::parse(&BthPacket::new_unchecked(&out[..])), Ok(r));
    }

    #[test]
    fn version_and_length() {
        let mut v1 = SEND_ONLY;
        v1[1] |= 1;
        assert_eq!(
            BthRepr::parse(&BthPacket::new_unchecked(&v1[..])),
            Err(Error::Version)
        );
        assert_eq!(
            BthPacket::new_checked(&SEND_ONLY[..11]).unwrap_err(),
            Error::Truncated
        );
    }

    #[test]
    fn psn_arithmetic() {
        assert_eq!(psn_add(0xffffff, 1), 0);
        assert_eq!(psn_diff(0, 0xffffff), 1);
        assert_eq!(psn_diff(0xffffff, 0), -1);
        assert_eq!(psn_diff(0x7fffff, 0), 0x7fffff);
        assert_eq!(psn_diff(0x800000, 0), -0x800000);
    }
}

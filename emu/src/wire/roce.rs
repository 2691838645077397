//! A whole InfiniBand transport packet as RoCEv2 carries it in a UDP
//! datagram: the BTH, the extended headers its opcode calls for (in the
//! order DETH, RETH, AtomicETH, AETH, AtomicAckETH, ImmDt, IETH), the
//! payload, 0–3 pad bytes (the BTH's pad count) and the 4-byte ICRC.
//!
//! The ICRC covers IP and UDP header fields too, so it is computed and
//! checked at the frame level ([`super::frame`]); this level only checks
//! that the trailer is there.

use super::aeth::{AethPacket, AethRepr};
use super::atomic_ack_eth::{AtomicAckEthPacket, AtomicAckEthRepr};
use super::atomic_eth::{AtomicEthPacket, AtomicEthRepr};
use super::bth::{BthPacket, BthRepr};
use super::deth::{DethPacket, DethRepr};
use super::icrc::ICRC_LEN;
use super::ieth::{IethPacket, IethRepr};
use super::immdt::{ImmDtPacket, ImmDtRepr};
use super::opcode::{self, headers, OpcodeInfo};
use super::reth::{RethPacket, RethRepr};
use super::{aeth, atomic_ack_eth, atomic_eth, bth, deth, ieth, immdt, reth, Error, Result};

/// A read/write view of a transport packet (a RoCEv2 UDP payload).
#[derive(Debug, Clone)]
pub struct RocePacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> RocePacket<T> {
    /// Wraps `buffer` without checking it.
    pub fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps `buffer` and checks its layout.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks that the buffer holds a BTH with a known opcode, the headers
    /// that opcode calls for, the pad bytes and the ICRC, in a length that
    /// is a multiple of 4 (every header is).
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < bth::HEADER_LEN {
            return Err(Error::Truncated);
        }
        let info = self.info().ok_or(Error::Unsupported)?;
        let fixed = bth::HEADER_LEN + opcode::headers_len(info.headers) + ICRC_LEN;
        let pad = self.bth().pad_count() as usize;
        if b.len() < fixed + pad {
            return Err(Error::Truncated);
        }
        if b.len() % 4 != 0 || (!info.payload && b.len() != fixed) {
            return Err(Error::Malformed);
        }
        Ok(())
    }

    /// The BTH.
    pub fn bth(&self) -> BthPacket<&[u8]> {
        BthPacket::new_unchecked(self.buffer.as_ref())
    }

    /// What the BTH's opcode means (`None`: unknown).
    pub fn info(&self) -> Option<&'static OpcodeInfo> {
        opcode::info(self.buffer.as_ref()[0])
    }

    /// Offset of extended header `bit` (a [`headers`] bit) if present.
    fn header_at(&self, bit: u8) -> Option<usize> {
        let h = self.info()?.headers;
        if h & bit == 0 {
            return None;
        }
        Some(bth::HEADER_LEN + opcode::headers_len(h & (bit - 1)))
    }

    fn slice_at(&self, bit: u8) -> Option<&[u8]> {
        self.header_at(bit).map(|at| &self.buffer.as_ref()[at..])
    }

    /// Offset of the payload.
    pub fn payload_offset(&self) -> usize {
        bth::HEADER_LEN + self.info().map_or(0, |i| opcode::headers_len(i.headers))
    }

    /// The payload, without pad bytes and ICRC.
    pub fn payload(&self) -> &[u8] {
        let b = self.buffer.as_ref();
        let end = b.len() - ICRC_LEN - self.bth().pad_count() as usize;
        &b[self.payload_offset()..end]
    }

    /// The stored ICRC.
    pub fn icrc(&self) -> u32 {
        let b = self.buffer.as_ref();
        let at = b.len() - ICRC_LEN;
        u32::from_le_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> RocePacket<T> {
    /// The payload, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let at = self.payload_offset();
        let pad = self.bth().pad_count() as usize;
        let b = self.buffer.as_mut();
        let end = b.len() - ICRC_LEN - pad;
        &mut b[at..end]
    }
}

/// The meaning of a transport packet: its headers and payload length.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct RoceRepr {
    /// The BTH. Its `pad_count` follows from `payload_len`.
    pub bth: BthRepr,
    /// DETH (UD).
    pub deth: Option<DethRepr>,
    /// RETH (first packet of a WRITE, READ request).
    pub reth: Option<RethRepr>,
    /// AtomicETH (atomic requests).
    pub atomic_eth: Option<AtomicEthRepr>,
    /// AETH (ACKs, NAKs, READ responses that carry one).
    pub aeth: Option<AethRepr>,
    /// AtomicAckETH (atomic ACK).
    pub atomic_ack_eth: Option<AtomicAckEthRepr>,
    /// Immediate data.
    pub immdt: Option<ImmDtRepr>,
    /// IETH (SEND WITH INVALIDATE).
    pub ieth: Option<IethRepr>,
    /// Payload length, without pad bytes.
    pub payload_len: usize,
}

impl RoceRepr {
    /// The extended headers present, as [`headers`] bits.
    pub fn headers(&self) -> u8 {
        let mut h = 0;
        for (present, bit) in [
            (self.deth.is_some(), headers::DETH),
            (self.reth.is_some(), headers::RETH),
            (self.atomic_eth.is_some(), headers::ATOMIC_ETH),
            (self.aeth.is_some(), headers::AETH),
            (self.atomic_ack_eth.is_some(), headers::ATOMIC_ACK_ETH),
            (self.immdt.is_some(), headers::IMMDT),
            (self.ieth.is_some(), headers::IETH),
        ] {
            if present {
                h |= bit;
            }
        }
        h
    }

    /// Parses a packet whose layout [`RocePacket::check_len`] accepted.
    pub fn parse<T: AsRef<[u8]>>(p: &RocePacket<T>) -> Result<Self> {
        p.check_len()?;
        let bth = BthRepr::parse(&p.bth())?;
        let mut r = RoceRepr {
            bth,
            payload_len: p.payload().len(),
            ..RoceRepr::default()
        };
        if let Some(b) = p.slice_at(headers::DETH) {
            r.deth = Some(DethRepr::parse(&DethPacket::new_unchecked(b))?);
        }
        if let Some(b) = p.slice_at(headers::RETH) {
            r.reth = Some(RethRepr::parse(&RethPacket::new_unchecked(b))?);
        }
        if let Some(b) = p.slice_at(headers::ATOMIC_ETH) {
            r.atomic_eth = Some(AtomicEthRepr::parse(&AtomicEthPacket::new_unchecked(b))?);
        }
        if let Some(b) = p.slice_at(headers::AETH) {
            r.aeth = Some(AethRepr::parse(&AethPacket::new_unchecked(b))?);
        }
        if let Some(b) = p.slice_at(headers::ATOMIC_ACK_ETH) {
            r.atomic_ack_eth = Some(AtomicAckEthRepr::parse(
                &AtomicAckEthPacket::new_unchecked(b),
            )?);
        }
        if let Some(b) = p.slice_at(headers::IMMDT) {
            r.immdt = Some(ImmDtRepr::parse(&ImmDtPacket::new_unchecked(b))?);
        }
        if let Some(b) = p.slice_at(headers::IETH) {
            r.ieth = Some(IethRepr::parse(&IethPacket::new_unchecked(b))?);
        }
        Ok(r)
    }

    /// The pad count for this payload length.
    pub fn pad_count(&self) -> u8 {
        ((4 - self.payload_len % 4) % 4) as u8
    }

    /// Length of the packet: headers, payload, pad and ICRC.
    pub fn buffer_len(&self) -> usize {
        bth::HEADER_LEN
            + opcode::headers_len(self.headers())
            + self.payload_len
            + self.pad_count() as usize
            + ICRC_LEN
    }

    /// Offset of the payload in the packet.
    pub fn payload_offset(&self) -> usize {
        bth::HEADER_LEN + opcode::headers_len(self.headers())
    }

    /// Whether the headers present are exactly those the opcode calls for
    /// (so that [`RoceRepr::emit`] writes a packet [`RoceRepr::parse`]
    /// reads back the same).
    pub fn is_consistent(&self) -> bool {
        opcode::info(self.bth.opcode)
            .is_some_and(|i| i.headers == self.headers() && (i.payload || self.payload_len == 0))
    }

    /// Writes the headers and the pad bytes into `p` (exactly
    /// `buffer_len()` bytes), with the pad count set from the payload
    /// length; the payload and the ICRC are the caller's to fill. The
    /// headers present must be those the opcode calls for
    /// ([`RoceRepr::is_consistent`]).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut RocePacket<T>) {
        debug_assert!(
            self.is_consistent(),
            "headers do not match the opcode: {self:?}"
        );
        let bth = BthRepr {
            pad_count: self.pad_count(),
            ..self.bth
        };
        let b = p.buffer.as_mut();
        bth.emit(&mut BthPacket::new_unchecked(&mut b[..]));
        let mut at = bth::HEADER_LEN;
        if let Some(h) = &self.deth {
            h.emit(&mut DethPacket::new_unchecked(&mut b[at..]));
            at += deth::HEADER_LEN;
        }
        if let Some(h) = &self.reth {
            h.emit(&mut RethPacket::new_unchecked(&mut b[at..]));
            at += reth::HEADER_LEN;
        }
        if let Some(h) = &self.atomic_eth {
            h.emit(&mut AtomicEthPacket::new_unchecked(&mut b[at..]));
            at += atomic_eth::HEADER_LEN;
        }
        if let Some(h) = &self.aeth {
            h.emit(&mut AethPacket::new_unchecked(&mut b[at..]));
            at += aeth::HEADER_LEN;
        }
        if let Some(h) = &self.atomic_ack_eth {
            h.emit(&mut AtomicAckEthPacket::new_unchecked(&mut b[at..]));
            at += atomic_ack_eth::HEADER_LEN;
        }
        if let Some(h) = &self.immdt {
            h.emit(&mut ImmDtPacket::new_unchecked(&mut b[at..]));
            at += immdt::HEADER_LEN;
        }
        if let Some(h) = &self.ieth {
            h.emit(&mut IethPacket::new_unchecked(&mut b[at..]));
            at += ieth::HEADER_LEN;
        }
        let pad_at = at + self.payload_len;
        b[pad_at..pad_at + self.pad_count() as usize].fill(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::aeth::{AckKind, CREDITS_INVALID};

    /// An RDMA READ RESPONSE ONLY of 2 bytes (pad count 2) as rxe sends it:
    /// BTH, AETH, payload, pad, ICRC (ICRC bytes arbitrary here).
    const READ_RESP: [u8; 24] = [
        0x10, 0x20, 0xff, 0xff, 0x00, 0x00, 0x00, 0x17, 0x00, 0x18, 0x20, 0xc8, // BTH
        0x1f, 0x00, 0x00, 0x01, // AETH
        0xab, 0xcd, 0x00, 0x00, // payload, pad
        0x11, 0x22, 0x33, 0x44, // ICRC
    ];

    #[test]
    fn parse_emit_read_response() {
        let p = RocePacket::new_checked(&READ_RESP[..]).unwrap();
        let r = RoceRepr::parse(&p).unwrap();
        assert_eq!(r.bth.opcode, opcode::RC_RDMA_READ_RESPONSE_ONLY);
        assert_eq!(r.bth.pad_count, 2);
        assert_eq!(
            r.aeth,
            Some(AethRepr {
                kind: AckKind::Ack {
                    credits: CREDITS_INVALID
                },
                msn: 1
            })
        );
        assert_eq!(p.payload(), &[0xab, 0xcd]);
        assert_eq!(p.icrc(), 0x4433_2211);
        assert!(r.is_consistent());
        assert_eq!(r.buffer_len(), READ_RESP.len());
        let mut out = [0u8; 24];
        let mut q = RocePacket::new_unchecked(&mut out[..]);
        r.emit(&mut q);
        q.payload_mut().copy_from_slice(&[0xab, 0xcd]);
        out[20..].copy_from_slice(&[0x11, 0x22, 0x33, 0x44]);
        assert_eq!(out, READ_RESP);
    }

    #[test]
    fn header_order() {
        // RDMA WRITE ONLY WITH IMMEDIATE: RETH then ImmDt.
        let r = RoceRepr {
            bth: BthRepr {
                opcode: opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE,
                dest_qp: 0x1e,
                psn: 0x100005,
                ack_req: true,
                pkey: 0xffff,
                ..BthRepr::default()
            },
            reth: Some(RethRepr {
                va: 0x1000,
                rkey: 0xfe8,
                dma_len: 3,
            }),
            immdt: Some(ImmDtRepr { imm: [1, 2, 3, 4] }),
            payload_len: 3,
            ..RoceRepr::default()
        };
        let mut buf = vec![0u8; r.buffer_len()];
        assert_eq!(buf.len(), 12 + 16 + 4 + 3 + 1 + 4);
        r.emit(&mut RocePacket::new_unchecked(&mut buf[..]));
        assert_eq!(&buf[28..32], &[1, 2, 3, 4]);
        assert_eq!(buf[1] >> 4 & 3, 1, "pad count");
        let back = RoceRepr::parse(&RocePacket::new_checked(&buf[..]).unwrap()).unwrap();
        assert_eq!(
            back,
            RoceRepr {
                bth: BthRepr {
                    pad_count: 1,
                    ..r.bth
                },
                ..r
            }
        );
    }

    #[test]
    fn rejects() {
        // Unknown opcode.
        let mut p = READ_RESP;
        p[0] = 0x15;
        assert_eq!(
            RocePacket::new_checked(&p[..]).unwrap_err(),
            Error::Unsupported
        );
        // An ACK with a payload.
        let mut ack = READ_RESP;
        ack[0] = opcode::RC_ACKNOWLEDGE;
        assert_eq!(
            RocePacket::new_checked(&ack[..]).unwrap_err(),
            Error::Malformed
        );
        // Cut inside the AETH.
        assert_eq!(
            RocePacket::new_checked(&READ_RESP[..14]).unwrap_err(),
            Error::Truncated
        );
        // A length that is not a multiple of 4.
        assert_eq!(
            RocePacket::new_checked(&READ_RESP[..23]).unwrap_err(),
            Error::Malformed
        );
        // A pad count larger than what follows the headers.
        let short = [
            0x04, 0x30, 0xff, 0xff, 0, 0, 0, 1, 0, 0, 0, 1, 0xaa, 0xbb, 0xcc, 0xdd,
        ];
        assert_eq!(
            RocePacket::new_checked(&short[..]).unwrap_err(),
            Error::Truncated
        );
        // An AETH with a reserved syndrome.
        let mut bad = READ_RESP;
        bad[12] = 0x40;
        let q = RocePacket::new_checked(&bad[..]).unwrap();
        assert_eq!(RoceRepr::parse(&q), Err(Error::Malformed));
    }
}

//! IPv4 headers (RFC 791), without options or fragments, as RoCEv2 sends
//! them.
//!
//! ```text
//! 0        1        2        3
//! |ver|ihl | DSCP|E | total length    |
//! | identification  |flags| frag off  |
//! |  TTL   | proto  | header checksum |
//! | source address                    |
//! | destination address               |
//! ```

use core::fmt;

use super::{be16, fold16, put16, sum16, Error, Result};

/// An IPv4 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Ipv4Address(pub [u8; 4]);

impl fmt::Display for Ipv4Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(f, "{}.{}.{}.{}", b[0], b[1], b[2], b[3])
    }
}

/// IP protocol numbers this port uses.
pub mod protocol {
    /// UDP.
    pub const UDP: u8 = 17;
    /// ICMPv6 (an IPv6 next header).
    pub const ICMPV6: u8 = 58;
}

/// Length of a header without options.
pub const HEADER_LEN: usize = 20;

const DONT_FRAG: u16 = 0x4000;
const MORE_FRAGS: u16 = 0x2000;
const FRAG_OFFSET: u16 = 0x1fff;

/// A read/write view of an IPv4 packet.
#[derive(Debug, Clone)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// Wraps `buffer` without checking it.
    pub fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps `buffer` and checks the lengths it declares.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks that the buffer holds the header and `total_len` bytes, and
    /// that the declared lengths are consistent.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let (hl, tl) = (self.header_len(), self.total_len() as usize);
        if hl < HEADER_LEN || tl < hl {
            return Err(Error::Malformed);
        }
        if len < tl {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// IP version (4).
    pub fn version(&self) -> u8 {
        self.buffer.as_ref()[0] >> 4
    }

    /// Header length in bytes (IHL × 4).
    pub fn header_len(&self) -> usize {
        (self.buffer.as_ref()[0] & 0xf) as usize * 4
    }

    /// The DSCP and ECN byte (the former type of service).
    pub fn tos(&self) -> u8 {
        self.buffer.as_ref()[1]
    }

    /// Total length of header and payload.
    pub fn total_len(&self) -> u16 {
        be16(self.buffer.as_ref(), 2)
    }

    /// Identification.
    pub fn ident(&self) -> u16 {
        be16(self.buffer.as_ref(), 4)
    }

    fn flags_frag(&self) -> u16 {
        be16(self.buffer.as_ref(), 6)
    }

    /// The don't-fragment flag.
    pub fn dont_frag(&self) -> bool {
        self.flags_frag() & DONT_FRAG != 0
    }

    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.buffer.as_ref()[8]
    }

    /// Protocol of the payload.
    pub fn protocol(&self) -> u8 {
        self.buffer.as_ref()[9]
    }

    /// Header checksum as stored.
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), 10)
    }

    /// Source address.
    pub fn src_addr(&self) -> Ipv4Address {
        let b = self.buffer.as_ref();
        Ipv4Address([b[12], b[13], b[14], b[15]])
    }

    /// Destination address.
    pub fn dst_addr(&self) -> Ipv4Address {
        let b = self.buffer.as_ref();
        Ipv4Address([b[16], b[17], b[18], b[19]])
    }

    /// Whether the header checksum is right.
    pub fn verify_checksum(&self) -> bool {
        fold16(sum16(0, &self.buffer.as_ref()[..self.header_len()])) == 0
    }

    /// The payload (up to `total_len`: Ethernet padding is not part of it).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..self.total_len() as usize]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    /// Recomputes and stores the header checksum.
    pub fn fill_checksum(&mut self) {
        let hl = self.header_len();
        let b = self.buffer.as_mut();
        put16(b, 10, 0);
        let c = fold16(sum16(0, &b[..hl]));
        put16(b, 10, c);
    }

    /// The payload, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (hl, tl) = (self.header_len(), self.total_len() as usize);
        &mut self.buffer.as_mut()[hl..tl]
    }
}

/// The meaning of an IPv4 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv4Repr {
    /// Source address.
    pub src_addr: Ipv4Address,
    /// Destination address.
    pub dst_addr: Ipv4Address,
    /// DSCP (6 bits) and ECN (2 bits).
    pub tos: u8,
    /// Identification.
    pub ident: u16,
    /// The don't-fragment flag (RoCEv2 senders set it).
    pub dont_frag: bool,
    /// Time to live.
    pub ttl: u8,
    /// Protocol of the payload.
    pub protocol: u8,
    /// Payload length.
    pub payload_len: usize,
}

impl Ipv4Repr {
    /// Parses and validates the header of `packet`: version 4, no options,
    /// not a fragment, a correct header checksum.
    pub fn parse<T: AsRef<[u8]>>(packet: &Ipv4Packet<T>) -> Result<Self> {
        packet.check_len()?;
        if packet.version() != 4 {
            return Err(Error::Malformed);
        }
        if !packet.verify_checksum() {
            return Err(Error::Checksum);
        }
        // Fragments and options never occur in RoCEv2 traffic.
        let ff = packet.flags_frag();
        if packet.header_len() != HEADER_LEN || ff & (MORE_FRAGS | FRAG_OFFSET) != 0 {
            return Err(Error::Unsupported);
        }
        Ok(Self {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            tos: packet.tos(),
            ident: packet.ident(),
            dont_frag: packet.dont_frag(),
            ttl: packet.ttl(),
            protocol: packet.protocol(),
            payload_len: packet.total_len() as usize - HEADER_LEN,
        })
    }

    /// Header length.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header, with its checksum, into `packet`, which holds at
    /// least `buffer_len() + payload_len` bytes.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Ipv4Packet<T>) {
        let b = packet.buffer.as_mut();
        b[0] = 0x45;
        b[1] = self.tos;
        put16(b, 2, (HEADER_LEN + self.payload_len) as u16);
        put16(b, 4, self.ident);
        put16(b, 6, if self.dont_frag { DONT_FRAG } else { 0 });
        b[8] = self.ttl;
        b[9] = self.protocol;
        b[12..16].copy_from_slice(&self.src_addr.0);
        b[16..20].copy_from_slice(&self.dst_addr.0);
        packet.fill_checksum();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The IPv4 header of an RDMA READ request from the read_lat capture
    /// (192.0.2.10 -> 192.0.2.20, 40 bytes of UDP).
    const HDR: [u8; 20] = [
        0x45, 0x00, 0x00, 0x3c, 0x3d, 0x51, 0x40, 0x00, 0x40, 0x11, 0x79, 0x41, 0xc0, 0x00, 0x02,
        0x0a, 0xc0, 0x00, 0x02, 0x14,
    ];

    fn packet() -> Vec<u8> {
        let mut v = HDR.to_vec();
        v.resize(0x3c, 0xaa);
        v
    }

    #[test]
    fn parse_emit() {
        let buf = packet();
        let p = Ipv4Packet::new_checked(&buf[..]).unwrap();
        let r = Ipv4Repr::parse(&p).unwrap();
        assert_eq!(
            r,
            Ipv4Repr {
                src_addr: Ipv4Address([192, 0, 2, 10]),
                dst_addr: Ipv4Address([192, 0, 2, 20]),
                tos: 0,
                ident: 0x3d51,
                dont_frag: true,
                ttl: 64,
                protocol: protocol::UDP,
                payload_len: 40,
            }
        );
        let mut out = vec![0xaa; 0x3c];
        r.emit(&mut Ipv4Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, buf);
    }

    #[test]
    fn padding_is_not_payload() {
        let mut buf = packet();
        buf.extend_from_slice(&[0; 6]);
        let p = Ipv4Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(p.payload().len(), 40);
    }

    #[test]
    fn rejects() {
        let mut bad = packet();
        bad[10] ^= 1;
        let p = Ipv4Packet::new_checked(&bad[..]).unwrap();
        assert_eq!(Ipv4Repr::parse(&p), Err(Error::Checksum));
        let buf = packet();
        assert_eq!(
            Ipv4Packet::new_checked(&buf[..50]).unwrap_err(),
            Error::Truncated
        );
        let mut short = packet();
        short[3] = 10; // total length below the header
        assert_eq!(
            Ipv4Packet::new_checked(&short[..]).unwrap_err(),
            Error::Malformed
        );
        let mut frag = packet();
        frag[6] = 0x20; // more fragments
        let mut p = Ipv4Packet::new_unchecked(&mut frag[..]);
        p.fill_checksum();
        assert_eq!(Ipv4Repr::parse(&p), Err(Error::Unsupported));
    }
}

//! IPv6 headers (RFC 8200), without extension headers.
//!
//! ```text
//! 0        1        2        3
//! |ver| traffic class | flow label (20 bits)  |
//! | payload length  | next hdr | hop limit    |
//! | source address (16 bytes)                 |
//! | destination address (16 bytes)            |
//! ```

use core::fmt;

use super::{be16, be32, put16, put32, Error, Result};

/// An IPv6 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Ipv6Address(pub [u8; 16]);

impl Ipv6Address {
    /// Whether this is a multicast address (`ff00::/8`).
    pub fn is_multicast(&self) -> bool {
        self.0[0] == 0xff
    }

    /// The solicited-node multicast address of this address (RFC 4291):
    /// `ff02::1:ffXX:XXXX` with its low 24 bits.
    pub fn solicited_node(&self) -> Ipv6Address {
        let mut a = [0u8; 16];
        a[0] = 0xff;
        a[1] = 0x02;
        a[11] = 0x01;
        a[12] = 0xff;
        a[13..].copy_from_slice(&self.0[13..]);
        Ipv6Address(a)
    }
}

impl fmt::Display for Ipv6Address {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        std::net::Ipv6Addr::from(self.0).fmt(f)
    }
}

/// Header length.
pub const HEADER_LEN: usize = 40;

/// A read/write view of an IPv6 packet.
#[derive(Debug, Clone)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
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

    /// Checks that the buffer holds the header and the payload length it
    /// declares.
    pub fn check_len(&self) -> Result<()> {
        let len = self.buffer.as_ref().len();
        if len < HEADER_LEN || len < HEADER_LEN + self.payload_len() as usize {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    fn word0(&self) -> u32 {
        be32(self.buffer.as_ref(), 0)
    }

    /// IP version (6).
    pub fn version(&self) -> u8 {
        (self.word0() >> 28) as u8
    }

    /// Traffic class (DSCP and ECN).
    pub fn traffic_class(&self) -> u8 {
        (self.word0() >> 20) as u8
    }

    /// Flow label (20 bits).
    pub fn flow_label(&self) -> u32 {
        self.word0() & 0xf_ffff
    }

    /// Payload length.
    pub fn payload_len(&self) -> u16 {
        be16(self.buffer.as_ref(), 4)
    }

    /// Next header (the payload's protocol).
    pub fn next_header(&self) -> u8 {
        self.buffer.as_ref()[6]
    }

    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.buffer.as_ref()[7]
    }

    /// Source address.
    pub fn src_addr(&self) -> Ipv6Address {
        let mut a = [0; 16];
        a.copy_from_slice(&self.buffer.as_ref()[8..24]);
        Ipv6Address(a)
    }

    /// Destination address.
    pub fn dst_addr(&self) -> Ipv6Address {
        let mut a = [0; 16];
        a.copy_from_slice(&self.buffer.as_ref()[24..40]);
        Ipv6Address(a)
    }

    /// The payload (up to the payload length: padding is not part of it).
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..HEADER_LEN + self.payload_len() as usize]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// The payload, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let end = HEADER_LEN + self.payload_len() as usize;
        &mut self.buffer.as_mut()[HEADER_LEN..end]
    }
}

/// The meaning of an IPv6 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Ipv6Repr {
    /// Source address.
    pub src_addr: Ipv6Address,
    /// Destination address.
    pub dst_addr: Ipv6Address,
    /// Traffic class (DSCP and ECN).
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Next header.
    pub next_header: u8,
    /// Hop limit.
    pub hop_limit: u8,
    /// Payload length.
    pub payload_len: usize,
}

impl Ipv6Repr {
    /// Parses and validates the header of `packet`.
    pub fn parse<T: AsRef<[u8]>>(packet: &Ipv6Packet<T>) -> Result<Self> {
        packet.check_len()?;
        if packet.version() != 6 {
            return Err(Error::Malformed);
        }
        Ok(Self {
            src_addr: packet.src_addr(),
            dst_addr: packet.dst_addr(),
            traffic_class: packet.traffic_class(),
            flow_label: packet.flow_label(),
            next_header: packet.next_header(),
            hop_limit: packet.hop_limit(),
            payload_len: packet.payload_len() as usize,
        })
    }

    /// Header length.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header into `packet`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, packet: &mut Ipv6Packet<T>) {
        let b = packet.buffer.as_mut();
        let w0 = 6 << 28 | (self.traffic_class as u32) << 20 | (self.flow_label & 0xf_ffff);
        put32(b, 0, w0);
        put16(b, 4, self.payload_len as u16);
        b[6] = self.next_header;
        b[7] = self.hop_limit;
        b[8..24].copy_from_slice(&self.src_addr.0);
        b[24..40].copy_from_slice(&self.dst_addr.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The IPv6 header of a SEND FIRST from the rc_pingpong_ipv6 capture
    /// (fe80::5054:ff:fe00:a -> fe80::5054:ff:fe00:14, 1048 bytes of UDP).
    const HDR: [u8; 40] = [
        0x60, 0x00, 0x00, 0x00, 0x04, 0x18, 0x11, 0x40, 0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54,
        0x00, 0xff, 0xfe, 0x00, 0x00, 0x0a, 0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0x00, 0xff,
        0xfe, 0x00, 0x00, 0x14,
    ];

    #[test]
    fn parse_emit() {
        let mut buf = HDR.to_vec();
        buf.resize(40 + 0x418, 0);
        let p = Ipv6Packet::new_checked(&buf[..]).unwrap();
        let r = Ipv6Repr::parse(&p).unwrap();
        assert_eq!(r.src_addr.to_string(), "fe80::5054:ff:fe00:a");
        assert_eq!(r.dst_addr.to_string(), "fe80::5054:ff:fe00:14");
        assert_eq!(
            (
                r.traffic_class,
                r.flow_label,
                r.next_header,
                r.hop_limit,
                r.payload_len
            ),
            (0, 0, 17, 64, 0x418)
        );
        let mut out = vec![0; buf.len()];
        r.emit(&mut Ipv6Packet::new_unchecked(&mut out[..]));
        assert_eq!(out, buf);
        let with_class = Ipv6Repr {
            traffic_class: 0xb8,
            flow_label: 0xabcde,
            ..r
        };
        with_class.emit(&mut Ipv6Packet::new_unchecked(&mut out[..]));
        assert_eq!(&out[..4], &[0x6b, 0x8a, 0xbc, 0xde]);
        let p = Ipv6Packet::new_checked(&out[..]).unwrap();
        assert_eq!(Ipv6Repr::parse(&p).unwrap(), with_class);
    }

    #[test]
    fn truncated_and_solicited_node() {
        let buf = HDR.to_vec();
        assert_eq!(
            Ipv6Packet::new_checked(&buf[..]).unwrap_err(),
            Error::Truncated
        );
        let a = Ipv6Address([
            0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0, 0xff, 0xfe, 0, 0, 0x14,
        ]);
        assert_eq!(a.solicited_node().to_string(), "ff02::1:ff00:14");
    }
}

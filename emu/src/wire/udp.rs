//! UDP headers (RFC 768).
//!
//! ```text
//! 0        1        2        3
//! | source port     | destination port |
//! | length          | checksum         |
//! ```
//!
//! RoCEv2 senders (Linux rxe, RoCE NICs) leave the checksum 0, over IPv4
//! and IPv6 alike: the ICRC protects the packet. [`UdpChecksum::None`]
//! emits that, as the port does over IPv4; [`UdpChecksum::Computed`] is
//! the checksum IPv6 requires, which the port sends over IPv6. A received
//! non-zero checksum is verified.

use super::ip::IpAddress;
use super::ipv4::protocol;
use super::{be16, fold16, put16, sum16, Error, Result};

/// Header length.
pub const HEADER_LEN: usize = 8;

/// A read/write view of a UDP datagram.
#[derive(Debug, Clone)]
pub struct UdpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Wraps `buffer` without checking it.
    pub fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps `buffer` and checks the length it declares.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks that the buffer holds the header and `len` bytes, and that
    /// `len` covers the header.
    pub fn check_len(&self) -> Result<()> {
        let n = self.buffer.as_ref().len();
        if n < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let len = self.len() as usize;
        if len < HEADER_LEN {
            return Err(Error::Malformed);
        }
        if n < len {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Source port.
    pub fn src_port(&self) -> u16 {
        be16(self.buffer.as_ref(), 0)
    }

    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        be16(self.buffer.as_ref(), 2)
    }

    /// Length of header and payload.
    pub fn len(&self) -> u16 {
        be16(self.buffer.as_ref(), 4)
    }

    /// Whether the length field is 0 (never valid).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Checksum as stored (0: none).
    pub fn checksum(&self) -> u16 {
        be16(self.buffer.as_ref(), 6)
    }

    /// Whether the checksum is right for a datagram from `src` to `dst`; a
    /// zero checksum (none) is right.
    pub fn verify_checksum(&self, src: &IpAddress, dst: &IpAddress) -> bool {
        if self.checksum() == 0 {
            return true;
        }
        let len = self.len() as usize;
        let Some(ph) = src.pseudo_sum(dst, protocol::UDP, len) else {
            return false;
        };
        fold16(sum16(ph, &self.buffer.as_ref()[..len])) == 0
    }

    /// The payload.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[HEADER_LEN..self.len() as usize]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> UdpPacket<T> {
    /// The payload, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let len = self.len() as usize;
        &mut self.buffer.as_mut()[HEADER_LEN..len]
    }

    /// Computes and stores the checksum for a datagram from `src` to `dst`
    /// (the payload must be in place).
    pub fn fill_checksum(&mut self, src: &IpAddress, dst: &IpAddress) {
        let len = self.len() as usize;
        let b = self.buffer.as_mut();
        put16(b, 6, 0);
        let ph = src.pseudo_sum(dst, protocol::UDP, len).unwrap_or(0);
        let c = match fold16(sum16(ph, &b[..len])) {
            // A computed 0 is sent as all ones (RFC 768).
            0 => 0xffff,
            c => c,
        };
        put16(b, 6, c);
    }
}

/// How a datagram's checksum is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum UdpChecksum {
    /// No checksum (0), as RoCEv2 senders do.
    None,
    /// A computed checksum.
    Computed,
}

/// The meaning of a UDP header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct UdpRepr {
    /// Source port.
    pub src_port: u16,
    /// Destination port.
    pub dst_port: u16,
    /// Payload length.
    pub payload_len: usize,
    /// How the checksum is (or was) sent.
    pub checksum: UdpChecksum,
}

impl UdpRepr {
    /// Parses the header of `packet`, sent from `src` to `dst`, verifying a
    /// non-zero checksum.
    pub fn parse<T: AsRef<[u8]>>(
        packet: &UdpPacket<T>,
        src: &IpAddress,
        dst: &IpAddress,
    ) -> Result<Self> {
        packet.check_len()?;
        if !packet.verify_checksum(src, dst) {
            return Err(Error::Checksum);
        }
        Ok(Self {
            src_port: packet.src_port(),
            dst_port: packet.dst_port(),
            payload_len: packet.len() as usize - HEADER_LEN,
            checksum: if packet.checksum() == 0 {
                UdpChecksum::None
            } else {
                UdpChecksum::Computed
            },
        })
    }

    /// Header length.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN
    }

    /// Writes the header into `packet`. With [`UdpChecksum::Computed`] the
    /// payload must already be in place.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        packet: &mut UdpPacket<T>,
        src: &IpAddress,
        dst: &IpAddress,
    ) {
        let b = packet.buffer.as_mut();
        put16(b, 0, self.src_port);
        put16(b, 2, self.dst_port);
        put16(b, 4, (HEADER_LEN + self.payload_len) as u16);
        put16(b, 6, 0);
        if self.checksum == UdpChecksum::Computed {
            packet.fill_checksum(src, dst);
        }
    }
}

/// The UDP source port of a RoCEv2 flow, as Linux computes it
/// (`rdma_get_udp_sport`): from the flow label if the address vector has
/// one, else from a hash of the two QP numbers, folded into
/// `0xc000..=0xffff`, so that every packet of a QP pair takes one ECMP path.
pub fn roce_src_port(flow_label: u32, src_qpn: u32, dst_qpn: u32) -> u16 {
    let fl = if flow_label != 0 {
        flow_label & 0xf_ffff
    } else {
        // rdma_calc_flow_label
        let mut v = src_qpn as u64 * dst_qpn as u64;
        v ^= v >> 20;
        v ^= v >> 40;
        (v & 0xf_ffff) as u32
    };
    // rdma_flow_label_to_udp_sport
    let low = (fl & 0x3fff) ^ ((fl & 0xf_c000) >> 14);
    (low | 0xc000) as u16
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ipv4::Ipv4Address;

    const SRC: IpAddress = IpAddress::V4(Ipv4Address([192, 0, 2, 10]));
    const DST: IpAddress = IpAddress::V4(Ipv4Address([192, 0, 2, 20]));

    #[test]
    fn parse_emit_zero_checksum() {
        // From the read_lat capture: sport 49681, dport 4791, length 40.
        let mut buf = vec![0xc2, 0x11, 0x12, 0xb7, 0x00, 0x28, 0x00, 0x00];
        buf.resize(40, 0x5a);
        let p = UdpPacket::new_checked(&buf[..]).unwrap();
        let r = UdpRepr::parse(&p, &SRC, &DST).unwrap();
        assert_eq!(
            r,
            UdpRepr {
                src_port: 49681,
                dst_port: 4791,
                payload_len: 32,
                checksum: UdpChecksum::None,
            }
        );
        let mut out = vec![0x5a; 40];
        r.emit(&mut UdpPacket::new_unchecked(&mut out[..]), &SRC, &DST);
        assert_eq!(out, buf);
    }

    #[test]
    fn computed_checksum() {
        let r = UdpRepr {
            src_port: 1234,
            dst_port: 4791,
            payload_len: 5,
            checksum: UdpChecksum::Computed,
        };
        let mut buf = [0; 13];
        buf[8..].copy_from_slice(b"hello");
        r.emit(&mut UdpPacket::new_unchecked(&mut buf[..]), &SRC, &DST);
        // Checked independently: pseudo-header c000 020a c000 0214 0011 000d,
        // header 04d2 12b7 000d, payload 6865 6c6c 6f00.
        assert_eq!(&buf[6..8], &[0x20, 0x5a]);
        let p = UdpPacket::new_checked(&buf[..]).unwrap();
        assert_eq!(UdpRepr::parse(&p, &SRC, &DST).unwrap(), r);
        buf[9] ^= 1;
        let p = UdpPacket::new_checked(&buf[..]).unwrap();
        assert_eq!(UdpRepr::parse(&p, &SRC, &DST), Err(Error::Checksum));
    }

    #[test]
    fn rxe_source_ports() {
        // Both directions of the captures' QP pairs.
        assert_eq!(roce_src_port(0, 0x11, 0x11), 49441);
        assert_eq!(roce_src_port(0, 0x14, 0x14), 49552);
        assert_eq!(roce_src_port(0, 0x17, 0x17), 49681);
        // A flow label takes precedence over the QP numbers.
        assert_eq!(roce_src_port(0x12345, 0x11, 0x11), 0xc000 | (0x2345 ^ 0x4));
    }
}

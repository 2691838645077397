//! ARP for IPv4 over Ethernet (RFC 826): how a port learns the MAC address
//! behind an IPv4-mapped GID, and answers for its own.
//!
//! ```text
//! | htype 1 | ptype 0x0800 | hlen 6 | plen 4 | oper |
//! | sender MAC | sender IPv4 | target MAC | target IPv4 |   (28 bytes)
//! ```

use super::ethernet::{ethertype, EthernetAddress};
use super::ipv4::Ipv4Address;
use super::{be16, put16, Error, Result};

/// Length of an Ethernet/IPv4 ARP packet.
pub const PACKET_LEN: usize = 28;

/// An ARP operation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ArpOperation {
    /// Who has the target address?
    Request,
    /// The sender has it.
    Reply,
}

/// A read/write view of an ARP packet.
#[derive(Debug, Clone)]
pub struct ArpPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> ArpPacket<T> {
    /// Wraps `buffer` without checking it.
    pub fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps `buffer` and checks its length.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks that the buffer holds an Ethernet/IPv4 ARP packet.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < PACKET_LEN {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    fn b(&self) -> &[u8] {
        self.buffer.as_ref()
    }

    /// Hardware type (1: Ethernet).
    pub fn hardware_type(&self) -> u16 {
        be16(self.b(), 0)
    }

    /// Protocol type (0x0800: IPv4).
    pub fn protocol_type(&self) -> u16 {
        be16(self.b(), 2)
    }

    /// Hardware and protocol address lengths.
    pub fn addr_lens(&self) -> (u8, u8) {
        (self.b()[4], self.b()[5])
    }

    /// Operation code (1 request, 2 reply).
    pub fn operation(&self) -> u16 {
        be16(self.b(), 6)
    }

    /// Sender hardware address.
    pub fn sender_mac(&self) -> EthernetAddress {
        let mut a = [0; 6];
        a.copy_from_slice(&self.b()[8..14]);
        EthernetAddress(a)
    }

    /// Sender protocol address.
    pub fn sender_ip(&self) -> Ipv4Address {
        let b = self.b();
        Ipv4Address([b[14], b[15], b[16], b[17]])
    }

    /// Target hardware address.
    pub fn target_mac(&self) -> EthernetAddress {
        let mut a = [0; 6];
        a.copy_from_slice(&self.b()[18..24]);
        EthernetAddress(a)
    }

    /// Target protocol address.
    pub fn target_ip(&self) -> Ipv4Address {
        let b = self.b();
        Ipv4Address([b[24], b[25], b[26], b[27]])
    }
}

/// The meaning of an Ethernet/IPv4 ARP packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ArpRepr {
    /// Request or reply.
    pub operation: ArpOperation,
    /// Sender MAC.
    pub sender_mac: EthernetAddress,
    /// Sender IPv4 address.
    pub sender_ip: Ipv4Address,
    /// Target MAC (zero in a request).
    pub target_mac: EthernetAddress,
    /// Target IPv4 address.
    pub target_ip: Ipv4Address,
}

impl ArpRepr {
    /// Parses an Ethernet/IPv4 request or reply; other ARP kinds are
    /// unsupported.
    pub fn parse<T: AsRef<[u8]>>(p: &ArpPacket<T>) -> Result<Self> {
        p.check_len()?;
        if p.hardware_type() != 1 || p.protocol_type() != ethertype::IPV4 || p.addr_lens() != (6, 4)
        {
            return Err(Error::Unsupported);
        }
        let operation = match p.operation() {
            1 => ArpOperation::Request,
            2 => ArpOperation::Reply,
            _ => return Err(Error::Unsupported),
        };
        Ok(Self {
            operation,
            sender_mac: p.sender_mac(),
            sender_ip: p.sender_ip(),
            target_mac: p.target_mac(),
            target_ip: p.target_ip(),
        })
    }

    /// Packet length.
    pub fn buffer_len(&self) -> usize {
        PACKET_LEN
    }

    /// Writes the packet into `p`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, p: &mut ArpPacket<T>) {
        let b = p.buffer.as_mut();
        put16(b, 0, 1);
        put16(b, 2, ethertype::IPV4);
        b[4] = 6;
        b[5] = 4;
        let op = match self.operation {
            ArpOperation::Request => 1,
            ArpOperation::Reply => 2,
        };
        put16(b, 6, op);
        b[8..14].copy_from_slice(&self.sender_mac.0);
        b[14..18].copy_from_slice(&self.sender_ip.0);
        b[18..24].copy_from_slice(&self.target_mac.0);
        b[24..28].copy_from_slice(&self.target_ip.0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const REQUEST: [u8; 28] = [
        0x00, 0x01, 0x08, 0x00, 0x06, 0x04, 0x00, 0x01, // Ethernet/IPv4, request
        0x52, 0x54, 0x00, 0x00, 0x00, 0x0a, 192, 0, 2, 10, // sender
        0, 0, 0, 0, 0, 0, 192, 0, 2, 20, // target
    ];

    #[test]
    fn parse_emit() {
        let p = ArpPacket::new_checked(&REQUEST[..]).unwrap();
        let r = ArpRepr::parse(&p).unwrap();
        assert_eq!(r.operation, ArpOperation::Request);
        assert_eq!(r.sender_ip, Ipv4Address([192, 0, 2, 10]));
        assert_eq!(r.target_ip, Ipv4Address([192, 0, 2, 20]));
        assert!(r.target_mac.is_zero());
        let mut out = [0u8; 28];
        r.emit(&mut ArpPacket::new_unchecked(&mut out[..]));
        assert_eq!(out, REQUEST);
    }

    #[test]
    fn rejects() {
        assert_eq!(
            ArpPacket::new_checked(&REQUEST[..27]).unwrap_err(),
            Error::Truncated
        );
        let mut other = REQUEST;
        other[7] = 3; // RARP request
        let p = ArpPacket::new_checked(&other[..]).unwrap();
        assert_eq!(ArpRepr::parse(&p), Err(Error::Unsupported));
    }
}

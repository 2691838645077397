//! Ethernet II frames, with an optional 802.1Q VLAN tag.
//!
//! ```text
//! 0      6      12           14 (or 18 with a tag)
//! | dst  | src  | ethertype  | payload ...
//!               | 0x8100 TCI ethertype |   (802.1Q: PCP 3 bits, DEI, VID 12 bits)
//! ```
//! No FCS: ports hand frames over without it, as Linux and QEMU do.

use core::fmt;

use super::{be16, put16, Error, Result};

/// An Ethernet MAC address (network byte order).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct EthernetAddress(pub [u8; 6]);

impl EthernetAddress {
    /// The broadcast address `ff:ff:ff:ff:ff:ff`.
    pub const BROADCAST: EthernetAddress = EthernetAddress([0xff; 6]);

    /// Whether the group bit is set (broadcast and multicast).
    pub fn is_multicast(&self) -> bool {
        self.0[0] & 1 != 0
    }

    /// Whether this is the all-zero address (unresolved).
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 6]
    }
}

impl fmt::Display for EthernetAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let b = self.0;
        write!(
            f,
            "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
            b[0], b[1], b[2], b[3], b[4], b[5]
        )
    }
}

/// Ethertype values this port uses.
pub mod ethertype {
    /// IPv4.
    pub const IPV4: u16 = 0x0800;
    /// ARP.
    pub const ARP: u16 = 0x0806;
    /// IPv6.
    pub const IPV6: u16 = 0x86dd;
    /// An 802.1Q VLAN tag (TPID).
    pub const VLAN: u16 = 0x8100;
}

/// Length of an untagged header.
pub const HEADER_LEN: usize = 14;
/// Length of the 802.1Q tag.
pub const VLAN_TAG_LEN: usize = 4;

/// A read/write view of an Ethernet frame.
#[derive(Debug, Clone)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Wraps `buffer` without checking its length.
    pub fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps `buffer` and checks that it holds the whole header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let f = Self::new_unchecked(buffer);
        f.check_len()?;
        Ok(f)
    }

    /// Checks that the buffer holds the header (with its tag, if any).
    pub fn check_len(&self) -> Result<()> {
        let b = self.buffer.as_ref();
        if b.len() < HEADER_LEN || b.len() < self.header_len() {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Consumes the view, returning the buffer.
    pub fn into_inner(self) -> T {
        self.buffer
    }

    fn tagged(&self) -> bool {
        let b = self.buffer.as_ref();
        b.len() >= HEADER_LEN && be16(b, 12) == ethertype::VLAN
    }

    /// Header length: 14, or 18 with an 802.1Q tag.
    pub fn header_len(&self) -> usize {
        if self.tagged() {
            HEADER_LEN + VLAN_TAG_LEN
        } else {
            HEADER_LEN
        }
    }

    /// Destination address.
    pub fn dst_addr(&self) -> EthernetAddress {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[0..6]);
        EthernetAddress(a)
    }

    /// Source address.
    pub fn src_addr(&self) -> EthernetAddress {
        let mut a = [0; 6];
        a.copy_from_slice(&self.buffer.as_ref()[6..12]);
        EthernetAddress(a)
    }

    /// The 802.1Q tag control information, if tagged.
    pub fn vlan_tci(&self) -> Option<u16> {
        self.tagged().then(|| be16(self.buffer.as_ref(), 14))
    }

    /// The ethertype of the payload (after the tag, if any).
    pub fn ethertype(&self) -> u16 {
        be16(self.buffer.as_ref(), self.header_len() - 2)
    }

    /// The payload.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[self.header_len()..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Sets the destination address.
    pub fn set_dst_addr(&mut self, a: EthernetAddress) {
        self.buffer.as_mut()[0..6].copy_from_slice(&a.0);
    }

    /// Sets the source address.
    pub fn set_src_addr(&mut self, a: EthernetAddress) {
        self.buffer.as_mut()[6..12].copy_from_slice(&a.0);
    }

    /// The payload, mutable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let at = self.header_len();
        &mut self.buffer.as_mut()[at..]
    }
}

/// An 802.1Q tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct VlanTag {
    /// Priority code point (3 bits).
    pub pcp: u8,
    /// Drop eligible indicator.
    pub dei: bool,
    /// VLAN identifier (12 bits).
    pub vid: u16,
}

impl VlanTag {
    fn tci(&self) -> u16 {
        (self.pcp as u16 & 7) << 13 | (self.dei as u16) << 12 | (self.vid & 0xfff)
    }

    fn from_tci(tci: u16) -> Self {
        Self {
            pcp: (tci >> 13) as u8,
            dei: tci & 0x1000 != 0,
            vid: tci & 0xfff,
        }
    }
}

/// The meaning of an Ethernet header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct EthernetRepr {
    /// Source address.
    pub src_addr: EthernetAddress,
    /// Destination address.
    pub dst_addr: EthernetAddress,
    /// The 802.1Q tag, if any.
    pub vlan: Option<VlanTag>,
    /// Ethertype of the payload.
    pub ethertype: u16,
}

impl EthernetRepr {
    /// Parses the header of `frame`.
    pub fn parse<T: AsRef<[u8]>>(frame: &EthernetFrame<T>) -> Result<Self> {
        frame.check_len()?;
        Ok(Self {
            src_addr: frame.src_addr(),
            dst_addr: frame.dst_addr(),
            vlan: frame.vlan_tci().map(VlanTag::from_tci),
            ethertype: frame.ethertype(),
        })
    }

    /// Header length.
    pub fn buffer_len(&self) -> usize {
        HEADER_LEN + if self.vlan.is_some() { VLAN_TAG_LEN } else { 0 }
    }

    /// Writes the header into the first `buffer_len()` bytes of `frame`.
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(&self, frame: &mut EthernetFrame<T>) {
        frame.set_dst_addr(self.dst_addr);
        frame.set_src_addr(self.src_addr);
        let b = frame.buffer.as_mut();
        match self.vlan {
            Some(tag) => {
                put16(b, 12, ethertype::VLAN);
                put16(b, 14, tag.tci());
                put16(b, 16, self.ethertype);
            }
            None => put16(b, 12, self.ethertype),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const UNTAGGED: [u8; 16] = [
        0x52, 0x54, 0x00, 0x00, 0x00, 0x14, // dst
        0x52, 0x54, 0x00, 0x00, 0x00, 0x0a, // src
        0x08, 0x00, // IPv4
        0x45, 0x00,
    ];

    const TAGGED: [u8; 20] = [
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, //
        0x02, 0x00, 0x00, 0x00, 0x00, 0x01, //
        0x81, 0x00, 0xa0, 0x64, // PCP 5, DEI 0, VID 100
        0x86, 0xdd, // IPv6
        0x60, 0x00,
    ];

    #[test]
    fn parse_untagged() {
        let f = EthernetFrame::new_checked(&UNTAGGED[..]).unwrap();
        let r = EthernetRepr::parse(&f).unwrap();
        assert_eq!(r.dst_addr, EthernetAddress([0x52, 0x54, 0, 0, 0, 0x14]));
        assert_eq!(r.src_addr.to_string(), "52:54:00:00:00:0a");
        assert_eq!((r.vlan, r.ethertype), (None, ethertype::IPV4));
        assert_eq!(f.payload(), &[0x45, 0x00]);
        let mut out = [0u8; 16];
        out[14..].copy_from_slice(&[0x45, 0x00]);
        r.emit(&mut EthernetFrame::new_unchecked(&mut out[..]));
        assert_eq!(out, UNTAGGED);
    }

    #[test]
    fn parse_tagged() {
        let f = EthernetFrame::new_checked(&TAGGED[..]).unwrap();
        let r = EthernetRepr::parse(&f).unwrap();
        let tag = VlanTag {
            pcp: 5,
            dei: false,
            vid: 100,
        };
        assert_eq!((r.vlan, r.ethertype), (Some(tag), ethertype::IPV6));
        assert!(r.dst_addr.is_multicast());
        assert_eq!(r.buffer_len(), 18);
        let mut out = [0u8; 20];
        out[18..].copy_from_slice(&[0x60, 0x00]);
        r.emit(&mut EthernetFrame::new_unchecked(&mut out[..]));
        assert_eq!(out, TAGGED);
    }

    #[test]
    fn truncated() {
        assert_eq!(
            EthernetFrame::new_checked(&UNTAGGED[..13]).unwrap_err(),
            Error::Truncated
        );
        // A tag announced but cut off.
        assert_eq!(
            EthernetFrame::new_checked(&TAGGED[..16]).unwrap_err(),
            Error::Truncated
        );
    }
}

//! What IPv4 and IPv6 have in common: an address of either version, the
//! mapping between IP addresses and RoCE GIDs, and the checksum
//! pseudo-header of UDP and ICMPv6.

use core::fmt;

use super::ipv4::Ipv4Address;
use super::ipv6::Ipv6Address;
use super::sum16;

/// An IPv4 or IPv6 address.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum IpAddress {
    /// IPv4.
    V4(Ipv4Address),
    /// IPv6.
    V6(Ipv6Address),
}

impl IpAddress {
    /// The address a RoCEv2 GID stands for: an IPv4-mapped GID
    /// (`::ffff:a.b.c.d`) is an IPv4 address, any other an IPv6 address.
    pub fn from_gid(gid: [u8; 16]) -> IpAddress {
        if gid[..10] == [0; 10] && gid[10..12] == [0xff, 0xff] {
            IpAddress::V4(Ipv4Address([gid[12], gid[13], gid[14], gid[15]]))
        } else {
            IpAddress::V6(Ipv6Address(gid))
        }
    }

    /// The GID of this address (IPv4 as `::ffff:a.b.c.d`).
    pub fn to_gid(&self) -> [u8; 16] {
        match self {
            IpAddress::V4(a) => {
                let mut g = [0u8; 16];
                g[10] = 0xff;
                g[11] = 0xff;
                g[12..].copy_from_slice(&a.0);
                g
            }
            IpAddress::V6(a) => a.0,
        }
    }

    /// The partial checksum of the pseudo-header for `protocol` and
    /// `upper_len` bytes from this source to `dst` (RFC 768, RFC 8200 8.1).
    /// Addresses of different versions give `None`.
    pub fn pseudo_sum(&self, dst: &IpAddress, protocol: u8, upper_len: usize) -> Option<u32> {
        let sum = match (self, dst) {
            (IpAddress::V4(s), IpAddress::V4(d)) => sum16(sum16(0, &s.0), &d.0),
            (IpAddress::V6(s), IpAddress::V6(d)) => sum16(sum16(0, &s.0), &d.0),
            _ => return None,
        };
        let len = upper_len as u32;
        Some(sum + (len >> 16) + (len & 0xffff) + protocol as u32)
    }
}

impl fmt::Display for IpAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            IpAddress::V4(a) => a.fmt(f),
            IpAddress::V6(a) => a.fmt(f),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gid_mapping() {
        let v4 = [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 10];
        assert_eq!(
            IpAddress::from_gid(v4),
            IpAddress::V4(Ipv4Address([192, 0, 2, 10]))
        );
        assert_eq!(IpAddress::from_gid(v4).to_gid(), v4);
        let ll = [
            0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0, 0xff, 0xfe, 0, 0, 0x0a,
        ];
        assert_eq!(IpAddress::from_gid(ll).to_string(), "fe80::5054:ff:fe00:a");
        assert_eq!(IpAddress::from_gid(ll).to_gid(), ll);
    }
}

//! ICMPv6 neighbour discovery (RFC 4861): neighbour solicitations and
//! advertisements with their link-layer address options, how a port
//! learns the MAC address behind an IPv6 GID and answers for its own.
//!
//! ```text
//! | type | code | checksum |
//! | NS: reserved (4)  /  NA: R S O flags, reserved |
//! | target address (16)                            |
//! | options: type, length (in 8 bytes), MAC        |
//! ```
//!
//! Other ICMPv6 messages are parsed as [`Error::Unsupported`].

use super::ethernet::EthernetAddress;
use super::ip::IpAddress;
use super::ipv4::protocol;
use super::ipv6::Ipv6Address;
use super::{fold16, put16, sum16, Error, Result};

const NEIGHBOR_SOLICIT: u8 = 135;
const NEIGHBOR_ADVERT: u8 = 136;
const OPT_SOURCE_LLADDR: u8 = 1;
const OPT_TARGET_LLADDR: u8 = 2;
/// Length of the fixed part of an NS or NA.
const FIXED_LEN: usize = 24;
/// Length of a link-layer address option for Ethernet.
const LLADDR_OPT_LEN: usize = 8;

/// The hop limit every neighbour discovery message carries (RFC 4861: a
/// receiver drops any other).
pub const NDISC_HOP_LIMIT: u8 = 255;

/// Flags of a neighbour advertisement.
pub mod na_flags {
    /// The sender is a router.
    pub const ROUTER: u8 = 0x80;
    /// Sent in response to a solicitation.
    pub const SOLICITED: u8 = 0x40;
    /// Overrides an existing cache entry.
    pub const OVERRIDE: u8 = 0x20;
}

/// A read/write view of an ICMPv6 message.
#[derive(Debug, Clone)]
pub struct Icmpv6Packet<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> Icmpv6Packet<T> {
    /// Wraps `buffer` without checking it.
    pub fn new_unchecked(buffer: T) -> Self {
        Self { buffer }
    }

    /// Wraps `buffer` and checks that it holds the ICMPv6 header.
    pub fn new_checked(buffer: T) -> Result<Self> {
        let p = Self::new_unchecked(buffer);
        p.check_len()?;
        Ok(p)
    }

    /// Checks that the buffer holds the 4-byte header.
    pub fn check_len(&self) -> Result<()> {
        if self.buffer.as_ref().len() < 4 {
            return Err(Error::Truncated);
        }
        Ok(())
    }

    /// Message type.
    pub fn msg_type(&self) -> u8 {
        self.buffer.as_ref()[0]
    }

    /// Message code.
    pub fn msg_code(&self) -> u8 {
        self.buffer.as_ref()[1]
    }

    /// Whether the checksum is right for a message from `src` to `dst`.
    pub fn verify_checksum(&self, src: &Ipv6Address, dst: &Ipv6Address) -> bool {
        let b = self.buffer.as_ref();
        let ph = IpAddress::V6(*src)
            .pseudo_sum(&IpAddress::V6(*dst), protocol::ICMPV6, b.len())
            .unwrap_or(0);
        fold16(sum16(ph, b)) == 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Icmpv6Packet<T> {
    /// Computes and stores the checksum for a message from `src` to `dst`.
    pub fn fill_checksum(&mut self, src: &Ipv6Address, dst: &Ipv6Address) {
        let b = self.buffer.as_mut();
        put16(b, 2, 0);
        let ph = IpAddress::V6(*src)
            .pseudo_sum(&IpAddress::V6(*dst), protocol::ICMPV6, b.len())
            .unwrap_or(0);
        let c = fold16(sum16(ph, b));
        put16(b, 2, c);
    }
}

/// The meaning of a neighbour discovery message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NdiscRepr {
    /// Who has `target`? (from `source_lladdr`, if given)
    NeighborSolicit {
        /// The address asked for.
        target: Ipv6Address,
        /// The sender's MAC (absent when the sender has no address yet).
        source_lladdr: Option<EthernetAddress>,
    },
    /// `target` is at `target_lladdr`.
    NeighborAdvert {
        /// [`na_flags`] bits.
        flags: u8,
        /// The address advertised.
        target: Ipv6Address,
        /// Its MAC.
        target_lladdr: Option<EthernetAddress>,
    },
}

impl NdiscRepr {
    /// Parses a neighbour solicitation or advertisement sent from `src` to
    /// `dst`, verifying its checksum; options other than the link-layer
    /// address are skipped.
    pub fn parse<T: AsRef<[u8]>>(
        p: &Icmpv6Packet<T>,
        src: &Ipv6Address,
        dst: &Ipv6Address,
    ) -> Result<Self> {
        p.check_len()?;
        let ty = p.msg_type();
        if ty != NEIGHBOR_SOLICIT && ty != NEIGHBOR_ADVERT {
            return Err(Error::Unsupported);
        }
        let b = p.buffer.as_ref();
        if b.len() < FIXED_LEN {
            return Err(Error::Truncated);
        }
        if p.msg_code() != 0 {
            return Err(Error::Malformed);
        }
        if !p.verify_checksum(src, dst) {
            return Err(Error::Checksum);
        }
        let mut target = [0; 16];
        target.copy_from_slice(&b[8..24]);
        let target = Ipv6Address(target);
        let mut lladdr = None;
        let mut opts = &b[FIXED_LEN..];
        while !opts.is_empty() {
            if opts.len() < 2 {
                return Err(Error::Truncated);
            }
            let len = opts[1] as usize * 8;
            if len == 0 {
                return Err(Error::Malformed);
            }
            if opts.len() < len {
                return Err(Error::Truncated);
            }
            let want = if ty == NEIGHBOR_SOLICIT {
                OPT_SOURCE_LLADDR
            } else {
                OPT_TARGET_LLADDR
            };
            if opts[0] == want && len == LLADDR_OPT_LEN {
                let mut m = [0; 6];
                m.copy_from_slice(&opts[2..8]);
                lladdr = Some(EthernetAddress(m));
            }
            opts = &opts[len..];
        }
        Ok(if ty == NEIGHBOR_SOLICIT {
            NdiscRepr::NeighborSolicit {
                target,
                source_lladdr: lladdr,
            }
        } else {
            NdiscRepr::NeighborAdvert {
                flags: b[4] & (na_flags::ROUTER | na_flags::SOLICITED | na_flags::OVERRIDE),
                target,
                target_lladdr: lladdr,
            }
        })
    }

    /// Message length.
    pub fn buffer_len(&self) -> usize {
        let opt = match self {
            NdiscRepr::NeighborSolicit { source_lladdr, .. } => source_lladdr.is_some(),
            NdiscRepr::NeighborAdvert { target_lladdr, .. } => target_lladdr.is_some(),
        };
        FIXED_LEN + if opt { LLADDR_OPT_LEN } else { 0 }
    }

    /// Writes the message, with its checksum for `src` to `dst`, into `p`
    /// (exactly `buffer_len()` bytes).
    pub fn emit<T: AsRef<[u8]> + AsMut<[u8]>>(
        &self,
        p: &mut Icmpv6Packet<T>,
        src: &Ipv6Address,
        dst: &Ipv6Address,
    ) {
        let b = p.buffer.as_mut();
        b[..FIXED_LEN].fill(0);
        let (ty, opt_ty, target, lladdr) = match *self {
            NdiscRepr::NeighborSolicit {
                target,
                source_lladdr,
            } => (NEIGHBOR_SOLICIT, OPT_SOURCE_LLADDR, target, source_lladdr),
            NdiscRepr::NeighborAdvert {
                flags,
                target,
                target_lladdr,
            } => {
                b[4] = flags;
                (NEIGHBOR_ADVERT, OPT_TARGET_LLADDR, target, target_lladdr)
            }
        };
        b[0] = ty;
        b[8..24].copy_from_slice(&target.0);
        if let Some(m) = lladdr {
            b[24] = opt_ty;
            b[25] = 1;
            b[26..32].copy_from_slice(&m.0);
        }
        p.fill_checksum(src, dst);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn addr(last: u8) -> Ipv6Address {
        Ipv6Address([
            0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x50, 0x54, 0, 0xff, 0xfe, 0, 0, last,
        ])
    }

    #[test]
    fn solicit_round_trip() {
        let src = addr(0x0a);
        let target = addr(0x14);
        let dst = target.solicited_node();
        let r = NdiscRepr::NeighborSolicit {
            target,
            source_lladdr: Some(EthernetAddress([0x52, 0x54, 0, 0, 0, 0x0a])),
        };
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut Icmpv6Packet::new_unchecked(&mut buf[..]), &src, &dst);
        assert_eq!(buf.len(), 32);
        assert_eq!(&buf[..2], &[135, 0]);
        assert_eq!(&buf[24..32], &[1, 1, 0x52, 0x54, 0, 0, 0, 0x0a]);
        let p = Icmpv6Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(NdiscRepr::parse(&p, &src, &dst).unwrap(), r);
        // The checksum covers the pseudo-header: another destination fails.
        assert_eq!(NdiscRepr::parse(&p, &src, &target), Err(Error::Checksum));
    }

    #[test]
    fn advert_bytes() {
        // A solicited, overriding advertisement of fe80::5054:ff:fe00:14 at
        // 52:54:00:00:00:14, to fe80::5054:ff:fe00:a.
        let (src, dst) = (addr(0x14), addr(0x0a));
        let r = NdiscRepr::NeighborAdvert {
            flags: na_flags::SOLICITED | na_flags::OVERRIDE,
            target: src,
            target_lladdr: Some(EthernetAddress([0x52, 0x54, 0, 0, 0, 0x14])),
        };
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut Icmpv6Packet::new_unchecked(&mut buf[..]), &src, &dst);
        let mut expect = vec![136, 0, 0, 0, 0x60, 0, 0, 0];
        expect.extend_from_slice(&src.0);
        expect.extend_from_slice(&[2, 1, 0x52, 0x54, 0, 0, 0, 0x14]);
        // Checksum computed independently of this module (python, RFC 1071).
        expect[2] = 0xd9;
        expect[3] = 0x89;
        assert_eq!(buf, expect);
        let p = Icmpv6Packet::new_checked(&buf[..]).unwrap();
        assert_eq!(NdiscRepr::parse(&p, &src, &dst).unwrap(), r);
    }

    #[test]
    fn other_messages_and_bad_options() {
        let (src, dst) = (addr(1), addr(2));
        // An echo request.
        let mut echo = [128, 0, 0, 0, 0, 1, 0, 1];
        Icmpv6Packet::new_unchecked(&mut echo[..]).fill_checksum(&src, &dst);
        let p = Icmpv6Packet::new_checked(&echo[..]).unwrap();
        assert_eq!(NdiscRepr::parse(&p, &src, &dst), Err(Error::Unsupported));
        // A solicitation with a zero-length option.
        let mut ns = [0u8; 32];
        ns[0] = 135;
        ns[24] = 1;
        Icmpv6Packet::new_unchecked(&mut ns[..]).fill_checksum(&src, &dst);
        let p = Icmpv6Packet::new_checked(&ns[..]).unwrap();
        assert_eq!(NdiscRepr::parse(&p, &src, &dst), Err(Error::Malformed));
    }
}

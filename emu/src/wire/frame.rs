//! Whole Ethernet frames as a RoCEv2 port sends and receives them:
//! RoCEv2 packets (Ethernet, IPv4 or IPv6, UDP to port 4791, the transport
//! packet, the ICRC), ARP, and IPv6 neighbour discovery.
//!
//! [`classify`] is the receive side: it parses a frame, checks every
//! checksum and the ICRC, and says what it is. [`FrameRepr::emit`] and
//! the `*_frame` builders are the send side.

use super::arp::{ArpPacket, ArpRepr};
use super::ethernet::{ethertype, EthernetAddress, EthernetFrame, EthernetRepr};
use super::icmpv6::{Icmpv6Packet, NdiscRepr, NDISC_HOP_LIMIT};
use super::icrc::{self, ICRC_LEN};
use super::ip::IpAddress;
use super::ipv4::{protocol, Ipv4Packet, Ipv4Repr};
use super::ipv6::{Ipv6Address, Ipv6Packet, Ipv6Repr};
use super::roce::{RocePacket, RoceRepr};
use super::udp::{UdpChecksum, UdpPacket, UdpRepr};
use super::{bth, ipv4, ipv6, udp, Error, Result, ROCE_V2_PORT};

/// An IPv4 or IPv6 header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IpRepr {
    /// IPv4.
    V4(Ipv4Repr),
    /// IPv6.
    V6(Ipv6Repr),
}

impl IpRepr {
    /// Source address.
    pub fn src_addr(&self) -> IpAddress {
        match self {
            IpRepr::V4(r) => IpAddress::V4(r.src_addr),
            IpRepr::V6(r) => IpAddress::V6(r.src_addr),
        }
    }

    /// Destination address.
    pub fn dst_addr(&self) -> IpAddress {
        match self {
            IpRepr::V4(r) => IpAddress::V4(r.dst_addr),
            IpRepr::V6(r) => IpAddress::V6(r.dst_addr),
        }
    }

    /// Header length.
    pub fn header_len(&self) -> usize {
        match self {
            IpRepr::V4(_) => ipv4::HEADER_LEN,
            IpRepr::V6(_) => ipv6::HEADER_LEN,
        }
    }

    /// The ethertype of a frame carrying this header.
    pub fn ethertype(&self) -> u16 {
        match self {
            IpRepr::V4(_) => ethertype::IPV4,
            IpRepr::V6(_) => ethertype::IPV6,
        }
    }

    fn set_payload_len(&mut self, n: usize) {
        match self {
            IpRepr::V4(r) => r.payload_len = n,
            IpRepr::V6(r) => r.payload_len = n,
        }
    }

    fn emit(&self, b: &mut [u8]) {
        match self {
            IpRepr::V4(r) => r.emit(&mut Ipv4Packet::new_unchecked(b)),
            IpRepr::V6(r) => r.emit(&mut Ipv6Packet::new_unchecked(b)),
        }
    }
}

/// A whole RoCEv2 frame: every header from Ethernet to the transport
/// packet. The payload lives in the frame buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FrameRepr {
    /// Ethernet header.
    pub eth: EthernetRepr,
    /// IP header. Its payload length follows from `roce` on emit.
    pub ip: IpRepr,
    /// UDP header. Its payload length follows from `roce` on emit.
    pub udp: UdpRepr,
    /// The transport packet.
    pub roce: RoceRepr,
}

impl FrameRepr {
    /// Offset of the IP header.
    pub fn ip_offset(&self) -> usize {
        self.eth.buffer_len()
    }

    /// Offset of the transport packet (the BTH).
    pub fn roce_offset(&self) -> usize {
        self.ip_offset() + self.ip.header_len() + udp::HEADER_LEN
    }

    /// Offset of the payload.
    pub fn payload_offset(&self) -> usize {
        self.roce_offset() + self.roce.payload_offset()
    }

    /// Frame length.
    pub fn buffer_len(&self) -> usize {
        self.roce_offset() + self.roce.buffer_len()
    }

    /// Writes the frame into `buf` (exactly `buffer_len()` bytes): every
    /// header, with the IP and UDP lengths taken from the transport packet;
    /// then `fill` writes the payload (`roce.payload_len` bytes); then the
    /// ICRC and (if computed) the UDP checksum are filled in.
    pub fn emit(&self, buf: &mut [u8], fill: impl FnOnce(&mut [u8])) {
        let roce_len = self.roce.buffer_len();
        let mut ip = self.ip;
        ip.set_payload_len(udp::HEADER_LEN + roce_len);
        let udp = UdpRepr {
            payload_len: roce_len,
            ..self.udp
        };
        self.eth
            .emit(&mut EthernetFrame::new_unchecked(&mut buf[..]));
        let ip_at = self.ip_offset();
        let udp_at = ip_at + ip.header_len();
        let roce_at = udp_at + udp::HEADER_LEN;
        ip.emit(&mut buf[ip_at..]);
        let mut rp = RocePacket::new_unchecked(&mut buf[roce_at..roce_at + roce_len]);
        self.roce.emit(&mut rp);
        fill(rp.payload_mut());
        let (src, dst) = (ip.src_addr(), ip.dst_addr());
        let header_only = UdpRepr {
            checksum: UdpChecksum::None,
            ..udp
        };
        let udp_bytes = udp_at..roce_at + roce_len;
        header_only.emit(
            &mut UdpPacket::new_unchecked(&mut buf[udp_bytes.clone()]),
            &src,
            &dst,
        );
        // Every header is in place: the ICRC covers them all, and masks the
        // UDP checksum, which then covers the ICRC.
        let _ = icrc::fill(&mut buf[ip_at..]);
        if udp.checksum == UdpChecksum::Computed {
            UdpPacket::new_unchecked(&mut buf[udp_bytes]).fill_checksum(&src, &dst);
        }
    }
}

/// What a received frame is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Received<'a> {
    /// A RoCEv2 packet with a valid ICRC, and its payload.
    Roce(FrameRepr, &'a [u8]),
    /// An ARP request or reply.
    Arp(EthernetRepr, ArpRepr),
    /// An IPv6 neighbour solicitation or advertisement from `src`.
    Ndisc(EthernetRepr, Ipv6Address, NdiscRepr),
}

/// Parses a received frame. Checks, in order: the Ethernet header; for IP,
/// the version, lengths and (IPv4) header checksum; UDP to port 4791 with
/// a valid checksum (or none); the ICRC; then the transport headers.
/// Errors say why a frame is dropped: [`Error::Unsupported`] for frames
/// that are not RoCEv2, ARP or neighbour discovery (other ethertypes,
/// protocols, ports, ICMPv6 messages, unknown opcodes).
pub fn classify(frame: &[u8]) -> Result<Received<'_>> {
    let f = EthernetFrame::new_checked(frame)?;
    let eth = EthernetRepr::parse(&f)?;
    let ip_at = f.header_len();
    let l3 = &frame[ip_at..];
    let (ip, ip_bytes, l4) = match eth.ethertype {
        ethertype::ARP => {
            let arp = ArpRepr::parse(&ArpPacket::new_checked(l3)?)?;
            return Ok(Received::Arp(eth, arp));
        }
        ethertype::IPV4 => {
            let p = Ipv4Packet::new_checked(l3)?;
            let r = Ipv4Repr::parse(&p)?;
            let (hl, tl) = (p.header_len(), p.total_len() as usize);
            (IpRepr::V4(r), &l3[..tl], &l3[hl..tl])
        }
        ethertype::IPV6 => {
            let p = Ipv6Packet::new_checked(l3)?;
            let r = Ipv6Repr::parse(&p)?;
            let end = ipv6::HEADER_LEN + p.payload_len() as usize;
            if r.next_header == protocol::ICMPV6 {
                if r.hop_limit != NDISC_HOP_LIMIT {
                    return Err(Error::Malformed);
                }
                let nd = NdiscRepr::parse(
                    &Icmpv6Packet::new_checked(&l3[ipv6::HEADER_LEN..end])?,
                    &r.src_addr,
                    &r.dst_addr,
                )?;
                return Ok(Received::Ndisc(eth, r.src_addr, nd));
            }
            (IpRepr::V6(r), &l3[..end], &l3[ipv6::HEADER_LEN..end])
        }
        _ => return Err(Error::Unsupported),
    };
    let next = match ip {
        IpRepr::V4(r) => r.protocol,
        IpRepr::V6(r) => r.next_header,
    };
    if next != protocol::UDP {
        return Err(Error::Unsupported);
    }
    let u = UdpPacket::new_checked(l4)?;
    // Only the UDP length delimits the datagram from here on.
    if u.len() as usize != l4.len() {
        return Err(Error::Malformed);
    }
    let udp = UdpRepr::parse(&u, &ip.src_addr(), &ip.dst_addr())?;
    if udp.dst_port != ROCE_V2_PORT {
        return Err(Error::Unsupported);
    }
    if u.payload().len() < bth::HEADER_LEN + ICRC_LEN {
        return Err(Error::Truncated);
    }
    if !icrc::verify(ip_bytes)? {
        return Err(Error::Icrc);
    }
    let roce_bytes = &l4[udp::HEADER_LEN..];
    let rp = RocePacket::new_checked(roce_bytes)?;
    let roce = RoceRepr::parse(&rp)?;
    let pad = rp.bth().pad_count() as usize;
    let payload = &roce_bytes[rp.payload_offset()..roce_bytes.len() - ICRC_LEN - pad];
    Ok(Received::Roce(FrameRepr { eth, ip, udp, roce }, payload))
}

/// An ARP frame from `src_mac` to `dst_mac`.
pub fn arp_frame(src_mac: EthernetAddress, dst_mac: EthernetAddress, arp: &ArpRepr) -> Vec<u8> {
    let eth = EthernetRepr {
        src_addr: src_mac,
        dst_addr: dst_mac,
        vlan: None,
        ethertype: ethertype::ARP,
    };
    let mut buf = vec![0u8; eth.buffer_len() + arp.buffer_len()];
    let mut f = EthernetFrame::new_unchecked(&mut buf[..]);
    eth.emit(&mut f);
    arp.emit(&mut ArpPacket::new_unchecked(f.payload_mut()));
    buf
}

/// A neighbour discovery frame from `src_mac`/`src` to `dst_mac`/`dst`.
pub fn ndisc_frame(
    src_mac: EthernetAddress,
    dst_mac: EthernetAddress,
    src: Ipv6Address,
    dst: Ipv6Address,
    nd: &NdiscRepr,
) -> Vec<u8> {
    let eth = EthernetRepr {
        src_addr: src_mac,
        dst_addr: dst_mac,
        vlan: None,
        ethertype: ethertype::IPV6,
    };
    let ip = Ipv6Repr {
        src_addr: src,
        dst_addr: dst,
        traffic_class: 0,
        flow_label: 0,
        next_header: protocol::ICMPV6,
        hop_limit: NDISC_HOP_LIMIT,
        payload_len: nd.buffer_len(),
    };
    let mut buf = vec![0u8; eth.buffer_len() + ip.buffer_len() + nd.buffer_len()];
    let mut f = EthernetFrame::new_unchecked(&mut buf[..]);
    eth.emit(&mut f);
    let mut p = Ipv6Packet::new_unchecked(f.payload_mut());
    ip.emit(&mut p);
    nd.emit(
        &mut Icmpv6Packet::new_unchecked(p.payload_mut()),
        &src,
        &dst,
    );
    buf
}

/// The Ethernet address IPv6 multicast address `a` maps to (RFC 2464:
/// `33:33` and its low 32 bits).
pub fn ipv6_multicast_mac(a: &Ipv6Address) -> EthernetAddress {
    let b = a.0;
    EthernetAddress([0x33, 0x33, b[12], b[13], b[14], b[15]])
}

/// A one-line account of `frame`, for traces and logs: a RoCEv2 packet's
/// addresses, opcode, QP, PSN and headers (`192.0.2.1 > 192.0.2.2
/// RC_RDMA_WRITE_ONLY qp 3 psn 0 ackreq | RETH va 0x1000 rkey 0x200 len
/// 12 | 12 B`), ARP and neighbour discovery by kind, or why
/// [`classify`] drops it.
pub fn describe(frame: &[u8]) -> String {
    match classify(frame) {
        Ok(Received::Roce(f, payload)) => {
            let b = &f.roce.bth;
            let name = super::opcode::info(b.opcode).map_or("?", |i| i.name);
            let mut s = format!(
                "{} > {} {name} qp {} psn {}{}{}",
                f.ip.src_addr(),
                f.ip.dst_addr(),
                b.dest_qp,
                b.psn,
                if b.ack_req { " ackreq" } else { "" },
                if b.solicited { " se" } else { "" },
            );
            if let Some(r) = f.roce.reth {
                s += &format!(
                    " | RETH va {:#x} rkey {:#x} len {}",
                    r.va, r.rkey, r.dma_len
                );
            }
            if let Some(d) = f.roce.deth {
                s += &format!(" | DETH qkey {:#x} src qp {}", d.qkey, d.src_qp);
            }
            if let Some(a) = f.roce.aeth {
                s += &format!(" | AETH {:?} msn {}", a.kind, a.msn);
            }
            if let Some(a) = f.roce.atomic_eth {
                s += &format!(" | AtomicETH va {:#x} rkey {:#x}", a.va, a.rkey);
            }
            if let Some(a) = f.roce.atomic_ack_eth {
                s += &format!(" | AtomicAckETH orig {:#x}", a.orig);
            }
            if let Some(i) = f.roce.immdt {
                s += &format!(" | ImmDt {:#010x}", u32::from_be_bytes(i.imm));
            }
            if let Some(i) = f.roce.ieth {
                s += &format!(" | IETH rkey {:#x}", i.rkey);
            }
            s + &format!(" | {} B", payload.len())
        }
        Ok(Received::Arp(_, a)) => format!(
            "ARP {:?} from {} for {}",
            a.operation, a.sender_ip, a.target_ip
        ),
        Ok(Received::Ndisc(_, src, nd)) => format!("ND from {src}: {nd:?}"),
        Err(e) => format!("{} B, not taken: {e}", frame.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::aeth::{AckKind, AethRepr, CREDITS_INVALID};
    use crate::wire::arp::ArpOperation;
    use crate::wire::bth::BthRepr;
    use crate::wire::ipv4::Ipv4Address;
    use crate::wire::opcode;
    use crate::wire::udp::UdpChecksum;

    fn ack_frame() -> FrameRepr {
        FrameRepr {
            eth: EthernetRepr {
                src_addr: EthernetAddress([0x52, 0x54, 0, 0, 0, 0x14]),
                dst_addr: EthernetAddress([0x52, 0x54, 0, 0, 0, 0x0a]),
                vlan: None,
                ethertype: ethertype::IPV4,
            },
            ip: IpRepr::V4(Ipv4Repr {
                src_addr: Ipv4Address([192, 0, 2, 20]),
                dst_addr: Ipv4Address([192, 0, 2, 10]),
                tos: 0,
                ident: 7,
                dont_frag: true,
                ttl: 64,
                protocol: protocol::UDP,
                payload_len: 0,
            }),
            udp: UdpRepr {
                src_port: 49441,
                dst_port: ROCE_V2_PORT,
                payload_len: 0,
                checksum: UdpChecksum::None,
            },
            roce: RoceRepr {
                bth: BthRepr {
                    opcode: opcode::RC_ACKNOWLEDGE,
                    pkey: 0xffff,
                    dest_qp: 0x11,
                    psn: 0xac75d3,
                    ..BthRepr::default()
                },
                aeth: Some(AethRepr {
                    kind: AckKind::Ack {
                        credits: CREDITS_INVALID,
                    },
                    msn: 1,
                }),
                ..RoceRepr::default()
            },
        }
    }

    #[test]
    fn emit_classify_round_trip() {
        let r = ack_frame();
        let mut buf = vec![0u8; r.buffer_len()];
        assert_eq!(buf.len(), 14 + 20 + 8 + 12 + 4 + 4);
        r.emit(&mut buf, |_| {});
        match classify(&buf).unwrap() {
            Received::Roce(back, payload) => {
                assert!(payload.is_empty());
                let mut want = r;
                want.ip.set_payload_len(28);
                want.udp.payload_len = 20;
                assert_eq!(back, want);
            }
            other => panic!("{other:?}"),
        }
        // Ethernet padding after the IP datagram is ignored.
        buf.extend_from_slice(&[0; 6]);
        assert!(matches!(classify(&buf), Ok(Received::Roce(..))));
    }

    #[test]
    fn ipv6_frames_carry_a_udp_checksum() {
        let mut r = ack_frame();
        let a = |last| {
            Ipv6Address([
                0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xfe, 0, 0, last,
            ])
        };
        r.eth.ethertype = ethertype::IPV6;
        r.ip = IpRepr::V6(Ipv6Repr {
            src_addr: a(1),
            dst_addr: a(2),
            traffic_class: 0,
            flow_label: 0,
            next_header: protocol::UDP,
            hop_limit: 64,
            payload_len: 0,
        });
        r.udp.checksum = UdpChecksum::Computed;
        let mut buf = vec![0u8; r.buffer_len()];
        r.emit(&mut buf, |_| {});
        let at = 14 + 40 + 6;
        assert_ne!(&buf[at..at + 2], &[0, 0]);
        match classify(&buf) {
            Ok(Received::Roce(back, _)) => assert_eq!(back.udp.checksum, UdpChecksum::Computed),
            other => panic!("{other:?}"),
        }
        // The checksum covers the ICRC too.
        let n = buf.len();
        buf[n - 1] ^= 1;
        assert_eq!(classify(&buf), Err(Error::Checksum));
    }

    #[test]
    fn classify_rejects() {
        let r = ack_frame();
        let mut good = vec![0u8; r.buffer_len()];
        r.emit(&mut good, |_| {});
        // A flipped bit in the AETH: the ICRC catches it.
        let mut bad = good.clone();
        bad[14 + 20 + 8 + 12] ^= 0x10;
        assert_eq!(classify(&bad), Err(Error::Icrc));
        // Another UDP port.
        let mut other = good.clone();
        other[14 + 20 + 3] = 0x35;
        assert_eq!(classify(&other), Err(Error::Unsupported));
        // Truncated inside the IP datagram.
        assert_eq!(classify(&good[..40]), Err(Error::Truncated));
        // Another ethertype.
        let mut lldp = good.clone();
        lldp[12..14].copy_from_slice(&[0x88, 0xcc]);
        assert_eq!(classify(&lldp), Err(Error::Unsupported));
        // A BTH of another version, with a matching ICRC.
        let mut v1 = good.clone();
        v1[14 + 20 + 8 + 1] |= 1;
        icrc::fill(&mut v1[14..]).unwrap();
        assert_eq!(classify(&v1), Err(Error::Version));
    }

    #[test]
    fn arp_and_ndisc_frames() {
        let me = EthernetAddress([2, 0, 0, 0, 0, 1]);
        let arp = ArpRepr {
            operation: ArpOperation::Request,
            sender_mac: me,
            sender_ip: Ipv4Address([192, 0, 2, 1]),
            target_mac: EthernetAddress::default(),
            target_ip: Ipv4Address([192, 0, 2, 2]),
        };
        let f = arp_frame(me, EthernetAddress::BROADCAST, &arp);
        assert_eq!(f.len(), 42);
        assert_eq!(describe(&f), "ARP Request from 192.0.2.1 for 192.0.2.2");
        assert_eq!(describe(&f[..20]), "20 B, not taken: truncated packet");
        assert_eq!(
            classify(&f),
            Ok(Received::Arp(
                EthernetRepr {
                    src_addr: me,
                    dst_addr: EthernetAddress::BROADCAST,
                    vlan: None,
                    ethertype: ethertype::ARP,
                },
                arp
            ))
        );
        let src = Ipv6Address([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xfe, 0, 0, 1]);
        let target = Ipv6Address([0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xfe, 0, 0, 2]);
        let dst = target.solicited_node();
        let nd = NdiscRepr::NeighborSolicit {
            target,
            source_lladdr: Some(me),
        };
        let dmac = ipv6_multicast_mac(&dst);
        assert_eq!(dmac.to_string(), "33:33:ff:00:00:02");
        let f = ndisc_frame(me, dmac, src, dst, &nd);
        match classify(&f).unwrap() {
            Received::Ndisc(eth, from, back) => {
                assert_eq!((eth.dst_addr, from, back), (dmac, src, nd));
            }
            other => panic!("{other:?}"),
        }
    }
}

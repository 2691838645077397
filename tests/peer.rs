//! A scripted peer on a [`Fabric`]'s switch: it sends RoCEv2 packets a
//! test crafts header by header, and takes what the NICs send it, so a
//! test can put a NIC's QP in states no well-behaved peer would (a
//! message cut off halfway, a response that answers nothing).

use rnic_emu::net::{SwitchPort, Wire};
use rnic_emu::wire::bth::BthRepr;
use rnic_emu::wire::ethernet::{ethertype, EthernetAddress, EthernetRepr};
use rnic_emu::wire::frame::{classify, FrameRepr, IpRepr, Received};
use rnic_emu::wire::ipv4::{protocol, Ipv4Address, Ipv4Repr};
use rnic_emu::wire::roce::RoceRepr;
use rnic_emu::wire::udp::{UdpChecksum, UdpRepr};
use rnic_emu::wire::ROCE_V2_PORT;

use crate::fabric::{nic_config, Fabric};
use crate::{AhAttr, QpAttr};

/// The peer's MAC.
pub const PEER_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x77];
/// The peer's IPv4 address.
pub const PEER_IP: [u8; 4] = [192, 0, 2, 0x77];
/// The QP number the peer's packets come from.
pub const PEER_QPN: u32 = 0x77;

/// A scripted peer.
pub struct Peer {
    port: SwitchPort,
}

impl Peer {
    /// A peer on `fabric`'s switch.
    pub fn new(fabric: &Fabric) -> Peer {
        Peer {
            port: fabric.switch.port(),
        }
    }

    /// The peer's GID (IPv4-mapped).
    pub fn gid() -> [u8; 16] {
        let mut g = [0u8; 16];
        g[10] = 0xff;
        g[11] = 0xff;
        g[12..].copy_from_slice(&PEER_IP);
        g
    }

    /// The address vector of a NIC's QP connected to the peer: its MAC is
    /// given, so the NIC needs no ARP answer.
    pub fn av() -> AhAttr {
        AhAttr {
            dgid: Self::gid(),
            dmac: PEER_MAC,
            sgid_index: 0,
            port_num: 1,
            is_global: true,
            ..AhAttr::default()
        }
    }

    /// RTR attributes of a NIC's QP connected to the peer's QP.
    pub fn rtr(mut attr: QpAttr) -> QpAttr {
        attr.ah_attr = Self::av();
        attr.dest_qp_num = PEER_QPN;
        attr
    }

    /// Sends the transport packet `roce` (its BTH's `dest_qp` naming a QP
    /// of NIC number `nic`, from 1) with `payload`, in a whole frame with
    /// a valid ICRC.
    pub fn send(&mut self, nic: u8, roce: RoceRepr, payload: &[u8]) {
        let cfg = nic_config(nic);
        let f = FrameRepr {
            eth: EthernetRepr {
                src_addr: EthernetAddress(PEER_MAC),
                dst_addr: EthernetAddress(cfg.mac),
                vlan: None,
                ethertype: ethertype::IPV4,
            },
            ip: IpRepr::V4(Ipv4Repr {
                src_addr: Ipv4Address(PEER_IP),
                dst_addr: Ipv4Address(cfg.ipv4),
                tos: 0,
                ident: 0,
                dont_frag: true,
                ttl: 64,
                protocol: protocol::UDP,
                payload_len: 0,
            }),
            udp: UdpRepr {
                src_port: 0xc077,
                dst_port: ROCE_V2_PORT,
                payload_len: 0,
                checksum: UdpChecksum::None,
            },
            roce: RoceRepr {
                payload_len: payload.len(),
                ..roce
            },
        };
        let mut buf = vec![0u8; f.buffer_len()];
        f.emit(&mut buf, |p| p.copy_from_slice(payload));
        self.port.send(&mut vec![buf]);
    }

    /// A BTH of opcode `op` to QP `dest_qp` at `psn`.
    pub fn bth(op: u8, dest_qp: u32, psn: u32) -> BthRepr {
        BthRepr {
            opcode: op,
            pkey: 0xffff,
            dest_qp,
            psn,
            ..BthRepr::default()
        }
    }

    /// The transport packets the NICs sent the peer since the last call.
    pub fn received(&mut self) -> Vec<RoceRepr> {
        self.received_with_payload()
            .into_iter()
            .map(|(r, _)| r)
            .collect()
    }

    /// The transport packets the NICs sent the peer since the last call,
    /// each with its payload.
    pub fn received_with_payload(&mut self) -> Vec<(RoceRepr, Vec<u8>)> {
        let mut frames = Vec::new();
        while self.port.recv(&mut frames, 64) > 0 {}
        frames
            .iter()
            .filter_map(|f| match classify(f) {
                Ok(Received::Roce(f, payload)) => Some((f.roce, payload.to_vec())),
                _ => None,
            })
            .collect()
    }

    /// Waits (by the clock: a thread-mode NIC's worker may not run for a
    /// while on a loaded machine) until the NICs have sent the peer `n`
    /// packets, or 10 s have passed, and returns what they sent.
    pub fn expect(&mut self, fabric: &Fabric, n: usize) -> Vec<(RoceRepr, Vec<u8>)> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let mut got = Vec::new();
        while got.len() < n && std::time::Instant::now() < deadline {
            got.extend(self.received_with_payload());
            fabric.idle(std::time::Duration::from_micros(100));
        }
        // Anything more the NICs send for these requests, too.
        for _ in 0..20 {
            fabric.idle(std::time::Duration::from_micros(100));
            std::thread::sleep(std::time::Duration::from_micros(100));
        }
        got.extend(self.received_with_payload());
        got
    }
}

//! Property tests over the wire formats: no input makes a parser panic,
//! and every frame the emitter can build parses back to what it was built
//! from.

use proptest::prelude::*;
use rnic_emu::wire::aeth::{AckKind, AethRepr, NakCode};
use rnic_emu::wire::atomic_ack_eth::AtomicAckEthRepr;
use rnic_emu::wire::atomic_eth::AtomicEthRepr;
use rnic_emu::wire::bth::BthRepr;
use rnic_emu::wire::deth::DethRepr;
use rnic_emu::wire::ethernet::{ethertype, EthernetAddress, EthernetRepr, VlanTag};
use rnic_emu::wire::frame::{classify, FrameRepr, IpRepr, Received};
use rnic_emu::wire::ieth::IethRepr;
use rnic_emu::wire::immdt::ImmDtRepr;
use rnic_emu::wire::ipv4::{protocol, Ipv4Address, Ipv4Repr};
use rnic_emu::wire::ipv6::{Ipv6Address, Ipv6Repr};
use rnic_emu::wire::opcode::{self, headers};
use rnic_emu::wire::reth::RethRepr;
use rnic_emu::wire::roce::{RocePacket, RoceRepr};
use rnic_emu::wire::udp::{UdpChecksum, UdpRepr};
use rnic_emu::wire::ROCE_V2_PORT;

/// Every known opcode.
fn opcodes() -> Vec<u8> {
    (0..=255u8).filter(|&c| opcode::info(c).is_some()).collect()
}

fn ack_kind() -> impl Strategy<Value = AckKind> {
    prop_oneof![
        (0u8..32).prop_map(|credits| AckKind::Ack { credits }),
        (0u8..32).prop_map(|timer| AckKind::RnrNak { timer }),
        prop_oneof![
            Just(NakCode::PsnSeqError),
            Just(NakCode::InvalidRequest),
            Just(NakCode::RemoteAccess),
            Just(NakCode::RemoteOperational),
            Just(NakCode::InvalidRdRequest),
        ]
        .prop_map(AckKind::Nak),
    ]
}

/// A transport packet whose headers are those its opcode calls for.
fn roce() -> impl Strategy<Value = RoceRepr> {
    (
        proptest::sample::select(opcodes()),
        any::<(bool, bool, u16, bool, bool)>(),
        (0u32..1 << 24, 0u32..1 << 24, any::<bool>()),
        any::<(u64, u32, u32, u64, u64)>(),
        (ack_kind(), 0u32..1 << 24, any::<[u8; 4]>(), any::<u32>()),
        0usize..4200,
    )
        .prop_map(
            |(
                code,
                (se, m, pkey, f, b),
                (qp, psn, a),
                (va, key, len, x, y),
                (kind, msn, imm, qkey),
                plen,
            )| {
                let info = opcode::info(code).unwrap();
                let h = info.headers;
                RoceRepr {
                    bth: BthRepr {
                        opcode: code,
                        solicited: se,
                        mig_req: m,
                        pad_count: 0,
                        pkey,
                        fecn: f,
                        becn: b,
                        dest_qp: qp,
                        ack_req: a,
                        psn,
                    },
                    deth: (h & headers::DETH != 0).then_some(DethRepr {
                        qkey,
                        src_qp: qp ^ 1,
                    }),
                    reth: (h & headers::RETH != 0).then_some(RethRepr {
                        va,
                        rkey: key,
                        dma_len: len,
                    }),
                    atomic_eth: (h & headers::ATOMIC_ETH != 0).then_some(AtomicEthRepr {
                        va,
                        rkey: key,
                        swap_add: x,
                        compare: y,
                    }),
                    aeth: (h & headers::AETH != 0).then_some(AethRepr { kind, msn }),
                    atomic_ack_eth: (h & headers::ATOMIC_ACK_ETH != 0)
                        .then_some(AtomicAckEthRepr { orig: x }),
                    immdt: (h & headers::IMMDT != 0).then_some(ImmDtRepr { imm }),
                    ieth: (h & headers::IETH != 0).then_some(IethRepr { rkey: key }),
                    payload_len: if info.payload { plen } else { 0 },
                }
            },
        )
}

fn frame() -> impl Strategy<Value = (FrameRepr, Vec<u8>)> {
    (
        roce(),
        any::<([u8; 6], [u8; 6])>(),
        proptest::option::of((0u8..8, any::<bool>(), 0u16..4096)),
        any::<bool>(),
        any::<([u8; 4], [u8; 4], [u8; 16], [u8; 16])>(),
        any::<(u8, u16, bool, u8, u32)>(),
        any::<(u16, bool)>(),
        any::<u64>(),
    )
        .prop_map(
            |(
                roce,
                (s, d),
                vlan,
                v6,
                (s4, d4, s6, d6),
                (tc, ident, df, hop, fl),
                (sport, csum),
                seed,
            )| {
                let ip = if v6 {
                    IpRepr::V6(Ipv6Repr {
                        src_addr: Ipv6Address(s6),
                        dst_addr: Ipv6Address(d6),
                        traffic_class: tc,
                        flow_label: fl & 0xf_ffff,
                        next_header: protocol::UDP,
                        hop_limit: hop,
                        payload_len: 0,
                    })
                } else {
                    IpRepr::V4(Ipv4Repr {
                        src_addr: Ipv4Address(s4),
                        dst_addr: Ipv4Address(d4),
                        tos: tc,
                        ident,
                        dont_frag: df,
                        ttl: hop,
                        protocol: protocol::UDP,
                        payload_len: 0,
                    })
                };
                let eth = EthernetRepr {
                    src_addr: EthernetAddress(s),
                    dst_addr: EthernetAddress(d),
                    vlan: vlan.map(|(pcp, dei, vid)| VlanTag { pcp, dei, vid }),
                    ethertype: ip.ethertype(),
                };
                let udp = UdpRepr {
                    src_port: sport,
                    dst_port: ROCE_V2_PORT,
                    payload_len: 0,
                    checksum: if csum {
                        UdpChecksum::Computed
                    } else {
                        UdpChecksum::None
                    },
                };
                let payload: Vec<u8> = (0..roce.payload_len)
                    .map(|i| (seed.wrapping_mul(i as u64 + 1) >> 17) as u8)
                    .collect();
                (FrameRepr { eth, ip, udp, roce }, payload)
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn emitted_frames_parse_back((repr, payload) in frame()) {
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut buf, |p| p.copy_from_slice(&payload));
        match classify(&buf) {
            Ok(Received::Roce(back, got)) => {
                prop_assert_eq!(got, &payload[..]);
                prop_assert_eq!(back.eth, repr.eth);
                prop_assert_eq!(back.udp.checksum, repr.udp.checksum);
                prop_assert_eq!(back.udp.src_port, repr.udp.src_port);
                prop_assert_eq!(back.ip.src_addr(), repr.ip.src_addr());
                prop_assert_eq!(back.ip.dst_addr(), repr.ip.dst_addr());
                let mut want = repr.roce;
                want.bth.pad_count = want.pad_count();
                prop_assert_eq!(back.roce, want);
            }
            other => prop_assert!(false, "{:?}", other),
        }
    }

    #[test]
    fn any_bytes_are_classified_without_panic(bytes in proptest::collection::vec(any::<u8>(), 0..2000)) {
        let _ = classify(&bytes);
        let _ = RocePacket::new_checked(&bytes[..]).and_then(|p| RoceRepr::parse(&p));
    }

    #[test]
    fn mutated_frames_are_never_misread(
        (repr, payload) in frame(),
        cut in any::<prop::sample::Index>(),
        flip in any::<prop::sample::Index>(),
    ) {
        let mut buf = vec![0u8; repr.buffer_len()];
        repr.emit(&mut buf, |p| p.copy_from_slice(&payload));
        // Any truncation is an error.
        let at = cut.index(buf.len());
        prop_assert!(classify(&buf[..at]).is_err());
        // A flipped bit anywhere past the Ethernet header is caught (by a
        // checksum, the ICRC or a length), except in the fields the ICRC
        // masks and no checksum covers: the BTH's fifth byte, and an IPv6
        // header's version nibble's neighbours (traffic class, flow label)
        // and hop limit. (A flipped IPv6 version is caught.)
        let eth = repr.eth.buffer_len();
        let bit = flip.index((buf.len() - eth) * 8);
        let byte = eth + bit / 8;
        let bth = repr.roce_offset();
        // (No UDP checksum covers the IPv6 header itself.)
        let v6_masked = matches!(repr.ip, IpRepr::V6(_)) && (byte < eth + 4 || byte == eth + 7);
        if byte != bth + 4 && !v6_masked {
            let mut bad = buf.clone();
            bad[byte] ^= 1 << (bit % 8);
            prop_assert!(
                classify(&bad).is_err(),
                "flip of bit {} of byte {} went unnoticed", bit % 8, byte
            );
        }
    }
}

#[test]
fn non_udp_and_other_ports_are_unsupported() {
    let f = {
        let mut f = vec![0u8; 60];
        f[12..14].copy_from_slice(&ethertype::IPV4.to_be_bytes());
        f
    };
    assert!(classify(&f).is_err());
}

//! Golden frames captured from Linux rxe (`vectors/`, see its README):
//! every RoCEv2 frame must parse, pass its ICRC, re-emit byte for byte,
//! and show the field conventions the model follows (UDP source port from
//! the QP numbers, UDP checksum 0, DF, P_Key 0xffff, ACK requests on the
//! last packet of each message). Every other frame (the out-of-band TCP
//! exchange) is classified as unsupported, never as an error.

use std::collections::BTreeMap;
use std::path::PathBuf;

use rnic_emu::pcap;
use rnic_emu::wire::aeth::{AckKind, NakCode};
use rnic_emu::wire::frame::{classify, FrameRepr, IpRepr, Received};
use rnic_emu::wire::opcode::{self, Op, Transport};
use rnic_emu::wire::udp::{roce_src_port, UdpChecksum};
use rnic_emu::wire::Error;

/// Each capture with its count of RoCEv2 frames per BTH opcode, as the
/// capture's README (and its independent checker) gives them.
const CAPTURES: &[(&str, &[(u8, usize)])] = &[
    ("rc_pingpong", &[(0x04, 10), (0x11, 10)]),
    (
        "rc_pingpong_m1024",
        &[(0x00, 10), (0x01, 20), (0x02, 10), (0x11, 10)],
    ),
    ("rc_pingpong_ipv6", &[(0x00, 10), (0x02, 10), (0x11, 10)]),
    ("write_lat", &[(0x0a, 20), (0x11, 20)]),
    ("write_bw", &[(0x06, 5), (0x07, 10), (0x08, 5), (0x11, 5)]),
    ("read_lat", &[(0x0c, 10), (0x10, 10)]),
    ("read_bw", &[(0x0c, 5), (0x0d, 5), (0x0e, 10), (0x0f, 5)]),
    ("send_lat", &[(0x04, 20), (0x11, 20)]),
    ("atomic_fa", &[(0x12, 10), (0x14, 10)]),
    ("atomic_cs", &[(0x12, 10), (0x13, 10)]),
    (
        "write_imm",
        &[
            (0x00, 1),
            (0x01, 1),
            (0x03, 1),
            (0x04, 1),
            (0x05, 1),
            (0x06, 1),
            (0x07, 1),
            (0x09, 1),
            (0x0a, 1),
            (0x0b, 2),
            (0x11, 8),
            (0x17, 1),
        ],
    ),
    ("ud_pingpong", &[(0x64, 10)]),
    ("uc_pingpong", &[(0x20, 10), (0x21, 20), (0x22, 10)]),
    ("uc_write_bw", &[(0x26, 5), (0x27, 10), (0x28, 5)]),
    ("rnr_nak", &[(0x04, 5), (0x11, 5)]),
    (
        "fault_write_bw_nak_seq",
        &[(0x06, 9), (0x07, 19), (0x08, 10), (0x11, 6)],
    ),
    ("fault_write_bw_nak_seq.dropped", &[(0x07, 1)]),
];

fn load(name: &str) -> Vec<pcap::Record> {
    let path: PathBuf = [env!("CARGO_MANIFEST_DIR"), "tests", "vectors", name]
        .iter()
        .collect::<PathBuf>()
        .with_extension("pcap");
    let path = if name.ends_with(".dropped") {
        path.with_file_name(format!("{name}.pcap"))
    } else {
        path
    };
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    pcap::read(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The RoCEv2 frames of a capture, parsed, each checked to re-emit byte
/// for byte.
fn roce_frames(name: &str) -> Vec<(FrameRepr, Vec<u8>)> {
    let mut out = Vec::new();
    for (i, rec) in load(name).iter().enumerate() {
        match classify(&rec.frame) {
            Ok(Received::Roce(repr, payload)) => {
                assert!(repr.roce.is_consistent(), "{name} #{i}");
                let mut again = vec![0u8; repr.buffer_len()];
                repr.emit(&mut again, |p| p.copy_from_slice(payload));
                assert_eq!(
                    again,
                    rec.frame[..repr.buffer_len()],
                    "{name} frame #{i} does not re-emit byte for byte"
                );
                out.push((repr, payload.to_vec()));
            }
            Err(Error::Unsupported) => {}
            other => panic!("{name} frame #{i}: {other:?}"),
        }
    }
    out
}

#[test]
fn every_frame_parses_verifies_and_reemits() {
    let mut total = 0;
    for (name, want) in CAPTURES {
        let frames = roce_frames(name);
        let mut got = BTreeMap::new();
        for (r, _) in &frames {
            *got.entry(r.roce.bth.opcode).or_insert(0usize) += 1;
        }
        let want: BTreeMap<u8, usize> = want.iter().copied().collect();
        assert_eq!(got, want, "{name}: frames per opcode");
        total += frames.len();
    }
    assert_eq!(total, 435, "RoCEv2 frames in all captures");
}

#[test]
fn rxe_field_conventions() {
    for (name, _) in CAPTURES {
        for (r, payload) in roce_frames(name) {
            let bth = r.roce.bth;
            let info = opcode::info(bth.opcode).expect("known opcode");
            assert_eq!(bth.pkey, 0xffff, "{name}");
            assert_eq!(r.udp.checksum, UdpChecksum::None, "{name}");
            assert!(!bth.fecn && !bth.becn && !bth.mig_req, "{name}");
            match r.ip {
                IpRepr::V4(ip) => assert!(ip.dont_frag && ip.ttl == 64, "{name}"),
                IpRepr::V6(ip) => assert_eq!((ip.hop_limit, ip.flow_label), (64, 0), "{name}"),
            }
            // Each capture's two QPs have the same number, so the source
            // port of either direction hashes (qpn, qpn). UD takes its port
            // from its own QP number alone.
            if info.transport != Transport::Ud {
                assert_eq!(
                    r.udp.src_port,
                    roce_src_port(0, bth.dest_qp, bth.dest_qp),
                    "{name}"
                );
            }
            // RC requests ask for an ACK on the last packet of a message.
            let request = !matches!(info.op, Op::Ack | Op::AtomicAck | Op::ReadResponse);
            if info.transport == Transport::Rc && request {
                assert_eq!(bth.ack_req, info.pos.ends(), "{name} {}", info.name);
            }
            assert_eq!(r.roce.payload_len, payload.len());
            assert_eq!(
                bth.pad_count as usize,
                (4 - payload.len() % 4) % 4,
                "{name}"
            );
        }
    }
}

#[test]
fn rnr_naks_and_retries() {
    let frames = roce_frames("rnr_nak");
    let sends: Vec<_> = frames
        .iter()
        .filter(|(r, _)| r.roce.bth.opcode == opcode::RC_SEND_ONLY)
        .collect();
    // The same SEND retried with the same PSN.
    assert!(sends
        .windows(2)
        .all(|w| w[0].0.roce.bth.psn == w[1].0.roce.bth.psn));
    let kinds: Vec<AckKind> = frames
        .iter()
        .filter_map(|(r, _)| r.roce.aeth.map(|a| a.kind))
        .collect();
    let rnr = AckKind::RnrNak { timer: 26 };
    assert_eq!(kinds[..4], [rnr; 4]);
    assert!(matches!(kinds[4], AckKind::Ack { .. }));
}

#[test]
fn sequence_nak_names_the_expected_psn() {
    let dropped = roce_frames("fault_write_bw_nak_seq.dropped");
    let lost_psn = dropped[0].0.roce.bth.psn;
    let naks: Vec<_> = roce_frames("fault_write_bw_nak_seq")
        .into_iter()
        .filter(|(r, _)| {
            r.roce
                .aeth
                .is_some_and(|a| a.kind == AckKind::Nak(NakCode::PsnSeqError))
        })
        .collect();
    assert_eq!(naks.len(), 1);
    assert_eq!(naks[0].0.roce.bth.psn, lost_psn);
}

#[test]
fn immediate_data_and_payload_bytes() {
    // rdma_imm: op1 is a 64-byte WRITE ONLY WITH IMMEDIATE whose byte i is
    // (1 * 16 + i * 7) & 0xff; op8 a SEND ONLY WITH INVALIDATE of 64 bytes.
    let frames = roce_frames("write_imm");
    let (first, payload) = frames
        .iter()
        .find(|(r, _)| r.roce.bth.opcode == opcode::RC_RDMA_WRITE_ONLY_WITH_IMMEDIATE)
        .expect("WRITE ONLY WITH IMMEDIATE");
    assert!(first.roce.immdt.is_some());
    assert_eq!(first.roce.reth.unwrap().dma_len, 64);
    let want: Vec<u8> = (0..64).map(|i| ((16 + i * 7) & 0xff) as u8).collect();
    assert_eq!(payload, &want);
    let (inv, _) = frames
        .iter()
        .find(|(r, _)| r.roce.bth.opcode == opcode::RC_SEND_ONLY_WITH_INVALIDATE)
        .expect("SEND WITH INVALIDATE");
    assert_eq!(inv.roce.ieth.unwrap().rkey, 0x0800_01fa);
    // The 58-byte SEND ONLY with no payload.
    assert!(frames
        .iter()
        .any(|(r, p)| r.roce.bth.opcode == opcode::RC_SEND_ONLY
            && p.is_empty()
            && r.buffer_len() == 58));
}

#[test]
fn ud_datagrams() {
    for (r, payload) in roce_frames("ud_pingpong") {
        let deth = r.roce.deth.expect("DETH");
        assert_eq!(deth.qkey, 0x1111_1111);
        assert_eq!(deth.src_qp, 0x1f);
        assert_eq!(payload.len(), 1024);
    }
}

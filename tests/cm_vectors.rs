//! The Linux kernel's communication manager on the wire, as golden
//! inputs of `rnic-cm`: the CM MADs of `tests/vectors/cm/` (two QEMU
//! guests running `rdma_rxe` with `rping`, `ucmatose`, `udaddy`,
//! `rdma_server`/`rdma_client`, over IPv4 and IPv6, with faults; see its
//! README.txt) each parse, re-emit byte for byte, and say what the
//! captures say they are; and a kernel's REQ is one `Manager` accepts.

use std::path::Path;

use rnic_cm::cma::{self, CmaHdr};
use rnic_cm::mad::{attr, MadHdr};
use rnic_cm::manager::{Event, Manager};
use rnic_cm::msg::Message;
use rnic_cm::rej::reason;
use rnic_cm::req::transport;
use rnic_cm::sidr::status;
use rnic_emu::pcap;
use rnic_emu::wire::frame::{classify, Received};
use rnic_emu::wire::opcode;

const DIR: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/vectors/cm");
const A4: [u8; 4] = [192, 0, 2, 10];
const B4: [u8; 4] = [192, 0, 2, 20];

/// A CM MAD of a capture: which way it went, its header and message.
struct Mad {
    to_b: bool,
    hdr: MadHdr,
    msg: Message,
    raw: Vec<u8>,
}

/// The CM MADs of `file` (RoCEv2 UD SENDs to QP1), checking each frame's
/// GSI facts on the way.
fn mads(file: &str) -> Vec<Mad> {
    let bytes = std::fs::read(Path::new(DIR).join(file)).unwrap();
    let mut out = Vec::new();
    for r in pcap::read(&bytes).unwrap() {
        let Ok(Received::Roce(f, payload)) = classify(&r.frame) else {
            continue;
        };
        if f.roce.bth.dest_qp != 1 {
            continue;
        }
        assert_eq!(f.roce.bth.opcode, opcode::UD_SEND_ONLY, "{file}");
        let deth = f.roce.deth.expect("a DETH");
        assert_eq!(
            (deth.qkey, deth.src_qp),
            (rnic_verbs::GSI_QKEY, 1),
            "{file}"
        );
        assert_eq!(payload.len(), rnic_cm::MAD_LEN, "{file}");
        let (hdr, msg) = Message::parse(payload).unwrap_or_else(|e| panic!("{file}: {e}"));
        // Guest B's MAC ends in 0x14.
        let to_b = f.eth.dst_addr.0[5] == 0x14;
        out.push(Mad {
            to_b,
            hdr,
            msg,
            raw: payload.to_vec(),
        });
    }
    out
}

fn names(m: &[Mad]) -> Vec<(bool, u16)> {
    m.iter().map(|m| (m.to_b, m.hdr.attr_id)).collect()
}

#[test]
fn every_cm_mad_parses_and_emits_the_same_bytes() {
    let mut n = 0;
    for e in std::fs::read_dir(DIR).unwrap() {
        let name = e.unwrap().file_name().into_string().unwrap();
        if !name.ends_with(".pcap") {
            continue;
        }
        for m in mads(&name) {
            assert!(m.hdr.is_cm() && m.hdr.status == 0 && m.hdr.attr_mod == 0);
            assert_eq!(m.msg.emit(m.hdr.tid)[..], m.raw[..], "{name}: {:?}", m.msg);
            n += 1;
        }
    }
    // The README counts 68 CM frames in the per-test captures, besides
    // those the relay dropped (in *.dropped.pcap too).
    assert!(n >= 68, "{n} CM MADs");
}

#[test]
fn rping_connects_and_disconnects_as_the_capture_says() {
    let m = mads("rping.pcap");
    assert_eq!(
        names(&m),
        [
            (true, attr::REQ),
            (false, attr::REP),
            (true, attr::RTU),
            (true, attr::DREQ),
            (false, attr::DREP)
        ]
    );
    let Message::Req(req) = &m[0].msg else {
        panic!()
    };
    let Message::Rep(rep) = &m[1].msg else {
        panic!()
    };
    let Message::Rtu(rtu) = &m[2].msg else {
        panic!()
    };
    let Message::Dreq(dreq) = &m[3].msg else {
        panic!()
    };
    let Message::Drep(drep) = &m[4].msg else {
        panic!()
    };
    // The README's decode.
    assert_eq!(req.local_comm_id, 0xe6e3_abcd);
    assert_eq!(req.service_id, cma::service_id(cma::port_space::TCP, 7174));
    assert_eq!(
        (req.local_qpn, req.starting_psn, req.path_mtu),
        (0x11, 0x72_a381, 5)
    );
    assert_eq!((req.transport, req.pkey), (transport::RC, 0xffff));
    assert_eq!(req.local_ca_guid, 0x5054_00ff_fe00_000a);
    let hdr = CmaHdr::parse(&req.private_data).unwrap();
    assert_eq!(hdr, CmaHdr::v4(A4, 39380, B4));
    // On RoCE the path's GIDs are the IPv4-mapped addresses.
    let mapped = |ip: [u8; 4]| {
        let mut g = [0u8; 16];
        g[10..12].fill(0xff);
        g[12..].copy_from_slice(&ip);
        g
    };
    assert_eq!(
        (req.primary.local_gid, req.primary.remote_gid),
        (mapped(A4), mapped(B4))
    );
    assert_eq!(
        (rep.remote_comm_id, rep.local_comm_id),
        (req.local_comm_id, 0xe47a_c7b2)
    );
    assert_eq!((rep.local_qpn, rep.starting_psn), (0x11, 0xa7_cb4e));
    assert_eq!(
        (rtu.local_comm_id, rtu.remote_comm_id),
        (req.local_comm_id, rep.local_comm_id)
    );
    assert_eq!(
        (dreq.local_comm_id, dreq.remote_comm_id),
        (req.local_comm_id, rep.local_comm_id)
    );
    assert_eq!(dreq.remote_qpn, rep.local_qpn);
    assert_eq!(
        (drep.local_comm_id, drep.remote_comm_id),
        (rep.local_comm_id, req.local_comm_id)
    );
    // One transaction: REP, RTU and the active side's DREQ and its DREP
    // carry the REQ's TID.
    assert!(m.iter().all(|x| x.hdr.tid == m[0].hdr.tid));
}

#[test]
fn rejects_and_service_id_resolution() {
    let m = mads("rping_rej_no_listener.pcap");
    assert_eq!(names(&m), [(true, attr::REQ), (false, attr::REJ)]);
    let (Message::Req(req), Message::Rej(rej)) = (&m[0].msg, &m[1].msg) else {
        panic!()
    };
    assert_eq!(
        (rej.reason, rej.remote_comm_id),
        (reason::INVALID_SERVICE_ID, req.local_comm_id)
    );
    let m = mads("udaddy.pcap");
    assert_eq!(names(&m), [(true, attr::SIDR_REQ), (false, attr::SIDR_REP)]);
    let (Message::SidrReq(q), Message::SidrRep(p)) = (&m[0].msg, &m[1].msg) else {
        panic!()
    };
    assert_eq!(
        cma::split_service_id(q.service_id),
        Some((cma::port_space::UDP, 7174))
    );
    assert_eq!(CmaHdr::parse(&q.private_data).unwrap().dst_addr[12..], B4);
    assert_eq!(
        (p.request_id, p.status, p.service_id),
        (q.request_id, status::SUCCESS, q.service_id)
    );
    assert_ne!(p.qpn, 0);
    let m = mads("udaddy_no_listener.pcap");
    let Message::SidrRep(p) = &m[1].msg else {
        panic!()
    };
    assert_eq!(p.status, status::UNSUPPORTED);
    // Over IPv6 the header says so.
    let m = mads("rping_ipv6.pcap");
    let Message::Req(req) = &m[0].msg else {
        panic!()
    };
    let hdr = CmaHdr::parse(&req.private_data).unwrap();
    assert_eq!(hdr.ip_version, 6);
    assert_eq!(&hdr.dst_addr[..2], &[0xfe, 0x80]);
    assert_eq!(hdr.dst_addr, req.primary.remote_gid);
}

#[test]
fn the_kernels_duplicates_and_retries_are_what_the_manager_expects() {
    // A REQ seen twice: B acknowledges it with an MRA for the REQ.
    let m = mads("fault_dup_req_mra.pcap");
    let mra = m.iter().find_map(|x| match &x.msg {
        Message::Mra(r) => Some(r),
        _ => None,
    });
    assert_eq!(mra.expect("an MRA").message, rnic_cm::mra::message::REQ);
    // An RTU lost: B sends its REP again (the same bytes), A its RTU.
    let m = mads("fault_rtu_lost.pcap");
    let reps: Vec<_> = m.iter().filter(|x| x.hdr.attr_id == attr::REP).collect();
    assert!(reps.len() >= 2 && reps[0].raw == reps[1].raw);
    // A DREP lost: the DREQ comes again and is answered again.
    let m = mads("fault_drep_lost.pcap");
    let dreqs = m.iter().filter(|x| x.hdr.attr_id == attr::DREQ).count();
    assert!(dreqs >= 2, "{dreqs} DREQs");
}

#[test]
fn a_manager_accepts_the_kernels_req_and_answers_what_the_kernel_reads() {
    let m = mads("rping.pcap");
    let mut b = Manager::new(0x5054_00ff_fe00_0014, 7);
    b.listen(cma::service_id(cma::port_space::TCP, 7174))
        .unwrap();
    let from = [0u8; 16];
    let (ev, out) = b.receive(0, from, &m[0].raw);
    assert!(out.is_empty());
    let [Event::Req { id, req, .. }] = &ev[..] else {
        panic!("{ev:?}")
    };
    let Message::Rep(kernel_rep) = &m[1].msg else {
        panic!()
    };
    let mut rep = kernel_rep.clone();
    rep.local_qpn = 0x42;
    let ours = b.accept(0, *id, rep).unwrap();
    let (hdr, Message::Rep(r)) = Message::parse(&ours.mad).unwrap() else {
        panic!()
    };
    // The kernel matches a REP to its REQ by the REQ's comm ID and TID.
    assert_eq!(
        (r.remote_comm_id, hdr.tid),
        (req.local_comm_id, m[0].hdr.tid)
    );
    assert_eq!((r.local_comm_id, r.local_qpn), (*id, 0x42));
    // The kernel's RTU names the kernel's REP's ID, not ours: a stray.
    let (ev, _) = b.receive(1, from, &m[2].raw);
    assert!(ev.is_empty());
    assert_eq!(b.stats().dropped, 1);
}

#[test]
fn a_manager_answers_the_kernels_sidr_req_as_the_kernel_did() {
    let m = mads("udaddy.pcap");
    let (Message::SidrReq(q), Message::SidrRep(kernel)) = (&m[0].msg, &m[1].msg) else {
        panic!()
    };
    let mut b = Manager::new(0x5054_00ff_fe00_0014, 7);
    b.listen(q.service_id).unwrap();
    let (ev, _) = b.receive(0, [0; 16], &m[0].raw);
    let [Event::SidrReq { id, .. }] = ev[..] else {
        panic!("{ev:?}")
    };
    let ours = b
        .sidr_reply(
            id,
            status::SUCCESS,
            kernel.qpn,
            kernel.qkey,
            &kernel.private_data,
        )
        .unwrap();
    // The same bytes as the kernel's SIDR REP: its request ID, service ID
    // and TID echoed.
    assert_eq!(ours.mad[..], m[1].raw[..]);
    // With no listener, the kernel's answer exactly.
    let m = mads("udaddy_no_listener.pcap");
    let mut c = Manager::new(1, 1);
    let (_, out) = c.receive(0, [0; 16], &m[0].raw);
    assert_eq!(out[0].mad[..], m[1].raw[..]);
}

//! TraceHal and FaultHal over the PVRDMA driver and the fake device: the
//! trace names the registers, commands, responses, WQEs, CQEs and events
//! as the device's interface defines them, and the faults reach the
//! driver as a faulty device's would.

extern crate std;

use std::format;
use std::string::{String, ToString};
use std::sync::Arc;
use std::vec;
use std::vec::Vec;

use rnic_middleware::pvrdma::{CqeFault, RespFault};
use rnic_middleware::{Event, FaultHal, FaultHandle, Memory, Pvrdma, Timeline, TraceHal};
use rnic_pvrdma_regs::bar1;
use rnic_pvrdma_regs::cmd::{CmdHdr, CmdOpcode, CreateCq, QpType};
use rnic_pvrdma_regs::cqe::EventType;
use rnic_pvrdma_regs::ring::RX_PROD_TAIL;
use rnic_verbs::{send_flags, ErrorKind, Payload, RecvWr, SendOp, SendWr, Sge};

use super::fake::Fake;
use super::objects::{handing_out, listed_pages, read};
use super::{produce, ring_of};
use crate::{Cq, Device, QpInit};

/// Has the device write a CQE naming QP `qp` with `wr_id` into slot
/// `slot` of the CQ whose CREATE_CQ was request `req`, and move the CQ's
/// producer tail past it, at the driver's next `poll_empty`: the device
/// writes while the driver polls, as QEMU's does.
fn complete(fake: &Fake, req: usize, slot: u64, qp: u64, wr_id: u64) {
    let r: CreateCq = read(&fake.state().requests[req]);
    let pages = listed_pages(fake, r.pdir_dma.to_ne(), 2);
    let at = pages[1] + slot * 64;
    let tail = (slot as u32 + 1).to_le_bytes().to_vec();
    fake.state().at_poll.extend([
        (at, wr_id.to_le_bytes().to_vec()),
        (at + 8, qp.to_le_bytes().to_vec()),
        (at + 24, 4096u32.to_le_bytes().to_vec()),
        (pages[0] + RX_PROD_TAIL as u64, tail),
    ]);
}

/// An RC QP of four WQEs each way, one SGE each, on `cq`.
fn rc(cq: &Cq) -> QpInit<'_> {
    QpInit {
        qp_type: QpType::Rc,
        send_cq: cq,
        recv_cq: cq,
        srq: None,
        max_send_wr: 4,
        max_recv_wr: 4,
        max_send_sge: 1,
        max_recv_sge: 1,
        sq_sig_all: false,
    }
}

/// The first event whose text contains `needle`, and its place.
fn find<'a>(events: &'a [Event], needle: &str) -> (usize, &'a Event) {
    events
        .iter()
        .enumerate()
        .find(|(_, e)| e.text.contains(needle))
        .unwrap_or_else(|| {
            let texts: Vec<&String> = events.iter().map(|e| &e.text).collect();
            panic!("no event with {needle:?} in {texts:#?}")
        })
}

#[test]
fn the_trace_names_what_crosses_the_boundary() {
    let fake = Fake::new(bar1::VERSION_ROCEV1);
    let mem = Arc::new(Memory::default());
    let hal = TraceHal::<_, Pvrdma>::of(fake.clone(), Timeline::new(vec![mem.clone()]));
    let dev = Device::open(hal).expect("bring-up");
    handing_out(&fake, None);
    let uc = dev.create_uc().unwrap();
    let pd = dev.create_pd(&uc).unwrap();
    let cq = dev.create_cq(&uc, 64).unwrap();
    let init = rc(&cq);
    let mut qp = dev.create_qp(&uc, &pd, &init).unwrap();
    let sge = [Sge {
        addr: 0x1000,
        length: 64,
        lkey: 5,
    }];
    let send = SendWr {
        wr_id: 7,
        op: SendOp::Send,
        flags: send_flags::SIGNALED,
        payload: Payload::Sgl(&sge),
    };
    dev.post_send(&mut qp, &[send]).unwrap();
    let recv = RecvWr {
        wr_id: 8,
        sg_list: &sge,
    };
    dev.post_recv(&mut qp, &[recv]).unwrap();
    let cq_req = fake
        .state()
        .requests
        .iter()
        .position(|r| read::<CmdHdr>(r).cmd.to_ne() == CmdOpcode::CreateCq.raw())
        .unwrap();
    complete(&fake, cq_req, 0, qp.handle().into(), 7);
    let wc = dev.poll_cq(&cq).unwrap().expect("the CQE");
    assert_eq!(wc.wr_id, 7);
    let dsr = fake.state().dsr.unwrap();
    produce(
        &fake,
        ring_of(&fake, dsr.async_ring_pages),
        &[[EventType::PortActive.raw(), 1]],
    );
    assert!(dev.pop_async_event().unwrap().is_some());
    assert!(fake.state().notify(cq.handle()));
    assert!(dev.pop_cq_notification().unwrap().is_some());

    let ev = mem.events();
    let (version, _) = find(&ev, "VERSION -> 0x11 (RoCE v1)");
    let (low, _) = find(&ev, "DSRLOW <- ");
    let (high, _) = find(&ev, "DSRHIGH <- ");
    let (activate, _) = find(&ev, "CTL <- 0x0 (ACTIVATE)");
    let (err, _) = find(&ev, "ERR -> 0x0 (no error)");
    assert!(version < low && low < high && high < activate && activate < err);
    let h = qp.handle();
    let (c, cmd) = find(&ev, "CMD CREATE_QP cookie");
    assert_eq!(cmd.kind, "cmd");
    assert!(
        cmd.text
            .contains("RC pd 8 send_cq 9 recv_cq 9 srq none max_send_wr 4"),
        "{}",
        cmd.text
    );
    let (r, resp) = find(&ev, "RESP CREATE_QP cookie");
    assert_eq!(resp.kind, "cmd_done");
    assert!(
        resp.text.contains(&format!(": ok qpn {h}")),
        "{}",
        resp.text
    );
    assert!(c < r, "the request before its response");
    let (d, _) = find(&ev, &format!("QP doorbell handle {h} SEND"));
    let (w, wqe) = find(&ev, &format!("WQE qp {h} SQ idx 0: SEND signaled wr_id 7"));
    assert!(
        wqe.text.contains("sge 0x1000 len 64 lkey 0x5"),
        "{}",
        wqe.text
    );
    assert!(d < w, "the doorbell, then the WQE it published");
    let (_, rwqe) = find(&ev, &format!("RWQE qp {h} RQ idx 0: wr_id 8"));
    assert_eq!(rwqe.kind, "rwqe");
    let (_, cqe) = find(
        &ev,
        &format!("CQE cq {} idx 0: SEND SUCCESS qp {h}", cq.handle()),
    );
    assert_eq!(cqe.kind, "cqe");
    assert_eq!(cqe.raw.len(), 128, "64 bytes, in hex");
    // The event rings' entries are seen at the driver's next call to the
    // platform (here DESTROY_QP's register write; a waiting provider's
    // is its wait for the vector).
    let _ = dev.destroy_qp(qp);
    let ev = mem.events();
    find(&ev, "EQE idx 0: PORT_ACTIVE info 1");
    find(&ev, &format!("CQNE idx 0: cq {}", cq.handle()));
    let texts: Vec<String> = ev.iter().map(|e| e.text.to_string()).collect();
    assert!(
        texts
            .iter()
            .any(|t| t.contains("CMD DESTROY_QP cookie") && t.ends_with(&format!("handle {h}"))),
        "{texts:#?}"
    );
}

/// A device under FaultHal, open, handing out handles.
fn faulty() -> (Fake, Device<FaultHal<Fake, Pvrdma>>, FaultHandle<Pvrdma>) {
    let fake = Fake::new(bar1::VERSION_ROCEV1);
    let (hal, faults) = FaultHal::<_, Pvrdma>::of(fake.clone());
    let dev = Device::open(hal).expect("bring-up");
    handing_out(&fake, None);
    (fake, dev, faults)
}

#[test]
fn wrong_responses_reach_the_driver_as_errors() {
    let (_fake, dev, faults) = faulty();
    let uc = dev.create_uc().unwrap();
    let cases = [
        (RespFault::Ack(CmdOpcode::CreateMr.ack()), ErrorKind::Io),
        (RespFault::Cookie(0xdead), ErrorKind::Io),
        (RespFault::Err(12), ErrorKind::NoMemory),
    ];
    for (i, (fault, kind)) in cases.into_iter().enumerate() {
        faults.set(|f| f.device.response = Some((CmdOpcode::CreatePd, fault)));
        let e = dev.create_pd(&uc).expect_err("refused");
        assert_eq!(e.kind(), kind, "{fault:?}: {e}");
        assert_eq!(faults.injected().commands_changed, i as u64 + 1);
    }
    // Faults fire once: the next command is answered as the device did.
    dev.create_pd(&uc).expect("a PD");
    // A fault set for another command leaves this one alone.
    faults.set(|f| f.device.response = Some((CmdOpcode::CreateCq, RespFault::Err(22))));
    dev.create_pd(&uc).expect("a PD");
    assert_eq!(faults.injected().commands_changed, 3);
}

#[test]
fn wrong_cqes_reach_the_driver_as_errors() {
    let (fake, dev, faults) = faulty();
    let uc = dev.create_uc().unwrap();
    let pd = dev.create_pd(&uc).unwrap();
    let cq = dev.create_cq(&uc, 64).unwrap();
    let init = rc(&cq);
    let qp = dev.create_qp(&uc, &pd, &init).unwrap();
    let cq_req = fake.state().requests.len() - 2;
    let handle = u64::from(qp.handle());
    faults.set(|f| f.device.cqe = Some(CqeFault::Qp(77)));
    complete(&fake, cq_req, 0, handle, 1);
    let e = dev.poll_cq(&cq).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Io);
    assert!(e.to_string().contains("names QP 0x4d"), "{e}");
    // Untouched, the next CQE is the QP's.
    complete(&fake, cq_req, 1, handle, 2);
    assert_eq!(dev.poll_cq(&cq).unwrap().map(|w| w.wr_id), Some(2));
    faults.set(|f| f.device.cqe = Some(CqeFault::ProducerIndex(4096)));
    complete(&fake, cq_req, 2, handle, 3);
    let e = dev.poll_cq(&cq).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Io, "{e}");
    assert_eq!(faults.injected().cqes_changed, 2);
    let _ = dev.destroy_qp(qp);
}

#[test]
fn a_swallowed_request_times_out() {
    let (_fake, dev, faults) = faulty();
    let uc = dev.create_uc().unwrap();
    faults.set(|f| f.hang_commands = true);
    let e = dev.create_pd(&uc).expect_err("timed out");
    assert_eq!(e.kind(), ErrorKind::TimedOut, "{e}");
    assert_eq!(faults.injected().commands_hung, 1);
}

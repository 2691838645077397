//! TraceHal around the device model: one RDMA WRITE between two RC QPs,
//! and the trace shows it at the register level, in order: bring-up,
//! the commands that made the objects, the WQE, the doorbell, the CQE.

use std::sync::Arc;

use rnic_driver::{
    access, send_flags, AhAttr, Context, Payload, QpCap, QpInit, QpType, RecvWr, RemoteAddr,
    SendOp, SendWr, WcStatus,
};
use rnic_emu::net::{Direction, Loopback, Tap};
use rnic_emu::wire::frame::describe;
use rnic_emu::{EmuConfig, EmuDevice, ExecMode};
use rnic_middleware::{Event, JsonLines, Lane, Memory, Timeline, TraceHal};
use rnic_queues::Hal as _;

mod common;

use common::{connect, one};

/// The index of the first event after `from` whose text contains all of
/// `words`.
fn find(events: &[Event], from: usize, words: &[&str]) -> usize {
    events[from..]
        .iter()
        .position(|e| words.iter().all(|w| e.text.contains(w)))
        .map(|i| from + i)
        .unwrap_or_else(|| {
            let all: Vec<&str> = events.iter().map(|e| e.text.as_str()).collect();
            panic!("no event with {words:?} after {from}:\n{}", all.join("\n"))
        })
}

#[test]
fn an_rdma_write_at_the_register_level() {
    let mem = Arc::new(Memory::default());
    let file = std::env::temp_dir().join(format!("rnic-trace-{}.jsonl", std::process::id()));
    let json = Arc::new(JsonLines::new(std::fs::File::create(&file).unwrap()));
    let tl = Timeline::new(vec![mem.clone(), json]);
    // The NIC's frames on the same timeline, through a tap on its wire.
    let t = tl.clone();
    let tap = Tap::new(
        Loopback::default(),
        Arc::new(move |d, f: &[u8]| t.frame(d == Direction::Tx, describe(f), f)),
    );
    let dev = EmuDevice::builder(EmuConfig::default())
        .mode(ExecMode::Inline)
        .wire(tap)
        .build()
        .unwrap();
    let ctx = Context::open(TraceHal::new(dev.hal(), tl.clone())).unwrap();
    tl.note("bring-up done");
    let pd = ctx.alloc_pd().unwrap();
    let src = pd.alloc_mr(4096, access::LOCAL_WRITE).unwrap();
    let dst = pd
        .alloc_mr(4096, access::LOCAL_WRITE | access::REMOTE_WRITE)
        .unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let cap = QpCap {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 2,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let init = QpInit {
        send_cq: &cq,
        recv_cq: &cq,
        srq: None,
        cap,
        qp_type: QpType::Rc,
        sq_sig_all: false,
    };
    let (a, b) = (pd.create_qp(&init).unwrap(), pd.create_qp(&init).unwrap());
    let port = ctx.query_port(1).unwrap();
    let path = AhAttr {
        dgid: ctx.query_gid(1, 0).unwrap(),
        dmac: port.mac,
        hop_limit: 64,
        port_num: 1,
        is_global: true,
        ..AhAttr::default()
    };
    connect(&a, b.qp_num(), path);
    connect(&b, a.qp_num(), path);
    src.write(0, b"traced bytes").unwrap();
    // Two entries: a WQE of four segments, rung through the doorbell (a
    // BlueFlame write takes three at most).
    let wr = SendWr {
        wr_id: 7,
        op: SendOp::RdmaWrite {
            remote: RemoteAddr {
                addr: dst.addr() + 64,
                rkey: dst.rkey(),
            },
        },
        payload: Payload::Sgl(&[src.sge(0, 6).unwrap(), src.sge(6, 6).unwrap()]),
        flags: send_flags::SIGNALED,
    };
    tl.note("post an RDMA WRITE");
    a.post_send(&[wr]).unwrap();
    let wc = one(&cq);
    assert_eq!((wc.wr_id, wc.status), (7, WcStatus::Success));
    let mut got = [0u8; 12];
    dst.read(64, &mut got).unwrap();
    assert_eq!(&got, b"traced bytes");
    // A receive, and a small inline SEND, which goes as a BlueFlame write.
    b.post_recv(&[RecvWr {
        wr_id: 8,
        sg_list: &[dst.sge(256, 64).unwrap()],
    }])
    .unwrap();
    a.post_send(&[SendWr {
        wr_id: 9,
        op: SendOp::Send,
        payload: Payload::Inline(b"8 bytes!"),
        flags: send_flags::SIGNALED,
    }])
    .unwrap();
    let mut ids = [one(&cq).wr_id, one(&cq).wr_id];
    ids.sort();
    assert_eq!(ids, [8, 9]);
    // The device's CQEs are found at the driver's next call.
    let _ = ctx.hal().now_ns();

    let ev = mem.events();
    let (qa, cqn) = (a.qp_num().to_string(), cq.cq_num().to_string());
    let id = find(&ev, 0, &["MMIO BAR0+0x000 ID ->", "\"RNIC\""]);
    assert_eq!(ev[id].lane, Lane::Driver);
    let reset = find(&ev, id, &["CTRL <-", "reset: true"]);
    let cmd_cq = find(&ev, reset, &["CREATE_CQ", "log_size"]);
    let done_cq = find(&ev, cmd_cq, &["CREATE_CQ done: OK", &format!("cqn {cqn}")]);
    assert_eq!(ev[done_cq].lane, Lane::Device);
    let qp_done = find(&ev, done_cq, &["CREATE_QP done: OK", &format!("qpn {qa}")]);
    let wqe = find(
        &ev,
        qp_done,
        &[
            &format!("WQE qpn {qa} idx 0: ctrl RDMA_WRITE signaled ds 4"),
            "rkey",
            "sge",
            "len 6",
        ],
    );
    let db = find(&ev, qp_done, &[&format!("SQ doorbell qpn {qa} pi 1")]);
    assert!(
        db < wqe,
        "the doorbell names the WQEs it publishes: read at it"
    );
    let qb = b.qp_num().to_string();
    // The WRITE's packet, both ways on the loopback wire, and its ACK.
    let tx = find(
        &ev,
        wqe,
        &[
            "FRAME tx",
            "RDMA_WRITE_ONLY",
            &format!("qp {qb} psn 0 ackreq"),
            "RETH",
            "len 12",
            "| 12 B",
        ],
    );
    assert_eq!((ev[tx].lane, ev[tx].kind), (Lane::Wire, "frame"));
    let rx = find(&ev, tx, &["FRAME rx", "RDMA_WRITE_ONLY"]);
    let ack = find(
        &ev,
        rx,
        &["FRAME", "ACKNOWLEDGE", &format!("qp {qa}"), "AETH"],
    );
    let cqe = find(
        &ev,
        ack,
        &[&format!(
            "CQE cqn {cqn} idx 0 owner 1: REQ RDMA_WRITE wqe 1 SUCCESS"
        )],
    );
    let note = find(&ev, 0, &["post an RDMA WRITE"]);
    assert!(ev[note].lane == Lane::App && note < db);
    assert_eq!(ev[cqe].kind, "cqe");
    let rwqe = find(
        &ev,
        cqe,
        &[&format!("RWQE qpn {qb} idx 0: wr_id 8"), "len 64"],
    );
    let bf = find(
        &ev,
        rwqe,
        &[
            &format!("BlueFlame qpn {qa} pi 2"),
            "ctrl SEND signaled inline ds 2",
            "inline 8 B",
        ],
    );
    assert_eq!(ev[bf].kind, "blueflame");
    find(&ev, bf, &["REQ SEND", "SUCCESS"]);
    find(&ev, bf, &["RESP RECV", "SUCCESS", "len 8"]);
    assert!(ev.windows(2).all(|w| w[0].seq + 1 == w[1].seq));
    // The same events as JSON lines.
    let lines = std::fs::read_to_string(&file).unwrap();
    std::fs::remove_file(&file).unwrap();
    assert_eq!(lines.lines().count(), ev.len());
    let v: serde_json::Value = serde_json::from_str(lines.lines().nth(cqe).unwrap()).unwrap();
    assert_eq!(v["kind"], "cqe");
    assert_eq!(v["lane"], "device");
    assert_eq!(v["text"], ev[cqe].text);
}

/// What else the device is handed and hands back: receive WQEs posted to
/// an SRQ, and EQEs, on EQ 0 and on a completion channel's EQ.
#[test]
fn srq_wqes_and_eqes_are_decoded() {
    let mem = Arc::new(Memory::default());
    let tl = Timeline::new(vec![mem.clone()]);
    let dev = EmuDevice::new(EmuConfig::default(), ExecMode::Inline);
    let ctx = Context::open(TraceHal::new(dev.hal(), tl.clone())).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd.alloc_mr(4096, access::LOCAL_WRITE).unwrap();
    let srq = pd
        .create_srq(&rnic_driver::SrqAttr {
            max_wr: 8,
            max_sge: 1,
            srq_limit: 0,
        })
        .unwrap();
    let sgl = [mr.sge(256, 64).unwrap()];
    srq.post_recv(&[RecvWr {
        wr_id: 77,
        sg_list: &sgl,
    }])
    .unwrap();
    let channel = ctx.create_comp_channel().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let ccq = ctx.create_cq_with(16, Some(&channel), 0).unwrap();
    let cap = QpCap {
        max_send_wr: 8,
        max_recv_wr: 8,
        max_send_sge: 1,
        max_recv_sge: 1,
        max_inline_data: 64,
    };
    let init = |send_cq, recv_cq, srq| QpInit {
        send_cq,
        recv_cq,
        srq,
        cap,
        qp_type: QpType::Rc,
        sq_sig_all: false,
    };
    let a = pd.create_qp(&init(&cq, &cq, None)).unwrap();
    let b = pd.create_qp(&init(&ccq, &ccq, Some(&srq))).unwrap();
    connect(&a, b.qp_num(), common::self_path(&ctx));
    connect(&b, a.qp_num(), common::self_path(&ctx));
    // A's send completion raises an event on EQ 0; B's receive one on the
    // channel's EQ.
    cq.arm(false);
    ccq.arm(false);
    a.post_send(&[SendWr {
        wr_id: 1,
        op: SendOp::Send,
        payload: Payload::Inline(b"to the srq"),
        flags: send_flags::SIGNALED,
    }])
    .unwrap();
    assert_eq!(one(&ccq).wr_id, 77);
    assert_eq!(one(&cq).status, WcStatus::Success);
    let ev = mem.events();
    let srqn = srq.srq_num();
    let at = find(
        &ev,
        0,
        &[&format!("RWQE srqn {srqn} idx 0: wr_id 77"), "len 64"],
    );
    assert_eq!(ev[at].lane, Lane::Doorbell);
    let eqes: Vec<&Event> = ev.iter().filter(|e| e.kind == "eqe").collect();
    let cqn = |n: u32| format!("COMPLETION obj {n} ");
    assert!(
        eqes.iter()
            .any(|e| e.text.starts_with("EQE eqn 0 ") && e.text.contains(&cqn(cq.cq_num()))),
        "{eqes:?}"
    );
    assert!(
        eqes.iter().any(|e| !e.text.starts_with("EQE eqn 0 ")
            && e.text.contains(&cqn(ccq.cq_num()))
            && e.lane == Lane::Device),
        "{eqes:?}"
    );
}

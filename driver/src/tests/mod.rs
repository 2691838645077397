//! The driver's unit tests, over the device model through `FaultHal`,
//! which injects what a device or platform can do wrong, and `TraceHal`,
//! which shows what crossed the boundary: the commands issued and their
//! results, doorbells, WQEs and the DMA memory handed out and taken back.
//! What the device does is the model's, as the spec defines it.

extern crate std;

mod objects;
mod queues;

use std::string::String;
use std::sync::Arc;
use std::vec::Vec;

use rnic_emu::{EmuConfig, EmuDevice, EmuHal, ExecMode};
use rnic_middleware::{Event, FaultHal, FaultHandle, Memory, Sink, Timeline, TraceHal};
use rnic_verbs::{access, qp_attr, Mtu, QpState, QpType};

use crate::{
    AhAttr, Config, Context, Cq, Payload, Pd, Qp, QpAttr, QpCap, QpInit, SendOp, SendWr,
    WorkCompletion,
};

/// The platform of every test: the model, faults, a trace.
type H = TraceHal<FaultHal<EmuHal>>;

/// What a test holds besides the driver's objects: the model, the fault
/// handle and the trace.
struct Rig {
    dev: Arc<EmuDevice>,
    faults: FaultHandle,
    trace: Arc<Memory>,
}

/// An inline model (it runs on the driver's own calls, so each test is
/// deterministic) under FaultHal and TraceHal, not opened yet.
fn platform() -> (H, Rig) {
    let dev = EmuDevice::new(EmuConfig::default(), ExecMode::Inline);
    let (hal, faults) = FaultHal::new(dev.hal());
    let trace = Arc::new(Memory::default());
    let sink: Arc<dyn Sink> = trace.clone();
    let hal = TraceHal::new(hal, Timeline::new(std::vec![sink]));
    (hal, Rig { dev, faults, trace })
}

fn open() -> (Context<H>, Rig) {
    open_with(Config::default())
}

fn open_with(config: Config) -> (Context<H>, Rig) {
    let (hal, rig) = platform();
    (Context::open_with(hal, config).expect("bring-up"), rig)
}

/// Short timeouts: the faults make the driver wait for what never comes.
fn short() -> Config {
    Config {
        reset_timeout_ns: 20_000_000,
        enable_timeout_ns: 20_000_000,
        cmd_timeout_ns: 20_000_000,
        ..Config::default()
    }
}

impl Rig {
    fn events(&self, kind: &str) -> Vec<Event> {
        self.trace
            .events()
            .into_iter()
            .filter(|e| e.kind == kind)
            .collect()
    }

    /// The commands the driver issued (rang the command doorbell for), by
    /// opcode name, in order.
    fn issued(&self) -> Vec<String> {
        self.events("cmd")
            .iter()
            .map(|e| field(e, "opcode"))
            .collect()
    }

    /// How many commands of opcode `op` the driver issued.
    fn count(&self, op: &str) -> usize {
        self.issued().iter().filter(|o| *o == op).count()
    }

    /// The commands the device completed, as the trace decodes them
    /// (`CMD 3 CREATE_PD done: OK …`).
    fn done(&self) -> Vec<String> {
        self.events("cmd_done")
            .into_iter()
            .map(|e| e.text)
            .collect()
    }

    /// Doorbells of queue kind `which` (`SQ`, `RQ`, `CQ`, `EQ`) rung, as
    /// decoded (`SQ doorbell qpn 2 pi 5` …).
    fn doorbells(&self, which: &str) -> Vec<Event> {
        let name = std::format!("{which} doorbell ");
        let mut v = self.events("doorbell");
        v.retain(|e| e.text.contains(&name));
        v
    }

    /// DMA memory the driver holds: regions allocated and buffers mapped,
    /// less those freed, unmapped or retired.
    fn held(&self) -> usize {
        let dma = self.events("dma");
        let n = |p: &str| dma.iter().filter(|e| e.text.starts_with(p)).count();
        n("DMA alloc") + n("DMA map") - n("DMA free") - n("DMA unmap") - n("DMA retire")
    }

    /// Mappings of user memory retired (cut off from the device).
    fn retired(&self) -> usize {
        let dma = self.events("dma");
        dma.iter()
            .filter(|e| e.text.starts_with("DMA retire"))
            .count()
    }
}

/// Field `name` of trace event `e`.
fn field(e: &Event, name: &str) -> String {
    e.fields
        .iter()
        .find(|(n, _)| n == name)
        .map(|(_, v)| v.clone())
        .unwrap_or_else(|| panic!("{name} in {e:?}"))
}

fn cap(send: u32, recv: u32) -> QpCap {
    QpCap {
        max_send_wr: send,
        max_recv_wr: recv,
        max_send_sge: 2,
        max_recv_sge: 1,
        max_inline_data: 16,
    }
}

fn qp(pd: &Pd<H>, cq: &Cq<H>, cap: QpCap) -> Qp<H> {
    pd.create_qp(&init(cq, cq, cap)).expect("create_qp")
}

fn init<'a>(send_cq: &'a Cq<H>, recv_cq: &'a Cq<H>, cap: QpCap) -> QpInit<'a, Context<H>> {
    QpInit {
        send_cq,
        recv_cq,
        srq: None,
        cap,
        qp_type: QpType::Rc,
        sq_sig_all: false,
    }
}

const INIT_MASK: u32 = qp_attr::STATE | qp_attr::PKEY_INDEX | qp_attr::PORT | qp_attr::ACCESS_FLAGS;
const RTR_MASK: u32 = qp_attr::STATE
    | qp_attr::AV
    | qp_attr::PATH_MTU
    | qp_attr::DEST_QPN
    | qp_attr::RQ_PSN
    | qp_attr::MAX_DEST_RD_ATOMIC
    | qp_attr::MIN_RNR_TIMER;
const RTS_MASK: u32 = qp_attr::STATE
    | qp_attr::SQ_PSN
    | qp_attr::TIMEOUT
    | qp_attr::RETRY_CNT
    | qp_attr::RNR_RETRY
    | qp_attr::MAX_QP_RD_ATOMIC;

fn init_attr() -> QpAttr {
    QpAttr {
        qp_state: QpState::Init,
        port_num: 1,
        qp_access_flags: access::REMOTE_WRITE | access::REMOTE_READ,
        ..QpAttr::default()
    }
}

/// The path to port 1 of `ctx`'s own device: a QP connected to a QP of
/// the same device talks over the model's loopback wire.
fn self_path(ctx: &Context<H>) -> AhAttr {
    let port = ctx.query_port(1).unwrap();
    AhAttr {
        dgid: ctx.query_gid(1, 0).unwrap(),
        dmac: port.mac,
        hop_limit: 64,
        port_num: 1,
        is_global: true,
        ..AhAttr::default()
    }
}

fn rtr_attr(ctx: &Context<H>, dest: u32) -> QpAttr {
    QpAttr {
        qp_state: QpState::Rtr,
        path_mtu: Some(Mtu::Mtu1024),
        dest_qp_num: dest,
        rq_psn: 0x12_3456,
        max_dest_rd_atomic: 4,
        min_rnr_timer: 12,
        ah_attr: self_path(ctx),
        ..QpAttr::default()
    }
}

fn rts_attr() -> QpAttr {
    QpAttr {
        qp_state: QpState::Rts,
        sq_psn: 0x12_3456,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: 4,
        ..QpAttr::default()
    }
}

/// INIT, RTR, RTS, connected to itself: its SENDs land in its own
/// receive queue.
fn to_rts(ctx: &Context<H>, qp: &Qp<H>) {
    qp.modify(&init_attr(), INIT_MASK).unwrap();
    qp.modify(&rtr_attr(ctx, qp.qp_num()), RTR_MASK).unwrap();
    qp.modify(&rts_attr(), RTS_MASK).unwrap();
}

fn inline_send(wr_id: u64, flags: u32) -> SendWr<'static> {
    SendWr {
        wr_id,
        op: SendOp::Send,
        payload: Payload::Inline(b"hello"),
        flags,
    }
}

/// Receive WQEs `ids`, each a 64-byte slot of `mr` (eight slots, reused).
fn post_recvs(qp: &Qp<H>, mr: &crate::Mr<H>, ids: core::ops::Range<u64>) {
    for id in ids {
        let sgl = [mr.sge((id as usize % 8) * 64, 64).unwrap()];
        qp.post_recv(&[crate::RecvWr {
            wr_id: id,
            sg_list: &sgl,
        }])
        .unwrap();
    }
}

/// A signaled SEND `id` of `hello` from `qp` to itself and the receive
/// WQE `id` it lands in: two completions in the CQ.
fn send_to_self(qp: &Qp<H>, mr: &crate::Mr<H>, id: u64) {
    post_recvs(qp, mr, id..id + 1);
    qp.post_send(&[inline_send(id, crate::send_flags::SIGNALED)])
        .unwrap();
}

fn poll_all(cq: &Cq<H>) -> Vec<WorkCompletion> {
    let mut wc = [WorkCompletion::default(); 16];
    let n = cq.poll(&mut wc).unwrap();
    wc[..n].to_vec()
}

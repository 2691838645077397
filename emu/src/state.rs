//! The device state behind the device lock, the list of QPs with work to
//! send, and one turn of the device.

use std::collections::VecDeque;
use std::sync::Arc;

use rnic_verbs::GidType;

use crate::cmdq::CmdQueue;
use crate::eq::EventQueue;
use crate::iommu::Iommu;
use crate::irq::IrqLines;
use crate::net::Frame;
use crate::objects::{Objects, Qp, Table, Uctx};
use crate::port::{self, Port};
use crate::regs::Regs;
use crate::transport::requester;
use crate::transport::timers::{self, Timers};
use crate::wqe::SendWqe;
use crate::EmuConfig;

/// One GID table entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct GidEntry {
    pub gid: [u8; 16],
    pub ty: GidType,
    pub valid: bool,
}

/// Everything the device knows. One lock guards all of it: commands and the
/// data path are serialized, and an unmap (which takes the same lock) can
/// never race with a device access.
///
/// The QPs are apart from the rest of the device ([`Dev`]), so that a QP's
/// state machines hold their QP and the device parts they reach (memory,
/// CQs, SRQs, event queues, the port, timers) at once, and run on a QP and
/// a `Dev` alone in unit tests.
#[derive(Debug)]
pub(crate) struct State {
    pub qps: Table<Qp>,
    pub dev: Dev,
    /// Turns in a row that left received frames in the wire.
    backlog_turns: u32,
}

/// The device apart from its QPs.
#[derive(Debug)]
pub(crate) struct Dev {
    pub cfg: EmuConfig,
    pub iommu: Iommu,
    pub regs: Regs,
    pub cmdq: Option<CmdQueue>,
    pub eq: Option<EventQueue>,
    pub objs: Objects,
    /// User contexts (ALLOC_UCTX), by uid.
    pub uctxs: Table<Uctx>,
    /// Each doorbell page's context (0: none).
    pub page_owner: Vec<u32>,
    pub gids: Vec<GidEntry>,
    /// QPs with something to send (requests, or their responder's
    /// answers), in the order they became runnable.
    kicked: VecDeque<u32>,
    pub irq: Arc<IrqLines>,
    pub port: Port,
    pub timers: Timers,
    /// The device clock at the start of the current turn.
    pub now: u64,
    /// Buffers of completed send WQEs, for the next ones taken: an
    /// in-flight WQE's copy is moved by pointer and allocates nothing.
    // Boxed on purpose: the boxes move in and out of in-flight WQEs.
    #[allow(clippy::vec_box)]
    pub wqe_pool: Vec<Box<SendWqe>>,
}

/// Frames a turn builds before it lets the step hand them to the wire:
/// two quanta, so that a 64-packet message leaves in two sends, the
/// first crossing while the second is built, and a flood of requests
/// (64 received per step) still outruns its answers, as the answer
/// queue's bound expects.
const TX_BATCH: usize = 32;
/// WQE buffers the pool keeps at most.
pub(crate) const WQE_POOL: usize = 1024;

/// Turns a receive backlog may hold back due timers.
const TIMER_DEFER: u32 = 16;

impl Dev {
    /// The device apart from its QPs, as after a reset.
    pub(crate) fn new(cfg: EmuConfig, irq: Arc<IrqLines>) -> Self {
        let mut dev = Self {
            iommu: Iommu::new(),
            regs: Regs::default(),
            cmdq: None,
            eq: None,
            objs: Objects::new(&cfg),
            uctxs: Table::new(1, cfg.max_uctx + 1),
            page_owner: vec![0; cfg.uar_pages as usize],
            gids: Vec::new(),
            kicked: VecDeque::new(),
            irq,
            port: Port::new(cfg.mac),
            timers: Timers::default(),
            now: 0,
            wqe_pool: Vec::new(),
            cfg,
        };
        dev.reset();
        dev
    }

    /// Keeps the buffer of a spent send WQE for the next one.
    pub(crate) fn recycle_wqe(&mut self, w: Box<SendWqe>) {
        if self.wqe_pool.len() < WQE_POOL {
            self.wqe_pool.push(w);
        }
    }

    /// Everything but the QPs back to its reset value (see
    /// [`State::reset`]).
    fn reset(&mut self) {
        self.objs.clear();
        self.uctxs.clear();
        self.page_owner.iter_mut().for_each(|o| *o = 0);
        self.cmdq = None;
        self.eq = None;
        self.kicked.clear();
        self.timers.clear();
        self.port.reset();
        self.regs = Regs::default();
        self.regs.ready = true;
        self.irq.clear();
        let empty = GidEntry {
            gid: [0; 16],
            ty: GidType::RoceV2,
            valid: false,
        };
        self.gids = vec![empty; self.cfg.gid_table_len as usize];
        self.gids[0] = GidEntry {
            gid: self.cfg.ipv4_gid(),
            ty: GidType::RoceV2,
            valid: true,
        };
        self.gids[1] = GidEntry {
            gid: self.cfg.link_local_gid(),
            ty: GidType::RoceV2,
            valid: true,
        };
    }

    /// Whether doorbell page `page` exists and may be given to an object of
    /// context `uid` (the command's `CmdHeader::uid`): a page of its own,
    /// or, for uid 0, a page of no context.
    pub(crate) fn page_usable(&self, page: u32, uid: u32) -> bool {
        self.page_owner.get(page as usize) == Some(&uid)
    }

    /// Whether the device executes commands and doorbells.
    pub(crate) fn running(&self) -> bool {
        self.regs.enabled && !self.regs.fatal
    }

    /// Queues `qp` to send in the next turn.
    pub(crate) fn kick(&mut self, qp: &mut Qp) {
        if !qp.kicked {
            qp.kicked = true;
            self.kicked.push_back(qp.qpn);
        }
    }
}

impl State {
    pub(crate) fn new(cfg: EmuConfig, irq: Arc<IrqLines>) -> Self {
        Self {
            // QPNs 0 and 1 are reserved; CAP_MAX_QP counts them.
            // QPN 0 is QP0's, which RoCE has not; QPN 1 the GSI QP's.
            qps: Table::reserving(1, 1, cfg.max_qp),
            dev: Dev::new(cfg, irq),
            backlog_turns: 0,
        }
    }

    /// Device reset: every object destroyed, registers, GID table, port
    /// counters and neighbours back to their reset values. The IOMMU
    /// belongs to the platform and stays.
    pub(crate) fn reset(&mut self) {
        self.qps.clear();
        self.dev.reset();
    }

    /// QP `qpn`, if it exists, and the rest of the device.
    pub(crate) fn parts(&mut self, qpn: u32) -> Option<(&mut Qp, &mut Dev)> {
        Some((self.qps.get_mut(qpn)?, &mut self.dev))
    }

    /// Queues QP `qpn` to send in the next turn.
    pub(crate) fn kick(&mut self, qpn: u32) {
        if let Some(qp) = self.qps.get_mut(qpn) {
            self.dev.kick(qp);
        }
    }

    /// Gives every QP queued when it starts one quantum, re-queueing those
    /// with more to send; returns whether any QP is queued.
    fn run_kicked(&mut self) -> bool {
        for _ in 0..self.dev.kicked.len() {
            let Some(qpn) = self.dev.kicked.pop_front() else {
                break;
            };
            let Some((qp, dev)) = self.parts(qpn) else {
                continue;
            };
            qp.kicked = false;
            if requester::run(qp, dev) {
                dev.kick(qp);
            }
        }
        !self.dev.kicked.is_empty()
    }

    /// One turn of the device at time `now`: the frames received, the
    /// timers due, then rounds of a quantum for every QP with something to
    /// send until [`TX_BATCH`] frames are built or nothing is left. Frames
    /// to send collect in `port.tx`. `backlog` says the wire holds more
    /// received frames. Returns whether work remains for another turn.
    pub(crate) fn turn(&mut self, rx: &[Frame], backlog: bool, now: u64) -> bool {
        if !self.dev.running() {
            return false;
        }
        self.dev.now = now;
        for f in rx {
            port::receive(self, f);
        }
        // An answer already waiting in the receive queue is no timeout
        // (a device worker that was not scheduled for a while finds both
        // at once): due timers wait for the backlog, a flood delaying
        // them by at most TIMER_DEFER turns.
        if backlog && self.backlog_turns < TIMER_DEFER {
            self.backlog_turns += 1;
        } else {
            self.backlog_turns = 0;
            timers::run_due(self, now);
        }
        // QPs share the link a quantum at a time; the wire takes a step's
        // frames in one call (a UDP wire: a few segmented messages, each
        // one system call for a whole run of a message's packets).
        let mut more = self.run_kicked();
        while more && self.dev.port.tx.len() < TX_BATCH {
            more = self.run_kicked();
        }
        more
    }

    /// The earliest timer deadline.
    pub(crate) fn next_deadline(&self) -> Option<u64> {
        self.dev.timers.next()
    }
}

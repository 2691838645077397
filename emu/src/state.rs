//! The device state behind the device lock, and the deferred list of send
//! queues to run.

use std::collections::VecDeque;
use std::sync::Arc;

use rnic_hw_regs::verbs::GidType;

use crate::cmdq::CmdQueue;
use crate::eq::EventQueue;
use crate::iommu::Iommu;
use crate::irq::IrqLines;
use crate::objects::Objects;
use crate::regs::Regs;
use crate::{requester, responder, EmuConfig};

/// One GID table entry.
#[derive(Debug, Clone, Copy)]
pub(crate) struct GidEntry {
    pub gid: [u8; 16],
    pub ty: GidType,
    pub valid: bool,
}

/// Everything the device knows. One lock guards all of it: commands and the
/// data path are serialized, and an unmap (which takes the same lock) can
/// never race with a device access.
#[derive(Debug)]
pub(crate) struct State {
    pub cfg: EmuConfig,
    pub iommu: Iommu,
    pub regs: Regs,
    pub cmdq: Option<CmdQueue>,
    pub eq: Option<EventQueue>,
    pub objs: Objects,
    pub gids: Vec<GidEntry>,
    /// Send queues to run once the current work item is done. Wake-ups found
    /// while executing (RNR retry, a QP reaching RTS) are deferred here
    /// instead of recursing into the requester.
    kicked: VecDeque<u32>,
    pub irq: Arc<IrqLines>,
    /// The requester's reusable buffers (taken while a send queue runs).
    pub scratch: Option<Box<requester::Scratch>>,
    /// The responder's reusable buffers (taken while a message consumes a
    /// receive WQE).
    pub recv_scratch: Option<Box<responder::Scratch>>,
}

impl State {
    pub(crate) fn new(cfg: EmuConfig, irq: Arc<IrqLines>) -> Self {
        let mut st = Self {
            iommu: Iommu::new(),
            regs: Regs::default(),
            cmdq: None,
            eq: None,
            objs: Objects::new(&cfg),
            gids: Vec::new(),
            kicked: VecDeque::with_capacity(cfg.max_qp as usize),
            irq,
            cfg,
            scratch: Some(Box::default()),
            recv_scratch: Some(Box::default()),
        };
        st.reset();
        st
    }

    /// Device reset: every object destroyed, registers and GID table back
    /// to their reset values. The IOMMU belongs to the platform and stays.
    pub(crate) fn reset(&mut self) {
        self.objs.clear();
        self.cmdq = None;
        self.eq = None;
        self.kicked.clear();
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

    /// Whether the device executes commands and doorbells.
    pub(crate) fn running(&self) -> bool {
        self.regs.enabled && !self.regs.fatal
    }

    /// Queues QP `qpn`'s send queue to be run by [`State::run_kicked`].
    pub(crate) fn kick(&mut self, qpn: u32) {
        if let Some(qp) = self.objs.qps.get_mut(qpn) {
            if !qp.kicked {
                qp.kicked = true;
                self.kicked.push_back(qpn);
            }
        }
    }

    /// Runs every kicked send queue, including those kicked meanwhile.
    pub(crate) fn run_kicked(&mut self) {
        while let Some(qpn) = self.kicked.pop_front() {
            let Some(qp) = self.objs.qps.get_mut(qpn) else {
                continue;
            };
            qp.kicked = false;
            requester::process_sq(self, qpn);
        }
    }
}

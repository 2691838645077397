//! [`Pvrdma`]: the boundary of VMware's paravirtual RDMA device
//! (docs/pvrdma.md): BAR 1 registers, one command at a time through the
//! command and response slots, UAR doorbells in BAR 2, WQEs at the
//! producer tails of rings the device reaches by page directory, CQEs,
//! async events and CQ notifications at the tails the device moves.

pub mod decode;
mod shadow;

use std::mem::offset_of;

use rnic_pvrdma_regs::bar::{REG, UAR};
use rnic_pvrdma_regs::bar1;
use rnic_pvrdma_regs::cmd::{CmdOpcode, RespHdr, CMD_RESP_SIZE};
use rnic_pvrdma_regs::cqe::Cqe;
use rnic_pvrdma_regs::PAGE_SIZE;
use rnic_queues::HalError;

use crate::boundary::{Boundary, Dma, Seen};
use crate::decode::Decoded;
use crate::fault::Injected;
use shadow::Shadow;

/// A change to the response of a command.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RespFault {
    /// Its `ack` (another command's, or none).
    Ack(u32),
    /// Its cookie (another command's).
    Cookie(u64),
    /// Its error byte: the command failed with this errno.
    Err(u8),
}

/// A change to the next CQE the device writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CqeFault {
    /// The QP it names (one the device does not hold for the driver).
    Qp(u64),
    /// Its status (an unknown value).
    Status(u32),
    /// Its opcode.
    Opcode(u32),
    /// Not the CQE: its CQ's producer tail, left at this index (one out
    /// of range).
    ProducerIndex(u32),
}

/// The faults of the PVRDMA device's interface.
#[derive(Debug, Clone, Default)]
pub struct PvrdmaFaults {
    /// The response to the next command of this opcode is changed so.
    pub response: Option<(CmdOpcode, RespFault)>,
    /// The next CQE the device writes is changed so.
    pub cqe: Option<CqeFault>,
}

/// The PVRDMA device's boundary.
#[derive(Default)]
pub struct Pvrdma {
    shadow: Shadow,
}

impl Pvrdma {
    /// Records a response the device wrote, and learns from it.
    fn answered(&mut self, dma: &Dma, seen: &mut Vec<Seen>) {
        let Some((p, slot)) = self.shadow.take_response() else {
            return;
        };
        let bytes = slot.copy(0, CMD_RESP_SIZE);
        let qp_handles = self.shadow.qp_handles();
        seen.push(Seen::written(
            "cmd_done",
            decode::response(&bytes, p.op, qp_handles),
            &bytes,
        ));
        self.shadow.learn(dma, &p, &bytes);
    }
}

impl Boundary for Pvrdma {
    type Faults = PvrdmaFaults;
    const COMMAND_DOORBELL: (u8, usize) = (REG, bar1::REQUEST);

    fn read(&mut self, _dma: &Dma, bar: u8, offset: usize, value: u32, seen: &mut Vec<Seen>) {
        if bar != REG {
            return;
        }
        self.learn_read(bar, offset, value);
        seen.push(Seen {
            lane: crate::Lane::Driver,
            kind: "mmio_read",
            decoded: decode::register(offset, value, false),
            raw: Vec::new(),
        });
    }

    fn learn_read(&mut self, bar: u8, offset: usize, value: u32) {
        if bar == REG {
            self.shadow.on_read(offset, value);
        }
    }

    fn write(
        &mut self,
        dma: &Dma,
        bar: u8,
        offset: usize,
        value: u64,
        _width: u8,
        seen: &mut Vec<Seen>,
    ) {
        let v = value as u32;
        match bar {
            REG => {
                seen.push(Seen::told(
                    "mmio_write",
                    decode::register(offset, v, true),
                    &[],
                ));
                if let Some(p) = self.shadow.on_write(dma, offset, v) {
                    let d = decode::request(&p.request);
                    seen.push(Seen::told("cmd", d, &p.request));
                }
            }
            UAR => {
                seen.push(Seen::told(
                    "doorbell",
                    decode::doorbell(offset, v),
                    &v.to_le_bytes(),
                ));
                let Some(p) = self.shadow.posted(offset % PAGE_SIZE, v) else {
                    return;
                };
                for (idx, at) in p.wqes {
                    let bytes = at.copy(0, at.len);
                    let (kind, d) = if p.send {
                        ("wqe", decode::send_wqe(&p.queue, idx, p.ty, &bytes))
                    } else {
                        ("rwqe", decode::recv_wqe(&p.queue, idx, &bytes))
                    };
                    seen.push(Seen::told(kind, d, &bytes));
                }
            }
            _ => {
                let d = Decoded::new(format!("MMIO BAR{bar}+{offset:#x} <- {value:#x}"));
                seen.push(Seen::told("mmio_write", d, &[]));
            }
        }
    }

    fn block(
        &mut self,
        bar: u8,
        offset: usize,
        _block: &[u64; 8],
        result: Option<&Result<(), HalError>>,
        seen: &mut Vec<Seen>,
    ) {
        // The device has no BlueFlame: a driver that tries is told so by
        // its platform or not, and the trace says which.
        let text = match result {
            None => format!("MMIO BAR{bar}+{offset:#x} 64-byte write (no PVRDMA register)"),
            Some(Ok(())) => return,
            Some(Err(e)) => format!("MMIO BAR{bar}+{offset:#x} 64-byte write refused: {e}"),
        };
        seen.push(Seen::told("mmio_write", Decoded::new(text), &[]));
    }

    fn look(&mut self, dma: &Dma, seen: &mut Vec<Seen>) {
        self.answered(dma, seen);
        for (cq, idx, at) in self.shadow.take_cqes() {
            let bytes = at.copy(0, at.len);
            seen.push(Seen::written("cqe", decode::cqe(cq, idx, &bytes), &bytes));
        }
        for (idx, at) in self.shadow.take_async_events() {
            let bytes = at.copy(0, at.len);
            seen.push(Seen::written(
                "eqe",
                decode::async_event(idx, &bytes),
                &bytes,
            ));
        }
        for (idx, at) in self.shadow.take_cq_notifications() {
            let bytes = at.copy(0, at.len);
            seen.push(Seen::written(
                "cqne",
                decode::cq_notification(idx, &bytes),
                &bytes,
            ));
        }
    }

    fn inject_write(
        &mut self,
        dma: &Dma,
        bar: u8,
        offset: usize,
        value: u64,
        _faults: &mut PvrdmaFaults,
        _injected: &mut Injected,
    ) {
        // Faults are on what the device writes back; the shadow learns the
        // slots and the commands that place rings.
        if bar == REG {
            self.shadow.on_write(dma, offset, value as u32);
        }
    }

    fn inject_look(&mut self, dma: &Dma, faults: &mut PvrdmaFaults, injected: &mut Injected) {
        if let Some((p, slot)) = self.shadow.take_response() {
            // Learned from what the device did, before it is changed.
            self.shadow.learn(dma, &p, &slot.copy(0, CMD_RESP_SIZE));
            if let Some((_, fault)) = faults.response.filter(|f| p.op == Some(f.0)) {
                match fault {
                    RespFault::Ack(a) => slot.overwrite(offset_of!(RespHdr, ack), &a.to_le_bytes()),
                    RespFault::Cookie(c) => {
                        slot.overwrite(offset_of!(RespHdr, response), &c.to_le_bytes())
                    }
                    RespFault::Err(e) => slot.overwrite(offset_of!(RespHdr, err), &[e]),
                }
                faults.response = None;
                injected.commands_changed += 1;
            }
        }
        for (cq, _, at) in self.shadow.take_cqes() {
            let Some(fault) = faults.cqe.take() else {
                continue;
            };
            match fault {
                CqeFault::Qp(q) => at.overwrite(offset_of!(Cqe, qp), &q.to_le_bytes()),
                CqeFault::Status(s) => at.overwrite(offset_of!(Cqe, status), &s.to_le_bytes()),
                CqeFault::Opcode(o) => at.overwrite(offset_of!(Cqe, opcode), &o.to_le_bytes()),
                CqeFault::ProducerIndex(i) => {
                    if let Some(ring) = self.shadow.cq(cq) {
                        ring.set_producer(i);
                    }
                }
            }
            injected.cqes_changed += 1;
        }
    }
}

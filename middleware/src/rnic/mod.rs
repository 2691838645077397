//! [`Rnic`]: the rnic device's boundary (docs/spec.md): BAR 0 registers,
//! the owner-bit command queue, doorbell pages and BlueFlame in BAR 2,
//! WQEs at the SQ, RQ and SRQ doorbells, CQEs and EQEs by owner bit.

pub mod decode;
mod shadow;

use std::mem::{offset_of, size_of};

use rnic_hw_regs::bar0;
use rnic_hw_regs::cmd::{CmdHeader, CmdOpcode, CmdStatus, CMD_IN_SIZE, CMD_STATUS_OFFSET};
use rnic_hw_regs::cqe::{Cqe, CQE_SIZE};
use rnic_hw_regs::eqe::EQE_SIZE;
use rnic_hw_regs::pci::{BAR_DOORBELL, BAR_REGS};
use rnic_hw_regs::uar::{self, WqDoorbell};
use rnic_queues::HalError;

use crate::boundary::{Boundary, Dma, Seen};
use crate::decode::Decoded;
use crate::fault::Injected;
use shadow::Shadow;

/// A change to the next CQE the device writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CqeFault {
    /// Its QP number (a QP the CQ does not serve).
    Qpn(u32),
    /// Its `wqe_counter` (outside the QP's outstanding WQEs).
    WqeCounter(u16),
    /// Its status byte (an unknown value).
    Status(u8),
    /// Its opcode byte.
    Opcode(u8),
}

/// The faults of the rnic device's interface.
#[derive(Debug, Clone, Default)]
pub struct RnicFaults {
    /// The next command of this opcode is refused with this status and
    /// syndrome: the device never runs it (it is handed an opcode it does
    /// not know in its place), as a device refuses a command.
    pub fail_command: Option<(CmdOpcode, CmdStatus, u32)>,
    /// The next successful command of this opcode reports this number as
    /// its output's first word (a CQN, QPN, PDN…), whatever the device
    /// chose.
    pub number: Option<(CmdOpcode, u32)>,
    /// The next CQE the device writes is changed so.
    pub cqe: Option<CqeFault>,
}

/// The opcode a refused command is handed to the device under: one no
/// version of the spec defines, which the device completes without doing
/// anything.
const UNKNOWN_OPCODE: u16 = 0xffff;

/// The rnic device's boundary.
#[derive(Default)]
pub struct Rnic {
    shadow: Shadow,
    /// Commands handed over under [`UNKNOWN_OPCODE`]: (index, their own
    /// opcode, the status and syndrome they complete with).
    refused: Vec<(u32, CmdOpcode, CmdStatus, u32)>,
}

impl Boundary for Rnic {
    type Faults = RnicFaults;
    const COMMAND_DOORBELL: (u8, usize) = (BAR_REGS, bar0::CMDQ_DB);

    fn read(&mut self, _dma: &Dma, bar: u8, offset: usize, value: u32, seen: &mut Vec<Seen>) {
        if bar == BAR_REGS {
            let d = decode::bar0_access(offset, value, false);
            seen.push(Seen {
                lane: crate::Lane::Driver,
                kind: "mmio_read",
                decoded: d,
                raw: Vec::new(),
            });
        }
    }

    fn write(
        &mut self,
        dma: &Dma,
        bar: u8,
        offset: usize,
        value: u64,
        width: u8,
        seen: &mut Vec<Seen>,
    ) {
        let st = &mut self.shadow;
        if bar == BAR_REGS {
            let v = value as u32;
            seen.push(Seen::told(
                "mmio_write",
                decode::bar0_access(offset, v, true),
                &[],
            ));
            for h in st.on_bar0_write(dma, offset, v) {
                let (_, d) = decode::command(&h.entry, h.index);
                seen.push(Seen::told("cmd", d, &h.entry[..64]));
            }
            return;
        }
        if bar == BAR_DOORBELL && width == 8 {
            let d = decode::doorbell(offset, value);
            seen.push(Seen::told("doorbell", d, &value.to_le_bytes()));
            let db = WqDoorbell::from_bits(value);
            let qpn = db.qpn();
            match offset % uar::UAR_PAGE_SIZE {
                uar::SQ_DB => {
                    let ty = st.qp_type(qpn);
                    for (idx, bytes) in st.send_wqes(qpn, db.pi()) {
                        let d = decode::send_wqe(qpn, idx, ty, &bytes);
                        seen.push(Seen::told("wqe", d, &bytes));
                    }
                }
                uar::RQ_DB => {
                    for (idx, bytes) in st.recv_wqes(qpn, db.pi()) {
                        let d = decode::recv_wqe(&format!("qpn {qpn}"), idx, &bytes);
                        seen.push(Seen::told("rwqe", d, &bytes));
                    }
                }
                // The doorbell's number field holds the SRQN.
                uar::SRQ_DB => {
                    for (idx, bytes) in st.srq_wqes(qpn, db.pi()) {
                        let d = decode::recv_wqe(&format!("srqn {qpn}"), idx, &bytes);
                        seen.push(Seen::told("rwqe", d, &bytes));
                    }
                }
                _ => {}
            }
            return;
        }
        let d = Decoded::new(format!("MMIO BAR{bar}+{offset:#x} <- {value:#x}"));
        seen.push(Seen::told("mmio_write", d, &[]));
    }

    fn block(
        &mut self,
        bar: u8,
        offset: usize,
        block: &[u64; 8],
        result: Option<&Result<(), HalError>>,
        seen: &mut Vec<Seen>,
    ) {
        let db = WqDoorbell::from_bits(block[0]);
        match result {
            None => {
                let bytes: Vec<u8> = block.iter().flat_map(|w| w.to_le_bytes()).collect();
                let ty = self.shadow.qp_type(db.qpn());
                let pi = u32::from(db.pi()).wrapping_sub(1);
                let w = decode::send_wqe(db.qpn(), pi, ty, &bytes[8..56]);
                let d = Decoded {
                    text: format!(
                        "MMIO BAR{bar}+{offset:#x} BlueFlame qpn {} pi {}: {}",
                        db.qpn(),
                        db.pi(),
                        w.text
                    ),
                    fields: w.fields,
                };
                seen.push(Seen::told("blueflame", d, &bytes));
            }
            Some(Ok(())) => self.shadow.blueflame_taken(db.qpn()),
            // A refused write published nothing: the driver rings the
            // doorbell for the same WQE.
            Some(Err(e)) => {
                let d = Decoded::new(format!(
                    "MMIO BAR{bar}+{offset:#x} BlueFlame write refused: {e}"
                ));
                seen.push(Seen::told("refused", d, &[]));
            }
        }
    }

    fn look(&mut self, dma: &Dma, seen: &mut Vec<Seen>) {
        let st = &mut self.shadow;
        for c in st.take_completions(dma) {
            let now = c.ring.copy(0, c.ring.len);
            let d = decode::command_done(&now, c.index, c.op);
            seen.push(Seen::written("cmd_done", d, &now));
            st.learn(dma, c.op, &c.entry, &now);
        }
        for q in st.take_cqes() {
            let bytes = q.ring.copy(q.at, CQE_SIZE);
            let d = decode::cqe(q.queue, q.idx, &bytes);
            seen.push(Seen::written("cqe", d, &bytes));
        }
        for q in st.take_eqes() {
            let bytes = q.ring.copy(q.at, EQE_SIZE);
            let d = decode::eqe(q.queue, q.idx, &bytes);
            seen.push(Seen::written("eqe", d, &bytes));
        }
    }

    fn inject_write(
        &mut self,
        dma: &Dma,
        bar: u8,
        offset: usize,
        value: u64,
        faults: &mut RnicFaults,
        injected: &mut Injected,
    ) {
        if bar != BAR_REGS {
            return;
        }
        for h in self.shadow.on_bar0_write(dma, offset, value as u32) {
            let Some((op, status, syndrome)) = faults.fail_command else {
                break;
            };
            let hdr: CmdHeader = crate::decode::read(&h.entry);
            if hdr.opcode.to_ne() != op.raw() {
                continue;
            }
            if let Some(ring) = self.shadow.cmd_entry(dma, h.index) {
                let unknown = UNKNOWN_OPCODE.to_le_bytes();
                ring.overwrite(offset_of!(CmdHeader, opcode), &unknown);
                self.refused.push((h.index, op, status, syndrome));
                faults.fail_command = None;
                injected.commands_changed += 1;
            }
        }
    }

    fn inject_look(&mut self, dma: &Dma, faults: &mut RnicFaults, injected: &mut Injected) {
        for c in self.shadow.take_completions(dma) {
            if let Some(i) = self.refused.iter().position(|r| r.0 == c.index) {
                let (_, op, status, syndrome) = self.refused.swap_remove(i);
                c.ring
                    .overwrite(offset_of!(CmdHeader, opcode), &op.raw().to_le_bytes());
                c.ring.overwrite(CMD_STATUS_OFFSET, &[status.raw()]);
                c.ring
                    .overwrite(offset_of!(CmdHeader, syndrome), &syndrome.to_le_bytes());
            }
            if let Some((op, n)) = faults.number {
                let ok = c.ring.copy(CMD_STATUS_OFFSET, 1)[0] == CmdStatus::Ok.raw();
                if c.op == Some(op) && ok {
                    let output = size_of::<CmdHeader>() + CMD_IN_SIZE;
                    c.ring.overwrite(output, &n.to_le_bytes());
                    faults.number = None;
                    injected.commands_changed += 1;
                }
            }
            let now = c.ring.copy(0, c.ring.len);
            self.shadow.learn(dma, c.op, &c.entry, &now);
        }
        for q in self.shadow.take_cqes() {
            let Some(fault) = faults.cqe.take() else {
                continue;
            };
            let (at, bytes): (usize, Vec<u8>) = match fault {
                CqeFault::Qpn(n) => (offset_of!(Cqe, qpn), n.to_le_bytes().to_vec()),
                CqeFault::WqeCounter(n) => (offset_of!(Cqe, wqe_counter), n.to_le_bytes().to_vec()),
                CqeFault::Opcode(n) => (offset_of!(Cqe, opcode), vec![n]),
                CqeFault::Status(n) => (offset_of!(Cqe, status), vec![n]),
            };
            q.ring.overwrite(q.at + at, &bytes);
            injected.cqes_changed += 1;
        }
    }
}

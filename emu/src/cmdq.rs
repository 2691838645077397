//! The command queue consumer: fetches entries, runs them, writes back
//! status and output, hands entries back to the driver.

use std::sync::atomic::{AtomicU8, Ordering};

use rnic_hw_regs::bar0::{FatalSyndrome, IntrCause};
use rnic_hw_regs::cmd::*;
use rnic_hw_regs::{le32, pci};

use crate::cmd;
use crate::iommu::{from_bytes, to_bytes, DmaRange};
use crate::regs;
use crate::state::State;

/// The command queue configured at enable time.
#[derive(Debug)]
pub(crate) struct CmdQueue {
    ring: DmaRange,
    log_size: u8,
    /// Free-running consumer index (16 bits significant, like the doorbell).
    ci: u16,
}

impl CmdQueue {
    pub(crate) fn new(ring: DmaRange, log_size: u8) -> Self {
        Self {
            ring,
            log_size,
            ci: 0,
        }
    }
}

/// A `CMDQ_DB` write: run every entry from the consumer index up to the
/// driver's producer index `v`.
pub(crate) fn doorbell(st: &mut State, v: u32) {
    if !st.dev.running() {
        log::warn!("CMDQ_DB {v:#x} ignored: device not running");
        return;
    }
    let Some(q) = st.dev.cmdq.as_ref() else {
        return;
    };
    let pi = v as u16;
    let pending = pi.wrapping_sub(q.ci);
    if pending as u32 > 1 << q.log_size {
        log::warn!(
            "CMDQ_DB producer index {pi} is {pending} entries ahead of {}: ignored",
            q.ci
        );
        return;
    }
    for _ in 0..pending {
        if !st.dev.running() {
            return;
        }
        run_one(st);
    }
}

fn run_one(st: &mut State) {
    // A command (a DEREG_MR) sees the data path's writes done.
    if let Some(p) = st.dev.iommu.process() {
        p.settle();
    }
    let Some(q) = st.dev.cmdq.as_mut() else {
        return;
    };
    let index = q.ci;
    let off = (index as usize & ((1 << q.log_size) - 1)) * CMD_ENTRY_SIZE;
    q.ci = q.ci.wrapping_add(1);
    let Some(p) = q.ring.at(&st.dev.iommu, off, CMD_ENTRY_SIZE) else {
        return regs::fatal(&mut st.dev, FatalSyndrome::CmdqDma);
    };
    // SAFETY: the owner byte lies inside the entry, which is inside a live
    // mapping (translated under the device lock); the driver accesses it
    // only atomically while the entry may be the device's.
    let owner = unsafe { AtomicU8::from_ptr(p.0.add(CMD_OWNER_OFFSET)) };
    // Acquire: the driver wrote the input before handing the entry over.
    if owner.load(Ordering::Acquire) != OWNER_DEVICE {
        log::warn!("command entry {index} not owned by the device: skipped");
        return;
    }
    let mut entry = [0u8; CMD_ENTRY_SIZE];
    // SAFETY: CMD_ENTRY_SIZE bytes inside a live mapping (translated under
    // the device lock); `entry` is a distinct local buffer.
    unsafe { std::ptr::copy_nonoverlapping(p.0, entry.as_mut_ptr(), CMD_ENTRY_SIZE) };
    let hdr: CmdHeader = from_bytes(&entry);
    let opcode = hdr.opcode.to_ne();
    let mut input = [0u8; CMD_IN_SIZE];
    input.copy_from_slice(&entry[CMD_IN_OFFSET..CMD_IN_OFFSET + CMD_IN_SIZE]);
    let mut output = [0u8; CMD_OUT_SIZE];
    let uid = hdr.uid.to_ne();
    let (status, syndrome) = if hdr.op_mod.to_ne() != 0 {
        (CmdStatus::BadParam, 0)
    } else if uid != 0 && st.dev.uctxs.get(uid).is_none() {
        // No such context: the command is refused whole.
        (CmdStatus::BadResource, 0)
    } else {
        match cmd::execute(st, uid, opcode, &input, &mut output) {
            Ok(()) => (CmdStatus::Ok, 0),
            Err(e) => (e.status, e.syndrome),
        }
    };
    if status == CmdStatus::Ok {
        log::debug!("command {opcode:#06x} (entry {index}): ok");
    } else {
        log::debug!("command {opcode:#06x} (entry {index}): {status:?}, syndrome {syndrome}");
    }
    let out_hdr = CmdHeader {
        status: status.raw(),
        syndrome: le32::from_ne(syndrome),
        ..hdr
    };
    let mut hdr_bytes = [0u8; 16];
    to_bytes(&out_hdr, &mut hdr_bytes);
    // `execute` needed the whole state, so look the entry up again (a cache
    // hit: commands never change the IOMMU).
    let Some(q) = st.dev.cmdq.as_mut() else {
        return;
    };
    let Some(p) = q.ring.at(&st.dev.iommu, off, CMD_ENTRY_SIZE) else {
        return regs::fatal(&mut st.dev, FatalSyndrome::CmdqDma);
    };
    // SAFETY: the entry lies inside a live mapping (translated under the
    // device lock); the copies stay within its CMD_ENTRY_SIZE bytes and skip
    // the owner byte, which is written last.
    unsafe {
        std::ptr::copy_nonoverlapping(output.as_ptr(), p.0.add(CMD_OUT_OFFSET), CMD_OUT_SIZE);
        std::ptr::copy_nonoverlapping(hdr_bytes.as_ptr(), p.0, CMD_OWNER_OFFSET);
        std::ptr::copy_nonoverlapping(
            hdr_bytes[CMD_OWNER_OFFSET + 1..].as_ptr(),
            p.0.add(CMD_OWNER_OFFSET + 1),
            16 - CMD_OWNER_OFFSET - 1,
        );
    }
    // SAFETY: the owner byte lies inside the same live entry; the driver
    // polls it only atomically.
    let owner = unsafe { AtomicU8::from_ptr(p.0.add(CMD_OWNER_OFFSET)) };
    // Release: output, status and syndrome must be visible before the
    // driver sees the owner byte clear.
    owner.store(0, Ordering::Release);
    regs::raise_cause(
        &mut st.dev,
        IntrCause::new().with_cmd_done(true),
        pci::MSIX_ASYNC_VECTOR,
    );
}

//! The command layer: commands from any number of threads in flight at
//! once on the command queue, each waiting for its own entry.
//!
//! A lock is held only to write an entry and ring the doorbell; the wait
//! for the device is outside it, first spinning briefly (a command takes
//! microseconds), then sleeping on the command-completion interrupt where
//! the platform has interrupts.

use alloc::boxed::Box;
use alloc::format;
use alloc::vec::Vec;
use core::sync::atomic::{AtomicU8, Ordering};

use rnic_hw_regs::bar0::{self, FatalSyndrome, IntrCause, Status};
use rnic_hw_regs::cmd::{
    CmdHeader, CmdOpcode, CmdStatus, CMD_ENTRY_SIZE, CMD_IN_OFFSET, CMD_IN_SIZE, CMD_OUT_OFFSET,
    CMD_OUT_SIZE, CMD_OWNER_OFFSET, OWNER_DEVICE,
};
use rnic_hw_regs::pci::{BAR_REGS, MSIX_ASYNC_VECTOR};
use rnic_hw_regs::{le16, le32};
use rnic_queues::{DmaRegion, Hal, HalError, Pod};
use spin::Mutex;

use crate::error::{command_failed, Error, ErrorKind, Result};

/// A command queue entry's use by the driver.
mod slot {
    /// No command uses it.
    pub(super) const FREE: u8 = 0;
    /// A command was issued in it and its caller waits for it.
    pub(super) const IN_FLIGHT: u8 = 1;
    /// Its command's caller gave up (timeout, fatal device): the entry is
    /// reused once the device has cleared its owner byte.
    pub(super) const ABANDONED: u8 = 2;
}

/// How long a command's caller spins before it sleeps on the interrupt.
const SPIN_NS: u64 = 20_000;
/// Longest sleep between two looks at the entry: another caller may take
/// the interrupt of this one's completion.
const SLEEP_NS: u64 = 1_000_000;

/// The command queue: a ring of 512-byte entries in DMA memory.
pub(crate) struct CmdQueue {
    /// View of the command queue memory (owned by the device handle).
    mem: DmaRegion,
    log_size: u32,
    timeout_ns: u64,
    submit: Mutex<Submit>,
    /// Each entry's [`slot`] state.
    slots: Box<[AtomicU8]>,
}

/// The producer side.
struct Submit {
    /// Free-running producer index.
    pi: u32,
    /// Token of the last command.
    token: u8,
}

impl CmdQueue {
    /// A command queue over `mem` (at least `CMD_ENTRY_SIZE << log_size`
    /// bytes) that gives up on a command after `timeout_ns`.
    pub(crate) fn new(mem: DmaRegion, log_size: u32, timeout_ns: u64) -> Self {
        assert!(mem.len() >= CMD_ENTRY_SIZE << log_size);
        Self {
            mem,
            log_size,
            timeout_ns,
            submit: Mutex::new(Submit { pi: 0, token: 0 }),
            slots: (0..1usize << log_size)
                .map(|_| AtomicU8::new(slot::FREE))
                .collect::<Vec<_>>()
                .into(),
        }
    }

    /// Executes `op` with `input` and returns its output. Gives up after
    /// the timeout, or as soon as the device is seen in the fatal state
    /// (`STATUS` is read every [`FATAL_CHECK_SPINS`] polls of the entry,
    /// and after every sleep); the outcome is then unknown, as for a
    /// timeout.
    pub(crate) fn exec<H: Hal, I: Pod, O: Pod>(
        &self,
        hal: &H,
        op: CmdOpcode,
        input: &I,
        uid: u32,
    ) -> Result<O> {
        const { assert!(core::mem::size_of::<I>() <= CMD_IN_SIZE) };
        const { assert!(core::mem::size_of::<O>() <= CMD_OUT_SIZE) };
        let start = hal.now_ns();
        let (index, base) = self.issue(hal, op, input, uid, start)?;
        if let Err(e) = self.wait(hal, op, base, start) {
            self.slots[index].store(slot::ABANDONED, Ordering::Release);
            return Err(e);
        }
        let hdr: CmdHeader = self.mem.read(base);
        let result = match CmdStatus::from_raw(hdr.status) {
            Some(CmdStatus::Ok) => Ok(self.mem.read(base + CMD_OUT_OFFSET)),
            _ => {
                let e = command_failed(op, hdr.status, hdr.syndrome.to_ne());
                log::debug!("{e}");
                Err(e)
            }
        };
        // Release: the entry is read before another command rewrites it.
        self.slots[index].store(slot::FREE, Ordering::Release);
        result
    }

    /// Writes the command into the next entry and rings the doorbell;
    /// returns the entry's index and offset. Waits (without the lock) for
    /// an entry still in use by a command in flight.
    fn issue<H: Hal, I: Pod>(
        &self,
        hal: &H,
        op: CmdOpcode,
        input: &I,
        uid: u32,
        start: u64,
    ) -> Result<(usize, usize)> {
        loop {
            let mut sub = self.submit.lock();
            let index = (sub.pi & ((1 << self.log_size) - 1)) as usize;
            let base = index * CMD_ENTRY_SIZE;
            // Acquire: the device finished with the entry (its last output)
            // before it cleared the owner byte; the entry is rewritten below.
            let device_owns = self.mem.load_u8_acquire(base + CMD_OWNER_OFFSET) == OWNER_DEVICE;
            match self.slots[index].load(Ordering::Acquire) {
                slot::ABANDONED if device_owns => {
                    // Not issued: the caller knows the device never saw it.
                    return Err(Error::not_issued(
                        ErrorKind::TimedOut,
                        format!(
                            "command {op:?} not issued: command queue entry {index} is still \
                             owned by the device (an earlier command timed out)"
                        ),
                    ));
                }
                slot::IN_FLIGHT => {
                    drop(sub);
                    if hal.now_ns().saturating_sub(start) > self.timeout_ns {
                        return Err(Error::not_issued(
                            ErrorKind::TimedOut,
                            format!(
                                "command {op:?} not issued: every command queue entry stayed \
                                 in use for {} ms",
                                self.timeout_ns / 1_000_000
                            ),
                        ));
                    }
                    hal.relax();
                    continue;
                }
                _ => {}
            }
            self.slots[index].store(slot::IN_FLIGHT, Ordering::Relaxed);
            self.mem.write_bytes(base, &[0; CMD_ENTRY_SIZE]);
            self.mem.write(base + CMD_IN_OFFSET, *input);
            sub.token = sub.token.wrapping_add(1);
            // The owner byte stays 0 here: it is handed over on its own below.
            let hdr = CmdHeader {
                opcode: le16::from_ne(op.raw()),
                token: sub.token,
                uid: le32::from_ne(uid),
                ..CmdHeader::default()
            };
            self.mem.write(base, hdr);
            // Release: the whole entry must be visible before the device can
            // see the owner byte set (the doorbell below is ordered after this
            // store by the Hal contract).
            self.mem
                .store_u8_release(base + CMD_OWNER_OFFSET, OWNER_DEVICE);
            sub.pi = sub.pi.wrapping_add(1);
            hal.mmio_write32(BAR_REGS, bar0::CMDQ_DB, sub.pi);
            return Ok((index, base));
        }
    }

    /// Waits until the device has completed the command in the entry at
    /// `base`.
    fn wait<H: Hal>(&self, hal: &H, op: CmdOpcode, base: usize, start: u64) -> Result<()> {
        // Acquire: the device wrote status and output before clearing the
        // owner byte.
        let done = || self.mem.load_u8_acquire(base + CMD_OWNER_OFFSET) != OWNER_DEVICE;
        let mut spins = 0u32;
        let mut irq = true;
        while !done() {
            let elapsed = hal.now_ns().saturating_sub(start);
            if elapsed > self.timeout_ns {
                return Err(self.timeout_error(hal, op));
            }
            spins = spins.wrapping_add(1);
            let sleep = irq && elapsed > SPIN_NS;
            // A fatal device executes no command: no use waiting for it.
            if sleep || spins % FATAL_CHECK_SPINS == 0 {
                fatal_check(hal, op)?;
            }
            if !sleep {
                hal.relax();
                continue;
            }
            // The cause raises vector 0 only when it becomes set: clear
            // it, look once more, then sleep until the next completion.
            let cause = IntrCause::new().with_cmd_done(true).into_bits().to_ne();
            hal.mmio_write32(BAR_REGS, bar0::INTR_CAUSE, cause);
            if done() {
                break;
            }
            let left = self.timeout_ns - elapsed;
            match hal.wait_irq(MSIX_ASYNC_VECTOR, left.min(SLEEP_NS)) {
                // A signal handler ran: the command is still under way.
                Ok(_) | Err(HalError::Interrupted) => {}
                Err(HalError::Unsupported) => irq = false,
                Err(e) => {
                    log::warn!("waiting for the command interrupt: {e}; polling instead");
                    irq = false;
                }
            }
        }
        Ok(())
    }

    fn timeout_error<H: Hal>(&self, hal: &H, op: CmdOpcode) -> Error {
        let status = Status::from_bits(le32::from_ne(hal.mmio_read32(BAR_REGS, bar0::STATUS)));
        let why = if status.fatal() {
            let raw = hal.mmio_read32(BAR_REGS, bar0::FATAL_SYNDROME);
            format!(
                "; the device is in the fatal state: {}",
                describe_fatal(raw)
            )
        } else if !status.enabled() {
            alloc::string::String::from("; the device is not enabled")
        } else {
            alloc::string::String::new()
        };
        log::error!("command {op:?} timed out{why}");
        Error::new(
            ErrorKind::TimedOut,
            format!(
                "command {op:?} timed out after {} ms{why}",
                self.timeout_ns / 1_000_000
            ),
        )
    }
}

/// Polls of a command's owner byte between two reads of `STATUS`.
const FATAL_CHECK_SPINS: u32 = 256;

/// Fails command `op` if the device is in the fatal state.
fn fatal_check<H: Hal>(hal: &H, op: CmdOpcode) -> Result<()> {
    let status = Status::from_bits(le32::from_ne(hal.mmio_read32(BAR_REGS, bar0::STATUS)));
    if !status.fatal() {
        return Ok(());
    }
    let raw = hal.mmio_read32(BAR_REGS, bar0::FATAL_SYNDROME);
    log::error!("command {op:?} abandoned: the device is fatal");
    Err(Error::new(
        ErrorKind::TimedOut,
        format!(
            "command {op:?} abandoned: the device is in the fatal state: {}",
            describe_fatal(raw)
        ),
    ))
}

/// A readable description of a `FATAL_SYNDROME` value.
pub(crate) fn describe_fatal(raw: u32) -> alloc::string::String {
    let what = match FatalSyndrome::from_raw(raw) {
        Some(FatalSyndrome::None) => "no syndrome",
        Some(FatalSyndrome::CmdqDma) => "the command queue IOVA is not mapped",
        Some(FatalSyndrome::EqDma) => "the event queue IOVA is not mapped",
        Some(FatalSyndrome::BadConfig) => {
            "invalid configuration (size out of range or unaligned base)"
        }
        Some(FatalSyndrome::Internal) => "internal device error",
        None => "unknown syndrome",
    };
    match FatalSyndrome::from_raw(raw) {
        Some(s) => format!("{s:?} ({what})"),
        None => format!("{raw:#x} ({what})"),
    }
}

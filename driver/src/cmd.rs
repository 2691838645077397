//! The command layer: one command in flight at a time on the command queue.

use alloc::format;
use rnic_hw_regs::bar0::{self, FatalSyndrome, Status};
use rnic_hw_regs::cmd::{
    CmdHeader, CmdOpcode, CmdStatus, CMD_ENTRY_SIZE, CMD_IN_OFFSET, CMD_IN_SIZE, CMD_OUT_OFFSET,
    CMD_OUT_SIZE, CMD_OWNER_OFFSET, OWNER_DEVICE,
};
use rnic_hw_regs::pci::BAR_REGS;
use rnic_hw_regs::{le16, le32};
use rnic_queues::{DmaRegion, Hal, Pod};
use spin::Mutex;

use crate::error::{CmdFailure, Error, ErrorKind, Result};

/// The command queue: a ring of 512-byte entries in DMA memory, of which the
/// driver uses one at a time.
pub(crate) struct CmdQueue {
    /// View of the command queue memory (owned by the device handle).
    mem: DmaRegion,
    log_size: u32,
    timeout_ns: u64,
    state: Mutex<CmdState>,
}

struct CmdState {
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
            state: Mutex::new(CmdState { pi: 0, token: 0 }),
        }
    }

    /// Executes `op` with `input` and returns its output. Gives up after
    /// the timeout, or as soon as the device is seen in the fatal state
    /// (`STATUS` is read every [`FATAL_CHECK_SPINS`] polls of the entry); the
    /// outcome is then unknown, as for a timeout.
    pub(crate) fn exec<H: Hal, I: Pod, O: Pod>(
        &self,
        hal: &H,
        op: CmdOpcode,
        input: &I,
    ) -> Result<O> {
        const { assert!(core::mem::size_of::<I>() <= CMD_IN_SIZE) };
        const { assert!(core::mem::size_of::<O>() <= CMD_OUT_SIZE) };
        let mut st = self.state.lock();
        let slot = (st.pi & ((1 << self.log_size) - 1)) as usize;
        let base = slot * CMD_ENTRY_SIZE;
        // Acquire: the device finished with the entry (its last output) before
        // it cleared the owner byte; the entry is rewritten below.
        if self.mem.load_u8_acquire(base + CMD_OWNER_OFFSET) == OWNER_DEVICE {
            // Not issued: the caller knows the device never saw it.
            return Err(Error::not_issued(
                ErrorKind::TimedOut,
                format!(
                    "command {op:?} not issued: command queue entry {slot} is still owned by \
                     the device (an earlier command timed out)"
                ),
            ));
        }
        self.mem.write_bytes(base, &[0; CMD_ENTRY_SIZE]);
        self.mem.write(base + CMD_IN_OFFSET, *input);
        st.token = st.token.wrapping_add(1);
        // The owner byte stays 0 here: it is handed over on its own below.
        let hdr = CmdHeader {
            opcode: le16::from_ne(op.raw()),
            token: st.token,
            ..CmdHeader::default()
        };
        self.mem.write(base, hdr);
        // Release: the whole entry must be visible before the device can see
        // the owner byte set (the doorbell below is ordered after this store
        // by the Hal contract).
        self.mem
            .store_u8_release(base + CMD_OWNER_OFFSET, OWNER_DEVICE);
        st.pi = st.pi.wrapping_add(1);
        hal.mmio_write32(BAR_REGS, bar0::CMDQ_DB, st.pi);

        let start = hal.now_ns();
        let mut spins = 0u32;
        // Acquire: the device wrote status and output before clearing the
        // owner byte.
        while self.mem.load_u8_acquire(base + CMD_OWNER_OFFSET) == OWNER_DEVICE {
            if hal.now_ns().saturating_sub(start) > self.timeout_ns {
                return Err(self.timeout_error(hal, op));
            }
            // A fatal device executes no command: no use waiting for it.
            spins = spins.wrapping_add(1);
            if spins % FATAL_CHECK_SPINS == 0 {
                let status =
                    Status::from_bits(le32::from_ne(hal.mmio_read32(BAR_REGS, bar0::STATUS)));
                if status.fatal() {
                    let raw = hal.mmio_read32(BAR_REGS, bar0::FATAL_SYNDROME);
                    log::error!("command {op:?} abandoned: the device is fatal");
                    return Err(Error::new(
                        ErrorKind::TimedOut,
                        format!(
                            "command {op:?} abandoned: the device is in the fatal state: {}",
                            describe_fatal(raw)
                        ),
                    ));
                }
            }
            hal.relax();
        }
        let hdr: CmdHeader = self.mem.read(base);
        match CmdStatus::from_raw(hdr.status) {
            Some(CmdStatus::Ok) => Ok(self.mem.read(base + CMD_OUT_OFFSET)),
            status => {
                let failure = CmdFailure {
                    opcode: op,
                    status: status.unwrap_or(CmdStatus::Internal),
                    syndrome: hdr.syndrome.to_ne(),
                };
                log::debug!("command {op:?} failed: {failure:?}");
                Err(Error::command_failed(failure, hdr.status))
            }
        }
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

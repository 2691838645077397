//! The command channel: one request slot and one response slot, one
//! command at a time.
//!
//! A command is written into the request slot with a fresh cookie in its
//! header, then `bar1::REQUEST` is written. The device answers in the
//! response slot (the cookie repeated, `ack` = opcode | `RESP_BIT`, an
//! errno in `err`), sets `bar1::ERR` (0, a negative errno, or 0xffff for a
//! command it does not implement, with no response written) and raises the
//! response vector, which the driver waits for. Nothing the device leaves
//! there is trusted: a response
//! whose cookie or `ack` is not the command's is an error, and so is one
//! that never comes.

use alloc::format;

use rnic_pvrdma_regs::bar::REG;
use rnic_pvrdma_regs::bar1::{IntrVector, ERR, REQUEST};
use rnic_pvrdma_regs::cmd::{CmdHdr, CmdOpcode, RespHdr, CMD_REQ_SIZE, CMD_RESP_SIZE};
use rnic_pvrdma_regs::{le32, le64};
use rnic_queues::{DmaRegion, Hal, HalError, Pod};
use rnic_verbs::{Error, ErrorKind, Refusal, Result};

/// What `ERR` reads after a command the device does not implement.
const ERR_UNSUPPORTED: u32 = 0xffff;

/// What the driver knows of the command slots: the last cookie, and
/// whether the device may still answer a command the driver gave up on.
#[derive(Debug)]
pub(crate) struct CmdChannel {
    cookie: u64,
    timeout_ns: u64,
    /// A command timed out: the device may still answer it, so the slots
    /// are not reused until the device is reset.
    abandoned: bool,
}

impl CmdChannel {
    pub(crate) fn new(timeout_ns: u64) -> Self {
        Self {
            cookie: 0,
            timeout_ns,
            abandoned: false,
        }
    }

    /// Runs command `op` with request `req` (a request struct, whose
    /// header is filled in here) through the request slot `slot` and the
    /// response slot `resp`, and returns its response `O`.
    pub(crate) fn exec<H: Hal, I: Pod, O: Pod>(
        &mut self,
        hal: &H,
        (slot, resp): (&DmaRegion, &DmaRegion),
        op: CmdOpcode,
        req: &I,
    ) -> Result<O> {
        const { assert!(core::mem::size_of::<I>() <= CMD_REQ_SIZE) };
        const { assert!(core::mem::size_of::<I>() >= core::mem::size_of::<CmdHdr>()) };
        const { assert!(core::mem::size_of::<O>() <= CMD_RESP_SIZE) };
        const { assert!(core::mem::size_of::<O>() >= core::mem::size_of::<RespHdr>()) };
        if self.abandoned {
            return Err(Error::not_issued(
                ErrorKind::TimedOut,
                format!(
                    "command {op:?} not issued: an earlier command timed out and the device may \
                     still answer it"
                ),
            ));
        }
        self.cookie = self.cookie.wrapping_add(1);
        let cookie = self.cookie;
        // The slot holds nothing of an earlier, longer request.
        slot.write_bytes(0, &[0; CMD_REQ_SIZE]);
        slot.write(0, *req);
        slot.write(
            0,
            CmdHdr {
                response: le64::from_ne(cookie),
                cmd: le32::from_ne(op.raw()),
                reserved: le32::from_ne(0),
            },
        );
        // A response left from an earlier command cannot pass for this one.
        resp.write(0, RespHdr::default());
        // The Hal orders this write after the stores to the slots.
        hal.mmio_write32(REG, REQUEST, 0);
        self.wait(hal, op)?;
        let err_reg = hal.mmio_read32(REG, ERR);
        let hdr: RespHdr = resp.read(0);
        if err_reg == ERR_UNSUPPORTED {
            return Err(Error::refused(
                ErrorKind::NotSupported,
                format!("the device does not implement command {op:?}"),
                Refusal {
                    command: op.raw(),
                    status: ERR_UNSUPPORTED,
                    detail: 0,
                },
            ));
        }
        if hdr.response.to_ne() != cookie {
            return Err(Error::new(
                ErrorKind::Io,
                format!(
                    "command {op:?}: the response's cookie is {:#x}, not the command's {cookie:#x}",
                    hdr.response.to_ne()
                ),
            ));
        }
        if hdr.ack.to_ne() != op.ack() {
            return Err(Error::new(
                ErrorKind::Io,
                format!(
                    "command {op:?}: the response's ack is {:#x}, not {:#x}",
                    hdr.ack.to_ne(),
                    op.ack()
                ),
            ));
        }
        // The error register holds a negative errno where `err` holds it
        // positive; either says the command failed.
        let errno = match (hdr.err, err_reg) {
            (0, 0) => return Ok(resp.read(0)),
            (0, reg) => (reg as i32).unsigned_abs(),
            (e, _) => u32::from(e),
        };
        Err(Error::refused(
            kind_of_errno(errno),
            format!("command {op:?} failed: errno {errno} (error register {err_reg:#x})"),
            Refusal {
                command: op.raw(),
                status: errno,
                detail: err_reg,
            },
        ))
    }

    /// Waits for the response vector: the device raises it once the
    /// response and the error register are written.
    fn wait<H: Hal>(&mut self, hal: &H, op: CmdOpcode) -> Result<()> {
        let start = hal.now_ns();
        loop {
            let waited = hal.now_ns().saturating_sub(start);
            let Some(left) = self.timeout_ns.checked_sub(waited).filter(|&l| l > 0) else {
                self.abandoned = true;
                return Err(Error::new(
                    ErrorKind::TimedOut,
                    format!(
                        "command {op:?}: no response in {} ms",
                        self.timeout_ns / 1_000_000
                    ),
                ));
            };
            match hal.wait_irq(IntrVector::Response.raw(), left) {
                Ok(true) => return Ok(()),
                // A signal handler ran: the command is still under way.
                Ok(false) | Err(HalError::Interrupted) => {}
                Err(HalError::Unsupported) => {
                    return Err(Error::new(
                        ErrorKind::NotSupported,
                        "PVRDMA answers commands by interrupt, which this platform does not \
                         deliver",
                    ))
                }
                Err(e) => return Err(Error::hal(e, "waiting for a command's response")),
            }
        }
    }
}

/// The error kind of an errno a command answered.
fn kind_of_errno(errno: u32) -> ErrorKind {
    match errno {
        22 => ErrorKind::InvalidArgument,
        12 | 28 => ErrorKind::NoMemory,
        16 => ErrorKind::Busy,
        14 => ErrorKind::Fault,
        19 => ErrorKind::NoDevice,
        38 | 95 => ErrorKind::NotSupported,
        110 => ErrorKind::TimedOut,
        _ => ErrorKind::Io,
    }
}

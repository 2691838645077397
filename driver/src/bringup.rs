//! Device bring-up and shutdown: reset, identification, capabilities,
//! command queue and event queue configuration, enable.

use alloc::format;
use alloc::sync::Weak;
use alloc::vec::Vec;
use core::sync::atomic::AtomicBool;
use rnic_hw_regs::bar0::{
    self, CmdqCtrl, Ctrl, DevCaps, EqCtrl, QueueCaps, Status, Version, MAGIC, VERSION_MAJOR,
};
use rnic_hw_regs::cmd::{CmdOpcode, CMD_ENTRY_SIZE};
use rnic_hw_regs::eqe::EQE_SIZE;
use rnic_hw_regs::le32;
use rnic_hw_regs::pci::BAR_REGS;
use rnic_queues::{DmaRegion, Hal, HalError, Pod};
use spin::Mutex;

use crate::cmd::{describe_fatal, CmdQueue};
use crate::context::ContextCore;
use crate::dma::view;
use crate::error::{Error, ErrorKind, Result};
use crate::event::EventQueue;

/// Bring-up parameters for [`crate::Context::open_with`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Config {
    /// How long a device reset may take.
    pub reset_timeout_ns: u64,
    /// How long the device may take to report `STATUS.enabled`.
    pub enable_timeout_ns: u64,
    /// How long one command may take.
    pub cmd_timeout_ns: u64,
    /// log2 of the command queue entries wanted (capped by the device, and
    /// at 2^15 by the 16-bit producer index).
    pub log_cmdq_size: u8,
    /// log2 of the event queue entries wanted (capped by the device, and
    /// at 2^23 by the 24-bit consumer index).
    pub log_eq_size: u8,
    /// Reset and take a device that is already up (`STATUS.enabled`), as
    /// after a driver that died without closing it; otherwise opening it
    /// fails with `EBUSY`, leaving the other driver's contexts alone.
    pub take_over: bool,
    /// Doorbell pages each context asks for (at least 1, at most the
    /// device's).
    pub uar_pages_per_context: u32,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            reset_timeout_ns: 1_000_000_000,
            enable_timeout_ns: 1_000_000_000,
            cmd_timeout_ns: 5_000_000_000,
            log_cmdq_size: 4,
            log_eq_size: 8,
            take_over: false,
            uar_pages_per_context: 8,
        }
    }
}

/// Limits read from the `CAP_*` registers.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Caps {
    pub(crate) num_ports: u8,
    pub(crate) log_max_cmdq: u8,
    pub(crate) log_max_eq: u8,
    pub(crate) log_max_wq: u8,
    pub(crate) log_max_cqe: u8,
    pub(crate) max_sge: u32,
    pub(crate) max_inline: u32,
    pub(crate) max_wqe_bbs: u32,
    pub(crate) uar_pages: u32,
    /// UD QPs are implemented.
    pub(crate) ud: bool,
    /// UC QPs are implemented.
    pub(crate) uc: bool,
    /// The device takes BlueFlame writes (spec 8.1).
    pub(crate) bf: bool,
    /// The device has the general services QP (spec 13.8.1).
    pub(crate) gsi: bool,
    /// Completion EQs `CREATE_EQ` can create.
    pub(crate) max_eq: u32,
    /// MSI-X vectors (at least 1).
    pub(crate) msix_vectors: u16,
}

impl Caps {
    /// The vector EQ 0 interrupts on: vector 1 where there is one, so that
    /// waiting for events and waiting for commands (on vector 0, with the
    /// fatal state) do not take each other's interrupts.
    pub(crate) fn async_vector(&self) -> u16 {
        u16::from(self.msix_vectors > 1)
    }

    /// The vectors completion channels may take: all but vector 0 and EQ
    /// 0's.
    pub(crate) fn comp_vectors(&self) -> core::ops::Range<u16> {
        (self.async_vector() + 1).min(self.msix_vectors)..self.msix_vectors
    }
}

impl Caps {
    fn read<H: Hal>(hal: &H) -> Result<Self> {
        let reg = |off| le32::from_ne(hal.mmio_read32(BAR_REGS, off));
        let dev = DevCaps::from_bits(reg(bar0::CAP_DEV));
        let queue = QueueCaps::from_bits(reg(bar0::CAP_QUEUE));
        let caps = Self {
            num_ports: dev.num_ports(),
            log_max_cmdq: dev.log_max_cmdq(),
            log_max_eq: dev.log_max_eq(),
            ud: dev.ud(),
            uc: dev.uc(),
            bf: dev.bf(),
            gsi: dev.gsi(),
            log_max_wq: queue.log_max_wq(),
            log_max_cqe: queue.log_max_cqe(),
            max_sge: queue.max_sge().into(),
            max_inline: u32::from(queue.max_inline_16()) * 16,
            max_wqe_bbs: queue.max_wqe_bbs().into(),
            uar_pages: hal.mmio_read32(BAR_REGS, bar0::CAP_UAR_PAGES),
            max_eq: hal.mmio_read32(BAR_REGS, bar0::CAP_MAX_EQ),
            // A device before 1.3 reads 0 here: it has vector 0.
            msix_vectors: hal.mmio_read32(BAR_REGS, bar0::CAP_MSIX).clamp(1, 2048) as u16,
        };
        log::debug!(
            "device caps: {dev:?} {queue:?}, {} doorbell pages",
            caps.uar_pages
        );
        if caps.num_ports == 0 || caps.uar_pages == 0 || caps.max_wqe_bbs == 0 {
            return Err(Error::new(
                ErrorKind::NoDevice,
                format!("device reports unusable capabilities: {caps:?}"),
            ));
        }
        Ok(caps)
    }
}

/// Memory handed to the device: a `dma_alloc` region or a `dma_map`
/// mapping of the caller's memory.
pub(crate) enum DeviceMem {
    /// From [`Hal::dma_alloc`].
    Region(DmaRegion),
    /// Exactly the IOVA range of a [`Hal::dma_map`], not yet unmapped.
    Mapping { iova: u64, len: usize },
}

impl DeviceMem {
    /// Frees the region or removes the mapping.
    ///
    /// # Safety
    ///
    /// `self` came from `hal`, and the device no longer uses it: the
    /// object using it is destroyed, the device refused (or never got)
    /// the command that would have used it, or the device was reset.
    pub(crate) unsafe fn release<H: Hal>(self, hal: &H) {
        match self {
            // SAFETY: from this platform's dma_alloc (the caller's
            // contract), and the device no longer uses it.
            Self::Region(region) => unsafe { hal.dma_free(region) },
            Self::Mapping { iova, len } => {
                // SAFETY: exactly an earlier dma_map, not yet unmapped (the
                // caller's contract).
                if let Err(e) = unsafe { hal.dma_unmap(iova, len) } {
                    log::error!("unmapping {len} bytes at IOVA {iova:#x}: {e}");
                }
            }
        }
    }
}

/// A running device: the platform, its capabilities, the command queue and
/// the event queue. Dropping it resets the device, then frees both queues
/// and the memory orphaned while it ran.
pub(crate) struct Device<H: Hal> {
    pub(crate) hal: H,
    pub(crate) caps: Caps,
    pub(crate) cmd: CmdQueue,
    pub(crate) eq: Mutex<EventQueue>,
    /// The open contexts, for routing EQ 0's events to the one owning
    /// their object.
    pub(crate) contexts: Mutex<Vec<Weak<ContextCore<H>>>>,
    /// Which completion vectors a channel has (of any context).
    pub(crate) vectors_used: Mutex<Vec<bool>>,
    cmdq_mem: Option<DmaRegion>,
    eq_mem: Option<DmaRegion>,
    /// Memory the device may still use although the driver is done with
    /// it (a create command that timed out, a destroy command that
    /// failed): kept until the reset at shutdown stops all device DMA.
    orphans: Mutex<Vec<DeviceMem>>,
    reset_timeout_ns: u64,
    /// BlueFlame writes are in use: the device takes them, and the
    /// platform has not refused one.
    pub(crate) bf: AtomicBool,
}

/// `1 << log` entries of `entry` bytes, if that fits in a `usize`.
pub(crate) fn ring_bytes(entry: usize, log: u32) -> Option<usize> {
    1usize.checked_shl(log)?.checked_mul(entry)
}

impl<H: Hal> Device<H> {
    /// Resets the device, checks it, configures its queues and enables it.
    pub(crate) fn bring_up(hal: H, cfg: &Config) -> Result<Self> {
        // ID and VERSION are constants, read before anything is written: a
        // device that is no rnic (or another version) gets no write.
        let id = hal.mmio_read32(BAR_REGS, bar0::ID);
        if id != MAGIC {
            return Err(Error::new(
                ErrorKind::NoDevice,
                format!("ID register reads {id:#010x}, not the rnic magic {MAGIC:#010x}"),
            ));
        }
        let version = Version::from_bits(le32::from_ne(hal.mmio_read32(BAR_REGS, bar0::VERSION)));
        if version.major() != VERSION_MAJOR {
            return Err(Error::new(
                ErrorKind::NoDevice,
                format!(
                    "device interface version {}.{} is not supported (major {VERSION_MAJOR} is)",
                    version.major(),
                    version.minor()
                ),
            ));
        }
        // A device that is up belongs to another driver instance: resetting
        // it would pull every object from under that one's contexts.
        if read_status(&hal).enabled() && !cfg.take_over {
            return Err(Error::new(
                ErrorKind::Busy,
                "the device is in use (STATUS.enabled): open further contexts with \
                 Context::open_another, or set Config::take_over",
            ));
        }
        reset(&hal, cfg.reset_timeout_ns)?;
        let caps = Caps::read(&hal)?;
        // Whatever the configuration asks and the device claims, the rings
        // stay within their index widths: the command queue's producer
        // index has 16 significant bits, the event queue's consumer index
        // 24.
        let log_cmdq = cfg.log_cmdq_size.min(caps.log_max_cmdq).min(15);
        let log_eq = cfg.log_eq_size.min(caps.log_max_eq).min(23);
        let (Some(cmdq_len), Some(eq_len)) = (
            ring_bytes(CMD_ENTRY_SIZE, log_cmdq.into()),
            ring_bytes(EQE_SIZE, log_eq.into()),
        ) else {
            return Err(Error::new(
                ErrorKind::NoMemory,
                format!(
                    "a command queue of 2^{log_cmdq} and an event queue of 2^{log_eq} entries \
                     do not fit in the address space"
                ),
            ));
        };
        let cmdq_mem = hal
            .dma_alloc(cmdq_len)
            .map_err(|e| Error::hal(e, "allocating the command queue"))?;
        let eq_mem = match hal.dma_alloc(eq_len) {
            Ok(m) => m,
            Err(e) => {
                // SAFETY: from dma_alloc; the device, just reset, has not
                // been given its address.
                unsafe { hal.dma_free(cmdq_mem) };
                return Err(Error::hal(e, "allocating the event queue"));
            }
        };
        cmdq_mem.zero();
        eq_mem.zero();
        // SAFETY: the views live in the Device, which frees the regions only
        // in its Drop, after which they are unused.
        let (cmd_view, eq_view) = unsafe {
            (
                view(&cmdq_mem, 0, cmdq_mem.len()),
                view(&eq_mem, 0, eq_mem.len()),
            )
        };
        let dev = Self {
            bf: AtomicBool::new(caps.bf),
            caps,
            cmd: CmdQueue::new(cmd_view, log_cmdq.into(), cfg.cmd_timeout_ns),
            eq: Mutex::new(EventQueue::new(eq_view, log_eq.into())),
            contexts: Mutex::new(Vec::new()),
            vectors_used: Mutex::new(Vec::new()),
            hal,
            cmdq_mem: Some(cmdq_mem),
            eq_mem: Some(eq_mem),
            orphans: Mutex::new(Vec::new()),
            reset_timeout_ns: cfg.reset_timeout_ns,
        };
        dev.enable(log_cmdq, log_eq, cfg.enable_timeout_ns)?;
        Ok(dev)
    }

    fn enable(&self, log_cmdq: u8, log_eq: u8, timeout_ns: u64) -> Result<()> {
        let hal = &self.hal;
        let (cmdq_iova, eq_iova) = (self.cmd_iova(), self.eq_iova());
        hal.mmio_write32(BAR_REGS, bar0::CMDQ_BASE_LO, cmdq_iova as u32);
        hal.mmio_write32(BAR_REGS, bar0::CMDQ_BASE_HI, (cmdq_iova >> 32) as u32);
        let cmdq_ctrl = CmdqCtrl::new().with_log_size(log_cmdq);
        hal.mmio_write32(BAR_REGS, bar0::CMDQ_CTRL, cmdq_ctrl.into_bits().to_ne());
        hal.mmio_write32(BAR_REGS, bar0::EQ_BASE_LO, eq_iova as u32);
        hal.mmio_write32(BAR_REGS, bar0::EQ_BASE_HI, (eq_iova >> 32) as u32);
        let eq_ctrl = EqCtrl::new()
            .with_log_size(log_eq)
            .with_vector(self.caps.async_vector())
            .with_enable(true);
        hal.mmio_write32(BAR_REGS, bar0::EQ_CTRL, eq_ctrl.into_bits().to_ne());
        let ctrl = Ctrl::new().with_enable(true);
        hal.mmio_write32(BAR_REGS, bar0::CTRL, ctrl.into_bits().to_ne());

        let start = hal.now_ns();
        loop {
            let status = read_status(hal);
            if status.fatal() {
                let raw = hal.mmio_read32(BAR_REGS, bar0::FATAL_SYNDROME);
                return Err(Error::new(
                    ErrorKind::Io,
                    format!(
                        "device entered the fatal state while enabling: {}",
                        describe_fatal(raw)
                    ),
                ));
            }
            if status.enabled() {
                log::debug!(
                    "device enabled: command queue 2^{log_cmdq} entries at {cmdq_iova:#x}, \
                     event queue 2^{log_eq} entries at {eq_iova:#x}"
                );
                return Ok(());
            }
            if hal.now_ns().saturating_sub(start) > timeout_ns {
                return Err(Error::new(
                    ErrorKind::TimedOut,
                    format!(
                        "device did not report STATUS.enabled within {} ms",
                        timeout_ns / 1_000_000
                    ),
                ));
            }
            hal.relax();
        }
    }

    fn cmd_iova(&self) -> u64 {
        self.cmdq_mem.as_ref().map_or(0, DmaRegion::iova)
    }

    fn eq_iova(&self) -> u64 {
        self.eq_mem.as_ref().map_or(0, DmaRegion::iova)
    }

    /// Keeps `mem`, which the device may still use, until the reset at
    /// shutdown; logs why (`what`, `why`) and how much.
    pub(crate) fn orphan(&self, mem: DeviceMem, what: core::fmt::Arguments<'_>, why: &Error) {
        match mem {
            DeviceMem::Region(ref r) => log::error!(
                "{what}: {why}; the device may still use its {} bytes of memory, so they are \
                 leaked until the device is reset when the context is closed",
                r.len()
            ),
            DeviceMem::Mapping { iova, len } => log::error!(
                "{what}: {why}; the device may still use the {len} bytes of caller memory at \
                 IOVA {iova:#x}, and its IOVAs could not be retired, so they stay mapped, \
                 and must stay valid, until the device is reset when the context is closed"
            ),
        }
        self.orphans.lock().push(mem);
    }

    /// Gives up `mem`, which the device may still reference (a destroy
    /// failed, or a create timed out), logging why (`what`, `why`). A
    /// mapping of the caller's memory is retired
    /// ([`Hal::dma_unmap_retired`]): cut off from the device at once and
    /// its IOVAs never reused, so the caller may free the memory. Where the
    /// platform cannot retire IOVAs, and for driver memory, `mem` is kept
    /// until the reset at shutdown ([`Device::orphan`]).
    pub(crate) fn abandon(&self, mem: DeviceMem, what: core::fmt::Arguments<'_>, why: &Error) {
        let DeviceMem::Mapping { iova, len } = mem else {
            return self.orphan(mem, what, why);
        };
        // SAFETY: a Mapping is exactly the IOVA range of an earlier dma_map
        // on this platform, not yet unmapped.
        match unsafe { self.hal.dma_unmap_retired(iova, len) } {
            Ok(()) => log::error!(
                "{what}: {why}; the device may still reference the {len} bytes of caller \
                 memory at IOVA {iova:#x}: the IOVAs are retired (unmapped, never reused), so \
                 the device can reach neither that memory nor any other through them"
            ),
            Err(HalError::Unsupported) => self.orphan(mem, what, why),
            Err(e) => {
                log::error!("retiring the {len} bytes of caller memory at IOVA {iova:#x}: {e}");
                self.orphan(mem, what, why);
            }
        }
    }

    /// Executes a command.
    /// Executes command `op` for user context `uid`.
    pub(crate) fn exec<I: Pod, O: Pod>(&self, op: CmdOpcode, input: &I, uid: u32) -> Result<O> {
        self.cmd.exec(&self.hal, op, input, uid)
    }
}

impl<H: Hal> Drop for Device<H> {
    fn drop(&mut self) {
        let orphans = core::mem::take(self.orphans.get_mut());
        match reset(&self.hal, self.reset_timeout_ns) {
            Ok(()) => {
                let queues = [self.cmdq_mem.take(), self.eq_mem.take()];
                for mem in queues
                    .into_iter()
                    .flatten()
                    .map(DeviceMem::Region)
                    .chain(orphans)
                {
                    // SAFETY: from this platform's dma_alloc or dma_map;
                    // the reset stopped all device DMA and forgot every
                    // object and queue.
                    unsafe { mem.release(&self.hal) };
                }
            }
            Err(e) => log::error!(
                "shutting down: {e}; leaking the command and event queues and {} orphaned \
                 buffer(s) the device may still use",
                orphans.len()
            ),
        }
    }
}

fn read_status<H: Hal>(hal: &H) -> Status {
    Status::from_bits(le32::from_ne(hal.mmio_read32(BAR_REGS, bar0::STATUS)))
}

/// Resets the device and waits until the reset completed.
fn reset<H: Hal>(hal: &H, timeout_ns: u64) -> Result<()> {
    hal.mmio_write32(
        BAR_REGS,
        bar0::CTRL,
        Ctrl::new().with_reset(true).into_bits().to_ne(),
    );
    let start = hal.now_ns();
    loop {
        let ctrl = Ctrl::from_bits(le32::from_ne(hal.mmio_read32(BAR_REGS, bar0::CTRL)));
        if !ctrl.reset() && read_status(hal).ready() {
            return Ok(());
        }
        if hal.now_ns().saturating_sub(start) > timeout_ns {
            return Err(Error::new(
                ErrorKind::TimedOut,
                format!(
                    "device reset did not complete within {} ms",
                    timeout_ns / 1_000_000
                ),
            ));
        }
        hal.relax();
    }
}

//! Bring-up and teardown of a PVRDMA device, in the order of Linux's
//! `pvrdma_pci_probe` and `pvrdma_pci_remove`.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::vec::Vec;

use rnic_pvrdma_regs::bar::{REG, UAR};
use rnic_pvrdma_regs::bar1::{self, Ctl, IntrVector};
use rnic_pvrdma_regs::cmd::CmdOpcode;
use rnic_pvrdma_regs::cqe::{Cqne, Eqe};
use rnic_pvrdma_regs::dsr::{
    DeviceCaps, DeviceMode, Dsr, GosInfo, GosWord, DSR_CAPS_OFFSET, GID_TYPE_ROCE_V1,
    GID_TYPE_ROCE_V2,
};
use rnic_pvrdma_regs::{le32, le64, PAGE_SIZE};
use rnic_queues::{DmaRegion, Hal, HalError, IndexError, Pod};
use rnic_verbs::{Error, ErrorKind, Result};
use spin::{Mutex, RwLock};

use crate::cmd::CmdChannel;
use crate::context::UAR_PAGES;
use crate::queue_mem::alloc_all;
use crate::ring::{EventRing, RingPages};

/// How long a command may take before the driver gives up on it (Linux's
/// `PVRDMA_CMD_TIMEOUT`).
pub const CMD_TIMEOUT_NS: u64 = 10_000_000_000;

/// `GosWord.bits`: a 64-bit guest.
const GOS_BITS_64: u8 = 2;
/// `GosWord.kind`: Linux.
const GOS_TYPE_LINUX: u8 = 1;
/// The interface version the driver speaks (`PVRDMA_VERSION`).
const DRIVER_VERSION: u32 = bar1::VERSION_QPHANDLE;

/// The pages bring-up gives the device, one allocation each.
mod page {
    pub const DSR: usize = 0;
    pub const REQ: usize = 1;
    pub const RESP: usize = 2;
    /// The async event ring: directory, table, state, entries.
    pub const ASYNC: usize = 3;
    /// The CQ-notification ring: directory, table, state, entries.
    pub const CQ: usize = 7;
    pub const COUNT: usize = 11;
}

/// An activated PVRDMA device: its platform, its capabilities, and the
/// memory it was given at bring-up (the device-shared region, the command
/// slots and the two event rings).
#[derive(Debug)]
pub struct Device<H: Hal> {
    pub(crate) hal: H,
    /// The page frame of BAR 2's first page.
    pub(crate) uar_pfn: u64,
    /// Which UAR pages a context holds.
    pub(crate) uars: Mutex<Vec<bool>>,
    /// The QPs the device holds, their numbers by handle: a CQE names a
    /// QP by handle, and one naming another is the device's error.
    pub(crate) qps: RwLock<BTreeMap<u32, u32>>,
    version: u32,
    caps: DeviceCaps,
    pages: Vec<DmaRegion>,
    /// One command at a time: the slots are the device's only ones.
    cmd: Mutex<CmdChannel>,
    async_ring: EventRing<Eqe>,
    cq_ring: EventRing<Cqne>,
}

impl<H: Hal> Device<H> {
    /// Brings the device behind `hal` up: checks its version, gives it the
    /// device-shared region (the command and response slots, the async
    /// event and CQ-notification rings, the UAR page), checks the
    /// capabilities it writes back (RoCE, a GID type the driver knows),
    /// unmasks its interrupts and activates it. The UAR page frame it is
    /// given is BAR 2's bus address (`Hal::bar_address`) >> 12; a platform
    /// that cannot tell it is `ENODEV`. Everything allocated is freed if
    /// it fails.
    pub fn open(hal: H) -> Result<Self> {
        let Some(uar_pfn) = hal.bar_address(UAR).map(|a| a >> 12) else {
            return Err(Error::new(
                ErrorKind::NoDevice,
                "the platform does not tell BAR 2's bus address, which PVRDMA needs (uar_pfn)",
            ));
        };
        let version = hal.mmio_read32(REG, bar1::VERSION);
        if version < bar1::VERSION_ROCEV1 || version == u32::MAX {
            return Err(Error::new(
                ErrorKind::NoDevice,
                format!(
                    "PVRDMA VERSION register reads {version:#x}, below the first version {}",
                    bar1::VERSION_ROCEV1
                ),
            ));
        }
        let pages = alloc_all(&hal, [PAGE_SIZE; page::COUNT], "PVRDMA bring-up memory")?;
        let mut dev = Self {
            uar_pfn,
            uars: Mutex::new(alloc::vec![false; UAR_PAGES]),
            qps: RwLock::new(BTreeMap::new()),
            version,
            caps: DeviceCaps::default(),
            cmd: Mutex::new(CmdChannel::new(CMD_TIMEOUT_NS)),
            async_ring: EventRing::new(&ring_pages(&pages, page::ASYNC)),
            cq_ring: EventRing::new(&ring_pages(&pages, page::CQ)),
            pages,
            hal,
        };
        // On failure, `dev` drops: its pages are freed.
        dev.activate(uar_pfn)?;
        Ok(dev)
    }

    fn activate(&mut self, uar_pfn: u64) -> Result<()> {
        let p = &self.pages;
        let dsr = Dsr {
            driver_version: le32::from_ne(DRIVER_VERSION),
            gos_info: GosInfo {
                word: GosWord::new()
                    .with_bits(GOS_BITS_64)
                    .with_kind(GOS_TYPE_LINUX)
                    .with_version(1),
                pad: le32::from_ne(0),
            },
            cmd_slot_dma: le64::from_ne(p[page::REQ].iova()),
            resp_slot_dma: le64::from_ne(p[page::RESP].iova()),
            async_ring_pages: EventRing::<Eqe>::page_info(&ring_pages(p, page::ASYNC)),
            cq_ring_pages: EventRing::<Cqne>::page_info(&ring_pages(p, page::CQ)),
            uar_pfn: le64::from_ne(uar_pfn),
            ..Dsr::default()
        };
        let region = &p[page::DSR];
        region.write(0, dsr);
        let iova = region.iova();
        // The Hal orders these after the stores to the region; the device
        // reads the region, and writes its capabilities, on the high half.
        self.hal.mmio_write32(REG, bar1::DSRLOW, iova as u32);
        self.hal
            .mmio_write32(REG, bar1::DSRHIGH, (iova >> 32) as u32);
        self.caps = region.read(DSR_CAPS_OFFSET);
        let (mode, gids) = (self.caps.mode, self.caps.gid_types);
        if DeviceMode::from_raw(mode) != Some(DeviceMode::Roce)
            || gids & (GID_TYPE_ROCE_V1 | GID_TYPE_ROCE_V2) == 0
        {
            return Err(Error::new(
                ErrorKind::NoDevice,
                format!(
                    "PVRDMA device reports mode {mode} and GID types {gids:#x}: not a RoCE \
                     device this driver can use"
                ),
            ));
        }
        self.hal.mmio_write32(REG, bar1::IMR, 0);
        self.hal.mmio_write32(REG, bar1::CTL, Ctl::Activate.raw());
        match self.hal.mmio_read32(REG, bar1::ERR) {
            0 => Ok(()),
            err => Err(Error::new(
                ErrorKind::Io,
                format!("PVRDMA activation failed: error register {err:#x}"),
            )),
        }
    }

    /// The device's interface version (`bar1::VERSION`).
    pub fn version(&self) -> u32 {
        self.version
    }

    /// The capabilities the device wrote at bring-up.
    pub fn caps(&self) -> &DeviceCaps {
        &self.caps
    }

    /// The platform.
    pub fn hal(&self) -> &H {
        &self.hal
    }

    /// Runs command `op` with request `req` (one of `rnic_pvrdma_regs::cmd`'s
    /// request structs; its header is filled in here) and returns its
    /// response `O`. A response that is not this command's (another
    /// cookie, another `ack`) is an [`ErrorKind::Io`] error; one the device
    /// failed is a refusal with its errno; a command the device does not
    /// implement is [`ErrorKind::NotSupported`]. After a command times
    /// out, no other is issued (the device may still answer it).
    pub fn exec<I: Pod, O: Pod>(&self, op: CmdOpcode, req: &I) -> Result<O> {
        let slots = (&self.pages[page::REQ], &self.pages[page::RESP]);
        self.cmd.lock().exec(&self.hal, slots, op, req)
    }

    /// The next async event the device reported, if any.
    pub fn pop_async_event(&self) -> core::result::Result<Option<Eqe>, IndexError> {
        self.async_ring.pop(&ring_pages(&self.pages, page::ASYNC))
    }

    /// The next CQ notification (the handle of a CQ with a new completion;
    /// QEMU's pvrdma writes one for every completion, armed or not), if
    /// any.
    pub fn pop_cq_notification(&self) -> core::result::Result<Option<Cqne>, IndexError> {
        self.cq_ring.pop(&ring_pages(&self.pages, page::CQ))
    }

    /// Waits up to `timeout_ns` for a CQ notification: takes one from the
    /// ring if there is one, else waits for the CQ-notification vector and
    /// takes the next. `None` if none came in time. A platform without
    /// interrupts cannot wait (`EOPNOTSUPP`); an index the device corrupted
    /// is `EIO`.
    pub fn wait_cq_notification(&self, timeout_ns: u64) -> Result<Option<Cqne>> {
        let corrupt =
            |e: IndexError| Error::new(ErrorKind::Io, format!("the CQ-notification ring: {e}"));
        let start = self.hal.now_ns();
        loop {
            if let Some(n) = self.pop_cq_notification().map_err(corrupt)? {
                log::trace!("CQ notification for CQ {}", n.info.to_ne());
                return Ok(Some(n));
            }
            let Some(left) = timeout_ns
                .checked_sub(self.hal.now_ns().saturating_sub(start))
                .filter(|&l| l > 0)
            else {
                return Ok(None);
            };
            // The vector fires after the device moved the ring's tail; an
            // interrupt left from an entry already taken only loops once.
            match self.hal.wait_irq(IntrVector::Cq.raw(), left) {
                Ok(fired) => log::trace!("CQ-notification vector: {fired} after up to {left} ns"),
                Err(HalError::Unsupported) => {
                    return Err(Error::new(
                        ErrorKind::NotSupported,
                        "CQ notifications arrive by interrupt, which this platform does not \
                         deliver",
                    ))
                }
                Err(e) => return Err(Error::hal(e, "waiting for a CQ notification")),
            }
        }
    }
}

impl<H: Hal> Drop for Device<H> {
    /// Masks the device's interrupts and frees its bring-up memory. The
    /// device is not reset: QEMU's reset stalls for seconds and frees
    /// nothing of its backend (docs/pvrdma.md); once the platform unmaps
    /// the pages, the device cannot reach them, and the next
    /// [`Device::open`] gives it new ones.
    fn drop(&mut self) {
        self.hal.mmio_write32(REG, bar1::IMR, u32::MAX);
        for region in self.pages.drain(..) {
            // SAFETY: allocated by `alloc_all` on this platform; with its
            // interrupts masked the driver no longer uses the device, and
            // the platform cuts the device off from the pages as it frees
            // them.
            unsafe { self.hal.dma_free(region) };
        }
    }
}

/// The four pages of the event ring whose directory is page `first`.
fn ring_pages(pages: &[DmaRegion], first: usize) -> RingPages<'_> {
    RingPages {
        dir: &pages[first],
        table: &pages[first + 1],
        state: &pages[first + 2],
        entries: &pages[first + 3],
    }
}

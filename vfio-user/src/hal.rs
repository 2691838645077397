//! [`VfioUserHal`]: the platform trait over a PCI device served by another
//! process through vfio-user (rnicd).

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::ptr::NonNull;
use std::sync::Mutex;
use std::time::Instant;

use memmap2::{MmapOptions, MmapRaw};
use rnic_queues::{DmaRegion, Hal, HalError};
use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD, VFIO_PCI_CONFIG_REGION_INDEX,
    VFIO_PCI_MSIX_IRQ_INDEX, VFIO_PCI_NUM_REGIONS, VFIO_REGION_INFO_FLAG_MMAP,
    VFIO_REGION_TYPE_PCI_VENDOR_TYPE,
};

use crate::client::Client;
use crate::fd::{eventfd, sealed_memfd};
use crate::posted::{self, Producer};
use crate::{msg, Error};

const PAGE: u64 = 4096;
/// First IOVA handed out.
const IOVA_BASE: u64 = 0x1_0000_0000;

/// The subtype of a vendor region that is a [`posted`] write queue for
/// the BAR in the low byte of the subtype's second byte: `0x100 | bar`.
pub const POSTED_WRITES: u32 = 0x100;

/// Why a device could not be opened.
#[derive(Debug)]
pub enum OpenError {
    /// The vfio-user connection or its negotiation failed.
    Connect(Error),
    /// The server describes something other than a PCI device with
    /// MSI-X, or a posted-write queue that cannot be mapped.
    Device(String),
    /// An eventfd for an interrupt could not be made.
    Eventfd(std::io::Error),
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::Connect(e) => e.fmt(f),
            OpenError::Device(why) => write!(f, "vfio-user device: {why}"),
            OpenError::Eventfd(e) => write!(f, "eventfd: {e}"),
        }
    }
}

impl std::error::Error for OpenError {}

/// A memfd allocation shared with the device.
struct Alloc {
    file: File,
    map: MmapRaw,
}

/// A `dma_map`: the IOVA range the server mapped, page-aligned.
struct Remap {
    base: u64,
    size: u64,
}

/// IOVAs and what backs them.
struct Space {
    next: u64,
    /// Allocations by IOVA.
    allocs: BTreeMap<u64, Alloc>,
    /// `dma_map` ranges, by the IOVA handed out.
    remaps: BTreeMap<u64, Remap>,
}

impl Space {
    /// A fresh IOVA range of `size` bytes, a guard page after it.
    fn take(&mut self, size: u64) -> Result<u64, HalError> {
        let iova = self.next;
        self.next = size
            .checked_add(PAGE)
            .and_then(|s| iova.checked_add(s))
            .ok_or(HalError::NoIova)?;
        Ok(iova)
    }
}

/// A device served over vfio-user.
///
/// - BAR accesses are region reads and writes on the socket, except the
///   writes to a BAR the server gives a [`posted`] write queue for (the
///   doorbells), which go through that queue in shared memory.
/// - `dma_alloc` makes a memfd, sealed against shrinking, maps it here
///   and sends `DMA_MAP` with it at the next free IOVA (a guard page
///   apart; IOVAs are never handed out twice).
/// - `dma_map` of memory inside such an allocation maps it again from
///   the same file; of any other memory of this process (a `malloc`ed
///   buffer), sends `DMA_MAP` without a file and with the buffer's
///   address, which the server reaches through the kernel
///   ([`msg::PROCESS_MEMORY`]), if it agreed to.
/// - MSI-X vectors are eventfds of this process, given to the server.
pub struct VfioUserHal {
    client: Mutex<Client>,
    space: Mutex<Space>,
    /// The queue for writes to BAR `posted.0`.
    posted: Option<(u8, Producer)>,
    /// One eventfd per MSI-X vector.
    irqs: Vec<File>,
    /// Taken to read an eventfd's count, which is read only while it is
    /// readable: a program may have made the descriptor blocking (a
    /// libibverbs completion channel's fd is), and two waiters woken by
    /// one interrupt must not both read.
    irq_take: Mutex<()>,
    epoch: Instant,
}

fn os(e: std::io::Error) -> HalError {
    HalError::Os(e.raw_os_error().unwrap_or(libc::EIO))
}

/// `len` bytes of memory in a memfd sealed against shrinking, mapped here.
fn memfd(len: u64) -> Result<Alloc, HalError> {
    let file = sealed_memfd(c"rnic-dma", len, libc::F_SEAL_SHRINK).map_err(os)?;
    let map = MmapOptions::new().map_raw(&file).map_err(os)?;
    Ok(Alloc { file, map })
}

/// The posted-write queue the server offers among its device-specific
/// regions, if any: the BAR it serves and its producer end.
fn posted_queue(c: &mut Client, vendor: u16) -> Result<Option<(u8, Producer)>, OpenError> {
    let n = c.device_info().map_err(OpenError::Connect)?.num_regions;
    for index in VFIO_PCI_NUM_REGIONS..n.min(VFIO_PCI_NUM_REGIONS + 16) {
        let r = c.region_info(index).map_err(OpenError::Connect)?;
        let ours = VFIO_REGION_TYPE_PCI_VENDOR_TYPE | u32::from(vendor);
        let Some((kind, subtype)) = r.kind else {
            continue;
        };
        if kind != ours || subtype & !0xff != POSTED_WRITES {
            continue;
        }
        let bar = (subtype & 0xff) as u8;
        let bad = |why: String| OpenError::Device(format!("posted-write region {index}: {why}"));
        let fd = match r.fd {
            Some(fd) if r.info.flags & VFIO_REGION_INFO_FLAG_MMAP != 0 => fd,
            _ => return Err(bad("not mappable".into())),
        };
        if r.info.size < posted::QUEUE_BYTES as u64 {
            return Err(bad(format!("{} bytes", r.info.size)));
        }
        let kick = c
            .io_fds(index)
            .map_err(OpenError::Connect)?
            .into_iter()
            .find(|(sub, _)| sub.kind == msg::IO_FD_IOEVENTFD && sub.offset == 0)
            .map(|(_, fd)| fd)
            .ok_or_else(|| bad("no ioeventfd".into()))?;
        let file = File::from(fd);
        let p = Producer::new(&file, r.info.offset, kick).map_err(|e| bad(e.to_string()))?;
        return Ok(Some((bar, p)));
    }
    Ok(None)
}

impl VfioUserHal {
    /// Connects to the server at `socket`, finds its posted-write queue,
    /// and gives each MSI-X vector an eventfd.
    pub fn connect(socket: &Path) -> Result<Self, OpenError> {
        let mut client = Client::connect(socket, true).map_err(OpenError::Connect)?;
        let mut id = [0u8; 2];
        client
            .region_read(VFIO_PCI_CONFIG_REGION_INDEX, 0, &mut id)
            .map_err(OpenError::Connect)?;
        let posted = posted_queue(&mut client, u16::from_ne_bytes(id))?;
        let n = client
            .irq_info(VFIO_PCI_MSIX_IRQ_INDEX)
            .map_err(OpenError::Connect)?
            .count;
        if n > 2048 {
            return Err(OpenError::Device(format!("{n} MSI-X vectors")));
        }
        let irqs = (0..n)
            .map(|_| eventfd().map(File::from))
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(OpenError::Eventfd)?;
        let fds: Vec<_> = irqs.iter().map(AsRawFd::as_raw_fd).collect();
        let flags = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
        // At most MAX_FDS descriptors a message.
        for (i, chunk) in fds.chunks(msg::MAX_FDS).enumerate() {
            let start = (i * msg::MAX_FDS) as u32;
            client
                .set_irqs(
                    VFIO_PCI_MSIX_IRQ_INDEX,
                    flags,
                    start,
                    chunk.len() as u32,
                    chunk,
                )
                .map_err(OpenError::Connect)?;
        }
        Ok(Self {
            client: Mutex::new(client),
            space: Mutex::new(Space {
                next: IOVA_BASE,
                allocs: BTreeMap::new(),
                remaps: BTreeMap::new(),
            }),
            posted,
            irqs,
            irq_take: Mutex::new(()),
            epoch: Instant::now(),
        })
    }

    fn client(&self) -> std::sync::MutexGuard<'_, Client> {
        self.client.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn space(&self) -> std::sync::MutexGuard<'_, Space> {
        self.space.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The region index of BAR `bar`.
    fn region(bar: u8) -> u32 {
        u32::from(bar)
    }

    /// The queue for writes to `bar`, if the server gave one.
    fn queue_for(&self, bar: u8) -> Option<&Producer> {
        self.posted
            .as_ref()
            .filter(|(b, _)| *b == bar)
            .map(|(_, p)| p)
    }

    /// Times a doorbell woke the device (a system call each); the rest
    /// went through shared memory alone.
    pub fn kicks(&self) -> u64 {
        self.posted.as_ref().map_or(0, |(_, p)| p.kicks())
    }

    /// Doorbell writes that went through the posted-write queue.
    pub fn posted(&self) -> u64 {
        self.posted.as_ref().map_or(0, |(_, p)| p.posted())
    }

    /// Whether the server reaches this process's own memory, so that
    /// `dma_map` takes any buffer.
    pub fn maps_process_memory(&self) -> bool {
        self.client().caps().process_memory
    }

    fn write(&self, bar: u8, offset: usize, bytes: &[u8]) {
        let r = self
            .client()
            .region_write(Self::region(bar), offset as u64, bytes);
        if let Err(e) = r {
            log::error!("write of BAR {bar} offset {offset:#x}: {e}");
        }
    }
}

// SAFETY: dma_alloc returns a fresh memfd mapping of its own (zeroed,
// page-aligned), which the server maps at the IOVA handed out and nowhere
// else; dma_map maps exactly the caller's pages (from the allocation's
// file, or as this process's memory); dma_free and dma_unmap send
// DMA_UNMAP, which the server acknowledges only after the device can no
// longer reach the range, before the memory goes; IOVAs are never handed
// out twice; BAR accesses are messages the server bounds to the region,
// or posted-write entries the device checks as any doorbell write. A
// posted write is published with release ordering after the caller's
// stores (the Hal's `writel` ordering).
unsafe impl Hal for VfioUserHal {
    fn dma_alloc(&self, len: usize) -> Result<DmaRegion, HalError> {
        let size = (len.max(1) as u64).div_ceil(PAGE) * PAGE;
        let a = memfd(size)?;
        let mut space = self.space();
        let iova = space.take(size)?;
        self.client()
            .dma_map(0, iova, size, Some(a.file.as_raw_fd()))
            .map_err(|e| {
                log::error!("DMA_MAP of {size:#x} bytes: {e}");
                HalError::NoIova
            })?;
        let ptr = NonNull::new(a.map.as_mut_ptr()).ok_or(HalError::NoMemory)?;
        space.allocs.insert(iova, a);
        // SAFETY: `size >= len` bytes of a fresh shared mapping, zeroed (a
        // new memfd), page-aligned (mmap), valid until dma_free.
        Ok(unsafe { DmaRegion::new(ptr, iova, len) })
    }

    unsafe fn dma_free(&self, region: DmaRegion) {
        let mut space = self.space();
        let Some(a) = space.allocs.remove(&region.iova()) else {
            log::error!(
                "dma_free of a region not from dma_alloc (iova {:#x})",
                region.iova()
            );
            return;
        };
        if let Err(e) = self.client().dma_unmap(region.iova(), a.map.len() as u64) {
            // The device may still reach it: keep the memory rather than
            // free what it could write.
            log::error!("DMA_UNMAP of iova {:#x}: {e}; memory kept", region.iova());
            std::mem::forget(a);
        }
    }

    unsafe fn dma_map(&self, vaddr: NonNull<u8>, len: usize) -> Result<u64, HalError> {
        let addr = vaddr.as_ptr() as u64;
        let end = addr
            .checked_add(len.max(1) as u64)
            .ok_or(HalError::NoIova)?;
        let mut space = self.space();
        // Memory of an allocation is mapped again from its file.
        let inside = space.allocs.values().find_map(|a| {
            let start = a.map.as_ptr() as u64;
            (addr >= start && end <= start + a.map.len() as u64)
                .then(|| (addr - start, a.file.as_raw_fd()))
        });
        let page_off = addr % PAGE;
        let size = (page_off + len.max(1) as u64).div_ceil(PAGE) * PAGE;
        let base = space.take(size)?;
        let r = match inside {
            Some((file_off, fd)) => {
                self.client()
                    .dma_map(file_off - page_off, base, size, Some(fd))
            }
            None if self.client().caps().process_memory => {
                self.client().dma_map(addr - page_off, base, size, None)
            }
            None => return Err(HalError::Unsupported),
        };
        r.map_err(|e| {
            log::error!("DMA_MAP of {len:#x} bytes at {addr:#x}: {e}");
            match e {
                Error::Refused { errno, .. } => HalError::Os(errno),
                _ => HalError::NoIova,
            }
        })?;
        let iova = base + page_off;
        space.remaps.insert(iova, Remap { base, size });
        Ok(iova)
    }

    unsafe fn dma_unmap(&self, iova: u64, _len: usize) -> Result<(), HalError> {
        let mut space = self.space();
        let r = space.remaps.remove(&iova).ok_or(HalError::NotMapped)?;
        self.client().dma_unmap(r.base, r.size).map_err(|e| {
            log::error!("DMA_UNMAP of iova {iova:#x}: {e}");
            HalError::NotMapped
        })
    }

    unsafe fn dma_unmap_retired(&self, iova: u64, len: usize) -> Result<(), HalError> {
        // IOVAs are never handed out twice: an unmapped one is retired.
        // SAFETY: the caller's promise, passed on.
        unsafe { self.dma_unmap(iova, len) }
    }

    fn mmio_read32(&self, bar: u8, offset: usize) -> u32 {
        let mut b = [0u8; 4];
        match self
            .client()
            .region_read(Self::region(bar), offset as u64, &mut b)
        {
            Ok(()) => u32::from_le_bytes(b),
            // As a read the device does not answer on PCIe.
            Err(e) => {
                log::error!("read of BAR {bar} offset {offset:#x}: {e}");
                u32::MAX
            }
        }
    }

    fn mmio_write32(&self, bar: u8, offset: usize, value: u32) {
        self.write(bar, offset, &value.to_le_bytes());
    }

    fn mmio_write64(&self, bar: u8, offset: usize, value: u64) {
        match self.queue_for(bar) {
            Some(p) => p.post(offset as u64, value),
            None => self.write(bar, offset, &value.to_le_bytes()),
        }
    }

    fn mmio_write_block(&self, bar: u8, offset: usize, block: &[u64; 8]) -> Result<(), HalError> {
        // A queue entry holds one doorbell: the caller rings that instead,
        // and the device reads the WQE from the ring in shared memory.
        if self.queue_for(bar).is_some() {
            return Err(HalError::Unsupported);
        }
        let mut b = [0u8; 64];
        for (d, w) in b.chunks_exact_mut(8).zip(block) {
            d.copy_from_slice(&w.to_le_bytes());
        }
        self.client()
            .region_write(Self::region(bar), offset as u64, &b)
            .map_err(|_| HalError::Os(libc::EIO))
    }

    fn now_ns(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    fn wait_irq(&self, vector: u16, timeout_ns: u64) -> Result<bool, HalError> {
        let f = self
            .irqs
            .get(usize::from(vector))
            .ok_or(HalError::Unsupported)?;
        let mut p = libc::pollfd {
            fd: f.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = timeout_ns.div_ceil(1_000_000).min(i32::MAX as u64) as i32;
        // SAFETY: one valid pollfd.
        let n = unsafe { libc::poll(&mut p, 1, ms) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EINTR) {
                return Err(HalError::Interrupted);
            }
            return Err(os(e));
        }
        if n == 0 {
            return Ok(false);
        }
        let _one_taker = self.irq_take.lock().unwrap_or_else(|e| e.into_inner());
        p.revents = 0;
        // SAFETY: one valid pollfd; a zero timeout returns at once.
        if unsafe { libc::poll(&mut p, 1, 0) } <= 0 {
            // Another waiter took this interrupt.
            return Ok(false);
        }
        let mut count = 0u64;
        // SAFETY: reads 8 bytes into `count` from our eventfd, readable.
        let _ = unsafe { libc::read(p.fd, (&mut count as *mut u64).cast(), 8) };
        Ok(true)
    }

    fn irq_eventfd(&self, vector: u16) -> Option<i32> {
        self.irqs.get(usize::from(vector)).map(AsRawFd::as_raw_fd)
    }
}

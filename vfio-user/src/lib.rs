//! [`VfioUserHal`]: the platform trait over a PCI device served by another
//! process through vfio-user (rnicd), beside the kernel VFIO backend and
//! the in-process model.
//!
//! - BAR accesses are region reads and writes over the socket.
//! - DMA memory is memfds, sealed against shrinking, which this process
//!   maps and hands to the server (`DMA_MAP` at IOVAs this process
//!   chooses, a guard page apart).
//! - Memory the driver maps with [`Hal::dma_map`] must lie inside such an
//!   allocation. It is mapped again at its own IOVA, from the same file.
//! - MSI-X vectors are eventfds of this process, given to the server with
//!   `SET_IRQS`.

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::Mutex;
use std::time::Instant;

use memmap2::{MmapOptions, MmapRaw};
use rnic_queues::{DmaRegion, Hal, HalError};
use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD, VFIO_PCI_MSIX_IRQ_INDEX,
};
use vfio_user::Client;

const PAGE: u64 = 4096;
/// First IOVA handed out.
const IOVA_BASE: u64 = 0x1_0000_0000;

/// Why a device could not be opened.
#[derive(Debug)]
pub enum OpenError {
    /// The vfio-user connection or its negotiation failed.
    Connect(vfio_user::Error),
    /// An eventfd for an interrupt could not be made.
    Eventfd(std::io::Error),
}

impl std::fmt::Display for OpenError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            OpenError::Connect(e) => write!(f, "vfio-user: {e}"),
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

/// A `dma_map` of part of an allocation: its own IOVA range, page-aligned.
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
        self.next = iova.checked_add(size + PAGE).ok_or(HalError::NoIova)?;
        Ok(iova)
    }
}

/// A device served over vfio-user.
pub struct VfioUserHal {
    client: Mutex<Client>,
    space: Mutex<Space>,
    /// One eventfd per MSI-X vector.
    irqs: Vec<File>,
    epoch: Instant,
}

fn eventfd() -> std::io::Result<File> {
    // SAFETY: no memory arguments; a non-negative result is a fresh fd.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is fresh and owned by nothing else.
    Ok(unsafe { File::from_raw_fd(fd) })
}

fn os(e: std::io::Error) -> HalError {
    HalError::Os(e.raw_os_error().unwrap_or(libc::EIO))
}

/// `len` bytes of memory in a memfd sealed against shrinking, mapped here.
fn memfd(len: u64) -> Result<Alloc, HalError> {
    let flags = libc::MFD_ALLOW_SEALING | libc::MFD_CLOEXEC;
    // SAFETY: a NUL-terminated name; a non-negative result is a fresh fd.
    let fd = unsafe { libc::memfd_create(c"rnic-dma".as_ptr(), flags) };
    if fd < 0 {
        return Err(os(std::io::Error::last_os_error()));
    }
    // SAFETY: `fd` is fresh and owned by nothing else.
    let file = unsafe { File::from_raw_fd(fd) };
    file.set_len(len).map_err(os)?;
    // SAFETY: F_ADD_SEALS with a seal mask on a descriptor we own.
    if unsafe { libc::fcntl(fd, libc::F_ADD_SEALS, libc::F_SEAL_SHRINK) } != 0 {
        return Err(os(std::io::Error::last_os_error()));
    }
    let map = MmapOptions::new().map_raw(&file).map_err(os)?;
    Ok(Alloc { file, map })
}

impl VfioUserHal {
    /// Connects to the server at `socket` and gives each MSI-X vector an
    /// eventfd.
    pub fn connect(socket: &Path) -> Result<Self, OpenError> {
        let mut client = Client::new(socket).map_err(OpenError::Connect)?;
        let n = client
            .get_irq_info(VFIO_PCI_MSIX_IRQ_INDEX)
            .map_err(OpenError::Connect)?
            .count;
        let irqs = (0..n)
            .map(|_| eventfd())
            .collect::<std::io::Result<Vec<_>>>()
            .map_err(OpenError::Eventfd)?;
        let fds: Vec<_> = irqs.iter().map(AsRawFd::as_raw_fd).collect();
        let flags = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
        client
            .set_irqs(VFIO_PCI_MSIX_IRQ_INDEX, flags, 0, n, &fds)
            .map_err(OpenError::Connect)?;
        Ok(Self {
            client: Mutex::new(client),
            space: Mutex::new(Space {
                next: IOVA_BASE,
                allocs: BTreeMap::new(),
                remaps: BTreeMap::new(),
            }),
            irqs,
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
}

// SAFETY: dma_alloc returns a fresh memfd mapping of its own (zeroed,
// page-aligned), which the server maps at the IOVA handed out and nowhere
// else; dma_free and dma_unmap send DMA_UNMAP (the server removes the range
// from the device before it replies) before the memory goes; IOVAs are
// never handed out twice; BAR accesses are messages the server bounds to
// the region.
unsafe impl Hal for VfioUserHal {
    fn dma_alloc(&self, len: usize) -> Result<DmaRegion, HalError> {
        let size = (len.max(1) as u64).div_ceil(PAGE) * PAGE;
        let a = memfd(size)?;
        let mut space = self.space();
        let iova = space.take(size)?;
        self.client()
            .dma_map(0, iova, size, a.file.as_raw_fd())
            .map_err(|_| HalError::NoIova)?;
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
        let mut space = self.space();
        // Only memory this Hal shares can reach the device: the allocation
        // holding the whole range is mapped again at a new IOVA.
        let (file_off, raw) = space
            .allocs
            .values()
            .find_map(|a| {
                let start = a.map.as_ptr() as u64;
                let inside = addr >= start && addr + len as u64 <= start + a.map.len() as u64;
                inside.then(|| (addr - start, a.file.as_raw_fd()))
            })
            .ok_or(HalError::Unsupported)?;
        let page_off = file_off % PAGE;
        let size = (page_off + len.max(1) as u64).div_ceil(PAGE) * PAGE;
        let base = space.take(size)?;
        self.client()
            .dma_map(file_off - page_off, base, size, raw)
            .map_err(|_| HalError::NoIova)?;
        let iova = base + page_off;
        space.remaps.insert(iova, Remap { base, size });
        Ok(iova)
    }

    unsafe fn dma_unmap(&self, iova: u64, _len: usize) -> Result<(), HalError> {
        let mut space = self.space();
        let r = space.remaps.remove(&iova).ok_or(HalError::NotMapped)?;
        self.client()
            .dma_unmap(r.base, r.size)
            .map_err(|_| HalError::NotMapped)
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
        let r = self
            .client()
            .region_write(Self::region(bar), offset as u64, &value.to_le_bytes());
        if let Err(e) = r {
            log::error!("write of BAR {bar} offset {offset:#x}: {e}");
        }
    }

    fn mmio_write64(&self, bar: u8, offset: usize, value: u64) {
        let r = self
            .client()
            .region_write(Self::region(bar), offset as u64, &value.to_le_bytes());
        if let Err(e) = r {
            log::error!("write of BAR {bar} offset {offset:#x}: {e}");
        }
    }

    fn mmio_write_block(&self, bar: u8, offset: usize, block: &[u64; 8]) -> Result<(), HalError> {
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
            return Err(os(std::io::Error::last_os_error()));
        }
        if n == 0 {
            return Ok(false);
        }
        let mut count = 0u64;
        // SAFETY: reads 8 bytes into `count` from our eventfd.
        let _ = unsafe { libc::read(p.fd, (&mut count as *mut u64).cast(), 8) };
        Ok(true)
    }

    fn irq_eventfd(&self, vector: u16) -> Option<i32> {
        self.irqs.get(usize::from(vector)).map(AsRawFd::as_raw_fd)
    }
}

//! One client's device: the vfio-user requests mapped onto an
//! [`EmuDevice`] through its platform handle ([`EmuHal`]).

use std::collections::BTreeMap;
use std::fs::File;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::ptr::NonNull;
use std::sync::Arc;

use memmap2::{MmapOptions, MmapRaw};
use rnic_emu::{EmuDevice, EmuHal, PostedWrites, ProcessMemory};
use rnic_hw_regs::bar0::{self, Ctrl};
use rnic_hw_regs::pci::{self, BAR_DOORBELL, BAR_REGS, BAR_REGS_SIZE};
use rnic_hw_regs::uar::UAR_PAGE_SIZE;
use rnic_hw_regs::PAGE_SIZE;
use rnic_queues::Hal;
use rnic_vfio_user::msg::{Caps, DmaMap, DmaUnmap, IoFd, IrqInfo, IrqSet, IO_FD_IOEVENTFD};
use rnic_vfio_user::posted::{Consumer, QUEUE_BYTES};
use rnic_vfio_user::server::{Device, Peer, Refused, Region};
use rnic_vfio_user::POSTED_WRITES;
use vfio_bindings::bindings::vfio::{
    VFIO_IRQ_INFO_EVENTFD, VFIO_IRQ_SET_ACTION_TRIGGER, VFIO_IRQ_SET_DATA_EVENTFD,
    VFIO_IRQ_SET_DATA_NONE, VFIO_PCI_BAR0_REGION_INDEX, VFIO_PCI_BAR2_REGION_INDEX,
    VFIO_PCI_CONFIG_REGION_INDEX, VFIO_PCI_MSIX_IRQ_INDEX, VFIO_PCI_NUM_IRQS, VFIO_PCI_NUM_REGIONS,
    VFIO_REGION_INFO_FLAG_MMAP, VFIO_REGION_INFO_FLAG_READ, VFIO_REGION_INFO_FLAG_WRITE,
    VFIO_REGION_TYPE_PCI_VENDOR_TYPE,
};

/// Bytes of PCI configuration space served.
const CONFIG_SIZE: usize = 256;

/// The region index of the posted-write queue for BAR 2: the first
/// device-specific one.
pub const POSTED_REGION: u32 = VFIO_PCI_NUM_REGIONS;

/// The posted-write queue of a client's device, as the device takes it;
/// clones are the same queue.
#[derive(Debug, Clone)]
pub struct PostedQueue(Arc<Consumer>);

impl PostedQueue {
    /// A fresh queue.
    pub fn new() -> std::io::Result<PostedQueue> {
        Consumer::new().map(|c| PostedQueue(Arc::new(c)))
    }
}

impl PostedWrites for PostedQueue {
    fn pop(&self) -> Option<(u64, u64)> {
        self.0.pop()
    }

    fn pending(&self) -> bool {
        self.0.pending()
    }

    fn nap(&self) -> bool {
        self.0.nap()
    }

    fn wake(&self) {
        self.0.wake()
    }

    fn wait_fd(&self) -> RawFd {
        self.0.kick_fd()
    }
}

/// Memory of the client the device reaches.
enum Shared {
    /// A shared mapping of its file.
    File(MmapRaw),
    /// Its own memory, reached through the kernel: the length.
    Process(usize),
}

impl Shared {
    fn len(&self) -> usize {
        match self {
            Shared::File(m) => m.len(),
            Shared::Process(len) => *len,
        }
    }
}

/// Whether `file` can never shrink (a memfd sealed with `F_SEAL_SHRINK`).
fn sealed_against_shrinking(file: &File) -> bool {
    // SAFETY: F_GET_SEALS takes no argument and reads nothing of ours.
    let seals = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) };
    seals >= 0 && seals & libc::F_SEAL_SHRINK != 0
}

fn invalid(why: &str) -> Refused {
    Refused::invalid(why)
}

/// The device of one vfio-user client.
pub struct Backend {
    hal: EmuHal,
    /// The client's `DMA_MAP`s, by IOVA.
    maps: BTreeMap<u64, Shared>,
    /// The device's posted-write queue, if it has one.
    posted: Option<PostedQueue>,
    /// The client's memory, once it asked for [`rnic_vfio_user::msg::PROCESS_MEMORY`].
    process: Option<Arc<ProcessMemory>>,
}

impl Backend {
    /// Serves `dev` to one client; `posted` is the queue `dev` takes
    /// doorbell writes from ([`rnic_emu::EmuBuilder::posted_writes`]).
    pub fn new(dev: &Arc<EmuDevice>, posted: Option<PostedQueue>) -> Self {
        Self {
            hal: dev.hal(),
            maps: BTreeMap::new(),
            posted,
            process: None,
        }
    }

    /// Bytes of the doorbell BAR.
    fn doorbell_bytes(&self) -> u64 {
        u64::from(self.hal.device().config().uar_pages) * UAR_PAGE_SIZE as u64
    }

    /// The configuration space: the rnic PCI identity, the rest zero.
    fn config(&self) -> [u8; CONFIG_SIZE] {
        let mut c = [0u8; CONFIG_SIZE];
        c[0..2].copy_from_slice(&pci::VENDOR_ID.to_le_bytes());
        c[2..4].copy_from_slice(&pci::DEVICE_ID.to_le_bytes());
        c[8] = pci::REVISION;
        c[9..12].copy_from_slice(&pci::CLASS_CODE.to_le_bytes()[..3]);
        c
    }

    fn map_file(&mut self, map: &DmaMap, file: File) -> Result<(), Refused> {
        let len = usize::try_from(map.size).map_err(|_| invalid("DMA_MAP too large"))?;
        // A page past the file's end would fault (SIGBUS) when the device
        // touched it: the range must lie inside the file, and the file must
        // be sealed against shrinking so that it stays there.
        let inside = map
            .offset
            .checked_add(map.size)
            .is_some_and(|end| end <= file.metadata().map_or(0, |m| m.len()));
        if !inside {
            return Err(invalid("DMA_MAP past the end of its file"));
        }
        if !sealed_against_shrinking(&file) {
            return Err(invalid("DMA_MAP of a file not sealed with F_SEAL_SHRINK"));
        }
        let mapped = MmapOptions::new()
            .offset(map.offset)
            .len(len)
            .map_raw(&file)
            .map_err(|e| Refused::errno(e.raw_os_error().unwrap_or(libc::EIO), e.to_string()))?;
        let host = NonNull::new(mapped.as_mut_ptr()).ok_or(invalid("DMA_MAP at address 0"))?;
        // SAFETY: the mapping stays in `self.maps` until `dma_unmap` has
        // removed it from the device's IOMMU (or the device is gone), so
        // the device reaches it only while it is mapped here.
        unsafe { self.hal.map_at(map.address, host, len) }
            .map_err(|e| Refused::errno(libc::EEXIST, e.to_string()))?;
        self.maps.insert(map.address, Shared::File(mapped));
        Ok(())
    }

    fn map_process(&mut self, map: &DmaMap) -> Result<(), Refused> {
        let mem = self.process.clone().ok_or(invalid(
            "DMA_MAP without a file: the client did not ask for process memory",
        ))?;
        let len = usize::try_from(map.size).map_err(|_| invalid("DMA_MAP too large"))?;
        self.hal
            .map_process(map.address, mem, map.offset, len)
            .map_err(|e| Refused::errno(libc::EEXIST, e.to_string()))?;
        self.maps.insert(map.address, Shared::Process(len));
        Ok(())
    }
}

impl Device for Backend {
    fn regions(&self) -> Vec<Region> {
        let rw = VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE;
        let mut regions: Vec<Region> = (0..VFIO_PCI_NUM_REGIONS)
            .map(|index| {
                let size = match index {
                    VFIO_PCI_BAR0_REGION_INDEX => BAR_REGS_SIZE as u64,
                    VFIO_PCI_BAR2_REGION_INDEX => self.doorbell_bytes(),
                    VFIO_PCI_CONFIG_REGION_INDEX => CONFIG_SIZE as u64,
                    _ => 0,
                };
                Region {
                    flags: if size == 0 { 0 } else { rw },
                    size,
                    mmap: None,
                    kind: None,
                }
            })
            .collect();
        if let Some(q) = &self.posted {
            regions.push(Region {
                flags: rw | VFIO_REGION_INFO_FLAG_MMAP,
                size: QUEUE_BYTES as u64,
                mmap: Some((q.0.file(), 0)),
                kind: Some((
                    VFIO_REGION_TYPE_PCI_VENDOR_TYPE | u32::from(pci::VENDOR_ID),
                    POSTED_WRITES | u32::from(BAR_DOORBELL),
                )),
            });
        }
        regions
    }

    fn irqs(&self) -> Vec<IrqInfo> {
        let vectors = u32::from(self.hal.device().config().msix_vectors);
        (0..VFIO_PCI_NUM_IRQS)
            .map(|index| {
                let msix = index == VFIO_PCI_MSIX_IRQ_INDEX;
                IrqInfo {
                    argsz: size_of::<IrqInfo>() as u32,
                    index,
                    flags: if msix { VFIO_IRQ_INFO_EVENTFD } else { 0 },
                    count: if msix { vectors } else { 0 },
                }
            })
            .collect()
    }

    fn connected(&mut self, peer: &Peer, offered: &Caps) -> Result<bool, Refused> {
        if !offered.process_memory {
            return Ok(false);
        }
        match ProcessMemory::open(peer.pid) {
            Ok(m) => {
                self.process = Some(Arc::new(m));
                Ok(true)
            }
            Err(e) => {
                // The client keeps to the memory it shares.
                log::warn!(
                    "client {}: its memory cannot be reached ({e}); it maps shared files only",
                    peer.pid
                );
                Ok(false)
            }
        }
    }

    fn region_read(&mut self, region: u32, offset: u64, data: &mut [u8]) -> Result<(), Refused> {
        let end = offset
            .checked_add(data.len() as u64)
            .ok_or(invalid("read past the region"))?;
        match region {
            VFIO_PCI_BAR0_REGION_INDEX if data.len() == 4 && offset % 4 == 0 => {
                if end > BAR_REGS_SIZE as u64 {
                    return Err(invalid("read past BAR 0"));
                }
                let v = self.hal.mmio_read32(BAR_REGS, offset as usize);
                data.copy_from_slice(&v.to_le_bytes());
            }
            // Doorbell pages read as zero.
            VFIO_PCI_BAR2_REGION_INDEX if end <= self.doorbell_bytes() => data.fill(0),
            VFIO_PCI_CONFIG_REGION_INDEX if end <= CONFIG_SIZE as u64 => {
                data.copy_from_slice(&self.config()[offset as usize..end as usize]);
            }
            _ => return Err(invalid("no such register")),
        }
        Ok(())
    }

    fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> Result<(), Refused> {
        let end = offset
            .checked_add(data.len() as u64)
            .ok_or(invalid("write past the region"))?;
        let off = offset as usize;
        match (region, data.len()) {
            (VFIO_PCI_BAR0_REGION_INDEX, 4) if offset % 4 == 0 && end <= BAR_REGS_SIZE as u64 => {
                let v = u32::from_le_bytes([data[0], data[1], data[2], data[3]]);
                self.hal.mmio_write32(BAR_REGS, off, v);
            }
            (VFIO_PCI_BAR2_REGION_INDEX, 8) if offset % 8 == 0 && end <= self.doorbell_bytes() => {
                let mut b = [0u8; 8];
                b.copy_from_slice(data);
                self.hal
                    .mmio_write64(BAR_DOORBELL, off, u64::from_le_bytes(b));
            }
            // A BlueFlame write: a doorbell and its WQE, 64 bytes at once.
            (VFIO_PCI_BAR2_REGION_INDEX, 64)
                if offset % 64 == 0 && end <= self.doorbell_bytes() =>
            {
                let mut block = [0u64; 8];
                for (w, b) in block.iter_mut().zip(data.chunks_exact(8)) {
                    let mut x = [0u8; 8];
                    x.copy_from_slice(b);
                    *w = u64::from_le_bytes(x);
                }
                self.hal
                    .mmio_write_block(BAR_DOORBELL, off, &block)
                    .map_err(|e| Refused::errno(libc::EIO, e.to_string()))?;
            }
            // The configuration space is read-only here.
            (VFIO_PCI_CONFIG_REGION_INDEX, _) if end <= CONFIG_SIZE as u64 => {}
            _ => return Err(invalid("no such register")),
        }
        Ok(())
    }

    fn io_fds(&mut self, region: u32) -> Result<Vec<(IoFd, RawFd)>, Refused> {
        match &self.posted {
            Some(q) if region == POSTED_REGION => {
                let kick = IoFd {
                    offset: 0,
                    size: 8,
                    kind: IO_FD_IOEVENTFD,
                    ..IoFd::default()
                };
                Ok(vec![(kick, q.0.kick_fd())])
            }
            _ => Ok(Vec::new()),
        }
    }

    fn dma_map(&mut self, map: &DmaMap, fd: Option<OwnedFd>) -> Result<(), Refused> {
        let page = PAGE_SIZE as u64;
        if map.size == 0 || map.offset % page != 0 || map.address % page != 0 {
            return Err(invalid("DMA_MAP of an empty or unaligned range"));
        }
        match fd {
            Some(fd) => self.map_file(map, File::from(fd))?,
            None => self.map_process(map)?,
        }
        log::debug!("DMA_MAP {:#x} bytes at iova {:#x}", map.size, map.address);
        Ok(())
    }

    fn dma_unmap(&mut self, unmap: &DmaUnmap) -> Result<(), Refused> {
        let len = usize::try_from(unmap.size).map_err(|_| invalid("DMA_UNMAP too large"))?;
        match self.maps.get(&unmap.address) {
            Some(s) if s.len() == len => {}
            _ => return Err(invalid("DMA_UNMAP of a range not mapped")),
        }
        self.hal
            .unmap_at(unmap.address, len)
            .map_err(|e| Refused::errno(libc::EIO, e.to_string()))?;
        // The device can no longer reach it: the mapping may go.
        self.maps.remove(&unmap.address);
        Ok(())
    }

    fn set_irqs(&mut self, set: &IrqSet, fds: Vec<OwnedFd>) -> Result<(), Refused> {
        if set.index != VFIO_PCI_MSIX_IRQ_INDEX {
            return Err(invalid("only MSI-X is served"));
        }
        let eventfds = VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER;
        let none = VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER;
        let vectors = u32::from(self.hal.device().config().msix_vectors);
        let (start, count) = match set.flags {
            f if f == eventfds => (set.start, set.count),
            // Count 0 with no data: every vector stops.
            f if f == none && set.count == 0 && fds.is_empty() => (0, vectors),
            _ => return Err(invalid("SET_IRQS: only eventfds to trigger, or none")),
        };
        let end = start.checked_add(count).filter(|&e| e <= vectors);
        if end.is_none() || (!fds.is_empty() && fds.len() != count as usize) {
            return Err(invalid("SET_IRQS of vectors the device does not have"));
        }
        let mut fds = fds.into_iter();
        for v in start..start + count {
            // No descriptors: the vectors are no longer signalled.
            self.hal
                .forward_irq(v as u16, fds.next())
                .map_err(|e| Refused::errno(libc::EIO, e.to_string()))?;
        }
        Ok(())
    }

    fn reset(&mut self) -> Result<(), Refused> {
        let v = Ctrl::new().with_reset(true).into_bits().to_ne();
        self.hal.mmio_write32(BAR_REGS, bar0::CTRL, v);
        Ok(())
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        // Nothing of the client's may stay reachable once its mappings go.
        for (&iova, s) in &self.maps {
            let _ = self.hal.unmap_at(iova, s.len());
        }
    }
}

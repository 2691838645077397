//! One client's device: the vfio-user requests mapped onto an
//! [`EmuDevice`] through its platform handle ([`EmuHal`]).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Error, ErrorKind};
use std::os::fd::{AsRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::Arc;

use memmap2::{MmapOptions, MmapRaw};
use rnic_emu::{EmuDevice, EmuHal};
use rnic_hw_regs::bar0::{self, Ctrl};
use rnic_hw_regs::pci::{self, BAR_DOORBELL, BAR_REGS, BAR_REGS_SIZE};
use rnic_hw_regs::uar::UAR_PAGE_SIZE;
use rnic_hw_regs::PAGE_SIZE;
use rnic_queues::Hal;
use vfio_bindings::bindings::vfio::{
    vfio_region_info, VFIO_IRQ_INFO_EVENTFD, VFIO_PCI_BAR0_REGION_INDEX,
    VFIO_PCI_BAR2_REGION_INDEX, VFIO_PCI_CONFIG_REGION_INDEX, VFIO_PCI_MSIX_IRQ_INDEX,
    VFIO_PCI_NUM_IRQS, VFIO_PCI_NUM_REGIONS, VFIO_REGION_INFO_FLAG_READ,
    VFIO_REGION_INFO_FLAG_WRITE,
};
use vfio_user::{DmaMapFlags, DmaUnmapFlags, IrqInfo, ServerBackend, ServerRegion};

/// Bytes of PCI configuration space served.
const CONFIG_SIZE: usize = 256;

/// A client's memory the device reaches: a shared mapping of its file.
struct Shared {
    map: MmapRaw,
}

/// Whether `file` can never shrink (a memfd sealed with `F_SEAL_SHRINK`).
fn sealed_against_shrinking(file: &File) -> bool {
    // SAFETY: F_GET_SEALS takes no argument and reads nothing of ours.
    let seals = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_GET_SEALS) };
    seals >= 0 && seals & libc::F_SEAL_SHRINK != 0
}

/// The device of one vfio-user client.
pub struct Backend {
    hal: EmuHal,
    /// The client's `DMA_MAP`s, by IOVA.
    maps: BTreeMap<u64, Shared>,
}

fn invalid(what: &str) -> Error {
    Error::new(ErrorKind::InvalidInput, what.to_string())
}

impl Backend {
    /// Serves `dev` to one client.
    pub fn new(dev: &Arc<EmuDevice>) -> Self {
        Self {
            hal: dev.hal(),
            maps: BTreeMap::new(),
        }
    }

    /// Bytes of the doorbell BAR.
    fn doorbell_bytes(&self) -> u64 {
        u64::from(self.hal.device().config().uar_pages) * UAR_PAGE_SIZE as u64
    }

    /// The regions a client sees, by vfio-pci index.
    pub fn regions(&self) -> Vec<ServerRegion> {
        (0..VFIO_PCI_NUM_REGIONS)
            .map(|index| {
                let size = match index {
                    VFIO_PCI_BAR0_REGION_INDEX => BAR_REGS_SIZE as u64,
                    VFIO_PCI_BAR2_REGION_INDEX => self.doorbell_bytes(),
                    VFIO_PCI_CONFIG_REGION_INDEX => CONFIG_SIZE as u64,
                    _ => 0,
                };
                let flags = if size == 0 {
                    0
                } else {
                    VFIO_REGION_INFO_FLAG_READ | VFIO_REGION_INFO_FLAG_WRITE
                };
                ServerRegion {
                    region_info: vfio_region_info {
                        argsz: size_of::<vfio_region_info>() as u32,
                        index,
                        flags,
                        size,
                        ..Default::default()
                    },
                    sparse_areas: Vec::new(),
                    mmap_fd: None,
                }
            })
            .collect()
    }

    /// The interrupts a client sees: the device's MSI-X vectors, each an
    /// eventfd.
    pub fn irqs(&self) -> Vec<IrqInfo> {
        let vectors = u32::from(self.hal.device().config().msix_vectors);
        (0..VFIO_PCI_NUM_IRQS)
            .map(|index| {
                let msix = index == VFIO_PCI_MSIX_IRQ_INDEX;
                IrqInfo {
                    index,
                    flags: if msix { VFIO_IRQ_INFO_EVENTFD } else { 0 },
                    count: if msix { vectors } else { 0 },
                }
            })
            .collect()
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
}

impl ServerBackend for Backend {
    fn region_read(&mut self, region: u32, offset: u64, data: &mut [u8]) -> Result<(), Error> {
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

    fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> Result<(), Error> {
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
                    .map_err(|e| Error::other(e.to_string()))?;
            }
            // The configuration space is read-only here.
            (VFIO_PCI_CONFIG_REGION_INDEX, _) if end <= CONFIG_SIZE as u64 => {}
            _ => return Err(invalid("no such register")),
        }
        Ok(())
    }

    fn dma_map(
        &mut self,
        _flags: DmaMapFlags,
        offset: u64,
        address: u64,
        size: u64,
        fd: Option<File>,
    ) -> Result<(), Error> {
        // Memory without a file cannot be shared with this process.
        let file = fd.ok_or(invalid("DMA_MAP without a file descriptor"))?;
        let page = PAGE_SIZE as u64;
        if size == 0 || offset % page != 0 || address % page != 0 {
            return Err(invalid("DMA_MAP of an empty or unaligned range"));
        }
        let len = usize::try_from(size).map_err(|_| invalid("DMA_MAP too large"))?;
        // A page past the file's end would fault (SIGBUS) when the device
        // touched it: the range must lie inside the file, and the file must
        // be sealed against shrinking so that it stays there.
        let inside = offset
            .checked_add(size)
            .is_some_and(|end| end <= file.metadata().map_or(0, |m| m.len()));
        if !inside {
            return Err(invalid("DMA_MAP past the end of its file"));
        }
        if !sealed_against_shrinking(&file) {
            return Err(invalid("DMA_MAP of a file not sealed with F_SEAL_SHRINK"));
        }
        let map = MmapOptions::new().offset(offset).len(len).map_raw(&file)?;
        let host = NonNull::new(map.as_mut_ptr()).ok_or(invalid("DMA_MAP at address 0"))?;
        // SAFETY: the mapping stays in `self.maps` until `dma_unmap` has
        // removed it from the device's IOMMU (or the device is gone), so
        // the device reaches it only while it is mapped here.
        unsafe { self.hal.map_at(address, host, len) }
            .map_err(|e| Error::new(ErrorKind::AlreadyExists, e.to_string()))?;
        log::debug!("DMA_MAP {size:#x} bytes at iova {address:#x}");
        self.maps.insert(address, Shared { map });
        Ok(())
    }

    fn dma_unmap(&mut self, _flags: DmaUnmapFlags, address: u64, size: u64) -> Result<(), Error> {
        let len = usize::try_from(size).map_err(|_| invalid("DMA_UNMAP too large"))?;
        match self.maps.get(&address) {
            Some(s) if s.map.len() == len => {}
            _ => return Err(invalid("DMA_UNMAP of a range not mapped")),
        }
        self.hal
            .unmap_at(address, len)
            .map_err(|e| Error::other(e.to_string()))?;
        // The device can no longer reach it: the mapping may go.
        self.maps.remove(&address);
        Ok(())
    }

    fn reset(&mut self) -> Result<(), Error> {
        let v = Ctrl::new().with_reset(true).into_bits().to_ne();
        self.hal.mmio_write32(BAR_REGS, bar0::CTRL, v);
        Ok(())
    }

    fn set_irqs(
        &mut self,
        index: u32,
        _flags: u32,
        start: u32,
        count: u32,
        fds: Vec<File>,
    ) -> Result<(), Error> {
        if index != VFIO_PCI_MSIX_IRQ_INDEX {
            return Err(invalid("only MSI-X is served"));
        }
        let vectors = u32::from(self.hal.device().config().msix_vectors);
        let end = start.checked_add(count).filter(|&e| e <= vectors);
        if end.is_none() || (!fds.is_empty() && fds.len() != count as usize) {
            return Err(invalid("SET_IRQS of vectors the device does not have"));
        }
        let mut fds = fds.into_iter().map(OwnedFd::from);
        for v in start..start + count {
            // No descriptors: the vectors are no longer signalled.
            self.hal
                .forward_irq(v as u16, fds.next())
                .map_err(|e| Error::other(e.to_string()))?;
        }
        Ok(())
    }
}

impl Drop for Backend {
    fn drop(&mut self) {
        // Nothing of the client's may stay reachable once its mappings go.
        for (&iova, s) in &self.maps {
            let _ = self.hal.unmap_at(iova, s.map.len());
        }
    }
}

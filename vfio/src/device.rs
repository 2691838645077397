//! A PCI device opened through VFIO: regions, BARs, config space, reset and
//! interrupts.

use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::ptr::NonNull;
use std::sync::{Arc, RwLock};

use memmap2::{MmapOptions, MmapRaw};
use rnic_queues::MmioRegion;
use vfio_bindings::bindings::vfio::{
    vfio_device_info, vfio_irq_info, vfio_region_info, VFIO_DEVICE_FLAGS_PCI,
    VFIO_DEVICE_FLAGS_RESET, VFIO_IRQ_INFO_EVENTFD, VFIO_IRQ_SET_ACTION_TRIGGER,
    VFIO_IRQ_SET_DATA_EVENTFD, VFIO_IRQ_SET_DATA_NONE, VFIO_PCI_CONFIG_REGION_INDEX,
    VFIO_PCI_INTX_IRQ_INDEX, VFIO_PCI_MSIX_IRQ_INDEX, VFIO_PCI_MSI_IRQ_INDEX,
    VFIO_REGION_INFO_FLAG_MMAP, VFIO_REGION_INFO_FLAG_READ, VFIO_REGION_INFO_FLAG_WRITE,
};

use crate::container::{Container, DeviceClaim};
use crate::error::VfioError;
use crate::ioctl::*;
use crate::irq::{EventFd, IrqVectors};
use crate::sysfs::{PciAddress, Sysfs};

/// PCI command register offset in config space.
pub const PCI_COMMAND: u64 = 0x04;
/// Configuration-space offset of BAR 0's register; BAR n's is 4n further.
const PCI_BAR0: u64 = 0x10;
/// Command register: memory space enable.
pub const PCI_COMMAND_MEMORY: u16 = 1 << 1;
/// Command register: bus master enable (the device may issue DMA).
pub const PCI_COMMAND_MASTER: u16 = 1 << 2;

/// Where the VFIO layer finds the kernel's files.
#[derive(Debug, Clone)]
pub struct Paths {
    /// Root under which `sys/` is read (normally `/`).
    pub sysfs_root: PathBuf,
    /// Directory of the VFIO device nodes (normally `/dev/vfio`).
    pub dev_vfio: PathBuf,
}

impl Default for Paths {
    fn default() -> Self {
        Self {
            sysfs_root: "/".into(),
            dev_vfio: "/dev/vfio".into(),
        }
    }
}

/// A VFIO region (a BAR, the ROM, config space) as the kernel describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RegionInfo {
    /// Region index (`VFIO_PCI_BAR0_REGION_INDEX` ...).
    pub index: u32,
    /// `VFIO_REGION_INFO_FLAG_*`.
    pub flags: u32,
    /// Size in bytes (0: the region does not exist).
    pub size: u64,
    /// Offset of the region in the device fd (for pread/pwrite/mmap).
    pub offset: u64,
}

impl RegionInfo {
    /// Whether the region can be read.
    pub fn readable(&self) -> bool {
        self.flags & VFIO_REGION_INFO_FLAG_READ != 0
    }
    /// Whether the region can be written.
    pub fn writable(&self) -> bool {
        self.flags & VFIO_REGION_INFO_FLAG_WRITE != 0
    }
    /// Whether the region can be mmapped.
    pub fn mmappable(&self) -> bool {
        self.flags & VFIO_REGION_INFO_FLAG_MMAP != 0
    }
}

/// The kind of an interrupt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IrqKind {
    /// Legacy INTx (not used by this crate's interrupt helpers).
    Intx,
    /// MSI.
    Msi,
    /// MSI-X.
    Msix,
}

impl IrqKind {
    fn index(self) -> u32 {
        match self {
            Self::Intx => VFIO_PCI_INTX_IRQ_INDEX,
            Self::Msi => VFIO_PCI_MSI_IRQ_INDEX,
            Self::Msix => VFIO_PCI_MSIX_IRQ_INDEX,
        }
    }
}

/// An interrupt index as the kernel describes it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IrqInfo {
    /// The kind.
    pub kind: IrqKind,
    /// `VFIO_IRQ_INFO_*`.
    pub flags: u32,
    /// How many vectors the device offers (0: none).
    pub count: u32,
}

/// A BAR: a memory BAR mapped into this process, or an I/O port BAR (or a
/// memory BAR that could not be mapped) reached with pread/pwrite.
#[derive(Debug)]
pub struct Bar {
    region: RegionInfo,
    io: bool,
    // `mmio` points into `_map`; declared first so it is dropped first.
    mmio: Option<MmioRegion>,
    _map: Option<MmapRaw>,
    /// Why a memory BAR is not mapped.
    unmapped: Option<String>,
}

impl Bar {
    /// The region behind the BAR.
    pub fn region(&self) -> RegionInfo {
        self.region
    }

    /// Whether it is an I/O port BAR (never mapped: reached with
    /// pread/pwrite).
    pub fn is_io(&self) -> bool {
        self.io
    }

    /// For a memory BAR that is not mapped, why.
    pub fn unmapped_reason(&self) -> Option<&str> {
        self.unmapped.as_deref()
    }

    /// The BAR's size in bytes.
    pub fn len(&self) -> usize {
        self.region.size as usize
    }

    /// Whether the BAR is empty (never for a present BAR).
    pub fn is_empty(&self) -> bool {
        self.region.size == 0
    }

    /// The mapped registers, if the BAR is mmapped.
    pub fn mmio(&self) -> Option<&MmioRegion> {
        self.mmio.as_ref()
    }
}

/// A PCI device opened through VFIO.
///
/// Opening checks, in order: the address exists, the device has an IOMMU
/// group, it is bound to vfio-pci, the VFIO nodes can be opened, the group
/// is viable, the device is not open in this process already; each failure
/// is an error that names the fix. Memory BARs are mmapped at open.
/// Dropping the device disables its interrupts and closes the device,
/// group and (when the last user goes) container.
#[derive(Debug)]
pub struct VfioDevice {
    // Dropped in this order: BAR mappings (they hold the device file),
    // interrupts, the device file, then the claim and the group.
    bars: [Option<Bar>; 6],
    irqs: RwLock<Option<Arc<IrqVectors>>>,
    file: File,
    claim: DeviceClaim,
    addr: PciAddress,
    flags: u32,
    regions: Vec<RegionInfo>,
    irq_info: Vec<IrqInfo>,
    container: Arc<Container>,
}

impl VfioDevice {
    /// Opens the device at `addr` (e.g. `"0000:3b:00.0"`): in the container
    /// of its IOMMU group if this process has the group open already (for
    /// another function of a multi-function device, say), else in a new
    /// container.
    pub fn open(addr: &str) -> Result<Self, VfioError> {
        Self::open_with(addr, &Paths::default())
    }

    /// As [`VfioDevice::open`], reading sysfs and the VFIO nodes from
    /// `paths`.
    pub fn open_with(addr: &str, paths: &Paths) -> Result<Self, VfioError> {
        let addr = PciAddress::parse(addr)?;
        // Check sysfs first: its errors are the most precise.
        let group_no = Sysfs::new(&paths.sysfs_root).check_vfio_ready(addr)?;
        let mut tries = 0;
        loop {
            let container = match Container::holding_group(&paths.dev_vfio, group_no) {
                Some(c) => c,
                None => Container::open_at(&paths.dev_vfio)?,
            };
            match Self::open_in(&container, addr, paths) {
                // Another thread opened the group, in a container of its
                // own, in the meantime: join that one.
                Err(VfioError::GroupInOtherContainer { .. }) if tries < 3 => tries += 1,
                r => return r,
            }
        }
    }

    /// Opens the device at `addr` in an existing container, sharing its
    /// IOMMU address space (and its group, if already open) with the
    /// container's other devices.
    pub fn open_in(
        container: &Arc<Container>,
        addr: PciAddress,
        paths: &Paths,
    ) -> Result<Self, VfioError> {
        let sysfs = Sysfs::new(&paths.sysfs_root);
        let group_no = sysfs.check_vfio_ready(addr)?;
        let group = container.group(group_no, || VfioError::GroupNotViable {
            group: group_no,
            addr,
            others: sysfs.other_group_members(group_no, addr),
        })?;
        let claim = group.claim_device(addr)?;
        drop(group);
        let file = claim.group.device_fd(&addr.to_string())?;

        let mut info = vfio_device_info {
            argsz: size_of::<vfio_device_info>() as u32,
            ..Default::default()
        };
        // SAFETY: DEVICE_GET_INFO writes a vfio_device_info of `argsz` bytes.
        unsafe { ioctl_ptr(file.as_fd(), VFIO_DEVICE_GET_INFO, &mut info) }
            .map_err(|e| VfioError::ioctl(format!("VFIO_DEVICE_GET_INFO {addr}"), e))?;
        if info.flags & VFIO_DEVICE_FLAGS_PCI == 0 {
            return Err(VfioError::Unsupported {
                what: format!("{addr} is not a vfio-pci device (flags {:#x})", info.flags),
            });
        }
        let mut regions = Vec::new();
        for index in 0..info.num_regions {
            let mut r = vfio_region_info {
                argsz: size_of::<vfio_region_info>() as u32,
                index,
                ..Default::default()
            };
            // SAFETY: GET_REGION_INFO writes at most `argsz` bytes (it only
            // raises argsz to ask for room for capabilities).
            match unsafe { ioctl_ptr(file.as_fd(), VFIO_DEVICE_GET_REGION_INFO, &mut r) } {
                Ok(_) => regions.push(RegionInfo {
                    index,
                    flags: r.flags,
                    size: r.size,
                    offset: r.offset,
                }),
                // The VGA region of a non-VGA device, for example.
                Err(e) => log::debug!("{addr}: region {index}: {e}"),
            }
        }
        let mut irq_info = Vec::new();
        for kind in [IrqKind::Intx, IrqKind::Msi, IrqKind::Msix] {
            let mut q = vfio_irq_info {
                argsz: size_of::<vfio_irq_info>() as u32,
                index: kind.index(),
                ..Default::default()
            };
            // SAFETY: GET_IRQ_INFO writes a vfio_irq_info of `argsz` bytes.
            if unsafe { ioctl_ptr(file.as_fd(), VFIO_DEVICE_GET_IRQ_INFO, &mut q) }.is_ok() {
                irq_info.push(IrqInfo {
                    kind,
                    flags: q.flags,
                    count: q.count,
                });
            }
        }

        let config = regions
            .iter()
            .find(|r| r.index == VFIO_PCI_CONFIG_REGION_INDEX)
            .copied();
        let mut bars: [Option<Bar>; 6] = Default::default();
        for (i, slot) in bars.iter_mut().enumerate() {
            let Some(r) = regions.iter().find(|r| r.index == i as u32).copied() else {
                continue;
            };
            if r.size == 0 || !r.readable() {
                continue;
            }
            // Bit 0 of the BAR register: 1 for I/O space. (vfio-pci
            // virtualizes the register but keeps its type bits.)
            let mut reg = [0u8; 4];
            let io = config.is_some_and(|c| {
                file.read_exact_at(&mut reg, c.offset + PCI_BAR0 + 4 * i as u64)
                    .is_ok()
                    && reg[0] & 1 != 0
            });
            *slot = Some(map_bar(&file, addr, r, io));
        }
        log::info!(
            "opened {addr} (group {group_no}): {} regions, BARs {}, IRQs {}, reset {}",
            regions.len(),
            bars.iter()
                .enumerate()
                .filter_map(|(i, b)| b.as_ref().map(|b| format!(
                    "{i}:{:#x}{}",
                    b.len(),
                    match (b.io, b.mmio.is_some()) {
                        (true, _) => "(I/O, pread)",
                        (false, true) => "",
                        (false, false) => "(not mapped, pread)",
                    }
                )))
                .collect::<Vec<_>>()
                .join(","),
            irq_info
                .iter()
                .map(|q| format!("{:?}:{}", q.kind, q.count))
                .collect::<Vec<_>>()
                .join(","),
            info.flags & VFIO_DEVICE_FLAGS_RESET != 0
        );
        Ok(Self {
            bars,
            irqs: RwLock::new(None),
            file,
            claim,
            addr,
            flags: info.flags,
            regions,
            irq_info,
            container: Arc::clone(container),
        })
    }

    /// The device's PCI address.
    pub fn address(&self) -> PciAddress {
        self.addr
    }

    /// Its IOMMU group number.
    pub fn group(&self) -> u32 {
        self.claim.group.number()
    }

    /// The container (IOMMU address space) the device is in.
    pub fn container(&self) -> &Arc<Container> {
        &self.container
    }

    /// All regions the kernel reported.
    pub fn regions(&self) -> &[RegionInfo] {
        &self.regions
    }

    /// Region `index`, if it exists.
    pub fn region(&self, index: u32) -> Option<RegionInfo> {
        self.regions.iter().find(|r| r.index == index).copied()
    }

    /// What the device offers of interrupt `kind`.
    pub fn irq_info(&self, kind: IrqKind) -> Option<IrqInfo> {
        self.irq_info.iter().find(|q| q.kind == kind).copied()
    }

    /// BAR `index` (0..=5), if present.
    pub fn bar(&self, index: u8) -> Option<&Bar> {
        self.bars.get(index as usize)?.as_ref()
    }

    /// The bus address of memory BAR `index`, from its configuration
    /// register (and the next, for a 64-bit BAR): what the device itself is
    /// told when a driver hands it a BAR page, as PVRDMA's UAR frame.
    /// vfio-pci shows the address the kernel assigned.
    pub fn bar_address(&self, index: u8) -> Result<u64, VfioError> {
        let at = PCI_BAR0 + 4 * u64::from(index);
        let lo = if index < 6 {
            self.config_read32(at)?
        } else {
            1
        };
        if lo & 1 != 0 {
            return Err(VfioError::Unsupported {
                what: format!("{}: BAR {index} is not a memory BAR", self.addr),
            });
        }
        let mut addr = u64::from(lo & !0xf);
        // Type 2 (bits 2:1): 64-bit, the high half in the next register.
        if (lo >> 1) & 3 == 2 {
            addr |= u64::from(self.config_read32(at + 4)?) << 32;
        }
        Ok(addr)
    }

    fn bar_or_panic(&self, index: u8) -> &Bar {
        self.bar(index)
            .unwrap_or_else(|| panic!("{}: BAR {index} is not a present memory BAR", self.addr))
    }

    /// Reads a 32-bit register of BAR `bar` at `offset` (little-endian).
    /// A failed pread (BAR not mapped) reads as all ones, as a PCI read
    /// from a device that went away does.
    pub fn read32(&self, bar: u8, offset: usize) -> u32 {
        let b = self.bar_or_panic(bar);
        if let Some(m) = &b.mmio {
            return m.read32(offset);
        }
        let mut buf = [0u8; 4];
        let at = self.region_io_at(b, offset, 4);
        match self.file.read_exact_at(&mut buf, at) {
            Ok(()) => u32::from_le_bytes(buf),
            Err(e) => {
                log::error!("{}: BAR {bar} read at {offset:#x}: {e}", self.addr);
                u32::MAX
            }
        }
    }

    /// Writes a 32-bit register of BAR `bar` at `offset` (little-endian).
    pub fn write32(&self, bar: u8, offset: usize, value: u32) {
        let b = self.bar_or_panic(bar);
        if let Some(m) = &b.mmio {
            return m.write32(offset, value);
        }
        let at = self.region_io_at(b, offset, 4);
        if let Err(e) = self.file.write_all_at(&value.to_le_bytes(), at) {
            log::error!("{}: BAR {bar} write at {offset:#x}: {e}", self.addr);
        }
    }

    /// Writes a 64-bit register of BAR `bar` at `offset` with one store.
    ///
    /// # Panics
    ///
    /// If the BAR is not mapped (an I/O port BAR, or a memory BAR that
    /// could not be mmapped): vfio-pci's pread/pwrite path does accesses of
    /// at most 4 bytes before Linux 6.11, so the write would reach the
    /// device as two 32-bit writes. [`crate::VfioHal`] refuses a device
    /// with an unmapped memory BAR at open, so it never gets here.
    pub fn write64(&self, bar: u8, offset: usize, value: u64) {
        let b = self.bar_or_panic(bar);
        if let Some(m) = &b.mmio {
            return m.write64(offset, value);
        }
        panic!(
            "{}: 64-bit write to BAR {bar} at {offset:#x}, which is not mapped ({}): through \
             pread/pwrite vfio-pci would split it into two 32-bit writes, not the single \
             64-bit store asked for; this platform cannot do it",
            self.addr,
            b.unmapped
                .as_deref()
                .unwrap_or("an I/O port BAR, reached with pread/pwrite")
        );
    }

    /// The file offset of a `size`-byte access at `offset` of a BAR
    /// reached with pread/pwrite, after checking that it is aligned and
    /// inside the BAR.
    fn region_io_at(&self, b: &Bar, offset: usize, size: usize) -> u64 {
        let inside = offset.checked_add(size).is_some_and(|end| end <= b.len());
        assert!(
            offset % size == 0 && inside,
            "{}: BAR access at {offset:#x} (size {size}) outside a BAR of {:#x} bytes or unaligned",
            self.addr,
            b.len()
        );
        b.region.offset + offset as u64
    }

    fn config(&self) -> Result<RegionInfo, VfioError> {
        self.region(VFIO_PCI_CONFIG_REGION_INDEX)
            .ok_or_else(|| VfioError::Unsupported {
                what: format!("{}: no config space region", self.addr),
            })
    }

    /// Reads `buf.len()` bytes of PCI config space at `offset`.
    pub fn config_read(&self, offset: u64, buf: &mut [u8]) -> Result<(), VfioError> {
        let c = self.config()?;
        self.file
            .read_exact_at(buf, c.offset + offset)
            .map_err(|e| VfioError::io(format!("{}: config read at {offset:#x}", self.addr), e))
    }

    /// Writes `buf` to PCI config space at `offset`.
    pub fn config_write(&self, offset: u64, buf: &[u8]) -> Result<(), VfioError> {
        let c = self.config()?;
        self.file
            .write_all_at(buf, c.offset + offset)
            .map_err(|e| VfioError::io(format!("{}: config write at {offset:#x}", self.addr), e))
    }

    /// Reads a 16-bit config register.
    pub fn config_read16(&self, offset: u64) -> Result<u16, VfioError> {
        let mut b = [0u8; 2];
        self.config_read(offset, &mut b)?;
        Ok(u16::from_le_bytes(b))
    }

    /// Reads a 32-bit config register.
    pub fn config_read32(&self, offset: u64) -> Result<u32, VfioError> {
        let mut b = [0u8; 4];
        self.config_read(offset, &mut b)?;
        Ok(u32::from_le_bytes(b))
    }

    /// Writes a 16-bit config register.
    pub fn config_write16(&self, offset: u64, value: u16) -> Result<(), VfioError> {
        self.config_write(offset, &value.to_le_bytes())
    }

    /// Turns bus mastering (the device's permission to do DMA) and memory
    /// space decoding on, or bus mastering off.
    pub fn set_bus_master(&self, enable: bool) -> Result<(), VfioError> {
        let cmd = self.config_read16(PCI_COMMAND)?;
        let new = if enable {
            cmd | PCI_COMMAND_MASTER | PCI_COMMAND_MEMORY
        } else {
            cmd & !PCI_COMMAND_MASTER
        };
        if new != cmd {
            self.config_write16(PCI_COMMAND, new)?;
        }
        log::debug!("{}: PCI command {cmd:#06x} -> {new:#06x}", self.addr);
        Ok(())
    }

    /// Whether the kernel can reset this device (`VFIO_DEVICE_RESET`).
    pub fn can_reset(&self) -> bool {
        self.flags & VFIO_DEVICE_FLAGS_RESET != 0
    }

    /// Resets the device (function-level, power-management or secondary
    /// bus reset, whichever the kernel has for it). The kernel saves and
    /// restores the config space around it.
    pub fn reset(&self) -> Result<(), VfioError> {
        if !self.can_reset() {
            return Err(VfioError::Unsupported {
                what: format!(
                    "VFIO_DEVICE_RESET on {}: the kernel has no reset method for it (no FLR, \
                     PM or bus reset; see /sys/bus/pci/devices/{}/reset_method)",
                    self.addr, self.addr
                ),
            });
        }
        ioctl_val(self.file.as_fd(), VFIO_DEVICE_RESET, 0)
            .map_err(|e| VfioError::ioctl(format!("VFIO_DEVICE_RESET {}", self.addr), e))?;
        log::info!("{}: reset", self.addr);
        Ok(())
    }

    /// Enables `count` vectors of MSI or MSI-X, each signalling its own
    /// eventfd. Any interrupts enabled before are disabled first.
    pub fn enable_irqs(&self, kind: IrqKind, count: u32) -> Result<Arc<IrqVectors>, VfioError> {
        let info = self.irq_info(kind).filter(|q| q.count > 0);
        let Some(info) = info else {
            return Err(VfioError::Unsupported {
                what: format!("{}: the device has no {kind:?} interrupts", self.addr),
            });
        };
        if kind == IrqKind::Intx || info.flags & VFIO_IRQ_INFO_EVENTFD == 0 {
            return Err(VfioError::Unsupported {
                what: format!("{}: {kind:?} through eventfds", self.addr),
            });
        }
        if count == 0 || count > info.count {
            return Err(VfioError::Unsupported {
                what: format!(
                    "{}: {count} {kind:?} vectors (the device has {})",
                    self.addr, info.count
                ),
            });
        }
        self.disable_irqs()?;
        let fds = (0..count)
            .map(|_| EventFd::new())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| VfioError::io("eventfd", e))?;
        let raw: Vec<i32> = fds
            .iter()
            .map(|f| std::os::fd::AsRawFd::as_raw_fd(&f.as_fd()))
            .collect();
        self.set_irqs(
            kind,
            VFIO_IRQ_SET_DATA_EVENTFD | VFIO_IRQ_SET_ACTION_TRIGGER,
            &raw,
        )?;
        let v = Arc::new(IrqVectors { kind, fds });
        *self.irqs.write().unwrap_or_else(|e| e.into_inner()) = Some(Arc::clone(&v));
        log::info!("{}: {count} {kind:?} vector(s) on eventfds", self.addr);
        Ok(v)
    }

    /// Disables the interrupts enabled by [`VfioDevice::enable_irqs`]. If
    /// the kernel refuses, they stay enabled (and their eventfds open).
    pub fn disable_irqs(&self) -> Result<(), VfioError> {
        let mut irqs = self.irqs.write().unwrap_or_else(|e| e.into_inner());
        if let Some(v) = irqs.as_ref() {
            let kind = v.kind;
            self.set_irqs(
                kind,
                VFIO_IRQ_SET_DATA_NONE | VFIO_IRQ_SET_ACTION_TRIGGER,
                &[],
            )?;
            *irqs = None;
            log::debug!("{}: {kind:?} interrupts disabled", self.addr);
        }
        Ok(())
    }

    /// The enabled interrupt vectors, if any.
    pub fn irqs(&self) -> Option<Arc<IrqVectors>> {
        self.irqs.read().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Waits up to `timeout_ns` for interrupt `vector`: `Ok(true)` if it
    /// fired (its count is cleared), `Ok(false)` on timeout.
    pub fn wait_irq(&self, vector: u16, timeout_ns: u64) -> Result<bool, VfioError> {
        let v = self.irqs().ok_or_else(|| VfioError::Unsupported {
            what: format!("{}: waiting for an interrupt with none enabled", self.addr),
        })?;
        let fd = v
            .eventfd(vector as usize)
            .ok_or_else(|| VfioError::Unsupported {
                what: format!(
                    "{}: interrupt vector {vector} (only {} enabled)",
                    self.addr,
                    v.len()
                ),
            })?;
        fd.wait(timeout_ns)
            .map_err(|e| VfioError::io("waiting on an interrupt eventfd", e))
    }

    fn set_irqs(&self, kind: IrqKind, flags: u32, fds: &[i32]) -> Result<(), VfioError> {
        // struct vfio_irq_set { argsz, flags, index, start, count; u8 data[] }
        let mut buf = Vec::with_capacity(20 + 4 * fds.len());
        let argsz = (20 + 4 * fds.len()) as u32;
        for v in [argsz, flags, kind.index(), 0, fds.len() as u32] {
            buf.extend_from_slice(&v.to_ne_bytes());
        }
        for fd in fds {
            buf.extend_from_slice(&fd.to_ne_bytes());
        }
        // SAFETY: SET_IRQS reads a vfio_irq_set of `argsz` bytes, which is
        // the buffer's length.
        unsafe { ioctl_ptr(self.file.as_fd(), VFIO_DEVICE_SET_IRQS, buf.as_mut_ptr()) }.map_err(
            |e| {
                VfioError::ioctl(
                    format!(
                        "VFIO_DEVICE_SET_IRQS {} {kind:?} count {}",
                        self.addr,
                        fds.len()
                    ),
                    e,
                )
            },
        )?;
        Ok(())
    }
}

impl Drop for VfioDevice {
    fn drop(&mut self) {
        if let Err(e) = self.disable_irqs() {
            log::warn!("{}: disabling interrupts on close: {e}", self.addr);
        }
        log::debug!("{}: closed", self.addr);
    }
}

fn map_bar(file: &File, addr: PciAddress, r: RegionInfo, io: bool) -> Bar {
    let unmapped = |why: String| Bar {
        region: r,
        io,
        mmio: None,
        _map: None,
        unmapped: (!io).then_some(why),
    };
    if io {
        log::debug!(
            "{addr}: BAR {} is an I/O port BAR; using pread/pwrite",
            r.index
        );
        return unmapped(String::new());
    }
    if !r.mmappable() {
        let why = "vfio-pci does not allow mmap of it (no VFIO_REGION_INFO_FLAG_MMAP)".to_string();
        log::warn!("{addr}: memory BAR {}: {why}; only pread/pwrite", r.index);
        return unmapped(why);
    }
    // The whole BAR, even where the kernel lists sparse mmap areas (around
    // an MSI-X table): vfio-pci allows that since Linux 4.16.
    match MmapOptions::new()
        .offset(r.offset)
        .len(r.size as usize)
        .map_raw(file)
    {
        Ok(map) => {
            let base = NonNull::new(map.as_mut_ptr()).expect("mmap never returns null");
            // SAFETY: `base .. base + size` is a shared mapping of the BAR,
            // valid for volatile accesses while `map` lives; the Bar keeps
            // `map` and drops `mmio` before it.
            let mmio = unsafe { MmioRegion::new(base, r.size as usize) };
            Bar {
                region: r,
                io,
                mmio: Some(mmio),
                _map: Some(map),
                unmapped: None,
            }
        }
        Err(e) => {
            let why = format!("mmap of its {:#x} bytes failed: {e}", r.size);
            log::warn!("{addr}: memory BAR {}: {why}; only pread/pwrite", r.index);
            unmapped(why)
        }
    }
}

//! The VFIO container (an IOMMU address space) and groups.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::os::fd::{AsFd, AsRawFd, FromRawFd};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

use vfio_bindings::bindings::vfio::{
    vfio_group_status, vfio_iommu_type1_dma_map, vfio_iommu_type1_dma_unmap, vfio_iommu_type1_info,
    VFIO_TYPE1v2_IOMMU, VFIO_API_VERSION, VFIO_DMA_MAP_FLAG_READ, VFIO_DMA_MAP_FLAG_WRITE,
    VFIO_GROUP_FLAGS_VIABLE, VFIO_IOMMU_INFO_CAPS, VFIO_IOMMU_INFO_PGSIZES,
    VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE, VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL, VFIO_TYPE1_IOMMU,
};

use crate::dma::SharedDma;
use crate::error::{memlock_may_limit, VfioError};
use crate::ioctl::*;
use crate::sysfs::PciAddress;

/// Which type 1 IOMMU backend the container uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IommuType {
    /// `VFIO_TYPE1v2_IOMMU`: unmaps must cover whole mappings (preferred).
    Type1v2,
    /// `VFIO_TYPE1_IOMMU`: the original type 1 interface.
    Type1,
}

/// What the IOMMU allows, from `VFIO_IOMMU_GET_INFO`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IommuInfo {
    /// The backend in use.
    pub kind: IommuType,
    /// Bitmap of supported IOMMU page sizes (bit n set: 2^n bytes).
    pub page_sizes: u64,
    /// Valid IOVA ranges, inclusive `(start, last)`. Reserved regions (the
    /// x86 MSI window, for example) are already left out.
    pub iova_ranges: Vec<(u64, u64)>,
    /// How many more DMA mappings the container may make, if reported.
    pub dma_avail: Option<u32>,
}

impl IommuInfo {
    /// The smallest IOMMU page size (4 KiB when not reported).
    pub fn min_page(&self) -> u64 {
        if self.page_sizes == 0 {
            4096
        } else {
            1 << self.page_sizes.trailing_zeros()
        }
    }
}

/// IOVA ranges assumed when the kernel does not report them (before Linux
/// 5.4): the low 4 GiB below the x86 MSI window.
const FALLBACK_IOVA_RANGES: [(u64, u64); 1] = [(0, 0xfedf_ffff)];

/// Parses the capability chain of a `VFIO_IOMMU_GET_INFO` answer: the
/// valid IOVA ranges and the available DMA mapping count. `buf` is the
/// whole answer, the chain starting at `cap_offset`.
pub(crate) fn parse_iommu_caps(buf: &[u8], cap_offset: u32) -> (Vec<(u64, u64)>, Option<u32>) {
    let u32_at =
        |o: usize| -> Option<u32> { Some(u32::from_ne_bytes(buf.get(o..o + 4)?.try_into().ok()?)) };
    let u64_at =
        |o: usize| -> Option<u64> { Some(u64::from_ne_bytes(buf.get(o..o + 8)?.try_into().ok()?)) };
    let mut ranges = Vec::new();
    let mut avail = None;
    let mut off = cap_offset as usize;
    let mut hops = 0;
    // Header: u16 id, u16 version, u32 next (offset from the start, 0 ends).
    while off != 0 && off + 8 <= buf.len() && hops < 64 {
        hops += 1;
        let id = u16::from_ne_bytes([buf[off], buf[off + 1]]) as u32;
        let next = u32_at(off + 4).unwrap_or(0) as usize;
        match id {
            VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE => {
                let n = u32_at(off + 8).unwrap_or(0) as usize;
                for i in 0..n {
                    let at = off + 16 + i * 16;
                    if let (Some(s), Some(e)) = (u64_at(at), u64_at(at + 8)) {
                        ranges.push((s, e));
                    }
                }
            }
            VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL => avail = u32_at(off + 8),
            _ => {}
        }
        if next <= off {
            break;
        }
        off = next;
    }
    (ranges, avail)
}

/// The IOMMU groups this process has open, by node path. An entry is put
/// in when the group's node is opened and taken out only after it is closed
/// (a dead `Weak` is a group being closed), so a group is never opened
/// twice: the kernel lets a group node be opened once at a time.
static OPEN_GROUPS: Mutex<BTreeMap<PathBuf, Weak<Group>>> = Mutex::new(BTreeMap::new());

fn open_groups() -> MutexGuard<'static, BTreeMap<PathBuf, Weak<Group>>> {
    OPEN_GROUPS.lock().unwrap_or_else(|e| e.into_inner())
}

/// A VFIO IOMMU group (`/dev/vfio/N`), attached to a container.
#[derive(Debug)]
pub struct Group {
    /// `None` only while being dropped.
    file: Option<File>,
    number: u32,
    path: PathBuf,
    container: Arc<Container>,
    /// Its devices open in this process.
    devices: Mutex<BTreeSet<PciAddress>>,
}

impl Group {
    /// The group number.
    pub fn number(&self) -> u32 {
        self.number
    }

    /// The container the group is attached to.
    pub fn container(&self) -> &Arc<Container> {
        &self.container
    }

    /// Marks device `addr` of this group open in this process, until the
    /// returned claim is dropped; refuses a device already open (the kernel
    /// would hand out a second file descriptor for it, and two owners of
    /// one device would undo each other's interrupt and DMA settings).
    pub(crate) fn claim_device(
        self: &Arc<Self>,
        addr: PciAddress,
    ) -> Result<DeviceClaim, VfioError> {
        let mut devices = self.devices.lock().unwrap_or_else(|e| e.into_inner());
        if !devices.insert(addr) {
            return Err(VfioError::DeviceAlreadyOpen { addr });
        }
        Ok(DeviceClaim {
            group: Arc::clone(self),
            addr,
        })
    }

    /// Opens the device `addr` of this group and returns its fd as a file.
    pub(crate) fn device_fd(&self, name: &str) -> Result<File, VfioError> {
        let c = CString::new(name).expect("PCI address has no NUL");
        let file = self.file.as_ref().expect("a live group is open");
        // SAFETY: GET_DEVICE_FD reads a NUL-terminated string; `c` lives
        // across the call.
        let fd = unsafe {
            ioctl_ptr(
                file.as_fd(),
                VFIO_GROUP_GET_DEVICE_FD,
                c.as_ptr() as *mut u8,
            )
        }
        .map_err(|e| VfioError::ioctl(format!("VFIO_GROUP_GET_DEVICE_FD {name}"), e))?;
        // SAFETY: on success the ioctl returns a new file descriptor that
        // nothing else owns.
        Ok(unsafe { File::from_raw_fd(fd) })
    }
}

impl Drop for Group {
    fn drop(&mut self) {
        let mut open = open_groups();
        // Closing the node detaches the group from its container; the
        // kernel drops the container's IOMMU backend (and every DMA mapping)
        // when its last group goes.
        drop(self.file.take());
        if self.container.attached.fetch_sub(1, Ordering::AcqRel) == 1 {
            *self
                .container
                .info
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = None;
        }
        open.remove(&self.path);
        log::debug!("IOMMU group {} closed", self.number);
    }
}

/// A device of a group marked open in this process
/// ([`Group::claim_device`]).
#[derive(Debug)]
pub(crate) struct DeviceClaim {
    pub(crate) group: Arc<Group>,
    addr: PciAddress,
}

impl Drop for DeviceClaim {
    fn drop(&mut self) {
        let mut devices = self.group.devices.lock().unwrap_or_else(|e| e.into_inner());
        devices.remove(&self.addr);
    }
}

/// A VFIO container: one IOMMU address space, shared by the groups (and so
/// the devices) attached to it.
#[derive(Debug)]
pub struct Container {
    file: File,
    dev_root: PathBuf,
    kind: IommuType,
    /// From `VFIO_IOMMU_GET_INFO`, refreshed as groups are attached.
    info: Mutex<Option<IommuInfo>>,
    /// Groups attached (changed only under the `OPEN_GROUPS` lock).
    attached: AtomicUsize,
    /// The DMA space of its `VfioHal`s: present from its creation until it
    /// has been torn down (a dead `Weak` is one being torn down).
    dma: Mutex<Option<Weak<SharedDma>>>,
}

impl Container {
    /// Opens `/dev/vfio/vfio` and checks the API version and the type 1
    /// IOMMU backend.
    pub fn open() -> Result<Arc<Self>, VfioError> {
        Self::open_at("/dev/vfio")
    }

    /// As [`Container::open`], with the VFIO device nodes in `dev_root`
    /// (normally `/dev/vfio`).
    pub fn open_at(dev_root: impl Into<PathBuf>) -> Result<Arc<Self>, VfioError> {
        let dev_root = dev_root.into();
        let file = open_node(&dev_root.join("vfio"))?;
        let api = ioctl_val(file.as_fd(), VFIO_GET_API_VERSION, 0)
            .map_err(|e| VfioError::ioctl("VFIO_GET_API_VERSION", e))?;
        if api != VFIO_API_VERSION as i32 {
            return Err(VfioError::Unsupported {
                what: format!("VFIO API version {api} (this crate speaks {VFIO_API_VERSION})"),
            });
        }
        let has = |ext: u32| {
            ioctl_val(file.as_fd(), VFIO_CHECK_EXTENSION, ext as libc::c_ulong).unwrap_or(0) > 0
        };
        let kind = if has(VFIO_TYPE1v2_IOMMU) {
            IommuType::Type1v2
        } else if has(VFIO_TYPE1_IOMMU) {
            IommuType::Type1
        } else {
            return Err(VfioError::NoIommuBackend);
        };
        log::debug!("VFIO container open, IOMMU backend {kind:?}");
        Ok(Arc::new(Self {
            file,
            dev_root,
            kind,
            info: Mutex::new(None),
            attached: AtomicUsize::new(0),
            dma: Mutex::new(None),
        }))
    }

    /// The container that group `number` (its node in `dev_root`) is
    /// attached to, if this process has the group open.
    pub fn holding_group(dev_root: impl AsRef<Path>, number: u32) -> Option<Arc<Self>> {
        let path = dev_root.as_ref().join(number.to_string());
        let open = open_groups();
        let group = open.get(&path).and_then(Weak::upgrade);
        drop(open); // before `group`: dropping the last one takes the lock
        group.map(|g| Arc::clone(&g.container))
    }

    /// The IOMMU's properties; `None` while no group is attached.
    pub fn iommu_info(&self) -> Option<IommuInfo> {
        self.info.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The slot of the container's shared DMA space.
    pub(crate) fn dma_slot(&self) -> MutexGuard<'_, Option<Weak<SharedDma>>> {
        self.dma.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The group `number`, opened and attached to this container (or the
    /// one already attached).
    ///
    /// `not_viable` makes the error for a group that is not viable.
    pub(crate) fn group(
        self: &Arc<Self>,
        number: u32,
        not_viable: impl FnOnce() -> VfioError,
    ) -> Result<Arc<Group>, VfioError> {
        let path = self.dev_root.join(number.to_string());
        let mut open = loop {
            let open = open_groups();
            match open.get(&path).map(Weak::upgrade) {
                None => break open,
                Some(Some(g)) => {
                    drop(open); // before `g`: dropping the last one takes the lock
                    if Arc::ptr_eq(&g.container, self) {
                        return Ok(g);
                    }
                    return Err(VfioError::GroupInOtherContainer { group: number });
                }
                // Being closed by another thread: wait for it to finish.
                Some(None) => {
                    drop(open);
                    std::thread::yield_now();
                }
            }
        };
        let file = match open_node(&path) {
            Err(VfioError::Io { source, .. }) if source.raw_os_error() == Some(libc::EBUSY) => {
                return Err(VfioError::GroupBusy { group: number })
            }
            r => r?,
        };
        let mut status = vfio_group_status {
            argsz: size_of::<vfio_group_status>() as u32,
            flags: 0,
        };
        // SAFETY: GROUP_GET_STATUS writes a vfio_group_status of `argsz`
        // bytes, which `status` is.
        unsafe { ioctl_ptr(file.as_fd(), VFIO_GROUP_GET_STATUS, &mut status) }.map_err(|e| {
            VfioError::ioctl(format!("VFIO_GROUP_GET_STATUS {}", path.display()), e)
        })?;
        if status.flags & VFIO_GROUP_FLAGS_VIABLE == 0 {
            return Err(not_viable());
        }
        let mut cfd: libc::c_int = self.file.as_raw_fd();
        // SAFETY: GROUP_SET_CONTAINER reads one int (the container fd).
        unsafe { ioctl_ptr(file.as_fd(), VFIO_GROUP_SET_CONTAINER, &mut cfd) }
            .map_err(|e| VfioError::ioctl(format!("VFIO_GROUP_SET_CONTAINER group {number}"), e))?;
        // The kernel drops a container's IOMMU backend when its last group
        // leaves, so the first group, of a new container or of one whose
        // groups have all been closed, sets it again. (On an error below,
        // closing `file` detaches the group again.)
        let first = self.attached.load(Ordering::Acquire) == 0;
        if first {
            let kind = match self.kind {
                IommuType::Type1v2 => VFIO_TYPE1v2_IOMMU,
                IommuType::Type1 => VFIO_TYPE1_IOMMU,
            };
            ioctl_val(self.file.as_fd(), VFIO_SET_IOMMU, kind as libc::c_ulong)
                .map_err(|e| VfioError::ioctl(format!("VFIO_SET_IOMMU {:?}", self.kind), e))?;
        }
        // Each group may narrow the valid IOVA ranges (its reserved
        // regions), so the information is read again.
        let info = self.query_info()?;
        let mut cached = self.info.lock().unwrap_or_else(|e| e.into_inner());
        if first || cached.as_ref() != Some(&info) {
            log::info!(
                "IOMMU {:?}: page sizes {:#x}, IOVA ranges {}, DMA mappings available {:?}",
                info.kind,
                info.page_sizes,
                info.iova_ranges
                    .iter()
                    .map(|(s, e)| format!("{s:#x}..={e:#x}"))
                    .collect::<Vec<_>>()
                    .join(" "),
                info.dma_avail
            );
        }
        *cached = Some(info);
        drop(cached);
        self.attached.fetch_add(1, Ordering::AcqRel);
        let group = Arc::new(Group {
            file: Some(file),
            number,
            path: path.clone(),
            container: Arc::clone(self),
            devices: Mutex::new(BTreeSet::new()),
        });
        open.insert(path, Arc::downgrade(&group));
        Ok(group)
    }

    fn query_info(&self) -> Result<IommuInfo, VfioError> {
        let base = size_of::<vfio_iommu_type1_info>();
        let mut argsz = base;
        let mut buf;
        loop {
            buf = vec![0u8; argsz];
            buf[..4].copy_from_slice(&(argsz as u32).to_ne_bytes());
            // SAFETY: the buffer is `argsz` bytes, as its header says, so
            // the kernel writes inside it.
            unsafe { ioctl_ptr(self.file.as_fd(), VFIO_IOMMU_GET_INFO, buf.as_mut_ptr()) }
                .map_err(|e| VfioError::ioctl("VFIO_IOMMU_GET_INFO", e))?;
            let want = u32::from_ne_bytes(buf[..4].try_into().unwrap()) as usize;
            if want <= argsz {
                break;
            }
            argsz = want; // the capability chain needs more room
        }
        let flags = u32::from_ne_bytes(buf[4..8].try_into().unwrap());
        let page_sizes = if flags & VFIO_IOMMU_INFO_PGSIZES != 0 {
            u64::from_ne_bytes(buf[8..16].try_into().unwrap())
        } else {
            0
        };
        let cap_offset = u32::from_ne_bytes(buf[16..20].try_into().unwrap());
        let (mut iova_ranges, dma_avail) = if flags & VFIO_IOMMU_INFO_CAPS != 0 {
            parse_iommu_caps(&buf, cap_offset)
        } else {
            (Vec::new(), None)
        };
        if iova_ranges.is_empty() {
            log::warn!(
                "the kernel reports no valid IOVA ranges; assuming {FALLBACK_IOVA_RANGES:x?}"
            );
            iova_ranges = FALLBACK_IOVA_RANGES.to_vec();
        }
        Ok(IommuInfo {
            kind: self.kind,
            page_sizes,
            iova_ranges,
            dma_avail,
        })
    }

    /// Maps `len` bytes at `vaddr` for device reads and writes at `iova`
    /// (`VFIO_IOMMU_MAP_DMA`; the kernel pins the pages).
    ///
    /// # Safety
    ///
    /// `vaddr .. vaddr + len` must be memory of this process that stays
    /// valid until [`Container::unmap_dma`], and the caller accepts that
    /// the device reads and writes it at any time until then.
    pub unsafe fn map_dma(&self, vaddr: usize, iova: u64, len: u64) -> Result<(), VfioError> {
        let mut map = vfio_iommu_type1_dma_map {
            argsz: size_of::<vfio_iommu_type1_dma_map>() as u32,
            flags: VFIO_DMA_MAP_FLAG_READ | VFIO_DMA_MAP_FLAG_WRITE,
            vaddr: vaddr as u64,
            iova,
            size: len,
        };
        // SAFETY: MAP_DMA reads a vfio_iommu_type1_dma_map of `argsz`
        // bytes; the memory it describes is the caller's (see above).
        match unsafe { ioctl_ptr(self.file.as_fd(), VFIO_IOMMU_MAP_DMA, &mut map) } {
            Ok(_) => Ok(()),
            Err(e) => {
                log::error!("VFIO_IOMMU_MAP_DMA vaddr {vaddr:#x} iova {iova:#x} len {len:#x}: {e}");
                Err(match e.raw_os_error() {
                    // type1 pins the pages and charges them to
                    // RLIMIT_MEMLOCK; going over is ENOMEM (but so is
                    // running out of kernel memory, when no limit applies).
                    Some(libc::ENOMEM) if memlock_may_limit() => VfioError::memlock(len as usize),
                    Some(libc::ENOSPC) => VfioError::TooManyMappings {
                        avail: self.iommu_info().and_then(|i| i.dma_avail),
                    },
                    _ => VfioError::ioctl(
                        format!("VFIO_IOMMU_MAP_DMA iova {iova:#x} len {len:#x}"),
                        e,
                    ),
                })
            }
        }
    }

    /// Removes the mapping at `iova .. iova + len` (`VFIO_IOMMU_UNMAP_DMA`).
    /// After it returns, the device can no longer reach that memory.
    pub fn unmap_dma(&self, iova: u64, len: u64) -> Result<(), VfioError> {
        let mut unmap = vfio_iommu_type1_dma_unmap {
            argsz: size_of::<vfio_iommu_type1_dma_unmap>() as u32,
            flags: 0,
            iova,
            size: len,
            data: Default::default(),
        };
        // SAFETY: UNMAP_DMA reads and writes a vfio_iommu_type1_dma_unmap of
        // `argsz` bytes (no dirty bitmap requested).
        unsafe { ioctl_ptr(self.file.as_fd(), VFIO_IOMMU_UNMAP_DMA, &mut unmap) }.map_err(|e| {
            VfioError::ioctl(
                format!("VFIO_IOMMU_UNMAP_DMA iova {iova:#x} len {len:#x}"),
                e,
            )
        })?;
        if unmap.size != len {
            return Err(VfioError::NotMapped { iova, len });
        }
        Ok(())
    }
}

/// Opens a VFIO device node, turning the usual failures into errors that
/// name the fix.
fn open_node(path: &Path) -> Result<File, VfioError> {
    match OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_CLOEXEC)
        .open(path)
    {
        Ok(f) => Ok(f),
        Err(e) => Err(match e.raw_os_error() {
            Some(libc::ENOENT) | Some(libc::ENODEV) | Some(libc::ENXIO) => VfioError::VfioMissing {
                path: path.to_path_buf(),
            },
            Some(libc::EACCES) | Some(libc::EPERM) => permission_error(path),
            _ => VfioError::io(format!("open {}", path.display()), e),
        }),
    }
}

/// A [`VfioError::Permission`] for `path`, with the node's owner and mode.
pub(crate) fn permission_error(path: &Path) -> VfioError {
    let node = std::fs::metadata(path).ok().map(|m| {
        format!(
            "uid {} gid {} mode {:04o}",
            m.uid(),
            m.gid(),
            m.mode() & 0o7777
        )
    });
    // SAFETY: geteuid/getegid have no preconditions.
    let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
    VfioError::Permission {
        path: path.to_path_buf(),
        node,
        euid,
        egid,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testutil::TempDir;

    #[test]
    fn parses_the_capability_chain() {
        // A GET_INFO answer: 24-byte header, then a DMA_AVAIL capability at
        // 24 pointing to an IOVA_RANGE capability at 40 with two ranges.
        let mut b = vec![0u8; 40 + 16 + 2 * 16];
        let n = b.len() as u32;
        b[0..4].copy_from_slice(&n.to_ne_bytes());
        b[16..20].copy_from_slice(&24u32.to_ne_bytes());
        b[24..26].copy_from_slice(&(VFIO_IOMMU_TYPE1_INFO_DMA_AVAIL as u16).to_ne_bytes());
        b[28..32].copy_from_slice(&40u32.to_ne_bytes());
        b[32..36].copy_from_slice(&65535u32.to_ne_bytes());
        b[40..42].copy_from_slice(&(VFIO_IOMMU_TYPE1_INFO_CAP_IOVA_RANGE as u16).to_ne_bytes());
        b[44..48].copy_from_slice(&0u32.to_ne_bytes());
        b[48..52].copy_from_slice(&2u32.to_ne_bytes());
        let ranges = [(0u64, 0xfedf_ffffu64), (0xfef0_0000, 0x7f_ffff_ffff)];
        for (i, (s, e)) in ranges.iter().enumerate() {
            let at = 56 + i * 16;
            b[at..at + 8].copy_from_slice(&s.to_ne_bytes());
            b[at + 8..at + 16].copy_from_slice(&e.to_ne_bytes());
        }
        let (r, avail) = parse_iommu_caps(&b, 24);
        assert_eq!(r, ranges.to_vec());
        assert_eq!(avail, Some(65535));

        // A truncated buffer or a looping chain does not run away.
        let (r, _) = parse_iommu_caps(&b[..60], 24);
        assert!(r.is_empty());
        b[28..32].copy_from_slice(&24u32.to_ne_bytes());
        let (r, avail) = parse_iommu_caps(&b, 24);
        assert!(r.is_empty());
        assert_eq!(avail, Some(65535));
    }

    #[test]
    fn missing_vfio_node_says_to_load_the_module() {
        let dir = TempDir::new("devvfio");
        let e = Container::open_at(dir.path()).unwrap_err();
        assert!(matches!(e, VfioError::VfioMissing { .. }), "{e}");
        assert!(
            e.to_string()
                .contains("modprobe -a vfio-pci vfio_iommu_type1"),
            "{e}"
        );
    }

    #[test]
    fn permission_error_shows_the_node() {
        let dir = TempDir::new("devvfio");
        let p = dir.path().join("7");
        std::fs::write(&p, "").unwrap();
        std::fs::set_permissions(&p, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
        let m = permission_error(&p).to_string();
        assert!(m.contains("mode 0600"), "{m}");
        assert!(m.contains("chown"), "{m}");
    }
}

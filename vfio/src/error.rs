//! Errors that say what is wrong and how to fix it.

use std::fmt;
use std::io;
use std::path::PathBuf;

use rnic_queues::HalError;

use crate::sysfs::{GroupMember, PciAddress};

/// Why a VFIO operation failed. The `Display` text names the fix: the
/// commands to run or the setting to change.
#[derive(Debug)]
#[non_exhaustive]
pub enum VfioError {
    /// The text is not a PCI address.
    BadAddress {
        /// What was given.
        input: String,
    },
    /// No PCI device has this address.
    NoSuchDevice {
        /// The address asked for.
        addr: PciAddress,
        /// The devices present (one line each: address, IDs, driver).
        present: Vec<String>,
    },
    /// The device has no IOMMU group: the IOMMU is off or missing.
    NoIommu {
        /// The device.
        addr: PciAddress,
        /// Whether any IOMMU group exists (the IOMMU is on but this device
        /// is not behind it).
        any_groups: bool,
    },
    /// The device is not bound to vfio-pci.
    NotBound {
        /// The device.
        addr: PciAddress,
        /// The driver it is bound to, if any.
        driver: Option<String>,
        /// Its vendor and device IDs, if readable.
        ids: Option<(u16, u16)>,
        /// Whether the vfio-pci driver is loaded.
        vfio_pci_loaded: bool,
    },
    /// `/dev/vfio/vfio` (or the group's node) does not exist.
    VfioMissing {
        /// The missing path.
        path: PathBuf,
    },
    /// No permission to open a VFIO node.
    Permission {
        /// The node.
        path: PathBuf,
        /// Its owner, group and mode (`uid 0 gid 0 mode 0600`), if known.
        node: Option<String>,
        /// The calling process's effective user and group IDs.
        euid: u32,
        /// See `euid`.
        egid: u32,
    },
    /// The group's node is already open, by another process (or by this
    /// one other than through this crate): the kernel lets a group be open
    /// once at a time.
    GroupBusy {
        /// The group number.
        group: u32,
    },
    /// This process has the group open already, attached to another
    /// container than the one asked for (a group is in one container).
    GroupInOtherContainer {
        /// The group number.
        group: u32,
    },
    /// This process has the device open already (a [`crate::VfioDevice`]
    /// or [`crate::VfioHal`] for it is alive).
    DeviceAlreadyOpen {
        /// The device.
        addr: PciAddress,
    },
    /// A memory BAR could not be mapped into the process, which
    /// [`crate::VfioHal`] needs: through `pread`/`pwrite` a 64-bit doorbell
    /// write is not one 64-bit store.
    BarNotMappable {
        /// The device.
        addr: PciAddress,
        /// The BAR (0..=5).
        bar: u8,
        /// Why it is not mapped.
        reason: String,
    },
    /// The group has members bound to host drivers, so VFIO refuses it.
    GroupNotViable {
        /// The group number.
        group: u32,
        /// The device being opened.
        addr: PciAddress,
        /// The group's other devices.
        others: Vec<GroupMember>,
    },
    /// The kernel offers no type 1 IOMMU backend.
    NoIommuBackend,
    /// 2 MiB hugepages were required but none are free.
    NoHugePages {
        /// Bytes asked for.
        wanted: usize,
        /// `HugePages_Total` and `HugePages_Free` from /proc/meminfo.
        total: u64,
        /// See `total`.
        free: u64,
    },
    /// Locking (or VFIO pinning) memory hit RLIMIT_MEMLOCK.
    MemlockLimit {
        /// Bytes being locked or pinned.
        wanted: usize,
        /// The soft RLIMIT_MEMLOCK in bytes (`u64::MAX` is unlimited).
        soft: u64,
        /// The hard limit.
        hard: u64,
    },
    /// No IOVA space left for a mapping of this size, within the IOMMU's
    /// valid ranges and the configured DMA address limit.
    NoIova {
        /// Bytes asked for.
        len: u64,
        /// The highest usable IOVA.
        limit: u64,
    },
    /// The IOMMU ran out of DMA mapping entries
    /// (vfio_iommu_type1's `dma_entry_limit`).
    TooManyMappings {
        /// Entries still available when the container was opened, if the
        /// kernel reports it.
        avail: Option<u32>,
    },
    /// An address range that is not mapped.
    NotMapped {
        /// The IOVA.
        iova: u64,
        /// The length.
        len: u64,
    },
    /// The device or kernel cannot do this.
    Unsupported {
        /// What was asked for and why it is not available.
        what: String,
    },
    /// An ioctl failed.
    Ioctl {
        /// The ioctl and its object (`VFIO_IOMMU_MAP_DMA iova 0x1000`).
        op: String,
        /// The error.
        source: io::Error,
    },
    /// Some other system call failed.
    Io {
        /// What was being done.
        op: String,
        /// The error.
        source: io::Error,
    },
}

/// Commands that bind `addr` to vfio-pci (and undo it).
pub fn rebind_commands(addr: PciAddress, driver: Option<&str>, vfio_pci_loaded: bool) -> String {
    let dev = format!("/sys/bus/pci/devices/{addr}");
    let mut s = String::new();
    if !vfio_pci_loaded {
        s.push_str("    modprobe vfio-pci\n");
    }
    if driver.is_some() {
        s.push_str(&format!("    echo {addr} > {dev}/driver/unbind\n"));
    }
    s.push_str(&format!("    echo vfio-pci > {dev}/driver_override\n"));
    s.push_str(&format!("    echo {addr} > /sys/bus/pci/drivers_probe\n"));
    s.push_str("  To give it back to its kernel driver later:\n");
    s.push_str(&format!("    echo {addr} > {dev}/driver/unbind\n"));
    s.push_str(&format!("    echo > {dev}/driver_override\n"));
    s.push_str(&format!("    echo {addr} > /sys/bus/pci/drivers_probe"));
    s
}

fn fmt_limit(v: u64) -> String {
    if v == u64::MAX || v == libc::RLIM_INFINITY {
        "unlimited".to_string()
    } else {
        format!("{} KiB", v / 1024)
    }
}

impl fmt::Display for VfioError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::BadAddress { input } => write!(
                f,
                "{input:?} is not a PCI address; give it as domain:bus:device.function in \
                 hexadecimal, e.g. 0000:3b:00.0 (`lspci -D` lists them)"
            ),
            Self::NoSuchDevice { addr, present } => {
                write!(
                    f,
                    "no PCI device {addr} (no /sys/bus/pci/devices/{addr}); check the address \
                     with `lspci -D`"
                )?;
                if !present.is_empty() {
                    write!(f, ". Devices present:")?;
                    for p in present {
                        write!(f, "\n    {p}")?;
                    }
                }
                Ok(())
            }
            Self::NoIommu { addr, any_groups } => {
                write!(f, "PCI device {addr} has no IOMMU group, so VFIO cannot use it: ")?;
                if *any_groups {
                    write!(
                        f,
                        "the IOMMU is on but does not cover this device; check the firmware's \
                         DMAR/IVRS tables (`dmesg | grep -i -e DMAR -e IOMMU`)"
                    )
                } else {
                    write!(
                        f,
                        "the IOMMU is off (/sys/kernel/iommu_groups is empty). Enable VT-d \
                         (Intel) or AMD-Vi/IOMMU (AMD) in the firmware setup, boot Linux with \
                         `intel_iommu=on iommu=pt` (Intel) or `amd_iommu=on iommu=pt` (AMD) on \
                         the kernel command line, reboot, and check `dmesg | grep -i -e DMAR \
                         -e IOMMU`"
                    )
                }
            }
            Self::NotBound {
                addr,
                driver,
                ids,
                vfio_pci_loaded,
            } => {
                let ids = ids
                    .map(|(v, d)| format!(" [{v:04x}:{d:04x}]"))
                    .unwrap_or_default();
                match driver {
                    Some(d) => writeln!(
                        f,
                        "PCI device {addr}{ids} is bound to the kernel driver {d}, not to \
                         vfio-pci. Hand it to vfio-pci (as root):"
                    )?,
                    None => writeln!(
                        f,
                        "PCI device {addr}{ids} is not bound to any driver; it must be bound to \
                         vfio-pci. As root:"
                    )?,
                }
                f.write_str(&rebind_commands(*addr, driver.as_deref(), *vfio_pci_loaded))
            }
            Self::VfioMissing { path } => write!(
                f,
                "{} does not exist: the VFIO driver is not loaded or the device is not bound to \
                 it. Run `modprobe -a vfio-pci vfio_iommu_type1` and bind the device to \
                 vfio-pci (see docs/vfio.md)",
                path.display()
            ),
            Self::Permission {
                path,
                node,
                euid,
                egid,
            } => {
                write!(
                    f,
                    "permission denied opening {} (running as uid {euid} gid {egid}",
                    path.display()
                )?;
                if let Some(n) = node {
                    write!(f, "; the node is {n}")?;
                }
                write!(
                    f,
                    "). Run as root, or give the user the node: `chown USER {}` (or a udev rule: \
                     SUBSYSTEM==\"vfio\", KERNEL!=\"vfio\", OWNER=\"USER\"); /dev/vfio/vfio must \
                     be readable and writable too, and RLIMIT_MEMLOCK must cover the DMA memory",
                    path.display()
                )
            }
            Self::GroupBusy { group } => write!(
                f,
                "IOMMU group {group} (/dev/vfio/{group}) is already open by another process (or \
                 by this one other than through rnic-vfio), and the kernel lets a group be open \
                 in one place at a time: `fuser -v /dev/vfio/{group}` shows who has it; stop \
                 that process, or use the group's devices from it"
            ),
            Self::GroupInOtherContainer { group } => write!(
                f,
                "IOMMU group {group} is already open in this process, attached to another VFIO \
                 container, and a group can be in one container only: open its devices in that \
                 container (VfioDevice::open_in with the container() of a device of the group \
                 that is open), or with VfioDevice::open / VfioHal::open, which find it"
            ),
            Self::DeviceAlreadyOpen { addr } => write!(
                f,
                "PCI device {addr} is already open in this process (a VfioDevice or VfioHal for \
                 it is still alive); use that one, or drop it before opening the device again"
            ),
            Self::BarNotMappable { addr, bar, reason } => write!(
                f,
                "memory BAR {bar} of {addr} cannot be mapped into the process ({reason}). \
                 VfioHal needs every memory BAR mmapped: through pread/pwrite every register \
                 access is a system call, and vfio-pci splits an 8-byte write into two 4-byte \
                 writes (before Linux 6.11), so a 64-bit doorbell would not be one store. \
                 vfio-pci lets a process mmap a memory BAR of at least a page, or a smaller \
                 one that starts on a page boundary (the `pci=resource_alignment=` kernel \
                 parameter can align it); check the kernel log for vfio-pci messages"
            ),
            Self::GroupNotViable {
                group,
                addr,
                others,
            } => {
                write!(
                    f,
                    "IOMMU group {group} of {addr} is not viable: every device in a group must be \
                     bound to vfio-pci (or pci-stub, or no driver) before any of them can be used \
                     through VFIO. The group's other devices:"
                )?;
                for m in others {
                    let d = m.driver.as_deref().unwrap_or("no driver");
                    let mark = if m.blocks_vfio() {
                        "  <- rebind"
                    } else {
                        ""
                    };
                    let kind = if m.bridge { " (bridge)" } else { "" };
                    write!(f, "\n    {}{kind}: {d}{mark}", m.addr)?;
                }
                for m in others.iter().filter(|m| m.blocks_vfio()) {
                    write!(f, "\n  For {}:\n", m.addr)?;
                    f.write_str(&rebind_commands(m.addr, m.driver.as_deref(), true))?;
                }
                write!(
                    f,
                    "\n  (Devices share a group when the platform cannot isolate their DMA, e.g. \
                     behind a PCI bridge or a root port without ACS; moving the NIC to another \
                     slot can give it a group of its own.)"
                )
            }
            Self::NoIommuBackend => write!(
                f,
                "the kernel offers no VFIO type 1 IOMMU backend: `modprobe vfio_iommu_type1` \
                 (it is a soft dependency that busybox modprobe does not follow)"
            ),
            Self::NoHugePages {
                wanted,
                total,
                free,
            } => write!(
                f,
                "no 2 MiB hugepages for {} KiB of DMA memory (HugePages_Total {total}, \
                 HugePages_Free {free}). Reserve some: `echo 512 > \
                 /proc/sys/vm/nr_hugepages` (1 GiB), or boot with `hugepages=512`; or let the \
                 pool fall back to locked 4 KiB pages (HugePages::Prefer)",
                wanted / 1024
            ),
            Self::MemlockLimit { wanted, soft, hard } => write!(
                f,
                "cannot lock {} KiB of DMA memory: RLIMIT_MEMLOCK is {} (hard limit {}). Raise \
                 it: `ulimit -l unlimited` in the starting shell (as root), `LimitMEMLOCK=infinity` \
                 in the systemd unit, or `USER - memlock unlimited` in \
                 /etc/security/limits.conf; or run with CAP_IPC_LOCK. Locked pool memory and \
                 VFIO-pinned pages both count against it",
                wanted.div_ceil(1024),
                fmt_limit(*soft),
                fmt_limit(*hard)
            ),
            Self::NoIova { len, limit } => write!(
                f,
                "no free IOVA range of {len:#x} bytes at or below {limit:#x} (the IOMMU's valid \
                 ranges and the device's DMA address limit); free some DMA memory or unmap \
                 buffers"
            ),
            Self::TooManyMappings { avail } => {
                write!(f, "the IOMMU has no DMA mapping entries left")?;
                if let Some(a) = avail {
                    write!(f, " ({a} were available when the container was opened)")?;
                }
                write!(
                    f,
                    "; map fewer, larger buffers, or raise the vfio_iommu_type1 module's \
                     dma_entry_limit (`modprobe vfio_iommu_type1 dma_entry_limit=1048576`)"
                )
            }
            Self::NotMapped { iova, len } => {
                write!(f, "IOVA range {iova:#x}+{len:#x} is not mapped")
            }
            Self::Unsupported { what } => write!(f, "not supported: {what}"),
            Self::Ioctl { op, source } => write!(f, "{op} failed: {source}"),
            Self::Io { op, source } => write!(f, "{op}: {source}"),
        }
    }
}

impl std::error::Error for VfioError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            Self::Ioctl { source, .. } | Self::Io { source, .. } => Some(source),
            _ => None,
        }
    }
}

impl VfioError {
    /// The operating system error number behind this error, if any.
    pub fn errno(&self) -> Option<i32> {
        match self {
            Self::Ioctl { source, .. } | Self::Io { source, .. } => source.raw_os_error(),
            _ => None,
        }
    }

    /// The current RLIMIT_MEMLOCK, in a [`VfioError::MemlockLimit`] for
    /// `wanted` bytes.
    pub fn memlock(wanted: usize) -> Self {
        let (soft, hard) = memlock_limit();
        Self::MemlockLimit { wanted, soft, hard }
    }

    pub(crate) fn ioctl(op: impl Into<String>, source: io::Error) -> Self {
        Self::Ioctl {
            op: op.into(),
            source,
        }
    }

    pub(crate) fn io(op: impl Into<String>, source: io::Error) -> Self {
        Self::Io {
            op: op.into(),
            source,
        }
    }
}

/// Whether RLIMIT_MEMLOCK can have stopped a lock or a VFIO pin of this
/// process: the limit is finite and the process lacks `CAP_IPC_LOCK` (with
/// it, neither `mlock` nor VFIO checks the limit).
pub(crate) fn memlock_may_limit() -> bool {
    let (soft, _) = memlock_limit();
    soft != libc::RLIM_INFINITY && !has_cap_ipc_lock()
}

/// Whether `CAP_IPC_LOCK` is in the effective capability set (from
/// `/proc/self/status`; assumed not when unreadable).
fn has_cap_ipc_lock() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|s| cap_ipc_lock_in(&s))
}

/// Whether a `/proc/PID/status` text has `CAP_IPC_LOCK` in `CapEff`.
fn cap_ipc_lock_in(status: &str) -> bool {
    const CAP_IPC_LOCK: u32 = 14;
    status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << CAP_IPC_LOCK) != 0)
}

/// The soft and hard RLIMIT_MEMLOCK in bytes.
pub fn memlock_limit() -> (u64, u64) {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit through a valid pointer.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut r) };
    if rc != 0 {
        return (0, 0);
    }
    (r.rlim_cur, r.rlim_max)
}

impl From<&VfioError> for HalError {
    fn from(e: &VfioError) -> Self {
        match e {
            VfioError::NoHugePages { .. } | VfioError::MemlockLimit { .. } => HalError::NoMemory,
            VfioError::NoIova { .. } | VfioError::TooManyMappings { .. } => HalError::NoIova,
            VfioError::NotMapped { .. } => HalError::NotMapped,
            VfioError::Unsupported { .. } => HalError::Unsupported,
            other => match other.errno() {
                Some(libc::ENOMEM) => HalError::NoMemory,
                Some(errno) => HalError::Os(errno),
                None => HalError::Os(libc::EIO),
            },
        }
    }
}

impl From<VfioError> for HalError {
    fn from(e: VfioError) -> Self {
        Self::from(&e)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sysfs::tests::fake_sysfs;
    use crate::sysfs::Sysfs;

    fn addr(s: &str) -> PciAddress {
        PciAddress::parse(s).unwrap()
    }

    #[test]
    fn not_bound_names_driver_and_rebind_commands() {
        let fs = fake_sysfs(&[
            ("0000:00:03.0", Some("virtio-pci"), Some(3), 0x00ff00),
            ("0000:00:04.0", Some("vfio-pci"), Some(4), 0x00ff00),
        ]);
        let s = Sysfs::new(fs.path());
        let e = s.check_vfio_ready(addr("0000:00:03.0")).unwrap_err();
        let m = e.to_string();
        assert!(matches!(e, VfioError::NotBound { .. }));
        assert!(m.contains("bound to the kernel driver virtio-pci"), "{m}");
        assert!(m.contains("[1234:11e8]"), "{m}");
        assert!(
            m.contains("echo 0000:00:03.0 > /sys/bus/pci/devices/0000:00:03.0/driver/unbind"),
            "{m}"
        );
        assert!(
            m.contains("echo vfio-pci > /sys/bus/pci/devices/0000:00:03.0/driver_override"),
            "{m}"
        );
        assert!(
            m.contains("echo 0000:00:03.0 > /sys/bus/pci/drivers_probe"),
            "{m}"
        );
        // vfio-pci is loaded in this tree: no modprobe line.
        assert!(!m.contains("modprobe"), "{m}");
    }

    #[test]
    fn unbound_device_without_vfio_module() {
        let fs = fake_sysfs(&[("0000:00:01.0", None, Some(1), 0x00ff00)]);
        let s = Sysfs::new(fs.path());
        let m = s
            .check_vfio_ready(addr("0000:00:01.0"))
            .unwrap_err()
            .to_string();
        assert!(m.contains("not bound to any driver"), "{m}");
        assert!(m.contains("modprobe vfio-pci"), "{m}");
        // Nothing to unbind before the override.
        let before_override = m.split("driver_override").next().unwrap();
        assert!(!before_override.contains("unbind"), "{m}");
    }

    #[test]
    fn wrong_address_lists_devices() {
        let fs = fake_sysfs(&[("0000:00:01.0", Some("vfio-pci"), Some(1), 0x00ff00)]);
        let s = Sysfs::new(fs.path());
        let e = s.check_vfio_ready(addr("0000:00:1e.7")).unwrap_err();
        let m = e.to_string();
        assert!(matches!(e, VfioError::NoSuchDevice { .. }));
        assert!(m.contains("no PCI device 0000:00:1e.7"), "{m}");
        assert!(m.contains("lspci -D"), "{m}");
        assert!(
            m.contains("0000:00:01.0 [1234:11e8] driver vfio-pci"),
            "{m}"
        );
    }

    #[test]
    fn no_iommu_says_how_to_enable_it() {
        let fs = fake_sysfs(&[("0000:00:01.0", Some("vfio-pci"), None, 0x00ff00)]);
        let s = Sysfs::new(fs.path());
        let m = s
            .check_vfio_ready(addr("0000:00:01.0"))
            .unwrap_err()
            .to_string();
        assert!(m.contains("no IOMMU group"), "{m}");
        assert!(m.contains("intel_iommu=on"), "{m}");
        assert!(m.contains("amd_iommu=on"), "{m}");

        // The IOMMU is on but another device has no group.
        let fs = fake_sysfs(&[
            ("0000:00:01.0", Some("vfio-pci"), None, 0x00ff00),
            ("0000:00:02.0", None, Some(2), 0x00ff00),
        ]);
        let m = Sysfs::new(fs.path())
            .check_vfio_ready(addr("0000:00:01.0"))
            .unwrap_err()
            .to_string();
        assert!(m.contains("does not cover this device"), "{m}");
    }

    #[test]
    fn group_not_viable_lists_the_other_devices() {
        let fs = fake_sysfs(&[
            ("0000:00:04.0", None, Some(4), 0x060400),
            ("0000:01:01.0", Some("vfio-pci"), Some(4), 0x00ff00),
            ("0000:01:02.0", Some("virtio-pci"), Some(4), 0x00ff00),
        ]);
        let s = Sysfs::new(fs.path());
        let a = addr("0000:01:01.0");
        let e = VfioError::GroupNotViable {
            group: 4,
            addr: a,
            others: s.other_group_members(4, a),
        };
        let m = e.to_string();
        assert!(
            m.contains("IOMMU group 4 of 0000:01:01.0 is not viable"),
            "{m}"
        );
        assert!(m.contains("0000:00:04.0 (bridge): no driver"), "{m}");
        assert!(m.contains("0000:01:02.0: virtio-pci  <- rebind"), "{m}");
        assert!(
            m.contains("echo vfio-pci > /sys/bus/pci/devices/0000:01:02.0/driver_override"),
            "{m}"
        );
        assert!(!m.contains("devices/0000:00:04.0/driver_override"), "{m}");
    }

    #[test]
    fn memlock_and_hugepage_messages_name_the_fix() {
        let m = VfioError::MemlockLimit {
            wanted: 4 << 20,
            soft: 8 << 20,
            hard: 8 << 20,
        }
        .to_string();
        assert!(m.contains("cannot lock 4096 KiB"), "{m}");
        assert!(
            m.contains("RLIMIT_MEMLOCK is 8192 KiB (hard limit 8192 KiB)"),
            "{m}"
        );
        assert!(m.contains("ulimit -l"), "{m}");
        assert!(m.contains("LimitMEMLOCK=infinity"), "{m}");
        assert!(m.contains("limits.conf"), "{m}");

        let m = VfioError::memlock(1).to_string();
        let (soft, _) = memlock_limit();
        assert!(m.contains(&fmt_limit(soft)), "{m}");
        // CAP_IPC_LOCK lifts the limit: bit 14 of the effective set.
        assert!(cap_ipc_lock_in("Name:\tx\nCapEff:\t000001ffffffffff\n"));
        assert!(cap_ipc_lock_in("CapEff:\t0000000000004000"));
        assert!(!cap_ipc_lock_in(
            "CapInh:\t0000000000004000\nCapEff:\t0000000000000000"
        ));
        assert!(!cap_ipc_lock_in("no capabilities here"));
        if soft == libc::RLIM_INFINITY {
            assert!(!memlock_may_limit(), "no limit to hit");
        }

        let m = VfioError::NoHugePages {
            wanted: 2 << 20,
            total: 0,
            free: 0,
        }
        .to_string();
        assert!(m.contains("/proc/sys/vm/nr_hugepages"), "{m}");
        assert!(m.contains("HugePages_Free 0"), "{m}");
    }

    #[test]
    fn permission_and_busy_messages() {
        let m = VfioError::Permission {
            path: "/dev/vfio/7".into(),
            node: Some("uid 0 gid 0 mode 0600".into()),
            euid: 1000,
            egid: 1000,
        }
        .to_string();
        assert!(m.contains("/dev/vfio/7"), "{m}");
        assert!(m.contains("uid 1000"), "{m}");
        assert!(m.contains("mode 0600"), "{m}");
        assert!(m.contains("chown"), "{m}");
        assert!(
            m.contains(r#"SUBSYSTEM=="vfio", KERNEL!="vfio", OWNER="USER""#),
            "{m}"
        );
        let m = VfioError::GroupBusy { group: 7 }.to_string();
        assert!(m.contains("already open by another process"), "{m}");
        assert!(m.contains("fuser -v /dev/vfio/7"), "{m}");
        let m = VfioError::GroupInOtherContainer { group: 7 }.to_string();
        assert!(m.contains("already open in this process"), "{m}");
        assert!(m.contains("VfioDevice::open_in"), "{m}");
        let m = VfioError::DeviceAlreadyOpen {
            addr: addr("0000:3b:00.1"),
        }
        .to_string();
        assert!(
            m.contains("0000:3b:00.1 is already open in this process"),
            "{m}"
        );
        let m = VfioError::BarNotMappable {
            addr: addr("0000:3b:00.1"),
            bar: 2,
            reason: "mmap failed: Invalid argument".into(),
        }
        .to_string();
        assert!(m.contains("memory BAR 2 of 0000:3b:00.1"), "{m}");
        assert!(m.contains("Invalid argument"), "{m}");
        assert!(m.contains("two 4-byte writes"), "{m}");
    }

    #[test]
    fn hal_error_mapping() {
        assert_eq!(
            HalError::from(VfioError::NoIova { len: 1, limit: 2 }),
            HalError::NoIova
        );
        assert_eq!(HalError::from(VfioError::memlock(1)), HalError::NoMemory);
        assert_eq!(
            HalError::from(VfioError::ioctl(
                "x",
                io::Error::from_raw_os_error(libc::EINVAL)
            )),
            HalError::Os(libc::EINVAL)
        );
    }
}

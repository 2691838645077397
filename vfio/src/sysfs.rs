//! PCI addresses and what sysfs says about a device: its driver, its IOMMU
//! group and the group's other members.
//!
//! Everything here reads files under a configurable root (normally `/`), so
//! the diagnostics built from it can be tested against a fake sysfs tree in
//! a temporary directory.

use std::fmt;
use std::fs;
use std::path::{Path, PathBuf};
use std::str::FromStr;

use crate::error::VfioError;

/// A PCI function address: `domain:bus:device.function`, as in
/// `0000:3b:00.0`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PciAddress {
    /// PCI domain (segment).
    pub domain: u16,
    /// Bus number.
    pub bus: u8,
    /// Device (slot) number, 0..=31.
    pub device: u8,
    /// Function number, 0..=7.
    pub function: u8,
}

impl PciAddress {
    /// Parses `dddd:bb:dd.f` or `bb:dd.f` (domain 0), in hexadecimal, as
    /// `lspci -D` and sysfs print them.
    pub fn parse(s: &str) -> Result<Self, VfioError> {
        let bad = || VfioError::BadAddress {
            input: s.to_string(),
        };
        let parts: Vec<&str> = s.trim().split(':').collect();
        let (domain, bus, devfn) = match parts.as_slice() {
            [bus, devfn] => ("0", *bus, *devfn),
            [domain, bus, devfn] => (*domain, *bus, *devfn),
            _ => return Err(bad()),
        };
        let (device, function) = devfn.split_once('.').ok_or_else(bad)?;
        let hex = |t: &str, max_len: usize| -> Result<u32, VfioError> {
            if t.is_empty() || t.len() > max_len || !t.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(bad());
            }
            u32::from_str_radix(t, 16).map_err(|_| bad())
        };
        let domain = hex(domain, 4)?;
        let bus = hex(bus, 2)?;
        let device = hex(device, 2)?;
        let function = hex(function, 1)?;
        if device > 31 || function > 7 {
            return Err(bad());
        }
        Ok(Self {
            domain: domain as u16,
            bus: bus as u8,
            device: device as u8,
            function: function as u8,
        })
    }
}

impl FromStr for PciAddress {
    type Err = VfioError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for PciAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{:04x}:{:02x}:{:02x}.{:x}",
            self.domain, self.bus, self.device, self.function
        )
    }
}

/// Another device of an IOMMU group and the driver it is bound to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMember {
    /// The device's address.
    pub addr: PciAddress,
    /// The bound driver's name, `None` when no driver is bound.
    pub driver: Option<String>,
    /// Whether the device is a PCI bridge (class 0x0604), which the kernel
    /// lets stay in a group used through VFIO.
    pub bridge: bool,
}

impl GroupMember {
    /// Whether this member keeps its group from being used through VFIO:
    /// it is bound to a driver other than vfio-pci or pci-stub (and is not
    /// a bridge, which the kernel tolerates).
    pub fn blocks_vfio(&self) -> bool {
        !self.bridge
            && matches!(self.driver.as_deref(), Some(d) if d != "vfio-pci" && d != "pci-stub")
    }
}

/// Reads PCI device state from sysfs under `root` (normally `/`).
#[derive(Debug, Clone)]
pub struct Sysfs {
    root: PathBuf,
}

impl Default for Sysfs {
    fn default() -> Self {
        Self::new("/")
    }
}

impl Sysfs {
    /// A view of the sysfs tree whose `sys/` directory is under `root`.
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    /// The root this view reads under.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `/sys/bus/pci/devices/<addr>` (under the root).
    pub fn device_dir(&self, addr: PciAddress) -> PathBuf {
        self.root.join("sys/bus/pci/devices").join(addr.to_string())
    }

    /// Whether the device exists.
    pub fn exists(&self, addr: PciAddress) -> bool {
        self.device_dir(addr).exists()
    }

    /// All PCI devices, sorted.
    pub fn devices(&self) -> Vec<PciAddress> {
        let mut out: Vec<PciAddress> = fs::read_dir(self.root.join("sys/bus/pci/devices"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| PciAddress::parse(&e.file_name().to_string_lossy()).ok())
            .collect();
        out.sort();
        out
    }

    /// The name of the driver bound to the device, `None` when unbound.
    pub fn driver(&self, addr: PciAddress) -> Option<String> {
        link_name(&self.device_dir(addr).join("driver"))
    }

    /// The device's IOMMU group number, `None` when the device has no
    /// group (no IOMMU, or the IOMMU is off).
    pub fn iommu_group(&self, addr: PciAddress) -> Option<u32> {
        link_name(&self.device_dir(addr).join("iommu_group"))?
            .parse()
            .ok()
    }

    /// The devices of IOMMU group `group`, sorted.
    pub fn group_devices(&self, group: u32) -> Vec<PciAddress> {
        let dir = self
            .root
            .join("sys/kernel/iommu_groups")
            .join(group.to_string())
            .join("devices");
        let mut out: Vec<PciAddress> = fs::read_dir(dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| PciAddress::parse(&e.file_name().to_string_lossy()).ok())
            .collect();
        out.sort();
        out
    }

    /// The members of `group` other than `addr`, with their drivers.
    pub fn other_group_members(&self, group: u32, addr: PciAddress) -> Vec<GroupMember> {
        self.group_devices(group)
            .into_iter()
            .filter(|&a| a != addr)
            .map(|a| GroupMember {
                addr: a,
                driver: self.driver(a),
                bridge: self.read_hex(a, "class").is_some_and(|c| c >> 8 == 0x0604),
            })
            .collect()
    }

    /// Whether the kernel has any IOMMU groups at all (an IOMMU is on).
    pub fn has_iommu_groups(&self) -> bool {
        fs::read_dir(self.root.join("sys/kernel/iommu_groups"))
            .map(|mut d| d.next().is_some())
            .unwrap_or(false)
    }

    /// Whether the `vfio-pci` driver is registered (the module is loaded).
    pub fn vfio_pci_loaded(&self) -> bool {
        self.root.join("sys/bus/pci/drivers/vfio-pci").exists()
    }

    /// The device's vendor and device IDs.
    pub fn ids(&self, addr: PciAddress) -> Option<(u16, u16)> {
        let v = self.read_hex(addr, "vendor")?;
        let d = self.read_hex(addr, "device")?;
        Some((v as u16, d as u16))
    }

    fn read_hex(&self, addr: PciAddress, attr: &str) -> Option<u32> {
        let s = fs::read_to_string(self.device_dir(addr).join(attr)).ok()?;
        u32::from_str_radix(s.trim().trim_start_matches("0x"), 16).ok()
    }

    /// Checks, from sysfs alone, that `addr` can be opened through VFIO:
    /// it exists, has an IOMMU group and is bound to vfio-pci. Returns the
    /// group number, or the error that names the fix.
    pub fn check_vfio_ready(&self, addr: PciAddress) -> Result<u32, VfioError> {
        if !self.exists(addr) {
            return Err(VfioError::NoSuchDevice {
                addr,
                present: self
                    .devices()
                    .into_iter()
                    .map(|a| self.describe(a))
                    .collect(),
            });
        }
        let Some(group) = self.iommu_group(addr) else {
            return Err(VfioError::NoIommu {
                addr,
                any_groups: self.has_iommu_groups(),
            });
        };
        let driver = self.driver(addr);
        if driver.as_deref() != Some("vfio-pci") {
            return Err(VfioError::NotBound {
                addr,
                driver,
                ids: self.ids(addr),
                vfio_pci_loaded: self.vfio_pci_loaded(),
            });
        }
        Ok(group)
    }

    /// One line describing a device: address, IDs, driver.
    pub fn describe(&self, addr: PciAddress) -> String {
        let ids = self
            .ids(addr)
            .map(|(v, d)| format!(" [{v:04x}:{d:04x}]"))
            .unwrap_or_default();
        let driver = self
            .driver(addr)
            .map(|d| format!(" driver {d}"))
            .unwrap_or_else(|| " no driver".to_string());
        format!("{addr}{ids}{driver}")
    }
}

/// The last component of a symlink's target (`driver` -> `.../vfio-pci`).
fn link_name(link: &Path) -> Option<String> {
    let target = fs::read_link(link).ok()?;
    Some(target.file_name()?.to_string_lossy().into_owned())
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::testutil::TempDir;
    use std::os::unix::fs::symlink;

    /// Builds a fake sysfs tree: `devices` are (address, driver, group,
    /// class) tuples.
    pub(crate) fn fake_sysfs(devices: &[(&str, Option<&str>, Option<u32>, u32)]) -> TempDir {
        let dir = TempDir::new("sysfs");
        let root = dir.path();
        fs::create_dir_all(root.join("sys/bus/pci/devices")).unwrap();
        fs::create_dir_all(root.join("sys/kernel/iommu_groups")).unwrap();
        for &(addr, driver, group, class) in devices {
            let d = root.join("sys/devices/pci0000:00").join(addr);
            fs::create_dir_all(&d).unwrap();
            fs::write(d.join("vendor"), "0x1234\n").unwrap();
            fs::write(d.join("device"), "0x11e8\n").unwrap();
            fs::write(d.join("class"), format!("{class:#08x}\n")).unwrap();
            symlink(&d, root.join("sys/bus/pci/devices").join(addr)).unwrap();
            if let Some(drv) = driver {
                let dd = root.join("sys/bus/pci/drivers").join(drv);
                fs::create_dir_all(&dd).unwrap();
                symlink(&dd, d.join("driver")).unwrap();
            }
            if let Some(g) = group {
                let gd = root.join("sys/kernel/iommu_groups").join(g.to_string());
                fs::create_dir_all(gd.join("devices")).unwrap();
                symlink(&d, gd.join("devices").join(addr)).unwrap();
                symlink(&gd, d.join("iommu_group")).unwrap();
            }
        }
        dir
    }

    #[test]
    fn parses_and_prints_addresses() {
        let a = PciAddress::parse("0000:3b:00.1").unwrap();
        assert_eq!(
            a,
            PciAddress {
                domain: 0,
                bus: 0x3b,
                device: 0,
                function: 1
            }
        );
        assert_eq!(a.to_string(), "0000:3b:00.1");
        assert_eq!(
            PciAddress::parse("01:02.3").unwrap().to_string(),
            "0000:01:02.3"
        );
        assert_eq!(
            "10000:00:00.0"
                .parse::<PciAddress>()
                .unwrap_err()
                .to_string(),
            PciAddress::parse("10000:00:00.0").unwrap_err().to_string()
        );
        for bad in [
            "",
            "00:00",
            "0000:00:20.0",
            "0000:00:01.8",
            "zz:00.0",
            "0:0:0:0.0",
        ] {
            let e = PciAddress::parse(bad).unwrap_err();
            assert!(matches!(e, VfioError::BadAddress { .. }), "{bad}: {e}");
            assert!(e.to_string().contains("lspci -D"), "{e}");
        }
    }

    #[test]
    fn reads_driver_group_and_members() {
        let fs = fake_sysfs(&[
            ("0000:00:04.0", None, Some(4), 0x060400),
            ("0000:01:01.0", Some("vfio-pci"), Some(4), 0x00ff00),
            ("0000:01:02.0", Some("virtio-pci"), Some(4), 0x00ff00),
        ]);
        let s = Sysfs::new(fs.path());
        let a = PciAddress::parse("0000:01:01.0").unwrap();
        assert!(s.exists(a));
        assert_eq!(s.driver(a).as_deref(), Some("vfio-pci"));
        assert_eq!(s.iommu_group(a), Some(4));
        assert_eq!(s.ids(a), Some((0x1234, 0x11e8)));
        assert_eq!(s.devices().len(), 3);
        let others = s.other_group_members(4, a);
        assert_eq!(others.len(), 2);
        assert!(others[0].bridge && !others[0].blocks_vfio());
        assert!(!others[1].bridge && others[1].blocks_vfio());
        assert_eq!(s.check_vfio_ready(a).unwrap(), 4);
        assert!(s.vfio_pci_loaded());
    }
}

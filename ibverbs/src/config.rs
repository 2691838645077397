//! The devices `ibv_get_device_list` lists, from the environment.
//!
//! `RNIC_DEVICES` holds one device per `;`-separated item, each a
//! `,`-separated list of `key=value`; `RNIC_DEVICES_FILE` names a file with
//! one device per line (`#` starts a comment). Without either there is one
//! device, `rnic0`, on a loopback wire. Keys:
//!
//! - `name`: the device's name (default `rnic<index>`);
//! - `mac`: its MAC address (default `02:00:00:00:00:<index + 1>`);
//! - `ipv4`: the address of its IPv4 GID (default `192.0.2.<index + 1>`);
//! - `wire`: `loopback` (default), `udp:LOCAL=REMOTE` (two socket
//!   addresses: a NIC in another process, or a VM's), `shm-create:PATH` or
//!   `shm-open:PATH` (the shared-memory wire between two processes of one
//!   host: one creates the file, the other opens it), or `udp-fd:FD=REMOTE`
//!   (a UDP socket inherited as descriptor FD, bound by the parent, which
//!   keeps the port across the programs it runs one after another), or
//!   `fabric:DIR` (the shared-memory fabric in directory DIR: every NIC of
//!   every process that names it reaches every other by MAC, as an MPI job
//!   needs). On a fabric the default `mac` and `ipv4` are the process's
//!   own, from its process ID and the device's index
//!   (`02:<index>:<pid as 4 bytes>` and `10.0.0.0/8` holding
//!   `pid · 4 + index mod 4`), so that the ranks of a job, started alike,
//!   have addresses of their own;
//! - `faults`: faults injected on the emulated NIC's wire, in both
//!   directions unless `tx=0` or `rx=0`, as `+`-separated settings of the
//!   emulator's fault injector (`drop=0.02+reorder=0.02`: the rates
//!   `drop`, `duplicate`, `reorder`, `delay` and `corrupt`, and the other
//!   settings of `rnic_emu::net::FaultConfig`), with `seed=N` for its
//!   random choices (default: the process ID), for a loss test of a
//!   program that cannot be changed;
//! - `vfio`: the PCI address (`0000:00:03.0`) of a real rnic bound to
//!   vfio-pci, which the device then is instead of an emulated NIC. It has
//!   its own MAC, GIDs and wire, so `mac`, `ipv4` and `wire` do not go
//!   with it;
//! - `vfio-user`: the socket of an rnicd (`/run/rnicd.sock`): the device
//!   is one rnicd serves, in its process, as its own as a `vfio` one.
//!
//! ```text
//! RNIC_DEVICES='name=rnic0,wire=udp:127.0.0.1:47001=127.0.0.1:47002,mac=02:00:00:00:00:01,ipv4=192.0.2.1'
//! ```

use std::net::SocketAddr;
use std::path::PathBuf;

/// One configured device.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSpec {
    /// `ibv_get_device_name`'s answer.
    pub name: String,
    /// The port's MAC address, from which the node GUID derives.
    pub mac: [u8; 6],
    /// The address of the port's IPv4 GID.
    pub ipv4: [u8; 4],
    /// Where its frames go.
    pub wire: WireSpec,
    /// The PCI address of the real rnic it is, bound to vfio-pci.
    pub vfio: Option<String>,
    /// The socket of the rnicd that serves it. With neither this nor
    /// `vfio`, an emulated NIC in the process.
    pub vfio_user: Option<PathBuf>,
    /// Faults injected on the emulated NIC's wire.
    pub faults: Option<FaultSpec>,
}

/// The `faults` key: the injector's settings and its seed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultSpec {
    /// The settings in `FaultConfig`'s own syntax (`,`-separated), checked.
    pub settings: String,
    /// The seed of its random choices.
    pub seed: u64,
}

impl FaultSpec {
    /// The injector's configuration.
    pub fn config(&self) -> rnic_emu::net::FaultConfig {
        self.settings.parse().expect("checked when parsed")
    }
}

/// A device's wire.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireSpec {
    /// Frames come back to the NIC.
    Loopback,
    /// A UDP socket at `local` sending to `remote`.
    Udp {
        /// The socket's own address.
        local: SocketAddr,
        /// Where it sends.
        remote: SocketAddr,
    },
    /// A UDP socket the process was given, bound by its parent, sending
    /// to `remote`: a parent that runs one program after another on the
    /// same wire holds the port all along.
    UdpFd {
        /// The socket's descriptor.
        fd: i32,
        /// Where it sends.
        remote: SocketAddr,
    },
    /// The shared-memory fabric in a directory.
    Fabric {
        /// The directory of its members' inboxes.
        dir: PathBuf,
    },
    /// The shared-memory wire in a file.
    Shm {
        /// The file.
        path: PathBuf,
        /// This side creates it (the other opens it).
        create: bool,
    },
}

impl DeviceSpec {
    /// The node GUID: the MAC's modified EUI-64, as RoCE NICs derive it,
    /// in network byte order.
    pub fn guid(&self) -> [u8; 8] {
        let m = self.mac;
        [m[0] ^ 2, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]]
    }

    /// Whether the device is not a NIC of this process (its MAC, GIDs and
    /// wire are its own, known once it is open).
    pub fn attached(&self) -> bool {
        self.vfio.is_some() || self.vfio_user.is_some()
    }

    fn default_at(index: usize) -> DeviceSpec {
        let n = (index + 1) as u8;
        DeviceSpec {
            name: format!("rnic{index}"),
            mac: [0x02, 0, 0, 0, 0, n],
            ipv4: [192, 0, 2, n],
            wire: WireSpec::Loopback,
            vfio: None,
            vfio_user: None,
            faults: None,
        }
    }
}

/// The devices the environment configures (see the module documentation).
pub fn from_env() -> Result<Vec<DeviceSpec>, String> {
    if let Ok(list) = std::env::var("RNIC_DEVICES") {
        return parse(list.split(';'));
    }
    if let Some(path) = std::env::var_os("RNIC_DEVICES_FILE") {
        let text = std::fs::read_to_string(&path)
            .map_err(|e| format!("RNIC_DEVICES_FILE {}: {e}", PathBuf::from(&path).display()))?;
        return parse(text.lines().map(|l| l.split('#').next().unwrap_or("")));
    }
    Ok(vec![DeviceSpec::default_at(0)])
}

/// Parses device items (empty ones are skipped).
pub fn parse<'a>(items: impl Iterator<Item = &'a str>) -> Result<Vec<DeviceSpec>, String> {
    let mut devs: Vec<DeviceSpec> = Vec::new();
    for item in items.map(str::trim).filter(|i| !i.is_empty()) {
        let mut d = DeviceSpec::default_at(devs.len());
        // Keys that describe an emulated NIC, given.
        let mut emulated: Option<&str> = None;
        let (mut mac_given, mut ipv4_given) = (false, false);
        for kv in item.split(',').map(str::trim) {
            let (k, v) = kv
                .split_once('=')
                .ok_or_else(|| format!("device {}: `{kv}` is not key=value", d.name))?;
            if matches!(k, "mac" | "ipv4" | "wire" | "faults") {
                emulated = Some(k);
            }
            match k {
                "name" => d.name = name(v)?,
                "vfio" => d.vfio = Some(pci(v).map_err(|e| format!("device {}: {e}", d.name))?),
                "vfio-user" if v.is_empty() => {
                    return Err(format!("device {}: vfio-user: a socket path", d.name))
                }
                "vfio-user" => d.vfio_user = Some(v.into()),
                "mac" => {
                    d.mac = mac(v)?;
                    mac_given = true;
                }
                "ipv4" => {
                    ipv4_given = true;
                    d.ipv4 = v
                        .parse::<std::net::Ipv4Addr>()
                        .map_err(|e| format!("device {}: ipv4 `{v}`: {e}", d.name))?
                        .octets()
                }
                "wire" => {
                    d.wire = wire(v).map_err(|e| format!("device {}: wire `{v}`: {e}", d.name))?
                }
                "faults" => {
                    d.faults = Some(
                        faults(v).map_err(|e| format!("device {}: faults `{v}`: {e}", d.name))?,
                    )
                }
                _ => {
                    return Err(format!(
                    "device {}: unknown key `{k}` (name, mac, ipv4, wire, faults, vfio, vfio-user)",
                    d.name
                ))
                }
            }
        }
        if let (true, Some(k)) = (d.attached(), emulated) {
            return Err(format!(
                "device {}: `{k}` is an emulated NIC's; a vfio or vfio-user device has its own",
                d.name
            ));
        }
        if let WireSpec::Fabric { .. } = d.wire {
            let (mac, ipv4) = process_addresses(devs.len(), std::process::id());
            if !mac_given {
                d.mac = mac;
            }
            if !ipv4_given {
                d.ipv4 = ipv4;
            }
        }
        if d.vfio.is_some() && d.vfio_user.is_some() {
            return Err(format!("device {}: vfio or vfio-user, not both", d.name));
        }
        if devs.iter().any(|o| o.name == d.name) {
            return Err(format!("two devices are named {}", d.name));
        }
        devs.push(d);
    }
    Ok(devs)
}

/// The default MAC and IPv4 address of device `index` of process `pid`
/// on a fabric: distinct for every live process (Linux's process IDs stay
/// below 2²²) and for four devices in each.
fn process_addresses(index: usize, pid: u32) -> ([u8; 6], [u8; 4]) {
    let p = pid.to_be_bytes();
    let mac = [0x02, index as u8, p[0], p[1], p[2], p[3]];
    let v = (((pid & 0x3f_ffff) << 2) | (index as u32 & 3)).to_be_bytes();
    (mac, [10, v[1], v[2], v[3]])
}

fn name(v: &str) -> Result<String, String> {
    let ok = !v.is_empty()
        && v.len() < crate::abi::SYSFS_NAME_MAX
        && v.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(v.to_owned())
    } else {
        Err(format!(
            "device name `{v}`: 1 to 63 letters, digits, `_` or `-`"
        ))
    }
}

fn mac(v: &str) -> Result<[u8; 6], String> {
    let parts: Vec<&str> = v.split(':').collect();
    let mut m = [0u8; 6];
    if parts.len() != 6 {
        return Err(format!("mac `{v}`: six hex bytes, `:`-separated"));
    }
    for (b, p) in m.iter_mut().zip(&parts) {
        *b =
            u8::from_str_radix(p, 16).map_err(|_| format!("mac `{v}`: `{p}` is not a hex byte"))?;
    }
    if m[0] & 1 != 0 {
        return Err(format!("mac `{v}` is a multicast address"));
    }
    Ok(m)
}

/// A PCI address: `domain:bus:device.function` in hex (`0000:00:03.0`).
fn pci(v: &str) -> Result<String, String> {
    let bad = || format!("vfio `{v}`: a PCI address such as 0000:00:03.0");
    let (dbd, f) = v.split_once('.').ok_or_else(bad)?;
    let parts: Vec<&str> = dbd.split(':').collect();
    let hex = |s: &str, n: usize| s.len() == n && s.bytes().all(|b| b.is_ascii_hexdigit());
    match parts[..] {
        [dom, bus, dev] if hex(dom, 4) && hex(bus, 2) && hex(dev, 2) && hex(f, 1) => {
            Ok(v.to_owned())
        }
        _ => Err(bad()),
    }
}

/// `faults=drop=0.02+reorder=0.02+seed=7`.
fn faults(v: &str) -> Result<FaultSpec, String> {
    let mut seed = u64::from(std::process::id());
    let mut settings = Vec::new();
    for s in v.split('+') {
        match s.strip_prefix("seed=") {
            Some(n) => seed = n.parse().map_err(|e| format!("seed `{n}`: {e}"))?,
            None => settings.push(s),
        }
    }
    let settings = settings.join(",");
    settings.parse::<rnic_emu::net::FaultConfig>()?;
    Ok(FaultSpec { settings, seed })
}

fn wire(v: &str) -> Result<WireSpec, String> {
    if v == "loopback" {
        return Ok(WireSpec::Loopback);
    }
    if let Some(addrs) = v.strip_prefix("udp:") {
        let (l, r) = addrs
            .split_once('=')
            .ok_or("udp:LOCAL=REMOTE, two socket addresses")?;
        let sock = |s: &str| s.parse::<SocketAddr>().map_err(|e| format!("`{s}`: {e}"));
        return Ok(WireSpec::Udp {
            local: sock(l)?,
            remote: sock(r)?,
        });
    }
    if let Some(spec) = v.strip_prefix("udp-fd:") {
        let (fd, r) = spec
            .split_once('=')
            .ok_or("udp-fd:FD=REMOTE, a descriptor and a socket address")?;
        return Ok(WireSpec::UdpFd {
            fd: fd
                .parse::<i32>()
                .ok()
                .filter(|&fd| fd >= 0)
                .ok_or_else(|| format!("`{fd}` is not a file descriptor"))?,
            remote: r.parse::<SocketAddr>().map_err(|e| format!("`{r}`: {e}"))?,
        });
    }
    if let Some(dir) = v.strip_prefix("fabric:") {
        if dir.is_empty() {
            return Err("a directory after the colon".into());
        }
        return Ok(WireSpec::Fabric { dir: dir.into() });
    }
    for (prefix, create) in [("shm-create:", true), ("shm-open:", false)] {
        if let Some(path) = v.strip_prefix(prefix) {
            if path.is_empty() {
                return Err("a file path after the colon".into());
            }
            return Ok(WireSpec::Shm {
                path: path.into(),
                create,
            });
        }
    }
    Err(
        "loopback, udp:LOCAL=REMOTE, udp-fd:FD=REMOTE, shm-create:PATH, shm-open:PATH or fabric:DIR"
            .into(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn devices_from_items() {
        let d = parse(
            [
                "",
                "wire=udp:127.0.0.1:47001=127.0.0.1:47002, mac=02:aa:bb:cc:dd:ee",
                "name=second,ipv4=10.0.0.7,wire=shm-open:/tmp/w",
                "wire=udp-fd:3=127.0.0.1:47009",
            ]
            .into_iter(),
        )
        .unwrap();
        assert_eq!(d.len(), 3);
        assert_eq!(
            d[2].wire,
            WireSpec::UdpFd {
                fd: 3,
                remote: "127.0.0.1:47009".parse().unwrap()
            }
        );
        assert_eq!(d[0].name, "rnic0");
        assert_eq!(d[0].mac, [0x02, 0xaa, 0xbb, 0xcc, 0xdd, 0xee]);
        assert_eq!(
            d[0].guid(),
            [0x00, 0xaa, 0xbb, 0xff, 0xfe, 0xcc, 0xdd, 0xee]
        );
        assert_eq!(
            d[0].wire,
            WireSpec::Udp {
                local: "127.0.0.1:47001".parse().unwrap(),
                remote: "127.0.0.1:47002".parse().unwrap()
            }
        );
        assert_eq!(d[1].name, "second");
        assert_eq!(d[1].ipv4, [10, 0, 0, 7]);
        assert_eq!(d[1].mac, [2, 0, 0, 0, 0, 2], "the second default MAC");
        assert_eq!(
            d[1].wire,
            WireSpec::Shm {
                path: "/tmp/w".into(),
                create: false
            }
        );
    }

    #[test]
    fn fabric_devices_have_the_processs_addresses_unless_given() {
        let d = parse(
            [
                "wire=fabric:/dev/shm/f",
                "wire=fabric:/dev/shm/f,ipv4=10.9.9.9",
            ]
            .into_iter(),
        )
        .unwrap();
        assert_eq!(
            d[0].wire,
            WireSpec::Fabric {
                dir: "/dev/shm/f".into()
            }
        );
        let (mac0, ip0) = process_addresses(0, std::process::id());
        let (mac1, _) = process_addresses(1, std::process::id());
        assert_eq!((d[0].mac, d[0].ipv4), (mac0, ip0));
        assert_eq!((d[1].mac, d[1].ipv4), (mac1, [10, 9, 9, 9]));
        assert_eq!(
            process_addresses(2, 0x12_3456),
            ([2, 2, 0, 0x12, 0x34, 0x56], [10, 0x48, 0xd1, 0x5a])
        );
        // Neighbouring processes and devices differ.
        assert_ne!(process_addresses(0, 7).1, process_addresses(0, 8).1);
        assert_ne!(process_addresses(0, 7).1, process_addresses(1, 7).1);
        assert!(parse(["wire=fabric:"].into_iter())
            .unwrap_err()
            .contains("directory"));
    }

    #[test]
    fn faults_take_the_injectors_settings_and_a_seed() {
        let d = parse(["faults=drop=0.02+reorder=0.5+rx=0+seed=7", "wire=loopback"].into_iter())
            .unwrap();
        let f = d[0].faults.as_ref().unwrap();
        assert_eq!(f.seed, 7);
        let c = f.config();
        assert_eq!((c.drop, c.reorder, c.tx, c.rx), (0.02, 0.5, true, false));
        assert_eq!(d[1].faults, None);
        let d = parse(["faults=duplicate=0.1"].into_iter()).unwrap();
        let f = d[0].faults.as_ref().unwrap();
        assert_eq!(f.seed, u64::from(std::process::id()));
        assert_eq!(f.config().duplicate, 0.1);
    }

    #[test]
    fn bad_items_say_what_is_wrong() {
        for (item, says) in [
            ("mac=01:00:00:00:00:01", "multicast"),
            ("mac=02:00:00", "six hex bytes"),
            ("wire=tcp:1", "loopback, udp"),
            ("wire=udp:127.0.0.1:1", "LOCAL=REMOTE"),
            ("wire=udp-fd:-1=127.0.0.1:1", "not a file descriptor"),
            ("wire=udp-fd:3", "FD=REMOTE"),
            ("name=a b", "letters"),
            ("colour=red", "unknown key"),
            ("ipv4=300.1.1.1", "ipv4"),
            ("mac", "key=value"),
            ("vfio=00:03.0", "PCI address"),
            ("vfio=0000:00:03", "PCI address"),
            ("vfio=0000:00:03.0,wire=loopback", "emulated NIC's"),
            ("mac=02:00:00:00:00:09,vfio=0000:00:03.0", "emulated NIC's"),
            ("vfio-user=/run/r.sock,wire=loopback", "emulated NIC's"),
            ("vfio-user=", "socket path"),
            ("vfio-user=/r.sock,vfio=0000:00:03.0", "not both"),
            ("faults=drop=2", "not in 0.0..=1.0"),
            ("faults=drop=0.1+seed=x", "seed"),
            ("faults=loss=0.1", "unknown fault"),
            ("vfio-user=/r.sock,faults=drop=0.1", "emulated NIC's"),
        ] {
            let e = parse([item].into_iter()).unwrap_err();
            assert!(e.contains(says), "{item}: {e}");
        }
        let d = parse(["name=real,vfio=0000:00:0a.1"].into_iter()).unwrap();
        assert_eq!(d[0].vfio.as_deref(), Some("0000:00:0a.1"));
        let d = parse(["vfio-user=/run/rnicd.sock"].into_iter()).unwrap();
        assert_eq!(d[0].vfio_user, Some("/run/rnicd.sock".into()));
        assert!(d[0].attached());
        let e = parse(["name=x", "name=x"].into_iter()).unwrap_err();
        assert!(e.contains("two devices"), "{e}");
    }
}

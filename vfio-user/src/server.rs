//! The server's end: one client's connection served on a [`Device`].
//!
//! Nothing the client sends is trusted. A message is read whole, up to
//! [`MAX_MESSAGE`] bytes, before it is acted on; a payload too short for
//! its command, a count past [`MAX_DATA_XFER`], a read or write whose data
//! does not match its count, descriptors where the command takes none, an
//! unknown command or one that only a server sends get an error reply
//! (`EINVAL`, or `EOPNOTSUPP` for a command not served), and the
//! connection goes on. What cannot be read past (a header that claims
//! fewer bytes than itself or more than the limit, a stream that ends
//! inside a message, a reply where a command belongs, a first message
//! that is not `VERSION`) ends the connection, and so does a client that
//! stops for [`STALL`] inside a message, or says nothing for as long after
//! connecting: either would hold its server thread for good. The device
//! refuses what it must with an errno of its own ([`Refused`]).

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::time::Duration;

use vfio_bindings::bindings::vfio::{
    VFIO_DEVICE_FLAGS_PCI, VFIO_DEVICE_FLAGS_RESET, VFIO_REGION_INFO_CAP_TYPE,
    VFIO_REGION_INFO_FLAG_CAPS,
};
use zerocopy::{FromBytes, IntoBytes};

use crate::msg::{
    self, flags, CapHeader, CapType, Caps, Command, DeviceInfo, DmaMap, DmaUnmap, IoFd, IoFdsInfo,
    IrqInfo, IrqSet, RegionAccess, RegionInfo, MAX_DATA_XFER, MAX_FDS, MAX_MESSAGE,
    MAX_VERSION_DATA, VERSION,
};
use crate::sock::{self, Message};
use crate::Error;

/// How long a client may stop inside a message, or wait after connecting
/// before its `VERSION`, before the server gives it up.
pub const STALL: Duration = Duration::from_secs(5);

/// A request the device refuses: the errno the client gets, and why (for
/// the server's log).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Refused {
    /// The errno of the error reply.
    pub errno: i32,
    /// Why, in words.
    pub why: String,
}

impl Refused {
    /// `EINVAL`, for `why`.
    pub fn invalid(why: impl Into<String>) -> Refused {
        Refused {
            errno: libc::EINVAL,
            why: why.into(),
        }
    }

    /// `errno`, for `why`.
    pub fn errno(errno: i32, why: impl Into<String>) -> Refused {
        Refused {
            errno,
            why: why.into(),
        }
    }
}

/// One region as the server describes it.
#[derive(Debug, Clone, Copy)]
pub struct Region {
    /// `VFIO_REGION_INFO_FLAG_READ`, `_WRITE`, `_MMAP`.
    pub flags: u32,
    /// Bytes (0: the device has no such region).
    pub size: u64,
    /// With `FLAG_MMAP`: the file the client maps it from (the device
    /// keeps it open) and the offset in it.
    pub mmap: Option<(RawFd, u64)>,
    /// A device-specific region's type and subtype
    /// (`VFIO_REGION_INFO_CAP_TYPE`).
    pub kind: Option<(u32, u32)>,
}

/// Who is connected: the credentials of the client's process when it
/// connected (`SO_PEERCRED`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Peer {
    /// Its process ID.
    pub pid: i32,
    /// Its user ID.
    pub uid: u32,
    /// Its group ID.
    pub gid: u32,
}

/// The credentials of the process at the other end of `stream`.
pub fn peer(stream: &UnixStream) -> std::io::Result<Peer> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: SO_PEERCRED writes at most `len` bytes into `cred`.
    let r = unsafe {
        libc::getsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(Peer {
        pid: cred.pid,
        uid: cred.uid,
        gid: cred.gid,
    })
}

/// A device served over vfio-user: what the server asks of it, one
/// request at a time.
pub trait Device {
    /// Its regions, by index.
    fn regions(&self) -> Vec<Region>;

    /// Its interrupt types, by index.
    fn irqs(&self) -> Vec<IrqInfo>;

    /// The client `peer` finished `VERSION`, offering `offered`; returns
    /// whether the device serves [`msg::PROCESS_MEMORY`] for it (only if
    /// offered), or refuses the client.
    fn connected(&mut self, peer: &Peer, offered: &Caps) -> Result<bool, Refused>;

    /// Reads `data.len()` bytes of region `region` at `offset`.
    fn region_read(&mut self, region: u32, offset: u64, data: &mut [u8]) -> Result<(), Refused>;

    /// Writes `data` to region `region` at `offset`.
    fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> Result<(), Refused>;

    /// The ioeventfds of region `region` (`fd_index` is filled in by the
    /// server) and the descriptors, which the device keeps open.
    fn io_fds(&mut self, region: u32) -> Result<Vec<(IoFd, RawFd)>, Refused>;

    /// Maps client memory: `fd` the file it is in, or none.
    fn dma_map(&mut self, map: &DmaMap, fd: Option<OwnedFd>) -> Result<(), Refused>;

    /// Unmaps a region mapped before, exactly.
    fn dma_unmap(&mut self, unmap: &DmaUnmap) -> Result<(), Refused>;

    /// Sets interrupt actions, with the client's eventfds.
    fn set_irqs(&mut self, set: &IrqSet, fds: Vec<OwnedFd>) -> Result<(), Refused>;

    /// Resets the device.
    fn reset(&mut self) -> Result<(), Refused>;
}

/// A reply's payload parts and descriptors.
type Reply = (Vec<u8>, Vec<RawFd>);

fn body<T: FromBytes>(m: &Message, what: &str) -> Result<T, Refused> {
    msg::read::<T>(&m.payload).ok_or_else(|| Refused::invalid(format!("{what}: payload too short")))
}

fn no_fds(m: &Message) -> Result<(), Refused> {
    if m.fds.is_empty() {
        Ok(())
    } else {
        Err(Refused::invalid(
            "descriptors with a command that takes none",
        ))
    }
}

/// Serves the client on `stream` until it disconnects (`Ok`) or breaks
/// the protocol (`Err`).
pub fn serve(stream: &UnixStream, dev: &mut dyn Device) -> Result<(), Error> {
    let peer = peer(stream).map_err(Error::Io)?;
    // The wait for VERSION is bounded too (the read timeout goes with it).
    stream.set_read_timeout(Some(STALL)).map_err(Error::Io)?;
    let Some(first) = sock::recv(stream, MAX_MESSAGE, Some(STALL))? else {
        return Ok(());
    };
    if first.header.command != Command::Version as u16 || first.header.kind() != flags::COMMAND {
        return Err(Error::Protocol(format!(
            "the first message is command {}, not VERSION",
            first.header.command
        )));
    }
    match version(&first, &peer, dev) {
        // The device may have opened the peer's process by its pid: that
        // was the client's only if the client is still there (a pid is
        // not reused while its process lives).
        Ok(_) if hung_up(stream) => return Ok(()),
        Ok((payload, _)) => {
            let h = first.header.reply(payload.len());
            sock::send(stream, &h, &[&payload], &[]).map_err(Error::Io)?;
        }
        Err(r) => {
            log::warn!("client {}: VERSION refused: {}", peer.pid, r.why);
            let h = first.header.error_reply(r.errno);
            sock::send(stream, &h, &[], &[]).map_err(Error::Io)?;
            return Ok(());
        }
    }
    while let Some(mut m) = sock::recv(stream, MAX_MESSAGE, Some(STALL))? {
        if m.header.kind() != flags::COMMAND {
            return Err(Error::Protocol(format!(
                "a message of type {} where a command belongs",
                m.header.kind()
            )));
        }
        let r = handle(&mut m, dev);
        match r {
            Ok(_) if m.header.no_reply() => {}
            Ok((payload, fds)) => {
                let h = m.header.reply(payload.len());
                sock::send(stream, &h, &[&payload], &fds).map_err(Error::Io)?;
            }
            Err(r) => {
                log::debug!("command {} refused: {}", m.header.command, r.why);
                let h = m.header.error_reply(r.errno);
                sock::send(stream, &h, &[], &[]).map_err(Error::Io)?;
            }
        }
    }
    Ok(())
}

/// Whether the client has closed its end.
fn hung_up(stream: &UnixStream) -> bool {
    let mut p = libc::pollfd {
        fd: stream.as_raw_fd(),
        events: libc::POLLRDHUP,
        revents: 0,
    };
    // SAFETY: one valid pollfd, no wait.
    let n = unsafe { libc::poll(&mut p, 1, 0) };
    n == 1 && p.revents & (libc::POLLRDHUP | libc::POLLHUP | libc::POLLERR) != 0
}

fn version(m: &Message, peer: &Peer, dev: &mut dyn Device) -> Result<Reply, Refused> {
    no_fds(m)?;
    let v: msg::Version = body(m, "VERSION")?;
    if v.major != VERSION.major {
        return Err(Refused::errno(
            libc::ENOTSUP,
            format!("major version {}", v.major),
        ));
    }
    let data = &m.payload[size_of::<msg::Version>()..];
    if data.len() > MAX_VERSION_DATA {
        return Err(Refused::invalid("version data too long"));
    }
    let offered = Caps::parse(data).map_err(Refused::invalid)?;
    let process_memory = dev.connected(peer, &offered)? && offered.process_memory;
    let reply = msg::Version {
        major: VERSION.major,
        minor: VERSION.minor.min(v.minor),
    };
    let mut out = reply.as_bytes().to_vec();
    out.extend_from_slice(Caps::ours(process_memory).to_json().as_bytes());
    out.push(0);
    Ok((out, Vec::new()))
}

/// Runs command `m`, handing the device the descriptors that came with it.
fn handle(m: &mut Message, dev: &mut dyn Device) -> Result<Reply, Refused> {
    let Some(command) = Command::from_u16(m.header.command) else {
        return Err(Refused::errno(
            libc::EOPNOTSUPP,
            format!("unknown command {}", m.header.command),
        ));
    };
    match command {
        Command::DmaMap => {
            let map: DmaMap = body(m, "DMA_MAP")?;
            if m.fds.len() > 1 {
                return Err(Refused::invalid("DMA_MAP with more than one descriptor"));
            }
            dev.dma_map(&map, m.fds.pop())?;
            Ok((Vec::new(), Vec::new()))
        }
        Command::DmaUnmap => {
            no_fds(m)?;
            let unmap: DmaUnmap = body(m, "DMA_UNMAP")?;
            if unmap.flags != 0 {
                return Err(Refused::invalid("DMA_UNMAP with flags (no dirty bitmaps)"));
            }
            dev.dma_unmap(&unmap)?;
            Ok((unmap.as_bytes().to_vec(), Vec::new()))
        }
        Command::DeviceGetInfo => {
            no_fds(m)?;
            let info = DeviceInfo {
                argsz: size_of::<DeviceInfo>() as u32,
                flags: VFIO_DEVICE_FLAGS_PCI | VFIO_DEVICE_FLAGS_RESET,
                num_regions: dev.regions().len() as u32,
                num_irqs: dev.irqs().len() as u32,
            };
            Ok((info.as_bytes().to_vec(), Vec::new()))
        }
        Command::DeviceGetRegionInfo => {
            no_fds(m)?;
            let req: RegionInfo = body(m, "DEVICE_GET_REGION_INFO")?;
            region_info(&req, dev)
        }
        Command::DeviceGetRegionIoFds => {
            no_fds(m)?;
            let req: IoFdsInfo = body(m, "DEVICE_GET_REGION_IO_FDS")?;
            io_fds(&req, dev)
        }
        Command::DeviceGetIrqInfo => {
            no_fds(m)?;
            let req: IrqInfo = body(m, "DEVICE_GET_IRQ_INFO")?;
            let irqs = dev.irqs();
            let info = irqs
                .get(req.index as usize)
                .ok_or_else(|| Refused::invalid(format!("no interrupt type {}", req.index)))?;
            Ok((info.as_bytes().to_vec(), Vec::new()))
        }
        Command::DeviceSetIrqs => {
            let set: IrqSet = body(m, "DEVICE_SET_IRQS")?;
            if m.payload.len() != size_of::<IrqSet>() {
                return Err(Refused::invalid("DEVICE_SET_IRQS with data (booleans)"));
            }
            dev.set_irqs(&set, std::mem::take(&mut m.fds))?;
            Ok((Vec::new(), Vec::new()))
        }
        Command::RegionRead => {
            no_fds(m)?;
            let a: RegionAccess = body(m, "REGION_READ")?;
            if m.payload.len() != size_of::<RegionAccess>() {
                return Err(Refused::invalid("REGION_READ with data"));
            }
            if a.count as usize > MAX_DATA_XFER {
                return Err(Refused::invalid(format!(
                    "REGION_READ of {} bytes",
                    a.count
                )));
            }
            let mut out = a.as_bytes().to_vec();
            out.resize(size_of::<RegionAccess>() + a.count as usize, 0);
            dev.region_read(a.region, a.offset, &mut out[size_of::<RegionAccess>()..])?;
            Ok((out, Vec::new()))
        }
        Command::RegionWrite => {
            no_fds(m)?;
            let a: RegionAccess = body(m, "REGION_WRITE")?;
            let data = &m.payload[size_of::<RegionAccess>()..];
            if data.len() != a.count as usize {
                return Err(Refused::invalid(format!(
                    "REGION_WRITE of {} bytes with {} of data",
                    a.count,
                    data.len()
                )));
            }
            dev.region_write(a.region, a.offset, data)?;
            Ok((a.as_bytes().to_vec(), Vec::new()))
        }
        Command::DeviceReset => {
            no_fds(m)?;
            dev.reset()?;
            Ok((Vec::new(), Vec::new()))
        }
        Command::Version | Command::DmaRead | Command::DmaWrite => Err(Refused::invalid(format!(
            "{command:?} is not a command a client sends now"
        ))),
    }
}

fn region_info(req: &RegionInfo, dev: &mut dyn Device) -> Result<Reply, Refused> {
    let regions = dev.regions();
    let r = regions
        .get(req.index as usize)
        .ok_or_else(|| Refused::invalid(format!("no region {}", req.index)))?;
    let mut info = RegionInfo {
        argsz: size_of::<RegionInfo>() as u32,
        flags: r.flags,
        index: req.index,
        cap_offset: 0,
        size: r.size,
        offset: r.mmap.map_or(0, |(_, off)| off),
    };
    let mut caps = Vec::new();
    if let Some((kind, subtype)) = r.kind {
        let h = CapHeader {
            id: VFIO_REGION_INFO_CAP_TYPE as u16,
            version: 1,
            next: 0,
        };
        caps.extend_from_slice(h.as_bytes());
        caps.extend_from_slice(CapType { kind, subtype }.as_bytes());
        info.flags |= VFIO_REGION_INFO_FLAG_CAPS;
        info.argsz += caps.len() as u32;
    }
    let fds: Vec<RawFd> = r.mmap.map(|(fd, _)| fd).into_iter().collect();
    // As VFIO does: a request with too little room learns the size it
    // needs, and no capabilities.
    if req.argsz < info.argsz {
        return Ok((info.as_bytes().to_vec(), fds));
    }
    if !caps.is_empty() {
        info.cap_offset = size_of::<RegionInfo>() as u32;
    }
    let mut out = info.as_bytes().to_vec();
    out.extend_from_slice(&caps);
    Ok((out, fds))
}

fn io_fds(req: &IoFdsInfo, dev: &mut dyn Device) -> Result<Reply, Refused> {
    let subs = dev.io_fds(req.index)?;
    if subs.len() > MAX_FDS {
        return Err(Refused::errno(
            libc::E2BIG,
            "more ioeventfds than one message holds",
        ));
    }
    let need = size_of::<IoFdsInfo>() + subs.len() * size_of::<IoFd>();
    let mut info = IoFdsInfo {
        argsz: need as u32,
        flags: 0,
        index: req.index,
        count: subs.len() as u32,
    };
    if (req.argsz as usize) < need {
        info.count = 0;
        return Ok((info.as_bytes().to_vec(), Vec::new()));
    }
    let mut out = info.as_bytes().to_vec();
    let mut fds = Vec::new();
    for (mut sub, fd) in subs {
        sub.fd_index = fds.len() as u32;
        fds.push(fd);
        out.extend_from_slice(sub.as_bytes());
    }
    Ok((out, fds))
}

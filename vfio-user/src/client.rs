//! The client's end: commands to a vfio-user server, every reply checked.
//!
//! A reply must carry the command's ID and number and the reply type, be
//! no longer than [`MAX_MESSAGE`], and hold at least the payload its
//! command defines; one with the error flag is [`Error::Refused`] with its
//! errno. Anything else is [`Error::Protocol`], after which the
//! connection cannot be trusted: it is shut down, and every later call
//! fails.

use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;
use std::path::Path;

use vfio_bindings::bindings::vfio::{VFIO_REGION_INFO_CAP_TYPE, VFIO_REGION_INFO_FLAG_CAPS};
use zerocopy::IntoBytes;

use crate::msg::{
    self, flags, CapHeader, CapType, Caps, Command, DeviceInfo, DmaMap, DmaUnmap, Header, IoFd,
    IoFdsInfo, IrqInfo, IrqSet, RegionAccess, RegionInfo, HEADER_LEN, MAX_FDS, MAX_MESSAGE,
    VERSION,
};
use crate::server::{peer, Peer};
use crate::sock::{self, Message};
use crate::Error;

/// Lets the server at `pid` reach this process's memory where Yama
/// restricts ptrace to descendants (the kernel checks ptrace access on
/// every `process_vm_readv`); without Yama there is nothing to allow.
fn allow_server(pid: i32) {
    // SAFETY: PR_SET_PTRACER takes a pid; no memory arguments.
    let r = unsafe { libc::prctl(libc::PR_SET_PTRACER, pid as libc::c_ulong, 0, 0, 0) };
    if r != 0 {
        log::debug!(
            "PR_SET_PTRACER {pid}: {} (no Yama: nothing to allow)",
            std::io::Error::last_os_error()
        );
    }
}

/// A region as the server described it.
#[derive(Debug)]
pub struct RegionDesc {
    /// Its `vfio_region_info`.
    pub info: RegionInfo,
    /// A device-specific region's type and subtype.
    pub kind: Option<(u32, u32)>,
    /// The file to map it from (with `FLAG_MMAP`).
    pub fd: Option<OwnedFd>,
}

/// A connection to a vfio-user server.
#[derive(Debug)]
pub struct Client {
    stream: UnixStream,
    next_id: u16,
    caps: Caps,
    server: Peer,
    broken: bool,
}

impl Client {
    /// Connects to the server at `path` and agrees on the version; offers
    /// [`msg::PROCESS_MEMORY`] if `process_memory` (and lets the server's
    /// process reach this one's memory where Yama asks for that).
    pub fn connect(path: &Path, process_memory: bool) -> Result<Client, Error> {
        let stream = UnixStream::connect(path).map_err(Error::Io)?;
        let server = peer(&stream).map_err(Error::Io)?;
        if process_memory {
            allow_server(server.pid);
        }
        let mut c = Client {
            stream,
            next_id: 0,
            caps: Caps::default(),
            server,
            broken: false,
        };
        let mut data = VERSION.as_bytes().to_vec();
        data.extend_from_slice(Caps::ours(process_memory).to_json().as_bytes());
        data.push(0);
        let r = c.call(Command::Version, &[&data], &[])?;
        let v: msg::Version = c.payload(&r, size_of::<msg::Version>())?;
        if v.major != VERSION.major || v.minor > VERSION.minor {
            return Err(c.broke(format!(
                "the server answered version {}.{}",
                v.major, v.minor
            )));
        }
        let caps = Caps::parse(&r.payload[size_of::<msg::Version>()..]);
        c.caps = match caps {
            Ok(caps) if caps.process_memory && !process_memory => {
                return Err(c.broke("the server named a capability not offered".into()))
            }
            Ok(caps) => caps,
            Err(e) => return Err(c.broke(format!("the server's capabilities: {e}"))),
        };
        Ok(c)
    }

    /// The capabilities the server announced.
    pub fn caps(&self) -> &Caps {
        &self.caps
    }

    /// The server's process, as it was when this client connected.
    pub fn server(&self) -> Peer {
        self.server
    }

    /// Marks the connection broken and returns the protocol error.
    fn broke(&mut self, why: String) -> Error {
        self.broken = true;
        let _ = self.stream.shutdown(std::net::Shutdown::Both);
        Error::Protocol(why)
    }

    /// Sends a command and returns its checked reply.
    fn call(&mut self, command: Command, parts: &[&[u8]], fds: &[RawFd]) -> Result<Message, Error> {
        if self.broken {
            return Err(Error::Protocol("the connection broke earlier".into()));
        }
        let id = self.next_id;
        self.next_id = self.next_id.wrapping_add(1);
        let size = HEADER_LEN + parts.iter().map(|p| p.len()).sum::<usize>();
        let h = Header::command(id, command, size);
        if let Err(e) = sock::send(&self.stream, &h, parts, fds) {
            self.broken = true;
            return Err(Error::Io(e));
        }
        let r = match sock::recv(&self.stream, MAX_MESSAGE, None) {
            Ok(Some(r)) => r,
            Ok(None) => return Err(self.broke("the server closed the connection".into())),
            Err(e) => {
                self.broken = true;
                return Err(e);
            }
        };
        let rh = r.header;
        if rh.kind() != flags::REPLY || rh.id != id || rh.command != command as u16 {
            return Err(self.broke(format!(
                "a reply of type {} to command {} ID {} where {command:?} ID {id} was due",
                rh.kind(),
                rh.command,
                rh.id
            )));
        }
        if rh.flags & flags::ERROR != 0 {
            return Err(Error::Refused {
                command,
                errno: rh.error as i32,
            });
        }
        Ok(r)
    }

    /// The `T` at the start of `r`'s payload, which must hold `min` bytes.
    fn payload<T: zerocopy::FromBytes>(&mut self, r: &Message, min: usize) -> Result<T, Error> {
        match msg::read::<T>(&r.payload) {
            Some(v) if r.payload.len() >= min => Ok(v),
            _ => Err(self.broke(format!(
                "a reply to command {} of {} bytes, too short",
                r.header.command,
                r.payload.len()
            ))),
        }
    }

    /// `DEVICE_GET_INFO`.
    pub fn device_info(&mut self) -> Result<DeviceInfo, Error> {
        let req = DeviceInfo {
            argsz: size_of::<DeviceInfo>() as u32,
            ..Default::default()
        };
        let r = self.call(Command::DeviceGetInfo, &[req.as_bytes()], &[])?;
        self.payload(&r, size_of::<DeviceInfo>())
    }

    /// `DEVICE_GET_REGION_INFO` of region `index`, capabilities included.
    pub fn region_info(&mut self, index: u32) -> Result<RegionDesc, Error> {
        let mut argsz = size_of::<RegionInfo>() as u32;
        for _ in 0..2 {
            let req = RegionInfo {
                argsz,
                index,
                ..Default::default()
            };
            let mut r = self.call(Command::DeviceGetRegionInfo, &[req.as_bytes()], &[])?;
            let info: RegionInfo = self.payload(&r, size_of::<RegionInfo>())?;
            if info.argsz > argsz {
                // Capabilities that did not fit: ask again with room.
                if info.argsz as usize > MAX_MESSAGE {
                    return Err(self.broke(format!("region {index}: argsz {}", info.argsz)));
                }
                argsz = info.argsz;
                continue;
            }
            if info.index != index || r.fds.len() > 1 {
                return Err(self.broke(format!("region {index}: a reply about another")));
            }
            let kind = if info.flags & VFIO_REGION_INFO_FLAG_CAPS != 0 {
                self.cap_type(&r.payload, info.cap_offset)?
            } else {
                None
            };
            return Ok(RegionDesc {
                info,
                kind,
                fd: r.fds.pop(),
            });
        }
        Err(self.broke(format!("region {index}: argsz grew twice")))
    }

    /// Walks the capability chain of a region info reply for its type.
    fn cap_type(&mut self, payload: &[u8], first: u32) -> Result<Option<(u32, u32)>, Error> {
        let mut at = first as usize;
        // Every capability is further on than the last: the walk ends.
        let mut floor = size_of::<RegionInfo>();
        while at != 0 {
            if at < floor {
                return Err(self.broke("a region capability chain that loops".into()));
            }
            let Some(h) = payload.get(at..).and_then(msg::read::<CapHeader>) else {
                return Err(self.broke("a region capability past the reply".into()));
            };
            if u32::from(h.id) == VFIO_REGION_INFO_CAP_TYPE {
                let Some(t) = payload
                    .get(at + size_of::<CapHeader>()..)
                    .and_then(msg::read::<CapType>)
                else {
                    return Err(self.broke("a region type capability cut short".into()));
                };
                return Ok(Some((t.kind, t.subtype)));
            }
            floor = at + size_of::<CapHeader>();
            at = h.next as usize;
        }
        Ok(None)
    }

    /// `DEVICE_GET_REGION_IO_FDS` of region `index`: each sub-region with
    /// its descriptor.
    pub fn io_fds(&mut self, index: u32) -> Result<Vec<(IoFd, OwnedFd)>, Error> {
        let req = IoFdsInfo {
            argsz: (size_of::<IoFdsInfo>() + MAX_FDS * size_of::<IoFd>()) as u32,
            flags: 0,
            index,
            count: 0,
        };
        let r = self.call(Command::DeviceGetRegionIoFds, &[req.as_bytes()], &[])?;
        let info: IoFdsInfo = self.payload(&r, size_of::<IoFdsInfo>())?;
        let count = info.count as usize;
        let subs = &r.payload[size_of::<IoFdsInfo>()..];
        if count > MAX_FDS || subs.len() < count * size_of::<IoFd>() {
            return Err(self.broke(format!(
                "region {index}: {count} io fds in {} bytes",
                subs.len()
            )));
        }
        let mut out = Vec::with_capacity(count);
        for chunk in subs.chunks_exact(size_of::<IoFd>()).take(count) {
            let sub = msg::read::<IoFd>(chunk).expect("a whole sub-region");
            // Several sub-regions may share a descriptor.
            match r.fds.get(sub.fd_index as usize).map(OwnedFd::try_clone) {
                Some(Ok(fd)) => out.push((sub, fd)),
                Some(Err(e)) => return Err(Error::Io(e)),
                None => return Err(self.broke(format!("io fd index {} missing", sub.fd_index))),
            }
        }
        Ok(out)
    }

    /// `DEVICE_GET_IRQ_INFO` of interrupt type `index`.
    pub fn irq_info(&mut self, index: u32) -> Result<IrqInfo, Error> {
        let req = IrqInfo {
            argsz: size_of::<IrqInfo>() as u32,
            index,
            ..Default::default()
        };
        let r = self.call(Command::DeviceGetIrqInfo, &[req.as_bytes()], &[])?;
        let info: IrqInfo = self.payload(&r, size_of::<IrqInfo>())?;
        if info.index != index {
            return Err(self.broke(format!("interrupt type {index}: a reply about another")));
        }
        Ok(info)
    }

    /// `DEVICE_SET_IRQS`: `flags` on vectors `start .. start + count` of
    /// type `index`, with `fds` (one per vector, or none).
    pub fn set_irqs(
        &mut self,
        index: u32,
        flags: u32,
        start: u32,
        count: u32,
        fds: &[RawFd],
    ) -> Result<(), Error> {
        let req = IrqSet {
            argsz: size_of::<IrqSet>() as u32,
            flags,
            index,
            start,
            count,
        };
        self.call(Command::DeviceSetIrqs, &[req.as_bytes()], fds)?;
        Ok(())
    }

    /// `DMA_MAP` of `size` bytes at IOVA `address`: from `fd` at `offset`,
    /// or (no `fd`) this process's memory at virtual address `offset`,
    /// which needs [`msg::PROCESS_MEMORY`].
    pub fn dma_map(
        &mut self,
        offset: u64,
        address: u64,
        size: u64,
        fd: Option<RawFd>,
    ) -> Result<(), Error> {
        let req = DmaMap {
            argsz: size_of::<DmaMap>() as u32,
            flags: msg::DMA_READ | msg::DMA_WRITE,
            offset,
            address,
            size,
        };
        let fds: Vec<RawFd> = fd.into_iter().collect();
        self.call(Command::DmaMap, &[req.as_bytes()], &fds)?;
        Ok(())
    }

    /// `DMA_UNMAP` of a region mapped before.
    pub fn dma_unmap(&mut self, address: u64, size: u64) -> Result<(), Error> {
        let req = DmaUnmap {
            argsz: size_of::<DmaUnmap>() as u32,
            flags: 0,
            address,
            size,
        };
        let r = self.call(Command::DmaUnmap, &[req.as_bytes()], &[])?;
        let back: DmaUnmap = self.payload(&r, size_of::<DmaUnmap>())?;
        if (back.address, back.size) != (address, size) {
            return Err(self.broke("DMA_UNMAP answered for another region".into()));
        }
        Ok(())
    }

    /// `REGION_READ` of `data.len()` bytes.
    pub fn region_read(&mut self, region: u32, offset: u64, data: &mut [u8]) -> Result<(), Error> {
        let req = RegionAccess {
            offset,
            region,
            count: data.len() as u32,
        };
        let r = self.call(Command::RegionRead, &[req.as_bytes()], &[])?;
        let back: RegionAccess = self.payload(&r, size_of::<RegionAccess>())?;
        let got = &r.payload[size_of::<RegionAccess>()..];
        if back != req || got.len() != data.len() {
            return Err(self.broke(format!(
                "REGION_READ of {} bytes answered with {}",
                data.len(),
                got.len()
            )));
        }
        data.copy_from_slice(got);
        Ok(())
    }

    /// `REGION_WRITE` of `data`.
    pub fn region_write(&mut self, region: u32, offset: u64, data: &[u8]) -> Result<(), Error> {
        let req = RegionAccess {
            offset,
            region,
            count: data.len() as u32,
        };
        let r = self.call(Command::RegionWrite, &[req.as_bytes(), data], &[])?;
        let back: RegionAccess = self.payload(&r, size_of::<RegionAccess>())?;
        if back != req {
            return Err(self.broke("REGION_WRITE answered for another access".into()));
        }
        Ok(())
    }

    /// `DEVICE_RESET`.
    pub fn reset(&mut self) -> Result<(), Error> {
        self.call(Command::DeviceReset, &[], &[])?;
        Ok(())
    }

    /// The socket's descriptor (to poll it for the server going away).
    pub fn raw_fd(&self) -> RawFd {
        self.stream.as_raw_fd()
    }
}

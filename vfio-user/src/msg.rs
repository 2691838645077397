//! vfio-user messages (QEMU's `docs/interop/vfio-user.rst`, protocol 0.1):
//! the header and the payloads, as typed views over byte buffers. Every
//! field is in the host's byte order, as the protocol says.
//!
//! Each payload is a `#[repr(C)]` struct with the protocol's offsets,
//! asserted below, and where Linux's `<linux/vfio.h>` has the same
//! structure (`vfio_region_info`, `vfio_irq_info`, …) its size is checked
//! against vfio-bindings' copy of that header.

use static_assertions::const_assert_eq;
use vfio_bindings::bindings::vfio as linux;
use zerocopy::{FromBytes, Immutable, IntoBytes, KnownLayout};

/// Bytes of the header that starts every message.
pub const HEADER_LEN: usize = 16;

/// The largest `count` of a region or DMA read or write (the protocol's
/// default `max_data_xfer_size`), and so of any payload's data.
pub const MAX_DATA_XFER: usize = 1 << 20;

/// The largest message either end accepts: a header, a read or write
/// request and its data. A message claiming more is a protocol error.
pub const MAX_MESSAGE: usize = HEADER_LEN + 16 + MAX_DATA_XFER;

/// The most file descriptors either end takes in one message (announced
/// as `max_msg_fds`).
pub const MAX_FDS: usize = 16;

/// The most bytes of `VERSION` data (its JSON) accepted.
pub const MAX_VERSION_DATA: usize = 4096;

/// Message types (header flags bits 3:0).
pub mod flags {
    /// Bits 3:0: the type.
    pub const TYPE_MASK: u32 = 0xf;
    /// A command.
    pub const COMMAND: u32 = 0;
    /// A reply to the command with the same ID.
    pub const REPLY: u32 = 1;
    /// A command that wants no reply.
    pub const NO_REPLY: u32 = 1 << 4;
    /// A reply saying the command failed (`error` holds an errno).
    pub const ERROR: u32 = 1 << 5;
}

/// Command numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u16)]
pub enum Command {
    /// Protocol version and capabilities.
    Version = 1,
    /// Memory the server may reach.
    DmaMap = 2,
    /// Memory the server may reach no more.
    DmaUnmap = 3,
    /// Regions and interrupt types.
    DeviceGetInfo = 4,
    /// One region.
    DeviceGetRegionInfo = 5,
    /// File descriptors that stand for writes to a region.
    DeviceGetRegionIoFds = 6,
    /// One interrupt type.
    DeviceGetIrqInfo = 7,
    /// Interrupt actions.
    DeviceSetIrqs = 8,
    /// A read of a region.
    RegionRead = 9,
    /// A write to a region.
    RegionWrite = 10,
    /// A read of client memory (server to client).
    DmaRead = 11,
    /// A write to client memory (server to client).
    DmaWrite = 12,
    /// Device reset.
    DeviceReset = 13,
}

impl Command {
    /// The command numbered `n`, if it is one this crate knows.
    pub fn from_u16(n: u16) -> Option<Command> {
        use Command::*;
        Some(match n {
            1 => Version,
            2 => DmaMap,
            3 => DmaUnmap,
            4 => DeviceGetInfo,
            5 => DeviceGetRegionInfo,
            6 => DeviceGetRegionIoFds,
            7 => DeviceGetIrqInfo,
            8 => DeviceSetIrqs,
            9 => RegionRead,
            10 => RegionWrite,
            11 => DmaRead,
            12 => DmaWrite,
            13 => DeviceReset,
            _ => return None,
        })
    }
}

/// The 16-byte header of every message.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct Header {
    /// Chosen by the sender of a command, echoed in its reply.
    pub id: u16,
    /// The [`Command`].
    pub command: u16,
    /// Bytes of the whole message, this header included.
    pub size: u32,
    /// [`flags`].
    pub flags: u32,
    /// An errno, in a reply with [`flags::ERROR`].
    pub error: u32,
}

impl Header {
    /// A command header for `size` bytes in all.
    pub fn command(id: u16, command: Command, size: usize) -> Header {
        Header {
            id,
            command: command as u16,
            size: size as u32,
            flags: flags::COMMAND,
            error: 0,
        }
    }

    /// The header of the reply to `self`, `payload` bytes after it.
    pub fn reply(&self, payload: usize) -> Header {
        Header {
            id: self.id,
            command: self.command,
            size: (HEADER_LEN + payload) as u32,
            flags: flags::REPLY,
            error: 0,
        }
    }

    /// The header of an error reply to `self`.
    pub fn error_reply(&self, errno: i32) -> Header {
        Header {
            id: self.id,
            command: self.command,
            size: HEADER_LEN as u32,
            flags: flags::REPLY | flags::ERROR,
            error: errno as u32,
        }
    }

    /// The message type (bits 3:0 of the flags).
    pub fn kind(&self) -> u32 {
        self.flags & flags::TYPE_MASK
    }

    /// Whether the sender wants no reply.
    pub fn no_reply(&self) -> bool {
        self.flags & flags::NO_REPLY != 0
    }

    /// Bytes after the header, if the size is at least a header's.
    pub fn payload_len(&self) -> Option<usize> {
        (self.size as usize).checked_sub(HEADER_LEN)
    }
}

/// `VERSION`'s fixed part; the JSON capabilities follow, NUL-terminated.
#[derive(Debug, Clone, Copy, Default, FromBytes, IntoBytes, Immutable, KnownLayout)]
#[repr(C)]
pub struct Version {
    /// Major version: 0.
    pub major: u16,
    /// Minor version: 1.
    pub minor: u16,
}

/// The protocol version spoken: 0.1.
pub const VERSION: Version = Version { major: 0, minor: 1 };

/// `DMA_MAP`'s payload (the file descriptor travels beside it).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct DmaMap {
    /// 32.
    pub argsz: u32,
    /// [`DMA_READ`] | [`DMA_WRITE`].
    pub flags: u32,
    /// Offset in the file; with no file and [`PROCESS_MEMORY`] negotiated,
    /// the client's virtual address of the region.
    pub offset: u64,
    /// The region's DMA address (IOVA).
    pub address: u64,
    /// Its length.
    pub size: u64,
}

/// `DmaMap::flags`: the server may read the region.
pub const DMA_READ: u32 = 1;
/// `DmaMap::flags`: the server may write the region.
pub const DMA_WRITE: u32 = 2;

/// `DMA_UNMAP`'s payload, and its reply's.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct DmaUnmap {
    /// 24.
    pub argsz: u32,
    /// 0 (no dirty page bitmap).
    pub flags: u32,
    /// The IOVA of a region mapped before.
    pub address: u64,
    /// Its exact length.
    pub size: u64,
}

/// `DEVICE_GET_INFO`'s reply (`struct vfio_device_info`'s first fields).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct DeviceInfo {
    /// 16.
    pub argsz: u32,
    /// `VFIO_DEVICE_FLAGS_PCI`, `VFIO_DEVICE_FLAGS_RESET`.
    pub flags: u32,
    /// Regions, by index.
    pub num_regions: u32,
    /// Interrupt types, by index.
    pub num_irqs: u32,
}

/// `DEVICE_GET_REGION_INFO`: `struct vfio_region_info`; capabilities may
/// follow in a reply.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct RegionInfo {
    /// In a request, the most bytes the reply may hold; in a reply, the
    /// bytes of the whole answer (capabilities included).
    pub argsz: u32,
    /// `VFIO_REGION_INFO_FLAG_*`.
    pub flags: u32,
    /// The region.
    pub index: u32,
    /// Where the first capability is, from the start of this structure.
    pub cap_offset: u32,
    /// Bytes of the region.
    pub size: u64,
    /// The file offset to map it at (with `FLAG_MMAP`).
    pub offset: u64,
}

/// `struct vfio_info_cap_header`: one capability of a region.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct CapHeader {
    /// `VFIO_REGION_INFO_CAP_*`.
    pub id: u16,
    /// The capability's version.
    pub version: u16,
    /// The next capability's offset from the start of the region info, 0
    /// for none.
    pub next: u32,
}

/// `struct vfio_region_info_cap_type` after its header: what a
/// device-specific region is.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct CapType {
    /// `VFIO_REGION_TYPE_PCI_VENDOR_TYPE | vendor ID` for a vendor's own.
    pub kind: u32,
    /// The vendor's subtype.
    pub subtype: u32,
}

/// `DEVICE_GET_REGION_IO_FDS` request, and the fixed part of its reply.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct IoFdsInfo {
    /// The most bytes of the reply (request), its bytes (reply).
    pub argsz: u32,
    /// 0.
    pub flags: u32,
    /// The region.
    pub index: u32,
    /// Sub-regions that follow (reply).
    pub count: u32,
}

/// One sub-region of a `DEVICE_GET_REGION_IO_FDS` reply: an ioeventfd.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct IoFd {
    /// Where in the region the writes it stands for go.
    pub offset: u64,
    /// Their size (0: any).
    pub size: u64,
    /// Which descriptor of the message it is.
    pub fd_index: u32,
    /// [`IO_FD_IOEVENTFD`].
    pub kind: u32,
    /// KVM's ioeventfd flags: 0.
    pub flags: u32,
    /// 0.
    pub padding: u32,
    /// The value to match, unused without the flag.
    pub datamatch: u64,
}

/// `IoFd::kind`: an ioeventfd.
pub const IO_FD_IOEVENTFD: u32 = 0;

/// `DEVICE_GET_IRQ_INFO`: `struct vfio_irq_info`.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct IrqInfo {
    /// 16.
    pub argsz: u32,
    /// `VFIO_IRQ_INFO_*`.
    pub flags: u32,
    /// The interrupt type (`VFIO_PCI_MSIX_IRQ_INDEX`, …).
    pub index: u32,
    /// Vectors of that type.
    pub count: u32,
}

/// `DEVICE_SET_IRQS`: `struct vfio_irq_set` without its data.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct IrqSet {
    /// 20 (no boolean data).
    pub argsz: u32,
    /// `VFIO_IRQ_SET_DATA_*` | `VFIO_IRQ_SET_ACTION_*`.
    pub flags: u32,
    /// The interrupt type.
    pub index: u32,
    /// The first vector.
    pub start: u32,
    /// Vectors set.
    pub count: u32,
}

/// `REGION_READ` and `REGION_WRITE`: where, and how many bytes; a write's
/// data, and a read reply's, follow.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, FromBytes, IntoBytes, Immutable, KnownLayout,
)]
#[repr(C)]
pub struct RegionAccess {
    /// Offset in the region.
    pub offset: u64,
    /// The region.
    pub region: u32,
    /// Bytes.
    pub count: u32,
}

/// The vendor capability a client names in `VERSION` to say that a
/// `DMA_MAP` without a file descriptor is its own memory at the virtual
/// address in `offset`, which the server, on the same host, reaches
/// through the kernel (`process_vm_readv`) rather than by `DMA_READ` and
/// `DMA_WRITE` messages. The server names it in its reply if it does so.
pub const PROCESS_MEMORY: &str = "rnic_process_memory";

const_assert_eq!(size_of::<Header>(), HEADER_LEN);
const_assert_eq!(std::mem::offset_of!(Header, size), 4);
const_assert_eq!(std::mem::offset_of!(Header, error), 12);
const_assert_eq!(size_of::<DmaMap>(), 32);
const_assert_eq!(std::mem::offset_of!(DmaMap, offset), 8);
const_assert_eq!(std::mem::offset_of!(DmaMap, address), 16);
const_assert_eq!(std::mem::offset_of!(DmaMap, size), 24);
const_assert_eq!(size_of::<DmaUnmap>(), 24);
const_assert_eq!(std::mem::offset_of!(DmaUnmap, address), 8);
const_assert_eq!(size_of::<DeviceInfo>(), 16);
const_assert_eq!(size_of::<RegionInfo>(), 32);
const_assert_eq!(
    size_of::<RegionInfo>(),
    size_of::<linux::vfio_region_info>()
);
const_assert_eq!(std::mem::offset_of!(RegionInfo, size), 16);
const_assert_eq!(std::mem::offset_of!(RegionInfo, offset), 24);
const_assert_eq!(
    size_of::<CapHeader>(),
    size_of::<linux::vfio_info_cap_header>()
);
const_assert_eq!(
    size_of::<CapHeader>() + size_of::<CapType>(),
    size_of::<linux::vfio_region_info_cap_type>()
);
const_assert_eq!(size_of::<IoFdsInfo>(), 16);
const_assert_eq!(size_of::<IoFd>(), 40);
const_assert_eq!(std::mem::offset_of!(IoFd, fd_index), 16);
const_assert_eq!(std::mem::offset_of!(IoFd, datamatch), 32);
const_assert_eq!(size_of::<IrqInfo>(), size_of::<linux::vfio_irq_info>());
const_assert_eq!(size_of::<IrqSet>(), 20);
const_assert_eq!(size_of::<IrqSet>(), size_of::<linux::vfio_irq_set>());
const_assert_eq!(size_of::<RegionAccess>(), 16);
const_assert_eq!(std::mem::offset_of!(RegionAccess, region), 8);

/// Reads a `T` from the start of `bytes`: `None` if they are too few.
pub fn read<T: FromBytes>(bytes: &[u8]) -> Option<T> {
    T::read_from_prefix(bytes).ok().map(|(v, _)| v)
}

/// The capabilities one end announces in `VERSION`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Caps {
    /// Most file descriptors it takes in one message.
    pub max_msg_fds: usize,
    /// Largest read or write count it takes.
    pub max_data_xfer_size: usize,
    /// [`PROCESS_MEMORY`].
    pub process_memory: bool,
}

impl Default for Caps {
    /// The protocol's defaults for an end that names nothing.
    fn default() -> Caps {
        Caps {
            max_msg_fds: 1,
            max_data_xfer_size: MAX_DATA_XFER,
            process_memory: false,
        }
    }
}

impl Caps {
    /// What this crate's ends take, with `process_memory` as given.
    pub fn ours(process_memory: bool) -> Caps {
        Caps {
            max_msg_fds: MAX_FDS,
            max_data_xfer_size: MAX_DATA_XFER,
            process_memory,
        }
    }

    /// The JSON of `VERSION`'s data, without its NUL.
    pub fn to_json(&self) -> String {
        let mut caps = serde_json::json!({
            "max_msg_fds": self.max_msg_fds,
            "max_data_xfer_size": self.max_data_xfer_size,
            "pgsizes": 4096,
        });
        if self.process_memory {
            caps[PROCESS_MEMORY] = serde_json::Value::Bool(true);
        }
        serde_json::json!({ "capabilities": caps }).to_string()
    }

    /// Parses `VERSION`'s data (NUL-terminated JSON, or nothing). Names it
    /// does not know are ignored, as the protocol allows; a known name of
    /// the wrong type is an error.
    pub fn parse(data: &[u8]) -> Result<Caps, String> {
        let mut caps = Caps::default();
        if data.is_empty() {
            return Ok(caps);
        }
        let text = match data.split_last() {
            Some((0, text)) => text,
            _ => return Err("version data is not NUL-terminated".into()),
        };
        let v: serde_json::Value =
            serde_json::from_slice(text).map_err(|e| format!("version data: {e}"))?;
        let Some(c) = v.get("capabilities") else {
            return Ok(caps);
        };
        let c = c.as_object().ok_or("capabilities is not an object")?;
        let number = |name: &str| -> Result<Option<usize>, String> {
            c.get(name)
                .map(|n| {
                    n.as_u64()
                        .and_then(|n| usize::try_from(n).ok())
                        .ok_or(format!("{name} is not a number"))
                })
                .transpose()
        };
        if let Some(n) = number("max_msg_fds")? {
            caps.max_msg_fds = n;
        }
        if let Some(n) = number("max_data_xfer_size")? {
            caps.max_data_xfer_size = n;
        }
        if let Some(b) = c.get(PROCESS_MEMORY) {
            caps.process_memory = b
                .as_bool()
                .ok_or(format!("{PROCESS_MEMORY} is not a boolean"))?;
        }
        Ok(caps)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_header_reads_back_as_it_was_written() {
        let h = Header::command(7, Command::RegionWrite, 40);
        let bytes = h.as_bytes();
        assert_eq!(bytes[..2], 7u16.to_ne_bytes());
        assert_eq!(bytes[2..4], 10u16.to_ne_bytes());
        assert_eq!(bytes[4..8], 40u32.to_ne_bytes());
        assert_eq!(read::<Header>(bytes), Some(h));
        assert_eq!(read::<Header>(&bytes[..15]), None);
        let r = h.error_reply(22);
        assert_eq!((r.kind(), r.error, r.id), (flags::REPLY, 22, 7));
        assert_ne!(r.flags & flags::ERROR, 0);
    }

    #[test]
    fn capabilities_round_trip_and_bad_ones_are_refused() {
        let ours = Caps::ours(true);
        let mut data = ours.to_json().into_bytes();
        data.push(0);
        assert_eq!(Caps::parse(&data), Ok(ours));
        assert_eq!(Caps::parse(b""), Ok(Caps::default()));
        assert_eq!(Caps::parse(b"{}\0"), Ok(Caps::default()));
        let unknown = b"{\"capabilities\":{\"twin_socket\":{\"supported\":false}}}\0";
        assert_eq!(Caps::parse(unknown), Ok(Caps::default()));
        for bad in [
            &b"{}"[..],
            b"{\0",
            b"{\"capabilities\":3}\0",
            b"{\"capabilities\":{\"max_msg_fds\":-1}}\0",
            b"{\"capabilities\":{\"rnic_process_memory\":1}}\0",
            b"\xff\0",
        ] {
            assert!(Caps::parse(bad).is_err(), "{bad:?}");
        }
    }
}

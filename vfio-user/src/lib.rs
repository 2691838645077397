//! vfio-user for rnic: the protocol for a PCI device emulated in another
//! process (QEMU's `docs/interop/vfio-user.rst`), both ends, and
//! [`VfioUserHal`], the platform that reaches such a device (rnicd) for
//! rnic's drivers, beside the kernel VFIO backend and the in-process
//! model.
//!
//! - [`msg`]: the messages, as typed views over bytes.
//! - [`client`] and [`server`]: the two ends of a connection; neither
//!   trusts the other's messages.
//! - [`sock`]: messages with descriptors on a unix socket.
//! - [`posted`]: doorbell writes through shared memory (a device-specific
//!   region), so that the data path sends no message.
//! - [`VfioUserHal`]: BAR 0 as region messages, doorbells through the
//!   posted-write queue, DMA memory in sealed memfds the server maps, the
//!   application's own memory reached by the server through the kernel
//!   ([`msg::PROCESS_MEMORY`]), MSI-X on eventfds.
//!
//! rust-vmm's `vfio_user` crate was this project's first choice; it was
//! left because its server trusts what a client sends (a short `VERSION`
//! panics it, a read's count is allocated unchecked, an unknown command
//! leaves its bytes unread), its client does not check the error flag of a
//! reply, and neither passes the peer's credentials or a region's
//! ioeventfds, which rnicd needs.

pub mod client;
mod fd;
mod hal;
pub mod msg;
pub mod posted;
pub mod server;
pub mod sock;

pub use hal::{OpenError, VfioUserHal, POSTED_WRITES};

/// Why a vfio-user exchange failed.
#[derive(Debug)]
pub enum Error {
    /// The socket failed.
    Io(std::io::Error),
    /// The other end broke the protocol; the connection is over.
    Protocol(String),
    /// The server refused the command with this errno.
    Refused {
        /// The command refused.
        command: msg::Command,
        /// Its errno.
        errno: i32,
    },
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Io(e) => write!(f, "vfio-user socket: {e}"),
            Error::Protocol(why) => write!(f, "vfio-user protocol: {why}"),
            Error::Refused { command, errno } => write!(
                f,
                "vfio-user {command:?} refused: {}",
                std::io::Error::from_raw_os_error(*errno)
            ),
        }
    }
}

impl std::error::Error for Error {}

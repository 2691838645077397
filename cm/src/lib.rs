//! The InfiniBand communication manager (IBA vol. 1 chapter 12) in user
//! space: what two ports' general services QPs say to set up, refuse and
//! tear down a connection, and what the RDMA connection manager (the
//! kernel's `rdma_cm`, librdmacm) puts in their private data to address
//! a connection by IP.
//!
//! Wire formats in smoltcp's manner, one file each, every one a `Repr`
//! with `parse` from bytes and `emit` into them:
//!
//! - [`mad`]: the common MAD header (IBA 13.4.3) and the CM's class;
//! - [`req`], [`rep`], [`rtu`], [`rej`], [`mra`], [`dreq`], [`drep`],
//!   [`sidr`]: the CM messages (IBA 12.6), and [`msg`], which tells them
//!   apart in a received MAD;
//! - [`cma`]: rdma_cm's header in a REQ's or SIDR REQ's private data
//!   (the kernel's `struct cma_hdr`) and the service IDs of its port
//!   spaces.
//!
//! [`manager`] is the protocol: the communication IDs' state machine
//! (IBA 12.9), with its timers, retries and duplicates, pure and
//! unit-tested with hand-built messages.
//!
//! Every field is big-endian, at the byte and bit the IBA tables give
//! (bit 0 the most significant bit of its byte). Parsing never fails on a
//! field's value, only on a buffer too short for the message: what a value
//! means, and whether to refuse it, is the connection state machine's
//! business. Emitting writes reserved bits as 0.
#![no_std]
#![deny(missing_docs)]

extern crate alloc;

pub mod cma;
pub mod drep;
pub mod dreq;
mod field;
pub mod mad;
pub mod manager;
pub mod mra;
pub mod msg;
pub mod path;
pub mod rej;
pub mod rep;
pub mod req;
pub mod rtu;
pub mod sidr;

/// Why bytes are not a message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Error {
    /// Shorter than the message.
    Truncated,
    /// Not a CM MAD: another management class, class or base version.
    NotCm,
    /// A CM method or attribute this implementation does not know.
    Unknown,
}

impl core::fmt::Display for Error {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str(match self {
            Error::Truncated => "shorter than the message",
            Error::NotCm => "not a communication management MAD",
            Error::Unknown => "an unknown CM method or attribute",
        })
    }
}

/// Bytes of a MAD: the common header and the class's data.
pub const MAD_LEN: usize = 256;
/// Bytes of the CM's data after the common MAD header.
pub const CM_DATA_LEN: usize = MAD_LEN - mad::HEADER_LEN;

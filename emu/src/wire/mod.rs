//! Wire formats of a RoCEv2 port, one file per header, in smoltcp's style.
//!
//! Each header has two levels:
//!
//! - a typed view over a byte buffer (`Packet<T: AsRef<[u8]>>`):
//!   `new_unchecked` wraps any buffer, `new_checked` also runs `check_len`,
//!   after which every getter is in bounds; setters need `T: AsMut<[u8]>`;
//! - a `Repr`, the header's meaning: `parse` validates a view and never
//!   panics, `emit` writes the header into a view of at least
//!   `buffer_len()` bytes.
//!
//! Headers in network byte order from the Ethernet frame inwards:
//! [`ethernet`] (with an optional 802.1Q tag), [`arp`], [`ipv4`], [`ipv6`]
//! (and [`ip`], what both have in common),
//! [`icmpv6`] (neighbour discovery), [`udp`], then the InfiniBand transport
//! headers RoCEv2 carries in UDP port 4791: [`bth`], [`reth`], [`aeth`],
//! [`atomic_eth`], [`atomic_ack_eth`], [`immdt`], [`ieth`], [`deth`], the
//! payload with its pad count, and the [`icrc`]. [`opcode`] says which
//! headers follow a BTH of each opcode; [`roce`] parses and emits a whole
//! transport packet (BTH to ICRC) and [`frame`] a whole Ethernet frame.

pub mod aeth;
pub mod arp;
pub mod atomic_ack_eth;
pub mod atomic_eth;
pub mod bth;
pub mod deth;
pub mod ethernet;
pub mod frame;
pub mod icmpv6;
pub mod icrc;
pub mod ieth;
pub mod immdt;
pub mod ip;
pub mod ipv4;
pub mod ipv6;
pub mod opcode;
pub mod reth;
pub mod roce;
pub mod udp;

use core::fmt;

/// Why a buffer does not hold a valid header or packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Error {
    /// The buffer is shorter than the header or the lengths it declares.
    Truncated,
    /// A field has a value the format does not allow.
    Malformed,
    /// A checksum (IPv4 header, UDP, ICMPv6) does not match.
    Checksum,
    /// The ICRC does not match.
    Icrc,
    /// A transport header version this port does not speak (BTH TVer).
    Version,
    /// A valid header of a kind this port does not handle (another
    /// ethertype, IP protocol, UDP port, BTH version or opcode).
    Unsupported,
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Error::Truncated => "truncated packet",
            Error::Malformed => "malformed packet",
            Error::Checksum => "bad checksum",
            Error::Icrc => "bad ICRC",
            Error::Version => "unsupported transport header version",
            Error::Unsupported => "unsupported packet",
        })
    }
}

impl std::error::Error for Error {}

/// The result of parsing.
pub type Result<T> = core::result::Result<T, Error>;

/// The UDP destination port of RoCEv2 (IANA).
pub const ROCE_V2_PORT: u16 = 4791;

pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([b[at], b[at + 1]])
}

pub(crate) fn be24(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([0, b[at], b[at + 1], b[at + 2]])
}

pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}

pub(crate) fn be64(b: &[u8], at: usize) -> u64 {
    let mut x = [0; 8];
    x.copy_from_slice(&b[at..at + 8]);
    u64::from_be_bytes(x)
}

pub(crate) fn put16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

pub(crate) fn put24(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 3].copy_from_slice(&v.to_be_bytes()[1..]);
}

pub(crate) fn put32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_be_bytes());
}

pub(crate) fn put64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_be_bytes());
}

/// The Internet checksum (RFC 1071) of `data`, continuing from the partial
/// sum `sum`, not yet folded or complemented.
pub(crate) fn sum16(mut sum: u32, data: &[u8]) -> u32 {
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u16::from_be_bytes([c[0], c[1]]) as u32;
        // Fold early so that any length fits.
        if sum > 0xffff_0000 {
            sum = (sum & 0xffff) + (sum >> 16);
        }
    }
    if let [last] = chunks.remainder() {
        sum += (*last as u32) << 8;
    }
    sum
}

/// Folds and complements a partial sum from [`sum16`].
pub(crate) fn fold16(mut sum: u32) -> u16 {
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn internet_checksum() {
        // RFC 1071's example: 00 01 f2 03 f4 f5 f6 f7 sums to ddf2.
        let data = [0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7];
        assert_eq!(fold16(sum16(0, &data)), !0xddf2);
        // An odd length pads with a zero byte.
        assert_eq!(fold16(sum16(0, &[0x12])), !0x1200);
    }
}

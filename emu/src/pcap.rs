//! pcap files (the classic libpcap format, LINKTYPE_ETHERNET): the writer
//! behind the capture middleware, and a reader for tests and tools.
//!
//! The writer emits microsecond time stamps in little-endian byte order,
//! which every version of Wireshark and tshark reads; the reader accepts
//! both byte orders and microsecond or nanosecond stamps.

use std::io::{self, Write};

/// `LINKTYPE_ETHERNET`: frames start at the Ethernet header, without FCS.
pub const LINKTYPE_ETHERNET: u32 = 1;
/// Largest frame a record may hold (the snap length written).
pub const SNAPLEN: u32 = 65535;

const MAGIC_USEC: u32 = 0xa1b2_c3d4;
const MAGIC_NSEC: u32 = 0xa1b2_3c4d;

/// Writes frames to a pcap stream.
#[derive(Debug)]
pub struct PcapWriter<W: Write> {
    out: W,
}

impl<W: Write> PcapWriter<W> {
    /// Writes the file header to `out`.
    pub fn new(mut out: W) -> io::Result<Self> {
        let mut h = Vec::with_capacity(24);
        h.extend_from_slice(&MAGIC_USEC.to_le_bytes());
        h.extend_from_slice(&2u16.to_le_bytes()); // version 2.4
        h.extend_from_slice(&4u16.to_le_bytes());
        h.extend_from_slice(&0i32.to_le_bytes()); // GMT offset
        h.extend_from_slice(&0u32.to_le_bytes()); // accuracy
        h.extend_from_slice(&SNAPLEN.to_le_bytes());
        h.extend_from_slice(&LINKTYPE_ETHERNET.to_le_bytes());
        out.write_all(&h)?;
        Ok(Self { out })
    }

    /// Appends `frame`, stamped `ns` nanoseconds after the epoch (the
    /// stamp is rounded down to microseconds). Frames longer than the snap
    /// length are cut, with their real length recorded.
    pub fn write(&mut self, ns: u64, frame: &[u8]) -> io::Result<()> {
        let caplen = frame.len().min(SNAPLEN as usize);
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&((ns / 1_000_000_000) as u32).to_le_bytes());
        h[4..8].copy_from_slice(&((ns / 1000 % 1_000_000) as u32).to_le_bytes());
        h[8..12].copy_from_slice(&(caplen as u32).to_le_bytes());
        h[12..16].copy_from_slice(&(frame.len() as u32).to_le_bytes());
        self.out.write_all(&h)?;
        self.out.write_all(&frame[..caplen])
    }

    /// Flushes the underlying stream.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// The underlying stream.
    pub fn into_inner(self) -> W {
        self.out
    }
}

/// One record of a pcap file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Time stamp in nanoseconds since the epoch.
    pub ns: u64,
    /// The captured bytes.
    pub frame: Vec<u8>,
    /// The frame's length on the wire (at least `frame.len()`).
    pub orig_len: usize,
}

/// Parses a whole pcap file of Ethernet frames.
pub fn read(bytes: &[u8]) -> io::Result<Vec<Record>> {
    let bad = |what: &str| io::Error::new(io::ErrorKind::InvalidData, format!("pcap: {what}"));
    if bytes.len() < 24 {
        return Err(bad("no file header"));
    }
    let magic = u32::from_le_bytes(bytes[0..4].try_into().unwrap_or_default());
    let (le, nsec) = match magic {
        MAGIC_USEC => (true, false),
        MAGIC_NSEC => (true, true),
        m if m.swap_bytes() == MAGIC_USEC => (false, false),
        m if m.swap_bytes() == MAGIC_NSEC => (false, true),
        _ => return Err(bad("not a pcap file")),
    };
    let u32_at = |at: usize| {
        let b: [u8; 4] = bytes[at..at + 4].try_into().unwrap_or_default();
        if le {
            u32::from_le_bytes(b)
        } else {
            u32::from_be_bytes(b)
        }
    };
    if u32_at(20) != LINKTYPE_ETHERNET {
        return Err(bad("link type is not Ethernet"));
    }
    let mut out = Vec::new();
    let mut at = 24;
    while at < bytes.len() {
        if bytes.len() - at < 16 {
            return Err(bad("truncated record header"));
        }
        let (sec, frac) = (u32_at(at) as u64, u32_at(at + 4) as u64);
        let (caplen, orig) = (u32_at(at + 8) as usize, u32_at(at + 12) as usize);
        at += 16;
        if bytes.len() - at < caplen {
            return Err(bad("truncated record"));
        }
        out.push(Record {
            ns: sec * 1_000_000_000 + if nsec { frac } else { frac * 1000 },
            frame: bytes[at..at + caplen].to_vec(),
            orig_len: orig.max(caplen),
        });
        at += caplen;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn write_then_read() {
        let mut w = PcapWriter::new(Vec::new()).unwrap();
        w.write(1_500_000_123_456, &[1, 2, 3]).unwrap();
        w.write(2_000_000_000, &[4; 60]).unwrap();
        let bytes = w.into_inner();
        assert_eq!(&bytes[..4], &[0xd4, 0xc3, 0xb2, 0xa1]);
        assert_eq!(bytes.len(), 24 + 16 + 3 + 16 + 60);
        let r = read(&bytes).unwrap();
        assert_eq!(r.len(), 2);
        assert_eq!(
            (r[0].ns, &r[0].frame[..]),
            (1_500_000_123_000, &[1, 2, 3][..])
        );
        assert_eq!(
            (r[1].ns, r[1].frame.len(), r[1].orig_len),
            (2_000_000_000, 60, 60)
        );
        assert!(read(&bytes[..30]).is_err());
        assert!(read(&[0; 24]).is_err());
    }
}

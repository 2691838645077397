//! What the RDMA connection manager (the kernel's `rdma_cm`, librdmacm)
//! puts in a CM exchange to address a connection by IP: the service ID of
//! a port space and port, and, at the head of a REQ's or SIDR REQ's
//! private data, a header with the two IP addresses and the source port
//! (the kernel's `struct cma_hdr`, `drivers/infiniband/core/cma.c`).

use crate::field::{be16, put16};
use crate::Error;

/// Bytes of the header.
pub const HEADER_LEN: usize = 36;
/// The header's version (`CMA_VERSION`).
pub const VERSION: u8 = 0;

/// Port spaces (`enum rdma_ucm_port_space`): which transport the port
/// numbers belong to.
pub mod port_space {
    /// IPoIB.
    pub const IPOIB: u16 = 0x0002;
    /// Connected (RC): `RDMA_PS_TCP`.
    pub const TCP: u16 = 0x0106;
    /// Datagrams (UD): `RDMA_PS_UDP`.
    pub const UDP: u16 = 0x0111;
    /// Any QP type, native IB addressing: `RDMA_PS_IB`.
    pub const IB: u16 = 0x013f;
}

/// The service ID of `port` in port space `ps` (`0x0000_0000_PPPP_pppp`
/// with `PPPP` the space).
pub const fn service_id(ps: u16, port: u16) -> u64 {
    (ps as u64) << 16 | port as u64
}

/// The port space and port a service ID names, if it is one of rdma_cm's
/// (its top 32 bits 0).
pub const fn split_service_id(sid: u64) -> Option<(u16, u16)> {
    if sid >> 32 != 0 {
        return None;
    }
    Some(((sid >> 16) as u16, sid as u16))
}

/// rdma_cm's header: who connects, to where.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CmaHdr {
    /// 4 or 6.
    pub ip_version: u8,
    /// The active side's port.
    pub src_port: u16,
    /// The active side's address: an IPv4 address in the last 4 bytes
    /// (the first 12 zero), or an IPv6 address.
    pub src_addr: [u8; 16],
    /// The passive side's.
    pub dst_addr: [u8; 16],
}

impl CmaHdr {
    /// An IPv4 header.
    pub fn v4(src: [u8; 4], src_port: u16, dst: [u8; 4]) -> CmaHdr {
        let mut s = [0; 16];
        s[12..].copy_from_slice(&src);
        let mut d = [0; 16];
        d[12..].copy_from_slice(&dst);
        CmaHdr {
            ip_version: 4,
            src_port,
            src_addr: s,
            dst_addr: d,
        }
    }

    /// Reads the header at the head of private data; `Unknown` for a
    /// version other than [`VERSION`] or an IP version other than 4 or 6.
    pub fn parse(b: &[u8]) -> Result<CmaHdr, Error> {
        if b.len() < HEADER_LEN {
            return Err(Error::Truncated);
        }
        let ip_version = b[1] >> 4;
        if b[0] != VERSION || !matches!(ip_version, 4 | 6) {
            return Err(Error::Unknown);
        }
        let mut src_addr = [0; 16];
        src_addr.copy_from_slice(&b[4..20]);
        let mut dst_addr = [0; 16];
        dst_addr.copy_from_slice(&b[20..36]);
        Ok(CmaHdr {
            ip_version,
            src_port: be16(b, 2),
            src_addr,
            dst_addr,
        })
    }

    /// Writes the header at the head of `b`.
    pub fn emit(&self, b: &mut [u8]) {
        b[0] = VERSION;
        b[1] = self.ip_version << 4;
        put16(b, 2, self.src_port);
        b[4..20].copy_from_slice(&self.src_addr);
        b[20..36].copy_from_slice(&self.dst_addr);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn service_ids_and_the_header() {
        assert_eq!(service_id(port_space::TCP, 7174), 0x0000_0000_0106_1c06);
        assert_eq!(
            split_service_id(0x0000_0000_0111_0010),
            Some((port_space::UDP, 16))
        );
        assert_eq!(split_service_id(0x0002_c903_0000_0001), None);
        let h = CmaHdr::v4([192, 0, 2, 10], 0x9abc, [192, 0, 2, 20]);
        let mut b = [0xffu8; HEADER_LEN];
        h.emit(&mut b);
        assert_eq!(&b[..4], &[0, 0x40, 0x9a, 0xbc]);
        assert_eq!(&b[16..20], &[192, 0, 2, 10]);
        assert_eq!(&b[32..36], &[192, 0, 2, 20]);
        assert_eq!(CmaHdr::parse(&b), Ok(h));
        b[1] = 0x50;
        assert_eq!(CmaHdr::parse(&b), Err(Error::Unknown));
    }
}

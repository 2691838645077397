//! The RoCEv2 invariant CRC (IBA annex A17.3.3 and the InfiniBand ICRC of
//! 7.8.1): a CRC-32 over the parts of the packet no router changes, stored
//! little-endian in the packet's last 4 bytes.
//!
//! The CRC (the IEEE 802.3 / zlib CRC-32) runs over:
//!
//! 1. 8 bytes of `0xff`, standing for the InfiniBand LRH RoCE has not;
//! 2. the IP header with the fields routers may change set to all ones:
//!    IPv4 type of service, TTL and header checksum; IPv6 traffic class,
//!    flow label and hop limit;
//! 3. the UDP header with its checksum set to `0xffff`;
//! 4. the BTH with byte 4 (FECN, BECN and the reserved bits) set to `0xff`;
//! 5. everything after the BTH up to the ICRC.
//!
//! Linux rxe computes the same (`rxe_icrc.c`); the captures in
//! `emu/tests/vectors` check it byte for byte.

use super::{bth, ipv4, ipv6, udp, Error, Result};

/// Length of the ICRC trailer.
pub const ICRC_LEN: usize = 4;

/// The ICRC of an IP datagram `ip` (from the IP header to the end of the
/// ICRC field, whose 4 bytes are not covered) carrying UDP and a BTH.
pub fn compute(ip: &[u8]) -> Result<u32> {
    let ip_len = match ip.first().map(|b| b >> 4) {
        Some(4) => ipv4::HEADER_LEN,
        Some(6) => ipv6::HEADER_LEN,
        _ => return Err(Error::Malformed),
    };
    let bth_at = ip_len + udp::HEADER_LEN;
    if ip.len() < bth_at + bth::HEADER_LEN + ICRC_LEN {
        return Err(Error::Truncated);
    }
    // The masked headers and, for a small packet, the rest after them go
    // through the CRC in one call: per call the CRC costs more than the
    // bytes of a small packet do.
    let mut masked = [0u8; SMALL];
    let n = bth_at + bth::HEADER_LEN;
    let body = ip.len() - ICRC_LEN;
    let copied = if body <= SMALL { body } else { n };
    masked[..copied].copy_from_slice(&ip[..copied]);
    if ip_len == ipv4::HEADER_LEN {
        masked[1] = 0xff; // type of service
        masked[8] = 0xff; // TTL
        masked[10] = 0xff; // header checksum
        masked[11] = 0xff;
    } else {
        masked[0] |= 0x0f; // traffic class (high nibble)
        masked[1] = 0xff; // traffic class (low nibble), flow label
        masked[2] = 0xff;
        masked[3] = 0xff;
        masked[7] = 0xff; // hop limit
    }
    masked[ip_len + 6] = 0xff; // UDP checksum
    masked[ip_len + 7] = 0xff;
    masked[bth_at + 4] = 0xff; // FECN, BECN, reserved
                               // The CRC of the 8 bytes of 0xff, continued.
    let mut h = crc32fast::Hasher::new_with_initial(LRH_CRC);
    h.update(&masked[..copied]);
    h.update(&ip[copied..body]);
    Ok(h.finalize())
}

/// Packets up to this many bytes (before the ICRC) are copied whole into
/// the masked buffer; larger ones only their headers.
const SMALL: usize = 256;
const _: () = assert!(SMALL >= ipv6::HEADER_LEN + udp::HEADER_LEN + bth::HEADER_LEN);

/// CRC-32 of the 8 bytes of `0xff` that stand for the LRH.
const LRH_CRC: u32 = 0x2144_df1c;

/// Whether the ICRC stored at the end of `ip` is right.
pub fn verify(ip: &[u8]) -> Result<bool> {
    let want = compute(ip)?;
    let at = ip.len() - ICRC_LEN;
    let got = u32::from_le_bytes([ip[at], ip[at + 1], ip[at + 2], ip[at + 3]]);
    Ok(want == got)
}

/// Computes the ICRC of `ip` and stores it in its last 4 bytes.
pub fn fill(ip: &mut [u8]) -> Result<()> {
    let c = compute(ip)?;
    let at = ip.len() - ICRC_LEN;
    ip[at..].copy_from_slice(&c.to_le_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lrh_crc_is_that_of_eight_ones_bytes() {
        assert_eq!(crc32fast::hash(&[0xff; 8]), LRH_CRC);
    }

    /// The IPv4 datagram of a READ request from the read_lat capture, ICRC
    /// `7a c7 d4 84` as rxe sent it.
    const READ_REQ: [u8; 60] = [
        0x45, 0x00, 0x00, 0x3c, 0x3d, 0x51, 0x40, 0x00, 0x40, 0x11, 0x79, 0x41, 0xc0, 0x00, 0x02,
        0x0a, 0xc0, 0x00, 0x02, 0x14, // IPv4
        0xc2, 0x11, 0x12, 0xb7, 0x00, 0x28, 0x00, 0x00, // UDP
        0x0c, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x17, 0x80, 0x18, 0x20, 0xc8, // BTH
        0x00, 0x00, 0x55, 0xa1, 0x9e, 0x42, 0xb0, 0x00, 0x00, 0x00, 0x08, 0xb7, 0x00, 0x00, 0x00,
        0x02, // RETH
        0x7a, 0xc7, 0xd4, 0x84, // ICRC
    ];

    #[test]
    fn captured_icrc() {
        assert_eq!(compute(&READ_REQ).unwrap(), 0x84d4_c77a);
        assert!(verify(&READ_REQ).unwrap());
        let mut copy = READ_REQ;
        copy[56..].fill(0);
        fill(&mut copy[..]).unwrap();
        assert_eq!(copy, READ_REQ);
    }

    #[test]
    fn masked_fields_do_not_count() {
        let mut p = READ_REQ;
        p[1] = 0x02; // ECN
        p[8] = 1; // TTL
        p[10] = 0; // header checksum
        p[26] = 0x12; // UDP checksum
        p[32] = 0xc0; // FECN, BECN
        assert!(verify(&p).unwrap());
    }

    #[test]
    fn covered_fields_count() {
        // P_Key, destination QP, PSN, the UDP source port, the RETH.
        for at in [30, 35, 39, 20, 50] {
            let mut p = READ_REQ;
            p[at] ^= 0x01;
            assert!(!verify(&p).unwrap(), "byte {at}");
        }
        assert_eq!(compute(&READ_REQ[..40]), Err(Error::Truncated));
        assert_eq!(compute(&[0x50; 60]), Err(Error::Malformed));
    }
}

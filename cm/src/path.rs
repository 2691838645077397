//! A path's 44 bytes in a REQ (its primary and alternate paths, IBA 12.6.5
//! table 106) and in a LAP.

use crate::field::{be16, be32, bits, put16, with_bits};

/// Bytes of a path.
pub const PATH_LEN: usize = 44;

/// One path of a REQ. On RoCE the LIDs are 0xFFFF (the permissive LID:
/// there are none) and the GIDs carry the IP addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PathRepr {
    /// The sender's port LID.
    pub local_lid: u16,
    /// The receiver's port LID.
    pub remote_lid: u16,
    /// The sender's port GID.
    pub local_gid: [u8; 16],
    /// The receiver's port GID.
    pub remote_gid: [u8; 16],
    /// The GRH's flow label (20 bits).
    pub flow_label: u32,
    /// The static rate (6 bits, `enum ib_rate`).
    pub packet_rate: u8,
    /// The GRH's traffic class.
    pub traffic_class: u8,
    /// The GRH's hop limit.
    pub hop_limit: u8,
    /// The service level (4 bits).
    pub sl: u8,
    /// The remote port is on the local subnet (no GRH needed on IB).
    pub subnet_local: bool,
    /// The local ACK timeout the receiver should use (5 bits,
    /// 4.096 µs · 2^n).
    pub local_ack_timeout: u8,
}

impl PathRepr {
    /// Reads a path from the first [`PATH_LEN`] bytes of `b`.
    pub(crate) fn parse(b: &[u8]) -> PathRepr {
        let mut local_gid = [0; 16];
        local_gid.copy_from_slice(&b[4..20]);
        let mut remote_gid = [0; 16];
        remote_gid.copy_from_slice(&b[20..36]);
        PathRepr {
            local_lid: be16(b, 0),
            remote_lid: be16(b, 2),
            local_gid,
            remote_gid,
            flow_label: be32(b, 36) >> 12,
            packet_rate: bits(b[39], 2, 6),
            traffic_class: b[40],
            hop_limit: b[41],
            sl: bits(b[42], 0, 4),
            subnet_local: bits(b[42], 4, 1) == 1,
            local_ack_timeout: bits(b[43], 0, 5),
        }
    }

    /// Writes the path into the first [`PATH_LEN`] bytes of `b`, which
    /// must be 0 where a bit is reserved (bits 5 to 7 of byte 43 are the
    /// enclosing message's).
    pub(crate) fn emit(&self, b: &mut [u8]) {
        put16(b, 0, self.local_lid);
        put16(b, 2, self.remote_lid);
        b[4..20].copy_from_slice(&self.local_gid);
        b[20..36].copy_from_slice(&self.remote_gid);
        let fl = (self.flow_label & 0xf_ffff) << 12;
        b[36..39].copy_from_slice(&fl.to_be_bytes()[..3]);
        b[39] = with_bits(0, 2, 6, self.packet_rate);
        b[40] = self.traffic_class;
        b[41] = self.hop_limit;
        b[42] = with_bits(with_bits(0, 0, 4, self.sl), 4, 1, self.subnet_local.into());
        b[43] = with_bits(b[43], 0, 5, self.local_ack_timeout);
    }
}

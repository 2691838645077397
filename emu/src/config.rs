//! Device configuration: limits, port addresses, execution mode.

use core::fmt;

use rnic_hw_regs::wqe::{MAX_SEND_WQE_BBS, MAX_SEND_WQE_DS, SEG_SIZE, SEND_WQE_BB};
use rnic_verbs::Mtu;

/// Where the device model does its work.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ExecMode {
    /// A register or doorbell write executes the work it triggers (commands,
    /// WQEs) synchronously in the writing thread before returning.
    Inline,
    /// Writes that trigger work are queued to a device worker, a thread
    /// shared by the process's thread-mode devices (at most half the cores,
    /// or `RNIC_EMU_WORKERS`), which the device joins when it is built and
    /// leaves when it is dropped; a thread that waits on the device
    /// ([`crate::EmuDevice::poll`], `Hal::relax`) runs it meanwhile.
    Thread,
}

/// Limits and identity of an emulated device.
///
/// The limits are reported in the `CAP_*` registers and by QUERY_DEVICE, and
/// enforced by the commands and the data path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EmuConfig {
    /// MAC address of port 1 (network byte order).
    pub mac: [u8; 6],
    /// IPv4 address of port 1: GID index 0 is the IPv4-mapped RoCEv2 GID
    /// `::ffff:a.b.c.d`.
    pub ipv4: [u8; 4],
    /// Number of QP numbers, including the reserved QPNs 0 and 1.
    pub max_qp: u32,
    /// Number of CQs.
    pub max_cq: u32,
    /// Number of MRs.
    pub max_mr: u32,
    /// Number of PDs.
    pub max_pd: u32,
    /// Number of shared receive queues; 0: none (`CAP_DEV.srq = 0`).
    pub max_srq: u32,
    /// Number of completion event queues besides EQ 0.
    pub max_eq: u32,
    /// Number of MSI-X vectors.
    pub msix_vectors: u16,
    /// Number of user contexts ALLOC_UCTX can open at once.
    pub max_uctx: u32,
    /// log2 of the largest work queue (SQ in 64-byte BBs, RQ in WQEs).
    pub log_max_wq: u8,
    /// log2 of the largest CQ in CQEs.
    pub log_max_cqe: u8,
    /// Largest scatter/gather list in one WQE.
    pub max_sge: u8,
    /// Largest inline payload in one send WQE, in bytes (a multiple of 16).
    pub max_inline: u32,
    /// Largest send WQE in 64-byte basic blocks.
    pub max_wqe_bbs: u8,
    /// log2 of the largest message.
    pub log_max_msg: u8,
    /// log2 of the largest command queue.
    pub log_max_cmdq: u8,
    /// log2 of the largest event queue.
    pub log_max_eq: u8,
    /// Number of 4 KiB doorbell pages in BAR 2.
    pub uar_pages: u32,
    /// Length of port 1's GID table (at least 2: the two default GIDs).
    pub gid_table_len: u32,
    /// Largest MR in bytes.
    pub max_mr_size: u64,
    /// Outstanding RDMA READ/atomics per QP, as requester and as responder.
    pub max_rd_atomic: u8,
    /// Active MTU of port 1.
    pub active_mtu: Mtu,
}

impl Default for EmuConfig {
    fn default() -> Self {
        Self {
            // Locally administered unicast address.
            mac: [0x02, 0x00, 0x00, 0x00, 0x00, 0x01],
            // TEST-NET-1 (RFC 5737): never a real host's address.
            ipv4: [192, 0, 2, 1],
            max_qp: 1024,
            max_cq: 1024,
            max_mr: 4096,
            max_pd: 1024,
            max_srq: 1024,
            max_eq: 64,
            msix_vectors: 16,
            max_uctx: 64,
            log_max_wq: 15,
            log_max_cqe: 16,
            max_sge: 16,
            max_inline: 256,
            max_wqe_bbs: MAX_SEND_WQE_BBS as u8,
            log_max_msg: 31,
            log_max_cmdq: 12,
            log_max_eq: 16,
            uar_pages: 64,
            gid_table_len: 16,
            max_mr_size: 1 << 40,
            max_rd_atomic: 16,
            active_mtu: Mtu::Mtu4096,
        }
    }
}

/// Object numbers are 24 bits wide: 2^24 numbers.
const MAX_OBJECTS: u32 = 1 << 24;

/// Why an [`EmuConfig`] is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConfigError(pub &'static str);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid device configuration: {}", self.0)
    }
}

impl std::error::Error for ConfigError {}

impl EmuConfig {
    /// Checks that every limit fits the register and descriptor formats.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let check = |ok: bool, what: &'static str| if ok { Ok(()) } else { Err(ConfigError(what)) };
        // Object numbers are 24 bits wide (doorbells, CQEs and QP attributes
        // carry 24-bit QPNs and CQNs; an MR key is `index << 8 | tag`). QPNs
        // run from 0 to max_qp - 1; PDNs, CQNs and MR indices from 1 to the
        // limit, which therefore stays below 2^24.
        check(
            (3..=MAX_OBJECTS).contains(&self.max_qp),
            "max_qp must be in 3..=2^24",
        )?;
        check(
            (1..MAX_OBJECTS).contains(&self.max_cq),
            "max_cq must be in 1..2^24",
        )?;
        check(
            (1..MAX_OBJECTS).contains(&self.max_mr),
            "max_mr must be in 1..2^24",
        )?;
        check(
            (1..MAX_OBJECTS).contains(&self.max_pd),
            "max_pd must be in 1..2^24",
        )?;
        check(self.max_srq < MAX_OBJECTS, "max_srq must be below 2^24")?;
        check(self.max_eq < MAX_OBJECTS, "max_eq must be below 2^24")?;
        check(self.max_uctx < MAX_OBJECTS, "max_uctx must be below 2^24")?;
        // The MSI-X table holds at most 2048 entries.
        check(
            (1..=2048).contains(&self.msix_vectors),
            "msix_vectors must be in 1..=2048",
        )?;
        // Work queue indices are 16 bits wide on the device side.
        check(self.log_max_wq <= 15, "log_max_wq must be at most 15")?;
        // CQ and EQ indices are 24 bits wide.
        check(self.log_max_cqe <= 23, "log_max_cqe must be at most 23")?;
        check(self.log_max_eq <= 23, "log_max_eq must be at most 23")?;
        check(self.log_max_cmdq <= 15, "log_max_cmdq must be at most 15")?;
        check(
            (1..=MAX_SEND_WQE_DS as u8 - 1).contains(&self.max_sge),
            "max_sge must be in 1..=31",
        )?;
        check(
            (1..=MAX_SEND_WQE_BBS as u8).contains(&self.max_wqe_bbs),
            "max_wqe_bbs must be in 1..=8",
        )?;
        check(
            self.max_inline % 16 == 0 && self.max_inline / 16 < 64,
            "max_inline must be a multiple of 16 below 1024",
        )?;
        // Control segment plus the inline header and payload must fit one WQE.
        let inline_bytes = SEG_SIZE + (4 + self.max_inline as usize).div_ceil(SEG_SIZE) * SEG_SIZE;
        check(
            inline_bytes <= self.max_wqe_bbs as usize * SEND_WQE_BB,
            "max_inline does not fit in max_wqe_bbs",
        )?;
        check(
            (1..=31).contains(&self.log_max_msg),
            "log_max_msg must be in 1..=31",
        )?;
        check(
            (1..=1 << 16).contains(&self.uar_pages),
            "uar_pages must be in 1..=65536",
        )?;
        check(
            (2..=256).contains(&self.gid_table_len),
            "gid_table_len must be in 2..=256",
        )?;
        check(self.max_rd_atomic >= 1, "max_rd_atomic must be at least 1")?;
        Ok(())
    }

    /// GID index 0: the IPv4-mapped RoCEv2 GID `::ffff:a.b.c.d`.
    pub fn ipv4_gid(&self) -> [u8; 16] {
        let mut gid = [0u8; 16];
        gid[10] = 0xff;
        gid[11] = 0xff;
        gid[12..].copy_from_slice(&self.ipv4);
        gid
    }

    /// GID index 1: the link-local RoCEv2 GID `fe80::/64` with the modified
    /// EUI-64 interface identifier derived from the MAC address.
    pub fn link_local_gid(&self) -> [u8; 16] {
        let mut gid = [0u8; 16];
        gid[0] = 0xfe;
        gid[1] = 0x80;
        gid[8..].copy_from_slice(&self.eui64());
        gid
    }

    /// Node GUID (network byte order): the MAC's modified EUI-64.
    pub fn node_guid(&self) -> [u8; 8] {
        self.eui64()
    }

    /// Largest message size in bytes.
    pub fn max_msg(&self) -> u64 {
        1 << self.log_max_msg
    }

    fn eui64(&self) -> [u8; 8] {
        let m = self.mac;
        // RFC 4291 appendix A: insert ff:fe and flip the universal/local bit.
        [m[0] ^ 0x02, m[1], m[2], 0xff, 0xfe, m[3], m[4], m[5]]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_is_valid() {
        EmuConfig::default().validate().unwrap();
    }

    #[test]
    fn gids_and_guid() {
        let c = EmuConfig {
            mac: [0x00, 0x11, 0x22, 0x33, 0x44, 0x55],
            ipv4: [10, 1, 2, 3],
            ..EmuConfig::default()
        };
        assert_eq!(
            c.ipv4_gid(),
            [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 1, 2, 3]
        );
        assert_eq!(
            c.link_local_gid(),
            [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55]
        );
        assert_eq!(
            c.node_guid(),
            [0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55]
        );
    }

    #[test]
    fn refuses_out_of_range_limits() {
        let c = EmuConfig {
            log_max_wq: 16,
            ..EmuConfig::default()
        };
        assert!(c.validate().is_err());
        let c = EmuConfig {
            max_inline: 1000,
            ..EmuConfig::default()
        };
        assert!(c.validate().is_err());
    }

    #[test]
    fn object_numbers_fit_24_bits() {
        let with = |f: fn(&mut EmuConfig, u32), v: u32| {
            let mut c = EmuConfig::default();
            f(&mut c, v);
            c.validate()
        };
        let max_qp: fn(&mut EmuConfig, u32) = |c, v| c.max_qp = v;
        let max_cq: fn(&mut EmuConfig, u32) = |c, v| c.max_cq = v;
        let max_mr: fn(&mut EmuConfig, u32) = |c, v| c.max_mr = v;
        let max_pd: fn(&mut EmuConfig, u32) = |c, v| c.max_pd = v;
        let max_srq: fn(&mut EmuConfig, u32) = |c, v| c.max_srq = v;
        // QPNs 0 ..= 2^24 - 1: 2^24 of them.
        assert!(with(max_qp, 1 << 24).is_ok());
        assert!(with(max_qp, (1 << 24) + 1).is_err());
        assert!(with(max_qp, 2).is_err());
        // Numbered from 1: at most 2^24 - 1. An MR index of 2^24 would make
        // `index << 8` wrap to key 0 | tag.
        for f in [max_cq, max_mr, max_pd] {
            assert!(with(f, (1 << 24) - 1).is_ok());
            assert!(with(f, 1 << 24).is_err());
            assert!(with(f, 0).is_err());
        }
        // No SRQs is a configuration of its own.
        assert!(with(max_srq, 0).is_ok());
        assert!(with(max_srq, (1 << 24) - 1).is_ok());
        assert!(with(max_srq, 1 << 24).is_err());
    }
}

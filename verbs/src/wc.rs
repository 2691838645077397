//! Work completions (`struct ibv_wc`).

use crate::enums::{WcOpcode, WcStatus};

/// Work completion flags (`enum ibv_wc_flags` values, plus one rnic
/// extension).
pub mod wc_flags {
    /// A GRH is present in the receive buffer (UD only).
    pub const GRH: u32 = 1 << 0;
    /// `imm_data` holds immediate data.
    pub const WITH_IMM: u32 = 1 << 1;
    /// `imm_data` holds an invalidated rkey.
    pub const WITH_INV: u32 = 1 << 3;
    /// rnic extension: the message had the solicited event bit set.
    pub const SOLICITED: u32 = 1 << 16;
}

/// A work completion (`struct ibv_wc`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WorkCompletion {
    /// The work request's ID.
    pub wr_id: u64,
    /// Outcome.
    pub status: WcStatus,
    /// What completed. Valid for successful completions; for errors it
    /// tells send from receive ([`WcOpcode::Send`] / [`WcOpcode::Recv`] at
    /// least).
    pub opcode: WcOpcode,
    /// Device-specific detail of an error (rnic's: a syndrome).
    pub vendor_err: u32,
    /// Bytes received (receive), read (RDMA READ) or 8 (atomics).
    pub byte_len: u32,
    /// Immediate data (or invalidated rkey), network byte order.
    pub imm_data: Option<[u8; 4]>,
    /// Local QP number.
    pub qp_num: u32,
    /// Source QP number (UD).
    pub src_qp: u32,
    /// [`wc_flags`] bits.
    pub flags: u32,
    /// P_Key index (UD).
    pub pkey_index: u16,
    /// Source LID (0 on RoCE).
    pub slid: u16,
    /// Service level (UD; 0 on an untagged RoCE wire).
    pub sl: u8,
}

impl Default for WorkCompletion {
    fn default() -> Self {
        Self {
            wr_id: 0,
            status: WcStatus::Success,
            opcode: WcOpcode::Send,
            vendor_err: 0,
            byte_len: 0,
            imm_data: None,
            qp_num: 0,
            src_qp: 0,
            flags: 0,
            pkey_index: 0,
            slid: 0,
            sl: 0,
        }
    }
}

impl WorkCompletion {
    /// The rkey a SEND with invalidate invalidated
    /// (`ibv_wc.invalidated_rkey`), with [`wc_flags::WITH_INV`].
    pub fn invalidated_rkey(&self) -> Option<u32> {
        self.imm_data
            .filter(|_| self.flags & wc_flags::WITH_INV != 0)
            .map(u32::from_be_bytes)
    }
}

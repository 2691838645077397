//! Work completions (`struct ibv_wc`).

use rnic_hw_regs::cqe::{Cqe, Syndrome};
use rnic_verbs::{WcOpcode, WcStatus};

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
    /// Device-specific detail of an error: a [`Syndrome`] value.
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

    /// The decoded vendor error.
    pub fn syndrome(&self) -> Option<Syndrome> {
        Syndrome::from_raw(self.vendor_err)
    }

    /// Decodes a CQE. A status or (successful) opcode value the driver does
    /// not know becomes [`WcStatus::GeneralErr`].
    pub(crate) fn from_cqe(cqe: &Cqe) -> Self {
        let f = cqe.flags;
        let mut status = WcStatus::from_raw(cqe.status).unwrap_or_else(|| {
            log::warn!("CQE with unknown status {}", cqe.status);
            WcStatus::GeneralErr
        });
        let opcode = WcOpcode::from_raw(cqe.opcode).unwrap_or_else(|| {
            if status == WcStatus::Success {
                log::warn!("successful CQE with unknown opcode {}", cqe.opcode);
                status = WcStatus::GeneralErr;
            }
            if f.is_send() {
                WcOpcode::Send
            } else {
                WcOpcode::Recv
            }
        });
        let flags = (if f.grh() { wc_flags::GRH } else { 0 })
            | (if f.with_imm() { wc_flags::WITH_IMM } else { 0 })
            | (if f.with_inv() { wc_flags::WITH_INV } else { 0 })
            | (if f.solicited() {
                wc_flags::SOLICITED
            } else {
                0
            });
        Self {
            wr_id: cqe.wr_id.to_ne(),
            status,
            opcode,
            vendor_err: cqe.vendor_err.to_ne(),
            byte_len: cqe.byte_len.to_ne(),
            imm_data: (f.with_imm() || f.with_inv()).then_some(cqe.imm),
            qp_num: cqe.qpn.to_ne() & 0xff_ffff,
            src_qp: cqe.src_qp.to_ne() & 0xff_ffff,
            flags,
            pkey_index: cqe.pkey_index.to_ne(),
            slid: cqe.slid.to_ne(),
            sl: cqe.sl,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rnic_hw_regs::cqe::CqeFlags;

    #[test]
    fn unknown_statuses_and_opcodes_are_general_errors() {
        let cqe = Cqe {
            status: 99,
            opcode: WcOpcode::Recv.raw(),
            ..Cqe::default()
        };
        assert_eq!(WorkCompletion::from_cqe(&cqe).status, WcStatus::GeneralErr);
        let cqe = Cqe {
            status: WcStatus::Success.raw(),
            opcode: 77,
            flags: CqeFlags::new().with_is_send(true),
            ..Cqe::default()
        };
        let wc = WorkCompletion::from_cqe(&cqe);
        assert_eq!(
            (wc.status, wc.opcode),
            (WcStatus::GeneralErr, WcOpcode::Send)
        );
    }
}

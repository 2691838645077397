//! Work completions from rnic's CQEs.

use rnic_hw_regs::cqe::{Cqe, Syndrome};
use rnic_verbs::{wc_flags, WcOpcode, WcStatus, WorkCompletion};

/// The rnic syndrome of a completion's `vendor_err`.
pub fn syndrome(wc: &WorkCompletion) -> Option<Syndrome> {
    Syndrome::from_raw(wc.vendor_err)
}

/// Decodes a CQE. A status or (successful) opcode value the driver does
/// not know becomes [`WcStatus::GeneralErr`].
pub(crate) fn from_cqe(cqe: &Cqe) -> WorkCompletion {
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
    WorkCompletion {
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
        assert_eq!(from_cqe(&cqe).status, WcStatus::GeneralErr);
        let cqe = Cqe {
            status: WcStatus::Success.raw(),
            opcode: 77,
            flags: CqeFlags::new().with_is_send(true),
            ..Cqe::default()
        };
        let wc = from_cqe(&cqe);
        assert_eq!(
            (wc.status, wc.opcode),
            (WcStatus::GeneralErr, WcOpcode::Send)
        );
    }
}

//! The Unreliable Connected responder (IBA 9.8.3).
//!
//! A UC QP is connected like an RC one and takes SEND and RDMA WRITE
//! (with immediate) requests, checked and executed by the RC responder's
//! [`execute`](super::responder::execute), but nothing is acknowledged and
//! nothing is retransmitted. A packet whose PSN is not the expected one
//! means packets were lost: the message in progress is abandoned (a
//! receive WQE it was filling stays posted and takes the next message),
//! and packets are dropped until one starts a message (FIRST or ONLY),
//! whatever its PSN, which resynchronizes the expected PSN. A request the
//! RC responder would refuse with a NAK (no receive WQE, an rkey or access
//! violation, an opcode out of sequence, a packet of the wrong length) is
//! dropped with the rest of its message, silently as UC has no NAKs; only
//! what a receive completion reports (a message larger than the receive
//! buffer, a receive SGE that faults) or what cannot be reported (memory
//! faults) moves the QP to the error state, as for RC. Every dropped packet
//! is counted in `UC_DROPPED`.

use rnic_hw_regs::counters::counter;

use super::responder::{self, Refuse};
use crate::objects::Qp;
use crate::port;
use crate::qp;
use crate::state::Dev;
use crate::wire::bth::psn_diff;
use crate::wire::opcode::OpcodeInfo;
use crate::wire::roce::RoceRepr;

/// A UC request packet for QP `qpn` (in RTR or RTS, from its peer).
pub(crate) fn on_request(
    qp: &mut Qp,
    dev: &mut Dev,
    info: &OpcodeInfo,
    roce: &RoceRepr,
    payload: &[u8],
) {
    let qpn = qp.qpn;
    let psn = roce.bth.psn;
    let resp = &mut qp.resp;
    if resp.drop_msg || psn_diff(psn, resp.epsn) != 0 {
        if !info.pos.starts() {
            log::trace!("QP {qpn}: UC {} at PSN {psn:#x} dropped", info.name);
            resp.drop_msg = true;
            resp.msg = None;
            port::count(qp, dev, counter::UC_DROPPED);
            return;
        }
        // A new message: what was in progress is abandoned.
        resp.drop_msg = false;
        resp.msg = None;
        resp.epsn = psn;
    }
    match responder::execute(qp, dev, info, roce, payload) {
        Ok(()) => {}
        // A receive CQE reported it, or nothing can: the QP fails.
        Err(Refuse::Nak(_, event)) if reported_or_fatal(&event) => qp::to_err(qp, dev, event),
        Err(_) => {
            log::debug!(
                "QP {qpn}: UC {} at PSN {psn:#x} refused: message dropped",
                info.name
            );
            qp.resp.drop_msg = true;
            qp.resp.msg = None;
            port::count(qp, dev, counter::UC_DROPPED);
        }
    }
}

/// Whether a refusal is one UC does not just drop: a receive completion
/// already reported it (no event), or the QP is broken (`QpFatal`).
fn reported_or_fatal(
    event: &Option<(rnic_hw_regs::eqe::EventType, rnic_hw_regs::cqe::Syndrome)>,
) -> bool {
    match event {
        None => true,
        Some((e, _)) => *e == rnic_hw_regs::eqe::EventType::QpFatal,
    }
}

//! Port 1: delivers requests to their destination QP and returns the
//! response. This version loops back to QPs of the same device; a RoCEv2
//! wire (packets, PSNs, ACK/NAK, retransmission) would sit here, between
//! the requester and the responder.

use crate::op::{Request, Response};
use crate::responder;
use crate::state::State;

/// Delivers `req` to QP `req.dest_qpn` of this device.
pub(crate) fn deliver(st: &mut State, req: &Request<'_>) -> Response {
    // A destination HCA silently drops requests for a QP that does not
    // exist or does not receive: the requester sees no response at all.
    let receiving = st
        .objs
        .qps
        .get(req.dest_qpn)
        .is_some_and(|qp| qp.receiving());
    if !receiving {
        log::debug!(
            "QP {} -> QP {}: destination missing or not receiving",
            req.src_qpn,
            req.dest_qpn
        );
        return Response::Timeout;
    }
    responder::execute(st, req)
}

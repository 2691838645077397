//! When a QP takes work requests: the posting rules of the QP states
//! (IBA vol. 1 §10.8.2 and its state descriptions in §10.3.1, as
//! libibverbs reports them), the same for every device.

use alloc::format;

use crate::{Error, QpState, Result};

/// Whether QP `qpn` in `state` takes send work requests: in RTS, and in
/// SQD (they wait for RTS); in SQE and ERR too, where the device completes
/// them with `WR_FLUSH_ERR`. Before RTS (RESET, INIT, RTR) a post is an
/// immediate error, `EINVAL`.
pub fn check_post_send(qpn: u32, state: QpState) -> Result<()> {
    match state {
        QpState::Rts | QpState::Sqd | QpState::Sqe | QpState::Err => Ok(()),
        s => Err(Error::invalid(format!(
            "QP {qpn}: cannot post sends in state {s:?}"
        ))),
    }
}

/// Whether QP `qpn` in `state` takes receive work requests: in every
/// state but RESET (from INIT a receive queue fills before the QP is
/// connected; in ERR the device flushes them). In RESET, `EINVAL`.
pub fn check_post_recv(qpn: u32, state: QpState) -> Result<()> {
    match state {
        QpState::Reset => Err(Error::invalid(format!(
            "QP {qpn}: cannot post receives in state Reset"
        ))),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ErrorKind;

    #[test]
    fn sends_wait_for_rts_and_receives_for_init() {
        use QpState::*;
        for (state, send, recv) in [
            (Reset, false, false),
            (Init, false, true),
            (Rtr, false, true),
            (Rts, true, true),
            (Sqd, true, true),
            (Sqe, true, true),
            (Err, true, true),
        ] {
            assert_eq!(check_post_send(1, state).is_ok(), send, "{state:?}");
            assert_eq!(check_post_recv(1, state).is_ok(), recv, "{state:?}");
        }
        let e = check_post_send(5, Init).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidArgument);
        assert_eq!(e.message(), "QP 5: cannot post sends in state Init");
    }
}

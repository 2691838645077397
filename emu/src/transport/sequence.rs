//! Where a request falls in its RC QP's sequence, before the responder
//! executes it (IBA vol. 1 9.7.5.1): by PSN (the expected one, a
//! duplicate, or past a gap, which one PSN-sequence NAK answers), and by
//! opcode (a FIRST or ONLY outside a message, a MIDDLE or LAST inside the
//! one in progress, each packet a full MTU but the last). Functions of the
//! QP's responder state and the packet alone, tested here with hand-built
//! packets.

use super::{InMsg, RespState};
use crate::wire::bth::psn_diff;
use crate::wire::opcode::{Op, OpcodeInfo, Position};

/// Where a request's PSN falls.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Arrival {
    /// The expected PSN: executed.
    Expected,
    /// Before it: the requester sent it again ([`super::replay`]).
    Duplicate,
    /// Past it: packets were lost. The first packet of a gap is answered
    /// with a PSN-sequence NAK naming the expected PSN (`nak`), the rest of
    /// it dropped silently.
    Gap { nak: bool },
}

/// Where the request at `psn` falls for responder state `resp`, noting a
/// NAK sent for a gap (cleared once a request executes).
pub(crate) fn arrival(resp: &mut RespState, psn: u32) -> Arrival {
    match psn_diff(psn, resp.epsn) {
        0 => Arrival::Expected,
        d if d < 0 => Arrival::Duplicate,
        _ => {
            let nak = !resp.nak_sent;
            resp.nak_sent = true;
            Arrival::Gap { nak }
        }
    }
}

/// Whether a packet of `info` with `payload_len` bytes follows the
/// message in progress `msg` at a path MTU of `mtu` bytes: its opcode in
/// sequence, its length a full MTU but in the last packet (else an
/// invalid request).
pub(crate) fn in_sequence(
    msg: Option<InMsg>,
    info: &OpcodeInfo,
    payload_len: usize,
    mtu: usize,
) -> bool {
    let in_seq = match (msg, info.op) {
        (None, Op::Send | Op::Write) => info.pos.starts(),
        (Some(InMsg::Send { .. }), Op::Send) | (Some(InMsg::Write { .. }), Op::Write) => {
            !info.pos.starts()
        }
        (None, Op::ReadRequest | Op::CompareSwap | Op::FetchAdd) => true,
        _ => false,
    };
    let len_ok = match info.pos {
        Position::First | Position::Middle => payload_len == mtu,
        Position::Last => (1..=mtu).contains(&payload_len),
        Position::Only => payload_len <= mtu,
    };
    in_seq && len_ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::bth::PSN_MASK;
    use crate::wire::opcode::{self, info};

    fn op(code: u8) -> &'static OpcodeInfo {
        info(code).expect("an opcode of the table")
    }

    #[test]
    fn one_nak_per_gap_and_duplicates_across_the_wrap() {
        let mut r = RespState {
            epsn: 10,
            ..RespState::default()
        };
        assert_eq!(arrival(&mut r, 10), Arrival::Expected);
        assert_eq!(arrival(&mut r, 9), Arrival::Duplicate);
        assert_eq!(arrival(&mut r, 12), Arrival::Gap { nak: true });
        assert_eq!(
            arrival(&mut r, 13),
            Arrival::Gap { nak: false },
            "one NAK per gap"
        );
        r.nak_sent = false;
        assert_eq!(
            arrival(&mut r, 13),
            Arrival::Gap { nak: true },
            "after progress, a new gap"
        );
        let mut w = RespState::default();
        assert_eq!(
            arrival(&mut w, PSN_MASK),
            Arrival::Duplicate,
            "0xffffff is before 0"
        );
        assert_eq!(arrival(&mut w, 1 << 22), Arrival::Gap { nak: true });
    }

    #[test]
    fn opcodes_follow_the_message_in_progress() {
        let send = Some(InMsg::Send { got: 1024 });
        let write = Some(InMsg::Write {
            va: 0,
            rkey: 1,
            dma_len: 4096,
            got: 1024,
        });
        let cases = [
            (None, opcode::RC_SEND_FIRST, 1024, true),
            (None, opcode::RC_SEND_MIDDLE, 1024, false),
            (None, opcode::RC_RDMA_WRITE_LAST, 10, false),
            (send, opcode::RC_SEND_MIDDLE, 1024, true),
            (send, opcode::RC_SEND_LAST, 10, true),
            (send, opcode::RC_SEND_FIRST, 1024, false),
            (send, opcode::RC_RDMA_WRITE_MIDDLE, 1024, false),
            (send, opcode::RC_RDMA_READ_REQUEST, 0, false),
            (write, opcode::RC_RDMA_WRITE_LAST, 1, true),
            (None, opcode::RC_RDMA_READ_REQUEST, 0, true),
            (None, opcode::RC_FETCH_ADD, 0, true),
        ];
        for (msg, code, len, ok) in cases {
            assert_eq!(
                in_sequence(msg, op(code), len, 1024),
                ok,
                "{:?} after {msg:?}",
                op(code).name
            );
        }
    }

    #[test]
    fn every_packet_but_the_last_is_a_full_mtu() {
        let send = Some(InMsg::Send { got: 1024 });
        assert!(!in_sequence(None, op(opcode::RC_SEND_FIRST), 1000, 1024));
        assert!(!in_sequence(send, op(opcode::RC_SEND_MIDDLE), 1025, 1024));
        assert!(
            !in_sequence(send, op(opcode::RC_SEND_LAST), 0, 1024),
            "an empty LAST"
        );
        assert!(!in_sequence(send, op(opcode::RC_SEND_LAST), 1025, 1024));
        assert!(
            in_sequence(None, op(opcode::RC_SEND_ONLY), 0, 1024),
            "an empty ONLY"
        );
        assert!(!in_sequence(None, op(opcode::RC_SEND_ONLY), 1025, 1024));
    }
}

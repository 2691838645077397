//! How a responder answers a duplicate request (a request before its
//! expected PSN: the requester lost an answer and sent it again), IBA vol.
//! 1 9.7.5.1.2, as Linux rxe's `duplicate_request` does. A function of the
//! QP's responder state and the packet alone, so that each rule is tested
//! here with hand-built packets.

use super::responder::Out;
use super::{packets, RdAtomic, ReadJob, RespState};
use crate::wire::bth::{psn_add, psn_diff, PSN_MASK};
use crate::wire::opcode::Op;
use crate::wire::roce::RoceRepr;

/// The answer to a duplicate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Again {
    /// Queue this answer (an ACK, an atomic's held result) in PSN order.
    Answer(Out),
    /// Answer the READ held at PSNs `first_psn..=last_psn` again with
    /// `job`, once its key still reaches the memory; what was queued for
    /// that READ goes.
    Read {
        job: ReadJob,
        first_psn: u32,
        last_psn: u32,
    },
    /// Drop it, for this reason.
    Drop(&'static str),
}

/// The answer to the duplicate `roce` of opcode class `op`, for a QP at
/// path MTU `mtu` bytes whose responder state is `resp`.
pub(crate) fn again(resp: &RespState, mtu: u32, op: Op, roce: &RoceRepr) -> Again {
    let psn = roce.bth.psn;
    let msn = resp.msn;
    match op {
        // The ACK was lost: acknowledge again what was executed, up to the
        // last SEND, WRITE or atomic (C9-105), never a READ's PSN, which
        // would complete a READ whose response the requester still lacks.
        Op::Send | Op::Write => Again::Answer(Out::Ack {
            psn: psn_add(resp.ack_psn, PSN_MASK),
            msn,
        }),
        Op::ReadRequest => {
            let Some(reth) = roce.reth else {
                return Again::Drop("a READ without a RETH");
            };
            let (va, len) = (reth.va, u64::from(reth.dma_len));
            // A READ held, at one of whose PSNs this asks for a part of
            // it, under its key (rxe's `find_resource` and its checks).
            let held = resp.resources.iter().find_map(|r| match *r {
                RdAtomic::Read {
                    first_psn,
                    last_psn,
                    va: rva,
                    len: rlen,
                    rkey,
                } if psn_diff(psn, first_psn) >= 0 && psn_diff(psn, last_psn) <= 0 => {
                    Some((first_psn, last_psn, rva, rlen, rkey))
                }
                _ => None,
            });
            let Some((first_psn, last_psn, rva, rlen, rkey)) = held else {
                return Again::Drop("no READ held at its PSN");
            };
            if reth.rkey != rkey {
                return Again::Drop("another R_Key than its READ's");
            }
            let inside = va >= rva && va.checked_add(len).is_some_and(|end| end <= rva + rlen);
            if !inside {
                return Again::Drop("not a part of its READ");
            }
            let n = packets(len, mtu);
            if psn_diff(psn_add(psn, n - 1), last_psn) > 0 {
                return Again::Drop("its answer would run past its READ's PSNs");
            }
            // From the middle, the answer goes on as the READ's own did
            // (MIDDLE and LAST): a requester takes FIRST only at the READ's
            // first PSN.
            let job = ReadJob {
                psn,
                left: n,
                first: psn == first_psn,
                va,
                rkey,
                bytes: len,
                msn,
            };
            Again::Read {
                job,
                first_psn,
                last_psn,
            }
        }
        Op::CompareSwap | Op::FetchAdd => resp
            .resources
            .iter()
            .find_map(|r| match *r {
                RdAtomic::Atomic { psn: p, orig } if p == psn => {
                    Some(Again::Answer(Out::AtomicAck { psn, msn, orig }))
                }
                _ => None,
            })
            .unwrap_or(Again::Drop("no atomic held at its PSN")),
        _ => Again::Drop("no request"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::bth::BthRepr;
    use crate::wire::reth::RethRepr;

    /// A responder that executed a WRITE at 30, a 3-packet READ at 31..=33
    /// (3 KiB at 0x1000 under key 7) and an atomic at 34.
    fn state() -> RespState {
        let mut r = RespState {
            epsn: 35,
            msn: 3,
            ack_psn: 35,
            ..RespState::default()
        };
        r.resources.push_back(RdAtomic::Read {
            first_psn: 31,
            last_psn: 33,
            va: 0x1000,
            len: 3072,
            rkey: 7,
        });
        r.resources
            .push_back(RdAtomic::Atomic { psn: 34, orig: 99 });
        r
    }

    fn read(psn: u32, va: u64, len: u32, rkey: u32) -> RoceRepr {
        RoceRepr {
            bth: BthRepr {
                psn,
                ..BthRepr::default()
            },
            reth: Some(RethRepr {
                va,
                rkey,
                dma_len: len,
            }),
            ..RoceRepr::default()
        }
    }

    fn at(psn: u32) -> RoceRepr {
        RoceRepr {
            bth: BthRepr {
                psn,
                ..BthRepr::default()
            },
            ..RoceRepr::default()
        }
    }

    #[test]
    fn a_duplicate_write_is_acked_at_the_last_write_not_a_read() {
        // WRITE at 30, then a READ at 31: ack_psn stays 31.
        let mut r = state();
        r.ack_psn = 31;
        r.epsn = 34;
        assert_eq!(
            again(&r, 1024, Op::Write, &at(30)),
            Again::Answer(Out::Ack { psn: 30, msn: 3 })
        );
        assert_eq!(
            again(&r, 1024, Op::Send, &at(30)),
            Again::Answer(Out::Ack { psn: 30, msn: 3 })
        );
    }

    #[test]
    fn a_read_again_from_its_first_psn_or_its_middle() {
        let r = state();
        let Again::Read {
            job,
            first_psn,
            last_psn,
        } = again(&r, 1024, Op::ReadRequest, &read(31, 0x1000, 3072, 7))
        else {
            panic!("answered")
        };
        assert_eq!(
            (job.psn, job.left, job.first, first_psn, last_psn),
            (31, 3, true, 31, 33)
        );
        let Again::Read { job, .. } = again(&r, 1024, Op::ReadRequest, &read(32, 0x1400, 2048, 7))
        else {
            panic!("answered")
        };
        assert_eq!(
            (job.psn, job.left, job.first, job.va, job.bytes),
            (32, 2, false, 0x1400, 2048),
            "from the middle: MIDDLE, LAST"
        );
    }

    #[test]
    fn a_read_that_is_no_part_of_one_held_is_dropped() {
        let r = state();
        for (pkt, why) in [
            (read(32, 0x1400, 2048, 8), "another R_Key than its READ's"),
            (read(32, 0x1400, 4096, 7), "not a part of its READ"),
            (read(31, 0x0800, 1024, 7), "not a part of its READ"),
            (
                read(33, 0x1000, 2048, 7),
                "its answer would run past its READ's PSNs",
            ),
            (read(30, 0x1000, 1024, 7), "no READ held at its PSN"),
            (at(32), "a READ without a RETH"),
        ] {
            assert_eq!(again(&r, 1024, Op::ReadRequest, &pkt), Again::Drop(why));
        }
    }

    #[test]
    fn an_atomic_is_answered_from_the_one_held_never_again() {
        let r = state();
        assert_eq!(
            again(&r, 1024, Op::FetchAdd, &at(34)),
            Again::Answer(Out::AtomicAck {
                psn: 34,
                msn: 3,
                orig: 99
            })
        );
        assert_eq!(
            again(&r, 1024, Op::CompareSwap, &at(33)),
            Again::Drop("no atomic held at its PSN")
        );
    }
}

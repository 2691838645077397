//! Queue sizing: from requested capacities to ring sizes and the QP's
//! memory layout.

use alloc::format;
use rnic_hw_regs::uar::QpDbRec;
use rnic_hw_regs::wqe::{
    wqe_bbs, MAX_LOG_RQ_STRIDE, MAX_SEND_WQE_BBS, MIN_LOG_RQ_STRIDE, SEG_SIZE, SEND_WQE_BB,
};
use rnic_hw_regs::PAGE_SIZE;

use crate::dma::align_up;
use crate::error::{Error, Result};
use crate::wqe::{SendLimits, INLINE_HDR};
use rnic_verbs::QpCap;

/// The device's queue limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QueueLimits {
    pub(crate) log_max_wq: u8,
    /// Work requests per queue; 0 if the device does not say, leaving the
    /// queue size limit (`log_max_wq`).
    pub(crate) max_qp_wr: u32,
    pub(crate) max_sge: u32,
    pub(crate) max_inline: u32,
    pub(crate) max_wqe_bbs: u32,
    /// For a UD QP, whose send WQEs carry a datagram segment.
    pub(crate) ud: bool,
    /// For a QP on an SRQ, which has no receive queue (its receive
    /// capacities are ignored).
    pub(crate) srq: bool,
}

/// Ring sizes and memory layout of a QP: the send queue at offset 0, the
/// receive queue at the next page, the doorbell record after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct QpLayout {
    /// log2 of the send queue size in BBs.
    pub(crate) log_sq_bbs: u32,
    /// Send requests the send queue holds with every WQE of worst-case size.
    pub(crate) max_send_wr: u32,
    pub(crate) sq: SendLimits,
    /// The QP has a receive queue (it is not on an SRQ).
    pub(crate) rq: bool,
    pub(crate) log_rq_wqes: u32,
    pub(crate) log_rq_stride: u32,
    pub(crate) max_recv_sge: u32,
    pub(crate) rq_offset: usize,
    pub(crate) dbrec_offset: usize,
    pub(crate) len: usize,
}

/// The ring indices the device sees are 16 bits wide.
const LOG_MAX_RING: u8 = 15;

impl QpLayout {
    pub(crate) fn new(cap: &QpCap, lim: &QueueLimits) -> Result<Self> {
        let over = |what: &str, v: u32, max: u32| {
            Error::invalid(format!("{what} {v} exceeds the device limit of {max}"))
        };
        if cap.max_send_sge > lim.max_sge {
            return Err(over("max_send_sge", cap.max_send_sge, lim.max_sge));
        }
        if cap.max_recv_sge > lim.max_sge && !lim.srq {
            return Err(over("max_recv_sge", cap.max_recv_sge, lim.max_sge));
        }
        if cap.max_inline_data > lim.max_inline {
            return Err(over("max_inline_data", cap.max_inline_data, lim.max_inline));
        }
        if lim.max_qp_wr != 0 && cap.max_send_wr > lim.max_qp_wr {
            return Err(over("max_send_wr", cap.max_send_wr, lim.max_qp_wr));
        }
        if lim.max_qp_wr != 0 && cap.max_recv_wr > lim.max_qp_wr && !lim.srq {
            return Err(over("max_recv_wr", cap.max_recv_wr, lim.max_qp_wr));
        }
        let log_max_wq = u32::from(lim.log_max_wq.min(LOG_MAX_RING));

        // Sizes are computed in u64, where no sum, product or power of two
        // of the u32 inputs overflows, and checked against the limits
        // before they are narrowed.

        // Worst-case send WQE: control + remote address (RC) or datagram
        // segment (UD) + the largest gather list, an atomic (RC: 4
        // segments), or the largest inline block.
        let fixed: u64 = if lim.ud { 4 } else { 2 };
        let seg = SEG_SIZE as u64;
        let inline_ds = if cap.max_inline_data > 0 {
            fixed + (INLINE_HDR as u64 + u64::from(cap.max_inline_data)).div_ceil(seg)
        } else {
            0
        };
        let worst_ds = (fixed + u64::from(cap.max_send_sge))
            .max(fixed.max(4))
            .max(inline_ds);
        let worst_bbs = wqe_bbs(usize::try_from(worst_ds).unwrap_or(usize::MAX));
        let max_bbs = usize::try_from(lim.max_wqe_bbs)
            .unwrap_or(usize::MAX)
            .min(MAX_SEND_WQE_BBS);
        if worst_bbs > max_bbs {
            return Err(Error::invalid(format!(
                "max_send_sge {} and max_inline_data {} need {worst_bbs}-BB send WQEs; the \
                 device allows {max_bbs}",
                cap.max_send_sge, cap.max_inline_data
            )));
        }
        let sq_bbs = (u64::from(cap.max_send_wr.max(1)) * worst_bbs as u64).next_power_of_two();
        let log_sq_bbs = sq_bbs.trailing_zeros();
        if log_sq_bbs > log_max_wq {
            return Err(Error::invalid(format!(
                "max_send_wr {} needs a send queue of {sq_bbs} BBs; the device allows 2^{log_max_wq}",
                cap.max_send_wr
            )));
        }
        // Whatever the worst-case WQE leaves unused is usable too.
        let room = worst_bbs * SEND_WQE_BB / SEG_SIZE - fixed as usize;
        let sq = SendLimits {
            max_sge: lim.max_sge.min(room as u32),
            max_inline: lim
                .max_inline
                .min((room * SEG_SIZE).saturating_sub(INLINE_HDR) as u32),
            ud: lim.ud,
        };

        let rq_offset = align_up(SEND_WQE_BB << log_sq_bbs, PAGE_SIZE);
        let (log_rq_wqes, log_rq_stride, max_recv_sge, dbrec_offset) = if lim.srq {
            (0, 0, 0, align_up(SEND_WQE_BB << log_sq_bbs, 64))
        } else {
            let (log_wqes, log_stride) = Self::rq_size(cap, log_max_wq)?;
            let stride = 1usize << log_stride;
            (
                log_wqes,
                log_stride,
                lim.max_sge.min((stride / SEG_SIZE - 1) as u32),
                align_up(rq_offset + (stride << log_wqes), 64),
            )
        };
        Ok(Self {
            log_sq_bbs,
            max_send_wr: (sq_bbs / worst_bbs as u64) as u32,
            sq,
            rq: !lim.srq,
            log_rq_wqes,
            log_rq_stride,
            max_recv_sge,
            rq_offset,
            dbrec_offset,
            len: dbrec_offset + core::mem::size_of::<QpDbRec>(),
        })
    }

    /// log2 of the receive queue's size in WQEs and of its stride.
    fn rq_size(cap: &QpCap, log_max_wq: u32) -> Result<(u32, u32)> {
        let seg = SEG_SIZE as u64;
        let recv_sge = u64::from(cap.max_recv_sge.max(1));
        let stride = ((1 + recv_sge) * seg)
            .next_power_of_two()
            .max(1 << MIN_LOG_RQ_STRIDE);
        let log_rq_stride = stride.trailing_zeros();
        if log_rq_stride > u32::from(MAX_LOG_RQ_STRIDE) {
            return Err(Error::invalid(format!(
                "max_recv_sge {} needs {stride}-byte receive WQEs; the device allows {}",
                cap.max_recv_sge,
                1 << MAX_LOG_RQ_STRIDE
            )));
        }
        let rq_wqes = u64::from(cap.max_recv_wr.max(1)).next_power_of_two();
        let log_rq_wqes = rq_wqes.trailing_zeros();
        if log_rq_wqes > log_max_wq {
            return Err(Error::invalid(format!(
                "max_recv_wr {} needs a receive queue of {rq_wqes} WQEs; the device allows \
                 2^{log_max_wq}",
                cap.max_recv_wr
            )));
        }
        Ok((log_rq_wqes, log_rq_stride))
    }

    /// The capacities actually provided (at least those requested).
    pub(crate) fn cap(&self) -> QpCap {
        QpCap {
            max_send_wr: self.max_send_wr,
            max_recv_wr: if self.rq { 1 << self.log_rq_wqes } else { 0 },
            max_send_sge: self.sq.max_sge,
            max_recv_sge: self.max_recv_sge,
            max_inline_data: self.sq.max_inline,
        }
    }

    /// Bytes of the receive queue (none on an SRQ).
    pub(crate) fn rq_len(&self) -> usize {
        if self.rq {
            1 << (self.log_rq_wqes + self.log_rq_stride)
        } else {
            0
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::error::ErrorKind;

    const LIM: QueueLimits = QueueLimits {
        log_max_wq: 15,
        max_qp_wr: 1 << 15,
        max_sge: 16,
        max_inline: 256,
        max_wqe_bbs: 8,
        ud: false,
        srq: false,
    };

    fn cap(send: u32, recv: u32, ssge: u32, rsge: u32, inline: u32) -> QpCap {
        QpCap {
            max_send_wr: send,
            max_recv_wr: recv,
            max_send_sge: ssge,
            max_recv_sge: rsge,
            max_inline_data: inline,
        }
    }

    #[test]
    fn one_bb_wqes() {
        // 2 fixed + 2 SGEs = 4 segments = 1 BB; inline 28 bytes = 2 segments.
        let l = QpLayout::new(&cap(100, 100, 2, 1, 28), &LIM).unwrap();
        assert_eq!(l.log_sq_bbs, 7);
        assert_eq!(l.max_send_wr, 128);
        assert_eq!(
            l.sq,
            SendLimits {
                max_sge: 2,
                max_inline: 28,
                ud: false,
            }
        );
        assert_eq!(l.log_rq_wqes, 7);
        assert_eq!(l.log_rq_stride, 5);
        assert_eq!(l.max_recv_sge, 1);
        assert_eq!(l.rq_offset, PAGE_SIZE * 2);
        assert_eq!(l.dbrec_offset, PAGE_SIZE * 2 + 128 * 32);
        assert_eq!(l.len, l.dbrec_offset + 8);
        assert_eq!(l.cap(), cap(128, 128, 2, 1, 28));
    }

    #[test]
    fn worst_case_wqe_sets_bbs_per_wr() {
        // 16 SGEs: 18 segments = 5 BBs; 10 WRs -> 50 BBs -> 64, 12 WRs.
        let l = QpLayout::new(&cap(10, 1, 16, 16, 0), &LIM).unwrap();
        assert_eq!(l.log_sq_bbs, 6);
        assert_eq!(l.max_send_wr, 12);
        assert_eq!(l.sq.max_sge, 16);
        // 5 BBs hold 18 segments of payload: 18 * 16 - 4 bytes inline.
        assert_eq!(l.sq.max_inline, 256);
        // 17 segments -> 512-byte receive WQEs.
        assert_eq!(l.log_rq_stride, 9);
        assert_eq!(l.max_recv_sge, 16);
        // inline 256: 2 + ceil(260 / 16) = 19 segments = 5 BBs.
        let l = QpLayout::new(&cap(1, 1, 1, 1, 256), &LIM).unwrap();
        assert_eq!(l.log_sq_bbs, 3);
        assert_eq!(l.max_send_wr, 1);
        // Atomics (4 segments) fit the minimum of one BB.
        let l = QpLayout::new(&cap(1, 0, 0, 0, 0), &LIM).unwrap();
        assert_eq!(l.log_sq_bbs, 0);
        assert_eq!(
            l.sq,
            SendLimits {
                max_sge: 2,
                max_inline: 28,
                ud: false,
            }
        );
        assert_eq!(l.log_rq_wqes, 0);
    }

    #[test]
    fn a_qp_on_an_srq_has_no_receive_queue() {
        let on_srq = QueueLimits { srq: true, ..LIM };
        // Receive capacities beyond the device's are ignored, not refused.
        let l = QpLayout::new(&cap(4, 1 << 20, 1, 99, 0), &on_srq).unwrap();
        assert_eq!(l.rq_len(), 0);
        assert_eq!((l.log_rq_wqes, l.log_rq_stride), (0, 0));
        assert_eq!(l.dbrec_offset, 4 * SEND_WQE_BB);
        assert_eq!(l.cap().max_recv_wr, 0);
        assert_eq!(l.cap().max_recv_sge, 0);
    }

    #[test]
    fn limits_are_enforced() {
        let kind = |c: QpCap| QpLayout::new(&c, &LIM).unwrap_err().kind();
        assert_eq!(kind(cap(1, 1, 17, 1, 0)), ErrorKind::InvalidArgument);
        assert_eq!(kind(cap(1, 1, 1, 17, 0)), ErrorKind::InvalidArgument);
        assert_eq!(kind(cap(1, 1, 1, 1, 257)), ErrorKind::InvalidArgument);
        // 2^15 BBs is the largest queue: 2^15 one-BB WRs fit, 2^14 + 1 two-BB ones do not.
        assert!(QpLayout::new(&cap(1 << 15, 1 << 15, 2, 1, 0), &LIM).is_ok());
        assert_eq!(
            kind(cap((1 << 14) + 1, 1, 3, 1, 0)),
            ErrorKind::InvalidArgument
        );
        assert_eq!(
            kind(cap(1, (1 << 15) + 1, 1, 1, 0)),
            ErrorKind::InvalidArgument
        );
        let small = QueueLimits {
            max_wqe_bbs: 2,
            ..LIM
        };
        assert!(QpLayout::new(&cap(1, 1, 6, 1, 0), &small).is_ok());
        assert!(QpLayout::new(&cap(1, 1, 7, 1, 0), &small).is_err());
    }

    #[test]
    fn extreme_values_are_refused_without_overflow() {
        // A device that reports no max_qp_wr, or huge limits, leaves the
        // ring size as the limit.
        let unlimited = QueueLimits {
            log_max_wq: 31,
            max_qp_wr: 0,
            max_sge: u32::MAX,
            max_inline: u32::MAX,
            max_wqe_bbs: u32::MAX,
            ud: false,
            srq: false,
        };
        let huge = QueueLimits {
            max_qp_wr: u32::MAX,
            ..unlimited
        };
        for lim in [unlimited, huge] {
            let kind = |c: QpCap| QpLayout::new(&c, &lim).unwrap_err().kind();
            for big in [(1 << 15) + 1, (1 << 31) + 1, u32::MAX] {
                let e = QpLayout::new(&cap(1, big, 1, 1, 0), &lim).unwrap_err();
                assert_eq!(e.kind(), ErrorKind::InvalidArgument);
                assert!(e.message().contains("receive queue"), "{e}");
                let e = QpLayout::new(&cap(big, 1, 1, 1, 0), &lim).unwrap_err();
                assert!(e.message().contains("send queue"), "{e}");
                assert_eq!(kind(cap(1, 1, big, 1, 0)), ErrorKind::InvalidArgument);
                assert_eq!(kind(cap(1, 1, 1, big, 0)), ErrorKind::InvalidArgument);
                assert_eq!(kind(cap(1, 1, 1, 1, big)), ErrorKind::InvalidArgument);
            }
            let l = QpLayout::new(&cap(1 << 15, 1 << 15, 2, 1, 0), &lim).unwrap();
            assert_eq!((l.log_sq_bbs, l.log_rq_wqes), (15, 15));
        }
        // A device with one-entry rings takes one request per queue.
        let tiny = QueueLimits {
            log_max_wq: 0,
            max_qp_wr: 0,
            ..LIM
        };
        assert!(QpLayout::new(&cap(1, 1, 1, 1, 0), &tiny).is_ok());
        assert!(QpLayout::new(&cap(2, 1, 1, 1, 0), &tiny).is_err());
    }

    #[test]
    fn ud_wqes_carry_a_datagram_segment() {
        // 4 fixed + 2 SGEs = 6 segments = 2 BBs, whose 4 free segments
        // take 4 SGEs or 60 bytes inline.
        let ud = QueueLimits { ud: true, ..LIM };
        let l = QpLayout::new(&cap(8, 8, 2, 1, 0), &ud).unwrap();
        assert_eq!(l.log_sq_bbs, 4);
        assert_eq!(
            l.sq,
            SendLimits {
                max_sge: 4,
                max_inline: 60,
                ud: true,
            }
        );
        // With no SGE the header alone (4 segments) fills one BB.
        let l = QpLayout::new(&cap(1, 1, 0, 1, 0), &ud).unwrap();
        assert_eq!(l.log_sq_bbs, 0);
        assert_eq!(l.sq.max_sge, 0);
    }
}

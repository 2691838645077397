//! Shared receive queues: a state page and WQE pages by one page
//! directory (CREATE_SRQ), the device consuming on the state page's `rx`
//! ring; receives posted at its tail and announced on the SRQ doorbell.

use alloc::boxed::Box;
use alloc::format;

use rnic_pvrdma_regs::bar::UAR;
use rnic_pvrdma_regs::cmd::{
    self, CmdOpcode, CreateSrq, HandleCmd, HandleResp, ModifySrq, QuerySrqResp,
};
use rnic_pvrdma_regs::ring::{RX_CONS_HEAD, RX_PROD_TAIL};
use rnic_pvrdma_regs::uar::{HANDLE_MASK, SRQ_DB, SRQ_RECV};
use rnic_pvrdma_regs::wqe::RqWqeHdr;
use rnic_pvrdma_regs::{le32, le64, PAGE_SIZE};
use rnic_queues::{Hal, IndexRing};
use rnic_verbs::{srq_mask, DestroyError, Error, ErrorKind, PostError, RecvWr, Result, SrqAttr};

use crate::context::{Pd, Uc};
use crate::device::Device;
use crate::post::write_recvs;
use crate::qp::{WorkQueue, MAX_SGE, MAX_WR};
use crate::queue_mem::QueueMem;

/// A shared receive queue. Destroy it with [`Device::destroy_srq`], after
/// the QPs on it.
#[derive(Debug)]
pub struct Srq {
    handle: u32,
    uar: usize,
    /// Boxed: an SRQ handed back in a `DestroyError` stays small.
    q: Box<(WorkQueue, QueueMem)>,
}

impl Srq {
    /// The device's handle (in commands, QPs and doorbells).
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// Receive WQEs the ring holds.
    pub fn capacity(&self) -> u32 {
        self.q.0.ring.size()
    }

    /// SGEs a receive WQE holds.
    pub fn max_sge(&self) -> u32 {
        self.q.0.max_sge
    }
}

impl<H: Hal> Device<H> {
    /// An SRQ of at least `max_wr` receive WQEs (rounded up to a power of
    /// two) of `max_sge` SGEs in `pd`, its doorbell on `uc`'s UAR page
    /// (CREATE_SRQ). `limit` arms the SRQ-limit event (0: none).
    pub fn create_srq(
        &self,
        uc: &Uc,
        pd: &Pd,
        max_wr: u32,
        max_sge: u32,
        limit: u32,
    ) -> Result<Srq> {
        for (what, n, max) in [("WQEs", max_wr, MAX_WR), ("SGEs", max_sge, MAX_SGE)] {
            if n == 0 || n > max {
                return Err(Error::invalid(format!(
                    "an SRQ of {n} {what}: between 1 and {max}"
                )));
            }
        }
        let wr = max_wr.next_power_of_two();
        if limit > wr {
            return Err(Error::invalid(format!(
                "an SRQ limit of {limit} for {wr} WQEs"
            )));
        }
        let stride = (core::mem::size_of::<RqWqeHdr>()
            + max_sge as usize * core::mem::size_of::<rnic_pvrdma_regs::wqe::Sge>())
        .next_power_of_two();
        let pages = (wr as usize * stride).div_ceil(PAGE_SIZE);
        let mem = QueueMem::alloc(&self.hal, pages, "PVRDMA SRQ memory")?;
        let req = CreateSrq {
            pdir_dma: le64::from_ne(mem.pdir_dma()),
            pd_handle: le32::from_ne(pd.handle),
            nchunks: le32::from_ne(mem.nchunks()),
            attrs: cmd::SrqAttr {
                max_wr: le32::from_ne(wr),
                max_sge: le32::from_ne(max_sge),
                srq_limit: le32::from_ne(limit),
                ..Default::default()
            },
            ..Default::default()
        };
        let resp: HandleResp = match self.exec(CmdOpcode::CreateSrq, &req) {
            Ok(r) => r,
            Err(e) => {
                mem.release(&self.hal, &e);
                return Err(e);
            }
        };
        let queue = WorkQueue {
            ring: IndexRing::new(RX_PROD_TAIL, RX_CONS_HEAD, wr.ilog2()),
            offset: 0,
            stride,
            max_sge,
        };
        Ok(Srq {
            handle: resp.handle.to_ne(),
            uar: uc.uar,
            q: Box::new((queue, mem)),
        })
    }

    /// Sets the SRQ's limit (MODIFY_SRQ with [`srq_mask::LIMIT`]), which
    /// arms its event. A resize ([`srq_mask::MAX_WR`]) is `EOPNOTSUPP`:
    /// QEMU's pvrdma refuses it.
    pub fn modify_srq(&self, srq: &Srq, attr: &SrqAttr, mask: u32) -> Result<()> {
        if mask & srq_mask::MAX_WR != 0 {
            return Err(Error::new(
                ErrorKind::NotSupported,
                "resizing an SRQ: QEMU's pvrdma does not",
            ));
        }
        if mask != srq_mask::LIMIT {
            return Err(Error::invalid(format!("SRQ attribute mask {mask:#x}")));
        }
        if attr.srq_limit > srq.capacity() {
            return Err(Error::invalid(format!(
                "an SRQ limit of {} for {} WQEs",
                attr.srq_limit,
                srq.capacity()
            )));
        }
        let req = ModifySrq {
            srq_handle: le32::from_ne(srq.handle),
            attr_mask: le32::from_ne(mask),
            attrs: cmd::SrqAttr {
                srq_limit: le32::from_ne(attr.srq_limit),
                ..Default::default()
            },
            ..Default::default()
        };
        self.exec::<_, cmd::RespHdr>(CmdOpcode::ModifySrq, &req)
            .map(drop)
    }

    /// The SRQ's attributes as the device reports them (QUERY_SRQ).
    pub fn query_srq(&self, srq: &Srq) -> Result<SrqAttr> {
        let r: QuerySrqResp = self.exec(
            CmdOpcode::QuerySrq,
            &HandleCmd {
                handle: le32::from_ne(srq.handle),
                ..Default::default()
            },
        )?;
        Ok(SrqAttr {
            max_wr: r.attrs.max_wr.to_ne(),
            max_sge: r.attrs.max_sge.to_ne(),
            srq_limit: r.attrs.srq_limit.to_ne(),
        })
    }

    /// Posts `wrs` to the SRQ, in order, and rings its doorbell once;
    /// stops at the first that cannot be posted.
    pub fn post_srq_recv(
        &self,
        srq: &mut Srq,
        wrs: &[RecvWr<'_>],
    ) -> core::result::Result<(), PostError> {
        let (queue, mem) = &*srq.q;
        let (posted, result) = write_recvs(queue, mem, wrs, "shared receive");
        if posted > 0 {
            // The Hal orders this doorbell after the WQEs and the tail.
            self.hal.mmio_write32(
                UAR,
                srq.uar * PAGE_SIZE + SRQ_DB,
                (srq.handle & HANDLE_MASK) | SRQ_RECV,
            );
        }
        result.map_err(|error| PostError {
            index: posted,
            error,
        })
    }

    /// Destroys an SRQ (DESTROY_SRQ) and frees its pages. Destroy the QPs
    /// on it first.
    pub fn destroy_srq(&self, srq: Srq) -> core::result::Result<(), DestroyError<Srq>> {
        let handle = srq.handle;
        self.destroy_object(
            CmdOpcode::DestroySrq,
            handle,
            srq,
            |dev, srq| {
                let (_, mem) = *srq.q;
                // SAFETY: the device destroyed the SRQ.
                unsafe { mem.free(&dev.hal) }
            },
            // The device may still write the pages: never freed.
            |_, srq| core::mem::forget(srq),
        )
    }
}

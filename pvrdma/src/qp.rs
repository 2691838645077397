//! Queue pairs: a state page, the send queue's pages and the receive
//! queue's pages by one page directory (CREATE_QP), their attributes set
//! by MODIFY_QP.

use alloc::boxed::Box;
use alloc::format;

use rnic_pvrdma_regs::bar1::VERSION_QPHANDLE;
use rnic_pvrdma_regs::cmd::{
    CmdOpcode, CreateQp, CreateQpResp, CreateQpRespV2, ModifyQp, QpAttr, QpType,
};
use rnic_pvrdma_regs::ring::{RX_CONS_HEAD, RX_PROD_TAIL, TX_CONS_HEAD, TX_PROD_TAIL};
use rnic_pvrdma_regs::wqe::{RqWqeHdr, Sge, SQ_WQE_HDR_SIZE};
use rnic_pvrdma_regs::{le16, le32, le64, PAGE_SIZE};
use rnic_queues::{Hal, IndexRing};
use rnic_verbs::{DestroyError, Error, ErrorKind, Result};

use crate::context::{Pd, Uc};
use crate::cq::Cq;
use crate::device::Device;
use crate::queue_mem::QueueMem;
use crate::srq::Srq;

/// The most work requests a queue may ask for (the indices of a ring need
/// one bit above the slot; a directory lists at most 512 × 512 pages).
pub const MAX_WR: u32 = 1 << 15;

/// The most SGEs a work request may ask for: a WQE stays within a page.
pub const MAX_SGE: u32 = ((PAGE_SIZE - SQ_WQE_HDR_SIZE) / core::mem::size_of::<Sge>()) as u32;

/// What a QP is made with.
#[derive(Debug, Clone, Copy)]
pub struct QpInit<'a> {
    /// RC or UD (what QEMU's pvrdma carries besides GSI).
    pub qp_type: QpType,
    /// The CQ send completions go to.
    pub send_cq: &'a Cq,
    /// The CQ receive completions go to.
    pub recv_cq: &'a Cq,
    /// The SRQ its receives come from; the QP then has no receive queue,
    /// and the receive capacities are not used.
    pub srq: Option<&'a Srq>,
    /// Send WQEs (rounded up to a power of two).
    pub max_send_wr: u32,
    /// Receive WQEs (rounded up to a power of two).
    pub max_recv_wr: u32,
    /// SGEs per send WQE.
    pub max_send_sge: u32,
    /// SGEs per receive WQE.
    pub max_recv_sge: u32,
    /// Every send WQE completes with a CQE.
    pub sq_sig_all: bool,
}

/// One queue of a QP: its ring and where its WQEs are.
#[derive(Debug)]
pub(crate) struct WorkQueue {
    pub(crate) ring: IndexRing,
    /// Byte offset of the queue's first WQE in the QP's entry pages.
    pub(crate) offset: usize,
    /// Bytes per WQE, a power of two.
    pub(crate) stride: usize,
    /// SGEs a WQE holds.
    pub(crate) max_sge: u32,
}

/// A queue pair. Destroy it with [`Device::destroy_qp`].
#[derive(Debug)]
pub struct Qp {
    handle: u32,
    qpn: u32,
    qp_type: QpType,
    pub(crate) uar: usize,
    /// Boxed: a QP handed back in a `DestroyError` stays small.
    pub(crate) q: Box<Queues>,
}

/// A QP's two queues and their memory.
#[derive(Debug)]
pub(crate) struct Queues {
    pub(crate) sq: WorkQueue,
    /// `None` on an SRQ.
    pub(crate) rq: Option<WorkQueue>,
    pub(crate) mem: QueueMem,
}

impl Qp {
    /// The device's handle (in commands and doorbells).
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// The QP number on the wire.
    pub fn qpn(&self) -> u32 {
        self.qpn
    }

    /// RC or UD.
    pub fn qp_type(&self) -> QpType {
        self.qp_type
    }

    /// Send WQEs the ring holds.
    pub fn send_capacity(&self) -> u32 {
        self.q.sq.ring.size()
    }

    /// Receive WQEs the ring holds (0 on an SRQ).
    pub fn recv_capacity(&self) -> u32 {
        self.q.rq.as_ref().map_or(0, |rq| rq.ring.size())
    }
}

/// Bytes per WQE: the header and `sge` SGEs, rounded up to a power of two.
fn stride(header: usize, sge: u32) -> usize {
    (header + sge as usize * core::mem::size_of::<Sge>()).next_power_of_two()
}

fn pages_for(wr: u32, stride: usize) -> usize {
    (wr as usize * stride).div_ceil(PAGE_SIZE)
}

impl<H: Hal> Device<H> {
    /// A QP in `pd`, its doorbells on `uc`'s UAR page (CREATE_QP). The
    /// device's grant is checked: fewer WQEs or SGEs than asked and the QP
    /// is destroyed again and refused.
    pub fn create_qp(&self, uc: &Uc, pd: &Pd, init: &QpInit<'_>) -> Result<Qp> {
        if !matches!(init.qp_type, QpType::Rc | QpType::Ud) {
            return Err(Error::new(
                ErrorKind::NotSupported,
                format!("a {:?} QP: this driver makes RC and UD QPs", init.qp_type),
            ));
        }
        // On an SRQ the QP has no receive queue: it asks for none.
        let (recv_wr, recv_sge) = match init.srq {
            Some(_) => (0, 0),
            None => (init.max_recv_wr, init.max_recv_sge),
        };
        let checked = [
            ("send WQEs", init.max_send_wr, MAX_WR),
            ("send SGEs", init.max_send_sge, MAX_SGE),
            ("receive WQEs", recv_wr, MAX_WR),
            ("receive SGEs", recv_sge, MAX_SGE),
        ];
        let n_checked = if init.srq.is_some() { 2 } else { 4 };
        for (what, n, max) in checked.into_iter().take(n_checked) {
            if n == 0 || n > max {
                return Err(Error::invalid(format!(
                    "a QP of {n} {what}: between 1 and {max}"
                )));
            }
        }
        let (send_wr, recv_wr) = (
            init.max_send_wr.next_power_of_two(),
            if recv_wr == 0 {
                0
            } else {
                recv_wr.next_power_of_two()
            },
        );
        let sq_stride = stride(SQ_WQE_HDR_SIZE, init.max_send_sge);
        let rq_stride = stride(core::mem::size_of::<RqWqeHdr>(), recv_sge);
        let (sq_pages, rq_pages) = (pages_for(send_wr, sq_stride), pages_for(recv_wr, rq_stride));
        let mem = QueueMem::alloc(&self.hal, sq_pages + rq_pages, "PVRDMA QP memory")?;
        let req = CreateQp {
            pdir_dma: le64::from_ne(mem.pdir_dma()),
            pd_handle: le32::from_ne(pd.handle),
            send_cq_handle: le32::from_ne(init.send_cq.handle()),
            recv_cq_handle: le32::from_ne(init.recv_cq.handle()),
            max_send_wr: le32::from_ne(send_wr),
            max_recv_wr: le32::from_ne(recv_wr),
            max_send_sge: le32::from_ne(init.max_send_sge),
            max_recv_sge: le32::from_ne(recv_sge),
            srq_handle: le32::from_ne(init.srq.map_or(0, Srq::handle)),
            is_srq: u8::from(init.srq.is_some()),
            total_chunks: le16::from_ne(mem.nchunks() as u16),
            send_chunks: le16::from_ne(sq_pages as u16),
            sq_sig_all: u8::from(init.sq_sig_all),
            qp_type: init.qp_type.raw(),
            ..Default::default()
        };
        // From version 20 the device answers a handle beside the number.
        let answer = if self.version() >= VERSION_QPHANDLE {
            self.exec::<_, CreateQpRespV2>(CmdOpcode::CreateQp, &req)
                .map(|r| {
                    let caps = [r.max_send_wr, r.max_recv_wr, r.max_send_sge, r.max_recv_sge];
                    (r.qp_handle.to_ne(), r.qpn.to_ne(), caps.map(|c| c.to_ne()))
                })
        } else {
            self.exec::<_, CreateQpResp>(CmdOpcode::CreateQp, &req)
                .map(|r| {
                    let caps = [r.max_send_wr, r.max_recv_wr, r.max_send_sge, r.max_recv_sge];
                    (r.qpn.to_ne(), r.qpn.to_ne(), caps.map(|c| c.to_ne()))
                })
        };
        let (handle, qpn, granted) = match answer {
            Ok(a) => a,
            Err(e) => {
                mem.release(&self.hal, &e);
                return Err(e);
            }
        };
        self.qps.write().insert(handle, qpn);
        let qp = Qp {
            handle,
            qpn,
            qp_type: init.qp_type,
            uar: uc.uar,
            q: Box::new(Queues {
                sq: WorkQueue {
                    ring: IndexRing::new(TX_PROD_TAIL, TX_CONS_HEAD, send_wr.ilog2()),
                    offset: 0,
                    stride: sq_stride,
                    max_sge: init.max_send_sge,
                },
                rq: (recv_wr > 0).then(|| WorkQueue {
                    ring: IndexRing::new(RX_PROD_TAIL, RX_CONS_HEAD, recv_wr.ilog2()),
                    offset: sq_pages * PAGE_SIZE,
                    stride: rq_stride,
                    max_sge: recv_sge,
                }),
                mem,
            }),
        };
        let asked = [send_wr, recv_wr, init.max_send_sge, recv_sge];
        if granted.iter().zip(asked).any(|(&g, a)| g < a) {
            let error = Error::new(
                ErrorKind::Io,
                format!(
                    "CREATE_QP asked for {asked:?} (send and receive WQEs, send and receive \
                     SGEs) and the device granted {granted:?}"
                ),
            );
            let _ = self.destroy_qp(qp);
            return Err(error);
        }
        Ok(qp)
    }

    /// Sets the attributes of `qp` that `mask` names (MODIFY_QP, with
    /// libibverbs' `IBV_QP_*` bits, `cmd::qp_attr_mask`).
    pub fn modify_qp(&self, qp: &Qp, mask: u32, attrs: &QpAttr) -> Result<()> {
        let req = ModifyQp {
            qp_handle: le32::from_ne(qp.handle),
            attr_mask: le32::from_ne(mask),
            attrs: *attrs,
            ..Default::default()
        };
        self.exec::<_, rnic_pvrdma_regs::cmd::RespHdr>(CmdOpcode::ModifyQp, &req)
            .map(drop)
    }

    /// Destroys a QP (DESTROY_QP) and frees its pages.
    pub fn destroy_qp(&self, qp: Qp) -> core::result::Result<(), DestroyError<Qp>> {
        let handle = qp.handle;
        self.destroy_object(
            CmdOpcode::DestroyQp,
            handle,
            qp,
            |dev, qp| {
                dev.qps.write().remove(&qp.handle);
                // SAFETY: the device destroyed the QP.
                unsafe { qp.q.mem.free(&dev.hal) }
            },
            // The device may still read or write the pages: never freed.
            // A completion it still makes for the QP names no QP of ours.
            |dev, qp| {
                dev.qps.write().remove(&qp.handle);
                core::mem::forget(qp)
            },
        )
    }
}

//! Completion queues: a state page and CQE pages by page directory, the
//! device producing on the state page's `rx` ring and the driver consuming.

use alloc::boxed::Box;
use alloc::format;

use rnic_pvrdma_regs::bar::UAR;
use rnic_pvrdma_regs::cmd::{CmdOpcode, CreateCq, CreateCqResp};
use rnic_pvrdma_regs::cqe::{self, Cqe};
use rnic_pvrdma_regs::ring::{RX_CONS_HEAD, RX_PROD_TAIL};
use rnic_pvrdma_regs::uar::{CQ_ARM, CQ_ARM_SOL, CQ_DB, HANDLE_MASK};
use rnic_pvrdma_regs::{le32, le64, PAGE_SIZE};
use rnic_queues::{Hal, IndexError, IndexRing};
use rnic_verbs::{
    wc_flags, DestroyError, Error, ErrorKind, Result, WcOpcode, WcStatus, WorkCompletion,
};

use crate::context::Uc;
use crate::device::Device;
use crate::queue_mem::QueueMem;

/// The most CQEs a CQ may ask for: the indices of a ring need one bit
/// above the slot, and the directory lists at most 512 × 512 pages.
pub const MAX_CQE: u32 = 1 << 20;

const CQE_SIZE: usize = core::mem::size_of::<Cqe>();

/// A completion queue. Destroy it with [`Device::destroy_cq`].
#[derive(Debug)]
pub struct Cq {
    handle: u32,
    uar: usize,
    ring: IndexRing,
    /// Boxed: a CQ handed back in a `DestroyError` stays small.
    mem: Box<QueueMem>,
}

impl Cq {
    /// The device's handle.
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// CQEs the ring holds (what the device granted).
    pub fn capacity(&self) -> u32 {
        self.ring.size()
    }

    /// Takes the next CQE from the ring, if any, unchecked. A producer
    /// index the device left out of range is an error, and nothing is
    /// taken.
    pub(crate) fn poll(&self) -> core::result::Result<Option<Cqe>, IndexError> {
        let Some(slot) = self.ring.ready_slot(&self.mem.state)? else {
            return Ok(None);
        };
        let cqe = self.mem.entries.read::<Cqe>(slot as usize * CQE_SIZE);
        self.ring.consume(&self.mem.state)?;
        Ok(Some(cqe))
    }
}

impl<H: Hal> Device<H> {
    /// A CQ of at least `entries` CQEs (rounded up to a power of two) in
    /// context `uc` (CREATE_CQ). The device's grant is checked: a CQ of
    /// another size than asked is destroyed again and refused.
    pub fn create_cq(&self, uc: &Uc, entries: u32) -> Result<Cq> {
        if entries == 0 || entries > MAX_CQE {
            return Err(Error::invalid(format!(
                "a CQ of {entries} entries: between 1 and {MAX_CQE}"
            )));
        }
        let cqe = entries.next_power_of_two();
        let pages = (cqe as usize * CQE_SIZE).div_ceil(PAGE_SIZE);
        let mem = QueueMem::alloc(&self.hal, pages, "PVRDMA CQ memory")?;
        let req = CreateCq {
            pdir_dma: le64::from_ne(mem.pdir_dma()),
            ctx_handle: le32::from_ne(uc.handle),
            cqe: le32::from_ne(cqe),
            nchunks: le32::from_ne(mem.nchunks()),
            ..Default::default()
        };
        let resp: CreateCqResp = match self.exec(CmdOpcode::CreateCq, &req) {
            Ok(r) => r,
            Err(e) => {
                mem.release(&self.hal, &e);
                return Err(e);
            }
        };
        let handle = resp.cq_handle.to_ne();
        let granted = resp.cqe.to_ne();
        let cq = Cq {
            handle,
            uar: uc.uar,
            ring: IndexRing::new(RX_PROD_TAIL, RX_CONS_HEAD, cqe.ilog2()),
            mem: Box::new(mem),
        };
        if granted != cqe {
            let error = Error::new(
                ErrorKind::Io,
                format!("CREATE_CQ asked for {cqe} CQEs and the device granted {granted}"),
            );
            // Gone or not, the CQ cannot be used at that size.
            let _ = self.destroy_cq(cq);
            return Err(error);
        }
        Ok(cq)
    }

    /// Destroys a CQ (DESTROY_CQ) and frees its pages. Destroy the QPs
    /// that complete on it first.
    pub fn destroy_cq(&self, cq: Cq) -> core::result::Result<(), DestroyError<Cq>> {
        let handle = cq.handle;
        self.destroy_object(
            CmdOpcode::DestroyCq,
            handle,
            cq,
            // SAFETY: the device destroyed the CQ.
            |dev, cq| unsafe { cq.mem.free(&dev.hal) },
            // The device may still write into the pages: never freed.
            |_, cq| core::mem::forget(cq),
        )
    }

    /// Takes the next completion of `cq`, if any. An empty ring rings no
    /// doorbell: the CQ doorbell's POLL bit (which rdma-core's provider
    /// rings) makes QEMU's pvrdma poll its backend in the vCPU thread,
    /// which deadlocks against its completion thread delivering the same
    /// CQ's completions (docs/pvrdma.md); that thread moves every
    /// completion to the ring unasked, as Linux's kernel driver relies on.
    /// An empty ring calls [`Hal::poll_empty`] once and looks again, as
    /// the rnic driver does: a platform whose device needs the polling
    /// thread runs it there, and a middleware looks at what the device
    /// wrote before the driver reads it.
    /// A producer index out of range, or a CQE naming a QP the device does
    /// not hold for this driver, is the device's error (`EIO`); the bad CQE
    /// is consumed, so the next poll goes on.
    pub fn poll_cq(&self, cq: &Cq) -> Result<Option<WorkCompletion>> {
        let poll = || {
            cq.poll()
                .map_err(|e| Error::new(ErrorKind::Io, format!("CQ {}: {e}", cq.handle)))
        };
        let cqe = match poll()? {
            Some(c) => Some(c),
            None => {
                self.hal.poll_empty();
                poll()?
            }
        };
        let Some(c) = cqe else {
            return Ok(None);
        };
        let qpn = u32::try_from(c.qp.to_ne())
            .ok()
            .and_then(|h| self.qps.read().get(&h).copied());
        match qpn {
            Some(qpn) => Ok(Some(work_completion(&c, qpn))),
            None => Err(Error::new(
                ErrorKind::Io,
                format!(
                    "CQ {}: a completion (wr_id {:#x}) names QP {:#x}, which the device does not \
                     hold for this driver",
                    cq.handle,
                    c.wr_id.to_ne(),
                    c.qp.to_ne()
                ),
            )),
        }
    }

    /// Asks for a CQ notification (`ibv_req_notify_cq`) on the next
    /// completion, or the next solicited one. QEMU's pvrdma arms only when
    /// `ARM_SOL` is set and takes it for "any completion", so an arm for
    /// any completion writes both bits (docs/pvrdma.md).
    pub fn arm_cq(&self, cq: &Cq, solicited_only: bool) {
        log::trace!("CQ {}: armed (solicited only: {solicited_only})", cq.handle);
        let arm = if solicited_only {
            CQ_ARM_SOL
        } else {
            CQ_ARM | CQ_ARM_SOL
        };
        // The Hal orders this doorbell after the driver's earlier stores
        // (its consumer head).
        self.hal.mmio_write32(
            UAR,
            cq.uar * PAGE_SIZE + CQ_DB,
            (cq.handle & HANDLE_MASK) | arm,
        );
    }
}

/// The verbs completion of a CQE of QP `qpn`. PVRDMA's statuses are
/// libibverbs' values; its opcodes and flags are its own and are
/// translated. A status or (successful) opcode the driver does not know
/// becomes `GeneralErr`.
fn work_completion(c: &Cqe, qpn: u32) -> WorkCompletion {
    use cqe::WcOpcode as Pv;
    let raw_status = c.status.to_ne();
    let mut status = u8::try_from(raw_status)
        .ok()
        .and_then(WcStatus::from_raw)
        .unwrap_or_else(|| {
            log::warn!("PVRDMA CQE with unknown status {raw_status}");
            WcStatus::GeneralErr
        });
    let opcode = match Pv::from_raw(c.opcode.to_ne()) {
        Some(Pv::Send) => Some(WcOpcode::Send),
        Some(Pv::RdmaWrite) => Some(WcOpcode::RdmaWrite),
        Some(Pv::RdmaRead) => Some(WcOpcode::RdmaRead),
        Some(Pv::CompSwap) => Some(WcOpcode::CompSwap),
        Some(Pv::FetchAdd) => Some(WcOpcode::FetchAdd),
        Some(Pv::BindMw) => Some(WcOpcode::BindMw),
        Some(Pv::LocalInv) => Some(WcOpcode::LocalInv),
        Some(Pv::Recv) => Some(WcOpcode::Recv),
        Some(Pv::RecvRdmaWithImm) => Some(WcOpcode::RecvRdmaWithImm),
        _ => None,
    };
    let opcode = opcode.unwrap_or_else(|| {
        if status == WcStatus::Success {
            log::warn!("successful PVRDMA CQE with opcode {}", c.opcode.to_ne());
            status = WcStatus::GeneralErr;
        }
        // Which queue it came from is not known: a receive has a source.
        WcOpcode::Recv
    });
    let f = c.wc_flags.to_ne();
    let flags = (if f & cqe::wc_flags::GRH != 0 {
        wc_flags::GRH
    } else {
        0
    }) | (if f & cqe::wc_flags::WITH_IMM != 0 {
        wc_flags::WITH_IMM
    } else {
        0
    }) | (if f & cqe::wc_flags::WITH_INVALIDATE != 0 {
        wc_flags::WITH_INV
    } else {
        0
    });
    // `imm_data` is in network byte order, as the bytes the device wrote.
    let imm = c.imm_data.to_ne().to_le_bytes();
    WorkCompletion {
        wr_id: c.wr_id.to_ne(),
        status,
        opcode,
        vendor_err: c.vendor_err.to_ne(),
        byte_len: c.byte_len.to_ne(),
        imm_data: (flags & (wc_flags::WITH_IMM | wc_flags::WITH_INV) != 0).then_some(imm),
        qp_num: qpn,
        src_qp: c.src_qp.to_ne() & 0xff_ffff,
        flags,
        pkey_index: c.pkey_index.to_ne(),
        slid: c.slid.to_ne(),
        sl: c.sl,
    }
}

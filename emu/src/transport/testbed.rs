//! One RC QP and the device parts it reaches, alone: what the transport's
//! state machines are unit-tested on. No QP table, no wire, no worker: a
//! test hands a packet (or a timer) to the responder or completer with
//! the QP and the [`Dev`], then reads what it sent (the frames it queued
//! on the port), the completions it wrote and the memory it changed.

use std::ptr::NonNull;
use std::sync::Arc;

use rnic_hw_regs::cmd::AddressVector;
use rnic_hw_regs::cqe::{Cqe, CQE_SIZE};
use rnic_hw_regs::uar::QP_DBREC_SQ;
use rnic_hw_regs::wqe::{CtrlSeg, CtrlWord, DataSeg, RaddrSeg, RecvWqeHdr, SEND_WQE_BB};
use rnic_hw_regs::{le32, le64};
use rnic_verbs::{access, QpState, QpType};

use super::{Inflight, QpTimers, ReqOp, ReqState, RespState};
use crate::counters::Counters;
use crate::iommu::DmaRange;
use crate::irq::IrqLines;
use crate::objects::{Cq, Keyed, Mr, Qp};
use crate::port::Path;
use crate::state::Dev;
use crate::wire::aeth::{AckKind, AethRepr, CREDITS_INVALID};
use crate::wire::bth::{psn_add, BthRepr, DEFAULT_PKEY};
use crate::wire::frame::{classify, Received};
use crate::wire::opcode::info;
use crate::wire::reth::RethRepr;
use crate::wire::roce::RoceRepr;
use crate::wqe::SendWqe;
use crate::EmuConfig;

/// The QP's number.
pub(crate) const QPN: u32 = 0x11;
/// The connected QP's number.
pub(crate) const PEER_QPN: u32 = 0x22;
/// The remote address the MR starts at.
pub(crate) const VA: u64 = 0x10_0000;
/// Bytes of the MR.
pub(crate) const MR_LEN: usize = 64 * 1024;
/// The key of the peer's memory that requests name.
pub(crate) const REMOTE_RKEY: u32 = 0x4242;
/// The CQ both queues complete into.
const CQN: u32 = 1;
/// Receive WQEs the receive queue holds (its stride: 32 bytes, one SGE).
const RQ_WQES: u32 = 16;

/// An RC QP in RTS with path MTU 1024, connected to [`PEER_QPN`], the
/// device parts it reaches, and one MR of [`MR_LEN`] bytes at [`VA`]
/// (every access right).
pub(crate) struct Bed {
    pub qp: Qp,
    pub dev: Dev,
    pub rkey: u32,
    /// The MR's memory.
    mem: NonNull<u8>,
    /// The receive queue's ring and doorbell record.
    rq: NonNull<u8>,
    sq: NonNull<u8>,
    dbrec: NonNull<u8>,
    cq: NonNull<u8>,
    /// Receive WQEs posted.
    posted: u32,
    /// Send BBs posted by [`Bed::post_send`].
    sq_posted: u32,
}

/// A packet the QP sent.
#[derive(Debug)]
pub(crate) struct Sent {
    pub roce: RoceRepr,
    pub payload: Vec<u8>,
}

impl Sent {
    /// The opcode and PSN.
    pub(crate) fn op_psn(&self) -> (u8, u32) {
        (self.roce.bth.opcode, self.roce.bth.psn)
    }
}

/// Host memory of `len` bytes mapped in `dev`'s IOMMU, and its IOVA.
fn alloc(dev: &mut Dev, len: usize) -> (NonNull<u8>, u64) {
    dev.iommu.alloc(len).expect("test memory")
}

impl Bed {
    /// The QP, its device parts and its MR; the CQ holds 2^`log_cq`
    /// entries.
    pub(crate) fn rc(log_cq: u8) -> Self {
        let cfg = EmuConfig::default();
        let sgid = cfg.ipv4_gid();
        let mut dev = Dev::new(cfg, Arc::new(IrqLines::new(1)));
        let (mem, mem_iova) = alloc(&mut dev, MR_LEN);
        let mr = Mr {
            pdn: 1,
            access: access::LOCAL_WRITE
                | access::REMOTE_WRITE
                | access::REMOTE_READ
                | access::REMOTE_ATOMIC,
            va: VA,
            len: MR_LEN as u64,
            dma: DmaRange::new(&dev.iommu, mem_iova, MR_LEN).expect("mapped"),
            windows: 0,
        };
        let rkey = dev.objs.mrs.insert(0, Keyed::Mr(mr)).expect("a key");
        let cq_len = CQE_SIZE << log_cq;
        let (cq, cq_iova) = alloc(&mut dev, cq_len);
        let (_, cq_dbrec_iova) = alloc(&mut dev, 64);
        dev.objs.cqs.insert(
            CQN,
            0,
            Cq {
                log_size: log_cq,
                uar_page: 0,
                eqn: None,
                buf: DmaRange::new(&dev.iommu, cq_iova, cq_len).expect("mapped"),
                dbrec: DmaRange::new(&dev.iommu, cq_dbrec_iova, 64).expect("mapped"),
                pi: 0,
                ci_seen: 0,
                error: false,
                arm: None,
                last_solicited: None,
                users: 1,
            },
        );
        let rq_len = 32 * RQ_WQES as usize;
        let (rq, rq_iova) = alloc(&mut dev, rq_len);
        let (dbrec, dbrec_iova) = alloc(&mut dev, 64);
        let (sq, sq_iova) = alloc(&mut dev, 4096);
        let mut attrs = rnic_hw_regs::cmd::QpAttrs {
            path_mtu: rnic_verbs::Mtu::Mtu1024.raw(),
            qp_access_flags: le32::from_ne(
                access::REMOTE_WRITE | access::REMOTE_READ | access::REMOTE_ATOMIC,
            ),
            max_rd_atomic: 4,
            max_dest_rd_atomic: 4,
            min_rnr_timer: 1,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            dest_qp_num: le32::from_ne(PEER_QPN),
            ..Default::default()
        };
        attrs.ah = AddressVector {
            dgid: [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 0, 0, 2],
            dmac: [2, 0, 0, 0, 0, 2],
            ..Default::default()
        };
        let path = Path::new(sgid, &attrs.ah, QPN, PEER_QPN);
        let qp = Qp {
            qpn: QPN,
            qp_type: QpType::Rc,
            sqd_notify: false,
            drained: false,
            comm_est: true,
            pdn: 1,
            srqn: None,
            recv_pdn: 1,
            send_cqn: CQN,
            recv_cqn: CQN,
            sq_sig_all: true,
            log_sq_bbs: 6,
            log_rq_wqes: RQ_WQES.trailing_zeros() as u8,
            log_rq_stride: 5,
            max_inline: 0,
            uar_page: 0,
            sq: DmaRange::new(&dev.iommu, sq_iova, 4096).expect("mapped"),
            rq: DmaRange::new(&dev.iommu, rq_iova, rq_len).expect("mapped"),
            dbrec: DmaRange::new(&dev.iommu, dbrec_iova, 64).expect("mapped"),
            state: QpState::Rts,
            attrs,
            sq_ci: 0,
            sq_fetch: 0,
            bf: None,
            rq_ci: 0,
            sq_pi: 0,
            rq_pi: 0,
            kicked: false,
            path,
            req: ReqState {
                retry_left: 7,
                rnr_left: 7,
                ..ReqState::default()
            },
            resp: RespState::default(),
            timers: QpTimers::default(),
            counters: Counters::default(),
        };
        Self {
            qp,
            dev,
            rkey,
            mem,
            rq,
            sq,
            dbrec,
            cq,
            posted: 0,
            sq_posted: 0,
        }
    }

    /// The MR's bytes.
    pub(crate) fn mem(&mut self) -> &mut [u8] {
        // SAFETY: the IOMMU allocated MR_LEN bytes there, alive as long as
        // `dev`; the model touches them only inside calls that borrow
        // `self` mutably, so no other reference is live.
        unsafe { std::slice::from_raw_parts_mut(self.mem.as_ptr(), MR_LEN) }
    }

    /// Posts a receive WQE of `len` bytes at MR offset `off`.
    pub(crate) fn post_recv(&mut self, wr_id: u64, off: u64, len: u32) {
        let slot = (self.posted % RQ_WQES) as usize * 32;
        let hdr = RecvWqeHdr {
            wr_id: le64::from_ne(wr_id),
            sge_count: le32::from_ne(1),
            next: le32::from_ne(0),
        };
        let sge = DataSeg {
            byte_count: le32::from_ne(len),
            lkey: le32::from_ne(self.rkey),
            addr: le64::from_ne(VA + off),
        };
        self.posted += 1;
        // SAFETY: the slot's 32 bytes are inside the RQ ring (RQ_WQES
        // slots of 32), and the doorbell record's first 4 bytes inside its
        // 64; both allocated by the IOMMU, alive with `dev`, written
        // unaligned.
        unsafe {
            let p = self.rq.as_ptr().add(slot);
            p.cast::<RecvWqeHdr>().write_unaligned(hdr);
            p.add(16).cast::<DataSeg>().write_unaligned(sge);
            let pi = le32::from_ne(self.posted & 0xffff);
            self.dbrec.as_ptr().cast::<le32>().write_unaligned(pi);
        }
    }

    /// Every CQE written so far.
    pub(crate) fn cqes(&mut self) -> Vec<Cqe> {
        let cq = self.dev.objs.cqs.get(CQN).expect("the CQ");
        let size = 1u32 << cq.log_size;
        (0..cq.pi.min(size))
            .map(|i| {
                // SAFETY: slot `i` of the ring the IOMMU allocated for
                // 2^log_size CQEs, alive with `dev`, read unaligned.
                unsafe {
                    self.cq
                        .as_ptr()
                        .add(i as usize * CQE_SIZE)
                        .cast::<Cqe>()
                        .read_unaligned()
                }
            })
            .collect()
    }

    /// The packets the QP sent since the last call (frames that are not
    /// RoCE, such as ARP, are left out).
    pub(crate) fn sent(&mut self) -> Vec<Sent> {
        std::mem::take(&mut self.dev.port.tx)
            .iter()
            .filter_map(|f| match classify(f) {
                Ok(Received::Roce(repr, payload)) => Some(Sent {
                    roce: repr.roce,
                    payload: payload.to_vec(),
                }),
                _ => None,
            })
            .collect()
    }

    /// Hands the responder a request of `opcode` at `psn`, asking for an
    /// ACK.
    pub(crate) fn request(&mut self, opcode: u8, psn: u32, reth: Option<RethRepr>, payload: &[u8]) {
        let roce = RoceRepr {
            bth: request_bth(opcode, psn),
            reth,
            payload_len: payload.len(),
            ..RoceRepr::default()
        };
        let info = info(opcode).expect("a request opcode");
        super::responder::on_request(&mut self.qp, &mut self.dev, info, &roce, payload);
    }

    /// Hands the completer a response of `opcode` at `psn`.
    pub(crate) fn respond(&mut self, opcode: u8, psn: u32, aeth: Option<AethRepr>, payload: &[u8]) {
        let roce = RoceRepr {
            bth: BthRepr {
                opcode,
                pkey: DEFAULT_PKEY,
                dest_qp: QPN,
                psn,
                ..BthRepr::default()
            },
            aeth,
            payload_len: payload.len(),
            ..RoceRepr::default()
        };
        let info = info(opcode).expect("a response opcode");
        super::completer::on_response(&mut self.qp, &mut self.dev, info, &roce, payload);
    }

    /// Posts a send WQE of `opcode` (an `IBV_WR_*` value) for `len` bytes
    /// of the MR at `off`, to remote address `raddr` under `rkey`, and
    /// publishes it in the doorbell record.
    pub(crate) fn post_send(&mut self, opcode: u8, wr_id: u64, off: u64, len: u32, raddr: u64) {
        let bb = self.sq_posted;
        self.sq_posted += 1;
        let ctrl = CtrlSeg {
            word: CtrlWord::new()
                .with_opcode(opcode)
                .with_ds(3)
                .with_signaled(true)
                .with_wqe_index(bb as u8),
            wr_id: le64::from_ne(wr_id),
            ..CtrlSeg::default()
        };
        let remote = RaddrSeg {
            raddr: le64::from_ne(raddr),
            rkey: le32::from_ne(REMOTE_RKEY),
            reserved: le32::from_ne(0),
        };
        let sge = DataSeg {
            byte_count: le32::from_ne(len),
            lkey: le32::from_ne(self.rkey),
            addr: le64::from_ne(VA + off),
        };
        // SAFETY: BB `bb` of the 4 KiB SQ ring (64 BBs of 64 bytes: the
        // three segments fit one) and the doorbell record's SQ index, both
        // allocated by the IOMMU and alive with `dev`, written unaligned.
        unsafe {
            let slot = self.sq.as_ptr().add((bb % 64) as usize * SEND_WQE_BB);
            slot.cast::<CtrlSeg>().write_unaligned(ctrl);
            slot.add(16).cast::<RaddrSeg>().write_unaligned(remote);
            slot.add(32).cast::<DataSeg>().write_unaligned(sge);
            let pi = self.dbrec.as_ptr().add(QP_DBREC_SQ).cast::<le32>();
            pi.write_unaligned(le32::from_ne(bb + 1));
        }
    }

    /// Posts a WQE of `op` taking `npkts` PSNs (one BB, its control
    /// segment only) and puts it in flight, its request packets sent, as
    /// the requester would have.
    pub(crate) fn in_flight(&mut self, op: ReqOp, wr_id: u64, npkts: u32, len: u64) {
        let mut wqe = Box::<SendWqe>::default();
        wqe.bbs = 1;
        let bb = self.sq_posted;
        self.sq_posted += 1;
        wqe.ctrl = CtrlSeg {
            word: CtrlWord::new().with_ds(1).with_wqe_index(bb as u8),
            wr_id: le64::from_ne(wr_id),
            ..CtrlSeg::default()
        };
        // SAFETY: BB `bb` of the 4 KiB SQ ring (64 BBs; tests post fewer)
        // and the doorbell record's SQ index, both allocated by the IOMMU
        // and alive with `dev`, written unaligned.
        unsafe {
            let slot = self.sq.as_ptr().add((bb % 64) as usize * SEND_WQE_BB);
            slot.cast::<CtrlSeg>().write_unaligned(wqe.ctrl);
            let pi = self.dbrec.as_ptr().add(QP_DBREC_SQ).cast::<le32>();
            pi.write_unaligned(le32::from_ne(bb + 1));
        }
        self.qp.sq_fetch = bb + 1;
        self.qp.sq_pi = bb + 1;
        let req = &mut self.qp.req;
        let e = Inflight {
            wqe,
            op,
            wr_id,
            wc_opcode: 0,
            signaled: true,
            len,
            first_psn: req.next_psn,
            npkts,
            sent: if op.is_rd_atomic() { 1 } else { npkts },
            recv: 0,
            error: None,
        };
        req.next_psn = psn_add(req.next_psn, npkts);
        req.frontier = req.next_psn;
        req.rd_atomic += u8::from(op.is_rd_atomic());
        req.inflight.push_back(e);
        req.send_at = req.inflight.len();
    }

    /// A RETH for `len` bytes at MR offset `off`.
    pub(crate) fn reth(&self, off: u64, len: u32) -> Option<RethRepr> {
        Some(RethRepr {
            va: VA + off,
            rkey: self.rkey,
            dma_len: len,
        })
    }
}

/// The AETH of an ACK carrying `msn`.
pub(crate) fn ack(msn: u32) -> Option<AethRepr> {
    Some(AethRepr {
        kind: AckKind::Ack {
            credits: CREDITS_INVALID,
        },
        msn,
    })
}

/// The BTH of a request to [`QPN`] asking for an ACK.
fn request_bth(opcode: u8, psn: u32) -> BthRepr {
    BthRepr {
        opcode,
        pkey: DEFAULT_PKEY,
        dest_qp: QPN,
        psn,
        ack_req: true,
        ..BthRepr::default()
    }
}

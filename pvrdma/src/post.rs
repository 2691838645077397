//! Posting work requests: WQEs written at the producer tail of a QP's send
//! or receive ring, the tail advanced, the QP doorbell rung.
//!
//! QEMU's pvrdma carries every send WQE to its backend as a SEND (WRITE,
//! READ and atomics silently become SENDs, immediate data is lost), and no
//! PVRDMA device takes inline data. So a send of any opcode but SEND, or
//! inline, is refused with `EOPNOTSUPP`, never posted (docs/pvrdma.md).

use alloc::format;

use rnic_pvrdma_regs::bar::UAR;
use rnic_pvrdma_regs::cmd::QpType;
use rnic_pvrdma_regs::uar::{HANDLE_MASK, QP_DB, QP_RECV, QP_SEND};
use rnic_pvrdma_regs::wqe::{
    self, Av, RqWqeHdr, SqWqeCtrl, UdWr, WrOpcode, SQ_WQE_HDR_SIZE, SQ_WQE_WR_OFFSET,
};
use rnic_pvrdma_regs::{le32, le64, PAGE_SIZE};
use rnic_queues::Hal;
use rnic_verbs::{
    send_flags, Error, ErrorKind, Payload, PostError, RecvWr, Result, SendOp, SendWr, Sge, UdDest,
};

use crate::device::Device;
use crate::qp::{Qp, WorkQueue};
use crate::queue_mem::QueueMem;

// A SEND's flags go to the device as they are.
const _: () = assert!(
    send_flags::FENCE == wqe::send_flags::FENCE
        && send_flags::SIGNALED == wqe::send_flags::SIGNALED
        && send_flags::SOLICITED == wqe::send_flags::SOLICITED
);

/// The SGEs of `wr`, or why the device cannot carry it.
fn check_send<'a>(qp: &Qp, wr: &SendWr<'a>) -> Result<&'a [Sge]> {
    let ud = match wr.op {
        SendOp::Send => false,
        SendOp::UdSend { imm: None, .. } => true,
        SendOp::UdSend { imm: Some(_), .. } => {
            return Err(Error::new(
                ErrorKind::NotSupported,
                "SEND with immediate: QEMU's pvrdma would drop the immediate data",
            ))
        }
        op => {
            return Err(Error::new(
                ErrorKind::NotSupported,
                format!(
                    "{op:?}: this device carries only SEND (QEMU's pvrdma would send it as one)"
                ),
            ))
        }
    };
    let Payload::Sgl(sges) = wr.payload else {
        return Err(Error::new(
            ErrorKind::NotSupported,
            "inline data: PVRDMA takes none (max_inline_data 0)",
        ));
    };
    if wr.flags & !send_flags::ALL != 0 {
        return Err(Error::invalid(format!(
            "send flags {:#x} are not the device's",
            wr.flags & !send_flags::ALL
        )));
    }
    if sges.len() > qp.q.sq.max_sge as usize {
        return Err(Error::invalid(format!(
            "{} SGEs: the QP takes {}",
            sges.len(),
            qp.q.sq.max_sge
        )));
    }
    match (qp.qp_type(), ud) {
        (QpType::Ud, false) => Err(Error::invalid("a UD send needs its destination")),
        (QpType::Rc, true) => Err(Error::invalid("an RC send has no UD destination")),
        _ => Ok(sges),
    }
}

/// A UD send's `wr.ud`: the address handle's path in the device's form.
fn ud_wr(dest: &UdDest) -> UdWr {
    let ah = dest.ah();
    UdWr {
        remote_qpn: le32::from_ne(dest.remote_qpn),
        remote_qkey: le32::from_ne(dest.remote_qkey),
        av: Av {
            port_pd: le32::from_ne(u32::from(ah.port_num) << 24 | (dest.pdn() & 0xff_ffff)),
            sl_tclass_flowlabel: le32::from_ne(
                u32::from(ah.sl) << 28 | u32::from(ah.traffic_class) << 20 | ah.flow_label,
            ),
            dgid: ah.dgid,
            gid_index: ah.sgid_index,
            hop_limit: ah.hop_limit,
            dmac: ah.dmac,
            ..Default::default()
        },
    }
}

/// The slot at the tail of `wq`, or `ENOMEM` if the queue is full.
fn free_slot(wq: &WorkQueue, mem: &QueueMem, what: &str) -> Result<usize> {
    match wq.ring.free_slot(&mem.state) {
        Ok(Some(slot)) => Ok(wq.offset + slot as usize * wq.stride),
        Ok(None) => Err(Error::new(
            ErrorKind::NoMemory,
            format!("the {what} queue is full ({} WQEs)", wq.ring.size()),
        )),
        Err(e) => Err(Error::new(ErrorKind::Io, format!("the {what} queue: {e}"))),
    }
}

fn write_sges(mem: &QueueMem, at: usize, sges: &[Sge]) {
    for (i, sge) in sges.iter().enumerate() {
        let sge = wqe::Sge {
            addr: le64::from_ne(sge.addr),
            length: le32::from_ne(sge.length),
            lkey: le32::from_ne(sge.lkey),
        };
        mem.entries
            .write(at + i * core::mem::size_of::<wqe::Sge>(), sge);
    }
}

/// Writes `wrs` as receive WQEs at the tail of `wq` (a QP's receive queue
/// or an SRQ), in order, each released with the tail: how many were
/// written before the first that could not be, and why that one could not.
pub(crate) fn write_recvs(
    wq: &WorkQueue,
    mem: &QueueMem,
    wrs: &[RecvWr<'_>],
    what: &str,
) -> (usize, Result<()>) {
    let mut posted = 0;
    let result = wrs.iter().try_for_each(|wr| {
        if wr.sg_list.len() > wq.max_sge as usize {
            return Err(Error::invalid(format!(
                "{} SGEs: the {what} queue takes {}",
                wr.sg_list.len(),
                wq.max_sge
            )));
        }
        let at = free_slot(wq, mem, what)?;
        let hdr = RqWqeHdr {
            wr_id: le64::from_ne(wr.wr_id),
            num_sge: le32::from_ne(wr.sg_list.len() as u32),
            total_len: le32::from_ne(0),
        };
        mem.entries.write(at, hdr);
        write_sges(mem, at + core::mem::size_of::<RqWqeHdr>(), wr.sg_list);
        // Release (in `produce`): the WQE is whole when the device sees the
        // tail move.
        wq.ring
            .produce(&mem.state)
            .map_err(|e| Error::new(ErrorKind::Io, format!("the {what} queue: {e}")))?;
        posted += 1;
        Ok(())
    });
    (posted, result)
}

impl<H: Hal> Device<H> {
    /// Posts `wrs` to the send queue, in order, and rings the doorbell
    /// once. A request that cannot be carried stops the post there: those
    /// before it are posted, it and those after are not.
    pub fn post_send(
        &self,
        qp: &mut Qp,
        wrs: &[SendWr<'_>],
    ) -> core::result::Result<(), PostError> {
        let mut posted = 0;
        let result = wrs.iter().try_for_each(|wr| {
            let sges = check_send(qp, wr)?;
            let at = free_slot(&qp.q.sq, &qp.q.mem, "send")?;
            let wqe = &qp.q.mem.entries;
            let ctrl = SqWqeCtrl {
                wr_id: le64::from_ne(wr.wr_id),
                num_sge: le32::from_ne(sges.len() as u32),
                opcode: le32::from_ne(WrOpcode::Send.raw()),
                send_flags: le32::from_ne(wr.flags),
                ..Default::default()
            };
            wqe.write(at, ctrl);
            // The whole `wr` union, zeroed on an RC QP: QEMU resolves
            // `wr.ud.av.gid_index` for every WQE. SGEs past `num_sge` are
            // not read, so nothing else of the slot needs clearing.
            let ud = match wr.op {
                SendOp::UdSend { dest, .. } => ud_wr(&dest),
                _ => UdWr::default(),
            };
            wqe.write(at + SQ_WQE_WR_OFFSET, ud);
            write_sges(&qp.q.mem, at + SQ_WQE_HDR_SIZE, sges);
            // Release (in `produce`): the WQE is whole when the device sees
            // the tail move.
            qp.q.sq
                .ring
                .produce(&qp.q.mem.state)
                .map_err(|e| Error::new(ErrorKind::Io, format!("the send queue: {e}")))?;
            posted += 1;
            Ok(())
        });
        if posted > 0 {
            self.ring_qp(qp, QP_SEND);
        }
        result.map_err(|error| PostError {
            index: posted,
            error,
        })
    }

    /// Posts `wrs` to the receive queue, in order, and rings the doorbell
    /// once; stops at the first that cannot be posted, as
    /// [`Device::post_send`] does. A QP on an SRQ has no receive queue
    /// (`EINVAL`).
    pub fn post_recv(
        &self,
        qp: &mut Qp,
        wrs: &[RecvWr<'_>],
    ) -> core::result::Result<(), PostError> {
        let Some(rq) = &qp.q.rq else {
            return Err(PostError {
                index: 0,
                error: Error::invalid("the QP takes its receives from an SRQ: post to the SRQ"),
            });
        };
        let (posted, result) = write_recvs(rq, &qp.q.mem, wrs, "receive");
        if posted > 0 {
            self.ring_qp(qp, QP_RECV);
        }
        result.map_err(|error| PostError {
            index: posted,
            error,
        })
    }

    fn ring_qp(&self, qp: &Qp, which: u32) {
        // The Hal orders this doorbell after the WQEs and the tail.
        self.hal.mmio_write32(
            UAR,
            qp.uar * PAGE_SIZE + QP_DB,
            (qp.handle() & HANDLE_MASK) | which,
        );
    }
}

//! The Unreliable Datagram transport (IBA 9.8.4, 10.2.5; RoCEv2 A17).
//!
//! Sending: each send WQE, taken from the send queue by the requester's
//! [`take`](super::requester::take) with the same local checks, is one
//! SEND Only packet (with immediate if asked) to the address vector of its
//! datagram segment, with a DETH carrying the Q_Key (the QP's own when the
//! work request's has its high bit set) and the source QP. It completes as
//! soon as its packet is on the wire. A message longer than the port's MTU
//! gets no packet and completes successfully (C10-93.1.1), counted in
//! `UD_TOO_LONG`. A destination MAC of zero is resolved as an RC path's is;
//! the send queue waits meanwhile.
//!
//! Receiving: a packet whose DETH Q_Key differs from the QP's is dropped
//! (`RX_BAD_QKEY`), and so is one that finds no receive WQE
//! (`RX_NO_RECV_WQE`). Otherwise its receive WQE gets the 40-byte GRH (the
//! IPv6 header, or 20 zero bytes and the IPv4 header, as rxe and RoCE NICs
//! place it) followed by the payload, and a completion with the source QP
//! and the GRH flag. A buffer too small for both completes with
//! `LOC_LEN_ERR` and the QP moves to the error state.
//!
//! The general services QP (QPN 1) is a UD QP whose Q_Key is always
//! `GSI_QKEY`: what it sends and receives are MADs, counted as such
//! (`MADS_SENT`, `MADS_RECEIVED`, `MADS_DROPPED`).

use rnic_hw_regs::counters::counter;
use rnic_hw_regs::cqe::{Syndrome, SL_ROCE_V2_IPV4, SL_ROCE_V2_IPV6};
use rnic_hw_regs::wqe::MAX_SEND_WQE_DS;
use rnic_verbs::{access, QpState, QpType, WcOpcode, WcStatus};

use super::responder::{self, Refuse};
use super::{completer, requester, ReqOp};
use crate::objects::Qp;
use crate::port::{self, Path};
use crate::qp;
use crate::sgl;
use crate::state::Dev;
use crate::wire::bth::{psn_add, BthRepr, DEFAULT_PKEY};
use crate::wire::deth::DethRepr;
use crate::wire::immdt::ImmDtRepr;
use crate::wire::opcode::{self, Op, Position, Transport};
use crate::wire::roce::RoceRepr;
use crate::wqe::{self, Data};

/// Bytes of the GRH at the head of a UD receive buffer.
pub(crate) const GRH_LEN: usize = 40;

/// A Q_Key with this bit set in a work request stands for the QP's own.
const CONTROLLED_QKEY: u32 = 1 << 31;

/// Sends QP `qpn`'s UD WQEs, one packet each, while `budget` lasts.
pub(crate) fn send(qp: &mut Qp, dev: &mut Dev, budget: &mut u32) {
    while *budget > 0 {
        if qp.state != QpState::Rts {
            return;
        }
        if qp.req.inflight.is_empty() && !requester::take(qp, dev) {
            return;
        }
        let Some(e) = qp.req.inflight.front() else {
            return;
        };
        if e.error.is_some() {
            completer::fail_front(qp, dev);
            continue;
        }
        if e.npkts == 0 {
            port::count(qp, dev, counter::UD_TOO_LONG);
            done(qp, dev, WcStatus::Success, Syndrome::None);
            continue;
        }
        match send_one(qp, dev) {
            Sent::Yes => *budget -= 1,
            Sent::Waiting => return,
            Sent::Failed(status, syndrome) => done(qp, dev, status, syndrome),
        }
    }
}

enum Sent {
    Yes,
    /// The destination's MAC is being resolved.
    Waiting,
    Failed(WcStatus, Syndrome),
}

/// Sends the packet of the oldest WQE of QP `qpn`, and completes it.
fn send_one(qp: &mut Qp, dev: &mut Dev) -> Sent {
    let qpn = qp.qpn;
    let bad = Sent::Failed(WcStatus::LocQpOpErr, Syndrome::BadWqe);
    let Some(e) = qp.req.inflight.front() else {
        return bad;
    };
    let Ok(d) = e.wqe.decode(qp.max_inline, MAX_SEND_WQE_DS as u8) else {
        return bad;
    };
    let Some(dg) = d.datagram else {
        return bad;
    };
    let own_qkey = qp.attrs.qkey.to_ne();
    let (psn, len, imm, solicited) = (
        e.first_psn,
        e.len,
        (e.op == ReqOp::SendImm).then_some(e.wqe.ctrl.imm),
        e.wqe.ctrl.word.solicited(),
    );
    let pdn = qp.pdn;
    let Some(sgid) = dev
        .gids
        .get(dg.sgid_index as usize)
        .filter(|g| g.valid)
        .map(|g| g.gid)
    else {
        return bad;
    };
    let Some(path) = Path::of_datagram(sgid, &dg, qpn) else {
        return bad;
    };
    let Some(dmac) = port::lookup(qp, dev, &path) else {
        return Sent::Waiting;
    };
    let wr_qkey = dg.qkey.to_ne();
    let roce = RoceRepr {
        bth: BthRepr {
            opcode: opcode::find(
                Transport::Ud,
                Op::Send,
                Position::Only,
                imm.is_some(),
                false,
            )
            .unwrap_or_default(),
            solicited,
            pkey: DEFAULT_PKEY,
            dest_qp: dg.dest_qpn.to_ne() & 0xff_ffff,
            psn,
            ..BthRepr::default()
        },
        deth: Some(DethRepr {
            qkey: if wr_qkey & CONTROLLED_QKEY != 0 {
                own_qkey
            } else {
                wr_qkey
            },
            src_qp: qpn,
        }),
        immdt: imm.map(|imm| ImmDtRepr { imm }),
        payload_len: len as usize,
        ..RoceRepr::default()
    };
    let sent = port::send_on(qp, dev, &path, dmac, roce, |qp, dev, buf| {
        if buf.is_empty() {
            return Ok(());
        }
        let Some(e) = qp.req.inflight.front() else {
            return Ok(());
        };
        let Ok(d) = e.wqe.decode(qp.max_inline, MAX_SEND_WQE_DS as u8) else {
            return Err(Syndrome::BadWqe);
        };
        match d.data {
            Data::Inline(bytes) => {
                buf.copy_from_slice(bytes.get(..buf.len()).ok_or(Syndrome::BadWqe)?);
                Ok(())
            }
            Data::Sges(_) => sgl::gather(
                sgl::Keys {
                    mrs: &mut dev.objs.mrs,
                    iommu: &dev.iommu,
                    pdn,
                },
                d.data.sges(),
                0,
                buf,
                0,
            ),
        }
    });
    match sent {
        Ok(()) => {
            if qp.qp_type == QpType::Gsi {
                port::count(qp, dev, counter::MADS_SENT);
            }
            done(qp, dev, WcStatus::Success, Syndrome::None);
            Sent::Yes
        }
        // The memory went away under an accepted WQE.
        Err(syn) => Sent::Failed(WcStatus::LocProtErr, syn),
    }
}

/// Completes the oldest WQE; no acknowledgement will come, so nothing
/// stays outstanding.
fn done(qp: &mut Qp, dev: &mut Dev, status: WcStatus, syndrome: Syndrome) {
    let r = &mut qp.req;
    if let Some(e) = r.inflight.front() {
        r.unacked = psn_add(e.first_psn, e.npkts);
        r.frontier = r.unacked;
    }
    completer::complete_front(qp, dev, status, syndrome, 0);
}

/// A UD packet for QP `qpn`; `ip` is the frame from its IP header on.
pub(crate) fn on_packet(qp: &mut Qp, dev: &mut Dev, roce: &RoceRepr, payload: &[u8], ip: &[u8]) {
    let qpn = qp.qpn;
    let Some(deth) = roce.deth else {
        return;
    };
    let gsi = qp.qp_type == QpType::Gsi;
    if deth.qkey != qp.attrs.qkey.to_ne() {
        log::trace!("QP {qpn}: UD packet with Q_Key {:#x} dropped", deth.qkey);
        port::count(qp, dev, counter::RX_BAD_QKEY);
        if gsi {
            port::count(qp, dev, counter::MADS_DROPPED);
        }
        return;
    }
    let mut grh = [0u8; GRH_LEN];
    let sl = match ip.first().map(|b| b >> 4) {
        Some(4) if ip.len() >= 20 => {
            grh[20..].copy_from_slice(&ip[..20]);
            SL_ROCE_V2_IPV4
        }
        Some(6) if ip.len() >= GRH_LEN => {
            grh.copy_from_slice(&ip[..GRH_LEN]);
            SL_ROCE_V2_IPV6
        }
        _ => return,
    };
    let from = responder::UdSource {
        src_qp: deth.src_qp,
        sl,
    };
    let mut w = responder::take_rwqe(qp);
    let r = receive(qp, dev, &mut w, roce, &grh, payload, from);
    responder::put_rwqe(qp, w);
    match r {
        Ok(()) if gsi => port::count(qp, dev, counter::MADS_RECEIVED),
        Ok(()) => {}
        Err(Refuse::Rnr) => {
            log::trace!("QP {qpn}: UD message dropped: no receive WQE");
            port::count(qp, dev, counter::RX_NO_RECV_WQE);
            if gsi {
                port::count(qp, dev, counter::MADS_DROPPED);
            }
        }
        Err(Refuse::Nak(_, event)) => qp::to_err(qp, dev, event),
    }
}

/// Places one UD message in the next receive WQE and completes it.
fn receive(
    qp: &mut Qp,
    dev: &mut Dev,
    w: &mut wqe::RecvWqe,
    roce: &RoceRepr,
    grh: &[u8; GRH_LEN],
    payload: &[u8],
    from: responder::UdSource,
) -> Result<(), Refuse> {
    responder::next_recv(qp, dev, w)?;
    let code = crate::wire::aeth::NakCode::RemoteOperational;
    let room: u64 = w.sges().iter().map(wqe::sge_len).sum();
    let len = (GRH_LEN + payload.len()) as u64;
    if len > room {
        let err = (WcStatus::LocLenErr, Syndrome::RecvTooSmall);
        return Err(responder::recv_error(qp, dev, w.wr_id, err, code));
    }
    let pdn = qp.recv_pdn;
    for (offset, bytes) in [(0, &grh[..]), (GRH_LEN as u64, payload)] {
        let k = sgl::Keys {
            mrs: &mut dev.objs.mrs,
            iommu: &dev.iommu,
            pdn,
        };
        if let Err(syn) = sgl::scatter(
            k,
            w.sges().iter().copied(),
            offset,
            bytes,
            access::LOCAL_WRITE,
            None,
        ) {
            return Err(responder::recv_error(
                qp,
                dev,
                w.wr_id,
                (WcStatus::LocProtErr, syn),
                code,
            ));
        }
    }
    let imm = roce
        .immdt
        .map_or(responder::Extra::None, |i| responder::Extra::Imm(i.imm));
    let opcode = WcOpcode::Recv;
    responder::complete_recv(
        qp,
        dev,
        w.wr_id,
        opcode,
        len,
        imm,
        roce.bth.solicited,
        Some(from),
    );
    Ok(())
}

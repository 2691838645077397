//! The responder: executes a QP's incoming requests and answers them.
//!
//! Requests are taken in PSN order. A request past the expected PSN is a
//! gap: one PSN-sequence-error NAK per gap, naming the expected PSN. A
//! request before it is a duplicate: a SEND or WRITE is acknowledged
//! again at the last SEND, WRITE or atomic executed (never at a READ's
//! PSN); a READ is answered again from its own RETH (the requester asks
//! for what it still lacks) if it asks for a part of one of the last
//! `max_dest_rd_atomic` READs and atomics held, from that READ's PSNs and
//! under its key, going on with MIDDLE and LAST when it starts past the
//! first; an atomic is answered from those it holds, never executed
//! twice; any other duplicate is dropped.
//!
//! A SEND takes the receive WQE at the receive consumer index with its
//! first packet (no WQE: an RNR NAK with `min_rnr_timer`, the packet not
//! taken) and keeps it across the message's packets; the last packet
//! completes it. A WRITE is checked against its R_Key for its whole DMA
//! length with its first packet; a WRITE with immediate takes a receive
//! WQE with its last packet, before that packet's data lands.
//!
//! Answers leave in PSN order through the QP's outgoing queue: ACKs
//! (coalesced: a run of acknowledgeable requests gets one ACK, for the
//! last), READ responses (segmented by the path MTU, sent a quantum at a
//! time) and atomic ACKs. A NAK first sends everything queued before it.
//! Class C errors (invalid request, remote access, remote operational)
//! NAK the request and move the QP to the error state, as in the device
//! specification's section 14.

use std::sync::atomic::{AtomicU64, Ordering};

use rnic_hw_regs::counters::counter;
use rnic_hw_regs::cqe::{CqeFlags, Syndrome};
use rnic_hw_regs::eqe::EventType;
use rnic_hw_regs::le32;
use rnic_verbs::{access, QpState, WcOpcode, WcStatus};

use super::replay::{self, Again};
use super::sequence::{self, Arrival};
use super::{mtu_bytes, packets, InMsg, RdAtomic, ReadJob};
use crate::cq;
use crate::iommu::Target;
use crate::mw;
use crate::objects::Qp;
use crate::port;
use crate::qp::{self, BadDbrec, Wq};
use crate::sgl::{self, Seg};
use crate::srq::{self, TakeError};
use crate::state::Dev;
use crate::wire::aeth::{AckKind, AethRepr, NakCode, CREDITS_INVALID};
use crate::wire::atomic_ack_eth::AtomicAckEthRepr;
use crate::wire::atomic_eth::AtomicEthRepr;
use crate::wire::bth::{psn_add, psn_diff, BthRepr, DEFAULT_PKEY, PSN_MASK};
use crate::wire::opcode::{self, Op, OpcodeInfo, Position, Transport};
use crate::wire::roce::RoceRepr;
use crate::wqe::{self, RecvError, RecvWqe};

/// Most answers a QP's outgoing queue holds. A requester within its
/// window never has more than `MAX_UNACKED_PSNS` answers due (plus those
/// to duplicates); a peer that ignores the window finds its requests
/// dropped beyond this, as a busy NIC drops them, and sends them again.
const MAX_OUT: usize = 2 * super::MAX_UNACKED_PSNS as usize;

/// An answer waiting in a QP's outgoing queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Out {
    /// An ACK of every request up to `psn`.
    Ack { psn: u32, msn: u32 },
    /// The answer to the atomic at `psn`.
    AtomicAck { psn: u32, msn: u32, orig: u64 },
    /// READ responses.
    Read(ReadJob),
}

impl Out {
    /// The PSN of the (next) packet this answer sends.
    fn psn(&self) -> u32 {
        match self {
            Out::Ack { psn, .. } | Out::AtomicAck { psn, .. } => *psn,
            Out::Read(j) => j.psn,
        }
    }
}

/// Why a request is refused.
pub(super) enum Refuse {
    /// No receive WQE: RNR NAK, the request not taken.
    Rnr,
    /// NAK with this code, and the QP moves to the error state with this
    /// event (none when a receive CQE reports the error).
    Nak(NakCode, Option<(EventType, Syndrome)>),
}

/// A request packet for QP `qpn` (in RTR or RTS), from its requester.
pub(crate) fn on_request(
    qp: &mut Qp,
    dev: &mut Dev,
    info: &OpcodeInfo,
    roce: &RoceRepr,
    payload: &[u8],
) {
    let qpn = qp.qpn;
    let psn = roce.bth.psn;
    match sequence::arrival(&mut qp.resp, psn) {
        Arrival::Expected => {}
        Arrival::Duplicate => {
            port::count(qp, dev, counter::DUPLICATE_REQUESTS);
            return duplicate(qp, dev, info, roce);
        }
        Arrival::Gap { nak: false } => return,
        Arrival::Gap { nak: true } => {
            let epsn = qp.resp.epsn;
            log::trace!("QP {qpn}: PSN {psn:#x} past the expected {epsn:#x}: NAK");
            port::count(qp, dev, counter::SEQ_NAKS_SENT);
            return nak(qp, dev, epsn, AckKind::Nak(NakCode::PsnSeqError));
        }
    }
    if qp.resp.out.len() >= MAX_OUT {
        log::debug!("QP {qpn}: PSN {psn:#x} dropped: {MAX_OUT} answers queued");
        port::count(qp, dev, counter::RX_BUSY_DROPS);
        return;
    }
    // A READ answered later would read memory this request may change:
    // requests execute in order, so what is queued goes first. (A request
    // behind a READ is within the requester's window, so this is at most
    // MAX_UNACKED_PSNS packets.)
    let reads_queued = |qp: &Qp| qp.resp.out.iter().any(|o| matches!(o, Out::Read(_)));
    if reads_queued(qp) {
        let mut all = u32::MAX;
        send_out(qp, dev, &mut all);
        // Answers that could not leave (the requester's MAC not yet
        // resolved) would read memory after this request changed it: it
        // waits, dropped, for the requester to send it again.
        if reads_queued(qp) {
            log::debug!("QP {qpn}: PSN {psn:#x} dropped: a READ before it is not answered yet");
            port::count(qp, dev, counter::RX_BUSY_DROPS);
            return;
        }
    }
    match execute(qp, dev, info, roce, payload) {
        Ok(()) => {
            // A completion the receive CQ could not take moved the QP to
            // ERR: the message is not acknowledged (the requester must not
            // take it as delivered).
            if qp.state != QpState::Err {
                qp.resp.nak_sent = false;
                if roce.bth.ack_req && matches!(info.op, Op::Send | Op::Write) {
                    let msn = qp.resp.msn;
                    queue_ack(qp, dev, psn, msn);
                }
            }
        }
        Err(Refuse::Rnr) => {
            let timer = qp.attrs.min_rnr_timer;
            port::count(qp, dev, counter::RNR_NAKS_SENT);
            nak(qp, dev, psn, AckKind::RnrNak { timer });
        }
        Err(Refuse::Nak(code, event)) => {
            let idx = match code {
                NakCode::RemoteAccess => counter::ACCESS_NAKS_SENT,
                NakCode::RemoteOperational => counter::OP_NAKS_SENT,
                _ => counter::INV_REQ_NAKS_SENT,
            };
            port::count(qp, dev, idx);
            nak(qp, dev, psn, AckKind::Nak(code));
            qp::to_err(qp, dev, event);
        }
    }
}

/// Queues an ACK of `psn`, merged into an ACK already at the back of the
/// queue (coalescing).
fn queue_ack(qp: &mut Qp, dev: &mut Dev, psn: u32, msn: u32) {
    match qp.resp.out.back_mut() {
        Some(Out::Ack { psn: p, msn: m }) => {
            *p = psn;
            *m = msn;
        }
        _ => qp.resp.out.push_back(Out::Ack { psn, msn }),
    }
    dev.kick(qp);
}

/// A duplicate request (before the expected PSN): answered as
/// [`replay::again`] says.
fn duplicate(qp: &mut Qp, dev: &mut Dev, info: &OpcodeInfo, roce: &RoceRepr) {
    let qpn = qp.qpn;
    let mtu = mtu_bytes(qp.attrs.path_mtu);
    match replay::again(&qp.resp, mtu, info.op, roce) {
        // Duplicates until the next request executes all get the same
        // ACK: one queued is enough, however many a peer sends.
        Again::Answer(out @ Out::Ack { .. }) if qp.resp.out.contains(&out) => {}
        Again::Answer(out) => answer_again(qp, dev, out),
        Again::Read {
            job,
            first_psn,
            last_psn,
        } => {
            // Whatever was queued for the same READ goes.
            qp.resp.out.retain(|o| match o {
                Out::Read(j) => {
                    !(psn_diff(j.psn, first_psn) >= 0 && psn_diff(j.psn, last_psn) <= 0)
                }
                _ => true,
            });
            let access = access::REMOTE_READ;
            if check_rkey(qp, dev, job.va, job.rkey, job.bytes, access).is_ok() {
                answer_again(qp, dev, Out::Read(job));
            }
        }
        Again::Drop(why) => {
            log::debug!(
                "QP {qpn}: duplicate {} {:#x} dropped: {why}",
                info.name,
                roce.bth.psn
            );
        }
    }
}

/// Keeps a READ or atomic for its duplicates: the last
/// `max_dest_rd_atomic` of them.
fn hold(qp: &mut Qp, r: RdAtomic) {
    let keep = qp.attrs.max_dest_rd_atomic.max(1) as usize;
    while qp.resp.resources.len() >= keep {
        qp.resp.resources.pop_front();
    }
    qp.resp.resources.push_back(r);
}

/// Queues the answer to a duplicate request in PSN order, ahead of the
/// answers to later requests.
fn answer_again(qp: &mut Qp, dev: &mut Dev, out: Out) {
    let q = &mut qp.resp.out;
    let at = q
        .iter()
        .position(|o| psn_diff(o.psn(), out.psn()) > 0)
        .unwrap_or(q.len());
    q.insert(at, out);
    dev.kick(qp);
}

/// Executes the request at the expected PSN.
pub(super) fn execute(
    qp: &mut Qp,
    dev: &mut Dev,
    info: &OpcodeInfo,
    roce: &RoceRepr,
    payload: &[u8],
) -> Result<(), Refuse> {
    let qpn = qp.qpn;
    let mtu = mtu_bytes(qp.attrs.path_mtu) as usize;
    let invalid = Err(Refuse::Nak(
        NakCode::InvalidRequest,
        Some((EventType::QpReqErr, Syndrome::BadOpcode)),
    ));
    if !sequence::in_sequence(qp.resp.msg, info, payload.len(), mtu) {
        log::debug!(
            "QP {qpn}: {} out of sequence or of bad length {}",
            info.name,
            payload.len()
        );
        return invalid;
    }
    let psn = roce.bth.psn;
    match info.op {
        Op::Send => send(qp, dev, info, roce, payload)?,
        Op::Write => write(qp, dev, info, roce, payload)?,
        Op::ReadRequest => read(qp, dev, roce)?,
        Op::CompareSwap | Op::FetchAdd => atomic(qp, dev, info, roce)?,
        _ => return invalid,
    }
    if info.op != Op::ReadRequest {
        qp.resp.epsn = psn_add(psn, 1);
        qp.resp.ack_psn = qp.resp.epsn;
    }
    Ok(())
}

/// A SEND packet.
fn send(
    qp: &mut Qp,
    dev: &mut Dev,
    info: &OpcodeInfo,
    roce: &RoceRepr,
    payload: &[u8],
) -> Result<(), Refuse> {
    let qpn = qp.qpn;
    if info.pos.starts() {
        let mut w = take_rwqe(qp);
        let r = next_recv(qp, dev, &mut w);
        put_rwqe(qp, w);
        r?;
        qp.resp.msg = Some(InMsg::Send { got: 0 });
    }
    let Some(InMsg::Send { got }) = qp.resp.msg else {
        return Ok(());
    };
    let pdn = qp.recv_pdn;
    let w = qp.resp.rwqe.take().unwrap_or_default();
    let capacity: u64 = w.sges().iter().map(wqe::sge_len).sum();
    let end = got + payload.len() as u64;
    let r = if end > capacity {
        Err(recv_error(
            qp,
            dev,
            w.wr_id,
            (WcStatus::LocLenErr, Syndrome::RecvTooSmall),
            NakCode::InvalidRequest,
        ))
    } else {
        // Another process's memory is written by the message's end.
        sgl::scatter(
            sgl::Keys {
                mrs: &mut dev.objs.mrs,
                iommu: &dev.iommu,
                pdn,
            },
            w.sges().iter().copied(),
            got,
            payload,
            access::LOCAL_WRITE,
            Some(qpn),
        )
        .and_then(|()| match info.pos.ends() {
            true => sgl::flush(&dev.iommu, qpn),
            false => Ok(()),
        })
        .map_err(|syn| {
            recv_error(
                qp,
                dev,
                w.wr_id,
                (WcStatus::LocProtErr, syn),
                NakCode::RemoteOperational,
            )
        })
    };
    let wr_id = w.wr_id;
    put_rwqe(qp, w);
    r?;
    qp.resp.msg = Some(InMsg::Send { got: end });
    if info.pos.ends() {
        let pdn = qp.pdn;
        if let Some(ieth) = roce.ieth {
            // The window to invalidate must be a type 2 window bound to
            // this QP (IBA 9.4.1.1, 10.6.7.2.4): otherwise the receive
            // WQE fails and the request is refused, as rxe does.
            if let Err(syn) = mw::invalidate(dev, qpn, pdn, ieth.rkey, true) {
                let err = (WcStatus::RemInvReqErr, syn);
                return Err(recv_error(qp, dev, wr_id, err, NakCode::InvalidRequest));
            }
        }
        qp.resp.msg = None;
        qp.resp.msn = (qp.resp.msn + 1) & PSN_MASK;
        let extra = match (roce.immdt, roce.ieth) {
            (Some(i), _) => Extra::Imm(i.imm),
            (None, Some(i)) => Extra::Inv(i.rkey),
            (None, None) => Extra::None,
        };
        complete_recv(
            qp,
            dev,
            wr_id,
            WcOpcode::Recv,
            end,
            extra,
            roce.bth.solicited,
            None,
        );
    }
    Ok(())
}

/// A WRITE packet.
fn write(
    qp: &mut Qp,
    dev: &mut Dev,
    info: &OpcodeInfo,
    roce: &RoceRepr,
    payload: &[u8],
) -> Result<(), Refuse> {
    // A WRITE with immediate takes its receive WQE first: receiver not
    // ready is found before the last packet's data lands.
    let mut rwqe = None;
    if info.imm {
        let mut w = take_rwqe(qp);
        if let Err(r) = next_recv(qp, dev, &mut w) {
            put_rwqe(qp, w);
            return Err(r);
        }
        rwqe = Some(w);
    }
    let result = write_data(qp, dev, info, roce, payload, rwqe.as_deref());
    let Some(w) = rwqe else {
        return result;
    };
    let wr_id = w.wr_id;
    put_rwqe(qp, w);
    result?;
    let Some(InMsg::Write { dma_len, .. }) = qp.resp.msg.take() else {
        return Ok(());
    };
    qp.resp.msn = (qp.resp.msn + 1) & PSN_MASK;
    let imm = roce.immdt.map_or(Extra::None, |i| Extra::Imm(i.imm));
    complete_recv(
        qp,
        dev,
        wr_id,
        WcOpcode::RecvRdmaWithImm,
        dma_len,
        imm,
        roce.bth.solicited,
        None,
    );
    Ok(())
}

/// Checks and writes one WRITE packet's data. `rwqe` is the receive WQE a
/// WRITE with immediate took: a failed check consumes it with an error
/// completion that reports the failure.
fn write_data(
    qp: &mut Qp,
    dev: &mut Dev,
    info: &OpcodeInfo,
    roce: &RoceRepr,
    payload: &[u8],
    rwqe: Option<&RecvWqe>,
) -> Result<(), Refuse> {
    let qpn = qp.qpn;
    let refuse = |qp: &mut Qp, dev: &mut Dev, syn: Syndrome| match rwqe {
        Some(w) => {
            let (status, code) = if syn == Syndrome::DmaFault {
                (WcStatus::LocProtErr, NakCode::RemoteOperational)
            } else {
                (WcStatus::LocAccessErr, NakCode::RemoteAccess)
            };
            recv_error(qp, dev, w.wr_id, (status, syn), code)
        }
        None => remote_refusal(qpn, syn),
    };
    if info.pos.starts() {
        let Some(reth) = roce.reth else {
            return Err(Refuse::Nak(NakCode::InvalidRequest, None));
        };
        if reth.dma_len > MAX_DMA_LEN {
            log::debug!("QP {qpn}: WRITE of {} bytes refused", reth.dma_len);
            return Err(Refuse::Nak(
                NakCode::InvalidRequest,
                Some((EventType::QpReqErr, Syndrome::TooLong)),
            ));
        }
        let len = reth.dma_len as u64;
        if let Err(syn) = check_rkey(qp, dev, reth.va, reth.rkey, len, access::REMOTE_WRITE) {
            return Err(refuse(qp, dev, syn));
        }
        qp.resp.msg = Some(InMsg::Write {
            va: reth.va,
            rkey: reth.rkey,
            dma_len: len,
            got: 0,
        });
    }
    let Some(InMsg::Write {
        va,
        rkey,
        dma_len,
        got,
    }) = qp.resp.msg
    else {
        return Ok(());
    };
    let end = got + payload.len() as u64;
    if end > dma_len || (info.pos.ends() && end != dma_len) {
        log::debug!("QP {qpn}: WRITE of {end} bytes against a DMA length of {dma_len}");
        return Err(Refuse::Nak(
            NakCode::InvalidRequest,
            Some((EventType::QpReqErr, Syndrome::TooLong)),
        ));
    }
    if !payload.is_empty() {
        let dst = check_rkey(
            qp,
            dev,
            va.wrapping_add(got),
            rkey,
            payload.len() as u64,
            access::REMOTE_WRITE,
        );
        // Another process's memory may fault only now, or when what its
        // packets queued is written.
        if let Err(syn) = dst.and_then(|seg| sgl::copy_in(&seg, payload, Some(qpn))) {
            return Err(refuse(qp, dev, syn));
        }
    }
    // A WRITE with immediate completes a receive WQE now: its data lands
    // first. A plain WRITE's lands by the end of the step, before its ACK.
    if info.pos.ends() && rwqe.is_some() {
        if let Err(syn) = sgl::flush(&dev.iommu, qp.qpn) {
            return Err(refuse(qp, dev, syn));
        }
    }
    qp.resp.msg = if info.pos.ends() && rwqe.is_none() {
        qp.resp.msn = (qp.resp.msn + 1) & PSN_MASK;
        None
    } else {
        Some(InMsg::Write {
            va,
            rkey,
            dma_len,
            got: end,
        })
    };
    Ok(())
}

/// The longest transfer a RETH may ask for (IBA's 2^31-byte messages;
/// rxe's `check_length`).
const MAX_DMA_LEN: u32 = 1 << 31;

/// A READ request: checked, then answered from the outgoing queue.
fn read(qp: &mut Qp, dev: &mut Dev, roce: &RoceRepr) -> Result<(), Refuse> {
    let qpn = qp.qpn;
    let Some(reth) = roce.reth else {
        return Err(Refuse::Nak(NakCode::InvalidRequest, None));
    };
    let mtu = mtu_bytes(qp.attrs.path_mtu);
    // Longer than a message, or answered in half the PSN space or more.
    if reth.dma_len > MAX_DMA_LEN
        || packets(u64::from(reth.dma_len), mtu) >= super::requester::MAX_READ_PSNS
    {
        log::debug!("QP {qpn}: READ of {} bytes refused", reth.dma_len);
        return Err(Refuse::Nak(
            NakCode::InvalidRequest,
            Some((EventType::QpReqErr, Syndrome::TooLong)),
        ));
    }
    if !accepts_rd_atomic(qp) {
        return Err(Refuse::Nak(
            NakCode::InvalidRequest,
            Some((EventType::QpReqErr, Syndrome::NoRdAtomic)),
        ));
    }
    let len = reth.dma_len as u64;
    if let Err(syn) = check_rkey(qp, dev, reth.va, reth.rkey, len, access::REMOTE_READ) {
        return Err(remote_refusal(qpn, syn));
    }
    let psn = roce.bth.psn;
    let n = packets(len, mtu_bytes(qp.attrs.path_mtu));
    qp.resp.msn = (qp.resp.msn + 1) & PSN_MASK;
    let msn = qp.resp.msn;
    qp.resp.epsn = psn_add(psn, n);
    let last_psn = psn_add(psn, n - 1);
    hold(
        qp,
        RdAtomic::Read {
            first_psn: psn,
            last_psn,
            va: reth.va,
            len,
            rkey: reth.rkey,
        },
    );
    qp.resp.out.push_back(Out::Read(ReadJob {
        psn,
        left: n,
        first: true,
        va: reth.va,
        rkey: reth.rkey,
        bytes: len,
        msn,
    }));
    dev.kick(qp);
    Ok(())
}

/// Compare-and-swap and fetch-and-add on the 8 bytes at the AtomicETH's
/// address (a little-endian u64), atomic with respect to the host CPU too.
fn atomic(qp: &mut Qp, dev: &mut Dev, info: &OpcodeInfo, roce: &RoceRepr) -> Result<(), Refuse> {
    let qpn = qp.qpn;
    let Some(a) = roce.atomic_eth else {
        return Err(Refuse::Nak(NakCode::InvalidRequest, None));
    };
    if !accepts_rd_atomic(qp) {
        return Err(Refuse::Nak(
            NakCode::InvalidRequest,
            Some((EventType::QpReqErr, Syndrome::NoRdAtomic)),
        ));
    }
    if a.va % 8 != 0 {
        return Err(Refuse::Nak(
            NakCode::InvalidRequest,
            Some((EventType::QpReqErr, Syndrome::Misaligned)),
        ));
    }
    let seg = check_rkey(qp, dev, a.va, a.rkey, 8, access::REMOTE_ATOMIC)
        .map_err(|syn| remote_refusal(qpn, syn))?;
    let orig = match &seg.at {
        Target::Host(p) => host_atomic(p.0, info.op, &a)?,
        // Atomic with respect to this device, which runs one operation at
        // a time on another process's memory (IBV_ATOMIC_HCA).
        Target::Process(mem, addr, end) => {
            let mut b = [0u8; 8];
            let io = mem
                .read(*addr, &mut b, (*addr + 8).min(*end))
                .and_then(|()| {
                    let old = u64::from_le_bytes(b);
                    let new = apply(info.op, &a, old);
                    mem.write(*addr, &new.to_le_bytes()).map(|()| old)
                });
            io.map_err(|syn| remote_refusal(qpn, syn))?
        }
    };
    let psn = roce.bth.psn;
    qp.resp.msn = (qp.resp.msn + 1) & PSN_MASK;
    let msn = qp.resp.msn;
    hold(qp, RdAtomic::Atomic { psn, orig });
    qp.resp.out.push_back(Out::AtomicAck { psn, msn, orig });
    dev.kick(qp);
    Ok(())
}

/// The value an atomic leaves at a location that held `old`.
fn apply(op: Op, a: &AtomicEthRepr, old: u64) -> u64 {
    if op == Op::CompareSwap {
        if old == a.compare {
            a.swap_add
        } else {
            old
        }
    } else {
        old.wrapping_add(a.swap_add)
    }
}

/// Runs the atomic `a` on host memory at `p` and returns what it held,
/// atomic with respect to the host CPU too.
fn host_atomic(p: *mut u8, op: Op, a: &AtomicEthRepr) -> Result<u64, Refuse> {
    let p = p.cast::<u64>();
    if p as usize % 8 != 0 {
        // IOVAs keep the host page offset, so this means a broken mapping.
        return Err(Refuse::Nak(
            NakCode::RemoteOperational,
            Some((EventType::QpFatal, Syndrome::DmaFault)),
        ));
    }
    // SAFETY: 8 bytes inside a live mapping (translated under the device
    // lock), 8-byte aligned (checked); host code touching them concurrently
    // is expected to use atomics too, as it would with a real NIC.
    let cell = unsafe { AtomicU64::from_ptr(p) };
    let (Ok(v) | Err(v)) = if op == Op::CompareSwap {
        let (old, new) = (a.compare.to_le(), a.swap_add.to_le());
        cell.compare_exchange(old, new, Ordering::SeqCst, Ordering::SeqCst)
    } else {
        let add = |v: u64| Some(apply(op, a, u64::from_le(v)).to_le());
        cell.fetch_update(Ordering::SeqCst, Ordering::SeqCst, add)
    };
    Ok(u64::from_le(v))
}

/// Sends what QP `qpn`'s outgoing queue holds, at most `budget` packets.
pub(crate) fn send_out(qp: &mut Qp, dev: &mut Dev, budget: &mut u32) {
    while *budget > 0 {
        let Some(&head) = qp.resp.out.front() else {
            return;
        };
        let Some(dmac) = port::resolve(qp, dev) else {
            return;
        };
        match head {
            Out::Ack { psn, msn } => {
                qp.resp.out.pop_front();
                port::count(qp, dev, counter::ACKS_SENT);
                emit_ack(
                    qp,
                    dev,
                    dmac,
                    psn,
                    AckKind::Ack {
                        credits: CREDITS_INVALID,
                    },
                    msn,
                );
            }
            Out::AtomicAck { psn, msn, orig } => {
                qp.resp.out.pop_front();
                let roce = RoceRepr {
                    bth: bth(qp, opcode::RC_ATOMIC_ACKNOWLEDGE, psn),
                    aeth: Some(AethRepr {
                        kind: AckKind::Ack {
                            credits: CREDITS_INVALID,
                        },
                        msn,
                    }),
                    atomic_ack_eth: Some(AtomicAckEthRepr { orig }),
                    ..RoceRepr::default()
                };
                let _ = port::send(qp, dev, dmac, roce, |_, _, _| Ok::<(), ()>(()));
            }
            Out::Read(job) => {
                if !send_read_packet(qp, dev, dmac, job) {
                    return;
                }
            }
        }
        *budget -= 1;
    }
}

/// The BTH of a response on `qp`.
fn bth(qp: &Qp, opcode: u8, psn: u32) -> BthRepr {
    BthRepr {
        opcode,
        pkey: DEFAULT_PKEY,
        dest_qp: qp.attrs.dest_qp_num.to_ne(),
        psn,
        ..BthRepr::default()
    }
}

fn emit_ack(
    qp: &mut Qp,
    dev: &mut Dev,
    dmac: crate::wire::ethernet::EthernetAddress,
    psn: u32,
    kind: AckKind,
    msn: u32,
) {
    let roce = RoceRepr {
        bth: bth(qp, opcode::RC_ACKNOWLEDGE, psn),
        aeth: Some(AethRepr { kind, msn }),
        ..RoceRepr::default()
    };
    let _ = port::send(qp, dev, dmac, roce, |_, _, _| Ok::<(), ()>(()));
}

/// Sends everything queued, then a NAK (or RNR NAK) for `psn`.
fn nak(qp: &mut Qp, dev: &mut Dev, psn: u32, kind: AckKind) {
    let mut all = u32::MAX;
    send_out(qp, dev, &mut all);
    let Some(dmac) = port::resolve(qp, dev) else {
        return;
    };
    let msn = qp.resp.msn;
    emit_ack(qp, dev, dmac, psn, kind, msn);
}

/// Sends the next packet of the READ response at the head of the queue;
/// false if the QP failed instead.
fn send_read_packet(
    qp: &mut Qp,
    dev: &mut Dev,
    dmac: crate::wire::ethernet::EthernetAddress,
    job: ReadJob,
) -> bool {
    let mtu = mtu_bytes(qp.attrs.path_mtu) as u64;
    let n = job.bytes.min(mtu);
    let pos = match (job.first, job.left == 1) {
        (true, true) => Position::Only,
        (true, false) => Position::First,
        (false, true) => Position::Last,
        (false, false) => Position::Middle,
    };
    let Some(code) = opcode::find(Transport::Rc, Op::ReadResponse, pos, false, false) else {
        return false;
    };
    let src = if n == 0 {
        Ok(Seg::EMPTY)
    } else {
        check_rkey(qp, dev, job.va, job.rkey, n, access::REMOTE_READ)
    };
    let seg = match src {
        Ok(seg) => seg,
        Err(syn) => return read_failed(qp, dev, job.psn, syn),
    };
    let roce = RoceRepr {
        bth: bth(qp, code, job.psn),
        aeth: (pos != Position::Middle).then_some(AethRepr {
            kind: AckKind::Ack {
                credits: CREDITS_INVALID,
            },
            msn: job.msn,
        }),
        payload_len: n as usize,
        ..RoceRepr::default()
    };
    // Another process's memory may fault only now. The rest of the READ
    // is read ahead with this packet's bytes.
    let ahead = job.bytes;
    let sent = port::send(qp, dev, dmac, roce, |_, _, buf| {
        sgl::copy_out(&seg, buf, ahead)
    });
    if let Err(syn) = sent {
        return read_failed(qp, dev, job.psn, syn);
    }
    if let Some(Out::Read(j)) = qp.resp.out.front_mut() {
        j.psn = psn_add(j.psn, 1);
        j.left -= 1;
        j.first = false;
        j.va = j.va.wrapping_add(n);
        j.bytes -= n;
        if j.left == 0 {
            qp.resp.out.pop_front();
        }
    }
    true
}

/// The memory of an accepted READ went away (syndrome `syn`) before its
/// response at `psn` was sent: a NAK, and the QP to the error state.
/// Returns false: nothing was sent.
fn read_failed(qp: &mut Qp, dev: &mut Dev, psn: u32, syn: Syndrome) -> bool {
    let Refuse::Nak(code, event) = remote_refusal(qp.qpn, syn) else {
        return false;
    };
    qp.resp.out.pop_front();
    nak(qp, dev, psn, AckKind::Nak(code));
    qp::to_err(qp, dev, event);
    false
}

/// Whether `qp` accepts RDMA READ and atomic requests: a responder with
/// no resources for them (`max_dest_rd_atomic` 0) rejects them as invalid
/// requests, as the InfiniBand spec requires.
fn accepts_rd_atomic(qp: &Qp) -> bool {
    qp.attrs.max_dest_rd_atomic > 0
}

/// Checks `rkey` for `len` bytes at `raddr` with `need` access at QP
/// `qpn` and returns the target memory, or the syndrome of the failed
/// check. A zero-length RDMA operation checks no key, as the InfiniBand
/// spec says.
fn check_rkey(
    qp: &mut Qp,
    dev: &mut Dev,
    raddr: u64,
    rkey: u32,
    len: u64,
    need: u32,
) -> Result<Seg, Syndrome> {
    let qpn = qp.qpn;
    if len == 0 {
        return Ok(Seg::EMPTY);
    }
    let (pdn, qp_access) = (qp.pdn, qp.attrs.qp_access_flags.to_ne());
    // A window grants the rights itself, over the MR it is bound to.
    if let Some(crate::objects::Keyed::Mw(_)) = dev.objs.mrs.get_keyed(rkey) {
        let mr_key = mw::reach(dev, qpn, pdn, rkey, raddr, len, need)?;
        if qp_access & need != need {
            return Err(Syndrome::QpAccessDenied);
        }
        let mr = dev.objs.mrs.get_mut(mr_key).ok_or(Syndrome::BadRkey)?;
        return sgl::mr_range(mr, &dev.iommu, raddr, len);
    }
    match dev.objs.mrs.get_mut(rkey) {
        None => Err(Syndrome::BadRkey),
        Some(mr) if mr.pdn != pdn => Err(Syndrome::PdMismatch),
        Some(mr) if mr.access & need != need => Err(Syndrome::AccessDenied),
        Some(_) if qp_access & need != need => Err(Syndrome::QpAccessDenied),
        Some(mr) => sgl::mr_range(mr, &dev.iommu, raddr, len),
    }
}

/// The refusal of a failed R_Key check on a request that consumes no
/// receive WQE: a remote access error with a `QpAccessErr` event, or, if
/// the memory faulted, a remote operational error with `QpFatal`.
fn remote_refusal(qpn: u32, syn: Syndrome) -> Refuse {
    log::debug!("QP {qpn}: remote access refused: {syn:?}");
    if syn == Syndrome::DmaFault {
        Refuse::Nak(
            NakCode::RemoteOperational,
            Some((EventType::QpFatal, Syndrome::DmaFault)),
        )
    } else {
        Refuse::Nak(NakCode::RemoteAccess, Some((EventType::QpAccessErr, syn)))
    }
}

/// The QP's receive WQE buffer (allocated once per QP).
pub(super) fn take_rwqe(qp: &mut Qp) -> Box<RecvWqe> {
    qp.resp.rwqe.take().unwrap_or_default()
}

pub(super) fn put_rwqe(qp: &mut Qp, w: Box<RecvWqe>) {
    qp.resp.rwqe = Some(w);
}

/// Copies the receive WQE the next message on QP `qpn` fills into `w`:
/// the one at its receive consumer index, not yet consumed, or, on an SRQ,
/// the one it holds or else the next one the SRQ gives out;
/// receiver-not-ready if there is none.
pub(super) fn next_recv(qp: &mut Qp, dev: &mut Dev, w: &mut RecvWqe) -> Result<(), Refuse> {
    let max_sge = dev.cfg.max_sge;
    let fatal = |syn| Refuse::Nak(NakCode::RemoteOperational, Some((EventType::QpFatal, syn)));
    if let Some(srqn) = qp.srqn {
        if qp.resp.srq_held.is_some() {
            // `w` is the QP's buffer: it still holds that WQE.
            return Ok(());
        }
        return match srq::take(dev, srqn, w) {
            Ok(index) => {
                qp.resp.srq_held = Some(index);
                Ok(())
            }
            Err(TakeError::Empty) => Err(Refuse::Rnr),
            Err(TakeError::Broken(syn)) => Err(fatal(syn)),
            Err(TakeError::Malformed { wr_id, index }) => {
                qp.resp.srq_held = Some(index);
                Err(recv_error(
                    qp,
                    dev,
                    wr_id,
                    (WcStatus::LocQpOpErr, Syndrome::BadWqe),
                    NakCode::RemoteOperational,
                ))
            }
        };
    }
    // The doorbell record is read only once the receive WQEs known from it
    // are consumed.
    if qp::known(qp, Wq::Rq) == 0 {
        match qp::published(qp, &dev.iommu, Wq::Rq) {
            Ok(0) => return Err(Refuse::Rnr),
            Ok(_) => {}
            Err(e @ BadDbrec::Unmapped) | Err(e @ BadDbrec::Malformed) => {
                return Err(fatal(e.syndrome()))
            }
        }
    }
    let slot = qp.rq_ci & ((1 << qp.log_rq_wqes) - 1);
    match wqe::fetch_recv(w, &mut qp.rq, &dev.iommu, slot, qp.log_rq_stride, max_sge) {
        Ok(()) => Ok(()),
        Err(RecvError::Fault) => Err(fatal(Syndrome::DmaFault)),
        Err(RecvError::Malformed(wr_id)) => Err(recv_error(
            qp,
            dev,
            wr_id,
            (WcStatus::LocQpOpErr, Syndrome::BadWqe),
            NakCode::RemoteOperational,
        )),
    }
}

/// Retires the receive WQE a message on `qp` filled and returns the
/// `wqe_counter` of its completion: the SRQ WQE it held, or the one at
/// its receive consumer index.
fn retire_recv(qp: &mut Qp) -> u32 {
    match qp.resp.srq_held.take() {
        Some(index) => index.wrapping_add(1),
        None => {
            qp.rq_ci = qp.rq_ci.wrapping_add(1);
            qp.rq_ci
        }
    }
}

/// Consumes the receive WQE `wr_id` with an error completion and refuses
/// the request with `code`; the completion reports the error, so there is
/// an event only if it cannot be written.
pub(super) fn recv_error(
    qp: &mut Qp,
    dev: &mut Dev,
    wr_id: u64,
    (status, syndrome): (WcStatus, Syndrome),
    code: NakCode,
) -> Refuse {
    let qpn = qp.qpn;
    log::debug!("QP {qpn}: receive WQE {wr_id:#x} failed: {status:?} ({syndrome:?})");
    let mut event = None;
    let counter = retire_recv(qp);
    qp.resp.msg = None;
    let c = cq::cqe(
        wr_id,
        qpn,
        counter,
        WcOpcode::Recv.raw(),
        status,
        syndrome as u32,
    );
    let cqn = qp.recv_cqn;
    if cq::write(dev, cqn, &c).is_err() {
        event = Some((EventType::QpFatal, Syndrome::CqError));
    }
    Refuse::Nak(code, event)
}

/// What a receive completion carries besides the data.
#[derive(Debug, Clone, Copy)]
pub(super) enum Extra {
    None,
    /// Immediate data, network order.
    Imm([u8; 4]),
    /// The rkey a SEND with invalidate invalidated (`IBV_WC_WITH_INV`),
    /// carried where immediate data would be.
    Inv(u32),
}

/// Where a UD message came from, as its receive CQE tells.
#[derive(Debug, Clone, Copy)]
pub(super) struct UdSource {
    /// The DETH's source QP.
    pub src_qp: u32,
    /// The packet's network header type (`Cqe::sl`).
    pub sl: u8,
}

/// Consumes the receive WQE `wr_id` with a successful completion. `ud`
/// says where a UD message came from (its GRH heads the buffer); an RC
/// message comes from the connected QP.
#[allow(clippy::too_many_arguments)]
pub(super) fn complete_recv(
    qp: &mut Qp,
    dev: &mut Dev,
    wr_id: u64,
    opcode: WcOpcode,
    len: u64,
    extra: Extra,
    solicited: bool,
    ud: Option<UdSource>,
) {
    let qpn = qp.qpn;
    let counter = retire_recv(qp);
    let mut c = cq::cqe(wr_id, qpn, counter, opcode.raw(), WcStatus::Success, 0);
    c.byte_len = le32::from_ne(len as u32);
    c.src_qp = ud.map_or(qp.attrs.dest_qp_num, |u| le32::from_ne(u.src_qp));
    c.sl = ud.map_or(0, |u| u.sl);
    match extra {
        Extra::Imm(imm) => c.imm = imm,
        Extra::Inv(rkey) => c.imm = rkey.to_be_bytes(),
        Extra::None => {}
    }
    c.flags = CqeFlags::new()
        .with_with_imm(matches!(extra, Extra::Imm(_)))
        .with_with_inv(matches!(extra, Extra::Inv(_)))
        .with_solicited(solicited)
        .with_grh(ud.is_some());
    let cqn = qp.recv_cqn;
    if cq::write(dev, cqn, &c).is_err() {
        qp::to_err(qp, dev, Some((EventType::QpFatal, Syndrome::CqError)));
    }
}

/// Drops the responder's state (the QP left service).
pub(crate) fn clear(qp: &mut Qp) {
    qp.resp.msg = None;
    qp.resp.out.clear();
    qp.resp.resources.clear();
    qp.resp.nak_sent = false;
    qp.resp.drop_msg = false;
}

#[cfg(test)]
mod tests {
    use rnic_hw_regs::counters::counter;
    use rnic_verbs::{QpState, WcStatus};

    use super::super::testbed::{Bed, MR_LEN, PEER_QPN};
    use super::*;
    use crate::wire::opcode::*;

    /// Sends what the responder has queued.
    fn flush(b: &mut Bed) {
        let mut all = u32::MAX;
        send_out(&mut b.qp, &mut b.dev, &mut all);
    }

    fn acked(b: &mut Bed) -> Vec<u32> {
        flush(b);
        b.sent()
            .iter()
            .filter(|s| s.roce.bth.opcode == RC_ACKNOWLEDGE)
            .map(|s| s.roce.bth.psn)
            .collect()
    }

    #[test]
    fn a_duplicate_write_after_a_read_is_acked_at_the_write() {
        let mut b = Bed::rc(4);
        b.qp.resp.epsn = 30;
        b.request(RC_RDMA_WRITE_ONLY, 30, b.reth(0, 1024), &[7; 1024]);
        b.request(RC_RDMA_READ_REQUEST, 31, b.reth(0, 2048), &[]);
        flush(&mut b);
        let answers: Vec<_> = b.sent().iter().map(|s| s.op_psn()).collect();
        assert_eq!(
            answers,
            [
                (RC_ACKNOWLEDGE, 30),
                (RC_RDMA_READ_RESPONSE_FIRST, 31),
                (RC_RDMA_READ_RESPONSE_LAST, 32)
            ]
        );
        assert_eq!(b.qp.resp.epsn, 33);
        // The ACK and the READ's answer were lost: the WRITE comes again.
        b.request(RC_RDMA_WRITE_ONLY, 30, b.reth(0, 1024), &[7; 1024]);
        assert_eq!(acked(&mut b), [30], "never the READ's last PSN, 32");
        assert_eq!(b.qp.counters.0[counter::DUPLICATE_REQUESTS], 1);
    }

    #[test]
    fn a_read_asked_again_from_its_middle_goes_on_with_middle_and_last() {
        let mut b = Bed::rc(4);
        for (i, x) in b.mem()[..3072].iter_mut().enumerate() {
            *x = (i / 1024) as u8 + 1;
        }
        b.request(RC_RDMA_READ_REQUEST, 0, b.reth(0, 3072), &[]);
        flush(&mut b);
        assert_eq!(b.sent().len(), 3);
        // The requester lost the second packet and asks for the rest.
        b.request(RC_RDMA_READ_REQUEST, 1, b.reth(1024, 2048), &[]);
        flush(&mut b);
        let again = b.sent();
        let ops: Vec<_> = again.iter().map(|s| s.op_psn()).collect();
        assert_eq!(
            ops,
            [
                (RC_RDMA_READ_RESPONSE_MIDDLE, 1),
                (RC_RDMA_READ_RESPONSE_LAST, 2)
            ]
        );
        assert!(again[0].payload.iter().all(|&x| x == 2));
        assert!(again[1].payload.iter().all(|&x| x == 3));
        // Not a part of that READ: another key, or past its end.
        let mut other = b.reth(1024, 1024);
        if let Some(r) = other.as_mut() {
            r.rkey ^= 1;
        }
        b.request(RC_RDMA_READ_REQUEST, 1, other, &[]);
        b.request(RC_RDMA_READ_REQUEST, 2, b.reth(2048, 2048), &[]);
        flush(&mut b);
        assert!(b.sent().is_empty(), "dropped");
        assert_eq!(b.qp.state, QpState::Rts);
    }

    #[test]
    fn a_request_behind_a_read_that_cannot_leave_waits_for_it() {
        let mut b = Bed::rc(4);
        b.mem()[..1024].fill(0xaa);
        // The requester's MAC is not known yet: the READ's answer waits.
        let dmac = b.qp.path.and_then(|p| p.dmac);
        if let Some(p) = b.qp.path.as_mut() {
            p.dmac = None;
        }
        b.request(RC_RDMA_READ_REQUEST, 0, b.reth(0, 1024), &[]);
        b.request(RC_RDMA_WRITE_ONLY, 1, b.reth(0, 1024), &[0xbb; 1024]);
        assert!(b.sent().is_empty(), "only an ARP request left");
        assert_eq!(b.qp.counters.0[counter::RX_BUSY_DROPS], 1);
        assert!(b.mem()[..1024].iter().all(|&x| x == 0xaa), "not written");
        assert_eq!(b.qp.resp.epsn, 1);
        // The neighbour answers; the requester sends the WRITE again.
        if let Some(p) = b.qp.path.as_mut() {
            p.dmac = dmac;
        }
        b.request(RC_RDMA_WRITE_ONLY, 1, b.reth(0, 1024), &[0xbb; 1024]);
        flush(&mut b);
        let sent = b.sent();
        assert_eq!(sent[0].op_psn(), (RC_RDMA_READ_RESPONSE_ONLY, 0));
        assert!(sent[0].payload.iter().all(|&x| x == 0xaa), "read first");
        assert_eq!(sent[1].op_psn(), (RC_ACKNOWLEDGE, 1));
        assert!(b.mem()[..1024].iter().all(|&x| x == 0xbb));
    }

    #[test]
    fn a_message_whose_completion_overran_the_cq_is_not_acked() {
        let mut b = Bed::rc(1);
        for i in 0..3 {
            b.post_recv(i, i * 64, 64);
        }
        b.request(RC_SEND_ONLY, 0, None, b"one");
        b.request(RC_SEND_ONLY, 1, None, b"two");
        assert_eq!(acked(&mut b), [1], "coalesced");
        b.request(RC_SEND_ONLY, 2, None, b"three");
        assert_eq!(b.qp.state, QpState::Err, "the CQ overran");
        assert!(acked(&mut b).is_empty());
        let cqes = b.cqes();
        assert_eq!(cqes.len(), 2);
        assert_eq!(cqes[1].status, WcStatus::Success.raw());
        assert_eq!(cqes[1].src_qp.to_ne(), PEER_QPN);
        assert_eq!(&b.mem()[64..67], b"two");
    }

    #[test]
    fn a_write_past_its_key_s_range_is_a_remote_access_error() {
        let mut b = Bed::rc(4);
        let past = MR_LEN as u64 - 512;
        b.request(RC_RDMA_WRITE_ONLY, 0, b.reth(past, 1024), &[1; 1024]);
        let sent = b.sent();
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].op_psn(), (RC_ACKNOWLEDGE, 0));
        let nak = sent[0].roce.aeth.map(|a| a.kind);
        assert_eq!(nak, Some(AckKind::Nak(NakCode::RemoteAccess)));
        assert_eq!(b.qp.state, QpState::Err);
        assert_eq!(b.qp.counters.0[counter::ACCESS_NAKS_SENT], 1);
    }
}

//! The requester: takes WQEs from a QP's send queue and sends their
//! request packets.
//!
//! A WQE is taken (copied out of the send queue, checked against the local
//! rules, given its PSNs) when the window allows: fewer than
//! [`MAX_UNACKED_PSNS`] PSNs outstanding, fewer than `max_rd_atomic`
//! READs and atomics in flight if it is one, none in flight if it is
//! fenced. Its packets go out in PSN order, at most [`QUANTUM`] per turn
//! of the QP. When the completer rewinds (a timeout, a NAK, an RNR NAK)
//! the packets go out again from the rewound PSN.

use rnic_hw_regs::counters::counter;
use rnic_hw_regs::cqe::Syndrome;
use rnic_hw_regs::eqe::EventType;
use rnic_hw_regs::le32;
use rnic_hw_regs::uar::{SqDoorbell, BF_MAX_DS, BF_WQE_BYTES};
use rnic_hw_regs::wqe::{CtrlWord, MAX_SEND_WQE_DS};
use rnic_verbs::{access, QpState, QpType, WcStatus};

use super::{
    completer, mtu_bytes, packets, timers, Inflight, ReqOp, MAX_PKTS_PER_ACK, MAX_UNACKED_PSNS,
    QUANTUM,
};
use crate::mw;
use crate::objects::{BfWqe, Qp};
use crate::port;
use crate::qp::{self, Wq};
use crate::sgl;
use crate::state::{Dev, State};
use crate::wire::atomic_eth::AtomicEthRepr;
use crate::wire::bth::{psn_add, psn_diff, BthRepr, DEFAULT_PKEY};
use crate::wire::ethernet::EthernetAddress;
use crate::wire::ieth::IethRepr;
use crate::wire::immdt::ImmDtRepr;
use crate::wire::opcode::{self, Op, Position, Transport};
use crate::wire::reth::RethRepr;
use crate::wire::roce::RoceRepr;
use crate::wqe::{self, Data, SendWqe, WqeError};

/// An SQ doorbell on page `page`: reads the doorbell record (a malformed
/// or unmapped one moves the QP to the error state with a `QpFatal`
/// event) and queues the send queue to run.
pub(crate) fn sq_doorbell(st: &mut State, page: u32, db: SqDoorbell) {
    let qpn = db.qpn();
    let Some(qp) = st.qps.get_mut(qpn) else {
        log::warn!("SQ doorbell for unknown QP {qpn} ignored");
        return;
    };
    if qp.uar_page != page {
        log::warn!(
            "SQ doorbell for QP {qpn} on page {page}, not its page {}: ignored",
            qp.uar_page
        );
        return;
    }
    // The doorbell record is not in use before the QP leaves RESET; in the
    // error state the flush reads it.
    if !matches!(qp.state, QpState::Reset | QpState::Err) {
        if let Err(e) = qp::published(qp, &st.dev.iommu, Wq::Sq) {
            qp::to_err(qp, &mut st.dev, Some((EventType::QpFatal, e.syndrome())));
            return;
        }
    }
    st.dev.kick(qp);
}

/// A BlueFlame write on doorbell page `page` (spec 8.1): the SQ doorbell
/// `db` and the first bytes of the WQE it announces. When that WQE is the
/// next one the QP takes, whole and with its index, and nothing else is
/// known to be posted, the device takes it from `bytes` and counts it
/// published without reading the ring or the doorbell record; otherwise
/// the write is an SQ doorbell.
pub(crate) fn sq_blueflame(st: &mut State, page: u32, db: SqDoorbell, bytes: &[u8; BF_WQE_BYTES]) {
    let taken = st.qps.get_mut(db.qpn()).is_some_and(|qp| {
        let ctrl = CtrlWord::from_bits(le32::from_ne(u32::from_le_bytes([
            bytes[0], bytes[1], bytes[2], bytes[3],
        ])));
        // The doorbell names the producer index after the WQE, of one BB.
        let index = qp.sq_fetch;
        let usable = qp.uar_page == page
            && qp.state == QpState::Rts
            && qp::known(qp, Wq::Sq) == 0
            && db.pi() == index.wrapping_add(1) as u16
            && ctrl.wqe_index() == index as u8
            && (1..=BF_MAX_DS).contains(&(ctrl.ds() as usize));
        if usable {
            qp.bf = Some(BfWqe {
                index,
                bytes: *bytes,
            });
            qp.sq_pi = index.wrapping_add(1);
        }
        usable
    });
    if taken {
        st.kick(db.qpn());
    } else {
        sq_doorbell(st, page, db);
    }
}

/// One turn of QP `qpn`'s send side: READ responses and ACKs its responder
/// owes, then request packets. Returns whether the QP used its whole
/// quantum (and so should run again).
pub(crate) fn run(qp: &mut Qp, dev: &mut Dev) -> bool {
    let mut budget = QUANTUM;
    super::responder::send_out(qp, dev, &mut budget);
    match qp.state {
        // SQD takes no new WQE, but what is in flight goes on.
        QpState::Rts | QpState::Sqd => {}
        QpState::Err | QpState::Sqe => {
            qp::flush_sq(qp, dev);
            return false;
        }
        _ => return budget == 0,
    }
    if qp.qp_type.is_datagram() {
        super::ud::send(qp, dev, &mut budget);
        return budget == 0;
    }
    if qp.timers.rnr.is_some() {
        return budget == 0;
    }
    let Some(dmac) = port::resolve(qp, dev) else {
        return budget == 0;
    };
    while budget > 0 {
        if !matches!(qp.state, QpState::Rts | QpState::Sqd) {
            break;
        }
        let req = &qp.req;
        if req.send_at == req.inflight.len() && (qp.state != QpState::Rts || !take(qp, dev)) {
            break;
        }
        let req = &qp.req;
        let Some(e) = req.inflight.get(req.send_at) else {
            break;
        };
        if e.error.is_some() {
            // It completes with its error once every WQE before it has.
            if req.send_at == 0 {
                super::completer::fail_front(qp, dev);
            }
            break;
        }
        if e.op.is_local() {
            // Executed when taken, with nothing before it in flight.
            super::completer::complete_front(qp, dev, WcStatus::Success, Syndrome::None, 0);
            continue;
        }
        let psn = next_psn(e);
        if psn_diff(psn, req.unacked) >= MAX_UNACKED_PSNS as i32 {
            break;
        }
        send_packet(qp, dev, dmac);
        budget -= 1;
    }
    // UC waits for no acknowledgement.
    let outstanding = psn_diff(qp.req.frontier, qp.req.unacked) > 0;
    if outstanding
        && qp.timers.retx.is_none()
        && matches!(qp.state, QpState::Rts | QpState::Sqd)
        && qp.qp_type == QpType::Rc
    {
        timers::arm_retx(qp, dev);
    }
    budget == 0
}

/// PSN of the next packet of `e`.
fn next_psn(e: &Inflight) -> u32 {
    if e.op == ReqOp::Read {
        psn_add(e.first_psn, e.recv)
    } else {
        psn_add(e.first_psn, e.sent)
    }
}

/// Takes the next WQE from QP `qpn`'s send queue into its in-flight list,
/// if there is one and the limits allow; returns whether one was taken.
pub(super) fn take(qp: &mut Qp, dev: &mut Dev) -> bool {
    let max_bbs = dev.cfg.max_wqe_bbs;
    let (max_sge, max_msg) = (dev.cfg.max_sge, dev.cfg.max_msg());
    if psn_diff(qp.req.next_psn, qp.req.unacked) >= MAX_UNACKED_PSNS as i32 {
        return false;
    }
    // The doorbell record is read again only once the BBs published by
    // the last producer index accepted from it are taken.
    if qp::known(qp, Wq::Sq) == 0 {
        if let Err(e) = qp::published(qp, &dev.iommu, Wq::Sq) {
            qp::to_err(qp, dev, Some((EventType::QpFatal, e.syndrome())));
            return false;
        }
    }
    let pending = qp::known(qp, Wq::Sq);
    if pending == 0 {
        return false;
    }
    let mut w = dev.wqe_pool.pop().unwrap_or_default();
    let fetched = wqe::fetch(&mut w, qp, &dev.iommu, pending, max_bbs);
    let e = match fetched {
        Err(e) => errored(w, e),
        Ok(()) => match admit(qp, dev, w, max_sge, max_msg) {
            Some(e) => e,
            // The READ/atomic limit or a fence holds the WQE back for now.
            None => return false,
        },
    };
    let req = &mut qp.req;
    qp.sq_fetch = qp.sq_fetch.wrapping_add(e.wqe.bbs);
    req.next_psn = psn_add(req.next_psn, e.npkts);
    if e.op.is_rd_atomic() && e.error.is_none() {
        req.rd_atomic += 1;
    }
    req.inflight.push_back(e);
    true
}

/// A WQE that could not even be decoded: it completes with its error in
/// turn, taking no PSN.
fn errored(mut wqe: Box<SendWqe>, e: WqeError) -> Inflight {
    wqe.bbs = e.bbs;
    Inflight {
        wqe,
        op: ReqOp::Send,
        wr_id: e.wr_id,
        wc_opcode: e.opcode,
        signaled: true,
        len: 0,
        first_psn: 0,
        npkts: 0,
        sent: 0,
        recv: 0,
        error: Some((e.status, e.syndrome)),
    }
}

/// Checks a fetched WQE against the local rules and gives it its PSNs;
/// `None` if the READ/atomic limit or a fence holds it back for now (its
/// buffer goes back to the pool: it is fetched again).
fn admit(
    qp: &mut Qp,
    dev: &mut Dev,
    w: Box<SendWqe>,
    max_sge: u8,
    max_msg: u64,
) -> Option<Inflight> {
    let qpn = qp.qpn;
    let port_mtu = mtu_bytes(dev.cfg.active_mtu.raw()) as u64;
    let (pdn, mtu) = (qp.pdn, mtu_bytes(qp.attrs.path_mtu));
    let ud = qp.qp_type.is_datagram();
    let max_rd = qp.attrs.max_rd_atomic.max(1);
    let ctrl = w.ctrl;
    let mut e = Inflight {
        op: ReqOp::Send,
        wr_id: ctrl.wr_id.to_ne(),
        wc_opcode: wqe::wc_opcode(ctrl.word.opcode()),
        signaled: ctrl.word.signaled() || qp.sq_sig_all,
        len: 0,
        first_psn: qp.req.next_psn,
        npkts: 0,
        sent: 0,
        recv: 0,
        error: None,
        wqe: w,
    };
    // `None`: held back.
    let checked = match e.wqe.decode(qp.max_inline, max_sge) {
        Err(err) => Some(Err(err)),
        Ok(d) => {
            let held = (d.op.is_rd_atomic() && qp.req.rd_atomic >= max_rd)
                || (ctrl.word.fence() && qp.req.rd_atomic > 0)
                // A local operation takes effect in order: once everything
                // before it has completed.
                || (d.op.is_local() && !qp.req.inflight.is_empty());
            e.op = d.op;
            (!held).then(|| match d.op {
                ReqOp::BindMw => mw::bind(dev, qpn, pdn, &d.bind)
                    .map(|()| 0)
                    .map_err(|syn| (WcStatus::MwBindErr, syn)),
                ReqOp::LocalInv => {
                    let rkey = u32::from_be_bytes(ctrl.imm);
                    mw::invalidate(dev, qpn, pdn, rkey, false)
                        .map(|()| 0)
                        .map_err(|syn| (WcStatus::LocQpOpErr, syn))
                }
                _ => local_checks(dev, pdn, &d, max_msg),
            })
        }
    };
    let Some(checked) = checked else {
        dev.recycle_wqe(e.wqe);
        return None;
    };
    match checked.and_then(|len| psns(e.op, len, mtu, ud.then_some(port_mtu)).map(|n| (len, n))) {
        Ok((len, n)) => {
            e.len = len;
            e.npkts = n;
        }
        Err(err) => e.error = Some(err),
    }
    Some(e)
}

/// PSNs a READ's response may take: fewer than half the PSN space.
pub(crate) const MAX_READ_PSNS: u32 = 1 << 23;

/// The PSNs a message of `op` and `len` bytes takes at path MTU `mtu`, on
/// a UD QP if `ud_port_mtu` is its port's MTU; or why it cannot be sent.
fn psns(
    op: ReqOp,
    len: u64,
    mtu: u32,
    ud_port_mtu: Option<u64>,
) -> Result<u32, (WcStatus, Syndrome)> {
    let n = match ud_port_mtu {
        // A UD message longer than the port MTU gets no packet (IBA
        // C10-93.1.1), and no PSN.
        Some(port_mtu) => u32::from(len <= port_mtu),
        None if op.is_atomic() => 1,
        None if op.is_local() => 0,
        None => packets(len, mtu),
    };
    // A READ's response takes all its PSNs at once: 2^23 of them (2^31
    // bytes at MTU 256) are half the PSN space, where a 24-bit PSN can no
    // longer tell before from after.
    if op == ReqOp::Read && n >= MAX_READ_PSNS {
        return Err((WcStatus::LocLenErr, Syndrome::TooLong));
    }
    Ok(n)
}

/// The message length of a decoded WQE, after checking every local SGE.
fn local_checks(
    dev: &mut Dev,
    pdn: u32,
    d: &wqe::Decoded<'_>,
    max_msg: u64,
) -> Result<u64, (WcStatus, Syndrome)> {
    match d.data {
        Data::Inline(bytes) => Ok(bytes.len() as u64),
        Data::Sges(_) => {
            let len: u64 = d.data.sges().map(|s| wqe::sge_len(&s)).sum();
            if len > max_msg {
                return Err((WcStatus::LocLenErr, Syndrome::TooLong));
            }
            // READ responses and atomic results are written locally.
            let need = if d.op.is_rd_atomic() {
                access::LOCAL_WRITE
            } else {
                0
            };
            for s in d.data.sges() {
                sgl::resolve(
                    &mut dev.objs.mrs,
                    &dev.iommu,
                    pdn,
                    s.lkey.to_ne(),
                    s.addr.to_ne(),
                    wqe::sge_len(&s),
                    need,
                )
                .map_err(|syn| (WcStatus::LocProtErr, syn))?;
            }
            Ok(len)
        }
    }
}

/// Sends the next packet of the WQE at `send_at`.
fn send_packet(qp: &mut Qp, dev: &mut Dev, dmac: EthernetAddress) {
    let (pdn, mtu) = (qp.pdn, mtu_bytes(qp.attrs.path_mtu) as u64);
    let dest = qp.attrs.dest_qp_num.to_ne();
    let uc = qp.qp_type == QpType::Uc;
    let req = &mut qp.req;
    let at = req.send_at;
    let noack = req.noack;
    let e = &req.inflight[at];
    let Ok(d) = e.wqe.decode(qp.max_inline, MAX_SEND_WQE_DS as u8) else {
        return;
    };
    let psn = next_psn(e);
    let mut roce = RoceRepr {
        bth: BthRepr {
            pkey: DEFAULT_PKEY,
            dest_qp: dest,
            psn,
            ..BthRepr::default()
        },
        ..RoceRepr::default()
    };
    let raddr = d.raddr.raddr.to_ne();
    let rkey = d.raddr.rkey.to_ne();
    let mut offset = 0;
    let (op, pos) = match e.op {
        ReqOp::Read => {
            // From the first response not yet received: a READ sent again
            // asks only for the rest.
            let off = e.recv as u64 * mtu;
            roce.reth = Some(RethRepr {
                va: raddr.wrapping_add(off),
                rkey,
                dma_len: (e.len - off.min(e.len)) as u32,
            });
            (Op::ReadRequest, Position::Only)
        }
        ReqOp::CmpSwap | ReqOp::FetchAdd => {
            roce.atomic_eth = Some(AtomicEthRepr {
                va: raddr,
                rkey,
                swap_add: d.atomic.swap_add.to_ne(),
                compare: d.atomic.compare.to_ne(),
            });
            let op = if e.op == ReqOp::CmpSwap {
                Op::CompareSwap
            } else {
                Op::FetchAdd
            };
            (op, Position::Only)
        }
        // Done by the requester itself: never sent.
        ReqOp::BindMw | ReqOp::LocalInv => return,
        ReqOp::Send | ReqOp::SendImm | ReqOp::SendInv | ReqOp::Write | ReqOp::WriteImm => {
            let pos = Position::of(e.sent, e.npkts);
            offset = e.sent as u64 * mtu;
            let n = (e.len - offset).min(mtu) as usize;
            roce.payload_len = n;
            let write = matches!(e.op, ReqOp::Write | ReqOp::WriteImm);
            if write && pos.starts() {
                roce.reth = Some(RethRepr {
                    va: raddr,
                    rkey,
                    dma_len: e.len as u32,
                });
            }
            if matches!(e.op, ReqOp::SendImm | ReqOp::WriteImm) && pos.ends() {
                roce.immdt = Some(ImmDtRepr {
                    imm: e.wqe.ctrl.imm,
                });
            }
            if e.op == ReqOp::SendInv && pos.ends() {
                roce.ieth = Some(IethRepr {
                    rkey: u32::from_be_bytes(e.wqe.ctrl.imm),
                });
            }
            roce.bth.solicited = e.wqe.ctrl.word.solicited() && pos.ends();
            let op = if write { Op::Write } else { Op::Send };
            (op, pos)
        }
    };
    let imm = roce.immdt.is_some();
    let transport = if uc { Transport::Uc } else { Transport::Rc };
    let Some(code) = opcode::find(transport, op, pos, imm, roce.ieth.is_some()) else {
        return;
    };
    roce.bth.opcode = code;
    // The last packet of a message asks for an ACK, and so does every
    // MAX_PKTS_PER_ACK-th of a long one, so that the window keeps moving.
    // UC has no ACKs.
    roce.bth.ack_req = !uc && (pos.ends() || noack + 1 >= MAX_PKTS_PER_ACK);
    let psns = match e.op {
        ReqOp::Read => e.npkts - e.recv,
        _ => 1,
    };
    // The payload is read from the WQE in place (decoded again: the frame
    // builder holds the device state), while the MR table is borrowed;
    // the rest of the message will be wanted too.
    let rest = req.inflight[at].len.saturating_sub(offset);
    let sent = port::send(qp, dev, dmac, roce, |qp, dev, buf| {
        if buf.is_empty() {
            return Ok(());
        }
        let Ok(d) = qp.req.inflight[at]
            .wqe
            .decode(qp.max_inline, MAX_SEND_WQE_DS as u8)
        else {
            return Ok(());
        };
        match d.data {
            Data::Inline(bytes) => {
                let chunk = bytes.get(offset as usize..offset as usize + buf.len());
                buf.copy_from_slice(chunk.ok_or(Syndrome::BadWqe)?);
                Ok(())
            }
            Data::Sges(_) => sgl::gather(
                sgl::Keys {
                    mrs: &mut dev.objs.mrs,
                    iommu: &dev.iommu,
                    pdn,
                },
                d.data.sges(),
                offset,
                buf,
                rest,
            ),
        }
    });
    let req = &mut qp.req;
    let e = &mut req.inflight[at];
    if let Err(syn) = sent {
        // The memory went away under an accepted WQE (its MR was
        // deregistered): it fails, in turn.
        e.error = Some((WcStatus::LocProtErr, syn));
        return;
    }
    e.sent += 1;
    if e.sent >= e.to_send() {
        req.send_at += 1;
    }
    req.noack = if roce.bth.ack_req { 0 } else { noack + 1 };
    let retransmit = psn_diff(psn, req.frontier) < 0;
    let end = psn_add(psn, psns);
    if psn_diff(end, req.frontier) > 0 {
        req.frontier = end;
    }
    if uc {
        // Sent is done: a UC WQE completes with its last packet.
        req.unacked = req.frontier;
        if req.send_at > at {
            completer::complete_front(qp, dev, WcStatus::Success, Syndrome::None, 0);
        }
        return;
    }
    if retransmit {
        port::count(qp, dev, counter::RETRANSMITS);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_message_s_psns_and_the_read_that_would_take_half_of_them() {
        let gib2 = 1u64 << 31;
        assert_eq!(
            psns(ReqOp::Write, gib2, 256, None),
            Ok(1 << 23),
            "a WRITE is sent in turns"
        );
        assert_eq!(
            psns(ReqOp::Read, gib2, 256, None),
            Err((WcStatus::LocLenErr, Syndrome::TooLong))
        );
        assert_eq!(psns(ReqOp::Read, gib2 - 256, 256, None), Ok((1 << 23) - 1));
        assert_eq!(psns(ReqOp::Read, gib2, 512, None), Ok(1 << 22));
        assert_eq!(
            psns(ReqOp::Read, 0, 1024, None),
            Ok(1),
            "an empty READ takes a PSN"
        );
        assert_eq!(psns(ReqOp::FetchAdd, 8, 1024, None), Ok(1));
        assert_eq!(psns(ReqOp::BindMw, 0, 1024, None), Ok(0));
        assert_eq!(
            psns(ReqOp::Send, 4097, 1024, Some(4096)),
            Ok(0),
            "UD past the port MTU"
        );
        assert_eq!(psns(ReqOp::Send, 4096, 1024, Some(4096)), Ok(1));
    }
}

/// The requester on a QP and its device parts alone.
#[cfg(test)]
mod machine {
    use rnic_verbs::WrOpcode;

    use super::super::testbed::{ack, Bed, REMOTE_RKEY};
    use super::*;
    use crate::wire::opcode::*;

    /// Runs the QP's send side until it sends nothing more.
    fn drain(b: &mut Bed) -> Vec<super::super::testbed::Sent> {
        let mut all = Vec::new();
        loop {
            run(&mut b.qp, &mut b.dev);
            let sent = b.sent();
            if sent.is_empty() {
                return all;
            }
            all.extend(sent);
        }
    }

    #[test]
    fn a_write_leaves_segmented_with_its_data_and_asks_for_one_ack() {
        let mut b = Bed::rc(4);
        for (i, x) in b.mem()[..2500].iter_mut().enumerate() {
            *x = i as u8;
        }
        b.post_send(WrOpcode::RdmaWrite.raw(), 9, 0, 2500, 0x8000);
        let sent = drain(&mut b);
        let ops: Vec<_> = sent.iter().map(|s| s.op_psn()).collect();
        assert_eq!(
            ops,
            [
                (RC_RDMA_WRITE_FIRST, 0),
                (RC_RDMA_WRITE_MIDDLE, 1),
                (RC_RDMA_WRITE_LAST, 2)
            ]
        );
        let reth = sent[0].roce.reth.expect("a RETH on the first");
        assert_eq!(
            (reth.va, reth.rkey, reth.dma_len),
            (0x8000, REMOTE_RKEY, 2500)
        );
        let asks: Vec<_> = sent.iter().map(|s| s.roce.bth.ack_req).collect();
        assert_eq!(asks, [false, false, true]);
        let data: Vec<u8> = sent.iter().flat_map(|s| s.payload.clone()).collect();
        assert_eq!(data, b.mem()[..2500]);
        assert_eq!(b.qp.req.frontier, 3);
        assert!(b.qp.timers.retx.is_some(), "waiting for the ACK");
    }

    #[test]
    fn the_window_holds_packets_past_max_unacked_psns_until_an_ack_moves_it() {
        let mut b = Bed::rc(4);
        b.qp.attrs.path_mtu = rnic_verbs::Mtu::Mtu256.raw();
        b.post_send(WrOpcode::RdmaWrite.raw(), 1, 0, 64 * 1024, 0);
        let first = drain(&mut b);
        assert_eq!(first.len(), MAX_UNACKED_PSNS as usize);
        // Every MAX_PKTS_PER_ACK-th packet asks for an ACK.
        assert!(first[MAX_PKTS_PER_ACK as usize - 1].roce.bth.ack_req);
        assert!(!first[MAX_PKTS_PER_ACK as usize].roce.bth.ack_req);
        b.respond(RC_ACKNOWLEDGE, 63, ack(0), &[]);
        let more = drain(&mut b);
        assert_eq!(more.len(), 64);
        assert_eq!(more[0].op_psn(), (RC_RDMA_WRITE_MIDDLE, 128));
    }

    #[test]
    fn a_read_asks_once_and_its_responses_land_in_place() {
        let mut b = Bed::rc(4);
        b.post_send(WrOpcode::RdmaRead.raw(), 4, 0x1000, 2048, 0x8000);
        let sent = drain(&mut b);
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].op_psn(), (RC_RDMA_READ_REQUEST, 0));
        let reth = sent[0].roce.reth.expect("a RETH");
        assert_eq!((reth.va, reth.dma_len), (0x8000, 2048));
        assert_eq!(b.qp.req.frontier, 2, "both response PSNs");
        let aeth = ack(1);
        b.respond(RC_RDMA_READ_RESPONSE_FIRST, 0, aeth, &[5; 1024]);
        assert!(b.cqes().is_empty());
        b.respond(RC_RDMA_READ_RESPONSE_LAST, 1, aeth, &[6; 1024]);
        let cqes = b.cqes();
        assert_eq!(cqes.len(), 1);
        assert_eq!(cqes[0].byte_len.to_ne(), 2048);
        assert!(b.mem()[0x1000..0x1400].iter().all(|&x| x == 5));
        assert!(b.mem()[0x1400..0x1800].iter().all(|&x| x == 6));
        assert!(b.qp.timers.retx.is_none(), "nothing outstanding");
    }
}

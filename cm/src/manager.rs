//! The communication manager's state machine (IBA 12.9): one port's
//! communication IDs, its listeners, and what each message and timer does
//! to them. Pure, in smoltcp's manner: a call takes the time and what
//! happened (a consumer's request, a received MAD, the clock), changes the
//! states and returns what to send ([`Out`]) and what to tell the
//! consumer ([`Event`]); nothing here touches a QP, a wire or a clock.
//!
//! The states are IBA's (figure 103, the communication ID's state
//! diagram), on both sides:
//!
//! | Active side | Passive side |
//! | --- | --- |
//! | `connect`: REQ sent, **ReqSent** | REQ received: **ReqRcvd** (event `Req`) |
//! | MRA received: **MraReqRcvd** (waits the MRA's service timeout) | `accept`: REP sent, **RepSent** |
//! | REP received: **RepRcvd** (event `Rep`) | RTU received: **Established** (event `Established`) |
//! | `ready`: RTU sent, **Established** | |
//!
//! and then, either side: `disconnect` sends a DREQ (**DreqSent**), whose
//! DREP (or its last timeout) leads to **TimeWait**; a DREQ received is
//! answered with a DREP at once (event `Disconnect`) and leads to
//! **TimeWait** too, which ends after twice the packet lifetime (event
//! `TimeWaitExit`), when the QP may be reused. A REJ received in any state
//! before Established ends the ID (event `Rejected`).
//!
//! Timers: a REQ, REP or DREQ unanswered is sent again after the response
//! timeout (the peer's CM response time plus twice the packet lifetime,
//! IBA 12.7.4; an MRA adds its service timeout), up to the REQ's
//! `max_cm_retries`; then the side gives up: a REJ with reason `TIMEOUT`
//! for a REQ or REP (event `Timeout`), TimeWait for a DREQ.
//!
//! Duplicates and strays (IBA 12.9.8 and the kernel's `cm.c`): a REQ
//! repeated while its REP is unsent is answered by nothing, while an MRA
//! was sent by that MRA again, and once in TimeWait by a REJ
//! `STALE_CONN`; a REQ for a service nobody listens on gets a REJ
//! `INVALID_SERVICE_ID`; a REP repeated after the RTU gets the RTU again;
//! a DREQ for an ID not known (or repeated in TimeWait) gets a DREP; any
//! other message for an unknown ID or in a state that does not expect it
//! is dropped and counted ([`Stats::dropped`]).
//!
//! Service ID resolution (IBA 12.11), a UD consumer's way to learn a
//! service's QP and Q_Key: `sidr_request` sends a SIDR REQ, sent again on
//! its timer until its SIDR REP comes (event `SidrRep`) or the retries run
//! out (event `Timeout`); a SIDR REQ for a service listened on is the
//! consumer's to answer (event `SidrReq`, then `sidr_reply`), one for any
//! other gets a SIDR REP with status `UNSUPPORTED` at once, and one
//! repeated while the consumer answers is dropped.

use alloc::collections::BTreeMap;
use alloc::vec::Vec;

use crate::drep::DrepRepr;
use crate::dreq::DreqRepr;
use crate::mad::MadHdr;
use crate::mra::{message, MraRepr};
use crate::msg::Message;
use crate::rej::{reason, RejRepr};
use crate::rep::RepRepr;
use crate::req::ReqRepr;
use crate::rtu::RtuRepr;
use crate::sidr::{status, SidrRepRepr, SidrReqRepr};
use crate::MAD_LEN;

/// Nanoseconds of 4.096 µs · 2^`exp`, the IBA's encoding of timeouts (an
/// exponent beyond 31 counts as 31).
pub const fn timeout_ns(exp: u8) -> u64 {
    4096u64 << if exp > 31 { 31 } else { exp }
}

/// A port: its GID, which the other side's MADs are sent to.
pub type Gid = [u8; 16];

/// A MAD to send to QP1 of the port with GID `to`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Out {
    /// The destination port's GID.
    pub to: Gid,
    /// The MAD.
    pub mad: [u8; MAD_LEN],
}

/// A communication ID's state (IBA figure 103).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum State {
    /// Active: REQ sent, no answer yet.
    ReqSent,
    /// Active: the passive side acknowledged the REQ with an MRA.
    MraReqRcvd,
    /// Passive: REQ received, the consumer has not answered.
    ReqRcvd,
    /// Passive: REQ received and an MRA sent for it.
    MraReqSent,
    /// Passive: REP sent, no RTU yet.
    RepSent,
    /// Passive: the active side acknowledged the REP with an MRA.
    MraRepRcvd,
    /// Active: REP received, the consumer has not sent the RTU.
    RepRcvd,
    /// Connected.
    Established,
    /// DREQ sent, no DREP yet.
    DreqSent,
    /// Disconnected; waiting for stray packets to die before the QP is
    /// reused.
    TimeWait,
}

/// What the consumer is told.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// A REQ for a service listened on: [`Manager::accept`] or
    /// [`Manager::reject`] it. `from` is the active port's GID.
    Req {
        /// The new communication ID.
        id: u32,
        /// The port it came from.
        from: Gid,
        /// The REQ.
        req: ReqRepr,
    },
    /// The REP to our REQ: ready the QP, then [`Manager::ready`].
    Rep {
        /// The communication ID.
        id: u32,
        /// The REP.
        rep: RepRepr,
    },
    /// The connection is established (passive: the RTU came).
    Established {
        /// The communication ID.
        id: u32,
    },
    /// The other side refused, or gave up.
    Rejected {
        /// The communication ID.
        id: u32,
        /// The REJ.
        rej: RejRepr,
    },
    /// Our REQ or REP was never answered: the connection is given up.
    Timeout {
        /// The communication ID.
        id: u32,
    },
    /// The other side disconnected (a DREQ came; the DREP has gone).
    Disconnect {
        /// The communication ID.
        id: u32,
        /// The DREQ's private data.
        private_data: [u8; crate::dreq::PRIVATE_DATA_LEN],
    },
    /// Our DREQ was answered (or never was): the connection is down.
    Disconnected {
        /// The communication ID.
        id: u32,
    },
    /// TimeWait is over: the ID is gone and its QP may be reused.
    TimeWaitExit {
        /// The communication ID.
        id: u32,
    },
    /// A SIDR REQ for a service listened on: [`Manager::sidr_reply`]
    /// to it.
    SidrReq {
        /// The resolution's ID on this side.
        id: u32,
        /// The port it came from.
        from: Gid,
        /// The SIDR REQ.
        req: SidrReqRepr,
    },
    /// The answer to our SIDR REQ.
    SidrRep {
        /// The resolution's ID.
        id: u32,
        /// The SIDR REP.
        rep: SidrRepRepr,
    },
}

/// What the manager counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    /// MADs sent again after a timeout.
    pub resent: u64,
    /// Duplicates answered (an MRA, REP's RTU, DREP again).
    pub duplicates: u64,
    /// Messages dropped: unknown IDs, unexpected in the state, malformed.
    pub dropped: u64,
}

/// What the consumer gives to connect.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConnectParams {
    /// The service to connect to.
    pub service_id: u64,
    /// The remote port's GID.
    pub to: Gid,
    /// The REQ (its `local_comm_id` is replaced by the new ID's).
    pub req: ReqRepr,
}

/// One communication ID.
#[derive(Debug, Clone)]
struct Conn {
    state: State,
    /// The other side's ID (0 until known).
    remote_id: u32,
    /// Its port.
    peer: Gid,
    /// Our QP, and the other side's.
    local_qpn: u32,
    remote_qpn: u32,
    /// The MAD sent last, sent again on a timeout.
    last: Option<[u8; MAD_LEN]>,
    /// When to act unless something comes, and what.
    deadline: Option<u64>,
    /// Sends of `last` left.
    retries_left: u8,
    /// How long to wait for an answer.
    response_ns: u64,
    /// How long TimeWait lasts.
    time_wait_ns: u64,
    /// The transaction ID of our messages.
    tid: u64,
    /// The REQ's transaction ID on the passive side (its REP, MRA, REJ
    /// answer with it).
    req_tid: u64,
}

/// A SIDR REQ of ours waiting for its REP.
#[derive(Debug, Clone)]
struct Sidr {
    peer: Gid,
    mad: [u8; MAD_LEN],
    deadline: u64,
    retries_left: u8,
    response_ns: u64,
}

/// A SIDR REQ received, waiting for the consumer's answer.
#[derive(Debug, Clone)]
struct SidrIn {
    peer: Gid,
    request_id: u32,
    service_id: u64,
    tid: u64,
}

/// One port's communication manager.
#[derive(Debug, Default)]
pub struct Manager {
    conns: BTreeMap<u32, Conn>,
    /// The passive side's IDs by the active side's (its port and ID), to
    /// recognize a REQ sent again.
    by_remote: BTreeMap<(Gid, u32), u32>,
    /// Service IDs listened on.
    listeners: BTreeMap<u64, ()>,
    /// Our SIDR REQs waiting for their REP, by request ID.
    sidr_out: BTreeMap<u32, Sidr>,
    /// SIDR REQs received and not yet answered, by our ID, and the IDs by
    /// the requester's port and request ID.
    sidr_in: BTreeMap<u32, SidrIn>,
    sidr_by_remote: BTreeMap<(Gid, u32), u32>,
    next_id: u32,
    next_tid: u64,
    /// This port's CA GUID, put in REQs and REPs.
    ca_guid: u64,
    stats: Stats,
}

/// Why a consumer's request is refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallError {
    /// No such communication ID.
    NoId,
    /// Not in a state that allows it.
    BadState,
    /// Somebody listens on that service ID already.
    InUse,
}

impl Manager {
    /// A manager for the port of CA GUID `ca_guid`, its communication IDs
    /// starting at `seed` (a random one, so that a restarted manager does
    /// not reuse the IDs its predecessor's peers remember).
    pub fn new(ca_guid: u64, seed: u32) -> Manager {
        Manager {
            next_id: seed.max(1),
            next_tid: u64::from(seed) << 32,
            ca_guid,
            ..Manager::default()
        }
    }

    /// What it counted.
    pub fn stats(&self) -> Stats {
        self.stats
    }

    /// ID `id`'s state.
    pub fn state(&self, id: u32) -> Option<State> {
        self.conns.get(&id).map(|c| c.state)
    }

    /// The earliest time a timer is due.
    pub fn next_deadline(&self) -> Option<u64> {
        let conns = self.conns.values().filter_map(|c| c.deadline);
        conns
            .chain(self.sidr_out.values().map(|s| s.deadline))
            .min()
    }

    /// Sends a SIDR REQ for `service_id` to the port `to`, with
    /// `private_data`, sent again every `response_ns` up to `retries`
    /// times. Returns its ID and the MAD.
    pub fn sidr_request(
        &mut self,
        now: u64,
        to: Gid,
        service_id: u64,
        private_data: &[u8],
        response_ns: u64,
        retries: u8,
    ) -> (u32, Out) {
        let id = self.new_id();
        let tid = self.new_tid();
        let mut req = SidrReqRepr {
            request_id: id,
            pkey: 0xffff,
            service_id,
            private_data: [0; crate::sidr::REQ_PRIVATE_DATA_LEN],
        };
        copy_in(&mut req.private_data, private_data);
        let mad = Message::SidrReq(req).emit(tid);
        self.sidr_out.insert(
            id,
            Sidr {
                peer: to,
                mad,
                deadline: now + response_ns,
                retries_left: retries,
                response_ns,
            },
        );
        (id, Out { to, mad })
    }

    /// Answers the SIDR REQ of `id` with `status`, and on success the
    /// service's QP `qpn` and Q_Key `qkey`.
    pub fn sidr_reply(
        &mut self,
        id: u32,
        why: u8,
        qpn: u32,
        qkey: u32,
        private_data: &[u8],
    ) -> Result<Out, CallError> {
        let r = self.sidr_in.remove(&id).ok_or(CallError::NoId)?;
        self.sidr_by_remote.remove(&(r.peer, r.request_id));
        Ok(Out {
            to: r.peer,
            mad: sidr_rep(r.request_id, why, r.service_id, qpn, qkey, private_data).emit(r.tid),
        })
    }

    /// Listens on `service_id`.
    pub fn listen(&mut self, service_id: u64) -> Result<(), CallError> {
        if self.listeners.insert(service_id, ()).is_some() {
            return Err(CallError::InUse);
        }
        Ok(())
    }

    /// Stops listening on `service_id`.
    pub fn unlisten(&mut self, service_id: u64) {
        self.listeners.remove(&service_id);
    }

    fn new_id(&mut self) -> u32 {
        loop {
            let id = self.next_id;
            self.next_id = self.next_id.wrapping_add(1).max(1);
            if !self.conns.contains_key(&id) {
                return id;
            }
        }
    }

    fn new_tid(&mut self) -> u64 {
        self.next_tid = self.next_tid.wrapping_add(1);
        self.next_tid
    }

    /// Sends a REQ: a new ID in ReqSent. Returns the ID and the MAD.
    pub fn connect(&mut self, now: u64, p: ConnectParams) -> (u32, Out) {
        let id = self.new_id();
        let tid = self.new_tid();
        let mut req = p.req;
        req.local_comm_id = id;
        req.service_id = p.service_id;
        req.local_ca_guid = self.ca_guid;
        let response_ns = timeout_ns(req.remote_cm_response_timeout)
            + 2 * timeout_ns(req.primary.local_ack_timeout);
        let mad = Message::Req(req.clone()).emit(tid);
        let conn = Conn {
            state: State::ReqSent,
            remote_id: 0,
            peer: p.to,
            local_qpn: req.local_qpn,
            remote_qpn: 0,
            last: Some(mad),
            deadline: Some(now + response_ns),
            retries_left: req.max_cm_retries,
            response_ns,
            time_wait_ns: 2 * timeout_ns(req.primary.local_ack_timeout),
            tid,
            req_tid: 0,
        };
        self.conns.insert(id, conn);
        (id, Out { to: p.to, mad })
    }

    /// Accepts the REQ of `id` (ReqRcvd or MraReqSent) with `rep` (its
    /// IDs are filled in): sends the REP, RepSent.
    pub fn accept(&mut self, now: u64, id: u32, rep: RepRepr) -> Result<Out, CallError> {
        let ca_guid = self.ca_guid;
        let c = self.conns.get_mut(&id).ok_or(CallError::NoId)?;
        if !matches!(c.state, State::ReqRcvd | State::MraReqSent) {
            return Err(CallError::BadState);
        }
        let rep = RepRepr {
            local_comm_id: id,
            remote_comm_id: c.remote_id,
            local_ca_guid: ca_guid,
            ..rep
        };
        c.local_qpn = rep.local_qpn;
        let mad = Message::Rep(rep).emit(c.req_tid);
        c.state = State::RepSent;
        c.last = Some(mad);
        c.deadline = Some(now + c.response_ns);
        Ok(Out { to: c.peer, mad })
    }

    /// Refuses `id`'s REQ or REP (before Established) with `reason` and
    /// private data: sends a REJ; the ID is gone.
    pub fn reject(&mut self, id: u32, why: u16, private_data: &[u8]) -> Result<Out, CallError> {
        let c = self.conns.get(&id).ok_or(CallError::NoId)?;
        let msg = match c.state {
            State::ReqRcvd | State::MraReqSent => message::REQ,
            State::RepRcvd => message::REP,
            _ => return Err(CallError::BadState),
        };
        let out = Out {
            to: c.peer,
            mad: rej(id, c.remote_id, msg, why, private_data).emit(c.req_tid.max(c.tid)),
        };
        self.remove(id);
        Ok(out)
    }

    /// Tells the active side of `id` that it may wait longer for the REP
    /// (sends an MRA for the REQ with `service_timeout`): MraReqSent.
    pub fn mra(&mut self, id: u32, service_timeout: u8) -> Result<Out, CallError> {
        let c = self.conns.get_mut(&id).ok_or(CallError::NoId)?;
        if c.state != State::ReqRcvd {
            return Err(CallError::BadState);
        }
        let mad = Message::Mra(MraRepr {
            local_comm_id: id,
            remote_comm_id: c.remote_id,
            message: message::REQ,
            service_timeout,
            private_data: [0; crate::mra::PRIVATE_DATA_LEN],
        })
        .emit(c.req_tid);
        c.state = State::MraReqSent;
        c.last = Some(mad);
        Ok(Out { to: c.peer, mad })
    }

    /// The active side's QP is ready: sends the RTU, Established.
    pub fn ready(&mut self, id: u32, private_data: &[u8]) -> Result<Out, CallError> {
        let c = self.conns.get_mut(&id).ok_or(CallError::NoId)?;
        if c.state != State::RepRcvd {
            return Err(CallError::BadState);
        }
        let mut rtu = RtuRepr {
            local_comm_id: id,
            remote_comm_id: c.remote_id,
            private_data: [0; crate::rtu::PRIVATE_DATA_LEN],
        };
        copy_in(&mut rtu.private_data, private_data);
        let mad = Message::Rtu(rtu).emit(c.tid);
        c.state = State::Established;
        // Kept for a REP that comes again (our RTU was lost).
        c.last = Some(mad);
        c.deadline = None;
        Ok(Out { to: c.peer, mad })
    }

    /// Disconnects `id` (Established, or a passive side still waiting
    /// for its RTU): sends a DREQ, DreqSent.
    pub fn disconnect(&mut self, now: u64, id: u32, private_data: &[u8]) -> Result<Out, CallError> {
        let tid = self.new_tid();
        let c = self.conns.get_mut(&id).ok_or(CallError::NoId)?;
        if !matches!(
            c.state,
            State::Established | State::RepSent | State::MraRepRcvd
        ) {
            return Err(CallError::BadState);
        }
        let mut dreq = DreqRepr {
            local_comm_id: id,
            remote_comm_id: c.remote_id,
            remote_qpn: c.remote_qpn,
            private_data: [0; crate::dreq::PRIVATE_DATA_LEN],
        };
        copy_in(&mut dreq.private_data, private_data);
        let mad = Message::Dreq(dreq).emit(tid);
        c.tid = tid;
        c.state = State::DreqSent;
        c.last = Some(mad);
        c.deadline = Some(now + c.response_ns);
        c.retries_left = c.retries_left.max(1);
        Ok(Out { to: c.peer, mad })
    }

    /// How many DREQs wait for their DREP.
    pub fn disconnecting(&self) -> usize {
        self.conns
            .values()
            .filter(|c| c.state == State::DreqSent)
            .count()
    }

    /// A going process's last words, again: every DREQ that waits for
    /// its DREP, and every DREP it sent for a connection still in
    /// TimeWait. No timer of the process will run to repeat a DREQ, and
    /// a peer whose DREP was lost repeats its DREQ to a process that is
    /// gone (the kernel's CM outlives a program and answers it; this one
    /// does not). A repeat is harmless: a DREQ again is answered again
    /// (12.9.6), and a DREP again is dropped.
    pub fn farewells(&mut self) -> Vec<Out> {
        let out: Vec<Out> = self
            .conns
            .values()
            .filter(|c| matches!(c.state, State::DreqSent | State::TimeWait))
            .filter_map(|c| c.last.map(|mad| Out { to: c.peer, mad }))
            .collect();
        self.stats.resent += out.len() as u64;
        out
    }

    fn remove(&mut self, id: u32) {
        if let Some(c) = self.conns.remove(&id) {
            self.by_remote.remove(&(c.peer, c.remote_id));
        }
    }

    fn time_wait(c: &mut Conn, now: u64) {
        c.state = State::TimeWait;
        c.deadline = Some(now + c.time_wait_ns);
    }

    /// A MAD received on QP1 from the port of GID `from`.
    pub fn receive(&mut self, now: u64, from: Gid, mad: &[u8]) -> (Vec<Event>, Vec<Out>) {
        let mut ev = Vec::new();
        let mut out = Vec::new();
        let Ok((hdr, m)) = Message::parse(mad) else {
            self.stats.dropped += 1;
            return (ev, out);
        };
        match m {
            Message::Req(req) => self.on_req(from, &hdr, req, &mut ev, &mut out),
            Message::Mra(mra) => self.on_mra(now, &mra),
            Message::Rej(rej) => match self.conns.get(&rej.remote_comm_id) {
                Some(c)
                    if !matches!(
                        c.state,
                        State::Established | State::DreqSent | State::TimeWait
                    ) =>
                {
                    let id = rej.remote_comm_id;
                    self.remove(id);
                    ev.push(Event::Rejected { id, rej });
                }
                _ => self.stats.dropped += 1,
            },
            Message::Rep(rep) => self.on_rep(from, rep, &mut ev, &mut out),
            Message::Rtu(rtu) => match self.conns.get_mut(&rtu.remote_comm_id) {
                Some(c) if matches!(c.state, State::RepSent | State::MraRepRcvd) => {
                    c.state = State::Established;
                    c.deadline = None;
                    c.last = None;
                    ev.push(Event::Established {
                        id: rtu.remote_comm_id,
                    });
                }
                _ => self.stats.dropped += 1,
            },
            Message::Dreq(dreq) => self.on_dreq(now, from, &hdr, dreq, &mut ev, &mut out),
            Message::Drep(drep) => match self.conns.get_mut(&drep.remote_comm_id) {
                Some(c) if c.state == State::DreqSent => {
                    Self::time_wait(c, now);
                    c.last = None;
                    ev.push(Event::Disconnected {
                        id: drep.remote_comm_id,
                    });
                }
                _ => self.stats.dropped += 1,
            },
            Message::SidrReq(req) => {
                if self.sidr_by_remote.contains_key(&(from, req.request_id)) {
                    // Asked again while the consumer answers.
                    self.stats.duplicates += 1;
                } else if !self.listeners.contains_key(&req.service_id) {
                    let rep = sidr_rep(
                        req.request_id,
                        status::UNSUPPORTED,
                        req.service_id,
                        0,
                        0,
                        &[],
                    );
                    out.push(Out {
                        to: from,
                        mad: rep.emit(hdr.tid),
                    });
                } else {
                    let id = self.new_id();
                    self.sidr_in.insert(
                        id,
                        SidrIn {
                            peer: from,
                            request_id: req.request_id,
                            service_id: req.service_id,
                            tid: hdr.tid,
                        },
                    );
                    self.sidr_by_remote.insert((from, req.request_id), id);
                    ev.push(Event::SidrReq { id, from, req });
                }
            }
            Message::SidrRep(rep) => match self.sidr_out.remove(&rep.request_id) {
                Some(_) => ev.push(Event::SidrRep {
                    id: rep.request_id,
                    rep,
                }),
                None => self.stats.dropped += 1,
            },
        }
        (ev, out)
    }

    fn on_req(
        &mut self,
        from: Gid,
        hdr: &MadHdr,
        req: ReqRepr,
        ev: &mut Vec<Event>,
        out: &mut Vec<Out>,
    ) {
        if let Some(&id) = self.by_remote.get(&(from, req.local_comm_id)) {
            // The same REQ again: its REP or REJ was lost, or is late.
            let c = &self.conns[&id];
            match c.state {
                State::MraReqSent => {
                    if let Some(mad) = c.last {
                        out.push(Out { to: from, mad });
                        self.stats.duplicates += 1;
                    }
                }
                State::TimeWait => {
                    let r = rej(id, req.local_comm_id, message::REQ, reason::STALE_CONN, &[]);
                    out.push(Out {
                        to: from,
                        mad: r.emit(hdr.tid),
                    });
                    self.stats.duplicates += 1;
                }
                // The REP's own timer sends it again; the consumer has it.
                _ => self.stats.duplicates += 1,
            }
            return;
        }
        if !self.listeners.contains_key(&req.service_id) {
            let r = rej(
                0,
                req.local_comm_id,
                message::REQ,
                reason::INVALID_SERVICE_ID,
                &[],
            );
            out.push(Out {
                to: from,
                mad: r.emit(hdr.tid),
            });
            return;
        }
        let id = self.new_id();
        // The active side waits its own response timeout for our answer;
        // ours for its RTU is the REQ's local CM response time.
        let response_ns = timeout_ns(req.local_cm_response_timeout)
            + 2 * timeout_ns(req.primary.local_ack_timeout);
        self.conns.insert(
            id,
            Conn {
                state: State::ReqRcvd,
                remote_id: req.local_comm_id,
                peer: from,
                local_qpn: 0,
                remote_qpn: req.local_qpn,
                last: None,
                deadline: None,
                retries_left: req.max_cm_retries,
                response_ns,
                time_wait_ns: 2 * timeout_ns(req.primary.local_ack_timeout),
                tid: 0,
                req_tid: hdr.tid,
            },
        );
        self.by_remote.insert((from, req.local_comm_id), id);
        ev.push(Event::Req { id, from, req });
    }

    fn on_mra(&mut self, now: u64, mra: &MraRepr) {
        let Some(c) = self.conns.get_mut(&mra.remote_comm_id) else {
            self.stats.dropped += 1;
            return;
        };
        let wait = timeout_ns(mra.service_timeout) + c.response_ns;
        match (c.state, mra.message) {
            (State::ReqSent, message::REQ) => {
                c.state = State::MraReqRcvd;
                c.remote_id = mra.local_comm_id;
                c.deadline = Some(now + wait);
            }
            (State::RepSent, message::REP) => {
                c.state = State::MraRepRcvd;
                c.deadline = Some(now + wait);
            }
            _ => self.stats.dropped += 1,
        }
    }

    fn on_rep(&mut self, from: Gid, rep: RepRepr, ev: &mut Vec<Event>, out: &mut Vec<Out>) {
        let Some(c) = self.conns.get_mut(&rep.remote_comm_id) else {
            self.stats.dropped += 1;
            return;
        };
        match c.state {
            State::ReqSent | State::MraReqRcvd => {
                c.state = State::RepRcvd;
                c.remote_id = rep.local_comm_id;
                c.remote_qpn = rep.local_qpn;
                c.deadline = None;
                c.last = None;
                ev.push(Event::Rep {
                    id: rep.remote_comm_id,
                    rep,
                });
            }
            // Our RTU was lost: the REP came again.
            State::Established if c.remote_id == rep.local_comm_id => {
                if let Some(mad) = c.last {
                    out.push(Out { to: from, mad });
                    self.stats.duplicates += 1;
                }
            }
            _ => self.stats.dropped += 1,
        }
    }

    fn on_dreq(
        &mut self,
        now: u64,
        from: Gid,
        hdr: &MadHdr,
        dreq: DreqRepr,
        ev: &mut Vec<Event>,
        out: &mut Vec<Out>,
    ) {
        let drep = |local: u32, remote: u32| Out {
            to: from,
            mad: Message::Drep(DrepRepr {
                local_comm_id: local,
                remote_comm_id: remote,
                private_data: [0; crate::drep::PRIVATE_DATA_LEN],
            })
            .emit(hdr.tid),
        };
        let id = dreq.remote_comm_id;
        match self.conns.get_mut(&id) {
            Some(c)
                if matches!(
                    c.state,
                    State::Established | State::RepSent | State::MraRepRcvd | State::DreqSent
                ) && c.remote_id == dreq.local_comm_id =>
            {
                let answer = drep(id, c.remote_id);
                Self::time_wait(c, now);
                // Kept for a going process's farewells.
                c.last = Some(answer.mad);
                out.push(answer);
                ev.push(Event::Disconnect {
                    id,
                    private_data: dreq.private_data,
                });
            }
            Some(c) if c.state == State::TimeWait => {
                out.push(drep(id, c.remote_id));
                self.stats.duplicates += 1;
            }
            // An ID we do not know (gone, or never ours): the DREP tells
            // the peer it is down anyway.
            _ => {
                out.push(drep(id, dreq.local_comm_id));
                self.stats.dropped += 1;
            }
        }
    }

    /// Runs the timers due at `now`.
    pub fn poll(&mut self, now: u64) -> (Vec<Event>, Vec<Out>) {
        let mut ev = Vec::new();
        let mut out = Vec::new();
        let due: Vec<u32> = self
            .sidr_out
            .iter()
            .filter(|(_, s)| s.deadline <= now)
            .map(|(&id, _)| id)
            .collect();
        for id in due {
            let Some(s) = self.sidr_out.get_mut(&id) else {
                continue;
            };
            if s.retries_left > 0 {
                s.retries_left -= 1;
                s.deadline = now + s.response_ns;
                out.push(Out {
                    to: s.peer,
                    mad: s.mad,
                });
                self.stats.resent += 1;
            } else {
                self.sidr_out.remove(&id);
                ev.push(Event::Timeout { id });
            }
        }
        let due: Vec<u32> = self
            .conns
            .iter()
            .filter(|(_, c)| c.deadline.is_some_and(|d| d <= now))
            .map(|(&id, _)| id)
            .collect();
        for id in due {
            let Some(c) = self.conns.get_mut(&id) else {
                continue;
            };
            match c.state {
                State::TimeWait => {
                    self.remove(id);
                    ev.push(Event::TimeWaitExit { id });
                }
                State::ReqSent
                | State::MraReqRcvd
                | State::RepSent
                | State::MraRepRcvd
                | State::DreqSent
                    if c.retries_left > 0 =>
                {
                    c.retries_left -= 1;
                    c.deadline = Some(now + c.response_ns);
                    if let Some(mad) = c.last {
                        out.push(Out { to: c.peer, mad });
                        self.stats.resent += 1;
                    }
                }
                State::DreqSent => {
                    Self::time_wait(c, now);
                    c.last = None;
                    ev.push(Event::Disconnected { id });
                }
                State::ReqSent | State::MraReqRcvd | State::RepSent | State::MraRepRcvd => {
                    let msg = if matches!(c.state, State::RepSent | State::MraRepRcvd) {
                        message::REP
                    } else {
                        message::REQ
                    };
                    let r = rej(id, c.remote_id, msg, reason::TIMEOUT, &[]);
                    out.push(Out {
                        to: c.peer,
                        mad: r.emit(c.tid.max(c.req_tid)),
                    });
                    self.remove(id);
                    ev.push(Event::Timeout { id });
                }
                _ => c.deadline = None,
            }
        }
        (ev, out)
    }
}

/// A REJ from `local` to `remote` of `msg` for `why`.
fn rej(local: u32, remote: u32, msg: u8, why: u16, private_data: &[u8]) -> Message {
    let mut r = RejRepr {
        local_comm_id: local,
        remote_comm_id: remote,
        message: msg,
        ari_len: 0,
        reason: why,
        ari: [0; crate::rej::ARI_LEN],
        private_data: [0; crate::rej::PRIVATE_DATA_LEN],
    };
    copy_in(&mut r.private_data, private_data);
    Message::Rej(r)
}

/// A SIDR REP for request `request_id`.
fn sidr_rep(
    request_id: u32,
    why: u8,
    service_id: u64,
    qpn: u32,
    qkey: u32,
    private_data: &[u8],
) -> Message {
    let mut r = SidrRepRepr {
        request_id,
        status: why,
        additional_info_len: 0,
        vendor_id: 0,
        qpn,
        service_id,
        qkey,
        additional_info: [0; crate::sidr::ADDITIONAL_INFO_LEN],
        private_data: [0; crate::sidr::REP_PRIVATE_DATA_LEN],
    };
    copy_in(&mut r.private_data, private_data);
    Message::SidrRep(r)
}

/// Copies as much of `from` as fits into `to`.
fn copy_in(to: &mut [u8], from: &[u8]) {
    let n = from.len().min(to.len());
    to[..n].copy_from_slice(&from[..n]);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mad::{attr, HEADER_LEN};
    use crate::path::PathRepr;
    use crate::req::transport;

    const A: Gid = [0xa; 16];
    const B: Gid = [0xb; 16];
    const SID: u64 = 0x0000_0000_0106_1c06;

    fn req() -> ReqRepr {
        ReqRepr {
            local_comm_id: 0,
            vendor_id: 0,
            service_id: 0,
            local_ca_guid: 0,
            local_qkey: 0,
            local_qpn: 0x11,
            responder_resources: 1,
            local_eecn: 0,
            initiator_depth: 1,
            remote_eecn: 0,
            // 4.096 µs · 2^10 ≈ 4.2 ms, and twice 4.096 µs · 2^8 ≈ 2.1 ms.
            remote_cm_response_timeout: 10,
            transport: transport::RC,
            end_to_end_flow_control: false,
            starting_psn: 0x1234,
            local_cm_response_timeout: 10,
            retry_count: 7,
            pkey: 0xffff,
            path_mtu: 3,
            rdc_exists: false,
            rnr_retry_count: 7,
            max_cm_retries: 2,
            srq: false,
            extended_transport: 0,
            primary: PathRepr {
                local_lid: 0xffff,
                remote_lid: 0xffff,
                local_gid: A,
                remote_gid: B,
                hop_limit: 64,
                local_ack_timeout: 8,
                ..PathRepr::default()
            },
            alternate: PathRepr::default(),
            sap_supported: false,
            private_data: [7; crate::req::PRIVATE_DATA_LEN],
        }
    }

    fn rep(qpn: u32) -> RepRepr {
        RepRepr {
            local_comm_id: 0,
            remote_comm_id: 0,
            local_qkey: 0,
            local_qpn: qpn,
            local_eecn: 0,
            starting_psn: 0x5678,
            vendor_id: 0,
            responder_resources: 1,
            initiator_depth: 1,
            target_ack_delay: 0,
            failover_accepted: 0,
            end_to_end_flow_control: false,
            rnr_retry_count: 7,
            srq: false,
            local_ca_guid: 0,
            private_data: [9; crate::rep::PRIVATE_DATA_LEN],
        }
    }

    fn attr_of(o: &Out) -> u16 {
        MadHdr::parse(&o.mad).unwrap().attr_id
    }

    fn msg(o: &Out) -> Message {
        Message::parse(&o.mad).unwrap().1
    }

    /// An active manager on port A and a passive one on port B, which
    /// listens on SID.
    fn pair() -> (Manager, Manager) {
        let a = Manager::new(0xaaaa, 100);
        let mut b = Manager::new(0xbbbb, 500);
        b.listen(SID).unwrap();
        (a, b)
    }

    /// Connects A to B through REQ, REP and RTU at time 0; returns both
    /// IDs.
    fn established(a: &mut Manager, b: &mut Manager) -> (u32, u32) {
        let (ia, ib, _) = request(a, b, 0);
        let rep = b.accept(0, ib, rep(0x22)).unwrap();
        a.receive(0, B, &rep.mad);
        let rtu = a.ready(ia, &[]).unwrap();
        b.receive(0, A, &rtu.mad);
        (ia, ib)
    }

    /// Connects A to B up to B's Event::Req; returns both IDs.
    fn request(a: &mut Manager, b: &mut Manager, now: u64) -> (u32, u32, Out) {
        let (ia, out) = a.connect(
            now,
            ConnectParams {
                service_id: SID,
                to: B,
                req: req(),
            },
        );
        assert_eq!((out.to, attr_of(&out)), (B, attr::REQ));
        let (ev, back) = b.receive(now, A, &out.mad);
        assert!(back.is_empty());
        let [Event::Req {
            id: ib,
            from,
            req: r,
        }] = &ev[..]
        else {
            panic!("{ev:?}")
        };
        assert_eq!(
            (*from, r.local_comm_id, r.local_qpn, r.local_ca_guid),
            (A, ia, 0x11, 0xaaaa)
        );
        assert_eq!(r.private_data, [7; crate::req::PRIVATE_DATA_LEN]);
        (ia, *ib, out)
    }

    #[test]
    fn connect_accept_ready_disconnect_and_time_wait() {
        let (mut a, mut b) = pair();
        let (ia, ib, _) = request(&mut a, &mut b, 0);
        let rep_out = b.accept(0, ib, rep(0x22)).unwrap();
        assert_eq!((rep_out.to, b.state(ib)), (A, Some(State::RepSent)));
        let (ev, none) = a.receive(1, B, &rep_out.mad);
        assert!(none.is_empty());
        let [Event::Rep { id, rep: r }] = &ev[..] else {
            panic!("{ev:?}")
        };
        assert_eq!(
            (*id, r.local_comm_id, r.remote_comm_id, r.local_qpn),
            (ia, ib, ia, 0x22)
        );
        let rtu = a.ready(ia, b"up").unwrap();
        assert_eq!(
            (attr_of(&rtu), a.state(ia)),
            (attr::RTU, Some(State::Established))
        );
        let (ev, _) = b.receive(2, A, &rtu.mad);
        assert_eq!(ev, [Event::Established { id: ib }]);
        assert_eq!((a.next_deadline(), b.next_deadline()), (None, None));
        // A disconnects; B answers at once and both wait out TimeWait.
        let dreq = a.disconnect(10, ia, b"bye").unwrap();
        let Message::Dreq(d) = msg(&dreq) else {
            panic!()
        };
        assert_eq!(
            (d.local_comm_id, d.remote_comm_id, d.remote_qpn),
            (ia, ib, 0x22)
        );
        let (ev, drep) = b.receive(11, A, &dreq.mad);
        let [Event::Disconnect { id, private_data }] = &ev[..] else {
            panic!("{ev:?}")
        };
        assert_eq!((*id, &private_data[..3]), (ib, &b"bye"[..]));
        assert_eq!((drep.len(), attr_of(&drep[0])), (1, attr::DREP));
        let (ev, _) = a.receive(12, B, &drep[0].mad);
        assert_eq!(ev, [Event::Disconnected { id: ia }]);
        assert_eq!(
            (a.state(ia), b.state(ib)),
            (Some(State::TimeWait), Some(State::TimeWait))
        );
        let end = a.next_deadline().unwrap();
        assert!(a.poll(end - 1).0.is_empty());
        assert_eq!(a.poll(end).0, [Event::TimeWaitExit { id: ia }]);
        assert_eq!(a.state(ia), None);
        let (ev, _) = b.poll(u64::MAX);
        assert_eq!(ev, [Event::TimeWaitExit { id: ib }]);
        assert_eq!(a.stats(), Stats::default());
    }

    #[test]
    fn a_going_process_repeats_its_dreqs_and_dreps() {
        let (mut a, mut b) = pair();
        let (ia, _) = established(&mut a, &mut b);
        assert_eq!(a.disconnecting(), 0);
        let lost = a.disconnect(10, ia, &[]).unwrap();
        assert_eq!(a.disconnecting(), 1);
        // The first DREQ is lost; the repeat is the same MAD.
        let again = a.farewells();
        assert_eq!(again.len(), 1);
        assert_eq!((again[0].to, again[0].mad), (B, lost.mad));
        assert_eq!(a.stats().resent, 1);
        let (_, drep) = b.receive(11, A, &again[0].mad);
        a.receive(12, B, &drep[0].mad);
        assert_eq!((a.disconnecting(), a.state(ia)), (0, Some(State::TimeWait)));
        assert!(a.farewells().is_empty());
        // A third copy, late: B, in TimeWait, answers it again.
        let (ev, again) = b.receive(13, A, &lost.mad);
        assert!(ev.is_empty(), "{ev:?}");
        assert_eq!(again[0].mad, drep[0].mad);
        // B, going, repeats its DREP (A's may have lost it), the same.
        let bye = b.farewells();
        assert_eq!((bye.len(), bye[0].to, bye[0].mad), (1, A, drep[0].mad));
        let (ev, none) = a.receive(14, B, &bye[0].mad);
        assert!(ev.is_empty() && none.is_empty(), "{ev:?}");
        // Once TimeWait is over there is nothing to say.
        b.poll(u64::MAX);
        assert!(b.farewells().is_empty());
    }

    #[test]
    fn a_req_nobody_listens_for_or_the_consumer_refuses_is_rejected() {
        let (mut a, mut b) = pair();
        let (ia, out) = a.connect(
            0,
            ConnectParams {
                service_id: SID + 1,
                to: B,
                req: req(),
            },
        );
        let (ev, rej) = b.receive(0, A, &out.mad);
        assert!(ev.is_empty());
        let (ev, _) = a.receive(0, B, &rej[0].mad);
        let [Event::Rejected { id, rej: r }] = &ev[..] else {
            panic!("{ev:?}")
        };
        assert_eq!(
            (*id, r.reason, r.message),
            (ia, reason::INVALID_SERVICE_ID, message::REQ)
        );
        assert_eq!(a.state(ia), None);
        // The consumer says no, with private data.
        let (ia, ib, _) = request(&mut a, &mut b, 0);
        let rej = b.reject(ib, reason::CONSUMER_DEFINED, b"busy").unwrap();
        assert_eq!(b.state(ib), None);
        let (ev, _) = a.receive(0, B, &rej.mad);
        let [Event::Rejected { id, rej: r }] = &ev[..] else {
            panic!("{ev:?}")
        };
        assert_eq!(
            (*id, r.reason, &r.private_data[..4]),
            (ia, reason::CONSUMER_DEFINED, &b"busy"[..])
        );
        assert_eq!(a.next_deadline(), None);
    }

    #[test]
    fn a_lost_req_is_sent_again_until_the_retries_run_out() {
        let (mut a, mut b) = pair();
        let (ia, first) = a.connect(
            0,
            ConnectParams {
                service_id: SID,
                to: B,
                req: req(),
            },
        );
        let wait = timeout_ns(10) + 2 * timeout_ns(8);
        assert_eq!(a.next_deadline(), Some(wait));
        assert!(a.poll(wait - 1).1.is_empty());
        let (_, again) = a.poll(wait);
        assert_eq!(
            again,
            [Out {
                to: B,
                mad: first.mad
            }],
            "the same REQ"
        );
        // It arrives: B answers, A gets on.
        let (ev, _) = b.receive(wait, A, &again[0].mad);
        let [Event::Req { id: ib, .. }] = ev[..] else {
            panic!()
        };
        let rep = b.accept(wait, ib, rep(0x22)).unwrap();
        assert!(matches!(
            a.receive(wait, B, &rep.mad).0[..],
            [Event::Rep { .. }]
        ));
        assert_eq!(a.stats().resent, 1);
        // Another REQ nobody answers: two retries, then a REJ and Timeout.
        let (ia2, _) = a.connect(
            0,
            ConnectParams {
                service_id: SID,
                to: B,
                req: req(),
            },
        );
        assert_ne!(ia2, ia);
        let mut sent = 0;
        let t = loop {
            let t = a.next_deadline().unwrap();
            let (ev, out) = a.poll(t);
            if let [Event::Timeout { id }] = ev[..] {
                assert_eq!(id, ia2);
                let Message::Rej(r) = msg(&out[0]) else {
                    panic!()
                };
                assert_eq!((r.reason, r.local_comm_id), (reason::TIMEOUT, ia2));
                break t;
            }
            sent += out.len();
        };
        assert_eq!((sent, a.state(ia2)), (2, None));
        assert!(t >= 3 * wait);
    }

    #[test]
    fn an_mra_buys_time_and_a_repeated_req_gets_it_again() {
        let (mut a, mut b) = pair();
        let (ia, ib, req_out) = request(&mut a, &mut b, 0);
        let mra = b.mra(ib, 20).unwrap();
        a.receive(0, B, &mra.mad);
        assert_eq!(a.state(ia), Some(State::MraReqRcvd));
        let deadline = a.next_deadline().unwrap();
        assert!(
            deadline > timeout_ns(20),
            "the MRA's service timeout counts"
        );
        // The REQ again (A's timer, or the wire): B repeats its MRA.
        let (ev, out) = b.receive(1, A, &req_out.mad);
        assert!(ev.is_empty());
        assert_eq!(out, core::slice::from_ref(&mra));
        assert_eq!(b.stats().duplicates, 1);
        // Then accepts; A goes on.
        let rep = b.accept(2, ib, rep(0x22)).unwrap();
        assert!(matches!(
            a.receive(3, B, &rep.mad).0[..],
            [Event::Rep { .. }]
        ));
    }

    #[test]
    fn a_lost_rtu_makes_the_rep_come_again_and_the_rtu_with_it() {
        let (mut a, mut b) = pair();
        let (ia, ib, _) = request(&mut a, &mut b, 0);
        let rep = b.accept(0, ib, rep(0x22)).unwrap();
        a.receive(0, B, &rep.mad);
        let rtu = a.ready(ia, &[]).unwrap();
        // The RTU is lost: B's timer sends the REP again.
        let t = b.next_deadline().unwrap();
        let (_, again) = b.poll(t);
        assert_eq!(again, [rep]);
        let (ev, out) = a.receive(t, B, &again[0].mad);
        assert!(ev.is_empty());
        assert_eq!(out, [rtu]);
        assert_eq!(
            b.receive(t, A, &out[0].mad).0,
            [Event::Established { id: ib }]
        );
        assert_eq!(a.stats().duplicates, 1);
    }

    #[test]
    fn disconnects_crossing_unknown_ids_and_repeats_are_answered() {
        let (mut a, mut b) = pair();
        let (ia, ib) = established(&mut a, &mut b);
        // Both disconnect at once: each answers the other's DREQ.
        let da = a.disconnect(1, ia, &[]).unwrap();
        let db = b.disconnect(1, ib, &[]).unwrap();
        let (ev_b, drep_b) = b.receive(2, A, &da.mad);
        let (ev_a, drep_a) = a.receive(2, B, &db.mad);
        assert!(matches!(ev_a[..], [Event::Disconnect { id, .. }] if id == ia));
        assert!(matches!(ev_b[..], [Event::Disconnect { id, .. }] if id == ib));
        assert_eq!(
            (a.state(ia), b.state(ib)),
            (Some(State::TimeWait), Some(State::TimeWait))
        );
        // The DREPs find TimeWait: dropped. A repeated DREQ gets its DREP
        // again.
        assert!(a.receive(3, B, &drep_b[0].mad).0.is_empty());
        assert!(b.receive(3, A, &drep_a[0].mad).0.is_empty());
        let (_, again) = b.receive(4, A, &da.mad);
        assert_eq!(attr_of(&again[0]), attr::DREP);
        // A DREQ for an ID nobody has: a DREP all the same.
        let mut stray = da.mad;
        stray[HEADER_LEN + 4..HEADER_LEN + 8].copy_from_slice(&0x7777u32.to_be_bytes());
        let (ev, out) = b.receive(5, A, &stray);
        assert!(ev.is_empty());
        let Message::Drep(d) = msg(&out[0]) else {
            panic!()
        };
        assert_eq!(d.local_comm_id, 0x7777);
        // A REQ repeated in TimeWait: stale.
        let mut old = Manager::new(0xaaaa, 100);
        let (_, req_again) = old.connect(
            0,
            ConnectParams {
                service_id: SID,
                to: B,
                req: req(),
            },
        );
        let (_, stale) = b.receive(6, A, &req_again.mad);
        let Message::Rej(r) = msg(&stale[0]) else {
            panic!()
        };
        assert_eq!(r.reason, reason::STALE_CONN);
    }

    #[test]
    fn strays_and_calls_out_of_turn_change_nothing() {
        let (mut a, mut b) = pair();
        assert_eq!(b.listen(SID), Err(CallError::InUse));
        assert_eq!(a.accept(0, 1, rep(1)), Err(CallError::NoId));
        let (ia, ib, _) = request(&mut a, &mut b, 0);
        assert_eq!(a.ready(ia, &[]), Err(CallError::BadState));
        assert_eq!(b.disconnect(0, ib, &[]), Err(CallError::BadState));
        assert_eq!(
            a.reject(ia, reason::CONSUMER_DEFINED, &[]),
            Err(CallError::BadState)
        );
        // An RTU, a DREP and a REP for IDs nobody has; a MAD of another
        // class; bytes that are no MAD.
        let rtu = Message::Rtu(RtuRepr {
            local_comm_id: 5,
            remote_comm_id: 0x9999,
            private_data: [0; crate::rtu::PRIVATE_DATA_LEN],
        })
        .emit(1);
        assert_eq!(b.receive(0, A, &rtu), (Vec::new(), Vec::new()));
        let mut other = rtu;
        other[1] = 0x03;
        assert_eq!(b.receive(0, A, &other), (Vec::new(), Vec::new()));
        assert_eq!(b.receive(0, A, &[1, 2, 3]), (Vec::new(), Vec::new()));
        assert_eq!(b.stats().dropped, 3);
        assert_eq!(
            (a.state(ia), b.state(ib)),
            (Some(State::ReqSent), Some(State::ReqRcvd))
        );
    }

    #[test]
    fn sidr_resolves_a_service_or_says_there_is_none() {
        let (mut a, mut b) = pair();
        let (ia, q) = a.sidr_request(0, B, SID, b"hdr", 1000, 1);
        let (ev, none) = b.receive(0, A, &q.mad);
        assert!(none.is_empty());
        let [Event::SidrReq {
            id: ib,
            from,
            req: r,
        }] = &ev[..]
        else {
            panic!("{ev:?}")
        };
        assert_eq!(
            (*from, r.request_id, r.service_id, &r.private_data[..3]),
            (A, ia, SID, &b"hdr"[..])
        );
        // Asked again before B answers: nothing more.
        assert_eq!(b.receive(1, A, &q.mad), (Vec::new(), Vec::new()));
        let rep = b
            .sidr_reply(*ib, status::SUCCESS, 0x33, 0x0123_4567, &[])
            .unwrap();
        assert_eq!(
            b.sidr_reply(*ib, status::SUCCESS, 0, 0, &[]),
            Err(CallError::NoId)
        );
        let (ev, _) = a.receive(2, B, &rep.mad);
        let [Event::SidrRep { id, rep: p }] = &ev[..] else {
            panic!("{ev:?}")
        };
        assert_eq!(
            (*id, p.status, p.qpn, p.qkey, p.service_id),
            (ia, 0, 0x33, 0x0123_4567, SID)
        );
        assert_eq!(a.next_deadline(), None);
        // Nobody listens: UNSUPPORTED at once.
        let (_, q) = a.sidr_request(3, B, SID + 1, &[], 1000, 1);
        let (ev, rep) = b.receive(3, A, &q.mad);
        assert!(ev.is_empty());
        let Message::SidrRep(p) = msg(&rep[0]) else {
            panic!()
        };
        assert_eq!(p.status, status::UNSUPPORTED);
        // Nobody answers: sent again once, then Timeout.
        let (ic, first) = a.sidr_request(10, [0xc; 16], SID, &[], 1000, 1);
        let (ev, _) = a.poll(1009);
        assert!(ev.is_empty());
        let (_, again) = a.poll(1010);
        assert_eq!(again, [first]);
        let (ev, _) = a.poll(2010);
        assert!(ev.contains(&Event::Timeout { id: ic }), "{ev:?}");
    }
}

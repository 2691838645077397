//! Every deadline of the device on one heap, against the device clock.
//!
//! Each QP keeps its deadlines ([`super::QpTimers`]) and has at most one
//! entry queued for the earliest of them: moving a deadline later (a
//! retransmit timer restarted by an ACK) queues nothing; the queued entry
//! fires, finds nothing due, and queues the QP's next deadline. Entries
//! of destroyed QPs, or of QPNs reused since, find nothing due either.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::state::State;

use super::{ack_timeout_ns, completer};

/// The device's timer heap: (deadline, QPN), earliest first.
#[derive(Debug, Default)]
pub(crate) struct Timers {
    heap: BinaryHeap<Reverse<(u64, u32)>>,
}

impl Timers {
    /// The earliest queued deadline.
    pub(crate) fn next(&self) -> Option<u64> {
        self.heap.peek().map(|Reverse((t, _))| *t)
    }

    pub(crate) fn clear(&mut self) {
        self.heap.clear();
    }
}

/// Makes sure QP `qpn` has an entry queued no later than `at`.
fn queue(st: &mut State, qpn: u32, at: u64) {
    let Some(qp) = st.objs.qps.get_mut(qpn) else {
        return;
    };
    if qp.timers.queued.is_some_and(|q| q <= at) {
        return;
    }
    qp.timers.queued = Some(at);
    st.timers.heap.push(Reverse((at, qpn)));
}

/// (Re)starts QP `qpn`'s retransmit timer: it fires one local ACK timeout
/// from `now`. A QP whose `timeout` is 0 waits forever.
pub(crate) fn arm_retx(st: &mut State, qpn: u32, now: u64) {
    let Some(qp) = st.objs.qps.get_mut(qpn) else {
        return;
    };
    let Some(t) = ack_timeout_ns(qp.attrs.timeout) else {
        qp.timers.retx = None;
        return;
    };
    qp.timers.retx = Some(now + t);
    queue(st, qpn, now + t);
}

/// Stops QP `qpn`'s retransmit timer.
pub(crate) fn stop_retx(st: &mut State, qpn: u32) {
    if let Some(qp) = st.objs.qps.get_mut(qpn) {
        qp.timers.retx = None;
    }
}

/// Holds QP `qpn`'s requester until `at` (an RNR NAK's wait).
pub(crate) fn arm_rnr(st: &mut State, qpn: u32, at: u64) {
    if let Some(qp) = st.objs.qps.get_mut(qpn) {
        qp.timers.rnr = Some(at);
        queue(st, qpn, at);
    }
}

/// Runs QP `qpn`'s requester again at `at` to ask its neighbour again.
pub(crate) fn arm_resolve(st: &mut State, qpn: u32, at: u64) {
    if let Some(qp) = st.objs.qps.get_mut(qpn) {
        if qp.timers.resolve.map_or(true, |r| r > at) {
            qp.timers.resolve = Some(at);
        }
        queue(st, qpn, at);
    }
}

/// Fires every deadline due at `now`.
pub(crate) fn run_due(st: &mut State, now: u64) {
    while let Some(&Reverse((at, qpn))) = st.timers.heap.peek() {
        if at > now {
            return;
        }
        st.timers.heap.pop();
        let Some(qp) = st.objs.qps.get_mut(qpn) else {
            continue;
        };
        if qp.timers.queued != Some(at) {
            // Superseded by an earlier entry of the same QP.
            continue;
        }
        qp.timers.queued = None;
        let t = qp.timers;
        if t.rnr.is_some_and(|d| d <= now) {
            qp.timers.rnr = None;
            st.kick(qpn);
        }
        if let Some(qp) = st.objs.qps.get_mut(qpn) {
            if t.resolve.is_some_and(|d| d <= now) {
                qp.timers.resolve = None;
                st.kick(qpn);
            }
        }
        if t.retx.is_some_and(|d| d <= now) {
            if let Some(qp) = st.objs.qps.get_mut(qpn) {
                qp.timers.retx = None;
            }
            completer::on_timeout(st, qpn, now);
        }
        // Queue whatever is still ahead.
        if let Some(qp) = st.objs.qps.get(qpn) {
            let t = qp.timers;
            if let Some(next) = [t.retx, t.rnr, t.resolve].into_iter().flatten().min() {
                queue(st, qpn, next);
            }
        }
    }
}

//! Every deadline of the device on one heap, against the device clock.
//!
//! Each QP keeps its deadlines ([`super::QpTimers`]) and has at most one
//! entry queued for the earliest of them: moving a deadline later (a
//! retransmit timer restarted by an ACK) queues nothing; the queued entry
//! fires, finds nothing due, and queues the QP's next deadline. Entries
//! of destroyed QPs, or of QPNs reused since, find nothing due either.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::objects::Qp;
use crate::state::{Dev, State};

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

/// Makes sure `qp` has an entry queued no later than `at`.
fn queue(qp: &mut Qp, dev: &mut Dev, at: u64) {
    if qp.timers.queued.is_some_and(|q| q <= at) {
        return;
    }
    qp.timers.queued = Some(at);
    dev.timers.heap.push(Reverse((at, qp.qpn)));
}

/// (Re)starts `qp`'s retransmit timer: it fires one local ACK timeout
/// from now. A QP whose `timeout` is 0 waits forever.
pub(crate) fn arm_retx(qp: &mut Qp, dev: &mut Dev) {
    let Some(t) = ack_timeout_ns(qp.attrs.timeout) else {
        qp.timers.retx = None;
        return;
    };
    let at = dev.now + t;
    qp.timers.retx = Some(at);
    queue(qp, dev, at);
}

/// Stops `qp`'s retransmit timer.
pub(crate) fn stop_retx(qp: &mut Qp) {
    qp.timers.retx = None;
}

/// Holds `qp`'s requester until `at` (an RNR NAK's wait).
pub(crate) fn arm_rnr(qp: &mut Qp, dev: &mut Dev, at: u64) {
    qp.timers.rnr = Some(at);
    queue(qp, dev, at);
}

/// Runs `qp`'s requester again at `at` to ask its neighbour again.
pub(crate) fn arm_resolve(qp: &mut Qp, dev: &mut Dev, at: u64) {
    if qp.timers.resolve.map_or(true, |r| r > at) {
        qp.timers.resolve = Some(at);
    }
    queue(qp, dev, at);
}

/// Fires every deadline due at `now`.
pub(crate) fn run_due(st: &mut State, now: u64) {
    while let Some(&Reverse((at, qpn))) = st.dev.timers.heap.peek() {
        if at > now {
            return;
        }
        st.dev.timers.heap.pop();
        let Some((qp, dev)) = st.parts(qpn) else {
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
            dev.kick(qp);
        }
        if t.resolve.is_some_and(|d| d <= now) {
            qp.timers.resolve = None;
            dev.kick(qp);
        }
        if t.retx.is_some_and(|d| d <= now) {
            qp.timers.retx = None;
            completer::on_timeout(qp, dev);
        }
        // Queue whatever is still ahead.
        let t = qp.timers;
        if let Some(next) = [t.retx, t.rnr, t.resolve].into_iter().flatten().min() {
            queue(qp, dev, next);
        }
    }
}

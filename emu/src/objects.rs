//! Object tables: protection domains, memory regions, completion queues,
//! shared receive queues and queue pairs, indexed by their numbers.

use std::collections::VecDeque;

use rnic_hw_regs::cmd::QpAttrs;
use rnic_hw_regs::uar::CqArmCmd;
use rnic_verbs::{QpState, QpType};

use crate::counters::Counters;
use crate::eq::EventQueue;
use crate::iommu::DmaRange;
use crate::port::Path;
use crate::transport::{QpTimers, ReqState, RespState};

/// A table of objects numbered from `first` to `first + capacity - 1`.
/// It grows as objects are created, never beyond its peak population, so a
/// device configured for 2^24 QPs costs nothing until they exist. A new
/// object gets, in O(1), the least recently freed number, else the next
/// number never used: a number is not handed out again at once, so frames
/// still in flight to a destroyed QP are less likely to reach its
/// successor. Each object belongs to the user context that created it
/// (uid 0: none). The first numbers may be reserved: objects get them
/// only by name ([`Table::insert_reserved`]), never as free numbers (the
/// QP table's QPN 1, the general services QP's).
#[derive(Debug)]
pub(crate) struct Table<T> {
    slots: Vec<Option<T>>,
    owners: Vec<u32>,
    /// Indices of free slots below `slots.len()`, least recently freed
    /// first.
    free: VecDeque<u32>,
    first: u32,
    capacity: u32,
    /// Numbers `first .. first + reserved` are reserved.
    reserved: u32,
}

impl<T> Table<T> {
    /// A table of numbers `first .. end`.
    pub(crate) fn new(first: u32, end: u32) -> Self {
        Self::reserving(first, 0, end)
    }

    /// A table of numbers `first .. end` whose first `reserved` numbers
    /// are taken only by name.
    pub(crate) fn reserving(first: u32, reserved: u32, end: u32) -> Self {
        let capacity = end.saturating_sub(first);
        let reserved = reserved.min(capacity);
        Self {
            slots: (0..reserved).map(|_| None).collect(),
            owners: vec![0; reserved as usize],
            free: VecDeque::new(),
            first,
            capacity,
            reserved,
        }
    }

    /// Stores `v` under the reserved number `n`, created by context
    /// `uid`; `false` (and nothing stored) if `n` is not reserved or
    /// already holds an object.
    pub(crate) fn insert_reserved(&mut self, n: u32, uid: u32, v: T) -> bool {
        let Some(i) = n.checked_sub(self.first).filter(|&i| i < self.reserved) else {
            return false;
        };
        let slot = &mut self.slots[i as usize];
        if slot.is_some() {
            return false;
        }
        *slot = Some(v);
        self.owners[i as usize] = uid;
        true
    }

    /// The number the next object gets, if any is free.
    pub(crate) fn free_number(&self) -> Option<u32> {
        let i = match self.free.front() {
            Some(&i) => i,
            None => {
                let len = self.slots.len() as u32;
                (len < self.capacity).then_some(len)?
            }
        };
        Some(self.first + i)
    }

    /// Stores `v` under number `n`, which [`Table::free_number`] just
    /// returned, created by context `uid`.
    pub(crate) fn insert(&mut self, n: u32, uid: u32, v: T) {
        debug_assert_eq!(Some(n), self.free_number());
        let i = n - self.first;
        if self.free.front() == Some(&i) {
            self.free.pop_front();
            self.slots[i as usize] = Some(v);
            self.owners[i as usize] = uid;
        } else {
            self.slots.push(Some(v));
            self.owners.push(uid);
        }
    }

    /// Whether object `n` exists and belongs to context `uid`: another
    /// context's objects are invisible to its commands.
    pub(crate) fn owned(&self, n: u32, uid: u32) -> bool {
        self.index(n)
            .is_some_and(|i| self.slots[i].is_some() && self.owners[i] == uid)
    }

    /// The numbers of context `uid`'s objects.
    pub(crate) fn numbers_of(&self, uid: u32) -> Vec<u32> {
        self.numbers()
            .into_iter()
            .filter(|&n| self.owned(n, uid))
            .collect()
    }

    fn index(&self, n: u32) -> Option<usize> {
        let i = n.checked_sub(self.first)? as usize;
        (i < self.slots.len()).then_some(i)
    }

    pub(crate) fn get(&self, n: u32) -> Option<&T> {
        self.slots[self.index(n)?].as_ref()
    }

    pub(crate) fn get_mut(&mut self, n: u32) -> Option<&mut T> {
        let i = self.index(n)?;
        self.slots[i].as_mut()
    }

    pub(crate) fn remove(&mut self, n: u32) -> Option<T> {
        let i = self.index(n)?;
        let v = self.slots[i].take()?;
        if i as u32 >= self.reserved {
            self.free.push_back(i as u32);
        }
        Some(v)
    }

    /// Removes every object and gives the memory back.
    pub(crate) fn clear(&mut self) {
        *self = Self::reserving(self.first, self.reserved, self.first + self.capacity);
    }

    /// The numbers of every object, in order.
    pub(crate) fn numbers(&self) -> Vec<u32> {
        (self.first..)
            .zip(&self.slots)
            .filter(|(_, s)| s.is_some())
            .map(|(n, _)| n)
            .collect()
    }
}

/// A user context (ALLOC_UCTX); its doorbell pages are in
/// `State::page_owner`.
#[derive(Debug)]
pub(crate) struct Uctx;

/// A protection domain.
#[derive(Debug, Default)]
pub(crate) struct Pd {
    /// MRs and QPs in this PD: destroying it is refused while non-zero.
    pub users: u32,
}

/// A memory region: virtual addresses `va .. va + len` at IOVAs
/// `dma.iova() ..`.
#[derive(Debug)]
pub(crate) struct Mr {
    pub pdn: u32,
    pub access: u32,
    pub va: u64,
    pub len: u64,
    pub dma: DmaRange,
    /// Memory windows bound to it: deregistering or changing it is refused
    /// while non-zero.
    pub windows: u32,
}

/// What a memory window is bound to.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Binding {
    /// The MR (its key) the window reaches.
    pub mr_key: u32,
    pub va: u64,
    pub len: u64,
    /// `REMOTE_*` rights it grants.
    pub access: u32,
    /// Type 2: the QP that bound it and alone may use it.
    pub qpn: Option<u32>,
}

/// A memory window (`ibv_alloc_mw`).
#[derive(Debug)]
pub(crate) struct Mw {
    pub pdn: u32,
    /// 1 or 2.
    pub mw_type: u8,
    /// `None`: unbound (a type 2 window is then in the free state).
    pub bound: Option<Binding>,
}

/// An object a key names.
#[derive(Debug)]
pub(crate) enum Keyed {
    Mr(Mr),
    Mw(Mw),
}

/// The key table of MRs and memory windows: keys are `index << 8 | tag`.
/// An MR's tag advances each time its index is reused, so that a stale key
/// misses; a window's tag is the key byte its consumer chose at its last
/// bind. Indices stay below 2^24 (`EmuConfig::validate` bounds `max_mr`),
/// so a key never wraps.
#[derive(Debug)]
pub(crate) struct MrTable {
    table: Table<Keyed>,
    tags: Vec<u8>,
}

impl MrTable {
    pub(crate) fn new(max_mr: u32) -> Self {
        Self {
            table: Table::new(1, max_mr + 1),
            tags: Vec::new(),
        }
    }

    /// Stores `obj`, made by context `uid`, under a free index; returns
    /// its key.
    pub(crate) fn insert(&mut self, uid: u32, obj: Keyed) -> Option<u32> {
        let index = self.table.free_number()?;
        self.table.insert(index, uid, obj);
        // Tags grow with the table and are kept through a reset, so that a
        // key from before it misses.
        if self.tags.len() <= index as usize {
            self.tags.resize(index as usize + 1, 0);
        }
        Some(index << 8 | self.tags[index as usize] as u32)
    }

    /// Whether `key` names an object of context `uid`.
    pub(crate) fn owned(&mut self, key: u32, uid: u32) -> bool {
        self.index(key).is_some_and(|i| self.table.owned(i, uid))
    }

    /// The keys of context `uid`'s objects.
    pub(crate) fn keys_of(&self, uid: u32) -> Vec<u32> {
        self.table
            .numbers_of(uid)
            .into_iter()
            .map(|i| i << 8 | self.tags[i as usize] as u32)
            .collect()
    }

    fn index(&self, key: u32) -> Option<u32> {
        let index = key >> 8;
        let tag = *self.tags.get(index as usize)?;
        (tag == key as u8).then_some(index)
    }

    /// The object `key` names.
    pub(crate) fn get_keyed(&mut self, key: u32) -> Option<&mut Keyed> {
        let index = self.index(key)?;
        self.table.get_mut(index)
    }

    /// The MR `key` names (a window's key names none).
    pub(crate) fn get_mut(&mut self, key: u32) -> Option<&mut Mr> {
        match self.get_keyed(key)? {
            Keyed::Mr(mr) => Some(mr),
            Keyed::Mw(_) => None,
        }
    }

    /// The window `key` names.
    pub(crate) fn get_mw(&mut self, key: u32) -> Option<&mut Mw> {
        match self.get_keyed(key)? {
            Keyed::Mw(mw) => Some(mw),
            Keyed::Mr(_) => None,
        }
    }

    /// Gives the window of `key` the key byte of `new_key` (same index);
    /// returns the key it has now.
    pub(crate) fn rekey(&mut self, key: u32, new_key: u32) -> Option<u32> {
        let index = self.index(key)?;
        (new_key >> 8 == index).then(|| {
            self.tags[index as usize] = new_key as u8;
            new_key
        })
    }

    /// Removes the object of `key` and retires the key.
    pub(crate) fn remove(&mut self, key: u32) -> Option<Keyed> {
        let index = self.index(key)?;
        let obj = self.table.remove(index)?;
        self.tags[index as usize] = self.tags[index as usize].wrapping_add(1);
        Some(obj)
    }

    /// Every window bound to QP `qpn` (type 2), with its key.
    pub(crate) fn windows_of(&mut self, qpn: u32) -> Vec<u32> {
        let mut keys = Vec::new();
        for (i, tag) in self.tags.iter().enumerate() {
            if let Some(Keyed::Mw(mw)) = self.table.get(i as u32) {
                if mw.bound.is_some_and(|b| b.qpn == Some(qpn)) {
                    keys.push((i as u32) << 8 | *tag as u32);
                }
            }
        }
        keys
    }

    /// Removes every object, retiring the keys of those that existed.
    pub(crate) fn clear(&mut self) {
        for (i, tag) in self.tags.iter_mut().enumerate() {
            if self.table.get(i as u32).is_some() {
                *tag = tag.wrapping_add(1);
            }
        }
        self.table.clear();
    }
}

/// A completion queue.
#[derive(Debug)]
pub(crate) struct Cq {
    pub log_size: u8,
    pub uar_page: u32,
    /// The EQ completion events go to (0: EQ 0), or none (CREATE_CQ eqn
    /// NONE).
    pub eqn: Option<u32>,
    pub buf: DmaRange,
    pub dbrec: DmaRange,
    /// Free-running producer index.
    pub pi: u32,
    /// The driver's consumer index as last read from the doorbell record.
    /// The record is read again only when the ring looks full from it.
    pub ci_seen: u32,
    /// The CQ overran or a CQE write faulted: no more CQEs are written.
    pub error: bool,
    /// Pending arm request.
    pub arm: Option<CqArmCmd>,
    /// Index of the last solicited or error CQE written.
    pub last_solicited: Option<u32>,
    /// QPs completing into this CQ: destroying it is refused while non-zero.
    pub users: u32,
}

/// A completion event queue (CREATE_EQ).
#[derive(Debug)]
pub(crate) struct CompEq {
    pub eq: EventQueue,
    pub uar_page: u32,
    /// CQs delivering to it: destroying it is refused while non-zero.
    pub users: u32,
}

/// A shared receive queue: a ring of receive WQEs that the QPs created
/// with it take from in ring order.
#[derive(Debug)]
pub(crate) struct Srq {
    /// The receive WQEs' L_Keys are checked against this PD.
    pub pdn: u32,
    pub log_wqes: u8,
    pub log_stride: u8,
    pub uar_page: u32,
    pub buf: DmaRange,
    pub dbrec: DmaRange,
    /// Free-running count of the WQEs taken (16 bits significant), which
    /// the doorbell record's producer count is compared with.
    pub ci: u32,
    /// The slot of the next WQE to take: 0 at creation, then the `next` of
    /// each WQE taken.
    pub next_slot: u32,
    /// Producer index last accepted from the doorbell record (never more
    /// than the ring size ahead of `ci`).
    pub pi: u32,
    /// Armed limit (0: disarmed): fewer WQEs left raises an event.
    pub limit: u32,
    /// The doorbell record or ring failed: no more WQEs are given out.
    pub error: bool,
    /// QPs taking from it: destroying it is refused while non-zero.
    pub users: u32,
}

/// A send WQE delivered by a BlueFlame write, for the BB it names.
#[derive(Debug, Clone, Copy)]
pub(crate) struct BfWqe {
    /// The BB (free-running, as `Qp::sq_fetch`).
    pub index: u32,
    /// The WQE's first bytes: all of it (at most `BF_MAX_DS` segments).
    pub bytes: [u8; rnic_hw_regs::uar::BF_WQE_BYTES],
}

/// A queue pair.
#[derive(Debug)]
pub(crate) struct Qp {
    pub qpn: u32,
    /// RC, UC or UD.
    pub qp_type: QpType,
    /// In SQD: an `SqDrained` event is wanted once the send queue drains.
    pub sqd_notify: bool,
    /// In SQD: the send queue has drained (the event, if wanted, is sent).
    pub drained: bool,
    /// The first packet in RTR was reported (`CommEst`).
    pub comm_est: bool,
    pub pdn: u32,
    /// The SRQ its receive WQEs come from (it has no receive queue).
    pub srqn: Option<u32>,
    /// The PD receive WQEs' L_Keys are checked against: the SRQ's, or
    /// the QP's own.
    pub recv_pdn: u32,
    pub send_cqn: u32,
    pub recv_cqn: u32,
    pub sq_sig_all: bool,
    pub log_sq_bbs: u8,
    pub log_rq_wqes: u8,
    pub log_rq_stride: u8,
    pub max_inline: u32,
    pub uar_page: u32,
    pub sq: DmaRange,
    pub rq: DmaRange,
    pub dbrec: DmaRange,
    pub state: QpState,
    /// Attributes as last modified (state fields unused).
    pub attrs: QpAttrs,
    /// Device's free-running send consumer index, in BBs: the oldest WQE
    /// not completed (WQEs before it have their completions).
    pub sq_ci: u32,
    /// The next BB the requester takes a WQE from (`sq_ci` plus the BBs of
    /// the WQEs in flight).
    pub sq_fetch: u32,
    /// The WQE a BlueFlame write delivered for BB `sq_fetch`, taken instead
    /// of the ring's (spec 8.1).
    pub bf: Option<BfWqe>,
    /// Device's free-running receive consumer index, in WQEs (a receive
    /// WQE a message is filling stays at it until the message completes).
    pub rq_ci: u32,
    /// Send producer index last accepted from the doorbell record (never
    /// more than the SQ size ahead of `sq_ci`): the BBs up to it are posted
    /// and known to the device.
    pub sq_pi: u32,
    /// Receive producer index last accepted from the doorbell record (never
    /// more than the RQ size ahead of `rq_ci`).
    pub rq_pi: u32,
    /// Queued in the device's list of send queues to run.
    pub kicked: bool,
    /// Where packets go (set when the QP moves to RTR).
    pub path: Option<Path>,
    /// Requester and completer.
    pub req: ReqState,
    /// Responder.
    pub resp: RespState,
    /// Deadlines.
    pub timers: QpTimers,
    /// This QP's counters.
    pub counters: Counters,
}

/// Every object of the device but its QPs ([`crate::state::State::qps`]).
#[derive(Debug)]
pub(crate) struct Objects {
    pub pds: Table<Pd>,
    pub mrs: MrTable,
    pub cqs: Table<Cq>,
    pub srqs: Table<Srq>,
    pub eqs: Table<CompEq>,
}

impl Objects {
    pub(crate) fn new(cfg: &crate::EmuConfig) -> Self {
        Self {
            pds: Table::new(1, cfg.max_pd + 1),
            mrs: MrTable::new(cfg.max_mr),
            cqs: Table::new(1, cfg.max_cq + 1),
            srqs: Table::new(1, cfg.max_srq + 1),
            eqs: Table::new(1, cfg.max_eq + 1),
        }
    }

    /// Destroys every object (device reset).
    pub(crate) fn clear(&mut self) {
        self.pds.clear();
        self.mrs.clear();
        self.cqs.clear();
        self.srqs.clear();
        self.eqs.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_reused_least_recently_freed_first() {
        let mut t: Table<u8> = Table::new(2, 6);
        for n in 2..5 {
            assert_eq!(t.free_number(), Some(n));
            t.insert(n, 0, 0);
        }
        t.remove(3);
        t.remove(2);
        assert_eq!(t.remove(2), None, "removed twice");
        // Freed numbers first, oldest first; then the one never used.
        for n in [3, 2, 5] {
            assert_eq!(t.free_number(), Some(n));
            t.insert(n, if n == 5 { 7 } else { 0 }, 0);
        }
        assert!(t.owned(5, 7) && !t.owned(5, 0) && !t.owned(6, 7));
        assert_eq!(t.numbers_of(7), [5]);
        assert_eq!(t.numbers(), [2, 3, 4, 5]);
        assert_eq!(t.free_number(), None);
        assert!(t.get(6).is_none() && t.get(1).is_none());
        t.clear();
        assert_eq!((t.free_number(), t.slots.capacity()), (Some(2), 0));
    }

    #[test]
    fn reserved_numbers_are_taken_by_name_only() {
        // QPNs 1 (reserved: the GSI QP's) to 4.
        let mut t: Table<u8> = Table::reserving(1, 1, 5);
        assert_eq!(t.free_number(), Some(2));
        assert!(!t.insert_reserved(2, 0, 9), "2 is not reserved");
        assert!(t.insert_reserved(1, 3, 9));
        assert!(!t.insert_reserved(1, 3, 9), "taken");
        assert!(t.owned(1, 3));
        for n in 2..5 {
            assert_eq!(t.free_number(), Some(n));
            t.insert(n, 0, 0);
        }
        assert_eq!(t.free_number(), None);
        assert_eq!(t.remove(1), Some(9));
        assert_eq!(t.free_number(), None, "1 is never a free number");
        assert!(t.insert_reserved(1, 0, 8));
        t.clear();
        assert_eq!(t.free_number(), Some(2));
        assert!(t.get(1).is_none() && t.insert_reserved(1, 0, 7));
    }

    #[test]
    fn tables_grow_on_demand() {
        let t: Table<[u8; 4096]> = Table::new(2, 1 << 24);
        assert_eq!((t.slots.capacity(), t.free_number()), (0, Some(2)));
        let mut m = MrTable::new((1 << 24) - 1);
        assert!(m.tags.is_empty());
        let key = m
            .insert(
                0,
                Keyed::Mw(Mw {
                    pdn: 1,
                    mw_type: 1,
                    bound: None,
                }),
            )
            .unwrap();
        assert_eq!((key, m.tags.len()), (1 << 8, 2));
        m.clear();
        // A key from before a reset misses after it.
        let again = m
            .insert(
                0,
                Keyed::Mw(Mw {
                    pdn: 1,
                    mw_type: 1,
                    bound: None,
                }),
            )
            .unwrap();
        assert_eq!(again, 1 << 8 | 1);
        assert!(m.get_mw(key).is_none());
    }
}

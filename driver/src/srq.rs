//! Shared receive queues: creation, posting, modify (limit and resize),
//! query and destruction, and the slot accounting the CQ poller retires
//! against.
//!
//! The device takes an SRQ's WQEs in ring order, but they complete in any
//! order (each QP finishes its own messages). A slot is free again only
//! when its completion is polled (or removed when its QP is reset or
//! destroyed), so posting stops at the oldest slot still outstanding: the
//! device never has more than a ring of WQEs ahead of its consumer index.
//! The ring is therefore [`RING_SPARE_LOG`] powers of two larger than the
//! requests the SRQ holds: a program that keeps its SRQ full (UCX does)
//! reposts each request as it completes, also while an older one is held
//! by a QP still receiving its message.

use alloc::format;
use alloc::sync::Arc;
use alloc::vec;
use alloc::vec::Vec;

use rnic_hw_regs::cmd::{
    srq_attr, CmdOpcode, CreateSrqIn, CreateSrqOut, ModifySrqIn, ObjIn, QuerySrqOut,
};
use rnic_hw_regs::uar::{WqDoorbell, SRQ_DB};
use rnic_hw_regs::wqe::{MAX_LOG_RQ_STRIDE, MIN_LOG_RQ_STRIDE, SEG_SIZE};
use rnic_hw_regs::{le32, le64};
use rnic_queues::{DbRec, DmaRegion, Hal};
use spin::Mutex;

use crate::bringup::DeviceMem;
use crate::error::{DestroyError, Error, ErrorKind, PostError, Result};
use crate::pd::{Pd, PdInner};
use crate::wqe::{check_recv, write_recv, WqRing};
use rnic_verbs::{srq_mask, RecvWr, SrqAttr};

// MODIFY_SRQ takes libibverbs' mask bits as they are.
const _: () = assert!(srq_mask::MAX_WR == srq_attr::MAX_WR && srq_mask::LIMIT == srq_attr::LIMIT);

/// A shared receive queue (`struct ibv_srq`): receive requests that the
/// QPs created with it consume in the order they were posted.
///
/// QPs on it keep it alive: dropping the `Srq` while they exist defers
/// its destruction until the last one is gone.
pub struct Srq<H: Hal> {
    pub(crate) inner: Arc<SrqInner<H>>,
}

/// The device-side SRQ, shared by the handle and the QPs on it.
pub(crate) struct SrqInner<H: Hal> {
    pub(crate) pd: Arc<PdInner<H>>,
    pub(crate) slots: Arc<SrqSlots>,
    uar_page: u32,
    max_sge: u32,
    post: Mutex<SrqRing>,
    /// The doorbell record; `None` once released.
    dbrec_mem: Option<DmaRegion>,
}

/// The producer side, locked for a post batch (and a resize).
struct SrqRing {
    ring: WqRing,
    dbrec: DbRec,
    log_wqes: u32,
    log_stride: u32,
    /// The ring's memory; `None` once released.
    mem: Option<DmaRegion>,
}

/// Which SRQ slots are outstanding and their work request IDs, for the
/// CQ poller; the device is trusted with neither.
pub(crate) struct SrqSlots {
    pub(crate) srqn: u32,
    table: Mutex<SlotTable>,
}

struct SlotTable {
    mask: u32,
    /// Requests outstanding at most (`max_wr`): the ring has room for more.
    capacity: u32,
    /// Requests outstanding now.
    outstanding: u32,
    /// Free-running index of the next WQE to post.
    head: u32,
    /// The oldest outstanding index (`head` if none is).
    tail: u32,
    wrid: Vec<u64>,
    busy: Vec<bool>,
}

impl SlotTable {
    /// A table of a ring of `2^log_wqes` slots for `capacity` requests.
    fn new(log_wqes: u32, capacity: u32) -> Self {
        let n = 1usize << log_wqes;
        Self {
            mask: (n - 1) as u32,
            capacity,
            outstanding: 0,
            head: 0,
            tail: 0,
            wrid: vec![0; n],
            busy: vec![false; n],
        }
    }

    fn size(&self) -> u32 {
        self.mask + 1
    }

    /// Frees the slot of the 16-bit `counter` (index + 1) of a completion
    /// and returns its work request ID; `None` if it names no outstanding
    /// slot.
    fn retire(&mut self, counter: u16) -> Option<u64> {
        let back = u32::from((self.head as u16).wrapping_sub(counter.wrapping_sub(1)));
        if back == 0 || back > self.head.wrapping_sub(self.tail) {
            return None;
        }
        let slot = (self.head.wrapping_sub(back) & self.mask) as usize;
        if !core::mem::replace(&mut self.busy[slot], false) {
            return None;
        }
        self.outstanding -= 1;
        while self.tail != self.head && !self.busy[(self.tail & self.mask) as usize] {
            self.tail = self.tail.wrapping_add(1);
        }
        Some(self.wrid[slot])
    }

    /// Whether another request may be posted: fewer than `capacity` are
    /// outstanding, and the ring has a slot past the oldest.
    fn has_room(&self) -> bool {
        self.outstanding < self.capacity && self.head.wrapping_sub(self.tail) < self.size()
    }

    /// The same outstanding slots in a table of `2^log_wqes` for
    /// `capacity` requests, which holds them all (checked by the caller).
    fn resized(&self, log_wqes: u32, capacity: u32) -> Self {
        let mut t = Self::new(log_wqes, capacity);
        t.head = self.head;
        t.tail = self.tail;
        t.outstanding = self.outstanding;
        let mut i = self.tail;
        while i != self.head {
            let (old, new) = ((i & self.mask) as usize, (i & t.mask) as usize);
            t.busy[new] = self.busy[old];
            t.wrid[new] = self.wrid[old];
            i = i.wrapping_add(1);
        }
        t
    }
}

impl SrqSlots {
    /// Frees the slot a receive completion of a QP on this SRQ names and
    /// returns its work request ID; `None` if it names no outstanding WQE.
    pub(crate) fn retire(&self, counter: u16) -> Option<u64> {
        self.table.lock().retire(counter)
    }
}

/// The ring of an SRQ of `2^n` requests has `2^(n + RING_SPARE_LOG)` slots.
pub(crate) const RING_SPARE_LOG: u32 = 1;

/// The requests an SRQ asked for `max_wr` holds (a power of two), and the
/// log2 of its ring's slots; `None` if the ring would not fit the device's
/// 16-bit indices.
fn srq_size(max_wr: u32) -> Option<(u32, u32)> {
    let capacity = max_wr.checked_next_power_of_two()?;
    let log_wqes = capacity.trailing_zeros() + RING_SPARE_LOG;
    (log_wqes <= 15).then_some((capacity, log_wqes))
}

/// Bytes of a ring of `2^log_wqes` slots of `2^log_stride` bytes.
fn ring_len(log_wqes: u32, log_stride: u32) -> usize {
    1usize << (log_wqes + log_stride)
}

impl<H: Hal> Pd<H> {
    /// Creates a shared receive queue (CREATE_SRQ) holding at least
    /// `attr.max_wr` requests of `attr.max_sge` entries; [`Srq::attr`]
    /// tells what it provides. `attr.srq_limit` is ignored: arm the limit
    /// with [`Srq::modify`].
    pub fn create_srq(&self, attr: &SrqAttr) -> Result<Srq<H>> {
        let ctx = &self.inner.ctx;
        let dev = &ctx.attr;
        if dev.max_srq == 0 {
            return Err(Error::new(
                ErrorKind::NotSupported,
                "this device has no shared receive queues",
            ));
        }
        if attr.max_wr == 0 || attr.max_wr > dev.max_srq_wr {
            return Err(Error::invalid(format!(
                "SRQ max_wr {} is outside 1..={}",
                attr.max_wr, dev.max_srq_wr
            )));
        }
        if attr.max_sge > dev.max_srq_sge {
            return Err(Error::invalid(format!(
                "SRQ max_sge {} exceeds the device limit of {}",
                attr.max_sge, dev.max_srq_sge
            )));
        }
        let stride = ((1 + attr.max_sge.max(1) as usize) * SEG_SIZE)
            .next_power_of_two()
            .max(1 << MIN_LOG_RQ_STRIDE);
        let log_stride = stride.trailing_zeros();
        let size = srq_size(attr.max_wr).filter(|_| log_stride <= u32::from(MAX_LOG_RQ_STRIDE));
        let Some((capacity, log_wqes)) = size else {
            return Err(Error::invalid(format!(
                "an SRQ of {} requests of {} entries does not fit the device's WQE formats",
                attr.max_wr, attr.max_sge
            )));
        };
        let hal = ctx.hal();
        let mem = hal
            .dma_alloc(ring_len(log_wqes, log_stride))
            .map_err(|e| Error::hal(e, "allocating an SRQ"))?;
        mem.zero();
        let dbrec_mem = match hal.dma_alloc(4) {
            Ok(m) => m,
            Err(e) => {
                // SAFETY: from dma_alloc, never given to the device.
                unsafe { hal.dma_free(mem) };
                return Err(Error::hal(e, "allocating an SRQ doorbell record"));
            }
        };
        dbrec_mem.zero();
        let uar_page = ctx.alloc_uar_page();
        let input = CreateSrqIn {
            pdn: le32::from_ne(self.inner.pdn),
            log_wqes: le32::from_ne(log_wqes),
            log_stride: le32::from_ne(log_stride),
            srq_limit: le32::from_ne(0),
            uar_page: le32::from_ne(uar_page),
            reserved: le32::from_ne(0),
            buf_iova: le64::from_ne(mem.iova()),
            dbrec_iova: le64::from_ne(dbrec_mem.iova()),
        };
        let out: CreateSrqOut = match ctx.exec(CmdOpcode::CreateSrq, &input) {
            Ok(out) => out,
            Err(e) => {
                for m in [mem, dbrec_mem] {
                    // SAFETY: from dma_alloc, given to the device only by
                    // this command.
                    unsafe {
                        ctx.dispose_after_failed_create(
                            DeviceMem::Region(m),
                            format_args!("creating an SRQ"),
                            &e,
                        )
                    };
                }
                return Err(e);
            }
        };
        let srqn = out.srqn.to_ne() & 0xff_ffff;
        // SAFETY: the ring and record point into regions the SrqInner owns
        // and frees only when it is released, after which they are unused.
        let (ring, dbrec) = unsafe {
            (
                WqRing::new(&mem, log_wqes, 1 << log_stride),
                DbRec::new(&dbrec_mem, 0),
            )
        };
        let max_sge = dev.max_srq_sge.min((stride / SEG_SIZE - 1) as u32);
        ctx.srqs.write().insert(srqn);
        log::debug!(
            "created SRQ {srqn}: {capacity} requests of {max_sge} entries, a ring of {}",
            1u32 << log_wqes
        );
        Ok(Srq {
            inner: Arc::new(SrqInner {
                pd: Arc::clone(&self.inner),
                slots: Arc::new(SrqSlots {
                    srqn,
                    table: Mutex::new(SlotTable::new(log_wqes, capacity)),
                }),
                uar_page,
                max_sge,
                post: Mutex::new(SrqRing {
                    ring,
                    dbrec,
                    log_wqes,
                    log_stride,
                    mem: Some(mem),
                }),
                dbrec_mem: Some(dbrec_mem),
            }),
        })
    }
}

impl<H: Hal> Srq<H> {
    /// The SRQ number.
    pub fn srq_num(&self) -> u32 {
        self.inner.slots.srqn
    }

    /// What the SRQ provides (its limit as last set here: see
    /// [`Srq::query`] for the device's).
    pub fn attr(&self) -> SrqAttr {
        SrqAttr {
            max_wr: self.inner.slots.table.lock().capacity,
            max_sge: self.inner.max_sge,
            srq_limit: 0,
        }
    }

    /// Posts receive requests (`ibv_post_srq_recv`). On a bad request
    /// (too many SGEs: `EINVAL`; no free slot: `ENOMEM`) the requests
    /// before it are posted and the error carries its index.
    pub fn post_recv(&self, wrs: &[RecvWr<'_>]) -> Result<(), PostError> {
        let s = &*self.inner;
        let mut post = s.post.lock();
        let mut result = Ok(());
        // The slot table is shared with the pollers of every CQ the SRQ's
        // QPs complete on: taken once for the batch.
        let mut t = s.slots.table.lock();
        let (start, mut head) = (t.head, t.head);
        for (index, wr) in wrs.iter().enumerate() {
            if let Err(error) = check_recv(wr, s.max_sge) {
                result = Err(PostError { index, error });
                break;
            }
            if !t.has_room() {
                result = Err(PostError {
                    index,
                    error: Error::new(
                        ErrorKind::NoMemory,
                        "shared receive queue full: wait for completions",
                    ),
                });
                break;
            }
            write_recv(&mut post.ring, head, wr);
            let slot = (head & t.mask) as usize;
            t.wrid[slot] = wr.wr_id;
            t.busy[slot] = true;
            t.outstanding += 1;
            head = head.wrapping_add(1);
            t.head = head;
        }
        drop(t);
        if head != start {
            // DbRec::publish is the one release store: the WQEs are visible
            // before the record, which is written before the doorbell.
            post.dbrec.publish(head);
            let db = WqDoorbell::new()
                .with_qpn(s.slots.srqn)
                .with_pi(head as u16);
            s.pd.ctx.ring_doorbell(s.uar_page, SRQ_DB, db.into_bits());
        }
        result
    }

    /// Modifies the SRQ (`ibv_modify_srq`): with [`srq_mask::LIMIT`], arms
    /// the limit event at `attr.srq_limit` (0 disarms it); with
    /// [`srq_mask::MAX_WR`], resizes it to hold at least `attr.max_wr`
    /// requests, which must hold every request still outstanding.
    pub fn modify(&self, attr: &SrqAttr, mask: u32) -> Result<()> {
        let s = &*self.inner;
        let ctx = &s.pd.ctx;
        if mask == 0 || mask & !(srq_attr::MAX_WR | srq_attr::LIMIT) != 0 {
            return Err(Error::invalid(format!("bad SRQ attribute mask {mask:#x}")));
        }
        let mut post = s.post.lock();
        let mut log_wqes = post.log_wqes;
        let mut capacity = s.slots.table.lock().capacity;
        if mask & srq_attr::MAX_WR != 0 {
            let max = ctx.attr.max_srq_wr;
            if attr.max_wr == 0 || attr.max_wr > max {
                return Err(Error::invalid(format!(
                    "SRQ max_wr {} is outside 1..={max}",
                    attr.max_wr
                )));
            }
            (capacity, log_wqes) = srq_size(attr.max_wr).ok_or_else(|| {
                Error::invalid(format!(
                    "SRQ max_wr {} does not fit the device's indices",
                    attr.max_wr
                ))
            })?;
        }
        if mask & srq_attr::LIMIT != 0 && attr.srq_limit > capacity {
            return Err(Error::invalid(format!(
                "SRQ limit {} exceeds its {capacity} requests",
                attr.srq_limit
            )));
        }
        let mut input = ModifySrqIn {
            srqn: le32::from_ne(s.slots.srqn),
            attr_mask: le32::from_ne(mask),
            log_wqes: le32::from_ne(0),
            srq_limit: le32::from_ne(attr.srq_limit),
            buf_iova: le64::from_ne(0),
        };
        if mask & srq_attr::MAX_WR == 0 {
            return ctx.exec::<_, ()>(CmdOpcode::ModifySrq, &input);
        }
        let (tail, head, outstanding) = {
            let t = s.slots.table.lock();
            (t.tail, t.head, t.outstanding)
        };
        if outstanding > capacity || head.wrapping_sub(tail) > 1 << log_wqes {
            return Err(Error::invalid(format!(
                "SRQ {}: {outstanding} requests are outstanding (the oldest {} back), more \
                 than an SRQ of max_wr {} holds",
                s.slots.srqn,
                head.wrapping_sub(tail),
                attr.max_wr
            )));
        }
        let hal = ctx.hal();
        let log_stride = post.log_stride;
        let mem = hal
            .dma_alloc(ring_len(log_wqes, log_stride))
            .map_err(|e| Error::hal(e, "allocating an SRQ"))?;
        mem.zero();
        // The outstanding WQEs go to the same indices of the new ring: the
        // device takes those not yet taken from there. (The tail only
        // moves on meanwhile, so the window read above covers them.)
        // SAFETY: the new ring points into `mem`, kept as long as the ring.
        let ring = unsafe { WqRing::new(&mem, log_wqes, 1 << log_stride) };
        let stride = 1usize << log_stride;
        let mut slot = [0u8; 1 << MAX_LOG_RQ_STRIDE];
        let mut i = tail;
        while i != head {
            let from = post.ring.slot(i);
            let to = ring.slot(i);
            // SAFETY: both slots are `stride` bytes inside live DMA regions
            // (ProducerRing::slot), `stride <= slot.len()`; the old slot is
            // only read (the device may read it too), the new one is not
            // yet known to the device.
            unsafe {
                core::ptr::copy_nonoverlapping(from.as_ptr(), slot.as_mut_ptr(), stride);
                core::ptr::copy_nonoverlapping(slot.as_ptr(), to.as_ptr(), stride);
            }
            i = i.wrapping_add(1);
        }
        input.log_wqes = le32::from_ne(log_wqes);
        input.buf_iova = le64::from_ne(mem.iova());
        // The command is a release point: the copies are visible to the
        // device before it switches rings.
        if let Err(e) = ctx.exec::<_, ()>(CmdOpcode::ModifySrq, &input) {
            if e.outcome_unknown() {
                // The device may be using either ring: keep both.
                ctx.orphan(
                    DeviceMem::Region(mem),
                    format_args!("resizing SRQ {}", s.slots.srqn),
                    &e,
                );
            } else {
                // SAFETY: from dma_alloc; the device refused to use it.
                unsafe { hal.dma_free(mem) };
            }
            return Err(e);
        }
        let old = post.mem.replace(mem);
        post.ring = ring;
        post.log_wqes = log_wqes;
        {
            let mut t = s.slots.table.lock();
            *t = t.resized(log_wqes, capacity);
        }
        if let Some(old) = old {
            // SAFETY: from dma_alloc; the device moved to the new ring.
            unsafe { hal.dma_free(old) };
        }
        log::debug!(
            "SRQ {}: resized to {} requests",
            s.slots.srqn,
            1u32 << log_wqes
        );
        Ok(())
    }

    /// Reads the SRQ's attributes from the device (`ibv_query_srq`),
    /// including its current limit (0 once the limit event fired).
    pub fn query(&self) -> Result<SrqAttr> {
        let input = ObjIn {
            id: le32::from_ne(self.inner.slots.srqn),
        };
        let out: QuerySrqOut = self.inner.pd.ctx.exec(CmdOpcode::QuerySrq, &input)?;
        // The device's ring has room for more than the requests the SRQ
        // holds (RING_SPARE_LOG).
        let capacity = self.inner.slots.table.lock().capacity;
        Ok(SrqAttr {
            max_wr: out.max_wr.to_ne().min(capacity),
            max_sge: out.max_sge.to_ne().min(self.inner.max_sge),
            srq_limit: out.srq_limit.to_ne(),
        })
    }

    /// Destroys the SRQ (DESTROY_SRQ). An SRQ that QPs still use is busy.
    ///
    /// If the device refuses, or never gets the command, the SRQ is handed
    /// back; if the outcome is unknown (a timeout), it is gone and its
    /// memory is kept until the context is closed.
    pub fn destroy(mut self) -> Result<(), DestroyError<Self>> {
        let result = match Arc::get_mut(&mut self.inner) {
            Some(inner) => inner.release(),
            None => Err(Error::new(
                ErrorKind::Busy,
                format!("SRQ {} is still used by queue pairs", self.inner.slots.srqn),
            )),
        };
        match result {
            Err(e) if self.inner.dbrec_mem.is_none() => Err(DestroyError::gone(e)),
            result => DestroyError::hand_back(self, result),
        }
    }
}

impl<H: Hal> SrqInner<H> {
    fn release(&mut self) -> Result<()> {
        let Some(dbrec) = self.dbrec_mem.take() else {
            return Ok(());
        };
        let ctx = &self.pd.ctx;
        let srqn = self.slots.srqn;
        let input = ObjIn {
            id: le32::from_ne(srqn),
        };
        if let Err(e) = ctx.exec::<_, ()>(CmdOpcode::DestroySrq, &input) {
            if e.outcome_unknown() {
                let post = self.post.get_mut();
                for m in [Some(dbrec), post.mem.take()].into_iter().flatten() {
                    ctx.orphan(
                        DeviceMem::Region(m),
                        format_args!("destroying SRQ {srqn}"),
                        &e,
                    );
                }
            } else {
                self.dbrec_mem = Some(dbrec);
            }
            return Err(e);
        }
        ctx.srqs.write().remove(&srqn);
        let hal = ctx.hal();
        // SAFETY: from dma_alloc, and the SRQ using them is destroyed.
        unsafe {
            hal.dma_free(dbrec);
            if let Some(m) = self.post.get_mut().mem.take() {
                hal.dma_free(m);
            }
        }
        log::debug!("destroyed SRQ {srqn}");
        Ok(())
    }
}

impl<H: Hal> Drop for SrqInner<H> {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            let srqn = self.slots.srqn;
            let post = self.post.get_mut();
            for m in [self.dbrec_mem.take(), post.mem.take()]
                .into_iter()
                .flatten()
            {
                self.pd.ctx.orphan(
                    DeviceMem::Region(m),
                    format_args!("dropping SRQ {srqn}"),
                    &e,
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn post(t: &mut SlotTable, wr_id: u64) {
        assert!(t.has_room());
        let slot = (t.head & t.mask) as usize;
        t.wrid[slot] = wr_id;
        t.busy[slot] = true;
        t.outstanding += 1;
        t.head = t.head.wrapping_add(1);
    }

    #[test]
    fn slots_free_out_of_order_and_the_tail_follows_the_oldest() {
        let mut t = SlotTable::new(2, 4);
        for i in 0..4 {
            post(&mut t, 10 + i);
        }
        assert_eq!(t.retire(2), Some(11), "index 1 completes first");
        assert_eq!(t.tail, 0, "index 0 is still out");
        assert_eq!(t.retire(2), None, "twice");
        assert_eq!(t.retire(5), None, "never posted");
        assert_eq!(t.retire(0), None, "before the ring");
        assert_eq!(t.retire(1), Some(10));
        assert_eq!(t.tail, 2, "past both");
        post(&mut t, 14);
        post(&mut t, 15);
        assert_eq!(t.head.wrapping_sub(t.tail), 4, "full");
        assert_eq!(t.retire(6), Some(15), "index 5 in slot 1");
        let r = t.resized(3, 4);
        assert_eq!((r.head, r.tail, r.outstanding), (6, 2, 3));
        assert!(r.busy[2] && r.busy[3] && r.busy[4] && !r.busy[5]);
        assert_eq!(r.wrid[4], 14);
    }

    #[test]
    fn counters_wrap_at_16_bits() {
        let mut t = SlotTable::new(0, 1);
        for i in 0..70_000u32 {
            post(&mut t, i.into());
            assert_eq!(t.retire(i.wrapping_add(1) as u16), Some(i.into()));
        }
        assert_eq!(t.tail, 70_000);
    }

    /// An SRQ kept full, one request held by a QP still receiving its
    /// message: each request completed after it is posted again, until as
    /// many have completed past it as the ring has spare slots.
    #[test]
    fn a_full_srq_reposts_past_a_held_request() {
        let (capacity, log_wqes) = srq_size(4).unwrap();
        assert_eq!((capacity, log_wqes), (4, 3));
        let mut t = SlotTable::new(log_wqes, capacity);
        for i in 0..4 {
            post(&mut t, i);
        }
        assert!(!t.has_room(), "max_wr outstanding");
        // Index 0 is held; 1, 2, 3 and the first of their reposts (index
        // 4) complete and are posted again.
        for i in 1..=4u32 {
            let wr_id = if i < 4 { i } else { 5 };
            assert_eq!(t.retire((i + 1) as u16), Some(wr_id.into()));
            post(&mut t, (4 + i).into());
        }
        assert_eq!(t.head.wrapping_sub(t.tail), 8, "the ring is spanned");
        assert_eq!(t.retire(6), Some(6), "index 5");
        assert_eq!(t.outstanding, 3);
        assert!(!t.has_room(), "no slot past the held one");
        assert_eq!(t.retire(1), Some(0), "the held one completes");
        assert_eq!((t.tail, t.outstanding), (6, 2));
        assert!(t.has_room());
    }
}

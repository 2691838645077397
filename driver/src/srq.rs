//! Shared receive queues: creation, posting, modify (limit and resize),
//! query and destruction, and the slot accounting the CQ poller retires
//! against.
//!
//! An SRQ's WQEs are a list through its ring's slots, as in mlx5's SRQ:
//! each WQE names the slot of the next, and the device follows the list
//! from slot 0. WQEs complete in any order (each QP finishes its own
//! messages), and a slot is free again as soon as its completion is polled
//! (or removed when its QP is reset or destroyed): it is linked at the end
//! of the list of free slots, and a program that keeps its SRQ full (UCX
//! does) posts it again at once, whatever older WQEs are still held. One
//! free slot always ends the list, unposted, so that the WQE posted last
//! can name it: an SRQ of `2^n` slots holds `2^n - 1` requests.

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
    /// `next[s]`: the slot after `s` in the list (a posted WQE names it).
    next: Vec<u32>,
    /// The list's first free slot: the next post fills it.
    head: u32,
    /// The list's last free slot, which is not posted while it is last.
    tail: u32,
    /// WQEs posted, free-running: the count the doorbell record publishes.
    posted: u32,
    /// Requests outstanding now.
    outstanding: u32,
    wrid: Vec<u64>,
    busy: Vec<bool>,
}

impl SlotTable {
    /// A table of `n` slots, all free: a list from slot 0 to `n - 1`.
    fn new(n: u32) -> Self {
        Self {
            next: (0..n).map(|s| (s + 1) % n).collect(),
            head: 0,
            tail: n - 1,
            posted: 0,
            outstanding: 0,
            wrid: vec![0; n as usize],
            busy: vec![false; n as usize],
        }
    }

    fn size(&self) -> u32 {
        self.next.len() as u32
    }

    /// Requests the SRQ holds (`max_wr`): every slot but the list's end.
    fn capacity(&self) -> u32 {
        self.size() - 1
    }

    /// Whether another request may be posted: a free slot is left besides
    /// the list's end.
    fn has_room(&self) -> bool {
        self.head != self.tail
    }

    /// Takes the head slot for request `wr_id`: the slot and the slot its
    /// WQE names next. The caller checked [`SlotTable::has_room`].
    fn post(&mut self, wr_id: u64) -> (u32, u32) {
        let slot = self.head;
        let next = self.next[slot as usize];
        self.busy[slot as usize] = true;
        self.wrid[slot as usize] = wr_id;
        self.head = next;
        self.posted = self.posted.wrapping_add(1);
        self.outstanding += 1;
        (slot, next)
    }

    /// Frees the slot of the 16-bit `counter` (slot + 1) of a completion,
    /// linking it at the end of the list, and returns its work request ID;
    /// `None` if it names no outstanding slot.
    fn retire(&mut self, counter: u16) -> Option<u64> {
        let slot = u32::from(counter.wrapping_sub(1));
        if slot >= self.size() || !core::mem::replace(&mut self.busy[slot as usize], false) {
            return None;
        }
        // The old end is unposted: no WQE the device may read names its
        // successor yet.
        self.next[self.tail as usize] = slot;
        self.tail = slot;
        self.outstanding -= 1;
        Some(self.wrid[slot as usize])
    }

    /// Whether a table of `n` slots can take over: every outstanding slot
    /// and the head are below `n`, and it holds the outstanding requests.
    fn fits(&self, n: u32) -> bool {
        self.head < n && self.outstanding < n && self.busy.iter().skip(n as usize).all(|&b| !b)
    }

    /// The same outstanding slots, and the posted WQEs' list, in a table
    /// of `n` slots, which [`SlotTable::fits`] them. The free slots are
    /// linked anew from the head, which the device reaches after the last
    /// WQE posted.
    fn resized(&self, n: u32) -> Self {
        let mut t = Self::new(n);
        let keep = self.size().min(n) as usize;
        t.busy[..keep].copy_from_slice(&self.busy[..keep]);
        t.wrid[..keep].copy_from_slice(&self.wrid[..keep]);
        for s in 0..keep {
            if t.busy[s] {
                t.next[s] = self.next[s];
            }
        }
        let mut end = self.head;
        for s in (0..n).filter(|&s| s != self.head && !t.busy[s as usize]) {
            t.next[end as usize] = s;
            end = s;
        }
        t.head = self.head;
        t.tail = end;
        t.posted = self.posted;
        t.outstanding = self.outstanding;
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

/// The log2 of the slots of an SRQ asked for `max_wr` requests (one more
/// than it holds, the list's end); `None` if they would not fit the
/// device's 16-bit indices.
fn srq_log_wqes(max_wr: u32) -> Option<u32> {
    let n = max_wr.checked_add(1)?.checked_next_power_of_two()?;
    let log_wqes = n.trailing_zeros();
    (log_wqes <= 15).then_some(log_wqes)
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
        let size = srq_log_wqes(attr.max_wr).filter(|_| log_stride <= u32::from(MAX_LOG_RQ_STRIDE));
        let Some(log_wqes) = size else {
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
            "created SRQ {srqn}: {} requests of {max_sge} entries",
            (1u32 << log_wqes) - 1
        );
        Ok(Srq {
            inner: Arc::new(SrqInner {
                pd: Arc::clone(&self.inner),
                slots: Arc::new(SrqSlots {
                    srqn,
                    table: Mutex::new(SlotTable::new(1 << log_wqes)),
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
            max_wr: self.inner.slots.table.lock().capacity(),
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
        let start = t.posted;
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
            let (slot, next) = t.post(wr.wr_id);
            write_recv(&mut post.ring, slot, wr, next);
        }
        let posted = t.posted;
        drop(t);
        if posted != start {
            // DbRec::publish is the one release store: the WQEs are visible
            // before the record, which is written before the doorbell.
            post.dbrec.publish(posted);
            let db = WqDoorbell::new()
                .with_qpn(s.slots.srqn)
                .with_pi(posted as u16);
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
        let mut capacity = s.slots.table.lock().capacity();
        if mask & srq_attr::MAX_WR != 0 {
            let max = ctx.attr.max_srq_wr;
            if attr.max_wr == 0 || attr.max_wr > max {
                return Err(Error::invalid(format!(
                    "SRQ max_wr {} is outside 1..={max}",
                    attr.max_wr
                )));
            }
            log_wqes = srq_log_wqes(attr.max_wr).ok_or_else(|| {
                Error::invalid(format!(
                    "SRQ max_wr {} does not fit the device's indices",
                    attr.max_wr
                ))
            })?;
            capacity = (1 << log_wqes) - 1;
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
        // Completions only free slots meanwhile (posting waits for the
        // post lock, held), so what fits now fits after the command.
        let (fits, old_slots) = {
            let t = s.slots.table.lock();
            (t.fits(1 << log_wqes), t.size())
        };
        if !fits {
            return Err(Error::invalid(format!(
                "SRQ {}: its outstanding requests do not fit an SRQ of max_wr {}",
                s.slots.srqn, attr.max_wr
            )));
        }
        let hal = ctx.hal();
        let log_stride = post.log_stride;
        let mem = hal
            .dma_alloc(ring_len(log_wqes, log_stride))
            .map_err(|e| Error::hal(e, "allocating an SRQ"))?;
        mem.zero();
        // The WQEs go to the same slots of the new ring (all that it has of
        // the old): the device takes those not yet taken from there.
        // SAFETY: the new ring points into `mem`, kept as long as the ring.
        let ring = unsafe { WqRing::new(&mem, log_wqes, 1 << log_stride) };
        let stride = 1usize << log_stride;
        let mut slot = [0u8; 1 << MAX_LOG_RQ_STRIDE];
        for i in 0..old_slots.min(1 << log_wqes) {
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
            *t = t.resized(1 << log_wqes);
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
        // The list's end is a slot the SRQ does not fill.
        let capacity = self.inner.slots.table.lock().capacity();
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

    /// Posts `wr_id` and checks the slot and the slot it names.
    fn post(t: &mut SlotTable, wr_id: u64, want: (u32, u32)) {
        assert!(t.has_room());
        assert_eq!(t.post(wr_id), want, "request {wr_id}");
    }

    #[test]
    fn slots_come_free_in_any_order_and_are_posted_again_at_once() {
        let mut t = SlotTable::new(4);
        assert_eq!(t.capacity(), 3);
        post(&mut t, 10, (0, 1));
        post(&mut t, 11, (1, 2));
        post(&mut t, 12, (2, 3));
        assert!(!t.has_room(), "slot 3 ends the list");
        // Slot 1 completes while 0 is held: it is free at once.
        assert_eq!(t.retire(2), Some(11));
        assert_eq!(t.retire(2), None, "twice");
        assert_eq!(t.retire(9), None, "no such slot");
        assert_eq!(t.retire(0), None, "slot 0xffff");
        assert_eq!(t.outstanding, 2);
        // Slot 3, the old end, is posted and names slot 1.
        post(&mut t, 13, (3, 1));
        assert!(!t.has_room());
        assert_eq!(t.posted, 4);
        assert_eq!(t.retire(1), Some(10), "the held one");
        post(&mut t, 14, (1, 0));
        assert_eq!((t.head, t.tail, t.outstanding), (0, 0, 3));
    }

    #[test]
    fn a_full_srq_reposts_past_a_held_request_for_ever() {
        let mut t = SlotTable::new(8);
        for i in 0..7 {
            t.post(i);
        }
        // Slot 0 stays held; every other completes and is posted again,
        // many times round.
        for k in 0..1000u64 {
            let slot = t.head;
            let held_next = (0..8).find(|&s| s != 0 && t.busy[s as usize]).unwrap();
            assert_eq!(
                t.retire((held_next + 1) as u16),
                Some(t.wrid[held_next as usize])
            );
            let (s, _) = t.post(100 + k);
            assert_eq!(s, slot);
            assert_eq!(t.outstanding, 7);
            assert!(t.busy[0]);
        }
    }

    #[test]
    fn a_resize_keeps_the_posted_list_and_links_the_free_slots_anew() {
        let mut t = SlotTable::new(4);
        t.post(10); // slot 0, names 1
        t.post(11); // slot 1, names 2
        assert_eq!(t.retire(1), Some(10));
        // Slot 1 posted, naming 2 (the head); 0 and 3 free.
        let g = t.resized(8);
        assert_eq!(g.capacity(), 7);
        assert!(g.busy[1] && !g.busy[0]);
        assert_eq!(
            (g.next[1], g.head),
            (2, 2),
            "the device goes on at the head"
        );
        let mut free = vec![g.head];
        let mut s = g.head;
        while s != g.tail {
            s = g.next[s as usize];
            free.push(s);
        }
        free.sort_unstable();
        assert_eq!(free, [0, 2, 3, 4, 5, 6, 7]);
        assert!(g.fits(4) && !g.fits(2), "slot 2, the head, needs four");
        let back = g.resized(4);
        assert_eq!((back.head, back.outstanding, back.capacity()), (2, 1, 3));
        assert_eq!(back.wrid[1], 11);
    }

    #[test]
    fn counters_wrap_at_16_bits() {
        let mut t = SlotTable::new(2);
        for i in 0..70_000u64 {
            let (slot, _) = t.post(i);
            assert_eq!(t.retire((slot + 1) as u16), Some(i));
        }
        assert_eq!(t.posted, 70_000);
        assert_eq!(srq_log_wqes(4095), Some(12));
        assert_eq!(srq_log_wqes(4096), Some(13));
        assert_eq!(srq_log_wqes(1 << 15), None);
    }
}

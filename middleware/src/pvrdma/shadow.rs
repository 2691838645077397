//! What a `Hal` middleware can know of a PVRDMA device's memory from the
//! calls it passes on: the command and response slots and the two event
//! rings (from the device-shared region, read when its address's high half
//! is written), and the rings that CREATE_CQ, CREATE_QP and CREATE_SRQ
//! placed, found as the device finds them: through their page
//! directories, a state page first.

use std::collections::BTreeMap;
use std::mem::size_of;

use rnic_pvrdma_regs::bar1::{self, VERSION_QPHANDLE};
use rnic_pvrdma_regs::cmd::{
    CmdHdr, CmdOpcode, CreateCq, CreateCqResp, CreateQp, CreateQpResp, CreateQpRespV2, CreateSrq,
    HandleCmd, HandleResp, QpType, RespHdr, CMD_REQ_SIZE, CMD_RESP_SIZE,
};
use rnic_pvrdma_regs::cqe::{Cqe, Cqne, Eqe};
use rnic_pvrdma_regs::dsr::{Dsr, RingPageInfo, PDIR_ENTRIES, PDIR_MAX_PAGES};
use rnic_pvrdma_regs::ring::{RX_PROD_TAIL, TX_PROD_TAIL};
use rnic_pvrdma_regs::uar::{HANDLE_MASK, QP_DB, QP_RECV, QP_SEND, SRQ_DB};
use rnic_pvrdma_regs::wqe::{RqWqeHdr, Sge, SQ_WQE_HDR_SIZE};
use rnic_pvrdma_regs::PAGE_SIZE;

use crate::boundary::{Dma, Span};
use crate::decode::read;

/// The pages a page directory lists, as the host reaches them.
fn pages(dma: &Dma, pdir: u64, n: usize) -> Vec<Option<Span>> {
    let table = |i: usize| dma.read::<u64>(pdir + (i / PDIR_ENTRIES * 8) as u64);
    (0..n.min(PDIR_MAX_PAGES))
        .map(|i| {
            let t = table(i)?;
            let page = dma.read::<u64>(t + (i % PDIR_ENTRIES * 8) as u64)?;
            dma.host(page, PAGE_SIZE)
        })
        .collect()
}

/// A ring of `n` entries of `stride` bytes from page `first` of `pages`,
/// its producer tail at `prod_at` in the state page (page 0).
#[derive(Debug)]
pub(crate) struct Ring {
    pages: Vec<Option<Span>>,
    first: usize,
    n: u32,
    stride: usize,
    prod_at: usize,
    /// The next index not yet taken (modulo `2n`, as the ring's own).
    next: u32,
}

impl Ring {
    /// A ring; `None` unless `n` and `stride` are powers of two and an
    /// entry fits a page (so no entry crosses one).
    fn new(
        pages: Vec<Option<Span>>,
        first: usize,
        n: u32,
        stride: usize,
        prod_at: usize,
    ) -> Option<Self> {
        let fits = n.is_power_of_two() && stride.is_power_of_two() && stride <= PAGE_SIZE;
        fits.then_some(Ring {
            pages,
            first,
            n,
            stride,
            prod_at,
            next: 0,
        })
    }

    /// Where the entry of slot `slot` lies.
    pub fn entry(&self, slot: u32) -> Option<Span> {
        let off = slot as usize * self.stride;
        let page = (*self.pages.get(self.first + off / PAGE_SIZE)?)?;
        Some(Span {
            vaddr: page.vaddr + off % PAGE_SIZE,
            len: self.stride,
        })
    }

    /// The state page's producer tail.
    fn producer(&self) -> Option<u32> {
        let state = (*self.pages.first()?)?;
        Some(u32::from_le_bytes(
            state.copy(self.prod_at, 4).try_into().ok()?,
        ))
    }

    /// Overwrites the state page's producer tail, as a faulty device
    /// would.
    pub fn set_producer(&self, v: u32) {
        if let Some(state) = self.pages.first().copied().flatten() {
            state.overwrite(self.prod_at, &v.to_le_bytes());
        }
    }

    /// The entries produced since the last call: (index, where). A
    /// producer index out of range (bits above `2n - 1`) gives nothing.
    pub fn take(&mut self) -> Vec<(u32, Span)> {
        let Some(prod) = self.producer() else {
            return Vec::new();
        };
        let wrap = 2 * self.n;
        if prod >= wrap {
            return Vec::new();
        }
        let mut found = Vec::new();
        while self.next != prod && found.len() < self.n as usize {
            if let Some(at) = self.entry(self.next & (self.n - 1)) {
                found.push((self.next, at));
            }
            self.next = (self.next + 1) % wrap;
        }
        found
    }
}

/// A QP's queues, from its CREATE_QP.
#[derive(Debug)]
pub(crate) struct Qp {
    pub qpn: u32,
    pub ty: Option<QpType>,
    pub sq: Option<Ring>,
    pub rq: Option<Ring>,
}

/// A command handed over and not yet answered.
pub(crate) struct Pending {
    pub op: Option<CmdOpcode>,
    pub cookie: u64,
    /// The request as the driver wrote it.
    pub request: Vec<u8>,
}

/// The slots and rings of bring-up, from the device-shared region.
struct Slots {
    request: Span,
    response: Span,
    async_ring: Option<Ring>,
    cq_ring: Option<Ring>,
}

/// An event ring of bring-up: a state page and a page of `T` entries.
fn event_ring<T>(dma: &Dma, info: RingPageInfo) -> Option<Ring> {
    let n = info.num_pages.to_ne() as usize;
    let pages = pages(dma, info.pdir_dma.to_ne(), n);
    let per_page = (PAGE_SIZE / size_of::<T>()) as u32;
    Ring::new(
        pages,
        1,
        per_page * (n.max(1) - 1) as u32,
        size_of::<T>(),
        RX_PROD_TAIL,
    )
}

/// Bytes per WQE: a header and `sge` SGEs, rounded up to a power of two
/// (as every PVRDMA driver lays its queues).
fn stride(header: usize, sge: u32) -> usize {
    (header + sge as usize * size_of::<Sge>()).next_power_of_two()
}

/// A PVRDMA device's memory as the calls show it.
#[derive(Default)]
pub(crate) struct Shadow {
    /// The device's VERSION, once read.
    version: u32,
    dsr_low: u32,
    slots: Option<Slots>,
    pending: Option<Pending>,
    cqs: BTreeMap<u32, Ring>,
    qps: BTreeMap<u32, Qp>,
    srqs: BTreeMap<u32, Ring>,
}

/// A QP doorbell's or SRQ doorbell's WQEs: which queue, and (index, where).
pub(crate) struct Posted {
    /// `qp 3 SQ`, `qp 3 RQ`, `srq 1`.
    pub queue: String,
    /// The QP's type, for a send queue.
    pub ty: Option<QpType>,
    /// Whether they are send WQEs.
    pub send: bool,
    pub wqes: Vec<(u32, Span)>,
}

impl Shadow {
    /// Whether the device answers CREATE_QP with a QP handle.
    pub fn qp_handles(&self) -> bool {
        self.version >= VERSION_QPHANDLE
    }

    /// Notes a register read.
    pub fn on_read(&mut self, offset: usize, v: u32) {
        if offset == bar1::VERSION {
            self.version = v;
        }
    }

    /// Notes a register write; at `REQUEST`, the command handed over.
    pub fn on_write(&mut self, dma: &Dma, offset: usize, v: u32) -> Option<&Pending> {
        match offset {
            bar1::DSRLOW => self.dsr_low = v,
            bar1::DSRHIGH => {
                let iova = u64::from(v) << 32 | u64::from(self.dsr_low);
                self.slots = dma.read::<Dsr>(iova).and_then(|d| {
                    Some(Slots {
                        request: dma.host(d.cmd_slot_dma.to_ne(), CMD_REQ_SIZE)?,
                        response: dma.host(d.resp_slot_dma.to_ne(), CMD_RESP_SIZE)?,
                        async_ring: event_ring::<Eqe>(dma, d.async_ring_pages),
                        cq_ring: event_ring::<Cqne>(dma, d.cq_ring_pages),
                    })
                });
            }
            bar1::REQUEST => {
                let slots = self.slots.as_ref()?;
                let request = slots.request.copy(0, CMD_REQ_SIZE);
                let hdr: CmdHdr = read(&request);
                self.pending = Some(Pending {
                    op: CmdOpcode::from_raw(hdr.cmd.to_ne()),
                    cookie: hdr.response.to_ne(),
                    request,
                });
                return self.pending.as_ref();
            }
            _ => {}
        }
        None
    }

    /// The command answered since the last call, with the response slot:
    /// its response carries the command's cookie. The caller calls
    /// [`Shadow::learn`] once it is done with it.
    pub fn take_response(&mut self) -> Option<(Pending, Span)> {
        let response = self.slots.as_ref()?.response;
        let cookie = read::<RespHdr>(&response.copy(0, size_of::<RespHdr>()))
            .response
            .to_ne();
        if self.pending.as_ref()?.cookie != cookie {
            return None;
        }
        Some((self.pending.take()?, response))
    }

    /// Notes the objects a command made or destroyed: `p` as handed over,
    /// `resp` as the device answered.
    pub fn learn(&mut self, dma: &Dma, p: &Pending, resp: &[u8]) {
        let hdr: RespHdr = read(resp);
        if hdr.err != 0 || p.op.map(CmdOpcode::ack) != Some(hdr.ack.to_ne()) {
            return;
        }
        match p.op {
            Some(CmdOpcode::CreateCq) => {
                let r: CreateCq = read(&p.request);
                let handle = read::<CreateCqResp>(resp).cq_handle.to_ne();
                let pages = pages(dma, r.pdir_dma.to_ne(), r.nchunks.to_ne() as usize);
                let cqe = size_of::<Cqe>();
                if let Some(ring) = Ring::new(pages, 1, r.cqe.to_ne(), cqe, RX_PROD_TAIL) {
                    self.cqs.insert(handle, ring);
                }
            }
            Some(CmdOpcode::CreateQp) => {
                let r: CreateQp = read(&p.request);
                let (handle, qpn) = if self.qp_handles() {
                    let o: CreateQpRespV2 = read(resp);
                    (o.qp_handle.to_ne(), o.qpn.to_ne())
                } else {
                    let qpn = read::<CreateQpResp>(resp).qpn.to_ne();
                    (qpn, qpn)
                };
                let pages = pages(dma, r.pdir_dma.to_ne(), usize::from(r.total_chunks.to_ne()));
                let sq = Ring::new(
                    pages.clone(),
                    1,
                    r.max_send_wr.to_ne(),
                    stride(SQ_WQE_HDR_SIZE, r.max_send_sge.to_ne()),
                    TX_PROD_TAIL,
                );
                let rq = (r.is_srq == 0 && r.max_recv_wr.to_ne() > 0)
                    .then(|| {
                        Ring::new(
                            pages,
                            1 + usize::from(r.send_chunks.to_ne()),
                            r.max_recv_wr.to_ne(),
                            stride(size_of::<RqWqeHdr>(), r.max_recv_sge.to_ne()),
                            RX_PROD_TAIL,
                        )
                    })
                    .flatten();
                let ty = QpType::from_raw(r.qp_type);
                self.qps.insert(handle, Qp { qpn, ty, sq, rq });
            }
            Some(CmdOpcode::CreateSrq) => {
                let r: CreateSrq = read(&p.request);
                let handle = read::<HandleResp>(resp).handle.to_ne();
                let pages = pages(dma, r.pdir_dma.to_ne(), r.nchunks.to_ne() as usize);
                let stride = stride(size_of::<RqWqeHdr>(), r.attrs.max_sge.to_ne());
                if let Some(ring) =
                    Ring::new(pages, 1, r.attrs.max_wr.to_ne(), stride, RX_PROD_TAIL)
                {
                    self.srqs.insert(handle, ring);
                }
            }
            Some(op @ (CmdOpcode::DestroyCq | CmdOpcode::DestroyQp | CmdOpcode::DestroySrq)) => {
                let handle = read::<HandleCmd>(&p.request).handle.to_ne();
                match op {
                    CmdOpcode::DestroyCq => self.cqs.remove(&handle).map(drop),
                    CmdOpcode::DestroyQp => self.qps.remove(&handle).map(drop),
                    _ => self.srqs.remove(&handle).map(drop),
                };
            }
            _ => {}
        }
    }

    /// The WQEs a doorbell write at page offset `off` of `value` posted.
    pub fn posted(&mut self, off: usize, value: u32) -> Option<Posted> {
        let handle = value & HANDLE_MASK;
        match off {
            QP_DB => {
                let qp = self.qps.get_mut(&handle)?;
                let (send, ring, which) = if value & QP_SEND != 0 {
                    (true, qp.sq.as_mut()?, "SQ")
                } else if value & QP_RECV != 0 {
                    (false, qp.rq.as_mut()?, "RQ")
                } else {
                    return None;
                };
                // Before version 20 a QP's handle is its number.
                let name = if qp.qpn == handle {
                    format!("qp {handle} {which}")
                } else {
                    format!("qp {handle} (qpn {}) {which}", qp.qpn)
                };
                Some(Posted {
                    queue: name,
                    ty: qp.ty,
                    send,
                    wqes: ring.take(),
                })
            }
            SRQ_DB => Some(Posted {
                queue: format!("srq {handle}"),
                ty: None,
                send: false,
                wqes: self.srqs.get_mut(&handle)?.take(),
            }),
            _ => None,
        }
    }

    /// The CQEs the device wrote since the last call: (CQ handle, index,
    /// where), and each CQ with new ones.
    pub fn take_cqes(&mut self) -> Vec<(u32, u32, Span)> {
        let mut found = Vec::new();
        for (&handle, ring) in self.cqs.iter_mut() {
            found.extend(ring.take().into_iter().map(|(i, at)| (handle, i, at)));
        }
        found
    }

    /// The CQ ring of handle `handle`.
    pub fn cq(&self, handle: u32) -> Option<&Ring> {
        self.cqs.get(&handle)
    }

    /// The async events the device wrote since the last call.
    pub fn take_async_events(&mut self) -> Vec<(u32, Span)> {
        self.slots
            .as_mut()
            .and_then(|s| s.async_ring.as_mut())
            .map_or_else(Vec::new, Ring::take)
    }

    /// The CQ notifications the device wrote since the last call.
    pub fn take_cq_notifications(&mut self) -> Vec<(u32, Span)> {
        self.slots
            .as_mut()
            .and_then(|s| s.cq_ring.as_mut())
            .map_or_else(Vec::new, Ring::take)
    }
}

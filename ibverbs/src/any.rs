//! The providers this library serves, chosen when a device is opened:
//! rnic (an emulated NIC in the process, or a real one through VFIO) and
//! PVRDMA (through VFIO). Each object of the library holds one of these
//! enums, which implement the verbs core's provider traits by passing
//! each call to the provider inside; objects of two devices never meet (a
//! call that would join them fails with `EINVAL`).

use std::ptr::NonNull;

use rnic_pvrdma::provider as pv;
use rnic_verbs::provider::{
    AddressHandle, CompletionChannel, CompletionQueue, MemoryRegion, MemoryWindow,
    ProtectionDomain, Provider, QpInit, QueuePair, SharedReceiveQueue,
};
use rnic_verbs::{
    AhAttr, AsyncEvent, DestroyError, DeviceAttr, Error, Gid, GidType, MwBind, MwType, PortAttr,
    PostError, QpAttr, QpCap, QpType, RecvWr, Result, SendWr, SrqAttr, UdDest, WorkCompletion,
};
use rnic_vfio::VfioHal;

use crate::platform::Platform;

type Destroyed<T> = std::result::Result<(), DestroyError<T>>;

/// Calls `$e` on the provider's object inside `$v`, of any provider.
macro_rules! each {
    ($v:expr, $x:ident => $e:expr) => {
        match $v {
            Self::Rnic($x) => $e,
            Self::Pvrdma($x) => $e,
        }
    };
}

/// Destroys the object inside `$v`, giving back the enum on a refusal.
macro_rules! destroy_each {
    ($v:expr) => {
        match $v {
            Self::Rnic(x) => rewrap(x.destroy(), Self::Rnic),
            Self::Pvrdma(x) => rewrap(x.destroy(), Self::Pvrdma),
        }
    };
}

fn rewrap<T, U>(r: Destroyed<T>, wrap: impl FnOnce(T) -> U) -> Destroyed<U> {
    r.map_err(|e| DestroyError {
        object: e.object.map(wrap),
        error: e.error,
    })
}

fn mixed() -> Error {
    Error::invalid("the objects belong to different devices")
}

/// An open device.
pub(crate) enum AnyContext {
    /// An rnic NIC.
    Rnic(rnic_driver::Context<Platform>),
    /// A PVRDMA device.
    Pvrdma(pv::Context<VfioHal>),
}

/// A protection domain.
pub(crate) enum AnyPd {
    Rnic(rnic_driver::Pd<Platform>),
    Pvrdma(pv::Pd<VfioHal>),
}

/// A memory region.
pub(crate) enum AnyMr {
    Rnic(rnic_driver::Mr<Platform>),
    Pvrdma(pv::Mr<VfioHal>),
}

/// A completion queue.
pub(crate) enum AnyCq {
    Rnic(rnic_driver::Cq<Platform>),
    Pvrdma(pv::Cq<VfioHal>),
}

/// A queue pair.
pub(crate) enum AnyQp {
    Rnic(rnic_driver::Qp<Platform>),
    Pvrdma(pv::Qp<VfioHal>),
}

/// A shared receive queue.
pub(crate) enum AnySrq {
    Rnic(rnic_driver::Srq<Platform>),
    Pvrdma(pv::Srq<VfioHal>),
}

/// An address handle.
pub(crate) enum AnyAh {
    Rnic(rnic_driver::Ah<Platform>),
    Pvrdma(pv::Ah<VfioHal>),
}

/// A memory window: rnic's only.
pub(crate) enum AnyMw {
    Rnic(rnic_driver::Mw<Platform>),
}

/// A completion channel.
pub(crate) enum AnyChannel {
    Rnic(rnic_driver::CompChannel<Platform>),
    Pvrdma(pv::CompChannel<VfioHal>),
}

impl Provider for AnyContext {
    type Pd = AnyPd;
    type Mr = AnyMr;
    type Cq = AnyCq;
    type Qp = AnyQp;
    type Srq = AnySrq;
    type Ah = AnyAh;
    type Mw = AnyMw;
    type Channel = AnyChannel;

    fn device_attr(&self) -> &DeviceAttr {
        each!(self, c => c.device_attr())
    }
    fn query_device(&self) -> Result<DeviceAttr> {
        each!(self, c => Provider::query_device(c))
    }
    fn query_port(&self, port: u8) -> Result<PortAttr> {
        each!(self, c => Provider::query_port(c, port))
    }
    fn query_gid(&self, port: u8, index: u32) -> Result<Gid> {
        each!(self, c => Provider::query_gid(c, port, index))
    }
    fn query_gid_entry(&self, port: u8, index: u32) -> Result<(Gid, GidType)> {
        each!(self, c => Provider::query_gid_entry(c, port, index))
    }
    fn alloc_pd(&self) -> Result<AnyPd> {
        match self {
            Self::Rnic(c) => Provider::alloc_pd(c).map(AnyPd::Rnic),
            Self::Pvrdma(c) => c.alloc_pd().map(AnyPd::Pvrdma),
        }
    }
    fn create_comp_channel(&self) -> Result<AnyChannel> {
        match self {
            Self::Rnic(c) => Provider::create_comp_channel(c).map(AnyChannel::Rnic),
            Self::Pvrdma(c) => c.create_comp_channel().map(AnyChannel::Pvrdma),
        }
    }
    fn num_comp_vectors(&self) -> u32 {
        each!(self, c => Provider::num_comp_vectors(c))
    }
    fn create_cq(&self, cqe: u32, channel: Option<&AnyChannel>, vector: u32) -> Result<AnyCq> {
        match (self, channel) {
            (Self::Rnic(c), None) => Provider::create_cq(c, cqe, None, vector).map(AnyCq::Rnic),
            (Self::Rnic(c), Some(AnyChannel::Rnic(ch))) => {
                Provider::create_cq(c, cqe, Some(ch), vector).map(AnyCq::Rnic)
            }
            (Self::Pvrdma(c), None) => c.create_cq(cqe, None, vector).map(AnyCq::Pvrdma),
            (Self::Pvrdma(c), Some(AnyChannel::Pvrdma(ch))) => {
                c.create_cq(cqe, Some(ch), vector).map(AnyCq::Pvrdma)
            }
            _ => Err(mixed()),
        }
    }
    fn poll_event(&self) -> Result<Option<AsyncEvent>> {
        each!(self, c => Provider::poll_event(c))
    }
    fn wait_event(&self, timeout_ns: u64) -> Result<Option<AsyncEvent>> {
        each!(self, c => Provider::wait_event(c, timeout_ns))
    }
    fn event_fd(&self) -> Option<i32> {
        each!(self, c => Provider::event_fd(c))
    }
    fn arm_events(&self) {
        each!(self, c => Provider::arm_events(c))
    }
    fn on_event_queued(&self, hook: std::sync::Arc<dyn Fn() + Send + Sync>) {
        each!(self, c => Provider::on_event_queued(c, hook))
    }
    fn has_queued_events(&self) -> bool {
        each!(self, c => Provider::has_queued_events(c))
    }
}

impl ProtectionDomain<AnyContext> for AnyPd {
    fn pd_num(&self) -> u32 {
        each!(self, p => ProtectionDomain::pd_num(p))
    }
    unsafe fn reg_mr(&self, ptr: NonNull<u8>, len: usize, access: u32) -> Result<AnyMr> {
        match self {
            Self::Rnic(p) => {
                // SAFETY: the trait's contract, passed on.
                unsafe { ProtectionDomain::reg_mr(p, ptr, len, access) }.map(AnyMr::Rnic)
            }
            // SAFETY: as above.
            Self::Pvrdma(p) => unsafe { p.reg_mr(ptr, len, access) }.map(AnyMr::Pvrdma),
        }
    }
    fn create_qp(&self, init: &QpInit<'_, AnyContext>) -> Result<AnyQp> {
        match (self, init.send_cq, init.recv_cq, init.srq) {
            (Self::Rnic(p), AnyCq::Rnic(s), AnyCq::Rnic(r), srq) => {
                let srq = match srq {
                    None => None,
                    Some(AnySrq::Rnic(q)) => Some(q),
                    Some(AnySrq::Pvrdma(_)) => return Err(mixed()),
                };
                ProtectionDomain::create_qp(
                    p,
                    &QpInit {
                        send_cq: s,
                        recv_cq: r,
                        srq,
                        cap: init.cap,
                        qp_type: init.qp_type,
                        sq_sig_all: init.sq_sig_all,
                    },
                )
                .map(AnyQp::Rnic)
            }
            (Self::Pvrdma(p), AnyCq::Pvrdma(s), AnyCq::Pvrdma(r), srq) => {
                let srq = match srq {
                    None => None,
                    Some(AnySrq::Pvrdma(q)) => Some(q),
                    Some(AnySrq::Rnic(_)) => return Err(mixed()),
                };
                p.create_qp(&QpInit {
                    send_cq: s,
                    recv_cq: r,
                    srq,
                    cap: init.cap,
                    qp_type: init.qp_type,
                    sq_sig_all: init.sq_sig_all,
                })
                .map(AnyQp::Pvrdma)
            }
            _ => Err(mixed()),
        }
    }
    fn create_srq(&self, attr: &SrqAttr) -> Result<AnySrq> {
        match self {
            Self::Rnic(p) => ProtectionDomain::create_srq(p, attr).map(AnySrq::Rnic),
            Self::Pvrdma(p) => p.create_srq(attr).map(AnySrq::Pvrdma),
        }
    }
    fn create_ah(&self, attr: &AhAttr) -> Result<AnyAh> {
        match self {
            Self::Rnic(p) => ProtectionDomain::create_ah(p, attr).map(AnyAh::Rnic),
            Self::Pvrdma(p) => p.create_ah(attr).map(AnyAh::Pvrdma),
        }
    }
    fn alloc_mw(&self, mw_type: MwType) -> Result<AnyMw> {
        match self {
            Self::Rnic(p) => ProtectionDomain::alloc_mw(p, mw_type).map(AnyMw::Rnic),
            Self::Pvrdma(p) => match p.alloc_mw(mw_type)? {},
        }
    }
    fn destroy(self) -> Destroyed<Self> {
        destroy_each!(self)
    }
}

impl MemoryRegion<AnyContext> for AnyMr {
    fn lkey(&self) -> u32 {
        each!(self, m => MemoryRegion::lkey(m))
    }
    fn rkey(&self) -> u32 {
        each!(self, m => MemoryRegion::rkey(m))
    }
    fn rereg(&mut self, pd: Option<&AnyPd>, access: Option<u32>) -> Result<()> {
        match (self, pd) {
            (Self::Rnic(m), None) => MemoryRegion::rereg(m, None, access),
            (Self::Rnic(m), Some(AnyPd::Rnic(p))) => MemoryRegion::rereg(m, Some(p), access),
            (Self::Pvrdma(m), None) => m.rereg(None, access),
            (Self::Pvrdma(m), Some(AnyPd::Pvrdma(p))) => m.rereg(Some(p), access),
            _ => Err(mixed()),
        }
    }
    unsafe fn rereg_memory(&mut self, ptr: NonNull<u8>, len: usize) -> Result<()> {
        // SAFETY: the trait's contract, passed on.
        each!(self, m => unsafe { MemoryRegion::rereg_memory(m, ptr, len) })
    }
    fn destroy(self) -> Destroyed<Self> {
        destroy_each!(self)
    }
}

impl CompletionQueue for AnyCq {
    fn cq_num(&self) -> u32 {
        each!(self, c => CompletionQueue::cq_num(c))
    }
    fn cqe(&self) -> u32 {
        each!(self, c => CompletionQueue::cqe(c))
    }
    fn poll(&self, wc: &mut [WorkCompletion]) -> Result<usize> {
        each!(self, c => CompletionQueue::poll(c, wc))
    }
    fn arm(&self, solicited_only: bool) {
        each!(self, c => CompletionQueue::arm(c, solicited_only))
    }
    fn ack_events(&self, n: u32) -> Result<()> {
        each!(self, c => CompletionQueue::ack_events(c, n))
    }
    fn resize(&self, cqe: u32) -> Result<()> {
        each!(self, c => CompletionQueue::resize(c, cqe))
    }
    fn destroy(self) -> Destroyed<Self> {
        destroy_each!(self)
    }
}

impl QueuePair for AnyQp {
    fn qp_num(&self) -> u32 {
        each!(self, q => QueuePair::qp_num(q))
    }
    fn qp_type(&self) -> QpType {
        each!(self, q => QueuePair::qp_type(q))
    }
    fn cap(&self) -> QpCap {
        each!(self, q => QueuePair::cap(q))
    }
    fn modify(&self, attr: &QpAttr, mask: u32) -> Result<()> {
        each!(self, q => QueuePair::modify(q, attr, mask))
    }
    fn query(&self) -> Result<QpAttr> {
        each!(self, q => QueuePair::query(q))
    }
    fn post_send(&self, wrs: &[SendWr<'_>]) -> std::result::Result<(), PostError> {
        each!(self, q => QueuePair::post_send(q, wrs))
    }
    fn post_recv(&self, wrs: &[RecvWr<'_>]) -> std::result::Result<(), PostError> {
        each!(self, q => QueuePair::post_recv(q, wrs))
    }
    fn destroy(self) -> Destroyed<Self> {
        destroy_each!(self)
    }
}

impl AnyQp {
    /// Binds type 1 window `mw` to `region` (address, length, access) of
    /// `mr` with bind request `wr_id` (`ibv_bind_mw`): the window's new
    /// rkey. Windows are rnic's only.
    pub(crate) fn bind_mw(
        &self,
        mw: &AnyMw,
        mr: &AnyMr,
        region: (u64, u64, u32),
        wr_id: u64,
        flags: u32,
    ) -> std::result::Result<u32, PostError> {
        match (self, mw, mr) {
            (Self::Rnic(q), AnyMw::Rnic(w), AnyMr::Rnic(m)) => {
                q.bind_mw(w, m, region, wr_id, flags)
            }
            _ => Err(PostError {
                index: 0,
                error: mixed(),
            }),
        }
    }
}

impl SharedReceiveQueue for AnySrq {
    fn srq_num(&self) -> u32 {
        each!(self, q => SharedReceiveQueue::srq_num(q))
    }
    fn attr(&self) -> SrqAttr {
        each!(self, q => SharedReceiveQueue::attr(q))
    }
    fn post_recv(&self, wrs: &[RecvWr<'_>]) -> std::result::Result<(), PostError> {
        each!(self, q => SharedReceiveQueue::post_recv(q, wrs))
    }
    fn modify(&self, attr: &SrqAttr, mask: u32) -> Result<()> {
        each!(self, q => SharedReceiveQueue::modify(q, attr, mask))
    }
    fn query(&self) -> Result<SrqAttr> {
        each!(self, q => SharedReceiveQueue::query(q))
    }
    fn destroy(self) -> Destroyed<Self> {
        destroy_each!(self)
    }
}

impl AddressHandle for AnyAh {
    fn attr(&self) -> AhAttr {
        each!(self, a => AddressHandle::attr(a))
    }
    fn dest(&self, remote_qpn: u32, remote_qkey: u32) -> UdDest {
        each!(self, a => AddressHandle::dest(a, remote_qpn, remote_qkey))
    }
}

impl MemoryWindow<AnyContext> for AnyMw {
    fn rkey(&self) -> u32 {
        let Self::Rnic(w) = self;
        MemoryWindow::rkey(w)
    }
    fn mw_type(&self) -> MwType {
        let Self::Rnic(w) = self;
        MemoryWindow::mw_type(w)
    }
    fn bind_wr_keyed(&self, mr: &AnyMr, region: (u64, u64, u32), key: u8) -> Result<MwBind> {
        let Self::Rnic(w) = self;
        match mr {
            AnyMr::Rnic(m) => MemoryWindow::bind_wr_keyed(w, m, region, key),
            AnyMr::Pvrdma(_) => Err(mixed()),
        }
    }
    fn destroy(self) -> Destroyed<Self> {
        let Self::Rnic(w) = self;
        rewrap(MemoryWindow::destroy(w), Self::Rnic)
    }
}

impl CompletionChannel for AnyChannel {
    fn fd(&self) -> Option<i32> {
        each!(self, c => CompletionChannel::fd(c))
    }
    fn get_cq_event(&self, timeout_ns: u64) -> Result<Option<u32>> {
        each!(self, c => CompletionChannel::get_cq_event(c, timeout_ns))
    }
    fn destroy(self) -> Destroyed<Self> {
        destroy_each!(self)
    }
}

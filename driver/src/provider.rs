//! rnic as a provider: the verbs core's traits over this driver's objects,
//! each call the object's own method of the same name.

use core::ptr::NonNull;

use rnic_hw_regs::eqe::EventType as Eq;
use rnic_queues::Hal;
use rnic_verbs::provider::{
    AddressHandle, CompletionChannel, CompletionQueue, MemoryRegion, MemoryWindow,
    ProtectionDomain, Provider, QpInit, QueuePair, SharedReceiveQueue,
};
use rnic_verbs::{
    AhAttr, AsyncEvent, DestroyError, DeviceAttr, EventType, Gid, GidType, MwBind, MwType,
    PortAttr, PostError, QpAttr, QpCap, QpType, RecvWr, Result, SendWr, SrqAttr, UdDest,
    WorkCompletion,
};

use crate::{Ah, CompChannel, Context, Cq, Mr, Mw, Pd, Qp, Srq};

type Destroyed<T> = core::result::Result<(), DestroyError<T>>;

impl<H: Hal> Provider for Context<H> {
    type Pd = Pd<H>;
    type Mr = Mr<H>;
    type Cq = Cq<H>;
    type Qp = Qp<H>;
    type Srq = Srq<H>;
    type Ah = Ah<H>;
    type Mw = Mw<H>;
    type Channel = CompChannel<H>;

    fn device_attr(&self) -> &DeviceAttr {
        Context::device_attr(self)
    }
    fn query_device(&self) -> Result<DeviceAttr> {
        Context::query_device(self)
    }
    fn query_port(&self, port: u8) -> Result<PortAttr> {
        Context::query_port(self, port)
    }
    fn query_gid(&self, port: u8, index: u32) -> Result<Gid> {
        Context::query_gid(self, port, index)
    }
    fn query_gid_entry(&self, port: u8, index: u32) -> Result<(Gid, GidType)> {
        Context::query_gid_entry(self, port, index)
    }
    fn alloc_pd(&self) -> Result<Pd<H>> {
        Context::alloc_pd(self)
    }
    fn create_comp_channel(&self) -> Result<CompChannel<H>> {
        Context::create_comp_channel(self)
    }
    fn num_comp_vectors(&self) -> u32 {
        Context::num_comp_vectors(self).max(1)
    }
    fn create_cq(&self, cqe: u32, channel: Option<&CompChannel<H>>, vector: u32) -> Result<Cq<H>> {
        self.create_cq_with(cqe, channel, vector)
    }
    fn poll_event(&self) -> Result<Option<AsyncEvent>> {
        while let Some(ev) = Context::poll_event(self) {
            if let Some(ev) = verbs_event(&ev) {
                return Ok(Some(ev));
            }
        }
        Ok(None)
    }
    fn wait_event(&self, timeout_ns: u64) -> Result<Option<AsyncEvent>> {
        let start = self.hal().now_ns();
        loop {
            let left = timeout_ns.saturating_sub(self.hal().now_ns().saturating_sub(start));
            match Context::wait_event(self, left)? {
                Some(ev) => match verbs_event(&ev) {
                    Some(ev) => return Ok(Some(ev)),
                    None if left > 0 => continue,
                    None => return Ok(None),
                },
                None => return Ok(None),
            }
        }
    }
    fn event_fd(&self) -> Option<i32> {
        Context::event_fd(self)
    }
    fn arm_events(&self) {
        Context::arm_events(self)
    }
    fn on_event_queued(&self, hook: crate::EventHook) {
        Context::on_event_queued(self, hook)
    }
    fn has_queued_events(&self) -> bool {
        Context::has_queued_events(self)
    }
}

/// An rnic event as the verbs core's; `None` for the completion and
/// command events the EQ also carries, which are not asynchronous events.
fn verbs_event(ev: &crate::AsyncEvent) -> Option<AsyncEvent> {
    let event_type = match ev.event_type {
        Eq::CqError => EventType::CqErr,
        Eq::QpFatal => EventType::QpFatal,
        Eq::QpReqErr => EventType::QpReqErr,
        Eq::QpAccessErr => EventType::QpAccessErr,
        Eq::CommEst => EventType::CommEst,
        Eq::SqDrained => EventType::SqDrained,
        Eq::QpLastWqeReached => EventType::QpLastWqeReached,
        Eq::PortActive => EventType::PortActive,
        Eq::PortErr => EventType::PortErr,
        Eq::GidChange => EventType::GidChange,
        Eq::DeviceFatal => EventType::DeviceFatal,
        Eq::SrqLimitReached => EventType::SrqLimitReached,
        Eq::SrqErr => EventType::SrqErr,
        Eq::Completion | Eq::CmdDone => return None,
    };
    Some(AsyncEvent {
        event_type,
        obj: ev.obj,
    })
}

impl<H: Hal> ProtectionDomain<Context<H>> for Pd<H> {
    fn pd_num(&self) -> u32 {
        Pd::pd_num(self)
    }
    unsafe fn reg_mr(&self, ptr: NonNull<u8>, len: usize, access: u32) -> Result<Mr<H>> {
        // SAFETY: the trait's contract is the method's.
        unsafe { Pd::reg_mr(self, ptr, len, access) }
    }
    fn create_qp(&self, init: &QpInit<'_, Context<H>>) -> Result<Qp<H>> {
        Pd::create_qp(self, init)
    }
    fn create_srq(&self, attr: &SrqAttr) -> Result<Srq<H>> {
        Pd::create_srq(self, attr)
    }
    fn create_ah(&self, attr: &AhAttr) -> Result<Ah<H>> {
        Pd::create_ah(self, attr)
    }
    fn alloc_mw(&self, mw_type: MwType) -> Result<Mw<H>> {
        Pd::alloc_mw(self, mw_type)
    }
    fn destroy(self) -> Destroyed<Self> {
        Pd::destroy(self)
    }
}

impl<H: Hal> MemoryRegion<Context<H>> for Mr<H> {
    fn lkey(&self) -> u32 {
        Mr::lkey(self)
    }
    fn rkey(&self) -> u32 {
        Mr::rkey(self)
    }
    fn rereg(&mut self, pd: Option<&Pd<H>>, access: Option<u32>) -> Result<()> {
        Mr::rereg(self, pd, access)
    }
    unsafe fn rereg_memory(&mut self, ptr: NonNull<u8>, len: usize) -> Result<()> {
        // SAFETY: the trait's contract is the method's.
        unsafe { Mr::rereg_memory(self, ptr, len) }
    }
    fn destroy(self) -> Destroyed<Self> {
        Mr::destroy(self)
    }
}

impl<H: Hal> CompletionQueue for Cq<H> {
    fn cq_num(&self) -> u32 {
        Cq::cq_num(self)
    }
    fn cqe(&self) -> u32 {
        Cq::cqe(self)
    }
    fn poll(&self, wc: &mut [WorkCompletion]) -> Result<usize> {
        Cq::poll(self, wc)
    }
    fn arm(&self, solicited_only: bool) {
        Cq::arm(self, solicited_only)
    }
    fn ack_events(&self, n: u32) -> Result<()> {
        Cq::ack_events(self, n)
    }
    fn resize(&self, cqe: u32) -> Result<()> {
        Cq::resize(self, cqe)
    }
    fn destroy(self) -> Destroyed<Self> {
        Cq::destroy(self)
    }
}

impl<H: Hal> QueuePair for Qp<H> {
    fn qp_num(&self) -> u32 {
        Qp::qp_num(self)
    }
    fn qp_type(&self) -> QpType {
        Qp::qp_type(self)
    }
    fn cap(&self) -> QpCap {
        Qp::cap(self)
    }
    fn modify(&self, attr: &QpAttr, mask: u32) -> Result<()> {
        Qp::modify(self, attr, mask)
    }
    fn query(&self) -> Result<QpAttr> {
        Qp::query(self)
    }
    fn post_send(&self, wrs: &[SendWr<'_>]) -> core::result::Result<(), PostError> {
        Qp::post_send(self, wrs)
    }
    fn post_recv(&self, wrs: &[RecvWr<'_>]) -> core::result::Result<(), PostError> {
        Qp::post_recv(self, wrs)
    }
    fn destroy(self) -> Destroyed<Self> {
        Qp::destroy(self)
    }
}

impl<H: Hal> SharedReceiveQueue for Srq<H> {
    fn srq_num(&self) -> u32 {
        Srq::srq_num(self)
    }
    fn attr(&self) -> SrqAttr {
        Srq::attr(self)
    }
    fn post_recv(&self, wrs: &[RecvWr<'_>]) -> core::result::Result<(), PostError> {
        Srq::post_recv(self, wrs)
    }
    fn modify(&self, attr: &SrqAttr, mask: u32) -> Result<()> {
        Srq::modify(self, attr, mask)
    }
    fn query(&self) -> Result<SrqAttr> {
        Srq::query(self)
    }
    fn destroy(self) -> Destroyed<Self> {
        Srq::destroy(self)
    }
}

impl<H: Hal> AddressHandle for Ah<H> {
    fn attr(&self) -> AhAttr {
        Ah::attr(self)
    }
    fn dest(&self, remote_qpn: u32, remote_qkey: u32) -> UdDest {
        Ah::dest(self, remote_qpn, remote_qkey)
    }
}

impl<H: Hal> MemoryWindow<Context<H>> for Mw<H> {
    fn rkey(&self) -> u32 {
        Mw::rkey(self)
    }
    fn mw_type(&self) -> MwType {
        Mw::mw_type(self)
    }
    fn bind_wr_keyed(&self, mr: &Mr<H>, region: (u64, u64, u32), key: u8) -> Result<MwBind> {
        Ok(Mw::bind_wr_keyed(self, mr, region, key))
    }
    fn destroy(self) -> Destroyed<Self> {
        Mw::destroy(self)
    }
}

impl<H: Hal> CompletionChannel for CompChannel<H> {
    fn fd(&self) -> Option<i32> {
        CompChannel::fd(self)
    }
    fn get_cq_event(&self, timeout_ns: u64) -> Result<Option<u32>> {
        Ok(CompChannel::get_cq_event(self, timeout_ns)?.map(|cq| cq.cq_num()))
    }
    fn destroy(self) -> Destroyed<Self> {
        CompChannel::destroy(self)
    }
}

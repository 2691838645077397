//! The provider seam: what one device kind's driver implements so that
//! code written against the verbs runs on it, as rdma-core's providers
//! fill `verbs_context_ops`.
//!
//! A provider is its context type (an open device, `struct ibv_context`)
//! implementing [`Provider`], and its objects implementing the object
//! traits here. Code that knows its device names the provider's types and
//! is resolved at compile time; code that chooses at run time (the
//! libibverbs shim) implements the traits once more for an enum over the
//! providers it serves.
//!
//! What a device cannot do is an `EOPNOTSUPP` ([`ErrorKind::NotSupported`])
//! error: the optional operations have that as their default, and a
//! provider without SRQs or memory windows names [`Unsupported`] as those
//! object types.
//!
//! Every object keeps what it depends on alive (a QP its PD and CQs, all
//! of them their context), so dropping in any order is safe; `destroy`
//! reports the device's answer and hands the object back when the device
//! refused.

use core::ptr::NonNull;

use crate::attr::{DeviceAttr, Gid, PortAttr};
use crate::enums::{GidType, QpType};
use crate::error::{DestroyError, Error, ErrorKind, PostError, Result};
use crate::event::AsyncEvent;
use crate::qp::{AhAttr, QpAttr, QpCap};
use crate::srq::SrqAttr;
use crate::wc::WorkCompletion;
use crate::wr::{MwBind, MwType, RecvWr, SendWr, UdDest};

/// The error of an operation the device does not have.
pub fn unsupported(what: &str) -> Error {
    Error::new(
        ErrorKind::NotSupported,
        alloc::format!("{what}: the device does not support it"),
    )
}

/// An open device of one kind: its queries and the objects made on it.
pub trait Provider: Sized {
    /// Protection domains.
    type Pd: ProtectionDomain<Self>;
    /// Memory regions.
    type Mr: MemoryRegion<Self>;
    /// Completion queues.
    type Cq: CompletionQueue;
    /// Queue pairs.
    type Qp: QueuePair;
    /// Shared receive queues ([`Unsupported`] if the device has none).
    type Srq: SharedReceiveQueue;
    /// Address handles.
    type Ah: AddressHandle;
    /// Memory windows ([`Unsupported`] if the device has none).
    type Mw: MemoryWindow<Self>;
    /// Completion channels.
    type Channel: CompletionChannel;

    /// The device's attributes, as they were at open.
    fn device_attr(&self) -> &DeviceAttr;
    /// The device's attributes, asked of the device now.
    fn query_device(&self) -> Result<DeviceAttr>;
    /// Port `port`'s attributes (ports count from 1).
    fn query_port(&self, port: u8) -> Result<PortAttr>;
    /// Entry `index` of port `port`'s GID table (all zeros: empty).
    fn query_gid(&self, port: u8, index: u32) -> Result<Gid>;
    /// Entry `index` of port `port`'s GID table and its type, in one look
    /// (a GID table listing asks for both of every entry).
    fn query_gid_entry(&self, port: u8, index: u32) -> Result<(Gid, GidType)>;
    /// A protection domain.
    fn alloc_pd(&self) -> Result<Self::Pd>;
    /// A completion channel.
    fn create_comp_channel(&self) -> Result<Self::Channel>;
    /// How many completion vectors a CQ may take its events from
    /// (`ibv_context.num_comp_vectors`): `vector` of
    /// [`Provider::create_cq`] is below it.
    fn num_comp_vectors(&self) -> u32;
    /// A CQ of at least `cqe` entries, its completion events on `channel`
    /// (if any) from vector `vector`.
    fn create_cq(&self, cqe: u32, channel: Option<&Self::Channel>, vector: u32)
        -> Result<Self::Cq>;

    /// The next asynchronous event, if one is waiting.
    fn poll_event(&self) -> Result<Option<AsyncEvent>>;
    /// Waits up to `timeout_ns` for the next asynchronous event: `None`
    /// on timeout; [`ErrorKind::Interrupted`](crate::ErrorKind::Interrupted)
    /// if a signal handler ran in the waiting thread.
    fn wait_event(&self, timeout_ns: u64) -> Result<Option<AsyncEvent>>;
    /// A file descriptor readable when an event may be waiting, where the
    /// platform has one (`ibv_context.async_fd`).
    fn event_fd(&self) -> Option<i32>;

    /// Makes [`Provider::event_fd`] turn readable at the next event, on a
    /// device that signals each event only once asked.
    fn arm_events(&self) {}

    /// On a device whose contexts share one event queue: runs `hook` when
    /// another context of the device takes an event of this one off it
    /// and queues it here, where [`Provider::event_fd`] does not tell of
    /// it. Elsewhere nothing.
    fn on_event_queued(&self, hook: alloc::sync::Arc<dyn Fn() + Send + Sync>) {
        let _ = hook;
    }

    /// Whether events that [`Provider::on_event_queued`] told of wait.
    fn has_queued_events(&self) -> bool {
        false
    }
}

/// A protection domain (`struct ibv_pd`): what its MRs, QPs, SRQs, AHs
/// and windows are made in.
pub trait ProtectionDomain<P: Provider>: Sized {
    /// The device's number for it.
    fn pd_num(&self) -> u32;

    /// Registers `len` bytes at `ptr` with `access` (`IBV_ACCESS_*`).
    ///
    /// # Safety
    ///
    /// The memory stays valid, and is not freed or remapped, until the MR
    /// is destroyed (or given up by a failed destroy): the device reads
    /// and writes it.
    unsafe fn reg_mr(&self, ptr: NonNull<u8>, len: usize, access: u32) -> Result<P::Mr>;

    /// A QP in the RESET state.
    fn create_qp(&self, init: &QpInit<'_, P>) -> Result<P::Qp>;

    /// A shared receive queue.
    fn create_srq(&self, attr: &SrqAttr) -> Result<P::Srq> {
        let _ = attr;
        Err(unsupported("shared receive queues"))
    }

    /// An address handle to `attr`'s path.
    fn create_ah(&self, attr: &AhAttr) -> Result<P::Ah>;

    /// A memory window.
    fn alloc_mw(&self, mw_type: MwType) -> Result<P::Mw> {
        let _ = mw_type;
        Err(unsupported("memory windows"))
    }

    /// Deallocates it (`ibv_dealloc_pd`).
    fn destroy(self) -> core::result::Result<(), DestroyError<Self>>;
}

/// What a QP is made with (`struct ibv_qp_init_attr`).
pub struct QpInit<'a, P: Provider> {
    /// CQ for send completions.
    pub send_cq: &'a P::Cq,
    /// CQ for receive completions (may be the same).
    pub recv_cq: &'a P::Cq,
    /// The shared receive queue its receives come from, if any.
    pub srq: Option<&'a P::Srq>,
    /// Requested capacities; the QP provides at least these.
    pub cap: QpCap,
    /// Transport.
    pub qp_type: QpType,
    /// Every send request generates a completion, signaled or not.
    pub sq_sig_all: bool,
}

/// A memory region (`struct ibv_mr`).
pub trait MemoryRegion<P: Provider>: Sized {
    /// Its local key.
    fn lkey(&self) -> u32;
    /// Its remote key.
    fn rkey(&self) -> u32;

    /// Moves it to `pd` and/or changes its access (`ibv_rereg_mr`).
    fn rereg(&mut self, pd: Option<&P::Pd>, access: Option<u32>) -> Result<()> {
        let _ = (pd, access);
        Err(unsupported("re-registering an MR"))
    }

    /// Makes it describe `len` bytes at `ptr` instead (`ibv_rereg_mr`
    /// with `IBV_REREG_MR_CHANGE_TRANSLATION`).
    ///
    /// # Safety
    ///
    /// As for [`ProtectionDomain::reg_mr`], for the new memory.
    unsafe fn rereg_memory(&mut self, ptr: NonNull<u8>, len: usize) -> Result<()> {
        let _ = (ptr, len);
        Err(unsupported("re-registering an MR's memory"))
    }

    /// Deregisters it (`ibv_dereg_mr`).
    fn destroy(self) -> core::result::Result<(), DestroyError<Self>>;
}

/// A completion queue (`struct ibv_cq`).
pub trait CompletionQueue: Sized {
    /// The device's number for it: what a channel's event names.
    fn cq_num(&self) -> u32;
    /// Completions it holds.
    fn cqe(&self) -> u32;
    /// Up to `wc.len()` completions, oldest first; how many.
    fn poll(&self, wc: &mut [WorkCompletion]) -> Result<usize>;
    /// Asks for a completion event on its channel at the next completion
    /// (the next solicited one if `solicited_only`).
    fn arm(&self, solicited_only: bool);

    /// Counts `n` of its completion events acknowledged.
    fn ack_events(&self, n: u32) -> Result<()> {
        let _ = n;
        Ok(())
    }

    /// Makes it hold at least `cqe` completions (`ibv_resize_cq`).
    fn resize(&self, cqe: u32) -> Result<()> {
        let _ = cqe;
        Err(unsupported("resizing a CQ"))
    }

    /// Destroys it (`ibv_destroy_cq`).
    fn destroy(self) -> core::result::Result<(), DestroyError<Self>>;
}

/// A queue pair (`struct ibv_qp`).
pub trait QueuePair: Sized {
    /// Its number on the wire.
    fn qp_num(&self) -> u32;
    /// Its transport.
    fn qp_type(&self) -> QpType;
    /// The capacities it was given.
    fn cap(&self) -> QpCap;
    /// Changes its state and attributes (`ibv_modify_qp`): the fields of
    /// `attr` that `mask` names.
    fn modify(&self, attr: &QpAttr, mask: u32) -> Result<()>;
    /// Its attributes (`ibv_query_qp`).
    fn query(&self) -> Result<QpAttr>;
    /// Posts send work requests, in order; stops at the first that cannot
    /// be posted.
    fn post_send(&self, wrs: &[SendWr<'_>]) -> core::result::Result<(), PostError>;
    /// Posts receive work requests, as [`QueuePair::post_send`].
    fn post_recv(&self, wrs: &[RecvWr<'_>]) -> core::result::Result<(), PostError>;
    /// Destroys it (`ibv_destroy_qp`).
    fn destroy(self) -> core::result::Result<(), DestroyError<Self>>;
}

/// A shared receive queue (`struct ibv_srq`).
pub trait SharedReceiveQueue: Sized {
    /// The device's number for it.
    fn srq_num(&self) -> u32;
    /// Its attributes as the driver knows them.
    fn attr(&self) -> SrqAttr;
    /// Posts receive work requests, in order.
    fn post_recv(&self, wrs: &[RecvWr<'_>]) -> core::result::Result<(), PostError>;
    /// Changes what `mask` ([`crate::srq_mask`]) names.
    fn modify(&self, attr: &SrqAttr, mask: u32) -> Result<()>;
    /// Its attributes, asked of the device.
    fn query(&self) -> Result<SrqAttr>;
    /// Destroys it (`ibv_destroy_srq`).
    fn destroy(self) -> core::result::Result<(), DestroyError<Self>>;
}

/// An address handle (`struct ibv_ah`).
pub trait AddressHandle: Sized {
    /// Its path, as checked when it was made.
    fn attr(&self) -> AhAttr;
    /// A UD destination through it: QP `remote_qpn`, Q_Key `remote_qkey`.
    fn dest(&self, remote_qpn: u32, remote_qkey: u32) -> UdDest;
}

/// A memory window (`struct ibv_mw`).
pub trait MemoryWindow<P: Provider>: Sized {
    /// Its rkey.
    fn rkey(&self) -> u32;
    /// Its type.
    fn mw_type(&self) -> MwType;
    /// The bind work request giving it `length` bytes of `mr` at `addr`
    /// with `access`, under a new rkey whose key byte is `key`; an MR
    /// the window cannot name is `EINVAL`.
    fn bind_wr_keyed(&self, mr: &P::Mr, region: (u64, u64, u32), key: u8) -> Result<MwBind>;
    /// Deallocates it (`ibv_dealloc_mw`).
    fn destroy(self) -> core::result::Result<(), DestroyError<Self>>;
}

/// A completion channel (`struct ibv_comp_channel`).
pub trait CompletionChannel: Sized {
    /// A file descriptor readable when an event may be waiting, where the
    /// platform has one.
    fn fd(&self) -> Option<i32>;
    /// Waits up to `timeout_ns` for the next completion event: the number
    /// of its CQ ([`CompletionQueue::cq_num`]), `None` on timeout;
    /// [`ErrorKind::Interrupted`](crate::ErrorKind::Interrupted) if a
    /// signal handler ran in the waiting thread.
    fn get_cq_event(&self, timeout_ns: u64) -> Result<Option<u32>>;
    /// Destroys it (`ibv_destroy_comp_channel`).
    fn destroy(self) -> core::result::Result<(), DestroyError<Self>>;
}

/// The object type of an operation a device does not have: there is no
/// value of it, since making one fails with `EOPNOTSUPP`.
#[derive(Debug)]
pub enum Unsupported {}

impl SharedReceiveQueue for Unsupported {
    fn srq_num(&self) -> u32 {
        match *self {}
    }
    fn attr(&self) -> SrqAttr {
        match *self {}
    }
    fn post_recv(&self, _: &[RecvWr<'_>]) -> core::result::Result<(), PostError> {
        match *self {}
    }
    fn modify(&self, _: &SrqAttr, _: u32) -> Result<()> {
        match *self {}
    }
    fn query(&self) -> Result<SrqAttr> {
        match *self {}
    }
    fn destroy(self) -> core::result::Result<(), DestroyError<Self>> {
        match self {}
    }
}

impl<P: Provider> MemoryWindow<P> for Unsupported {
    fn rkey(&self) -> u32 {
        match *self {}
    }
    fn mw_type(&self) -> MwType {
        match *self {}
    }
    fn bind_wr_keyed(&self, _: &P::Mr, _: (u64, u64, u32), _: u8) -> Result<MwBind> {
        match *self {}
    }
    fn destroy(self) -> core::result::Result<(), DestroyError<Self>> {
        match self {}
    }
}

//! The device context: bring-up, device queries, and the state every object
//! shares.

use alloc::collections::BTreeMap;
use alloc::format;
use alloc::sync::{Arc, Weak};
use alloc::vec::Vec;
use core::fmt;
use core::sync::atomic::{AtomicU32, Ordering};

use rnic_hw_regs::cmd::{
    AllocUctxIn, AllocUctxOut, CmdOpcode, CmdStatus, ObjIn, QueryDeviceOut, QueryGidIn,
    QueryGidOut, QueryPortIn, QueryPortOut,
};
use rnic_hw_regs::le32;
use rnic_hw_regs::pci::BAR_DOORBELL;
use rnic_hw_regs::uar::{BF, UAR_PAGE_SIZE};
use rnic_queues::{Hal, Pod};
use rnic_verbs::GidType;
use spin::RwLock;

use crate::bringup::{Config, Device, DeviceMem};
use crate::cq::CqArm;
use crate::error::{CmdFailure, Error, ErrorKind, Result};
use crate::qp::QpShared;
use rnic_verbs::{DeviceAttr, Gid, PortAttr};

/// A user context on a device (`struct ibv_context`). Cloning is cheap:
/// clones are the same context. [`Context::open_another`] opens another
/// context on the same device: each has doorbell pages of its own, and
/// the device hides each context's objects from the other's commands.
///
/// A context is closed (its objects destroyed on the device) when the last
/// clone and the last object made from it are dropped; the device is reset
/// (stopping all DMA) and its queues freed when its last context closes.
pub struct Context<H: Hal> {
    pub(crate) shared: Arc<ContextCore<H>>,
}

impl<H: Hal> Clone for Context<H> {
    fn clone(&self) -> Self {
        Self {
            shared: Arc::clone(&self.shared),
        }
    }
}

/// A weak handle on a device that contexts are open on
/// ([`Context::device_handle`]).
pub struct DeviceHandle<H: Hal> {
    dev: Weak<Device<H>>,
    pages: u32,
}

impl<H: Hal> DeviceHandle<H> {
    /// Opens another context on the device, as [`Context::open_another`]
    /// does, if a context is still open on it; `None` once the last one
    /// has closed (and the device has been reset).
    pub fn open_context(&self) -> Option<Result<Context<H>>> {
        let dev = self.dev.upgrade()?;
        Some(Context::on_device(dev, self.pages))
    }
}

/// State shared by the context and every object made from it.
pub(crate) struct ContextCore<H: Hal> {
    pub(crate) dev: Arc<Device<H>>,
    /// The device's number for this context (`CmdHeader::uid`; 0 on a
    /// device without user contexts).
    pub(crate) uid: u32,
    /// Its doorbell pages: `uar_first ..` `uar_count` of them.
    uar_first: u32,
    uar_count: u32,
    /// Live SRQs by number, for the event queue.
    pub(crate) srqs: RwLock<alloc::collections::BTreeSet<u32>>,
    /// Events of this context's objects that another context's poll took
    /// from the device's event queue.
    pub(crate) pending: spin::Mutex<alloc::collections::VecDeque<crate::AsyncEvent>>,
    /// Run after another context's poll queued an event in `pending`
    /// ([`Context::on_event_queued`]).
    pub(crate) queued: spin::Mutex<Option<EventHook>>,
    pub(crate) attr: DeviceAttr,
    /// Attributes of ports 1..=n at bring-up (index 0 is port 1).
    pub(crate) ports: Vec<PortAttr>,
    /// Live QPs by number, for the event queue.
    pub(crate) qps: RwLock<BTreeMap<u32, Arc<QpShared>>>,
    /// Arm state of live CQs by number, for the event queue.
    pub(crate) cqs: RwLock<BTreeMap<u32, Arc<CqArm>>>,
    next_uar: AtomicU32,
    /// Test hook run right after a successful DESTROY_QP or DESTROY_CQ,
    /// before the driver forgets the object: a test can reuse the number
    /// there, as another thread could.
    #[cfg(test)]
    pub(crate) after_destroy: spin::Mutex<Option<TestHook>>,
}

/// What a context runs when an event of its own is queued for it.
pub type EventHook = Arc<dyn Fn() + Send + Sync>;

#[cfg(test)]
pub(crate) type TestHook = alloc::boxed::Box<dyn FnOnce(CmdOpcode, u32) + Send>;

/// Removes `key` from `table` if it still maps to `ours`: the device may
/// have given the number to a new object, registered by another thread,
/// since ours was destroyed.
pub(crate) fn remove_if_ours<T>(table: &RwLock<BTreeMap<u32, Arc<T>>>, key: u32, ours: &Arc<T>) {
    let mut table = table.write();
    if table.get(&key).is_some_and(|t| Arc::ptr_eq(t, ours)) {
        table.remove(&key);
    }
}

impl<H: Hal> ContextCore<H> {
    pub(crate) fn hal(&self) -> &H {
        &self.dev.hal
    }

    pub(crate) fn exec<I: Pod, O: Pod>(&self, op: CmdOpcode, input: &I) -> Result<O> {
        self.dev.exec(op, input, self.uid)
    }

    /// Disposes of `mem`, given to the device by a create command that
    /// failed with `err`: frees it if the device refused the command or
    /// never got it, and otherwise (a timeout, a malformed answer) gives it
    /// up as [`ContextCore::abandon`] does, since the device may yet execute the
    /// command and use the memory.
    ///
    /// # Safety
    ///
    /// `mem` came from this context's platform, and no other object of the
    /// device uses it.
    pub(crate) unsafe fn dispose_after_failed_create(
        &self,
        mem: DeviceMem,
        what: fmt::Arguments<'_>,
        err: &Error,
    ) {
        if err.outcome_unknown() {
            self.abandon(mem, what, err);
        } else {
            // SAFETY: from this platform (the caller's contract); the device
            // refused the command or never saw it, so nothing on it refers
            // to the memory.
            unsafe { mem.release(self.hal()) };
        }
    }

    /// Keeps `mem`, which the device may still use (a destroy command
    /// failed), until shutdown.
    pub(crate) fn orphan(&self, mem: DeviceMem, what: fmt::Arguments<'_>, err: &Error) {
        self.dev.orphan(mem, what, err);
    }

    /// Gives up `mem`, which the device may still reference: retires a
    /// mapping of caller memory where the platform can, else keeps it until
    /// shutdown (`Device::abandon`).
    pub(crate) fn abandon(&self, mem: DeviceMem, what: fmt::Arguments<'_>, err: &Error) {
        self.dev.abandon(mem, what, err);
    }

    /// Runs the test hook, if one is set, after DESTROY_QP or DESTROY_CQ.
    #[cfg(test)]
    pub(crate) fn after_destroy(&self, op: CmdOpcode, id: u32) {
        let hook = self.after_destroy.lock().take();
        if let Some(hook) = hook {
            hook(op, id);
        }
    }

    /// A completion vector no channel has.
    pub(crate) fn claim_vector(&self) -> Result<u16> {
        let range = self.dev.caps.comp_vectors();
        if range.is_empty() {
            return Err(Error::new(
                crate::ErrorKind::NotSupported,
                "the device has no interrupt vector for completion channels",
            ));
        }
        let mut used = self.dev.vectors_used.lock();
        used.resize(range.len(), false);
        let Some(i) = used.iter().position(|u| !u) else {
            return Err(Error::new(
                crate::ErrorKind::NoMemory,
                format!("every completion vector ({}) has a channel", range.len()),
            ));
        };
        used[i] = true;
        Ok(range.start + i as u16)
    }

    /// Gives completion vector `v` back.
    pub(crate) fn free_vector(&self, v: u16) {
        let start = self.dev.caps.comp_vectors().start;
        if let Some(u) = self.dev.vectors_used.lock().get_mut(usize::from(v - start)) {
            *u = false;
        }
    }

    /// The doorbell page for a new queue: round robin over the context's
    /// pages.
    pub(crate) fn alloc_uar_page(&self) -> u32 {
        self.uar_first + self.next_uar.fetch_add(1, Ordering::Relaxed) % self.uar_count
    }

    /// Writes a 64-bit doorbell at `offset` of doorbell page `page`.
    #[inline]
    pub(crate) fn ring_doorbell(&self, page: u32, offset: usize, value: u64) {
        self.dev
            .hal
            .mmio_write64(BAR_DOORBELL, page as usize * UAR_PAGE_SIZE + offset, value);
    }

    /// Writes `block` (an SQ doorbell and the WQE it announces) to the
    /// BlueFlame register of page `page`, if BlueFlame writes are in use;
    /// returns whether it did. The first write the platform refuses turns
    /// them off: the caller rings the doorbell instead.
    #[inline]
    pub(crate) fn ring_blueflame(&self, page: u32, block: &[u64; 8]) -> bool {
        if !self.dev.bf.load(Ordering::Relaxed) {
            return false;
        }
        let off = page as usize * UAR_PAGE_SIZE + BF;
        match self.dev.hal.mmio_write_block(BAR_DOORBELL, off, block) {
            Ok(()) => true,
            Err(e) => {
                log::debug!("BlueFlame writes off: {e}");
                self.dev.bf.store(false, Ordering::Relaxed);
                false
            }
        }
    }

    /// GID `index` of `port` (QUERY_GID); all zeros for an unused entry.
    pub(crate) fn query_gid(&self, port: u8, index: u32) -> Result<Gid> {
        Ok(self.query_gid_entry(port, index)?.0)
    }

    /// Entry `index` of port `port`'s GID table and its type (QUERY_GID);
    /// an empty entry reads as all zeros. A type the driver does not know
    /// is the device's error.
    pub(crate) fn query_gid_entry(&self, port: u8, index: u32) -> Result<(Gid, GidType)> {
        self.port(port)?;
        let input = QueryGidIn {
            port: le32::from_ne(port.into()),
            index: le32::from_ne(index),
        };
        let out: QueryGidOut = self.exec(CmdOpcode::QueryGid, &input)?;
        let ty = GidType::from_raw(out.gid_type).ok_or_else(|| {
            Error::new(
                ErrorKind::Io,
                format!(
                    "QUERY_GID({port}, {index}) returned GID type {}",
                    out.gid_type
                ),
            )
        })?;
        Ok(if out.valid != 0 {
            (out.gid, ty)
        } else {
            ([0; 16], ty)
        })
    }

    pub(crate) fn port(&self, port: u8) -> Result<&PortAttr> {
        usize::from(port)
            .checked_sub(1)
            .and_then(|i| self.ports.get(i))
            .ok_or_else(|| {
                Error::invalid(format!(
                    "port {port} does not exist (the device has {} port(s), numbered from 1)",
                    self.ports.len()
                ))
            })
    }

    fn query_port(&self, port: u8) -> Result<PortAttr> {
        let input = QueryPortIn {
            port: le32::from_ne(port.into()),
        };
        let out: QueryPortOut = self.exec(CmdOpcode::QueryPort, &input)?;
        crate::attr::port_attr(port, &out)
    }
}

impl<H: Hal> Context<H> {
    /// Brings the device up with the default [`Config`].
    pub fn open(hal: H) -> Result<Self> {
        Self::open_with(hal, Config::default())
    }

    /// Brings the device up: reset, identification and capability checks,
    /// command and event queue setup, enable, then QUERY_DEVICE and
    /// QUERY_PORT for every port.
    pub fn open_with(hal: H, config: Config) -> Result<Self> {
        let dev = Arc::new(Device::bring_up(hal, &config)?);
        Self::on_device(dev, config.uar_pages_per_context)
    }

    /// Opens another context on this context's device (`ibv_open_device`
    /// once more): no reset, doorbell pages and objects of its own.
    pub fn open_another(&self) -> Result<Self> {
        let pages = self.shared.uar_count;
        Self::on_device(Arc::clone(&self.shared.dev), pages)
    }

    /// A handle on this context's device that keeps neither it nor the
    /// device open: for a library that opens a device once per process
    /// and gives every `ibv_open_device` of it a context of its own.
    pub fn device_handle(&self) -> DeviceHandle<H> {
        DeviceHandle {
            dev: Arc::downgrade(&self.shared.dev),
            pages: self.shared.uar_count,
        }
    }

    /// This context's number on the device.
    pub fn uid(&self) -> u32 {
        self.shared.uid
    }

    /// Its doorbell pages.
    pub fn uar_pages(&self) -> core::ops::Range<u32> {
        let sh = &self.shared;
        sh.uar_first..sh.uar_first + sh.uar_count
    }

    /// A new context on `dev` (ALLOC_UCTX for `pages` doorbell pages; a
    /// device without user contexts gives the one context all its pages).
    fn on_device(dev: Arc<Device<H>>, pages: u32) -> Result<Self> {
        let all = dev.caps.uar_pages;
        let input = AllocUctxIn {
            uar_pages: le32::from_ne(pages.clamp(1, all)),
        };
        let (uid, uar_first, uar_count) =
            match dev.exec::<_, AllocUctxOut>(CmdOpcode::AllocUctx, &input, 0) {
                Ok(o) => (o.uid.to_ne(), o.uar_first.to_ne(), o.uar_count.to_ne()),
                Err(e) if CmdFailure::of(&e).is_some_and(|c| c.status == CmdStatus::BadOpcode) => {
                    (0, 0, all)
                }
                Err(e)
                    if CmdFailure::of(&e).is_some_and(|c| c.status == CmdStatus::NoResources) =>
                {
                    return Err(Error::new(
                        ErrorKind::NoMemory,
                        format!("the device has no room for another context: {e}"),
                    ))
                }
                Err(e) => return Err(e),
            };
        if uar_count == 0 || uar_first.checked_add(uar_count).map_or(true, |e| e > all) {
            return Err(Error::new(
                ErrorKind::Io,
                format!(
                    "the device gave context {uid} doorbell pages {uar_first}+{uar_count} of {all}"
                ),
            ));
        }
        let out: QueryDeviceOut = dev.exec(CmdOpcode::QueryDevice, &(), uid)?;
        let attr = crate::attr::device_attr(&out);
        let mut shared = ContextCore {
            dev,
            uid,
            uar_first,
            uar_count,
            srqs: RwLock::new(alloc::collections::BTreeSet::new()),
            pending: spin::Mutex::new(alloc::collections::VecDeque::new()),
            queued: spin::Mutex::new(None),
            attr,
            ports: Vec::new(),
            qps: RwLock::new(BTreeMap::new()),
            cqs: RwLock::new(BTreeMap::new()),
            next_uar: AtomicU32::new(0),
            #[cfg(test)]
            after_destroy: spin::Mutex::new(None),
        };
        let nports = shared.dev.caps.num_ports;
        for port in 1..=nports {
            let p = shared.query_port(port)?;
            shared.ports.push(p);
        }
        log::info!(
            "rnic context {uid} open: vendor {:#06x} part {:#06x} fw {:#x}, {nports} port(s), \
             doorbell pages {uar_first}..{}",
            attr.vendor_id,
            attr.vendor_part_id,
            attr.fw_ver,
            uar_first + uar_count
        );
        let shared = Arc::new(shared);
        let mut contexts = shared.dev.contexts.lock();
        contexts.retain(|w| w.strong_count() > 0);
        contexts.push(Arc::downgrade(&shared));
        drop(contexts);
        Ok(Self { shared })
    }

    /// The platform the device is reached through.
    pub fn hal(&self) -> &H {
        self.shared.hal()
    }

    /// Device attributes read at bring-up.
    pub fn device_attr(&self) -> &DeviceAttr {
        &self.shared.attr
    }

    /// Reads the device attributes (QUERY_DEVICE).
    pub fn query_device(&self) -> Result<DeviceAttr> {
        let out: QueryDeviceOut = self.shared.exec(CmdOpcode::QueryDevice, &())?;
        Ok(crate::attr::device_attr(&out))
    }

    /// Reads the attributes of port `port` (from 1) (QUERY_PORT).
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        self.shared.port(port)?;
        self.shared.query_port(port)
    }

    /// Reads entry `index` of port `port`'s GID table (QUERY_GID); an empty
    /// entry reads as all zeros.
    pub fn query_gid(&self, port: u8, index: u32) -> Result<Gid> {
        self.shared.query_gid(port, index)
    }

    /// Entry `index` of port `port`'s GID table and its type (QUERY_GID).
    pub fn query_gid_entry(&self, port: u8, index: u32) -> Result<(Gid, GidType)> {
        self.shared.query_gid_entry(port, index)
    }

    /// Sets GID `index` of `port` to `gid`, of type `ty` (SET_GID): a RoCE
    /// v2 GID, an IPv4-mapped or an IPv6 address the port then answers
    /// for; an all-zero `gid` clears the entry. A change raises a
    /// [`crate::EventType::GidChange`] event, as the kernel reports a
    /// changed GID table (`IBV_EVENT_GID_CHANGE`).
    pub fn set_gid(&self, port: u8, index: u32, gid: Gid, ty: GidType) -> Result<()> {
        self.shared.port(port)?;
        let input = rnic_hw_regs::cmd::SetGidIn {
            port: le32::from_ne(port.into()),
            index: le32::from_ne(index),
            gid,
            gid_type: ty.raw(),
            reserved: [0; 3],
        };
        self.shared.exec::<_, ()>(CmdOpcode::SetGid, &input)
    }
}

impl<H: Hal> Drop for ContextCore<H> {
    /// Closes the context on the device (DEALLOC_UCTX): whatever of its
    /// objects the device still has goes with it.
    fn drop(&mut self) {
        if self.uid == 0 {
            return;
        }
        let input = ObjIn {
            id: le32::from_ne(self.uid),
        };
        if let Err(e) = self.dev.exec::<_, ()>(CmdOpcode::DeallocUctx, &input, 0) {
            log::error!("closing context {}: {e}", self.uid);
        }
    }
}

//! PVRDMA as a provider of the verbs core: a context on one user context
//! (UAR page) of the device, and objects that keep what they depend on
//! alive, over the device's commands and rings.
//!
//! What the verbs core checks (the QP state machine and attribute values)
//! is checked before any command; what QEMU's pvrdma cannot carry is
//! refused (docs/pvrdma.md): memory windows are not offered, inline data
//! is 0, atomics are reported absent, and a send other than SEND fails
//! with `EOPNOTSUPP` when posted.
//!
//! The GID table is the driver's: the context binds entry 0 to the
//! link-local GID of the device's node GUID (QEMU's pvrdma sends from its
//! backend's GID 0 whatever the entry, and a WQE naming an entry it cannot
//! resolve stalls it), and address vectors may name entry 0 only.

use alloc::collections::{BTreeMap, BTreeSet, VecDeque};
use alloc::format;
use alloc::sync::Arc;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU8, Ordering};

use rnic_pvrdma_regs::bar1::IntrVector;
use rnic_pvrdma_regs::cmd::{
    self as pv, qp_attr_mask, CmdOpcode, GlobalRoute, QueryPort, QueryPortResp, QueryQp,
    QueryQpResp,
};
use rnic_pvrdma_regs::dsr::GID_TYPE_ROCE_V1;
use rnic_pvrdma_regs::{le16, le32, PCI_DEVICE_ID, PCI_VENDOR_ID};
use rnic_queues::{Hal, HalError};
use rnic_verbs::provider::{
    unsupported, AddressHandle, CompletionChannel, CompletionQueue, MemoryRegion, ProtectionDomain,
    Provider, QpInit, QueuePair, SharedReceiveQueue, Unsupported,
};
use rnic_verbs::{
    access, check_ah, check_modify, check_post_recv, check_post_send, qp_attr, AhAttr, AsyncEvent,
    DestroyError, DeviceAttr, Error, ErrorKind, EventElement, EventType, Gid, GidType, LinkLayer,
    ModifyEnv, Mtu, PortAttr, PortState, PostError, QpAttr, QpCap, QpState, QpType, RecvWr, Result,
    SendWr, SrqAttr, UdDest, WorkCompletion,
};
use spin::Mutex;

use crate::context::{Pd as DevPd, Uc};
use crate::cq::Cq as DevCq;
use crate::device::Device;
use crate::mr::Mr as DevMr;
use crate::qp::{Qp as DevQp, QpInit as DevQpInit};
use crate::srq::Srq as DevSrq;

// MODIFY_QP and CREATE_MR take libibverbs' bits as they are.
const _: () = assert!(
    qp_attr::STATE == qp_attr_mask::STATE
        && qp_attr::CUR_STATE == qp_attr_mask::CUR_STATE
        && qp_attr::EN_SQD_ASYNC_NOTIFY == qp_attr_mask::EN_SQD_ASYNC_NOTIFY
        && qp_attr::ACCESS_FLAGS == qp_attr_mask::ACCESS_FLAGS
        && qp_attr::PKEY_INDEX == qp_attr_mask::PKEY_INDEX
        && qp_attr::PORT == qp_attr_mask::PORT
        && qp_attr::QKEY == qp_attr_mask::QKEY
        && qp_attr::AV == qp_attr_mask::AV
        && qp_attr::PATH_MTU == qp_attr_mask::PATH_MTU
        && qp_attr::TIMEOUT == qp_attr_mask::TIMEOUT
        && qp_attr::RETRY_CNT == qp_attr_mask::RETRY_CNT
        && qp_attr::RNR_RETRY == qp_attr_mask::RNR_RETRY
        && qp_attr::RQ_PSN == qp_attr_mask::RQ_PSN
        && qp_attr::MAX_QP_RD_ATOMIC == qp_attr_mask::MAX_QP_RD_ATOMIC
        && qp_attr::ALT_PATH == qp_attr_mask::ALT_PATH
        && qp_attr::MIN_RNR_TIMER == qp_attr_mask::MIN_RNR_TIMER
        && qp_attr::SQ_PSN == qp_attr_mask::SQ_PSN
        && qp_attr::MAX_DEST_RD_ATOMIC == qp_attr_mask::MAX_DEST_RD_ATOMIC
        && qp_attr::PATH_MIG_STATE == qp_attr_mask::PATH_MIG_STATE
        && qp_attr::CAP == qp_attr_mask::CAP
        && qp_attr::DEST_QPN == qp_attr_mask::DEST_QPN
        && access::LOCAL_WRITE == pv::access::LOCAL_WRITE
        && access::REMOTE_WRITE == pv::access::REMOTE_WRITE
        && access::REMOTE_READ == pv::access::REMOTE_READ
        && access::REMOTE_ATOMIC == pv::access::REMOTE_ATOMIC
);

/// `IBV_ATOMIC_NONE`: QEMU's pvrdma would send an atomic as a SEND.
const ATOMIC_NONE: u32 = 0;

/// The GID table entry the context binds.
const GID_INDEX: u8 = 0;

type Destroyed<T> = core::result::Result<(), DestroyError<T>>;

/// An open PVRDMA device as a provider (`struct ibv_context`): the
/// device brought up, one user context on it, and GID 0 bound. Cloning is
/// cheap: clones are the same context.
pub struct Context<H: Hal> {
    sh: Arc<ContextCore<H>>,
}

impl<H: Hal> Clone for Context<H> {
    fn clone(&self) -> Self {
        Self {
            sh: Arc::clone(&self.sh),
        }
    }
}

struct ContextCore<H: Hal> {
    dev: Device<H>,
    uc: Option<Uc>,
    attr: DeviceAttr,
    port: PortAttr,
    gid: Gid,
    gid_bound: bool,
    routes: Mutex<Routes>,
}

/// Which channel each CQ's notifications go to: the device has one
/// CQ-notification ring for all of them.
#[derive(Default)]
struct Routes {
    by_cq: BTreeMap<u32, u64>,
    /// CQs armed since their last event: QEMU's pvrdma writes a
    /// notification for every completion, armed or not, and libibverbs
    /// gives one event per arm.
    armed: BTreeSet<u32>,
    /// Events taken from the ring for a channel that was not waiting.
    pending: VecDeque<(u64, u32)>,
    next_channel: u64,
}

impl Routes {
    /// The channel a notification of CQ `cq` is an event for: that of an
    /// armed CQ on a channel (disarming it); `None` for any other, which
    /// is dropped.
    fn route(&mut self, cq: u32) -> Option<u64> {
        if !self.armed.remove(&cq) {
            return None;
        }
        self.by_cq.get(&cq).copied()
    }

    /// Forgets CQ `cq`, destroyed: the device gives its handle to the
    /// next CQ.
    fn forget(&mut self, cq: u32) {
        self.by_cq.remove(&cq);
        self.armed.remove(&cq);
    }
}

impl<H: Hal> Drop for ContextCore<H> {
    fn drop(&mut self) {
        if self.gid_bound {
            if let Err(e) = self.dev.destroy_bind(GID_INDEX.into(), self.gid) {
                log::error!("closing the PVRDMA context: GID {GID_INDEX}: {e}");
            }
        }
        if let Some(uc) = self.uc.take() {
            if let Err(e) = self.dev.destroy_uc(uc) {
                log::error!("closing the PVRDMA context: {e}");
            }
        }
    }
}

impl<H: Hal> Context<H> {
    /// Brings the device behind `hal` up ([`Device::open`]), opens a user
    /// context on it and binds GID 0.
    pub fn open(hal: H) -> Result<Self> {
        let dev = Device::open(hal)?;
        let port = query_port(&dev)?;
        let uc = dev.create_uc()?;
        let caps = *dev.caps();
        let guid = caps.node_guid.to_ne().to_le_bytes();
        let mut gid = [0u8; 16];
        gid[..2].copy_from_slice(&[0xfe, 0x80]);
        gid[8..].copy_from_slice(&guid);
        let attr = DeviceAttr {
            fw_ver: caps.fw_ver.to_ne(),
            node_guid: guid,
            sys_image_guid: caps.sys_image_guid.to_ne().to_le_bytes(),
            max_mr_size: caps.max_mr_size.to_ne(),
            page_size_cap: caps.page_size_cap.to_ne(),
            // As Linux's driver reports them: the function's PCI IDs (QEMU
            // leaves the capabilities' zero).
            vendor_id: PCI_VENDOR_ID.into(),
            vendor_part_id: PCI_DEVICE_ID.into(),
            hw_ver: caps.hw_ver.to_ne(),
            max_qp: caps.max_qp.to_ne(),
            max_qp_wr: caps.max_qp_wr.to_ne().min(crate::MAX_WR),
            device_cap_flags: caps.device_cap_flags.to_ne(),
            max_sge: caps.max_sge.to_ne().min(crate::MAX_SGE),
            max_sge_rd: caps.max_sge_rd.to_ne(),
            max_cq: caps.max_cq.to_ne(),
            max_cqe: caps.max_cqe.to_ne().min(crate::MAX_CQE),
            max_mr: caps.max_mr.to_ne(),
            max_pd: caps.max_pd.to_ne(),
            max_qp_rd_atom: caps.max_qp_rd_atom.to_ne(),
            max_qp_init_rd_atom: caps.max_qp_init_rd_atom.to_ne(),
            max_inline_data: 0,
            atomic_cap: ATOMIC_NONE,
            phys_port_cnt: caps.phys_port_cnt.into(),
            max_msg_sz: port.max_msg_sz,
            local_ca_ack_delay: caps.local_ca_ack_delay.into(),
            max_srq: caps.max_srq.to_ne(),
            max_srq_wr: caps.max_srq_wr.to_ne().min(crate::MAX_WR),
            max_srq_sge: caps.max_srq_sge.to_ne().min(crate::MAX_SGE),
        };
        // From here a failure drops `sh`, which destroys the user context.
        let mut sh = ContextCore {
            attr,
            port,
            gid,
            gid_bound: false,
            uc: Some(uc),
            routes: Mutex::new(Routes::default()),
            dev,
        };
        sh.dev
            .create_bind(GID_INDEX.into(), gid, GID_TYPE_ROCE_V1)?;
        sh.gid_bound = true;
        Ok(Self { sh: Arc::new(sh) })
    }

    /// The device underneath, for what only PVRDMA has (its version, its
    /// capabilities, its event rings).
    pub fn device(&self) -> &Device<H> {
        &self.sh.dev
    }
}

impl<H: Hal> ContextCore<H> {
    /// Takes every notification on the ring, keeping the events among them
    /// for their channels: the ring fills with the notifications of
    /// completions nobody armed for, and a full ring stops QEMU's pvrdma
    /// from notifying at all.
    fn drain(&self, routes: &mut Routes) -> Result<()> {
        while let Some(n) = self
            .dev
            .pop_cq_notification()
            .map_err(|e| Error::new(ErrorKind::Io, format!("the CQ-notification ring: {e}")))?
        {
            let cq = n.info.to_ne();
            if let Some(ch) = routes.route(cq) {
                routes.pending.push_back((ch, cq));
            }
        }
        Ok(())
    }

    fn uc(&self) -> &Uc {
        self.uc
            .as_ref()
            .expect("a live context holds its user context")
    }
}

/// QUERY_PORT of port 1, the device's only port.
fn query_port<H: Hal>(dev: &Device<H>) -> Result<PortAttr> {
    let r: QueryPortResp = dev.exec(
        CmdOpcode::QueryPort,
        &QueryPort {
            port_num: 1,
            ..Default::default()
        },
    )?;
    let a = r.attrs;
    let bad = |what: &str, v: u32| {
        Error::new(
            ErrorKind::Io,
            format!("QUERY_PORT returned an invalid {what} value {v}"),
        )
    };
    let enum8 = |v: le32| u8::try_from(v.to_ne()).ok();
    Ok(PortAttr {
        state: enum8(a.state)
            .and_then(PortState::from_raw)
            .ok_or_else(|| bad("state", a.state.to_ne()))?,
        max_mtu: enum8(a.max_mtu)
            .and_then(Mtu::from_raw)
            .ok_or_else(|| bad("max_mtu", a.max_mtu.to_ne()))?,
        active_mtu: enum8(a.active_mtu)
            .and_then(Mtu::from_raw)
            .ok_or_else(|| bad("active_mtu", a.active_mtu.to_ne()))?,
        link_layer: LinkLayer::Ethernet,
        gid_tbl_len: a.gid_tbl_len.to_ne(),
        port_cap_flags: a.port_cap_flags.to_ne(),
        max_msg_sz: a.max_msg_sz.to_ne(),
        bad_pkey_cntr: a.bad_pkey_cntr.to_ne(),
        qkey_viol_cntr: a.qkey_viol_cntr.to_ne(),
        pkey_tbl_len: a.pkey_tbl_len.to_ne(),
        lid: a.lid.to_ne(),
        sm_lid: a.sm_lid.to_ne(),
        lmc: a.lmc,
        max_vl_num: a.max_vl_num,
        sm_sl: a.sm_sl,
        subnet_timeout: a.subnet_timeout,
        active_width: a.active_width,
        active_speed: a.active_speed,
        phys_state: a.phys_state,
        mac: [0; 6],
    })
}

fn check_port(port: u8) -> Result<()> {
    if port == 1 {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "port {port}: the device has port 1 only"
        )))
    }
}

/// Refuses an address vector naming a GID entry the context did not bind.
fn check_gid_index(ah: &AhAttr) -> Result<()> {
    if ah.sgid_index == GID_INDEX {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "sgid_index {}: only GID {GID_INDEX} is bound (QEMU's pvrdma stalls on a GID it \
             cannot resolve)",
            ah.sgid_index
        )))
    }
}

/// Destroys what `slot` holds with `f`: a refused destroy puts it back,
/// an unknown outcome leaves the slot empty. The error, if any.
fn destroy_slot<O>(slot: &mut Option<O>, f: impl FnOnce(O) -> Destroyed<O>) -> Result<()> {
    let Some(o) = slot.take() else {
        return Ok(());
    };
    f(o).map_err(|e| {
        *slot = e.object;
        e.error
    })
}

/// The outcome of `destroy_slot` for `object`, whose slot is `present`
/// after it: handed back if the device refused.
fn handed_back<T>(object: T, present: bool, result: Result<()>) -> Destroyed<T> {
    match result {
        Ok(()) => Ok(()),
        Err(error) if present => Err(DestroyError {
            object: Some(object),
            error,
        }),
        Err(error) => Err(DestroyError::gone(error)),
    }
}

fn busy<T>(object: T, what: &str) -> Destroyed<T> {
    Err(DestroyError {
        object: Some(object),
        error: Error::new(ErrorKind::Busy, format!("{what} is still in use")),
    })
}

impl<H: Hal> Provider for Context<H> {
    type Pd = Pd<H>;
    type Mr = Mr<H>;
    type Cq = Cq<H>;
    type Qp = Qp<H>;
    type Srq = Srq<H>;
    type Ah = Ah<H>;
    type Mw = Unsupported;
    type Channel = CompChannel<H>;

    fn device_attr(&self) -> &DeviceAttr {
        &self.sh.attr
    }

    fn query_device(&self) -> Result<DeviceAttr> {
        Ok(self.sh.attr)
    }

    fn query_port(&self, port: u8) -> Result<PortAttr> {
        check_port(port)?;
        query_port(&self.sh.dev)
    }

    fn query_gid(&self, port: u8, index: u32) -> Result<Gid> {
        check_port(port)?;
        match index {
            i if i == u32::from(GID_INDEX) => Ok(self.sh.gid),
            i if i < self.sh.port.gid_tbl_len => Ok([0; 16]),
            i => Err(Error::invalid(format!(
                "GID index {i}: the table has {}",
                self.sh.port.gid_tbl_len
            ))),
        }
    }

    /// Of type RoCE v1, every entry: the type the context binds GID 0
    /// with, the only one QEMU's pvrdma offers.
    fn query_gid_entry(&self, port: u8, index: u32) -> Result<(Gid, GidType)> {
        Ok((self.query_gid(port, index)?, GidType::RoceV1))
    }

    fn alloc_pd(&self) -> Result<Pd<H>> {
        let pd = self.sh.dev.create_pd(self.sh.uc())?;
        Ok(Pd {
            inner: Arc::new(PdInner {
                sh: Arc::clone(&self.sh),
                pd: Some(pd),
            }),
        })
    }

    fn create_comp_channel(&self) -> Result<CompChannel<H>> {
        let mut routes = self.sh.routes.lock();
        routes.next_channel += 1;
        Ok(CompChannel {
            sh: Arc::clone(&self.sh),
            id: routes.next_channel,
        })
    }

    fn num_comp_vectors(&self) -> u32 {
        1
    }

    fn create_cq(&self, cqe: u32, channel: Option<&CompChannel<H>>, vector: u32) -> Result<Cq<H>> {
        if vector != 0 {
            return Err(Error::invalid(format!(
                "completion vector {vector}: the device has vector 0 only"
            )));
        }
        let cq = self.sh.dev.create_cq(self.sh.uc(), cqe)?;
        if let Some(ch) = channel {
            self.sh.routes.lock().by_cq.insert(cq.handle(), ch.id);
        }
        Ok(Cq {
            inner: Arc::new(CqInner {
                sh: Arc::clone(&self.sh),
                handle: cq.handle(),
                cqe: cq.capacity(),
                cq: Some(cq),
                poll: Mutex::new(()),
            }),
        })
    }

    /// The next event of the async ring. Its types are libibverbs'; a QP
    /// is named by handle there and by number here. An event of a type
    /// or QP the driver does not know is dropped (and logged).
    fn poll_event(&self) -> Result<Option<AsyncEvent>> {
        let dev = &self.sh.dev;
        loop {
            let Some(eqe) = dev
                .pop_async_event()
                .map_err(|e| Error::new(ErrorKind::Io, format!("the async event ring: {e}")))?
            else {
                return Ok(None);
            };
            let (kind, info) = (eqe.kind.to_ne(), eqe.info.to_ne());
            let Some(event_type) = u8::try_from(kind).ok().and_then(EventType::from_raw) else {
                log::warn!("PVRDMA async event of unknown type {kind} (object {info:#x})");
                continue;
            };
            let obj = match event_type.element() {
                EventElement::Qp => match dev.qps.read().get(&info) {
                    Some(&qpn) => qpn,
                    None => {
                        log::warn!("PVRDMA {event_type:?} for QP handle {info:#x}, not ours");
                        continue;
                    }
                },
                _ => info,
            };
            return Ok(Some(AsyncEvent { event_type, obj }));
        }
    }

    fn wait_event(&self, timeout_ns: u64) -> Result<Option<AsyncEvent>> {
        let hal = self.sh.dev.hal();
        let start = hal.now_ns();
        loop {
            if let Some(ev) = self.poll_event()? {
                return Ok(Some(ev));
            }
            let left = timeout_ns.saturating_sub(hal.now_ns().saturating_sub(start));
            if left == 0 {
                return Ok(None);
            }
            // The vector fires after the device moved the ring's tail.
            match hal.wait_irq(IntrVector::Async.raw(), left) {
                Ok(_) => {}
                Err(HalError::Unsupported) => {
                    return Err(Error::new(
                        ErrorKind::NotSupported,
                        "async events arrive by interrupt, which this platform does not deliver",
                    ))
                }
                Err(e) => return Err(Error::hal(e, "waiting for an async event")),
            }
        }
    }

    fn event_fd(&self) -> Option<i32> {
        self.sh.dev.hal().irq_eventfd(IntrVector::Async.raw())
    }
}

/// A protection domain.
pub struct Pd<H: Hal> {
    inner: Arc<PdInner<H>>,
}

struct PdInner<H: Hal> {
    sh: Arc<ContextCore<H>>,
    pd: Option<DevPd>,
}

impl<H: Hal> PdInner<H> {
    fn pd(&self) -> &DevPd {
        self.pd.as_ref().expect("a live PD")
    }
}

impl<H: Hal> Drop for PdInner<H> {
    fn drop(&mut self) {
        let sh = Arc::clone(&self.sh);
        if let Err(e) = destroy_slot(&mut self.pd, |pd| sh.dev.destroy_pd(pd)) {
            log::error!("dropping a PVRDMA PD: {e}");
        }
    }
}

impl<H: Hal> ProtectionDomain<Context<H>> for Pd<H> {
    fn pd_num(&self) -> u32 {
        self.inner.pd().handle()
    }

    unsafe fn reg_mr(&self, ptr: NonNull<u8>, len: usize, access: u32) -> Result<Mr<H>> {
        let sh = &self.inner.sh;
        // SAFETY: the trait's contract is the device's: the memory stays
        // valid until the MR is deregistered. Work requests address it by
        // its own address, as `ibv_reg_mr`'s do.
        let mr = unsafe {
            sh.dev
                .reg_mr(self.inner.pd(), ptr, len, ptr.as_ptr() as u64, access)
        }?;
        Ok(Mr {
            _pd: Arc::clone(&self.inner),
            sh: Arc::clone(sh),
            mr: Some(mr),
        })
    }

    fn create_qp(&self, init: &QpInit<'_, Context<H>>) -> Result<Qp<H>> {
        let qp_type = match init.qp_type {
            QpType::Rc => pv::QpType::Rc,
            QpType::Ud => pv::QpType::Ud,
            QpType::Uc => return Err(unsupported("UC QPs")),
            // QEMU's device serves QP1 through its MAD multiplexer, a
            // service of the host this provider does not speak to.
            QpType::Gsi => return Err(unsupported("the GSI QP")),
        };
        if init.cap.max_inline_data > 0 {
            return Err(Error::invalid(format!(
                "max_inline_data {}: PVRDMA takes no inline data",
                init.cap.max_inline_data
            )));
        }
        let sh = &self.inner.sh;
        let (send_cq, recv_cq) = (&init.send_cq.inner, &init.recv_cq.inner);
        let cap = init.cap;
        let (send_sge, recv_sge) = (cap.max_send_sge.max(1), cap.max_recv_sge.max(1));
        let srq = init.srq.map(|s| Arc::clone(&s.inner));
        let srq_guard = srq.as_ref().map(|s| s.srq.lock());
        let qp = sh.dev.create_qp(
            sh.uc(),
            self.inner.pd(),
            &DevQpInit {
                qp_type,
                send_cq: send_cq.cq(),
                recv_cq: recv_cq.cq(),
                srq: srq_guard.as_ref().map(|g| g.as_ref().expect("a live SRQ")),
                max_send_wr: cap.max_send_wr.max(1),
                max_recv_wr: cap.max_recv_wr.max(1),
                max_send_sge: send_sge,
                max_recv_sge: recv_sge,
                sq_sig_all: init.sq_sig_all,
            },
        )?;
        drop(srq_guard);
        let recv_sge = if srq.is_some() { 0 } else { recv_sge };
        Ok(Qp {
            qpn: qp.qpn(),
            qp_type: init.qp_type,
            cap: QpCap {
                max_send_wr: qp.send_capacity(),
                max_recv_wr: qp.recv_capacity(),
                max_send_sge: send_sge,
                max_recv_sge: recv_sge,
                max_inline_data: 0,
            },
            _srq: srq,
            state: Mutex::new((QpState::Reset, 0)),
            post_state: AtomicU8::new(QpState::Reset.raw()),
            qp: Mutex::new(Some(qp)),
            sh: Arc::clone(sh),
            _pd: Arc::clone(&self.inner),
            _send_cq: Arc::clone(send_cq),
            _recv_cq: Arc::clone(recv_cq),
        })
    }

    fn create_srq(&self, attr: &SrqAttr) -> Result<Srq<H>> {
        let sh = &self.inner.sh;
        let srq = sh
            .dev
            .create_srq(sh.uc(), self.inner.pd(), attr.max_wr, attr.max_sge, 0)?;
        Ok(Srq {
            inner: Arc::new(SrqInner {
                sh: Arc::clone(sh),
                _pd: Arc::clone(&self.inner),
                handle: srq.handle(),
                geometry: (srq.capacity(), srq.max_sge()),
                limit: Mutex::new(0),
                srq: Mutex::new(Some(srq)),
            }),
        })
    }

    fn create_ah(&self, attr: &AhAttr) -> Result<Ah<H>> {
        let sh = &self.inner.sh;
        let port = if attr.port_num == 0 { 1 } else { attr.port_num };
        check_ah(attr, port, core::slice::from_ref(&sh.port))?;
        check_gid_index(attr)?;
        Ok(Ah {
            pd: Arc::clone(&self.inner),
            attr: AhAttr {
                port_num: port,
                ..*attr
            },
        })
    }

    fn destroy(self) -> Destroyed<Self> {
        match Arc::try_unwrap(self.inner) {
            Ok(mut inner) => {
                let sh = Arc::clone(&inner.sh);
                let r = destroy_slot(&mut inner.pd, |pd| sh.dev.destroy_pd(pd));
                let present = inner.pd.is_some();
                handed_back(
                    Self {
                        inner: Arc::new(inner),
                    },
                    present,
                    r,
                )
            }
            Err(inner) => busy(Self { inner }, "the PD (by MRs, QPs or AHs)"),
        }
    }
}

/// A memory region.
pub struct Mr<H: Hal> {
    sh: Arc<ContextCore<H>>,
    _pd: Arc<PdInner<H>>,
    mr: Option<DevMr>,
}

impl<H: Hal> Mr<H> {
    fn mr(&self) -> &DevMr {
        self.mr.as_ref().expect("a live MR")
    }
}

impl<H: Hal> Drop for Mr<H> {
    fn drop(&mut self) {
        let sh = Arc::clone(&self.sh);
        if let Err(e) = destroy_slot(&mut self.mr, |mr| sh.dev.dereg_mr(mr)) {
            log::error!("dropping a PVRDMA MR: {e}");
        }
    }
}

impl<H: Hal> MemoryRegion<Context<H>> for Mr<H> {
    fn lkey(&self) -> u32 {
        self.mr().lkey()
    }

    fn rkey(&self) -> u32 {
        self.mr().rkey()
    }

    fn destroy(mut self) -> Destroyed<Self> {
        let sh = Arc::clone(&self.sh);
        let r = destroy_slot(&mut self.mr, |mr| sh.dev.dereg_mr(mr));
        let present = self.mr.is_some();
        handed_back(self, present, r)
    }
}

/// A completion queue.
pub struct Cq<H: Hal> {
    inner: Arc<CqInner<H>>,
}

struct CqInner<H: Hal> {
    sh: Arc<ContextCore<H>>,
    handle: u32,
    cqe: u32,
    cq: Option<DevCq>,
    /// One poller at a time: the consumer index is the driver's.
    poll: Mutex<()>,
}

impl<H: Hal> CqInner<H> {
    fn cq(&self) -> &DevCq {
        self.cq.as_ref().expect("a live CQ")
    }
}

impl<H: Hal> Drop for CqInner<H> {
    fn drop(&mut self) {
        self.sh.routes.lock().forget(self.handle);
        let sh = Arc::clone(&self.sh);
        if let Err(e) = destroy_slot(&mut self.cq, |cq| sh.dev.destroy_cq(cq)) {
            log::error!("dropping PVRDMA CQ {}: {e}", self.handle);
        }
    }
}

impl<H: Hal> CompletionQueue for Cq<H> {
    fn cq_num(&self) -> u32 {
        self.inner.handle
    }

    fn cqe(&self) -> u32 {
        self.inner.cqe
    }

    /// Up to `wc.len()` completions. A bad CQE after some good ones ends
    /// the batch (it is consumed, and logged); one before any is the error.
    fn poll(&self, wc: &mut [WorkCompletion]) -> Result<usize> {
        let inner = &*self.inner;
        let _one = inner.poll.lock();
        let mut got = 0;
        while got < wc.len() {
            match inner.sh.dev.poll_cq(inner.cq()) {
                Ok(Some(w)) => {
                    wc[got] = w;
                    got += 1;
                }
                Ok(None) => break,
                Err(e) if got == 0 => return Err(e),
                Err(e) => {
                    log::error!("{e}");
                    break;
                }
            }
        }
        Ok(got)
    }

    /// Arms the CQ for one event. The notifications waiting on the ring
    /// are taken first, so that those of completions before the arm are
    /// not taken for its event.
    fn arm(&self, solicited_only: bool) {
        let sh = &self.inner.sh;
        {
            let mut routes = sh.routes.lock();
            if let Err(e) = sh.drain(&mut routes) {
                log::error!("arming CQ {}: {e}", self.inner.handle);
            }
            routes.armed.insert(self.inner.handle);
        }
        sh.dev.arm_cq(self.inner.cq(), solicited_only);
    }

    fn destroy(self) -> Destroyed<Self> {
        match Arc::try_unwrap(self.inner) {
            Ok(mut inner) => {
                let sh = Arc::clone(&inner.sh);
                let r = destroy_slot(&mut inner.cq, |cq| sh.dev.destroy_cq(cq));
                let present = inner.cq.is_some();
                if !present {
                    sh.routes.lock().forget(inner.handle);
                }
                handed_back(
                    Self {
                        inner: Arc::new(inner),
                    },
                    present,
                    r,
                )
            }
            Err(inner) => busy(Self { inner }, "the CQ (by QPs)"),
        }
    }
}

/// A queue pair: RC or UD.
pub struct Qp<H: Hal> {
    sh: Arc<ContextCore<H>>,
    /// Kept alive while the QP is: its PD, CQs and SRQ.
    _pd: Arc<PdInner<H>>,
    _srq: Option<Arc<SrqInner<H>>>,
    _send_cq: Arc<CqInner<H>>,
    _recv_cq: Arc<CqInner<H>>,
    qpn: u32,
    qp_type: QpType,
    cap: QpCap,
    /// The state and port as the driver set them; serializes `modify`.
    state: Mutex<(QpState, u8)>,
    /// The state as posts read it, without waiting for a modify under way.
    post_state: AtomicU8,
    /// Posting takes it: one poster of a QP at a time.
    qp: Mutex<Option<DevQp>>,
}

impl<H: Hal> Drop for Qp<H> {
    fn drop(&mut self) {
        let sh = Arc::clone(&self.sh);
        if let Err(e) = destroy_slot(self.qp.get_mut(), |qp| sh.dev.destroy_qp(qp)) {
            log::error!("dropping PVRDMA QP {:#x}: {e}", self.qpn);
        }
    }
}

/// The device's form of the attributes `mask` names, the rest zero.
fn device_attrs(a: &QpAttr, mask: u32, next: QpState, port: u8) -> pv::QpAttr {
    let pick = |bit: u32, v: u32| if mask & bit != 0 { v } else { 0 };
    let pick8 = |bit: u32, v: u8| if mask & bit != 0 { v } else { 0 };
    let h = &a.ah_attr;
    let ah_attr = if mask & qp_attr::AV != 0 {
        pv::AhAttr {
            grh: GlobalRoute {
                dgid: h.dgid,
                flow_label: le32::from_ne(h.flow_label),
                sgid_index: h.sgid_index,
                hop_limit: h.hop_limit,
                traffic_class: h.traffic_class,
                reserved: 0,
            },
            sl: h.sl,
            ah_flags: h.is_global.into(),
            port_num: if h.port_num == 0 { port } else { h.port_num },
            dmac: h.dmac,
            ..Default::default()
        }
    } else {
        pv::AhAttr::default()
    };
    pv::QpAttr {
        qp_state: le32::from_ne(next.raw().into()),
        cur_qp_state: le32::from_ne(pick(qp_attr::CUR_STATE, a.cur_qp_state.raw().into())),
        path_mtu: le32::from_ne(pick(
            qp_attr::PATH_MTU,
            a.path_mtu.map_or(0, |m| m.raw().into()),
        )),
        qkey: le32::from_ne(pick(qp_attr::QKEY, a.qkey)),
        rq_psn: le32::from_ne(pick(qp_attr::RQ_PSN, a.rq_psn)),
        sq_psn: le32::from_ne(pick(qp_attr::SQ_PSN, a.sq_psn)),
        dest_qp_num: le32::from_ne(pick(qp_attr::DEST_QPN, a.dest_qp_num)),
        qp_access_flags: le32::from_ne(pick(qp_attr::ACCESS_FLAGS, a.qp_access_flags)),
        pkey_index: le16::from_ne(pick(qp_attr::PKEY_INDEX, a.pkey_index.into()) as u16),
        en_sqd_async_notify: pick8(qp_attr::EN_SQD_ASYNC_NOTIFY, a.en_sqd_async_notify.into()),
        max_rd_atomic: pick8(qp_attr::MAX_QP_RD_ATOMIC, a.max_rd_atomic),
        max_dest_rd_atomic: pick8(qp_attr::MAX_DEST_RD_ATOMIC, a.max_dest_rd_atomic),
        min_rnr_timer: pick8(qp_attr::MIN_RNR_TIMER, a.min_rnr_timer),
        port_num: pick8(qp_attr::PORT, a.port_num),
        timeout: pick8(qp_attr::TIMEOUT, a.timeout),
        retry_cnt: pick8(qp_attr::RETRY_CNT, a.retry_cnt),
        rnr_retry: pick8(qp_attr::RNR_RETRY, a.rnr_retry),
        ah_attr,
        ..Default::default()
    }
}

/// QUERY_QP's answer as the verbs core's attributes.
fn verbs_attrs(w: &pv::QpAttr, cap: QpCap) -> Result<QpAttr> {
    let raw = w.qp_state.to_ne();
    let state = u8::try_from(raw)
        .ok()
        .and_then(QpState::from_raw)
        .ok_or_else(|| {
            Error::new(
                ErrorKind::Io,
                format!("QUERY_QP returned an invalid state {raw}"),
            )
        })?;
    let g = &w.ah_attr.grh;
    Ok(QpAttr {
        qp_state: state,
        cur_qp_state: state,
        path_mtu: u8::try_from(w.path_mtu.to_ne())
            .ok()
            .and_then(Mtu::from_raw),
        qp_access_flags: w.qp_access_flags.to_ne(),
        pkey_index: w.pkey_index.to_ne(),
        port_num: w.port_num,
        qkey: w.qkey.to_ne(),
        ah_attr: AhAttr {
            dgid: g.dgid,
            flow_label: g.flow_label.to_ne(),
            sgid_index: g.sgid_index,
            hop_limit: g.hop_limit,
            traffic_class: g.traffic_class,
            sl: w.ah_attr.sl,
            dmac: w.ah_attr.dmac,
            port_num: w.ah_attr.port_num,
            is_global: w.ah_attr.ah_flags & 1 != 0,
        },
        min_rnr_timer: w.min_rnr_timer,
        timeout: w.timeout,
        retry_cnt: w.retry_cnt,
        rnr_retry: w.rnr_retry,
        max_rd_atomic: w.max_rd_atomic,
        max_dest_rd_atomic: w.max_dest_rd_atomic,
        sq_psn: w.sq_psn.to_ne(),
        rq_psn: w.rq_psn.to_ne(),
        dest_qp_num: w.dest_qp_num.to_ne(),
        en_sqd_async_notify: w.en_sqd_async_notify != 0,
        sq_draining: w.sq_draining != 0,
        cap,
    })
}

impl<H: Hal> Qp<H> {
    /// The state the last modify set.
    fn posting_state(&self) -> QpState {
        QpState::from_raw(self.post_state.load(Ordering::Acquire)).unwrap_or(QpState::Err)
    }

    fn with<T>(&self, f: impl FnOnce(&mut DevQp) -> T) -> T {
        f(self.qp.lock().as_mut().expect("a live QP"))
    }
}

impl<H: Hal> QueuePair for Qp<H> {
    fn qp_num(&self) -> u32 {
        self.qpn
    }

    fn qp_type(&self) -> QpType {
        self.qp_type
    }

    fn cap(&self) -> QpCap {
        self.cap
    }

    fn modify(&self, attr: &QpAttr, mask: u32) -> Result<()> {
        let sh = &self.sh;
        // A device with no READ or atomic resources (QEMU's reports none)
        // takes the counts as 0: no READ or atomic can be posted to the QP
        // (`post_send` refuses them), so none can be outstanding, and
        // programs that ask for one (ibv_rc_pingpong asks for 1) run, as
        // over Linux's driver, which passes the counts through.
        let mut attr = *attr;
        if sh.attr.max_qp_rd_atom == 0 {
            attr.max_dest_rd_atomic = 0;
        }
        if sh.attr.max_qp_init_rd_atom == 0 {
            attr.max_rd_atomic = 0;
        }
        let attr = &attr;
        let mut state = self.state.lock();
        let m = check_modify(
            attr,
            mask,
            &ModifyEnv {
                dev: &sh.attr,
                ports: core::slice::from_ref(&sh.port),
                cur: state.0,
                port: state.1,
                qp_type: self.qp_type,
            },
        )?;
        if m.mask & qp_attr::AV != 0 {
            check_gid_index(&attr.ah_attr)?;
        }
        let attrs = device_attrs(attr, m.mask, m.next, m.port);
        self.with(|qp| sh.dev.modify_qp(qp, m.mask, &attrs))?;
        *state = (m.next, m.port);
        self.post_state.store(m.next.raw(), Ordering::Release);
        Ok(())
    }

    fn query(&self) -> Result<QpAttr> {
        let handle = self.with(|qp| qp.handle());
        let r: QueryQpResp = self.sh.dev.exec(
            CmdOpcode::QueryQp,
            &QueryQp {
                qp_handle: le32::from_ne(handle),
                attr_mask: le32::from_ne((qp_attr::DEST_QPN << 1) - 1),
                ..Default::default()
            },
        )?;
        verbs_attrs(&r.attrs, self.cap)
    }

    fn post_send(&self, wrs: &[SendWr<'_>]) -> core::result::Result<(), PostError> {
        check_post_send(self.qpn, self.posting_state())
            .map_err(|error| PostError { index: 0, error })?;
        self.with(|qp| self.sh.dev.post_send(qp, wrs))
    }

    fn post_recv(&self, wrs: &[RecvWr<'_>]) -> core::result::Result<(), PostError> {
        check_post_recv(self.qpn, self.posting_state())
            .map_err(|error| PostError { index: 0, error })?;
        self.with(|qp| self.sh.dev.post_recv(qp, wrs))
    }

    fn destroy(mut self) -> Destroyed<Self> {
        let sh = Arc::clone(&self.sh);
        let slot = self.qp.get_mut();
        let r = destroy_slot(slot, |qp| sh.dev.destroy_qp(qp));
        let present = slot.is_some();
        handed_back(self, present, r)
    }
}

/// A shared receive queue.
pub struct Srq<H: Hal> {
    inner: Arc<SrqInner<H>>,
}

struct SrqInner<H: Hal> {
    sh: Arc<ContextCore<H>>,
    _pd: Arc<PdInner<H>>,
    handle: u32,
    /// WQEs and SGEs per WQE, as made.
    geometry: (u32, u32),
    /// The limit last set (the device disarms it when its event fires).
    limit: Mutex<u32>,
    /// Posting takes it: one poster at a time.
    srq: Mutex<Option<DevSrq>>,
}

impl<H: Hal> Drop for SrqInner<H> {
    fn drop(&mut self) {
        let sh = Arc::clone(&self.sh);
        if let Err(e) = destroy_slot(self.srq.get_mut(), |srq| sh.dev.destroy_srq(srq)) {
            log::error!("dropping PVRDMA SRQ {}: {e}", self.handle);
        }
    }
}

impl<H: Hal> SharedReceiveQueue for Srq<H> {
    fn srq_num(&self) -> u32 {
        self.inner.handle
    }

    fn attr(&self) -> SrqAttr {
        let (max_wr, max_sge) = self.inner.geometry;
        SrqAttr {
            max_wr,
            max_sge,
            srq_limit: *self.inner.limit.lock(),
        }
    }

    fn post_recv(&self, wrs: &[RecvWr<'_>]) -> core::result::Result<(), PostError> {
        let mut srq = self.inner.srq.lock();
        let srq = srq.as_mut().expect("a live SRQ");
        self.inner.sh.dev.post_srq_recv(srq, wrs)
    }

    fn modify(&self, attr: &SrqAttr, mask: u32) -> Result<()> {
        let srq = self.inner.srq.lock();
        let srq = srq.as_ref().expect("a live SRQ");
        self.inner.sh.dev.modify_srq(srq, attr, mask)?;
        *self.inner.limit.lock() = attr.srq_limit;
        Ok(())
    }

    fn query(&self) -> Result<SrqAttr> {
        let srq = self.inner.srq.lock();
        self.inner
            .sh
            .dev
            .query_srq(srq.as_ref().expect("a live SRQ"))
    }

    fn destroy(self) -> Destroyed<Self> {
        match Arc::try_unwrap(self.inner) {
            Ok(mut inner) => {
                let sh = Arc::clone(&inner.sh);
                let r = destroy_slot(inner.srq.get_mut(), |srq| sh.dev.destroy_srq(srq));
                let present = inner.srq.get_mut().is_some();
                handed_back(
                    Self {
                        inner: Arc::new(inner),
                    },
                    present,
                    r,
                )
            }
            Err(inner) => busy(Self { inner }, "the SRQ (by QPs)"),
        }
    }
}

/// An address handle: a checked path for UD sends.
pub struct Ah<H: Hal> {
    pd: Arc<PdInner<H>>,
    attr: AhAttr,
}

impl<H: Hal> AddressHandle for Ah<H> {
    fn attr(&self) -> AhAttr {
        self.attr
    }

    fn dest(&self, remote_qpn: u32, remote_qkey: u32) -> UdDest {
        UdDest::new(
            self.pd.pd().handle(),
            self.attr,
            remote_qpn & 0xff_ffff,
            remote_qkey,
        )
    }
}

/// A completion channel: the notifications of its CQs, from the device's
/// CQ-notification ring and vector.
pub struct CompChannel<H: Hal> {
    sh: Arc<ContextCore<H>>,
    id: u64,
}

impl<H: Hal> CompletionChannel for CompChannel<H> {
    fn fd(&self) -> Option<i32> {
        self.sh.dev.hal().irq_eventfd(IntrVector::Cq.raw())
    }

    fn get_cq_event(&self, timeout_ns: u64) -> Result<Option<u32>> {
        let sh = &*self.sh;
        let hal = sh.dev.hal();
        let start = hal.now_ns();
        loop {
            {
                let mut routes = sh.routes.lock();
                if let Some(at) = routes.pending.iter().position(|&(ch, _)| ch == self.id) {
                    return Ok(routes.pending.remove(at).map(|(_, cq)| cq));
                }
            }
            let left = timeout_ns.saturating_sub(hal.now_ns().saturating_sub(start));
            let Some(n) = sh.dev.wait_cq_notification(left)? else {
                return Ok(None);
            };
            let cq = n.info.to_ne();
            let mut routes = sh.routes.lock();
            match routes.route(cq) {
                Some(ch) if ch == self.id => return Ok(Some(cq)),
                Some(ch) => routes.pending.push_back((ch, cq)),
                // Not armed, not on a channel, or destroyed since.
                None => {}
            }
        }
    }

    fn destroy(self) -> Destroyed<Self> {
        let used = self.sh.routes.lock().by_cq.values().any(|&c| c == self.id);
        if used {
            return busy(self, "the channel (by CQs)");
        }
        Ok(())
    }
}

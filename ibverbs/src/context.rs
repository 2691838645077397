//! Opening a device: `ibv_open_device`, `ibv_close_device` and the calls
//! on a context.

use std::ffi::{c_int, c_void};
use std::os::fd::AsRawFd;
use std::sync::{Arc, Mutex, Weak};

use rnic_driver::DeviceHandle;
use rnic_emu::net::{Faults, Loopback, ShmFabric, ShmWire, UdpWire, Wire};
use rnic_emu::{Clock, EmuConfig, EmuDevice, ExecMode};
use rnic_verbs::provider::Provider;
use rnic_verbs::{Error, GidType};
use rnic_vfio::VfioHal;
use rnic_vfio_user::VfioUserHal;

use crate::abi::{
    set_str, IbvContext, IbvDevice, IbvDeviceAttr, IbvDeviceAttrEx, IbvGidEntry, IbvPortAttr,
    VerbsContext, COMPAT_PORT_ATTR_LEN, CONTEXT_OPS, GID_TYPE_SYSFS_IB_ROCE_V1,
    GID_TYPE_SYSFS_ROCE_V2, OP_ALLOC_MW, OP_BIND_MW, OP_DEALLOC_MW, OP_POLL_CQ, OP_POST_RECV,
    OP_POST_SEND, OP_POST_SRQ_RECV, OP_REQ_NOTIFY_CQ, VERBS_ABI_IS_EXTENDED,
};
use crate::any::AnyContext;
use crate::async_fd::AsyncFd;
use crate::config::{DeviceSpec, WireSpec};
use crate::device::ours;
use crate::errno;
use crate::platform::Platform;

/// An open device: the `struct verbs_context` (ending with the `struct
/// ibv_context` programs hold), first, then its provider's context, and
/// its emulated NIC if it is one.
#[repr(C)]
pub(crate) struct Context {
    verbs: VerbsContext,
    pub ctx: AnyContext,
    /// `async_fd`, where the device has an event fd.
    pub events: Option<AsyncFd>,
    /// `cmd_fd`: no kernel commands go through it, but programs expect a
    /// descriptor there (to `dup` it and hand it to `ibv_import_device`,
    /// which then says it cannot import).
    _cmd: std::os::fd::OwnedFd,
    /// Dropped after the driver's context, which resets the NIC.
    _nic: Option<Arc<EmuDevice>>,
}

/// The contexts open now: a pointer a program passes is one of them, or
/// is refused.
static OPEN: Mutex<Vec<usize>> = Mutex::new(Vec::new());

fn open_list() -> std::sync::MutexGuard<'static, Vec<usize>> {
    OPEN.lock().unwrap_or_else(|e| e.into_inner())
}

/// The open context `ctx` points to, if it is one.
pub(crate) fn open_context(ctx: *mut IbvContext) -> Option<&'static Context> {
    let open = open_list();
    // SAFETY: the pointer is one `ibv_open_device` returned and
    // `ibv_close_device` has not freed (it is in the list, which close
    // leaves first).
    open.contains(&(ctx as usize))
        .then(|| unsafe { &*container(ctx) })
}

/// The context whose `struct ibv_context` is at `ctx`.
///
/// # Safety
///
/// `ctx` points into a live `Context`.
unsafe fn container(ctx: *mut IbvContext) -> *mut Context {
    // SAFETY: the caller's promise: `ctx` is the `context` field of the
    // `VerbsContext` at the start of a `Context` (repr(C)).
    unsafe {
        ctx.cast::<u8>()
            .sub(std::mem::offset_of!(Context, verbs) + std::mem::offset_of!(VerbsContext, context))
            .cast()
    }
}

/// A copy of inherited descriptor `fd`, which must be a datagram socket:
/// the descriptor stays the process's, for the next device opened on it.
fn inherited_udp(fd: i32) -> std::io::Result<std::net::UdpSocket> {
    use std::os::fd::BorrowedFd;
    let mut ty: c_int = 0;
    let mut len = size_of::<c_int>() as libc::socklen_t;
    // SAFETY: SO_TYPE writes one int into `ty`, whose size `len` gives; a
    // descriptor that is not an open socket fails (EBADF, ENOTSOCK).
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_SOCKET,
            libc::SO_TYPE,
            (&raw mut ty).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(std::io::Error::last_os_error());
    }
    if ty != libc::SOCK_DGRAM {
        return Err(std::io::Error::other("not a datagram (UDP) socket"));
    }
    // SAFETY: an open socket (checked above), only borrowed to be
    // duplicated; the process keeps it.
    let borrowed = unsafe { BorrowedFd::borrow_raw(fd) };
    Ok(std::net::UdpSocket::from(borrowed.try_clone_to_owned()?))
}

/// A descriptor that stands for a context (an empty memfd named
/// `rnic-context`, closed on exec).
fn context_fd() -> std::io::Result<std::os::fd::OwnedFd> {
    use std::os::fd::FromRawFd;
    // SAFETY: a NUL-terminated name and flags; the result is checked.
    let fd = unsafe { libc::memfd_create(c"rnic-context".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a new descriptor, owned by nothing else.
    Ok(unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) })
}

/// A device opened: its provider's context and, for an emulated NIC, the
/// NIC.
type Opened = (AnyContext, Option<Arc<EmuDevice>>);

/// An rnic device with contexts open in this process.
struct OpenDevice {
    /// The configured device (`&'static Device` as an address).
    device: usize,
    handle: DeviceHandle<Platform>,
    nic: Option<Weak<EmuDevice>>,
}

/// The rnic devices open in this process. Opening one again opens another
/// context on the same NIC, as a kernel provider does: the contexts'
/// QPs reach each other through its port (a second NIC with the same
/// addresses, on a wire of its own, would reach no one).
static DEVICES: Mutex<Vec<OpenDevice>> = Mutex::new(Vec::new());

fn device_list() -> std::sync::MutexGuard<'static, Vec<OpenDevice>> {
    DEVICES.lock().unwrap_or_else(|e| e.into_inner())
}

/// Another context on `device`'s NIC if a context of it is open, else a
/// context on a NIC brought up now. Called with the device list held,
/// which serialises opening and closing.
fn context_on(
    devices: &mut Vec<OpenDevice>,
    device: usize,
    spec: &DeviceSpec,
) -> Result<Opened, (String, i32)> {
    if let Some(at) = devices.iter().position(|d| d.device == device) {
        let open = &devices[at];
        let nic = open.nic.as_ref().map(Weak::upgrade);
        match (open.handle.open_context(), nic) {
            (Some(Ok(ctx)), None) => return Ok((AnyContext::Rnic(ctx), None)),
            (Some(Ok(ctx)), Some(Some(nic))) => return Ok((AnyContext::Rnic(ctx), Some(nic))),
            (Some(Err(e)), _) => return Err((format!("another context: {e}"), e.errno())),
            // Every context closed: the device was reset.
            _ => {
                devices.swap_remove(at);
            }
        }
    }
    let (ctx, nic) = provider_context(spec)?;
    if let AnyContext::Rnic(c) = &ctx {
        devices.push(OpenDevice {
            device,
            handle: c.device_handle(),
            nic: nic.as_ref().map(Arc::downgrade),
        });
    }
    Ok((ctx, nic))
}

/// VMware's PCI vendor ID and PVRDMA's device ID.
const PVRDMA_ID: (u16, u16) = (0x15ad, 0x0820);

/// The provider context of a configured device: the real device it names
/// through VFIO, rnic or PVRDMA by its PCI ID, or the emulated rnic NIC it
/// stands for, in device-worker mode (programs poll and wait as on
/// hardware).
fn provider_context(spec: &DeviceSpec) -> Result<Opened, (String, i32)> {
    let platform = |e: String| (e, libc::ENODEV);
    let driver = |what: String| move |e: Error| (format!("{what}: {e}"), e.errno());
    if let Some(addr) = &spec.vfio {
        let hal = VfioHal::open(addr).map_err(|e| platform(format!("vfio {addr}: {e}")))?;
        let id = |off| hal.device().config_read16(off);
        let id = (id(0), id(2));
        let (Ok(vendor), Ok(device)) = id else {
            return Err(platform(format!("vfio {addr}: its PCI ID cannot be read")));
        };
        if (vendor, device) == PVRDMA_ID {
            let ctx = rnic_pvrdma::provider::Context::open(hal)
                .map_err(driver(format!("PVRDMA {addr}")))?;
            return Ok((AnyContext::Pvrdma(ctx), None));
        }
        let ctx = rnic_driver::Context::open(Platform::Vfio(Box::new(hal)))
            .map_err(driver(format!("rnic {addr} ({vendor:04x}:{device:04x})")))?;
        return Ok((AnyContext::Rnic(ctx), None));
    }
    if let Some(socket) = &spec.vfio_user {
        let at = socket.display();
        let hal =
            VfioUserHal::connect(socket).map_err(|e| platform(format!("vfio-user {at}: {e}")))?;
        let ctx = rnic_driver::Context::open(Platform::VfioUser(Box::new(hal)))
            .map_err(driver(format!("rnic at {at}")))?;
        return Ok((AnyContext::Rnic(ctx), None));
    }
    let cfg = EmuConfig {
        mac: spec.mac,
        ipv4: spec.ipv4,
        // Every `ibv_open_device` of the device is a context on this NIC
        // with doorbell pages of its own: room for 512 of them, as a
        // kernel provider gives a process (and programs such as pyverbs'
        // tests, which close theirs when collected, need).
        uar_pages: 4096,
        ..EmuConfig::default()
    };
    let wire: Box<dyn Wire> = match &spec.wire {
        WireSpec::Loopback => Box::new(Loopback::default()),
        WireSpec::Udp { local, remote } => Box::new(
            UdpWire::bind(*local, *remote).map_err(|e| platform(format!("udp {local}: {e}")))?,
        ),
        WireSpec::UdpFd { fd, remote } => {
            let socket = inherited_udp(*fd).map_err(|e| platform(format!("udp-fd {fd}: {e}")))?;
            Box::new(
                UdpWire::from_socket(socket, *remote)
                    .map_err(|e| platform(format!("udp-fd {fd}: {e}")))?,
            )
        }
        WireSpec::Fabric { dir } => Box::new(
            ShmFabric::join(dir, spec.mac)
                .map_err(|e| platform(format!("fabric {}: {e}", dir.display())))?,
        ),
        WireSpec::Shm { path, create } => {
            let w = if *create {
                ShmWire::create(path)
            } else {
                ShmWire::open(path)
            };
            Box::new(w.map_err(|e| platform(format!("shm {}: {e}", path.display())))?)
        }
    };
    // The injector below the capture (RNIC_PCAP): a capture shows what
    // the NIC sent and what reached it. It holds frames on the NIC's
    // clock, which polls it.
    let clock = Clock::real();
    let wire = match &spec.faults {
        Some(f) => {
            let (w, handle) = Faults::new(wire, clock.clone(), f.seed);
            handle.set(f.config());
            Box::new(w) as Box<dyn Wire>
        }
        None => wire,
    };
    let nic = EmuDevice::builder(cfg)
        .clock(clock)
        .mode(ExecMode::Thread)
        .wire(wire)
        .build()
        .map_err(|e| platform(e.to_string()))?;
    let ctx = rnic_driver::Context::open(Platform::Emu(nic.hal()))
        .map_err(driver("the emulated NIC".into()))?;
    Ok((AnyContext::Rnic(ctx), Some(nic)))
}

/// `ibv_open_device`: opens a context on the device's NIC, bringing it
/// up if no context of it is open in the process. NULL with `errno` `EINVAL` for a pointer that is not a listed
/// device, or the driver's `errno` if the NIC cannot be brought up (the
/// reason goes to stderr).
///
/// # Safety
///
/// None beyond what the C signature implies: the pointer is only compared.
#[no_mangle]
pub unsafe extern "C" fn ibv_open_device(device: *mut IbvDevice) -> *mut IbvContext {
    let Some(d) = ours(device) else {
        return errno::fail(libc::EINVAL);
    };
    let mut devices = device_list();
    let (ctx, nic) = match context_on(&mut devices, d as *const _ as usize, &d.spec) {
        Ok(n) => n,
        Err((e, errno)) => {
            eprintln!("rnic libibverbs: {}: {e}", d.spec.name);
            return errno::fail(errno);
        }
    };
    let cmd = match context_fd() {
        Ok(fd) => fd,
        Err(e) => return errno::fail(e.raw_os_error().unwrap_or(libc::EMFILE)),
    };
    let events = match ctx.event_fd().map(AsyncFd::new).transpose() {
        Ok(events) => events,
        Err(e) => return errno::fail(e.raw_os_error().unwrap_or(libc::EMFILE)),
    };
    if let Some(e) = &events {
        ctx.on_event_queued(e.raiser());
    }
    // The data-path calls the header's inline functions make through the
    // context; the other entries are compatibility slots, NULL.
    let mut ops = [std::ptr::null_mut::<c_void>(); CONTEXT_OPS];
    ops[OP_POLL_CQ] = crate::cq::poll_cq as *mut c_void;
    ops[OP_REQ_NOTIFY_CQ] = crate::cq::req_notify_cq as *mut c_void;
    ops[OP_POST_SEND] = crate::post::post_send as *mut c_void;
    ops[OP_POST_RECV] = crate::post::post_recv as *mut c_void;
    ops[OP_ALLOC_MW] = crate::mw::alloc_mw as *mut c_void;
    ops[OP_BIND_MW] = crate::mw::bind_mw as *mut c_void;
    ops[OP_DEALLOC_MW] = crate::mw::dealloc_mw as *mut c_void;
    ops[OP_POST_SRQ_RECV] = crate::srq::post_srq_recv as *mut c_void;
    let context = IbvContext {
        device,
        ops,
        cmd_fd: cmd.as_raw_fd(),
        async_fd: events.as_ref().map_or(-1, AsyncFd::raw),
        num_comp_vectors: ctx.num_comp_vectors().min(c_int::MAX as u32) as c_int,
        // SAFETY: a zeroed pthread_mutex_t is PTHREAD_MUTEX_INITIALIZER
        // on glibc.
        mutex: unsafe { std::mem::zeroed() },
        abi_compat: VERBS_ABI_IS_EXTENDED,
    };
    // The extended operations served; the header's helpers treat the NULL
    // ones as unsupported.
    // SAFETY: pointers and integers: all zeros (NULL) is valid.
    let mut verbs: VerbsContext = unsafe { std::mem::zeroed() };
    verbs.query_port = query_port_ex as *mut c_void;
    verbs.query_device_ex = query_device_ex as *mut c_void;
    verbs.create_cq_ex = crate::cq::create_cq_ex as *mut c_void;
    verbs.create_qp_ex = crate::qp::create_qp_ex as *mut c_void;
    verbs.create_srq_ex = crate::srq::create_srq_ex as *mut c_void;
    verbs.get_srq_num = crate::srq::get_srq_num as *mut c_void;
    verbs.sz = size_of::<VerbsContext>();
    verbs.context = context;
    // The async fd turns readable at the first event.
    ctx.arm_events();
    let c = Box::into_raw(Box::new(Context {
        verbs,
        ctx,
        events,
        _cmd: cmd,
        _nic: nic,
    }));
    // SAFETY: just made; the field programs hold.
    let ibv = unsafe { &raw mut (*c).verbs.context };
    open_list().push(ibv as usize);
    drop(devices);
    ibv
}

/// `ibv_close_device`: closes the context (its objects go with it), and
/// resets the NIC when it was the device's last open context. 0, or -1
/// with `errno` `EINVAL` for a pointer that is not an open context.
///
/// # Safety
///
/// None beyond what the C signature implies: the pointer is only compared
/// until it is known to be an open context.
#[no_mangle]
pub unsafe extern "C" fn ibv_close_device(context: *mut IbvContext) -> c_int {
    let mut open = open_list();
    let Some(at) = open.iter().position(|&c| c == context as usize) else {
        errno::set(libc::EINVAL);
        return -1;
    };
    open.swap_remove(at);
    drop(open);
    // Not while another context of the device is being opened.
    let devices = device_list();
    // SAFETY: it was open, so it came from Box::into_raw in
    // ibv_open_device, and it has left the list: nothing else frees it.
    drop(unsafe { Box::from_raw(container(context)) });
    drop(devices);
    0
}

/// `ibv_query_device`: the device's attributes. 0, or an `errno` value
/// (`EINVAL` for a context that is not open or a NULL `device_attr`).
///
/// # Safety
///
/// `device_attr` is NULL or points to writable memory for a
/// `struct ibv_device_attr`.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_device(
    context: *mut IbvContext,
    device_attr: *mut IbvDeviceAttr,
) -> c_int {
    let Some(c) = context_and_out(context, device_attr) else {
        return libc::EINVAL;
    };
    match device_attr_of(c) {
        Ok(out) => {
            // SAFETY: checked non-NULL; the caller's promise for the rest.
            unsafe { device_attr.write(out) };
            0
        }
        Err(e) => e,
    }
}

/// The device's attributes as `struct ibv_device_attr`, or an `errno`
/// value.
fn device_attr_of(c: &Context) -> Result<IbvDeviceAttr, c_int> {
    let a = c.ctx.query_device().map_err(|e| errno_of(&e))?;
    let int = |v: u32| v.min(c_int::MAX as u32) as c_int;
    // SAFETY: plain integers and arrays: zero is a valid value.
    let mut out: IbvDeviceAttr = unsafe { std::mem::zeroed() };
    let fw = a.fw_ver;
    set_str(
        &mut out.fw_ver,
        &format!("{}.{}.{}", fw >> 32, (fw >> 16) & 0xffff, fw & 0xffff),
    );
    out.node_guid = u64::from_ne_bytes(a.node_guid);
    out.sys_image_guid = u64::from_ne_bytes(a.sys_image_guid);
    out.max_mr_size = a.max_mr_size;
    out.page_size_cap = a.page_size_cap;
    out.vendor_id = a.vendor_id;
    out.vendor_part_id = a.vendor_part_id;
    out.hw_ver = a.hw_ver;
    out.max_qp = int(a.max_qp);
    out.max_qp_wr = int(a.max_qp_wr);
    out.device_cap_flags = a.device_cap_flags;
    out.max_sge = int(a.max_sge);
    out.max_sge_rd = int(a.max_sge_rd);
    out.max_cq = int(a.max_cq);
    out.max_cqe = int(a.max_cqe);
    out.max_mr = int(a.max_mr);
    out.max_pd = int(a.max_pd);
    out.max_qp_rd_atom = int(a.max_qp_rd_atom);
    out.max_res_rd_atom = int(a.max_qp_rd_atom.saturating_mul(a.max_qp));
    out.max_qp_init_rd_atom = int(a.max_qp_init_rd_atom);
    out.atomic_cap = int(a.atomic_cap);
    // Memory windows take their keys from the MR table.
    out.max_mw = int(a.max_mr);
    // Address handles are the library's own objects in host memory (the
    // device holds none), bounded by memory alone, as mlx5 reports them.
    out.max_ah = c_int::MAX;
    out.max_srq = int(a.max_srq);
    out.max_srq_wr = int(a.max_srq_wr);
    out.max_srq_sge = int(a.max_srq_sge);
    out.max_pkeys = 1;
    out.local_ca_ack_delay = a.local_ca_ack_delay.min(u8::MAX.into()) as u8;
    out.phys_port_cnt = a.phys_port_cnt.min(u8::MAX.into()) as u8;
    Ok(out)
}

/// The open context `context` and a non-NULL `out`, or None.
fn context_and_out<T>(context: *mut IbvContext, out: *mut T) -> Option<&'static Context> {
    if out.is_null() {
        return None;
    }
    open_context(context)
}

/// The `errno` value of a driver error.
fn errno_of(e: &Error) -> c_int {
    e.errno()
}

/// `ibv_query_port` (the exported function under the header's inline
/// wrapper): the port's attributes, the `struct _compat_ibv_port_attr`
/// part of them. 0, or an `errno` value (`EINVAL` for a context that is
/// not open, a NULL `port_attr` or a port that does not exist).
///
/// # Safety
///
/// `port_attr` is NULL or points to writable memory for
/// [`COMPAT_PORT_ATTR_LEN`] bytes.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_port(
    context: *mut IbvContext,
    port_num: u8,
    port_attr: *mut IbvPortAttr,
) -> c_int {
    let Some(c) = context_and_out(context, port_attr) else {
        return libc::EINVAL;
    };
    let out = match port_attr_of(c, port_num) {
        Ok(p) => p,
        Err(e) => return e,
    };
    // SAFETY: `out` is a plain struct of at least COMPAT_PORT_ATTR_LEN
    // bytes; `port_attr` is non-NULL and, by the caller's promise, that
    // long (an older program's struct is no longer).
    unsafe {
        std::ptr::copy_nonoverlapping(
            (&out as *const IbvPortAttr).cast::<u8>(),
            port_attr.cast::<u8>(),
            COMPAT_PORT_ATTR_LEN,
        )
    };
    0
}

/// Port `port`'s attributes as `struct ibv_port_attr`, or an `errno`
/// value.
fn port_attr_of(c: &Context, port_num: u8) -> Result<IbvPortAttr, c_int> {
    let p = c.ctx.query_port(port_num).map_err(|e| errno_of(&e))?;
    let out = IbvPortAttr {
        state: p.state.raw().into(),
        max_mtu: p.max_mtu.raw().into(),
        active_mtu: p.active_mtu.raw().into(),
        gid_tbl_len: p.gid_tbl_len.min(c_int::MAX as u32) as c_int,
        port_cap_flags: p.port_cap_flags,
        max_msg_sz: p.max_msg_sz,
        bad_pkey_cntr: p.bad_pkey_cntr,
        qkey_viol_cntr: p.qkey_viol_cntr,
        pkey_tbl_len: p.pkey_tbl_len,
        lid: p.lid,
        sm_lid: p.sm_lid,
        lmc: p.lmc,
        max_vl_num: p.max_vl_num,
        sm_sl: p.sm_sl,
        subnet_timeout: p.subnet_timeout,
        init_type_reply: 0,
        active_width: p.active_width,
        active_speed: p.active_speed,
        phys_state: p.phys_state,
        link_layer: p.link_layer.raw(),
        flags: 0,
        port_cap_flags2: 0,
    };
    Ok(out)
}

/// The context's extended `query_port` (what the header's inline
/// `ibv_query_port` calls on a `struct verbs_context`): the whole
/// `struct ibv_port_attr`, its first `port_attr_len` bytes (a program
/// built against an older header has a shorter one; a newer one's longer
/// part is zeroed). 0, or an `errno` value as [`ibv_query_port`].
///
/// # Safety
///
/// `port_attr` is NULL or points to `port_attr_len` writable bytes.
unsafe extern "C" fn query_port_ex(
    context: *mut IbvContext,
    port_num: u8,
    port_attr: *mut IbvPortAttr,
    port_attr_len: usize,
) -> c_int {
    let Some(c) = context_and_out(context, port_attr) else {
        return libc::EINVAL;
    };
    match port_attr_of(c, port_num) {
        // SAFETY: the caller's promise: `port_attr_len` bytes.
        Ok(out) => unsafe { put(&out, port_attr.cast(), port_attr_len) },
        Err(e) => return e,
    }
    0
}

/// Writes `value`'s bytes to the caller's `len` bytes at `dst`: cut to
/// `len`, or zeroed past `value`.
///
/// # Safety
///
/// `dst` points to `len` writable bytes; `T` is a plain C structure.
unsafe fn put<T>(value: &T, dst: *mut u8, len: usize) {
    let n = len.min(size_of::<T>());
    // SAFETY: the caller's promise; `value` has `n <= size_of::<T>()`
    // bytes.
    unsafe {
        std::ptr::copy_nonoverlapping((value as *const T).cast::<u8>(), dst, n);
        std::ptr::write_bytes(dst.add(n), 0, len - n);
    }
}

/// The context's `query_device_ex` (the header's inline
/// `ibv_query_device_ex`): `struct ibv_device_attr` and the extended
/// capabilities, which rnic lacks (zero), with `phys_port_cnt_ex`, in the
/// caller's `attr_size` bytes. 0, or an `errno` value: `EINVAL` for a
/// context that is not open, a NULL `attr`, input flags (none is defined)
/// or a size short of `struct ibv_device_attr`.
///
/// # Safety
///
/// `input` is NULL or points to a `struct ibv_query_device_ex_input`;
/// `attr` is NULL or points to `attr_size` writable bytes.
unsafe extern "C" fn query_device_ex(
    context: *mut IbvContext,
    input: *const u32,
    attr: *mut IbvDeviceAttrEx,
    attr_size: usize,
) -> c_int {
    let Some(c) = context_and_out(context, attr) else {
        return libc::EINVAL;
    };
    // SAFETY: non-NULL, and its comp_mask by the caller's promise.
    if (!input.is_null() && unsafe { *input } != 0) || attr_size < size_of::<IbvDeviceAttr>() {
        return libc::EINVAL;
    }
    let orig = match device_attr_of(c) {
        Ok(a) => a,
        Err(e) => return e,
    };
    // SAFETY: integers: zero is valid.
    let mut ex: IbvDeviceAttrEx = unsafe { std::mem::zeroed() };
    ex.orig_attr = orig;
    ex.device_cap_flags_ex = u64::from(orig.device_cap_flags);
    ex.phys_port_cnt_ex = u32::from(orig.phys_port_cnt);
    // SAFETY: the caller's promise: `attr_size` bytes.
    unsafe { put(&ex, attr.cast(), attr_size) };
    0
}

/// `ibv_query_gid`: GID `index` of port `port_num` (all zeros for an
/// unused entry). 0, or -1 with `errno` (`EINVAL` for a context that is
/// not open, a NULL `gid`, or a port or index out of range).
///
/// # Safety
///
/// `gid` is NULL or points to 16 writable bytes.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid(
    context: *mut IbvContext,
    port_num: u8,
    index: c_int,
    gid: *mut [u8; 16],
) -> c_int {
    let Some(c) = context_and_out(context, gid) else {
        errno::set(libc::EINVAL);
        return -1;
    };
    let Ok(index) = u32::try_from(index) else {
        errno::set(libc::EINVAL);
        return -1;
    };
    match c.ctx.query_gid(port_num, index) {
        Ok(g) => {
            // SAFETY: non-NULL, and 16 bytes by the caller's promise.
            unsafe { gid.write(g) };
            0
        }
        Err(e) => {
            errno::set(errno_of(&e));
            -1
        }
    }
}

/// `ibv_query_gid_type` (`IBVERBS_PRIVATE_34`, for rdma-core's
/// utilities): the entry's type as the provider reports it, in sysfs'
/// numbering (`IB/RoCE v1` 0, `RoCE v2` 1). 0, or -1 with `errno` as
/// [`ibv_query_gid`].
///
/// # Safety
///
/// `gid_type` is NULL or points to a writable `int`.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_gid_type(
    context: *mut IbvContext,
    port_num: u8,
    index: u32,
    gid_type: *mut c_int,
) -> c_int {
    let Some(c) = context_and_out(context, gid_type) else {
        errno::set(libc::EINVAL);
        return -1;
    };
    let ty = match c.ctx.query_gid_entry(port_num, index) {
        Ok((_, ty)) => ty,
        Err(e) => {
            errno::set(errno_of(&e));
            return -1;
        }
    };
    let sysfs = if ty == GidType::RoceV2 {
        GID_TYPE_SYSFS_ROCE_V2
    } else {
        GID_TYPE_SYSFS_IB_ROCE_V1
    };
    // SAFETY: non-NULL, and an int by the caller's promise.
    unsafe { gid_type.write(sysfs) };
    0
}

/// The index of `gid` in port `port`'s GID table, if it is there.
pub(crate) fn find_gid_index(c: &Context, port: u8, gid: &[u8; 16]) -> Option<u8> {
    let len = c.ctx.query_port(port).ok()?.gid_tbl_len.min(256);
    (0..len)
        .find(|&i| c.ctx.query_gid(port, i).is_ok_and(|g| &g == gid))
        .map(|i| i as u8)
}

/// The default P_Key, the only one of an rnic port (RoCE has no
/// partitions).
const DEFAULT_PKEY: u16 = 0xffff;

/// `ibv_query_pkey`: P_Key `index` of port `port_num`, in network byte
/// order: the default P_Key at 0, and 0 (an empty entry) at the rest of
/// the port's table. 0, or -1 with `errno`: `EINVAL` for a context that is
/// not open or a NULL `pkey`, `ENOENT` for an index past the table (as
/// libibverbs finds no sysfs entry there), the driver's for a bad port.
///
/// # Safety
///
/// `pkey` is NULL or points to a writable `__be16`.
#[no_mangle]
pub unsafe extern "C" fn ibv_query_pkey(
    context: *mut IbvContext,
    port_num: u8,
    index: c_int,
    pkey: *mut u16,
) -> c_int {
    let Some(c) = context_and_out(context, pkey) else {
        errno::set(libc::EINVAL);
        return -1;
    };
    let len = match c.ctx.query_port(port_num) {
        Ok(p) => p.pkey_tbl_len,
        Err(e) => {
            errno::set(errno_of(&e));
            return -1;
        }
    };
    let value = match u16::try_from(index) {
        Ok(0) => DEFAULT_PKEY,
        Ok(i) if i < len => 0,
        _ => {
            errno::set(libc::ENOENT);
            return -1;
        }
    };
    // SAFETY: non-NULL, and writable by the caller's promise.
    unsafe { pkey.write(value.to_be()) };
    0
}

/// `ibv_get_pkey_index`: the index of `pkey` (network byte order) in
/// port `port_num`'s table, or -1 with `errno` as [`ibv_query_pkey`]
/// gives it for the first index past the table.
///
/// # Safety
///
/// None beyond what the C signature implies.
#[no_mangle]
pub unsafe extern "C" fn ibv_get_pkey_index(
    context: *mut IbvContext,
    port_num: u8,
    pkey: u16,
) -> c_int {
    for i in 0.. {
        let mut p = 0u16;
        // SAFETY: `p` is a writable u16.
        if unsafe { ibv_query_pkey(context, port_num, i, &mut p) } < 0 {
            return -1;
        }
        if p == pkey {
            return i;
        }
    }
    -1
}

/// GID `index` of `port` as a `struct ibv_gid_entry`, or the `errno`
/// value: `ENODATA` for an unused entry, the driver's for a bad port or
/// index.
fn gid_entry(c: &Context, port: u32, index: u32) -> Result<IbvGidEntry, c_int> {
    let port8 = u8::try_from(port).map_err(|_| libc::EINVAL)?;
    let (gid, ty) = c
        .ctx
        .query_gid_entry(port8, index)
        .map_err(|e| errno_of(&e))?;
    if gid == [0; 16] {
        return Err(libc::ENODATA);
    }
    Ok(IbvGidEntry {
        gid,
        gid_index: index,
        port_num: port,
        gid_type: ty.raw().into(),
        ndev_ifindex: 0,
    })
}

/// Writes `entry` to `out`, a caller's entry of `entry_size` bytes:
/// zeroed past the fields of this version of the structure.
///
/// # Safety
///
/// `out` points to `entry_size >= size_of::<IbvGidEntry>()` writable
/// bytes.
unsafe fn put_entry(out: *mut u8, entry_size: usize, entry: &IbvGidEntry) {
    // SAFETY: the caller's promise: `entry_size` bytes, at least one
    // entry's.
    unsafe {
        std::ptr::write_bytes(out, 0, entry_size);
        out.cast::<IbvGidEntry>().write_unaligned(*entry);
    }
}

/// `_ibv_query_gid_ex` (`IBVERBS_1.11`, under the header's inline
/// `ibv_query_gid_ex`): GID `gid_index` of port `port_num` with its type
/// (RoCE v2) and network interface (none). 0, or an `errno` value:
/// `EINVAL` for a context that is not open, a NULL `entry` or an
/// `entry_size` short of the structure; `EOPNOTSUPP` for flags (none is
/// defined); `ENODATA` for an unused entry; the driver's for a bad port or
/// index.
///
/// # Safety
///
/// `entry` is NULL or points to `entry_size` writable bytes.
#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_ex(
    context: *mut IbvContext,
    port_num: u32,
    gid_index: u32,
    entry: *mut IbvGidEntry,
    flags: u32,
    entry_size: usize,
) -> c_int {
    let Some(c) = context_and_out(context, entry) else {
        return libc::EINVAL;
    };
    if entry_size < size_of::<IbvGidEntry>() {
        return libc::EINVAL;
    }
    if flags != 0 {
        return libc::EOPNOTSUPP;
    }
    match gid_entry(c, port_num, gid_index) {
        Ok(e) => {
            // SAFETY: `entry_size` writable bytes, by the caller's promise.
            unsafe { put_entry(entry.cast(), entry_size, &e) };
            0
        }
        Err(e) => e,
    }
}

/// `_ibv_query_gid_table` (`IBVERBS_1.11`, under the header's inline
/// `ibv_query_gid_table`): the used GIDs of every port, at most
/// `max_entries`, each as [`_ibv_query_gid_ex`] gives it. The number of
/// entries, or a negative `errno` value: `-EINVAL` for a context that is
/// not open, a NULL `entries`, a short `entry_size` or more used GIDs
/// than `max_entries`; `-EOPNOTSUPP` for flags.
///
/// # Safety
///
/// `entries` is NULL or points to `max_entries * entry_size` writable
/// bytes.
#[no_mangle]
pub unsafe extern "C" fn _ibv_query_gid_table(
    context: *mut IbvContext,
    entries: *mut IbvGidEntry,
    max_entries: usize,
    flags: u32,
    entry_size: usize,
) -> isize {
    let einval = -(libc::EINVAL as isize);
    let Some(c) = context_and_out(context, entries) else {
        return einval;
    };
    if entry_size < size_of::<IbvGidEntry>() {
        return einval;
    }
    if flags != 0 {
        return -(libc::EOPNOTSUPP as isize);
    }
    let ports = match c.ctx.query_device() {
        Ok(a) => a.phys_port_cnt,
        Err(e) => return -(errno_of(&e) as isize),
    };
    let mut n = 0usize;
    for port in 1..=ports {
        let len = match c.ctx.query_port(port.min(255) as u8) {
            Ok(p) => p.gid_tbl_len,
            Err(e) => return -(errno_of(&e) as isize),
        };
        for index in 0..len {
            let e = match gid_entry(c, port, index) {
                Ok(e) => e,
                Err(libc::ENODATA) => continue,
                Err(e) => return -(e as isize),
            };
            if n == max_entries {
                return einval;
            }
            // SAFETY: entry `n < max_entries` of the caller's array.
            unsafe { put_entry(entries.cast::<u8>().add(n * entry_size), entry_size, &e) };
            n += 1;
        }
    }
    n as isize
}

/// `ibv_resolve_eth_l2_from_gid`: the Ethernet address of an AH's
/// destination, which libibverbs resolves through the host's neighbour
/// table of the port's network interface. rnic ports have no host
/// interface (their NICs resolve their peers themselves), so it cannot
/// be resolved here: `-EINVAL`, what libibverbs returns when it cannot
/// resolve one.
#[no_mangle]
pub extern "C" fn ibv_resolve_eth_l2_from_gid(
    _context: *mut IbvContext,
    _attr: *mut c_void,
    _eth_mac: *mut u8,
    _vid: *mut u16,
) -> c_int {
    errno::set(libc::EINVAL);
    -libc::EINVAL
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsRawFd;

    use super::inherited_udp;

    #[test]
    fn an_inherited_udp_socket_is_copied_and_others_are_refused() {
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let copy = inherited_udp(udp.as_raw_fd()).unwrap();
        assert_ne!(
            copy.as_raw_fd(),
            udp.as_raw_fd(),
            "a copy: the process keeps its own"
        );
        assert_eq!(copy.local_addr().unwrap(), udp.local_addr().unwrap());
        drop(copy);
        assert!(udp.local_addr().is_ok(), "the inherited one stays open");

        let tcp = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let e = inherited_udp(tcp.as_raw_fd()).unwrap_err();
        assert!(e.to_string().contains("datagram"), "{e}");
        let file = std::fs::File::open("/dev/null").unwrap();
        let e = inherited_udp(file.as_raw_fd()).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENOTSOCK), "{e}");
    }
}

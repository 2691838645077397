//! The process's connection manager: the ports of the devices it uses,
//! the IDs, and a thread that waits on every port's GSI completions and
//! the managers' timers, as the kernel's `rdma_cm` runs apart from the
//! program. Every call and the thread take one lock.

use std::collections::HashMap;
use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use rnic_cm::cma::{self, CmaHdr};
use rnic_cm::manager::{Event, Gid};
use rnic_cm::rej::RejRepr;
use rnic_cm::rep::RepRepr;
use rnic_cm::req::ReqRepr;
use rnic_cm::sidr::SidrReqRepr;
use rnic_verbs_abi::{IbvAhAttr, IbvDevice, IbvQpAttr};

use crate::abi::{
    event, IbvSaPathRec, RdmaCmEvent, RdmaCmEventParam, RdmaCmId, RdmaConnParam, RdmaUdParam,
};
use crate::channel::{self, EventBox, PRIVATE_MAX};
use crate::port::Port;
use crate::verbs;

/// Where an ID is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum Phase {
    /// Made, or bound.
    #[default]
    Idle,
    /// Address resolved.
    AddrResolved,
    /// Route resolved.
    RouteResolved,
    /// Listening.
    Listening,
    /// REQ sent.
    Connecting,
    /// A connection request, not yet accepted.
    Requested,
    /// REP sent (passive).
    Accepting,
    /// The REP came to an ID without a QP: the program readies its own
    /// and calls `rdma_establish`.
    Responded,
    /// Connected.
    Connected,
    /// Disconnected (either side).
    Disconnected,
}

/// What the library keeps of an ID besides what the program sees.
#[derive(Debug, Default)]
pub(crate) struct IdState {
    /// Its port (an index into the ports), once bound or resolved.
    pub port: Option<usize>,
    /// Its phase.
    pub phase: Phase,
    /// Its communication ID at its port's manager.
    pub comm_id: Option<u32>,
    /// The service ID listened on.
    pub service_id: Option<u64>,
    /// The PSN its QP expects first, which its REQ or REP announces
    /// (the other side sends from it).
    pub psn: u32,
    /// The REQ of a connection request (passive side).
    pub req: Option<ReqRepr>,
    /// What it asked for when connecting (active side).
    pub resources: (u8, u8),
    /// The other side, once known (the REP's, or what `rdma_accept`
    /// agreed to): what `rdma_init_qp_attr` fills a QP's attributes from.
    pub remote: Option<crate::id::Remote>,
    /// The path record the program sees (`route.path_rec`).
    pub path: Box<IbvSaPathRec>,
    /// A synchronous ID (made without a channel): its calls wait for
    /// their events, on a channel of its own, which goes with it.
    pub sync: bool,
    /// A passive endpoint's QP attributes, for each request
    /// `rdma_get_request` takes (`rdma_create_ep`).
    pub ep: Option<Box<crate::ep::Endpoint>>,
    /// `rdma_create_qp` made the CQs (and their channels) the ID's
    /// fields name: `rdma_destroy_qp` frees them.
    pub own_cqs: bool,
}

impl IdState {
    /// Ends the ID's connection as an ID that goes away: a DREQ once it
    /// is connected or accepting, a REJ while a request or a REP waits for
    /// the program; nothing in any other phase.
    pub(crate) fn leave(&self, ports: &mut [Port], now: u64) {
        let (Some(port), Some(comm)) = (self.port, self.comm_id) else {
            return;
        };
        let p = &mut ports[port];
        let out = match self.phase {
            Phase::Connected | Phase::Accepting => p.manager.disconnect(now, comm, &[]).ok(),
            Phase::Requested | Phase::Responded => p
                .manager
                .reject(comm, rnic_cm::rej::reason::CONSUMER_DEFINED, &[])
                .ok(),
            _ => None,
        };
        if let Some(o) = out {
            p.send(&o);
        }
    }
}

/// The process's CM.
pub(crate) struct Cm {
    state: Mutex<State>,
    /// Wakes the thread: a port came, or a timer moved.
    wake: c_int,
    epoch: Instant,
}

/// What the lock holds.
pub(crate) struct State {
    /// The devices' ports, opened as IDs first need them.
    pub ports: Vec<Port>,
    /// Whether every device has been looked at.
    pub all_open: bool,
    /// Every ID's state, by its address.
    pub ids: HashMap<usize, IdState>,
    /// IDs by port and communication ID.
    pub conns: HashMap<(usize, u32), usize>,
    /// Listening IDs by port and service ID.
    pub listeners: HashMap<(usize, u64), usize>,
}

// SAFETY: the raw pointers the state holds are verbs objects and IDs that
// any thread may use; they are only reached under the lock.
unsafe impl Send for State {}

static CM: OnceLock<Cm> = OnceLock::new();

/// The process's CM, its thread started on first use.
pub(crate) fn cm() -> &'static Cm {
    CM.get_or_init(|| {
        // This library's logger is its own (libibverbs' is another
        // library's): RUST_LOG=rnic_rdmacm=debug shows the CM's work.
        let _ = env_logger::try_init();
        // SAFETY: eventfd has no memory arguments.
        let wake = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        std::thread::Builder::new()
            .name("rdmacm".into())
            .spawn(run)
            .expect("the rdmacm thread");
        // SAFETY: registers a function with no arguments for exit().
        unsafe { libc::atexit(at_exit) };
        Cm {
            state: Mutex::new(State {
                ports: Vec::new(),
                all_open: false,
                ids: HashMap::new(),
                conns: HashMap::new(),
                listeners: HashMap::new(),
            }),
            wake,
            epoch: Instant::now(),
        }
    })
}

impl Cm {
    /// The lock.
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Nanoseconds since the CM started: the managers' clock.
    pub(crate) fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    /// Makes the thread look again (a timer may be earlier now).
    pub(crate) fn kick(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes to our eventfd.
        unsafe { libc::write(self.wake, (&one as *const u64).cast(), 8) };
    }
}

impl State {
    /// Opens every device not open yet (once), each port's CM with it.
    pub(crate) fn open_all(&mut self) {
        if self.all_open {
            return;
        }
        self.all_open = true;
        let mut n = 0;
        // SAFETY: the list is freed below; its entries are the library's.
        let list = unsafe { verbs::ibv_get_device_list(&mut n) };
        if list.is_null() {
            return;
        }
        for i in 0..n.max(0) as usize {
            // SAFETY: `n` entries.
            let dev: *mut IbvDevice = unsafe { *list.add(i) };
            // SAFETY: a listed device.
            let ctx = unsafe { verbs::ibv_open_device(dev) };
            if ctx.is_null() {
                continue;
            }
            let seed = std::process::id().rotate_left(16) ^ (i as u32) << 24 ^ 0x5a5a;
            match Port::open(ctx, seed | 1) {
                Ok(p) => self.ports.push(p),
                Err(e) => log::warn!("rdmacm: device {i}: {e}"),
            }
        }
        // SAFETY: from ibv_get_device_list.
        unsafe { verbs::ibv_free_device_list(list) };
        cm().kick();
    }

    /// The port with GID `g` (an IPv4-mapped address or its IPv6 one).
    pub(crate) fn port_with(&self, g: &Gid) -> Option<usize> {
        self.ports.iter().position(|p| p.has(g))
    }
}

/// An event for `id` of type `ty` with `status`.
pub(crate) fn event_for(id: *mut RdmaCmId, ty: c_int, status: c_int) -> Box<EventBox> {
    Box::new(EventBox {
        ev: RdmaCmEvent {
            id,
            listen_id: std::ptr::null_mut(),
            event: ty,
            status,
            param: RdmaCmEventParam {
                conn: RdmaConnParam {
                    private_data: std::ptr::null(),
                    private_data_len: 0,
                    responder_resources: 0,
                    initiator_depth: 0,
                    flow_control: 0,
                    retry_count: 0,
                    rnr_retry_count: 0,
                    srq: 0,
                    qp_num: 0,
                },
            },
        },
        private: [0; PRIVATE_MAX],
    })
}

/// Sets the event's connection private data to `data`.
fn with_private(mut b: Box<EventBox>, data: &[u8]) -> Box<EventBox> {
    let n = data.len().min(PRIVATE_MAX);
    b.private[..n].copy_from_slice(&data[..n]);
    let data = b.private.as_ptr().cast();
    // Writing a union field is safe: the connection member is the one
    // the program reads.
    b.ev.param.conn.private_data = data;
    b.ev.param.conn.private_data_len = n as u8;
    b
}

/// Queues `ev` on `id`'s channel.
pub(crate) fn deliver(id: *mut RdmaCmId, ev: Box<EventBox>) {
    // SAFETY: a live ID of ours.
    let ch = unsafe { (*id).channel };
    // SAFETY: the channel of a live ID.
    match unsafe { channel::of(ch) } {
        Some(c) => c.push(ev),
        None => log::warn!("rdmacm: an event for an ID with no channel dropped"),
    }
}

/// The CM thread: waits for MADs and timers and acts on them.
fn run() {
    let cm = loop {
        if let Some(cm) = CM.get() {
            break cm;
        }
        std::thread::yield_now();
    };
    loop {
        let (mut fds, timeout) = {
            let st = cm.lock();
            let mut fds = vec![libc::pollfd {
                fd: cm.wake,
                events: libc::POLLIN,
                revents: 0,
            }];
            fds.extend(st.ports.iter().map(|p| libc::pollfd {
                fd: p.fd(),
                events: libc::POLLIN,
                revents: 0,
            }));
            let now = cm.now();
            let next = st
                .ports
                .iter()
                .filter_map(|p| p.manager.next_deadline())
                .min();
            let ms = next.map_or(-1, |d| {
                (d.saturating_sub(now) / 1_000_000 + 1).min(60_000) as c_int
            });
            (fds, ms)
        };
        // SAFETY: `fds` is a valid array of its length.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, timeout) };
        if fds[0].revents != 0 {
            let mut n = 0u64;
            // SAFETY: reads our eventfd (non-blocking).
            unsafe { libc::read(cm.wake, (&mut n as *mut u64).cast(), 8) };
        }
        let mut st = cm.lock();
        let now = cm.now();
        if EXITING.load(Ordering::Acquire) {
            end_all(cm, &mut st);
            EXITED.store(true, Ordering::Release);
            return;
        }
        for i in 0..st.ports.len() {
            let mut events = st.ports[i].receive(now);
            let (ev, out) = st.ports[i].manager.poll(now);
            for o in &out {
                st.ports[i].send(o);
            }
            events.extend(ev);
            for e in events {
                handle(&mut st, i, e);
            }
        }
    }
}

/// How long a program's exit waits at most for its last MADs to leave
/// and its DREQs to be answered.
const EXIT_GRACE: Duration = Duration::from_secs(1);
/// How often a going program's farewells (DREQs unanswered, DREPs of
/// connections in TimeWait) are sent again meanwhile.
const EXIT_RESEND: Duration = Duration::from_millis(100);
/// How many times they are sent again at least (a DREP has no answer
/// that would say it arrived).
const EXIT_REPEATS: u32 = 2;

/// Set at `exit`: the CM thread ends every connection and stops.
static EXITING: AtomicBool = AtomicBool::new(false);
/// Set by the CM thread once its last MADs are sent.
static EXITED: AtomicBool = AtomicBool::new(false);

/// At `exit`: what the kernel does when a program's file closes. The CM
/// thread disconnects each connection still up and rejects each request
/// not answered, so that no peer waits on a program that is gone, and
/// waits until the NICs have sent them; `exit` waits for that, at most
/// [`EXIT_GRACE`]. The work is the thread's: by the time `exit` calls
/// this, the exiting thread's thread-locals are gone, and the verbs use
/// some.
extern "C" fn at_exit() {
    let Some(cm) = CM.get() else { return };
    EXITING.store(true, Ordering::Release);
    cm.kick();
    let until = Instant::now() + EXIT_GRACE + EXIT_RESEND;
    while !EXITED.load(Ordering::Acquire) && Instant::now() < until {
        // SAFETY: sleeps; touches no memory.
        unsafe { libc::usleep(1000) };
    }
}

/// The CM thread's part of [`at_exit`]. Its farewells
/// (`Manager::farewells`) are sent again every [`EXIT_RESEND`], at least
/// [`EXIT_REPEATS`] times and until each DREQ is answered: one lost
/// would leave its peer connected to nobody.
fn end_all(cm: &Cm, st: &mut State) {
    let now = cm.now();
    for s in st.ids.values() {
        s.leave(&mut st.ports, now);
    }
    let until = Instant::now() + EXIT_GRACE;
    let mut repeats_left = EXIT_REPEATS;
    let mut next = Instant::now();
    loop {
        let now = cm.now();
        for p in &mut st.ports {
            // Events are for a program that is going: only the answers
            // (a DREP ends its DREQ) count.
            let _ = p.receive(now);
        }
        if Instant::now() >= next {
            next += EXIT_RESEND;
            let mut any = false;
            for p in &mut st.ports {
                for o in p.manager.farewells() {
                    p.send(&o);
                    any = true;
                }
            }
            repeats_left = if any {
                repeats_left.saturating_sub(1)
            } else {
                0
            };
        }
        let waiting = st
            .ports
            .iter()
            .any(|p| !p.all_sent() || p.manager.disconnecting() > 0);
        if (!waiting && repeats_left == 0) || Instant::now() >= until {
            return;
        }
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// A random 24-bit PSN.
pub(crate) fn random_psn() -> u32 {
    let mut b = [0u8; 4];
    // SAFETY: fills 4 bytes.
    unsafe { libc::getrandom(b.as_mut_ptr().cast(), 4, 0) };
    u32::from_ne_bytes(b) & 0xff_ffff
}

/// The ID of port `port`'s communication `comm`.
fn id_of(st: &State, port: usize, comm: u32) -> Option<*mut RdmaCmId> {
    st.conns.get(&(port, comm)).map(|&p| p as *mut RdmaCmId)
}

/// What port `port`'s manager said.
fn handle(st: &mut State, port: usize, e: Event) {
    match e {
        Event::Req {
            id: comm,
            from,
            req,
        } => on_req(st, port, comm, from, req),
        Event::Rep { id: comm, rep } => {
            let Some(id) = id_of(st, port, comm) else {
                return;
            };
            on_rep(st, port, comm, id, rep);
        }
        Event::Established { id: comm } => {
            let Some(id) = id_of(st, port, comm) else {
                return;
            };
            if let Some(s) = st.ids.get_mut(&(id as usize)) {
                s.phase = Phase::Connected;
            }
            deliver(id, event_for(id, event::ESTABLISHED, 0));
        }
        Event::Rejected { id: comm, rej } => {
            let Some(id) = id_of(st, port, comm) else {
                return;
            };
            st.conns.remove(&(port, comm));
            on_rejected(st, id, &rej);
        }
        Event::Timeout { id: comm } => {
            let Some(id) = id_of(st, port, comm) else {
                return;
            };
            st.conns.remove(&(port, comm));
            if let Some(s) = st.ids.get_mut(&(id as usize)) {
                s.phase = Phase::Idle;
                s.comm_id = None;
            }
            deliver(id, event_for(id, event::UNREACHABLE, -libc::ETIMEDOUT));
        }
        Event::Disconnect {
            id: comm,
            private_data,
        } => {
            let Some(id) = id_of(st, port, comm) else {
                return;
            };
            to_error(id);
            if let Some(s) = st.ids.get_mut(&(id as usize)) {
                s.phase = Phase::Disconnected;
            }
            deliver(
                id,
                with_private(event_for(id, event::DISCONNECTED, 0), &private_data),
            );
        }
        Event::Disconnected { id: comm } => {
            let Some(id) = id_of(st, port, comm) else {
                return;
            };
            if let Some(s) = st.ids.get_mut(&(id as usize)) {
                s.phase = Phase::Disconnected;
            }
            deliver(id, event_for(id, event::DISCONNECTED, 0));
        }
        Event::TimeWaitExit { id: comm } => {
            if let Some(id) = id_of(st, port, comm) {
                st.conns.remove(&(port, comm));
                if let Some(s) = st.ids.get_mut(&(id as usize)) {
                    s.comm_id = None;
                }
                deliver(id, event_for(id, event::TIMEWAIT_EXIT, 0));
            }
        }
        Event::SidrReq {
            id: comm,
            from,
            req,
        } => on_sidr_req(st, port, comm, from, req),
        Event::SidrRep { id: comm, rep } => {
            let Some(id) = id_of(st, port, comm) else {
                return;
            };
            st.conns.remove(&(port, comm));
            let dgid = st
                .ids
                .get(&(id as usize))
                .map(|s| s.path.dgid.raw)
                .unwrap_or_default();
            if let Some(s) = st.ids.get_mut(&(id as usize)) {
                s.comm_id = None;
                s.phase = if rep.status == rnic_cm::sidr::status::SUCCESS {
                    Phase::Connected
                } else {
                    Phase::Idle
                };
            }
            if rep.status != rnic_cm::sidr::status::SUCCESS {
                // As the kernel reports a SIDR REP that is no: unreachable,
                // the status its SIDR status.
                deliver(
                    id,
                    event_for(id, event::UNREACHABLE, c_int::from(rep.status)),
                );
                return;
            }
            let mut ev = event_for(id, event::ESTABLISHED, 0);
            set_ud(&mut ev, &rep.private_data, dgid, rep.qpn, rep.qkey);
            deliver(id, ev);
        }
    }
}

/// Moves `id`'s QP, if any, to the error state: its work flushes.
pub(crate) fn to_error(id: *mut RdmaCmId) {
    // SAFETY: a live ID.
    let qp = unsafe { (*id).qp };
    if qp.is_null() {
        return;
    }
    let mut a = IbvQpAttr {
        qp_state: 6,
        ..IbvQpAttr::default()
    };
    // SAFETY: a live QP.
    unsafe { verbs::ibv_modify_qp(qp, &mut a, 1) };
}

fn on_rejected(st: &mut State, id: *mut RdmaCmId, rej: &RejRepr) {
    if let Some(s) = st.ids.get_mut(&(id as usize)) {
        s.phase = Phase::Idle;
        s.comm_id = None;
    }
    let ev = with_private(
        event_for(id, event::REJECTED, c_int::from(rej.reason)),
        &rej.private_data,
    );
    deliver(id, ev);
}

/// A connection request for a listener: a new ID, and the event.
fn on_req(st: &mut State, port: usize, comm: u32, from: Gid, req: ReqRepr) {
    let Some(&listener) = st.listeners.get(&(port, req.service_id)) else {
        // The listener went between the manager's check and here.
        let p = &mut st.ports[port];
        if let Ok(out) = p
            .manager
            .reject(comm, rnic_cm::rej::reason::INVALID_SERVICE_ID, &[])
        {
            p.send(&out);
        }
        return;
    };
    let listener = listener as *mut RdmaCmId;
    let hdr = CmaHdr::parse(&req.private_data).ok();
    let child = crate::id::new_id(
        // SAFETY: a live listening ID.
        unsafe { (*listener).channel },
        // SAFETY: as above.
        unsafe { (*listener).context },
        // SAFETY: as above.
        unsafe { (*listener).ps },
    );
    let p = &st.ports[port];
    // SAFETY: the new ID, ours alone until the event is delivered.
    unsafe {
        let c = &mut *child;
        c.verbs = p.ctx;
        // The device's PD, as librdmacm gives every ID on a device.
        c.pd = p.pd;
        c.port_num = 1;
        // SAFETY: the listener's source address, as bound.
        c.route.addr.src = (*listener).route.addr.src;
        if let Some(h) = hdr {
            crate::id::set_addr(&mut c.route.addr.src, h.ip_version, &h.dst_addr, None);
            crate::id::set_addr(
                &mut c.route.addr.dst,
                h.ip_version,
                &h.src_addr,
                Some(h.src_port),
            );
        }
        c.route.addr.ibaddr.sgid.raw = p.sgid_for(&from);
        c.route.addr.ibaddr.dgid.raw = from;
        c.route.addr.ibaddr.pkey = 0xffff;
    }
    let mut path = Box::new(crate::id::path_record(p, from));
    path.mtu = path.mtu.min(req.path_mtu);
    // SAFETY: as above.
    unsafe {
        (*child).route.path_rec = &mut *path;
        (*child).route.num_paths = 1;
    }
    let user_private = &req.private_data[cma::HEADER_LEN..];
    let mut ev = with_private(event_for(child, event::CONNECT_REQUEST, 0), user_private);
    ev.ev.listen_id = listener;
    // SAFETY: the union's connection member is the one set.
    unsafe {
        let c = &mut ev.ev.param.conn;
        // From the listener's side, as the kernel reports them: it may
        // answer as many READs as the requester will have outstanding,
        // and have outstanding as many as the requester answers.
        c.responder_resources = req.initiator_depth;
        c.initiator_depth = req.responder_resources;
        c.flow_control = req.end_to_end_flow_control.into();
        c.retry_count = req.retry_count;
        c.rnr_retry_count = req.rnr_retry_count;
        c.srq = req.srq.into();
        c.qp_num = req.local_qpn;
    }
    st.ids.insert(
        child as usize,
        IdState {
            port: Some(port),
            phase: Phase::Requested,
            comm_id: Some(comm),
            psn: random_psn(),
            req: Some(req),
            path,
            ..IdState::default()
        },
    );
    st.conns.insert((port, comm), child as usize);
    deliver(child, ev);
}

/// Sets the event's datagram parameters: private data, the address of
/// the other side's QP (port `dgid`), its number and Q_Key.
fn set_ud(b: &mut EventBox, data: &[u8], dgid: Gid, qpn: u32, qkey: u32) {
    let n = data.len().min(PRIVATE_MAX);
    b.private[..n].copy_from_slice(&data[..n]);
    let mut ah_attr = IbvAhAttr {
        is_global: 1,
        port_num: 1,
        ..IbvAhAttr::default()
    };
    ah_attr.grh.dgid.raw = dgid;
    ah_attr.grh.sgid_index = crate::port::sgid_index(&dgid);
    ah_attr.grh.hop_limit = 64;
    b.ev.param.ud = RdmaUdParam {
        private_data: b.private.as_ptr().cast(),
        private_data_len: n as u8,
        ah_attr,
        qp_num: qpn,
        qkey,
    };
}

/// A SIDR REQ for a UD listener: a new ID, and the connection request.
fn on_sidr_req(st: &mut State, port: usize, comm: u32, from: Gid, req: SidrReqRepr) {
    let Some(&listener) = st.listeners.get(&(port, req.service_id)) else {
        let p = &mut st.ports[port];
        if let Ok(out) = p
            .manager
            .sidr_reply(comm, rnic_cm::sidr::status::UNSUPPORTED, 0, 0, &[])
        {
            p.send(&out);
        }
        return;
    };
    let listener = listener as *mut RdmaCmId;
    let hdr = CmaHdr::parse(&req.private_data).ok();
    // SAFETY: a live listening ID.
    let child =
        unsafe { crate::id::new_id((*listener).channel, (*listener).context, (*listener).ps) };
    let p = &st.ports[port];
    // SAFETY: the new ID, ours alone until the event is delivered.
    unsafe {
        let c = &mut *child;
        c.verbs = p.ctx;
        // The device's PD, as librdmacm gives every ID on a device.
        c.pd = p.pd;
        c.port_num = 1;
        c.qp_type = crate::id::QPT_UD;
        c.route.addr.src = (*listener).route.addr.src;
        if let Some(h) = hdr {
            crate::id::set_addr(&mut c.route.addr.src, h.ip_version, &h.dst_addr, None);
            crate::id::set_addr(
                &mut c.route.addr.dst,
                h.ip_version,
                &h.src_addr,
                Some(h.src_port),
            );
        }
        c.route.addr.ibaddr.sgid.raw = p.sgid_for(&from);
        c.route.addr.ibaddr.dgid.raw = from;
        c.route.addr.ibaddr.pkey = 0xffff;
    }
    let mut path = Box::new(crate::id::path_record(p, from));
    // SAFETY: as above.
    unsafe {
        (*child).route.path_rec = &mut *path;
        (*child).route.num_paths = 1;
    }
    let mut ev = event_for(child, event::CONNECT_REQUEST, 0);
    ev.ev.listen_id = listener;
    // The requester's QP comes with its first datagram (ibv_create_ah_from_wc).
    set_ud(&mut ev, &req.private_data[cma::HEADER_LEN..], from, 0, 0);
    st.ids.insert(
        child as usize,
        IdState {
            port: Some(port),
            phase: Phase::Requested,
            comm_id: Some(comm),
            psn: random_psn(),
            path,
            ..IdState::default()
        },
    );
    deliver(child, ev);
}

/// The REP to our REQ: the QP goes to RTS, the RTU goes out, and the
/// program hears it is established.
fn on_rep(st: &mut State, port: usize, comm: u32, id: *mut RdmaCmId, rep: RepRepr) {
    let Some(s) = st.ids.get_mut(&(id as usize)) else {
        return;
    };
    let (resp, init) = s.resources;
    let remote = crate::id::Remote {
        qpn: rep.local_qpn,
        psn: rep.starting_psn,
        gid: s.path.dgid.raw,
        mtu: s.path.mtu,
        // Reads answered: ours, no more than the other side's depth.
        dest_rd_atomic: resp.min(rep.initiator_depth),
        rd_atomic: init.min(rep.responder_resources),
        rnr_retry: rep.rnr_retry_count,
        retry: 7,
    };
    s.remote = Some(remote);
    // SAFETY: a live ID.
    if unsafe { (*id).qp }.is_null() {
        // The program's own QP (rdma_init_qp_attr), then rdma_establish.
        s.phase = Phase::Responded;
        deliver(
            id,
            with_private(event_for(id, event::CONNECT_RESPONSE, 0), &rep.private_data),
        );
        return;
    }
    let ready = crate::id::qp_to_rts(id, &remote, s.psn);
    let p = &mut st.ports[port];
    if let Err(e) = ready {
        log::warn!("rdmacm: the QP did not come up on the REP: {e}");
        if let Ok(out) = p
            .manager
            .reject(comm, rnic_cm::rej::reason::NO_RESOURCES, &[])
        {
            p.send(&out);
        }
        st.conns.remove(&(port, comm));
        s.phase = Phase::Idle;
        deliver(id, event_for(id, event::CONNECT_ERROR, -e));
        return;
    }
    match p.manager.ready(comm, &[]) {
        Ok(out) => p.send(&out),
        Err(e) => log::warn!("rdmacm: RTU: {e:?}"),
    }
    s.phase = Phase::Connected;
    cm().kick();
    deliver(
        id,
        with_private(event_for(id, event::ESTABLISHED, 0), &rep.private_data),
    );
}

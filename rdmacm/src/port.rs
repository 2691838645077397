//! A device port's communication manager: what the kernel's `ib_cm` does
//! for a port, here in the process that uses the device. It owns the
//! device's GSI QP (through the drop-in libibverbs' `rnic_create_gsi_qp`),
//! a CQ with a completion channel, buffers for MADs, and an
//! `rnic_cm::Manager`; it sends the manager's MADs to QP1 of their port
//! and hands it what QP1 receives, with the sender's GID from the GRH.

use std::collections::HashMap;
use std::ffi::c_int;

use rnic_cm::mad::MadHdr;
use rnic_cm::manager::{Event, Gid, Manager, Out};
use rnic_cm::MAD_LEN;
use rnic_verbs_abi::{
    IbvAh, IbvAhAttr, IbvCompChannel, IbvContext, IbvCq, IbvDeviceAttr, IbvGid, IbvMr, IbvPd,
    IbvPortAttr, IbvQp, IbvQpAttr, IbvQpCap, IbvQpInitAttr, IbvRecvWr, IbvSendWr, IbvSge, IbvWc,
    WrUd, WrUnion,
};

use rnic_verbs::GSI_QKEY;

use crate::verbs;

/// Receive buffers posted on the GSI QP.
const RECVS: usize = 64;
/// Send buffers, used in turn.
const SENDS: usize = 64;
/// A receive buffer: the 40-byte GRH, then the MAD.
const RECV_LEN: usize = 40 + MAD_LEN;
/// `IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_QKEY`.
const INIT_MASK: c_int = 1 | 1 << 4 | 1 << 6;
/// `IBV_WC_RECV`.
const WC_RECV: c_int = 128;
/// `IBV_WR_SEND`.
const WR_SEND: c_int = 2;

/// One device port's CM.
pub(crate) struct Port {
    /// The context librdmacm opened on the device (IDs' `verbs`).
    pub ctx: *mut IbvContext,
    /// The port's IPv4-mapped GID (index 0): its IPv4 address.
    pub gid: Gid,
    /// Its link-local IPv6 GID (index 1): its IPv6 address.
    pub gid6: Gid,
    /// The port's active MTU (`enum ibv_mtu`).
    pub mtu: u8,
    /// READs and atomics a QP of the device answers at once, and has
    /// outstanding, at most.
    pub max_rd_atomic: (u8, u8),
    /// The PD for the GSI QP and for QPs made without one.
    pub pd: *mut IbvPd,
    channel: *mut IbvCompChannel,
    cq: *mut IbvCq,
    qp: *mut IbvQp,
    mr: *mut IbvMr,
    buf: Vec<u8>,
    next_send: usize,
    /// MADs posted, and those whose send completed.
    posted: u64,
    sent: u64,
    ahs: HashMap<Gid, *mut IbvAh>,
    /// The protocol.
    pub manager: Manager,
}

// SAFETY: the pointers are verbs objects of the drop-in library, which
// any thread may use; the port is only reached under the CM's lock.
unsafe impl Send for Port {}

/// `errno` as an error.
fn last(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

/// Whether `g` is an IPv4-mapped GID (`::ffff:a.b.c.d`).
pub(crate) fn is_ipv4(g: &Gid) -> bool {
    g[..10] == [0; 10] && g[10..12] == [0xff, 0xff]
}

/// The index of the port's GID that talks to `dgid`: 0 (IPv4) for an
/// IPv4-mapped one, 1 (the link-local IPv6 GID) for any other.
pub(crate) fn sgid_index(dgid: &Gid) -> u8 {
    if is_ipv4(dgid) {
        0
    } else {
        1
    }
}

impl Port {
    /// Whether `g` is one of the port's GIDs.
    pub(crate) fn has(&self, g: &Gid) -> bool {
        *g == self.gid || *g == self.gid6
    }

    /// The port's GID that talks to `dgid` (of its family).
    pub(crate) fn sgid_for(&self, dgid: &Gid) -> Gid {
        if is_ipv4(dgid) {
            self.gid
        } else {
            self.gid6
        }
    }

    /// Brings up the CM of port 1 of the device opened as `ctx`.
    pub(crate) fn open(ctx: *mut IbvContext, seed: u32) -> Result<Port, String> {
        let mut gid = IbvGid::default();
        // SAFETY: a live context, and a GID to write.
        if unsafe { verbs::ibv_query_gid(ctx, 1, 0, &mut gid) } != 0 {
            return Err(last("ibv_query_gid"));
        }
        let mut gid6 = IbvGid::default();
        // SAFETY: as above.
        if unsafe { verbs::ibv_query_gid(ctx, 1, 1, &mut gid6) } != 0 {
            return Err(last("ibv_query_gid"));
        }
        let mut pa = IbvPortAttr::default();
        // SAFETY: as above.
        if unsafe { verbs::ibv_query_port(ctx, 1, &mut pa) } != 0 {
            return Err(last("ibv_query_port"));
        }
        // SAFETY: all-zero is a valid `struct ibv_device_attr` to fill.
        let mut da: IbvDeviceAttr = unsafe { std::mem::zeroed() };
        // SAFETY: a live context and an attribute structure to write.
        if unsafe { verbs::ibv_query_device(ctx, &mut da) } != 0 {
            return Err(last("ibv_query_device"));
        }
        let clamp = |n: c_int| n.clamp(0, 255) as u8;
        // SAFETY: a live context.
        let pd = unsafe { verbs::ibv_alloc_pd(ctx) };
        // SAFETY: as above.
        let channel = unsafe { verbs::ibv_create_comp_channel(ctx) };
        if pd.is_null() || channel.is_null() {
            return Err(last("the GSI QP's PD and channel"));
        }
        // SAFETY: a live context and channel.
        let cq = unsafe {
            verbs::ibv_create_cq(
                ctx,
                (RECVS + SENDS) as c_int,
                std::ptr::null_mut(),
                channel,
                0,
            )
        };
        if cq.is_null() {
            return Err(last("the GSI QP's CQ"));
        }
        let mut init = IbvQpInitAttr {
            qp_context: std::ptr::null_mut(),
            send_cq: cq,
            recv_cq: cq,
            srq: std::ptr::null_mut(),
            cap: IbvQpCap {
                max_send_wr: SENDS as u32,
                max_recv_wr: RECVS as u32,
                max_send_sge: 1,
                max_recv_sge: 1,
                max_inline_data: 0,
            },
            qp_type: 4,
            sq_sig_all: 1,
        };
        let qp = verbs::create_gsi_qp(pd, &mut init);
        if qp.is_null() {
            return Err(last("the GSI QP"));
        }
        let mut a = IbvQpAttr {
            qp_state: 1,
            qkey: GSI_QKEY,
            ..IbvQpAttr::default()
        };
        // SAFETY: a live QP and attributes; INIT, RTR, RTS.
        let up = unsafe {
            verbs::ibv_modify_qp(qp, &mut a, INIT_MASK) == 0
                && {
                    a.qp_state = 2;
                    verbs::ibv_modify_qp(qp, &mut a, 1) == 0
                }
                && {
                    a.qp_state = 3;
                    a.sq_psn = 0;
                    verbs::ibv_modify_qp(qp, &mut a, 1 | 1 << 16) == 0
                }
        };
        if !up {
            return Err(last("the GSI QP to RTS"));
        }
        let mut buf = vec![0u8; (RECVS + SENDS) * RECV_LEN];
        // SAFETY: the buffer lives as long as the port (never reallocated).
        let mr = unsafe {
            verbs::ibv_reg_mr(
                pd,
                buf.as_mut_ptr().cast(),
                buf.len(),
                1, /* LOCAL_WRITE */
            )
        };
        if mr.is_null() {
            return Err(last("the GSI QP's buffers"));
        }
        let guid = u64::from_be_bytes(gid.raw[8..].try_into().expect("8 bytes"));
        let mut p = Port {
            ctx,
            gid: gid.raw,
            gid6: gid6.raw,
            mtu: pa.active_mtu as u8,
            max_rd_atomic: (clamp(da.max_qp_rd_atom), clamp(da.max_qp_init_rd_atom)),
            pd,
            channel,
            cq,
            qp,
            mr,
            buf,
            next_send: 0,
            posted: 0,
            sent: 0,
            ahs: HashMap::new(),
            manager: Manager::new(guid, seed),
        };
        for i in 0..RECVS {
            p.post_recv(i)?;
        }
        // SAFETY: a live CQ.
        unsafe { verbs::req_notify_cq(cq, 0) };
        Ok(p)
    }

    /// The completion channel's fd, readable when MADs came.
    pub(crate) fn fd(&self) -> c_int {
        // SAFETY: a live channel.
        unsafe { (*self.channel).fd }
    }

    fn post_recv(&mut self, i: usize) -> Result<(), String> {
        let mut sge = IbvSge {
            addr: self.buf.as_ptr() as u64 + (i * RECV_LEN) as u64,
            length: RECV_LEN as u32,
            // SAFETY: a live MR.
            lkey: unsafe { (*self.mr).lkey },
        };
        let mut wr = IbvRecvWr {
            wr_id: i as u64,
            next: std::ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
        };
        // SAFETY: a live QP and a one-entry list into the MR.
        if unsafe { verbs::post_recv(self.qp, &mut wr) } != 0 {
            return Err(last("posting a GSI receive"));
        }
        Ok(())
    }

    /// Sends `out` to QP1 of its port.
    pub(crate) fn send(&mut self, out: &Out) {
        log::debug!(
            "rdmacm: MAD attribute {:#06x} to {:x?}",
            attribute(&out.mad),
            out.to
        );
        let ah = match self.ahs.get(&out.to) {
            Some(&ah) => ah,
            None => {
                let mut attr = IbvAhAttr {
                    is_global: 1,
                    port_num: 1,
                    ..IbvAhAttr::default()
                };
                attr.grh.dgid.raw = out.to;
                attr.grh.sgid_index = sgid_index(&out.to);
                attr.grh.hop_limit = 64;
                // SAFETY: a live PD and attributes.
                let ah = unsafe { verbs::ibv_create_ah(self.pd, &mut attr) };
                if ah.is_null() {
                    log::warn!(
                        "rdmacm: no address handle to {:x?}: {}",
                        out.to,
                        last("ibv_create_ah")
                    );
                    return;
                }
                self.ahs.insert(out.to, ah);
                ah
            }
        };
        let slot = RECVS + self.next_send;
        self.next_send = (self.next_send + 1) % SENDS;
        let at = slot * RECV_LEN;
        self.buf[at..at + MAD_LEN].copy_from_slice(&out.mad);
        let mut sge = IbvSge {
            addr: self.buf.as_ptr() as u64 + at as u64,
            length: MAD_LEN as u32,
            // SAFETY: a live MR.
            lkey: unsafe { (*self.mr).lkey },
        };
        let mut wr = IbvSendWr {
            wr_id: slot as u64,
            next: std::ptr::null_mut(),
            sg_list: &mut sge,
            num_sge: 1,
            opcode: WR_SEND,
            send_flags: 0,
            imm_data: 0,
            wr: WrUnion {
                ud: WrUd {
                    ah: ah.cast(),
                    remote_qpn: 1,
                    remote_qkey: GSI_QKEY,
                },
            },
            qp_type: 0,
            // SAFETY: all-zero is the empty extension.
            ext: unsafe { std::mem::zeroed() },
        };
        // SAFETY: a live QP and a one-entry list into the MR.
        if unsafe { verbs::post_send(self.qp, &mut wr) } != 0 {
            log::warn!("rdmacm: {}", last("sending a MAD"));
        } else {
            self.posted += 1;
        }
    }

    /// Whether every MAD posted is on the wire (its send completed).
    pub(crate) fn all_sent(&self) -> bool {
        self.sent == self.posted
    }

    /// Takes what the GSI QP completed: each MAD received goes to the
    /// manager; returns its events, and sends its answers.
    pub(crate) fn receive(&mut self, now: u64) -> Vec<Event> {
        let mut events = Vec::new();
        let mut cq = std::ptr::null_mut();
        let mut cq_ctx = std::ptr::null_mut();
        let mut pfd = libc::pollfd {
            fd: self.fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd, no wait.
        if unsafe { libc::poll(&mut pfd, 1, 0) } == 1 {
            // SAFETY: a live channel with an event waiting.
            if unsafe { verbs::ibv_get_cq_event(self.channel, &mut cq, &mut cq_ctx) } == 0 {
                // SAFETY: the CQ the event named.
                unsafe { verbs::ibv_ack_cq_events(cq, 1) };
            }
            // SAFETY: a live CQ.
            unsafe { verbs::req_notify_cq(self.cq, 0) };
        }
        let mut wc = [IbvWc::default(); 16];
        loop {
            // SAFETY: a live CQ and room for 16.
            let n = unsafe { verbs::poll_cq(self.cq, wc.len() as c_int, wc.as_mut_ptr()) };
            if n <= 0 {
                break;
            }
            for w in &wc[..n as usize] {
                if w.opcode != WC_RECV {
                    self.sent += 1;
                    continue;
                }
                let i = w.wr_id as usize;
                if w.status == 0 && i < RECVS {
                    let at = i * RECV_LEN;
                    let b = &self.buf[at..at + RECV_LEN];
                    let from = sender(b);
                    let mad = b[40..].to_vec();
                    log::debug!(
                        "rdmacm: MAD attribute {:#06x} from {from:x?}",
                        attribute(&mad)
                    );
                    let (ev, out) = self.manager.receive(now, from, &mad);
                    events.extend(ev);
                    for o in &out {
                        self.send(o);
                    }
                }
                if i < RECVS {
                    if let Err(e) = self.post_recv(i) {
                        log::warn!("rdmacm: {e}");
                    }
                }
            }
        }
        events
    }
}

/// A MAD's attribute ID (which CM message: 0x0012 is a REJ), for the
/// log; 0 for one too short to have a header.
fn attribute(mad: &[u8]) -> u16 {
    MadHdr::parse(mad).map_or(0, |h| h.attr_id)
}

/// The sender's GID from a received GRH: the IPv4-mapped address of the
/// IPv4 header in its last 20 bytes, or the IPv6 header's source.
fn sender(grh: &[u8]) -> Gid {
    let mut g = [0u8; 16];
    if grh[20] >> 4 == 4 {
        g[10..12].fill(0xff);
        g[12..].copy_from_slice(&grh[20 + 12..20 + 16]);
    } else {
        g.copy_from_slice(&grh[8..24]);
    }
    g
}

//! Port 1: the NIC's Ethernet side.
//!
//! Sending: a QP's [`Path`] (from its address vector: source and
//! destination IP from the GIDs, the destination MAC given or resolved,
//! the UDP source port from the flow label or the QP numbers) turns a
//! transport packet into a frame in the port's transmit batch.
//!
//! Receiving: [`receive`] classifies each frame, drops (and counts) what
//! is malformed, fails its ICRC, has another BTH version or P_Key, or is
//! not for this port, answers ARP and neighbour solicitations for the
//! port's GIDs, learns the neighbours that answer its own, and hands
//! RoCEv2 packets to the responder (requests) or the completer (responses)
//! of their QP.
//!
//! Neighbour resolution: a QP whose address vector has no destination MAC
//! waits, sending an ARP request (IPv4-mapped GID) or a neighbour
//! solicitation (IPv6 GID) every [`RESOLVE_RETRY_NS`], until the neighbour
//! answers; a destination that is one of the port's own GIDs resolves to
//! the port's own MAC at once.

use std::collections::HashMap;

use rnic_hw_regs::counters::counter;
use rnic_verbs::{QpState, QpType};

use crate::counters::Counters;
use crate::net::{Frame, Wire};
use crate::objects::Qp;
use crate::state::{Dev, State};
use crate::transport::{completer, responder, uc, ud};
use crate::wire::arp::{ArpOperation, ArpRepr};
use crate::wire::bth::DEFAULT_PKEY;
use crate::wire::ethernet::{EthernetAddress, EthernetFrame, EthernetRepr};
use crate::wire::frame::{self, FrameRepr, IpRepr, Received};
use crate::wire::icmpv6::{na_flags, NdiscRepr};
use crate::wire::ip::IpAddress;
use crate::wire::ipv4::{protocol, Ipv4Repr};
use crate::wire::ipv6::{Ipv6Address, Ipv6Repr};
use crate::wire::opcode::{self, Op, Transport};
use crate::wire::roce::RoceRepr;
use crate::wire::udp::{roce_src_port, UdpChecksum, UdpRepr};
use crate::wire::{Error, ROCE_V2_PORT};

/// How often a QP waiting for a neighbour asks again.
pub(crate) const RESOLVE_RETRY_NS: u64 = 1_000_000;

/// Most neighbours the cache holds: a flood of requests from made-up
/// addresses must not grow it without end.
const MAX_NEIGHBOURS: usize = 1024;

/// The IP TTL or hop limit used when the address vector gives 0.
const DEFAULT_HOP_LIMIT: u8 = 64;

/// Where a QP's packets go, from its address vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Path {
    pub src_ip: IpAddress,
    pub dst_ip: IpAddress,
    /// Destination MAC: given by the address vector, or resolved.
    pub dmac: Option<EthernetAddress>,
    pub src_port: u16,
    pub traffic_class: u8,
    pub hop_limit: u8,
    pub flow_label: u32,
}

impl Path {
    /// The path of a QP `qpn` connected to `dest_qpn` through address
    /// vector fields; `None` if the source GID is missing or the two GIDs
    /// are of different IP versions.
    pub(crate) fn new(
        sgid: [u8; 16],
        av: &rnic_hw_regs::cmd::AddressVector,
        qpn: u32,
        dest_qpn: u32,
    ) -> Option<Path> {
        let src_ip = IpAddress::from_gid(sgid);
        let dst_ip = IpAddress::from_gid(av.dgid);
        if matches!(src_ip, IpAddress::V4(_)) != matches!(dst_ip, IpAddress::V4(_)) {
            return None;
        }
        let dmac = EthernetAddress(av.dmac);
        let flow_label = av.flow_label.to_ne() & 0xf_ffff;
        Some(Path {
            src_ip,
            dst_ip,
            dmac: (!dmac.is_zero()).then_some(dmac),
            src_port: roce_src_port(flow_label, qpn, dest_qpn),
            traffic_class: av.traffic_class,
            hop_limit: if av.hop_limit == 0 {
                DEFAULT_HOP_LIMIT
            } else {
                av.hop_limit
            },
            flow_label,
        })
    }

    /// The path of one UD send of QP `qpn`, from its datagram segment.
    pub(crate) fn of_datagram(
        sgid: [u8; 16],
        d: &rnic_hw_regs::wqe::DatagramSeg,
        qpn: u32,
    ) -> Option<Path> {
        let av = rnic_hw_regs::cmd::AddressVector {
            dgid: d.dgid,
            dmac: d.dmac,
            flow_label: d.flow_label,
            traffic_class: d.traffic_class,
            hop_limit: d.hop_limit,
            ..Default::default()
        };
        Path::new(sgid, &av, qpn, d.dest_qpn.to_ne() & 0xff_ffff)
    }
}

/// A neighbour cache entry.
#[derive(Debug, Clone, Copy)]
struct Neighbour {
    mac: Option<EthernetAddress>,
    /// When the last request went out.
    asked_ns: Option<u64>,
}

/// The port's state.
#[derive(Debug)]
pub(crate) struct Port {
    pub mac: EthernetAddress,
    /// Frames built while the device state was locked, sent once it is not.
    pub tx: Vec<Frame>,
    /// Received frames of the step being run (kept to reuse its buffer).
    pub rx: Vec<Frame>,
    /// Frames sent to the port's own MAC on a wire that would not bring
    /// them back: received at the next step, never put on the wire.
    pub hairpin: Vec<Frame>,
    /// Buffers of frames received and handled, reused for frames sent: on
    /// a loopback or a balanced link no frame allocates.
    pool: Vec<Frame>,
    pub counters: Counters,
    /// IPv4 identification of the next datagram.
    ident: u16,
    neighbours: HashMap<IpAddress, Neighbour>,
    /// QPs waiting for a neighbour.
    pub waiting: Vec<u32>,
    /// The wire's link was up at the last step.
    pub link_up: bool,
}

impl Port {
    pub(crate) fn new(mac: [u8; 6]) -> Self {
        Self {
            mac: EthernetAddress(mac),
            tx: Vec::new(),
            rx: Vec::new(),
            hairpin: Vec::new(),
            pool: Vec::new(),
            counters: Counters::default(),
            ident: 0,
            neighbours: HashMap::new(),
            waiting: Vec::new(),
            link_up: true,
        }
    }

    /// Back to the reset state (frames queued for the wire stay: they
    /// were already sent as far as the device is concerned).
    pub(crate) fn reset(&mut self) {
        self.counters = Counters::default();
        self.neighbours.clear();
        self.waiting.clear();
    }
}

impl Port {
    /// Moves the frames to send that are addressed to this port's own MAC
    /// into [`Port::hairpin`]: on a point-to-point wire they would reach
    /// the peer, not this NIC's own QPs.
    pub(crate) fn take_hairpin(&mut self) {
        let me = self.mac;
        // A stable partition in place: the frames kept move forward.
        let mut kept = 0;
        for i in 0..self.tx.len() {
            let to_me =
                EthernetFrame::new_checked(&self.tx[i][..]).is_ok_and(|e| e.dst_addr() == me);
            if to_me {
                let f = std::mem::take(&mut self.tx[i]);
                self.hairpin.push(f);
            } else {
                self.tx.swap(kept, i);
                kept += 1;
            }
        }
        self.tx.truncate(kept);
    }
}

/// Frame buffers kept for reuse at most.
const POOL: usize = 1024;
/// Room in a new frame buffer: a 4096-byte payload with every header.
pub(crate) const FRAME_ROOM: usize = 4096 + 128;

impl Port {
    /// Keeps the buffers of handled frames for frames to come; those it
    /// has no room for stay in `frames`.
    pub(crate) fn recycle(&mut self, frames: &mut Vec<Frame>) {
        let room = POOL.saturating_sub(self.pool.len());
        let keep = frames.len().min(room);
        self.pool.extend(frames.drain(..keep));
    }

    /// Takes from `wire` the buffers it is done with (a wire judges by
    /// the pool it is handed whether the NIC needs any, [`Wire::reclaim`]).
    pub(crate) fn reclaim(&mut self, wire: &mut dyn Wire) {
        wire.reclaim(&mut self.pool);
        self.pool.truncate(POOL);
    }

    /// A zeroed frame buffer of `len` bytes.
    fn buffer(&mut self, len: usize) -> Frame {
        // A new buffer has room for any frame, so that reusing it never
        // grows it: which buffers come back, ACKs or data, depends on
        // how the NICs' steps interleave.
        let mut f = self
            .pool
            .pop()
            .unwrap_or_else(|| Frame::with_capacity(len.max(FRAME_ROOM)));
        f.clear();
        f.resize(len, 0);
        f
    }
}

/// Whether `ip` is one of the port's valid GIDs' addresses.
pub(crate) fn is_local(dev: &Dev, ip: &IpAddress) -> bool {
    let gid = ip.to_gid();
    dev.gids.iter().any(|g| g.valid && g.gid == gid)
}

/// The destination MAC of `qp`'s path, resolving it if needed: `None`
/// while the neighbour has not answered (the QP is then on the waiting
/// list and asks again every [`RESOLVE_RETRY_NS`]).
pub(crate) fn resolve(qp: &mut Qp, dev: &mut Dev) -> Option<EthernetAddress> {
    let path = qp.path?;
    let mac = lookup(qp, dev, &path)?;
    if let Some(p) = qp.path.as_mut() {
        p.dmac = Some(mac);
    }
    Some(mac)
}

/// The destination MAC of `path` for `qp`: the path's own, the port's for
/// one of its GIDs, or the neighbour cache's; else `None`, and `qp` waits
/// for the neighbour as [`resolve`] says.
pub(crate) fn lookup(qp: &mut Qp, dev: &mut Dev, path: &Path) -> Option<EthernetAddress> {
    if let Some(m) = path.dmac {
        return Some(m);
    }
    let mac = if is_local(dev, &path.dst_ip) {
        Some(dev.port.mac)
    } else {
        dev.port.neighbours.get(&path.dst_ip).and_then(|n| n.mac)
    };
    if mac.is_some() {
        return mac;
    }
    let now = dev.now;
    let n = dev.port.neighbours.entry(path.dst_ip).or_insert(Neighbour {
        mac: None,
        asked_ns: None,
    });
    if n.asked_ns.map_or(true, |t| now >= t + RESOLVE_RETRY_NS) {
        n.asked_ns = Some(now);
        solicit(dev, path);
    }
    if !dev.port.waiting.contains(&qp.qpn) {
        dev.port.waiting.push(qp.qpn);
    }
    crate::transport::timers::arm_resolve(qp, dev, now + RESOLVE_RETRY_NS);
    None
}

/// Sends an ARP request or a neighbour solicitation for `path.dst_ip`.
fn solicit(dev: &mut Dev, path: &Path) {
    let me = dev.port.mac;
    let f = match (path.src_ip, path.dst_ip) {
        (IpAddress::V4(src), IpAddress::V4(dst)) => frame::arp_frame(
            me,
            EthernetAddress::BROADCAST,
            &ArpRepr {
                operation: ArpOperation::Request,
                sender_mac: me,
                sender_ip: src,
                target_mac: EthernetAddress::default(),
                target_ip: dst,
            },
        ),
        (IpAddress::V6(src), IpAddress::V6(dst)) => {
            let group = dst.solicited_node();
            frame::ndisc_frame(
                me,
                frame::ipv6_multicast_mac(&group),
                src,
                group,
                &NdiscRepr::NeighborSolicit {
                    target: dst,
                    source_lladdr: Some(me),
                },
            )
        }
        _ => return,
    };
    log::debug!("port: asking for {} from {}", path.dst_ip, path.src_ip);
    dev.port.counters.add(counter::NEIGH_REQUESTS_SENT, 1);
    push(dev, f);
}

/// Queues a frame for the wire, counting it.
fn push(dev: &mut Dev, f: Frame) {
    dev.port.counters.add(counter::TX_FRAMES, 1);
    dev.port.counters.add(counter::TX_BYTES, f.len() as u64);
    dev.port.tx.push(f);
}

/// Learns that `ip` is at `mac`; QPs waiting for a neighbour run again.
/// An address not in the cache is added only if `create` (a request to
/// this port, whose sender will be answered) and the cache has room; an
/// unsolicited advertisement only updates what is there.
fn learn(st: &mut State, ip: IpAddress, mac: EthernetAddress, create: bool) {
    if mac.is_multicast() || mac.is_zero() {
        return;
    }
    let cache = &mut st.dev.port.neighbours;
    if !cache.contains_key(&ip) && (!create || cache.len() >= MAX_NEIGHBOURS) {
        return;
    }
    let n = cache.entry(ip).or_insert(Neighbour {
        mac: None,
        asked_ns: None,
    });
    if n.mac == Some(mac) {
        return;
    }
    n.mac = Some(mac);
    log::debug!("port: {ip} is at {mac}");
    for qpn in std::mem::take(&mut st.dev.port.waiting) {
        st.kick(qpn);
    }
}

/// Builds the frame of transport packet `roce` on `qp`'s path to MAC
/// `dmac` and queues it; `fill` writes the payload (`roce.payload_len`
/// bytes). A `fill` error drops the frame and is returned.
pub(crate) fn send<E>(
    qp: &mut Qp,
    dev: &mut Dev,
    dmac: EthernetAddress,
    roce: RoceRepr,
    fill: impl FnOnce(&mut Qp, &mut Dev, &mut [u8]) -> Result<(), E>,
) -> Result<(), E> {
    let Some(path) = qp.path else {
        return Ok(());
    };
    send_on(qp, dev, &path, dmac, roce, fill)
}

/// [`send`] on a given path (a UD send's own).
pub(crate) fn send_on<E>(
    qp: &mut Qp,
    dev: &mut Dev,
    path: &Path,
    dmac: EthernetAddress,
    roce: RoceRepr,
    fill: impl FnOnce(&mut Qp, &mut Dev, &mut [u8]) -> Result<(), E>,
) -> Result<(), E> {
    let eth_of = |ethertype| EthernetRepr {
        src_addr: dev.port.mac,
        dst_addr: dmac,
        vlan: None,
        ethertype,
    };
    let ip = match (path.src_ip, path.dst_ip) {
        (IpAddress::V4(src_addr), IpAddress::V4(dst_addr)) => {
            dev.port.ident = dev.port.ident.wrapping_add(1);
            IpRepr::V4(Ipv4Repr {
                src_addr,
                dst_addr,
                tos: path.traffic_class,
                ident: dev.port.ident,
                dont_frag: true,
                ttl: path.hop_limit,
                protocol: protocol::UDP,
                payload_len: 0,
            })
        }
        (IpAddress::V6(src_addr), IpAddress::V6(dst_addr)) => IpRepr::V6(Ipv6Repr {
            src_addr,
            dst_addr,
            traffic_class: path.traffic_class,
            flow_label: path.flow_label,
            next_header: protocol::UDP,
            hop_limit: path.hop_limit,
            payload_len: 0,
        }),
        _ => return Ok(()),
    };
    // Over IPv4 the UDP checksum is left 0, as rxe and RoCE NICs do (the
    // ICRC covers the packet); IPv6 requires one (RFC 8200 8.1; the
    // zero-checksum exception of RFC 6935 is for tunnels that agree on
    // it), and receivers such as Wireshark treat a zero as an error.
    let checksum = match ip {
        IpRepr::V4(_) => UdpChecksum::None,
        IpRepr::V6(_) => UdpChecksum::Computed,
    };
    let repr = FrameRepr {
        eth: eth_of(ip.ethertype()),
        ip,
        udp: UdpRepr {
            src_port: path.src_port,
            dst_port: ROCE_V2_PORT,
            payload_len: 0,
            checksum,
        },
        roce,
    };
    let mut buf = dev.port.buffer(repr.buffer_len());
    let mut result = Ok(());
    repr.emit(&mut buf, |p| result = fill(qp, dev, p));
    if let Err(e) = result {
        dev.port.pool.push(buf);
        return Err(e);
    }
    qp.counters.add(counter::TX_FRAMES, 1);
    qp.counters.add(counter::TX_BYTES, buf.len() as u64);
    push(dev, buf);
    Ok(())
}

/// Counts one event of transport counter `idx` for `qp` and its port.
pub(crate) fn count(qp: &mut Qp, dev: &mut Dev, idx: usize) {
    dev.port.counters.add(idx, 1);
    qp.counters.add(idx, 1);
}

/// Handles one received frame.
pub(crate) fn receive(st: &mut State, f: &[u8]) {
    let c = &mut st.dev.port.counters;
    c.add(counter::RX_FRAMES, 1);
    c.add(counter::RX_BYTES, f.len() as u64);
    let dst = frame::classify(f);
    match dst {
        Ok(Received::Roce(repr, payload)) => roce(st, &repr, payload, f),
        Ok(Received::Arp(eth, arp)) => on_arp(st, &eth, &arp),
        Ok(Received::Ndisc(eth, src, nd)) => on_ndisc(st, &eth, src, &nd),
        Err(e) => {
            let idx = match e {
                Error::Icrc => counter::RX_ICRC_ERRORS,
                Error::Version => counter::RX_BAD_VERSION,
                Error::Unsupported => counter::RX_IGNORED,
                Error::Truncated | Error::Malformed | Error::Checksum => counter::RX_MALFORMED,
            };
            log::trace!("port: frame of {} bytes dropped: {e}", f.len());
            st.dev.port.counters.add(idx, 1);
        }
    }
}

fn for_me(st: &State, eth: &EthernetRepr) -> bool {
    eth.dst_addr == st.dev.port.mac || eth.dst_addr.is_multicast()
}

fn on_arp(st: &mut State, eth: &EthernetRepr, arp: &ArpRepr) {
    let target = IpAddress::V4(arp.target_ip);
    if !for_me(st, eth) || !is_local(&st.dev, &target) {
        st.dev.port.counters.add(counter::RX_IGNORED, 1);
        return;
    }
    let request = arp.operation == ArpOperation::Request;
    learn(st, IpAddress::V4(arp.sender_ip), arp.sender_mac, request);
    if request {
        let me = st.dev.port.mac;
        let reply = ArpRepr {
            operation: ArpOperation::Reply,
            sender_mac: me,
            sender_ip: arp.target_ip,
            target_mac: arp.sender_mac,
            target_ip: arp.sender_ip,
        };
        push(&mut st.dev, frame::arp_frame(me, arp.sender_mac, &reply));
    }
}

fn on_ndisc(st: &mut State, eth: &EthernetRepr, src: Ipv6Address, nd: &NdiscRepr) {
    if !for_me(st, eth) {
        st.dev.port.counters.add(counter::RX_IGNORED, 1);
        return;
    }
    match *nd {
        NdiscRepr::NeighborSolicit {
            target,
            source_lladdr,
        } => {
            if !is_local(&st.dev, &IpAddress::V6(target)) {
                st.dev.port.counters.add(counter::RX_IGNORED, 1);
                return;
            }
            let Some(mac) = source_lladdr else {
                // Duplicate address detection (no source address): nothing
                // to answer to a host that has no address yet.
                return;
            };
            learn(st, IpAddress::V6(src), mac, true);
            let me = st.dev.port.mac;
            let na = NdiscRepr::NeighborAdvert {
                flags: na_flags::SOLICITED | na_flags::OVERRIDE,
                target,
                target_lladdr: Some(me),
            };
            push(&mut st.dev, frame::ndisc_frame(me, mac, target, src, &na));
        }
        NdiscRepr::NeighborAdvert {
            target,
            target_lladdr,
            ..
        } => {
            if let Some(mac) = target_lladdr {
                learn(st, IpAddress::V6(target), mac, false);
            }
        }
    }
}

/// A RoCEv2 packet: checks that it is for this port and a QP that takes
/// it, then hands it to the QP's responder or completer.
fn roce(st: &mut State, repr: &FrameRepr, payload: &[u8], f: &[u8]) {
    let dst_ip = repr.ip.dst_addr();
    if !for_me(st, &repr.eth) || !is_local(&st.dev, &dst_ip) {
        st.dev.port.counters.add(counter::RX_IGNORED, 1);
        return;
    }
    let bth = repr.roce.bth;
    // The P_Key table holds the default key: a packet must carry the same
    // partition (low 15 bits), and full and limited members may talk to a
    // full member.
    if bth.pkey & 0x7fff != DEFAULT_PKEY & 0x7fff {
        st.dev.port.counters.add(counter::RX_BAD_PKEY, 1);
        return;
    }
    let Some(info) = opcode::info(bth.opcode) else {
        st.dev.port.counters.add(counter::RX_IGNORED, 1);
        return;
    };
    let qpn = bth.dest_qp;
    let accepted = st.qps.get(qpn).is_some_and(|qp| {
        if info.transport == Transport::Ud {
            // Any source; a UD QP receives from RTR on.
            return qp.qp_type.is_datagram()
                && matches!(
                    qp.state,
                    QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
                );
        }
        let connected = qp.path.is_some_and(|p| p.dst_ip == repr.ip.src_addr());
        if info.transport == Transport::Uc {
            return qp.qp_type == QpType::Uc
                && connected
                && matches!(
                    qp.state,
                    QpState::Rtr | QpState::Rts | QpState::Sqd | QpState::Sqe
                );
        }
        let state_ok = match info.op {
            Op::Ack | Op::AtomicAck | Op::ReadResponse => {
                matches!(qp.state, QpState::Rts | QpState::Sqd | QpState::Sqe)
            }
            _ => matches!(qp.state, QpState::Rtr | QpState::Rts | QpState::Sqd),
        };
        info.transport == Transport::Rc && qp.qp_type == QpType::Rc && connected && state_ok
    });
    if !accepted {
        log::trace!("port: {} for QP {qpn} dropped", info.name);
        st.dev.port.counters.add(counter::RX_UNKNOWN_QP, 1);
        if qpn <= 1 {
            // A MAD for QP0 (RoCE has no subnet management) or for a GSI
            // QP not created or not ready.
            st.dev.port.counters.add(counter::MADS_DROPPED, 1);
        }
        return;
    }
    let Some((qp, dev)) = st.parts(qpn) else {
        return;
    };
    qp.counters.add(counter::RX_FRAMES, 1);
    qp.counters.add(counter::RX_BYTES, f.len() as u64);
    // A connected QP's first packet in RTR establishes communication.
    if qp.state == QpState::Rtr && !qp.qp_type.is_datagram() && !qp.comm_est {
        qp.comm_est = true;
        crate::eq::post(dev, rnic_hw_regs::eqe::EventType::CommEst, qpn, 0);
    }
    if info.transport == Transport::Ud {
        // The IP header becomes the receive buffer's GRH.
        let at = 14 + if repr.eth.vlan.is_some() { 4 } else { 0 };
        return ud::on_packet(qp, dev, &repr.roce, payload, &f[at.min(f.len())..]);
    }
    if info.transport == Transport::Uc {
        return uc::on_request(qp, dev, info, &repr.roce, payload);
    }
    match info.op {
        Op::Ack | Op::AtomicAck | Op::ReadResponse => {
            completer::on_response(qp, dev, info, &repr.roce, payload)
        }
        _ => responder::on_request(qp, dev, info, &repr.roce, payload),
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::irq::IrqLines;
    use crate::wire::ipv4::Ipv4Address;
    use crate::EmuConfig;

    fn arp(op: ArpOperation, sender: [u8; 4], sender_mac: u8, target: [u8; 4]) -> Frame {
        let mac = EthernetAddress([0x02, 0, 0, 0, 0x77, sender_mac]);
        let repr = ArpRepr {
            operation: op,
            sender_mac: mac,
            sender_ip: Ipv4Address(sender),
            target_mac: EthernetAddress::default(),
            target_ip: Ipv4Address(target),
        };
        frame::arp_frame(mac, EthernetAddress::BROADCAST, &repr)
    }

    #[test]
    fn a_flood_of_requests_fills_the_neighbour_cache_only_so_far() {
        let cfg = EmuConfig::default();
        let me = cfg.ipv4;
        let mut st = State::new(cfg, Arc::new(IrqLines::new(1)));
        for i in 0..3 * MAX_NEIGHBOURS as u32 {
            let ip = (0x0a00_0000 + i).to_be_bytes();
            receive(&mut st, &arp(ArpOperation::Request, ip, i as u8, me));
        }
        assert_eq!(st.dev.port.neighbours.len(), MAX_NEIGHBOURS);
        // Every request was answered all the same.
        assert_eq!(st.dev.port.tx.len(), 3 * MAX_NEIGHBOURS);
        // A reply nobody asked for adds nothing; one to a question does.
        let asked = IpAddress::V4(Ipv4Address([192, 0, 2, 9]));
        let unasked = IpAddress::V4(Ipv4Address([192, 0, 2, 8]));
        receive(&mut st, &arp(ArpOperation::Reply, [192, 0, 2, 8], 8, me));
        assert!(!st.dev.port.neighbours.contains_key(&unasked));
        st.dev.port.neighbours.insert(
            asked,
            Neighbour {
                mac: None,
                asked_ns: Some(0),
            },
        );
        receive(&mut st, &arp(ArpOperation::Reply, [192, 0, 2, 9], 9, me));
        assert_eq!(
            st.dev.port.neighbours[&asked].mac,
            Some(EthernetAddress([0x02, 0, 0, 0, 0x77, 9]))
        );
    }
}

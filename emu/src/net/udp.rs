//! A wire over UDP: each datagram carries one raw Ethernet frame, as
//! QEMU's `-netdev socket,udp=REMOTE,localaddr=LOCAL` and
//! `-netdev dgram,local.…,remote.…` exchange them, so an emulated NIC
//! shares a wire with a VM's NIC or with an emulated NIC in another
//! process.
//!
//! Sends are `sendmmsg` batches made by the device, a run of frames of
//! one length (one message's packets) going down in one message that the
//! kernel cuts into one datagram per frame again (UDP segmentation
//! offload, `UDP_SEGMENT`), so that the 64 packets of a 64 KiB SEND cross
//! the host's network stack once rather than 64 times. Receives are
//! `recvmmsg` batches; on a socket that asks for it (`UDP_GRO`) the
//! kernel hands such a run over whole with its segment size, and the wire
//! cuts it into frames. A peer that sends datagram by datagram (QEMU, a
//! VM's rxe) and one that reads them so see the same datagrams. Receives
//! are made without waiting by whoever runs the NIC's step
//! ([`Wire::poll`]): a thread that waits on the NIC (the application
//! polling its CQ: a poll-mode driver, one thread per process and a
//! system call per look) or the device worker, which sleeps on the
//! socket ([`Wire::wait_fd`]) when nothing else has work, so that a
//! datagram wakes it at once. No thread of the wire's own stands between
//! the socket and the NIC.

use std::collections::VecDeque;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::{AsRawFd, RawFd};

use super::{Frame, Waker, Wire};
use crate::port::FRAME_ROOM;

/// Largest frame received (a 9000-byte jumbo frame and its headers fit).
const MAX_FRAME: usize = 16 << 10;
/// Messages per `recvmmsg` / `sendmmsg`.
const BATCH: usize = 32;
/// Largest UDP payload (IPv4's): what one segmented send carries at
/// most, and so one coalesced receive.
const MAX_DATAGRAM: usize = 65507;
/// A receive buffer: room for a whole coalesced run.
const RX_BUF: usize = 64 << 10;
/// Frames one segmented send carries at most (the kernel's
/// `UDP_MAX_SEGMENTS` is 64 on older kernels, 128 on newer).
const MAX_SEGMENTS: usize = 64;
/// Frames one `sendmmsg` carries at most.
const SEND_IOV: usize = 256;
/// Frames queued for the NIC before more are dropped.
const RX_QUEUE: usize = 1 << 16;
/// Buffers kept for frames to come at most: of frames sent, and those the
/// NIC's pool had no room for ([`Wire::spare`]).
const SPENT: usize = 1024;
/// Buffers the NIC's pool is given back at most once it holds this many:
/// the rest stay here for the frames received, which would otherwise each
/// be a new allocation while the pool frees as many.
const POOL_LOW: usize = 256;
/// Socket buffer asked for each way (the kernel caps it at
/// `net.core.rmem_max` / `wmem_max`): a burst of full-MTU frames, such as
/// one large RDMA WRITE, overflows the default 208 KiB and every frame
/// lost then costs the transport a retransmission timeout.
const SOCKET_BUFFER: libc::c_int = 4 << 20;

/// A NIC's wire on a UDP socket.
pub struct UdpWire {
    socket: UdpSocket,
    remote: SocketAddr,
    /// Frames received and not yet taken by the NIC.
    queue: VecDeque<Frame>,
    waker: Option<Waker>,
    /// The buffers `poll` receives into: [`BATCH`] of [`RX_BUF`] bytes.
    bufs: Vec<u8>,
    /// Sends are segmented by the kernel (cleared when the socket refuses
    /// it: a route to a device without checksum offload).
    gso: bool,
    /// Buffers of frames sent, and spares, for the NIC to reuse
    /// ([`Wire::reclaim`]) and for frames received.
    spent: Vec<Frame>,
    send_errors: u64,
    dropped: u64,
    truncated: u64,
}

impl std::fmt::Debug for UdpWire {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UdpWire")
            .field("local", &self.socket.local_addr().ok())
            .field("remote", &self.remote)
            .finish()
    }
}

impl UdpWire {
    /// A wire sending to `remote` from a socket bound to `local` (port 0
    /// picks a free one) and receiving whatever reaches it.
    pub fn bind(local: SocketAddr, remote: SocketAddr) -> io::Result<UdpWire> {
        UdpWire::from_socket(UdpSocket::bind(local)?, remote)
    }

    /// A wire on a socket already bound (made non-blocking here), sending
    /// to `remote`: two wires that must know each other's ports bind both
    /// sockets first.
    pub fn from_socket(socket: UdpSocket, remote: SocketAddr) -> io::Result<UdpWire> {
        enlarge_buffers(&socket);
        socket.set_nonblocking(true)?;
        // Coalesced receives are an offer: a kernel without them hands
        // over datagram by datagram.
        if let Err(e) = set_int(&socket, libc::SOL_UDP, libc::UDP_GRO, 1) {
            log::debug!("UDP wire: UDP_GRO: {e}");
        }
        Ok(UdpWire {
            socket,
            remote,
            queue: VecDeque::new(),
            waker: None,
            bufs: vec![0u8; BATCH * RX_BUF],
            gso: true,
            spent: Vec::new(),
            send_errors: 0,
            dropped: 0,
            truncated: 0,
        })
    }

    /// The address the socket is bound to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Frames dropped because the NIC did not take them fast enough.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Datagrams dropped for being larger than a frame can be.
    pub fn truncated(&self) -> u64 {
        self.truncated
    }

    /// One `sendmmsg` of the first of `frames`: up to [`BATCH`] messages,
    /// each a run of frames segmented by the kernel (or a single frame);
    /// returns how many frames it took, sent or lost.
    fn send_batch(&mut self, frames: &[Frame]) -> usize {
        let fd = self.socket.as_raw_fd();
        let (mut dst, dst_len) = sockaddr(&self.remote);
        // SAFETY: plain data, valid all zero.
        let mut iov: [libc::iovec; SEND_IOV] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut msgs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
        let mut ctrl = [Cmsg::default(); BATCH];
        // Each message's first frame, and how many it carries.
        let mut runs = [(0usize, 0usize); BATCH];
        let (mut nmsg, mut used) = (0, 0);
        while nmsg < BATCH && used < frames.len() {
            let run = if self.gso {
                run_len(&frames[used..])
            } else {
                1
            };
            let n = run.min(SEND_IOV - used);
            if n == 0 {
                break;
            }
            for (v, f) in iov[used..used + n].iter_mut().zip(&frames[used..]) {
                v.iov_base = f.as_ptr().cast_mut().cast();
                v.iov_len = f.len();
            }
            let h = &mut msgs[nmsg].msg_hdr;
            h.msg_iov = &mut iov[used];
            h.msg_iovlen = n as _;
            h.msg_name = (&mut dst as *mut libc::sockaddr_storage).cast();
            h.msg_namelen = dst_len;
            if n > 1 {
                h.msg_control = (&mut ctrl[nmsg] as *mut Cmsg).cast();
                // SAFETY: the control buffer holds one cmsghdr and a u16
                // (asserted at `Cmsg`), aligned for cmsghdr.
                unsafe {
                    h.msg_controllen = libc::CMSG_SPACE(size_of::<u16>() as u32) as _;
                    let c = libc::CMSG_FIRSTHDR(h);
                    (*c).cmsg_level = libc::SOL_UDP;
                    (*c).cmsg_type = libc::UDP_SEGMENT;
                    (*c).cmsg_len = libc::CMSG_LEN(size_of::<u16>() as u32) as _;
                    std::ptr::write_unaligned(
                        libc::CMSG_DATA(c).cast::<u16>(),
                        frames[used].len() as u16,
                    );
                }
            }
            runs[nmsg] = (used, n);
            used += n;
            nmsg += 1;
        }
        let mut sent = 0;
        while sent < nmsg {
            // SAFETY: the headers point at iovecs of frames, at control
            // buffers and at the destination address, all alive across
            // the call; the kernel only reads them.
            let n = unsafe {
                libc::sendmmsg(
                    fd,
                    msgs.as_mut_ptr().add(sent),
                    (nmsg - sent) as libc::c_uint,
                    0,
                )
            };
            if n > 0 {
                sent += n as usize;
                continue;
            }
            let err = io::Error::last_os_error();
            if runs[sent].1 > 1 && self.gso {
                // The route cannot segment (no checksum offload, or frames
                // longer than its MTU): send frame by frame from here on.
                log::info!("UDP wire: segmented sends refused ({err}); sending frame by frame");
                self.gso = false;
                return runs[sent].0;
            }
            // A frame the link could not take is lost, as on a congested
            // link; the transport recovers it.
            self.send_errors += 1;
            if self.send_errors.is_power_of_two() {
                log::warn!("UDP wire: send to {} failed: {err}", self.remote);
            }
            sent += 1;
        }
        used
    }

    /// One `recvmmsg` of what has arrived, up to a batch, into the queue
    /// (a coalesced run cut into its frames); returns how many messages
    /// came.
    fn receive(&mut self) -> usize {
        let fd = self.socket.as_raw_fd();
        // SAFETY: iovec and mmsghdr are plain data, valid all zero.
        let mut iov: [libc::iovec; BATCH] = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let mut msgs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
        let mut ctrl = [Cmsg::default(); BATCH];
        for (((v, m), b), c) in iov
            .iter_mut()
            .zip(msgs.iter_mut())
            .zip(self.bufs.chunks_exact_mut(RX_BUF))
            .zip(ctrl.iter_mut())
        {
            v.iov_base = b.as_mut_ptr().cast();
            v.iov_len = RX_BUF;
            m.msg_hdr.msg_iov = v;
            m.msg_hdr.msg_iovlen = 1;
            m.msg_hdr.msg_control = (c as *mut Cmsg).cast();
            m.msg_hdr.msg_controllen = size_of::<Cmsg>() as _;
        }
        // SAFETY: `msgs` holds BATCH headers, each pointing at one iovec of
        // a distinct RX_BUF-byte buffer and at its own control buffer, all
        // outliving the call.
        let got = unsafe {
            libc::recvmmsg(
                fd,
                msgs.as_mut_ptr(),
                BATCH as libc::c_uint,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if got <= 0 {
            // Nothing there (EAGAIN), or an interrupted call.
            return 0;
        }
        for (m, b) in msgs
            .iter()
            .zip(self.bufs.chunks_exact(RX_BUF))
            .take(got as usize)
        {
            let len = m.msg_len as usize;
            // SAFETY: the kernel filled the header's control buffer, of the
            // length it left in `msg_controllen`.
            let seg = unsafe { gro_size(&m.msg_hdr) };
            let whole = seg.unwrap_or(len);
            if m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 || whole > MAX_FRAME || whole == 0 {
                self.truncated += 1;
                continue;
            }
            for f in b[..len].chunks(whole) {
                if self.queue.len() >= RX_QUEUE {
                    self.dropped += 1;
                } else {
                    let mut frame = self
                        .spent
                        .pop()
                        .unwrap_or_else(|| Frame::with_capacity(f.len().max(FRAME_ROOM)));
                    frame.clear();
                    frame.extend_from_slice(f);
                    self.queue.push_back(frame);
                }
            }
        }
        got as usize
    }
}

/// A control buffer with room for one `int` option (`UDP_GRO`) or one
/// `u16` (`UDP_SEGMENT`), aligned as `cmsghdr`.
#[derive(Clone, Copy, Default)]
#[repr(C, align(8))]
struct Cmsg([u8; 32]);

const _: () = assert!(size_of::<libc::cmsghdr>() + 8 <= size_of::<Cmsg>());

/// The segment size of a coalesced receive (`UDP_GRO`), if it is one.
///
/// # Safety
///
/// `hdr`'s control buffer holds what the kernel wrote into it, of length
/// `msg_controllen`.
unsafe fn gro_size(hdr: &libc::msghdr) -> Option<usize> {
    // SAFETY: the caller's promise; the CMSG_* walk stays inside the
    // buffer's `msg_controllen` bytes.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(hdr);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_UDP && (*c).cmsg_type == libc::UDP_GRO {
                let v = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast::<libc::c_int>());
                return usize::try_from(v).ok().filter(|&v| v > 0);
            }
            c = libc::CMSG_NXTHDR(hdr, c);
        }
    }
    None
}

/// Sets an `int` socket option.
fn set_int(
    socket: &UdpSocket,
    level: libc::c_int,
    opt: libc::c_int,
    v: libc::c_int,
) -> io::Result<()> {
    // SAFETY: the option value is a c_int that outlives the call, and its
    // length is given.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            opt,
            (&v as *const libc::c_int).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// How many of `frames` go down as one segmented message: a run of one
/// length (the last may be shorter, as GSO allows), within a datagram and
/// the kernel's segment limit.
fn run_len(frames: &[Frame]) -> usize {
    let Some(first) = frames.first() else {
        return 0;
    };
    let size = first.len();
    let mut bytes = size;
    let mut n = 1;
    for f in &frames[1..] {
        if n == MAX_SEGMENTS || bytes + f.len() > MAX_DATAGRAM || f.len() > size {
            break;
        }
        bytes += f.len();
        n += 1;
        if f.len() < size {
            break;
        }
    }
    n
}

/// Asks for [`SOCKET_BUFFER`] bytes of receive and send buffer; a kernel
/// that gives less leaves the wire slower on bursts, not broken.
fn enlarge_buffers(socket: &UdpSocket) {
    for opt in [libc::SO_RCVBUF, libc::SO_SNDBUF] {
        if let Err(e) = set_int(socket, libc::SOL_SOCKET, opt, SOCKET_BUFFER) {
            log::debug!("UDP wire: socket buffer: {e}");
        }
    }
}

/// A socket address as the C library takes it.
fn sockaddr(a: &SocketAddr) -> (libc::sockaddr_storage, libc::socklen_t) {
    // SAFETY: sockaddr_storage is plain data, valid all zero.
    let mut ss: libc::sockaddr_storage = unsafe { std::mem::zeroed() };
    let len = match a {
        SocketAddr::V4(v4) => {
            let sin = libc::sockaddr_in {
                sin_family: libc::AF_INET as libc::sa_family_t,
                sin_port: v4.port().to_be(),
                sin_addr: libc::in_addr {
                    s_addr: u32::from_ne_bytes(v4.ip().octets()),
                },
                sin_zero: [0; 8],
            };
            // SAFETY: sockaddr_storage is larger than and aligned for
            // sockaddr_in.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin) };
            size_of::<libc::sockaddr_in>()
        }
        SocketAddr::V6(v6) => {
            let sin6 = libc::sockaddr_in6 {
                sin6_family: libc::AF_INET6 as libc::sa_family_t,
                sin6_port: v6.port().to_be(),
                sin6_flowinfo: v6.flowinfo(),
                sin6_addr: libc::in6_addr {
                    s6_addr: v6.ip().octets(),
                },
                sin6_scope_id: v6.scope_id(),
            };
            // SAFETY: as above, for sockaddr_in6.
            unsafe { std::ptr::write((&mut ss as *mut libc::sockaddr_storage).cast(), sin6) };
            size_of::<libc::sockaddr_in6>()
        }
    };
    (ss, len as libc::socklen_t)
}

impl Wire for UdpWire {
    fn send(&mut self, frames: &mut Vec<Frame>) {
        let mut at = 0;
        while at < frames.len() {
            at += self.send_batch(&frames[at..]);
        }
        let room = SPENT.saturating_sub(self.spent.len());
        self.spent.extend(frames.drain(..).take(room));
        frames.clear();
    }

    fn recv(&mut self, out: &mut Vec<Frame>, max: usize) -> usize {
        let n = max.min(self.queue.len());
        out.extend(self.queue.drain(..n));
        n
    }

    fn set_waker(&mut self, waker: Waker) {
        self.waker = Some(waker);
    }

    fn reclaim(&mut self, pool: &mut Vec<Frame>) {
        let n = POOL_LOW.saturating_sub(pool.len()).min(self.spent.len());
        pool.extend(self.spent.drain(self.spent.len() - n..));
    }

    fn spare(&mut self, frames: &mut Vec<Frame>) {
        let room = SPENT.saturating_sub(self.spent.len());
        self.spent.extend(frames.drain(..room.min(frames.len())));
        frames.clear();
    }

    /// Takes what has arrived, without waiting.
    fn poll(&mut self, _now_ns: u64) {
        if self.receive() > 0 {
            if let Some(w) = &self.waker {
                w();
            }
        }
    }

    /// The socket: a frame is known only once polled.
    fn polled(&self) -> bool {
        true
    }

    fn wait_fd(&self) -> Option<RawFd> {
        Some(self.socket.as_raw_fd())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    fn lo(p: u16) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], p))
    }

    /// Polls `w` until `n` frames came or 5 s passed.
    fn take(w: &mut UdpWire, n: usize) -> Vec<Frame> {
        let mut got = Vec::new();
        let start = Instant::now();
        while got.len() < n && start.elapsed() < Duration::from_secs(5) {
            w.poll(0);
            w.recv(&mut got, 64);
        }
        got
    }

    /// Two wires on loopback sockets pointing at each other.
    fn pair() -> (UdpWire, UdpWire) {
        let (sa, sb) = (
            UdpSocket::bind(lo(0)).unwrap(),
            UdpSocket::bind(lo(0)).unwrap(),
        );
        let (pa, pb) = (sa.local_addr().unwrap(), sb.local_addr().unwrap());
        (
            UdpWire::from_socket(sa, pb).unwrap(),
            UdpWire::from_socket(sb, pa).unwrap(),
        )
    }

    #[test]
    fn frames_cross_as_datagrams() {
        let (mut a, mut b) = pair();
        let woken = Arc::new(AtomicU32::new(0));
        let w = woken.clone();
        b.set_waker(Arc::new(move || {
            w.fetch_add(1, Ordering::Relaxed);
        }));
        assert!(b.polled());
        let fd = b.wait_fd().unwrap();
        assert!(!crate::irq::readable(fd));
        let frames: Vec<Frame> = (0..100u8).map(|i| vec![i; 60 + i as usize]).collect();
        a.send(&mut frames.clone());
        // The socket says frames wait before anyone polls it.
        let start = Instant::now();
        while !crate::irq::readable(fd) && start.elapsed() < Duration::from_secs(5) {}
        assert!(
            crate::irq::readable(fd),
            "the socket is readable once a frame came"
        );
        assert_eq!(woken.load(Ordering::Relaxed), 0, "nothing polled yet");
        assert_eq!(
            take(&mut b, frames.len()),
            frames,
            "every frame, whole and in order"
        );
        assert!(
            woken.load(Ordering::Relaxed) > 0,
            "a poll that took frames wakes"
        );
        assert!(!crate::irq::readable(fd), "all taken");
        // And back the other way.
        b.send(&mut vec![vec![7; 64]]);
        assert_eq!(take(&mut a, 1), [vec![7; 64]]);
        // A datagram too large for a frame is dropped and counted.
        let raw = UdpSocket::bind(lo(0)).unwrap();
        raw.send_to(&vec![0u8; MAX_FRAME + 1], b.local_addr().unwrap())
            .unwrap();
        let start = Instant::now();
        while b.truncated() == 0 && start.elapsed() < Duration::from_secs(5) {
            b.poll(0);
        }
        assert_eq!(b.truncated(), 1);
        let mut none = Vec::new();
        assert_eq!(b.recv(&mut none, 64), 0);
    }

    #[test]
    fn a_run_of_frames_goes_down_segmented_and_arrives_frame_by_frame() {
        let (mut a, mut b) = pair();
        // One message's packets: equal frames, the last one shorter; then
        // more than one segmented send holds.
        let mut frames: Vec<Frame> = (0..150u8).map(|i| vec![i; 1082]).collect();
        frames.push(vec![0xee; 500]);
        assert_eq!(run_len(&frames), 60, "a run stops at a datagram's size");
        assert_eq!(run_len(&frames[140..]), 11, "a shorter frame ends a run");
        a.send(&mut frames.clone());
        assert_eq!(take(&mut b, frames.len()), frames);
        // A peer that reads datagram by datagram (QEMU, a VM) gets one
        // frame per datagram.
        let raw = UdpSocket::bind(lo(0)).unwrap();
        raw.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut c = UdpWire::bind(lo(0), raw.local_addr().unwrap()).unwrap();
        // Within the default socket buffer of the reader.
        let few = [&frames[..30], &frames[150..]].concat();
        c.send(&mut few.clone());
        let mut buf = vec![0u8; 65536];
        for f in &few {
            let n = raw.recv(&mut buf).unwrap();
            assert_eq!(&buf[..n], &f[..]);
        }
    }
}

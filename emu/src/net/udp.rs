//! A wire over UDP: each datagram carries one raw Ethernet frame, as
//! QEMU's `-netdev socket,udp=REMOTE,localaddr=LOCAL` and
//! `-netdev dgram,local.…,remote.…` exchange them, so an emulated NIC
//! shares a wire with a VM's NIC or with an emulated NIC in another
//! process.
//!
//! Sends are `sendmmsg` batches made by the device. Receives are
//! `recvmmsg` batches made by the wire's own receive thread, which queues
//! the frames and wakes the NIC ([`UdpWire::bind`]), so that this wire
//! needs [`crate::ExecMode::Thread`]; or ([`UdpWire::bind_polled`]) by
//! the device itself, without waiting, on each of its steps, which suits
//! an inline device that the application runs while it waits (a poll-mode
//! driver): one thread per process, and a system call per look.

use std::collections::VecDeque;
use std::io;
use std::net::{SocketAddr, UdpSocket};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::{self, JoinHandle};
use std::time::Duration;

use super::{Frame, Waker, Wire};

/// Largest frame received (a 9000-byte jumbo frame and its headers fit).
const MAX_FRAME: usize = 16 << 10;
/// Datagrams per `recvmmsg` / `sendmmsg`.
const BATCH: usize = 32;
/// Frames queued for the NIC before more are dropped.
const RX_QUEUE: usize = 1 << 16;
/// Buffers of frames sent kept for the NIC at most.
const SPENT: usize = 1024;
/// Socket buffer asked for each way (the kernel caps it at
/// `net.core.rmem_max` / `wmem_max`): a burst of full-MTU frames, such as
/// one large RDMA WRITE, overflows the default 208 KiB and every frame
/// lost then costs the transport a retransmission timeout.
const SOCKET_BUFFER: libc::c_int = 4 << 20;
/// How often the receive thread looks up from a quiet socket to see if it
/// should stop.
const POLL: Duration = Duration::from_millis(20);

struct Rx {
    queue: Mutex<VecDeque<Frame>>,
    waker: Mutex<Option<Waker>>,
    stop: AtomicBool,
    dropped: AtomicU64,
    truncated: AtomicU64,
}

/// A NIC's wire on a UDP socket.
pub struct UdpWire {
    socket: Arc<UdpSocket>,
    remote: SocketAddr,
    rx: Arc<Rx>,
    thread: Option<JoinHandle<()>>,
    /// Polled: the buffers `poll` receives into (no receive thread).
    polled: Option<Vec<[u8; MAX_FRAME]>>,
    /// Buffers of frames sent, for the NIC to reuse ([`Wire::reclaim`]).
    spent: Vec<Frame>,
    send_errors: u64,
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
        let socket = Arc::new(UdpSocket::bind(local)?);
        enlarge_buffers(&socket);
        socket.set_read_timeout(Some(POLL))?;
        let rx = Arc::new(Rx {
            queue: Mutex::new(VecDeque::new()),
            waker: Mutex::new(None),
            stop: AtomicBool::new(false),
            dropped: AtomicU64::new(0),
            truncated: AtomicU64::new(0),
        });
        let (s, r) = (socket.clone(), rx.clone());
        let thread = thread::Builder::new()
            .name("rnic-udp-rx".into())
            .spawn(move || receive(&s, &r))?;
        Ok(UdpWire {
            socket,
            remote,
            rx,
            thread: Some(thread),
            polled: None,
            spent: Vec::new(),
            send_errors: 0,
        })
    }

    /// A wire like [`UdpWire::bind`]'s without a receive thread: the
    /// device takes what has arrived on each step ([`Wire::poll`]).
    pub fn bind_polled(local: SocketAddr, remote: SocketAddr) -> io::Result<UdpWire> {
        let socket = Arc::new(UdpSocket::bind(local)?);
        enlarge_buffers(&socket);
        socket.set_nonblocking(true)?;
        Ok(UdpWire {
            socket,
            remote,
            rx: Arc::new(Rx {
                queue: Mutex::new(VecDeque::new()),
                waker: Mutex::new(None),
                stop: AtomicBool::new(false),
                dropped: AtomicU64::new(0),
                truncated: AtomicU64::new(0),
            }),
            thread: None,
            polled: Some(vec![[0u8; MAX_FRAME]; BATCH]),
            spent: Vec::new(),
            send_errors: 0,
        })
    }

    /// The address the socket is bound to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.socket.local_addr()
    }

    /// Frames dropped because the NIC did not take them fast enough.
    pub fn dropped(&self) -> u64 {
        self.rx.dropped.load(Ordering::Relaxed)
    }

    /// Datagrams dropped for being larger than a frame can be.
    pub fn truncated(&self) -> u64 {
        self.rx.truncated.load(Ordering::Relaxed)
    }
}

impl Drop for UdpWire {
    fn drop(&mut self) {
        self.rx.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Asks for [`SOCKET_BUFFER`] bytes of receive and send buffer; a kernel
/// that gives less leaves the wire slower on bursts, not broken.
fn enlarge_buffers(socket: &UdpSocket) {
    for opt in [libc::SO_RCVBUF, libc::SO_SNDBUF] {
        let size = SOCKET_BUFFER;
        // SAFETY: the option value is a c_int that outlives the call, and
        // its length is given.
        let rc = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                opt,
                (&size as *const libc::c_int).cast(),
                size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            log::debug!("UDP wire: socket buffer: {}", io::Error::last_os_error());
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

/// The receive thread: `recvmmsg` batches into the queue, until told to
/// stop.
fn receive(socket: &UdpSocket, rx: &Rx) {
    let mut bufs = vec![[0u8; MAX_FRAME]; BATCH];
    while !rx.stop.load(Ordering::Acquire) {
        // The first datagram waits up to the socket's read timeout; the
        // rest are taken only if already there.
        if receive_batch(socket, rx, &mut bufs, libc::MSG_WAITFORONE) > 0 {
            let w = rx.waker.lock().unwrap_or_else(|e| e.into_inner()).clone();
            if let Some(w) = w {
                w();
            }
        }
    }
}

/// One `recvmmsg` of up to a batch into `bufs`, queued in `rx`; returns
/// how many datagrams came (0 on a timeout or nothing there).
fn receive_batch(socket: &UdpSocket, rx: &Rx, bufs: &mut [[u8; MAX_FRAME]], flags: i32) -> usize {
    let fd = socket.as_raw_fd();
    // SAFETY: iovec and mmsghdr are plain data, valid all zero.
    let mut iov: [libc::iovec; BATCH] = unsafe { std::mem::zeroed() };
    // SAFETY: as above.
    let mut msgs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
    let n = bufs.len().min(BATCH);
    for ((v, m), b) in iov.iter_mut().zip(msgs.iter_mut()).zip(bufs.iter_mut()) {
        v.iov_base = b.as_mut_ptr().cast();
        v.iov_len = MAX_FRAME;
        m.msg_hdr.msg_iov = v;
        m.msg_hdr.msg_iovlen = 1;
    }
    // SAFETY: `msgs` holds `n` headers, each pointing at one iovec of a
    // distinct MAX_FRAME-byte buffer that outlives the call.
    let got = unsafe {
        libc::recvmmsg(
            fd,
            msgs.as_mut_ptr(),
            n as libc::c_uint,
            flags,
            std::ptr::null_mut(),
        )
    };
    if got <= 0 {
        // Timeout or nothing there (EAGAIN), or an interrupted call.
        return 0;
    }
    let mut q = rx.queue.lock().unwrap_or_else(|e| e.into_inner());
    for (m, b) in msgs.iter().zip(bufs.iter()).take(got as usize) {
        let len = m.msg_len as usize;
        if m.msg_hdr.msg_flags & libc::MSG_TRUNC != 0 {
            rx.truncated.fetch_add(1, Ordering::Relaxed);
        } else if q.len() >= RX_QUEUE {
            rx.dropped.fetch_add(1, Ordering::Relaxed);
        } else {
            q.push_back(b[..len].to_vec());
        }
    }
    got as usize
}

impl Wire for UdpWire {
    fn send(&mut self, frames: &mut Vec<Frame>) {
        let fd = self.socket.as_raw_fd();
        let (mut dst, dst_len) = sockaddr(&self.remote);
        for chunk in frames.chunks(BATCH) {
            // SAFETY: plain data, valid all zero.
            let mut iov: [libc::iovec; BATCH] = unsafe { std::mem::zeroed() };
            // SAFETY: as above.
            let mut msgs: [libc::mmsghdr; BATCH] = unsafe { std::mem::zeroed() };
            for ((v, m), f) in iov.iter_mut().zip(msgs.iter_mut()).zip(chunk) {
                v.iov_base = f.as_ptr().cast_mut().cast();
                v.iov_len = f.len();
                m.msg_hdr.msg_iov = v;
                m.msg_hdr.msg_iovlen = 1;
                m.msg_hdr.msg_name = (&mut dst as *mut libc::sockaddr_storage).cast();
                m.msg_hdr.msg_namelen = dst_len;
            }
            let mut sent = 0;
            while sent < chunk.len() {
                // SAFETY: the headers point at iovecs of frames and at the
                // destination address, all alive across the call; the
                // kernel only reads them.
                let n = unsafe {
                    libc::sendmmsg(
                        fd,
                        msgs.as_mut_ptr().add(sent),
                        (chunk.len() - sent) as libc::c_uint,
                        0,
                    )
                };
                if n <= 0 {
                    // A frame the link could not take is lost, as on a
                    // congested link; the transport recovers it.
                    self.send_errors += 1;
                    if self.send_errors.is_power_of_two() {
                        log::warn!(
                            "UDP wire: send to {} failed: {}",
                            self.remote,
                            io::Error::last_os_error()
                        );
                    }
                    break;
                }
                sent += n as usize;
            }
        }
        let room = SPENT.saturating_sub(self.spent.len());
        self.spent.extend(frames.drain(..).take(room));
        frames.clear();
    }

    fn recv(&mut self, out: &mut Vec<Frame>, max: usize) -> usize {
        let mut q = self.rx.queue.lock().unwrap_or_else(|e| e.into_inner());
        let n = max.min(q.len());
        out.extend(q.drain(..n));
        n
    }

    fn set_waker(&mut self, waker: Waker) {
        *self.rx.waker.lock().unwrap_or_else(|e| e.into_inner()) = Some(waker);
    }

    fn reclaim(&mut self, pool: &mut Vec<Frame>) {
        pool.append(&mut self.spent);
    }

    /// Polled: takes what has arrived, without waiting.
    fn poll(&mut self, _now_ns: u64) {
        let Some(bufs) = &mut self.polled else {
            return;
        };
        if receive_batch(&self.socket, &self.rx, bufs, libc::MSG_DONTWAIT) > 0 {
            let w = self
                .rx
                .waker
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            if let Some(w) = w {
                w();
            }
        }
    }

    /// Polled, the wire has no thread of its own: an inline device takes
    /// its frames on each step the application makes it run.
    fn in_memory(&self) -> bool {
        self.polled.is_some()
    }

    fn polled(&self) -> bool {
        self.polled.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;
    use std::time::Instant;

    #[test]
    fn frames_cross_as_datagrams() {
        let lo = |p| SocketAddr::from(([127, 0, 0, 1], p));
        // Two wires pointing at each other (the second learns the first's
        // port after binding).
        let probe = UdpSocket::bind(lo(0)).unwrap();
        let b_addr = probe.local_addr().unwrap();
        drop(probe);
        let mut a = UdpWire::bind(lo(0), b_addr).unwrap();
        let mut b = UdpWire::bind(b_addr, a.local_addr().unwrap()).unwrap();
        let woken = Arc::new(AtomicU32::new(0));
        let w = woken.clone();
        b.set_waker(Arc::new(move || {
            w.fetch_add(1, Ordering::Relaxed);
        }));
        let frames: Vec<Frame> = (0..100u8).map(|i| vec![i; 60 + i as usize]).collect();
        a.send(&mut frames.clone());
        let mut got = Vec::new();
        let start = Instant::now();
        while got.len() < frames.len() && start.elapsed() < Duration::from_secs(5) {
            b.recv(&mut got, 64);
            thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(got, frames, "every frame, whole and in order");
        assert!(woken.load(Ordering::Relaxed) > 0);
        assert!(!a.in_memory());
        // A datagram too large for a frame is dropped and counted.
        let raw = UdpSocket::bind(lo(0)).unwrap();
        raw.send_to(&vec![0u8; MAX_FRAME + 1], b_addr).unwrap();
        let start = Instant::now();
        while b.truncated() == 0 && start.elapsed() < Duration::from_secs(5) {
            thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(b.truncated(), 1);
    }

    #[test]
    fn a_polled_wire_receives_when_polled() {
        let lo = |p| SocketAddr::from(([127, 0, 0, 1], p));
        let probe = UdpSocket::bind(lo(0)).unwrap();
        let b_addr = probe.local_addr().unwrap();
        drop(probe);
        let mut a = UdpWire::bind(lo(0), b_addr).unwrap();
        let mut b = UdpWire::bind_polled(b_addr, a.local_addr().unwrap()).unwrap();
        assert!(b.in_memory() && !a.in_memory());
        let frames: Vec<Frame> = (0..40u8).map(|i| vec![i; 60]).collect();
        a.send(&mut frames.clone());
        let mut got = Vec::new();
        let start = Instant::now();
        while got.len() < frames.len() && start.elapsed() < Duration::from_secs(5) {
            b.poll(0);
            b.recv(&mut got, 64);
        }
        assert_eq!(got, frames);
        // And back the other way.
        b.send(&mut vec![vec![7; 64]]);
        got.clear();
        while got.is_empty() && start.elapsed() < Duration::from_secs(5) {
            a.recv(&mut got, 64);
            thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(got, [vec![7; 64]]);
    }
}

//! The uplink: rnicd's switch joined to other hosts over a wire (a UDP
//! socket to another rnic NIC, rnicd or a QEMU VM), so that its clients'
//! devices reach NICs beyond this host as an in-process NIC on a UDP wire
//! does.
//!
//! A thread moves frames both ways between a port of the switch and the
//! wire. It sleeps in `poll(2)` on the wire's socket and on an eventfd
//! that the switch port's waker signals, so a frame either way wakes it at
//! once; nothing is polled while no frame moves.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;

use rnic_emu::net::{Frame, Switch, Wire};

/// Frames moved each way per pass.
const BATCH: usize = 64;

/// A running uplink; stops when dropped.
pub struct Uplink {
    stop: Arc<AtomicBool>,
    bell: Arc<OwnedFd>,
    thread: Option<JoinHandle<()>>,
}

fn eventfd() -> std::io::Result<OwnedFd> {
    // SAFETY: no memory arguments; a non-negative result is a fresh fd.
    let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: `fd` is fresh and owned by nothing else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn ring(fd: &OwnedFd) {
    let one = 1u64;
    // SAFETY: writes 8 bytes from `one` to an eventfd; a full counter
    // still leaves it readable.
    unsafe { libc::write(fd.as_raw_fd(), (&one as *const u64).cast(), 8) };
}

fn hush(fd: &OwnedFd) {
    let mut n = 0u64;
    // SAFETY: reads 8 bytes into `n` from an eventfd; an empty one fails
    // with EAGAIN and changes nothing.
    unsafe { libc::read(fd.as_raw_fd(), (&mut n as *mut u64).cast(), 8) };
}

impl Uplink {
    /// Joins `wire` to `switch`.
    pub fn start(switch: &Switch, mut wire: Box<dyn Wire>) -> std::io::Result<Uplink> {
        let bell = Arc::new(eventfd()?);
        let stop = Arc::new(AtomicBool::new(false));
        let mut port = switch.port();
        let b = bell.clone();
        port.set_waker(Arc::new(move || ring(&b)));
        let b = bell.clone();
        wire.set_waker(Arc::new(move || ring(&b)));
        let (s, b) = (stop.clone(), bell.clone());
        let thread = std::thread::Builder::new()
            .name("rnicd-uplink".into())
            .spawn(move || run(&mut port, wire.as_mut(), &b, &s))?;
        Ok(Uplink {
            stop,
            bell,
            thread: Some(thread),
        })
    }
}

impl Drop for Uplink {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        ring(&self.bell);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn run(port: &mut dyn Wire, wire: &mut dyn Wire, bell: &OwnedFd, stop: &AtomicBool) {
    let mut frames: Vec<Frame> = Vec::with_capacity(BATCH);
    let start = std::time::Instant::now();
    while !stop.load(Ordering::Acquire) {
        let now = start.elapsed().as_nanos() as u64;
        wire.poll(now);
        let out = port.recv(&mut frames, BATCH);
        wire.send(&mut frames);
        let inbound = wire.recv(&mut frames, BATCH);
        port.send(&mut frames);
        if out == BATCH || inbound == BATCH {
            continue;
        }
        let mut fds = vec![libc::pollfd {
            fd: bell.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        }];
        if let Some(fd) = wire.wait_fd() {
            fds.push(libc::pollfd {
                fd,
                events: libc::POLLIN,
                revents: 0,
            });
        }
        // A wire with held-back frames (a fault injector) is due then.
        let ms = wire.next_deadline().map_or(-1, |d| {
            let left = d.saturating_sub(start.elapsed().as_nanos() as u64);
            left.div_ceil(1_000_000).min(i32::MAX as u64) as i32
        });
        // SAFETY: `fds` holds initialised pollfds that outlive the call.
        unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        hush(bell);
    }
}

//! Wires: what a NIC's port sends Ethernet frames into and receives them
//! from, and middleware that wraps any wire.
//!
//! A NIC reaches another NIC only through a [`Wire`]: frames are byte
//! buffers that cross through queues, never references to the peer. The
//! implementations:
//!
//! - [`Loopback`]: every frame sent comes back (a NIC alone, talking to
//!   itself);
//! - [`Switch`]: an in-memory Ethernet switch joining any number of NICs in
//!   one process, forwarding by destination MAC (learned from source MACs)
//!   and flooding broadcast, multicast and unknown destinations;
//! - [`UdpWire`]: one frame per UDP datagram, as QEMU's `-netdev socket,udp=`
//!   and `-netdev dgram` carry them: NICs in other processes, or a VM's;
//! - [`ShmWire`]: a ring of frames each way in a file two processes map;
//! - [`ShmFabric`]: any number of NICs in any processes of one host, each
//!   with an inbox file in one directory that the others send into;
//!
//! and the middleware, in smoltcp's style a wire around a wire:
//!
//! - [`Faults`]: drops, duplicates, reorders, delays and corrupts frames,
//!   each at its own rate from a seed, changeable while running;
//! - [`Tap`]: hands every frame sent and received to a function, and
//!   [`Tap::capture`] writes them to a pcap file.

mod capture;
mod fabric;
mod faults;
mod loopback;
mod shm;
mod shm_ring;
mod switch;
mod tap;
mod udp;

use std::os::fd::RawFd;
use std::sync::Arc;

pub use capture::CaptureHandle;
pub use fabric::ShmFabric;
pub use faults::{FaultConfig, FaultHandle, FaultStats, Faults};
pub use loopback::Loopback;
pub use shm::ShmWire;
pub use switch::{Switch, SwitchPort, DEFAULT_PORT_CAPACITY};
pub use tap::{Direction, Tap, TapFn};
pub use udp::UdpWire;

/// An Ethernet frame, from the destination MAC to the end of the payload
/// (no FCS).
pub type Frame = Vec<u8>;

/// What a wire calls when frames arrive for its NIC. It may be called from
/// any thread, with the wire's own locks held: it only notes that there is
/// work and wakes the NIC, and never calls back into the wire.
pub type Waker = Arc<dyn Fn() + Send + Sync>;

/// The link a NIC's port speaks: batches of frames out, batches in.
///
/// A NIC calls these from its device worker (or, in inline mode, from the
/// thread driving it), never while holding its own state lock across a
/// call into another NIC: a wire delivers into queues and calls wakers.
pub trait Wire: Send {
    /// Sends every frame of `frames`, leaving it empty. A wire that cannot
    /// take a frame drops it (and counts it), as a congested link would.
    fn send(&mut self, frames: &mut Vec<Frame>);

    /// Moves up to `max` received frames into `out`; returns how many.
    /// Fewer than `max` means the wire has nothing more until it calls
    /// the waker again.
    fn recv(&mut self, out: &mut Vec<Frame>, max: usize) -> usize;

    /// Sets the function to call when frames arrive.
    fn set_waker(&mut self, waker: Waker);

    /// Runs time-driven work due at `now_ns` (frames a middleware held
    /// back). The NIC calls it on each turn.
    fn poll(&mut self, now_ns: u64) {
        let _ = now_ns;
    }

    /// When [`Wire::poll`] next has work, if ever.
    fn next_deadline(&self) -> Option<u64> {
        None
    }

    /// Whether the wire learns of frames and link changes only when it is
    /// polled (no waker can reach the NIC: shared memory, a socket), so
    /// that whoever runs the NIC must step it to see them: a waiting
    /// thread on each look, an idle device worker when its
    /// [`Wire::wait_fd`] is readable or, without one, now and then. Other
    /// wires call the waker.
    fn polled(&self) -> bool {
        false
    }

    /// Whether a frame the NIC sends to its own MAC comes back to it from
    /// the wire (a loopback, a switch). Where it does not (a point-to-point
    /// link), the NIC loops such frames back itself, as a NIC delivers
    /// traffic between its own QPs without the wire.
    fn reflects(&self) -> bool {
        false
    }

    /// A file descriptor that is readable while frames wait to be polled
    /// (a socket), for an idle device worker to sleep on.
    fn wait_fd(&self) -> Option<RawFd> {
        None
    }

    /// Whether the link is up. A NIC whose link goes down or comes back
    /// reports it (its port's state and an event); a wire calls the waker
    /// when it changes.
    fn link_up(&self) -> bool {
        true
    }

    /// Moves into `pool`, the NIC's pool of frame buffers, buffers of
    /// frames already sent that the wire no longer needs (one that copies
    /// frames out, to a socket or shared memory, is done with them), so
    /// that the NIC builds its next frames in them instead of allocating.
    /// A wire whose buffers others want too may leave a well supplied pool
    /// alone.
    fn reclaim(&mut self, pool: &mut Vec<Frame>) {
        let _ = pool;
    }

    /// Takes buffers of received frames that the NIC has no room to keep,
    /// so that a wire on which frames flow mostly one way can hand them
    /// back, through [`Wire::reclaim`], to the NIC that sends, and a wire
    /// that copies frames in (from a socket) can receive into them (by
    /// default they are freed).
    fn spare(&mut self, frames: &mut Vec<Frame>) {
        frames.clear();
    }
}

impl<W: Wire + ?Sized> Wire for Box<W> {
    fn send(&mut self, frames: &mut Vec<Frame>) {
        (**self).send(frames)
    }

    fn recv(&mut self, out: &mut Vec<Frame>, max: usize) -> usize {
        (**self).recv(out, max)
    }

    fn set_waker(&mut self, waker: Waker) {
        (**self).set_waker(waker)
    }

    fn poll(&mut self, now_ns: u64) {
        (**self).poll(now_ns)
    }

    fn next_deadline(&self) -> Option<u64> {
        (**self).next_deadline()
    }

    fn polled(&self) -> bool {
        (**self).polled()
    }

    fn reflects(&self) -> bool {
        (**self).reflects()
    }

    fn wait_fd(&self) -> Option<RawFd> {
        (**self).wait_fd()
    }

    fn link_up(&self) -> bool {
        (**self).link_up()
    }

    fn reclaim(&mut self, pool: &mut Vec<Frame>) {
        (**self).reclaim(pool)
    }

    fn spare(&mut self, frames: &mut Vec<Frame>) {
        (**self).spare(frames)
    }
}

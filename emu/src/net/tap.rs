//! A tap as wire middleware: hands every frame its NIC sends and receives
//! to a function, for traces that put frames on one timeline with the
//! driver's calls (rnic-middleware's `TraceHal`).

use std::sync::Arc;

use super::{Frame, Waker, Wire};

/// Which way a frame went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// Sent by the NIC.
    Tx,
    /// Received by the NIC.
    Rx,
}

/// What a [`Tap`] calls for each frame.
pub type TapFn = Arc<dyn Fn(Direction, &[u8]) + Send + Sync>;

/// A wire around `W` that calls a function with every frame sent through
/// it (before it goes) and received from it.
pub struct Tap<W> {
    inner: W,
    f: TapFn,
}

impl<W: Wire> Tap<W> {
    /// Wraps `inner`, calling `f` for each frame.
    pub fn new(inner: W, f: TapFn) -> Self {
        Tap { inner, f }
    }
}

impl<W: Wire> Wire for Tap<W> {
    fn send(&mut self, frames: &mut Vec<Frame>) {
        for fr in frames.iter() {
            (self.f)(Direction::Tx, fr);
        }
        self.inner.send(frames);
    }

    fn recv(&mut self, out: &mut Vec<Frame>, max: usize) -> usize {
        let start = out.len();
        let n = self.inner.recv(out, max);
        for fr in &out[start..] {
            (self.f)(Direction::Rx, fr);
        }
        n
    }

    fn set_waker(&mut self, waker: Waker) {
        self.inner.set_waker(waker);
    }

    fn poll(&mut self, now_ns: u64) {
        self.inner.poll(now_ns);
    }

    fn next_deadline(&self) -> Option<u64> {
        self.inner.next_deadline()
    }

    fn reclaim(&mut self, pool: &mut Vec<Frame>) {
        self.inner.reclaim(pool)
    }

    fn spare(&mut self, frames: &mut Vec<Frame>) {
        self.inner.spare(frames)
    }

    fn link_up(&self) -> bool {
        self.inner.link_up()
    }

    fn polled(&self) -> bool {
        self.inner.polled()
    }

    fn reflects(&self) -> bool {
        self.inner.reflects()
    }

    fn wait_fd(&self) -> Option<std::os::fd::RawFd> {
        self.inner.wait_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::net::Loopback;
    use std::sync::Mutex;

    #[test]
    fn sees_both_directions() {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let s = seen.clone();
        let mut w = Tap::new(
            Loopback::default(),
            Arc::new(move |d, f: &[u8]| s.lock().unwrap().push((d, f.len()))),
        );
        w.send(&mut vec![vec![1u8; 60], vec![2u8; 70]]);
        let mut out = Vec::new();
        assert_eq!(w.recv(&mut out, 8), 2);
        assert_eq!(
            *seen.lock().unwrap(),
            [
                (Direction::Tx, 60),
                (Direction::Tx, 70),
                (Direction::Rx, 60),
                (Direction::Rx, 70)
            ]
        );
    }
}

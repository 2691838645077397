//! A wire that hands every frame back to its sender.

use std::collections::VecDeque;

use super::{Frame, Waker, Wire};

/// Every frame sent is received back, in order: the wire of a NIC that
/// talks only to itself (its QPs connected to its own GIDs).
pub struct Loopback {
    queue: VecDeque<Frame>,
    capacity: usize,
    dropped: u64,
    waker: Option<Waker>,
}

impl Loopback {
    /// A loopback holding up to `capacity` frames in flight; more are
    /// dropped.
    pub fn new(capacity: usize) -> Self {
        Self {
            queue: VecDeque::new(),
            capacity,
            dropped: 0,
            waker: None,
        }
    }

    /// Frames dropped because the wire was full.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }
}

impl Default for Loopback {
    fn default() -> Self {
        Self::new(1 << 16)
    }
}

impl std::fmt::Debug for Loopback {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Loopback")
            .field("queued", &self.queue.len())
            .field("dropped", &self.dropped)
            .finish()
    }
}

impl Wire for Loopback {
    /// Every frame comes back.
    fn reflects(&self) -> bool {
        true
    }

    fn send(&mut self, frames: &mut Vec<Frame>) {
        let n = frames.len();
        for f in frames.drain(..) {
            if self.queue.len() < self.capacity {
                self.queue.push_back(f);
            } else {
                self.dropped += 1;
            }
        }
        if n > 0 {
            if let Some(w) = &self.waker {
                w();
            }
        }
    }

    fn recv(&mut self, out: &mut Vec<Frame>, max: usize) -> usize {
        let n = max.min(self.queue.len());
        out.extend(self.queue.drain(..n));
        n
    }

    fn set_waker(&mut self, waker: Waker) {
        self.waker = Some(waker);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::sync::Arc;

    #[test]
    fn frames_come_back_in_order() {
        let mut w = Loopback::new(2);
        let woken = Arc::new(AtomicU32::new(0));
        let k = woken.clone();
        w.set_waker(Arc::new(move || {
            k.fetch_add(1, Ordering::Relaxed);
        }));
        w.send(&mut vec![vec![1], vec![2], vec![3]]);
        assert_eq!(woken.load(Ordering::Relaxed), 1);
        assert_eq!(w.dropped(), 1);
        let mut out = Vec::new();
        assert_eq!(w.recv(&mut out, 8), 2);
        assert_eq!(out, vec![vec![1], vec![2]]);
        assert_eq!(w.recv(&mut out, 8), 0);
    }
}

//! The device clock: the time base of every transport timer (retransmit,
//! RNR back-off, neighbour resolution) and of the fault injector's delays.
//!
//! A device runs on the host's monotonic clock ([`Clock::real`]) or on a
//! [`VirtualClock`] that only moves when a test advances it, so that
//! timeouts, retries and back-offs are deterministic and take no wall time.
//! Advancing a virtual clock wakes every device that uses it: an inline
//! device runs its due timers in the advancing thread, a device worker on
//! its next turn.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

/// What a clock calls when its time jumps.
pub(crate) type Wake = Weak<dyn Fn() + Send + Sync>;

/// A device's time base. Cheap to clone; clones share one time.
#[derive(Clone)]
pub struct Clock(Base);

#[derive(Clone)]
enum Base {
    Real(Instant),
    Virtual(Arc<Virtual>),
}

struct Virtual {
    ns: AtomicU64,
    wakers: Mutex<Vec<Wake>>,
}

impl Clock {
    /// The host's monotonic clock, starting at 0 now.
    pub fn real() -> Clock {
        Clock(Base::Real(Instant::now()))
    }

    /// Nanoseconds since the clock started.
    pub fn now_ns(&self) -> u64 {
        match &self.0 {
            Base::Real(t0) => t0.elapsed().as_nanos() as u64,
            Base::Virtual(v) => v.ns.load(Ordering::Acquire),
        }
    }

    /// Whether this is a virtual clock.
    pub fn is_virtual(&self) -> bool {
        matches!(self.0, Base::Virtual(_))
    }

    /// Registers `wake` to be called when a virtual clock advances (a real
    /// clock never calls it). Dead entries are dropped as they are found.
    pub(crate) fn on_advance(&self, wake: Wake) {
        if let Base::Virtual(v) = &self.0 {
            let mut w = v.wakers.lock().unwrap_or_else(|e| e.into_inner());
            w.retain(|x| x.strong_count() > 0);
            w.push(wake);
        }
    }
}

impl Default for Clock {
    fn default() -> Self {
        Clock::real()
    }
}

impl fmt::Debug for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Base::Real(_) => write!(f, "Clock::real({} ns)", self.now_ns()),
            Base::Virtual(_) => write!(f, "Clock::virtual({} ns)", self.now_ns()),
        }
    }
}

/// A clock that moves only when told to.
#[derive(Clone)]
pub struct VirtualClock(Arc<Virtual>);

impl VirtualClock {
    /// A virtual clock at time 0.
    pub fn new() -> VirtualClock {
        VirtualClock(Arc::new(Virtual {
            ns: AtomicU64::new(0),
            wakers: Mutex::new(Vec::new()),
        }))
    }

    /// The clock devices take (shares this clock's time).
    pub fn clock(&self) -> Clock {
        Clock(Base::Virtual(self.0.clone()))
    }

    /// Current time in nanoseconds.
    pub fn now_ns(&self) -> u64 {
        self.0.ns.load(Ordering::Acquire)
    }

    /// Moves the time forward by `d` and wakes every device on this clock,
    /// in the calling thread (inline devices run their due timers before
    /// this returns).
    pub fn advance(&self, d: Duration) {
        self.0.ns.fetch_add(d.as_nanos() as u64, Ordering::AcqRel);
        let wakers: Vec<_> = self
            .0
            .wakers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for w in wakers {
            w();
        }
    }
}

impl Default for VirtualClock {
    fn default() -> Self {
        VirtualClock::new()
    }
}

impl fmt::Debug for VirtualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "VirtualClock({} ns)", self.now_ns())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::AtomicU32;

    #[test]
    fn virtual_time_moves_only_when_advanced() {
        let v = VirtualClock::new();
        let c = v.clock();
        assert!(c.is_virtual());
        assert_eq!(c.now_ns(), 0);
        let hits = Arc::new(AtomicU32::new(0));
        let h = hits.clone();
        let wake: Arc<dyn Fn() + Send + Sync> = Arc::new(move || {
            h.fetch_add(1, Ordering::Relaxed);
        });
        c.on_advance(Arc::downgrade(&wake));
        v.advance(Duration::from_micros(3));
        assert_eq!(c.now_ns(), 3000);
        assert_eq!(hits.load(Ordering::Relaxed), 1);
        drop(wake);
        v.advance(Duration::from_micros(1));
        assert_eq!(
            hits.load(Ordering::Relaxed),
            1,
            "a dropped waker is not called"
        );
        let r = Clock::real();
        assert!(!r.is_virtual());
        assert!(r.now_ns() < 1_000_000_000);
    }
}

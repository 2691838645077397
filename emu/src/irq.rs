//! Interrupt lines: what `EmuHal::wait_irq` waits on.
//!
//! The model raises a vector when an unmasked interrupt cause becomes set
//! (see `regs`), counting raises that nobody has waited for yet, so that a
//! raise between a driver's check and its wait is not lost.

use std::collections::HashMap;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// Pending interrupt counts per MSI-X vector.
#[derive(Debug, Default)]
pub(crate) struct IrqLines {
    pending: Mutex<HashMap<u16, u32>>,
    cv: Condvar,
}

impl IrqLines {
    /// Raises `vector`.
    pub(crate) fn raise(&self, vector: u16) {
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        *p.entry(vector).or_default() += 1;
        self.cv.notify_all();
    }

    /// Waits up to `timeout_ns` for `vector`; consumes one raise.
    pub(crate) fn wait(&self, vector: u16, timeout_ns: u64) -> bool {
        let deadline = Instant::now() + Duration::from_nanos(timeout_ns);
        let mut p = self.pending.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(n) = p.get_mut(&vector).filter(|n| **n > 0) {
                *n -= 1;
                return true;
            }
            let now = Instant::now();
            if now >= deadline {
                return false;
            }
            p = self
                .cv
                .wait_timeout(p, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Drops every pending raise (device reset).
    pub(crate) fn clear(&self) {
        self.pending
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clear();
    }
}

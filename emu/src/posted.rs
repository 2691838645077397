//! Doorbell writes that reach the device through memory rather than as
//! calls: a platform whose driver runs in another process (rnicd's
//! vfio-user clients) queues them in memory both share, as posted writes
//! cross a PCIe link, and the device takes them in order on each of its
//! steps.

use std::fmt::Debug;
use std::os::fd::RawFd;

/// A queue of doorbell writes, consumed by the device
/// ([`crate::EmuBuilder::posted_writes`]). The device pops only from the
/// step that holds its state, one at a time.
pub trait PostedWrites: Send + Sync + Debug {
    /// The next write: a BAR 2 byte offset and the 64-bit value written.
    fn pop(&self) -> Option<(u64, u64)>;

    /// Whether a write waits.
    fn pending(&self) -> bool;

    /// The device's worker is about to sleep: from now on a new write
    /// must signal [`PostedWrites::wait_fd`]. Returns whether a write
    /// came meanwhile, when it must not sleep.
    fn nap(&self) -> bool;

    /// The worker is awake: writes need not signal it.
    fn wake(&self);

    /// A descriptor that becomes readable when a write comes while the
    /// worker sleeps.
    fn wait_fd(&self) -> RawFd;
}

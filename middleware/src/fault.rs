//! [`FaultHal`]: a `Hal` that injects platform and device faults, to test
//! how a driver takes them: registers that read wrong, command doorbells
//! the device never sees (timeouts), DMA allocations and mappings that
//! fail, BlueFlame writes refused, and through the device's [`Boundary`]
//! faults of its own interface: for rnic, commands the device refuses or
//! that hand out a number already in use and CQEs that are corrupt or out
//! of range ([`RnicFaults`](crate::RnicFaults)); for PVRDMA, responses
//! with the wrong ack, cookie or error and CQEs that name the wrong QP or
//! status ([`PvrdmaFaults`](crate::PvrdmaFaults)).
//!
//! Faults are set at any time through a [`FaultHandle`] and each fires
//! once unless it says otherwise. Faults on what the device writes back
//! (command results, CQEs) are applied at the driver's next call after
//! the device wrote it, and right after a write is passed on: with a
//! device that runs in the calling thread (the model's inline mode), that
//! is before the driver reads them.

use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard};

use rnic_queues::{DmaRegion, Hal, HalError};

use crate::boundary::{Boundary, Dma};
use crate::rnic::Rnic;

/// The faults to inject: the platform's, and `D`, those of the device's
/// own interface ([`RnicFaults`](crate::RnicFaults),
/// [`PvrdmaFaults`](crate::PvrdmaFaults)).
#[derive(Debug, Clone, Default)]
pub struct Faults<D> {
    /// Register reads `(bar, offset)` that give `value` instead, for as
    /// long as they are set.
    pub reads: Vec<(u8, usize, u32)>,
    /// Command doorbells ([`Boundary::COMMAND_DOORBELL`]) go nowhere, for
    /// as long as it is set: the device does not run the commands, and the
    /// driver times out. Cleared, the last doorbell swallowed reaches the
    /// device at the next call, as from a device that was only slow.
    pub hang_commands: bool,
    /// How many of the next `dma_alloc` calls fail.
    pub fail_dma_allocs: u32,
    /// How many of the next `dma_map` calls fail.
    pub fail_dma_maps: u32,
    /// `dma_unmap_retired` is not supported, as on a platform that cannot
    /// retire IOVAs.
    pub retire_unsupported: bool,
    /// 64-byte `mmio_write_block` writes (BlueFlame) are unsupported, for
    /// as long as it is set, as on a platform without write-combining
    /// mappings.
    pub refuse_blocks: bool,
    /// The device's faults.
    pub device: D,
}

/// What was injected so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Injected {
    /// Register reads answered from [`Faults::reads`].
    pub reads: u64,
    /// Command doorbells swallowed.
    pub commands_hung: u64,
    /// DMA allocations and mappings failed.
    pub dma_failures: u64,
    /// Command results changed.
    pub commands_changed: u64,
    /// CQEs changed.
    pub cqes_changed: u64,
    /// 64-byte writes refused.
    pub blocks_refused: u64,
}

struct Injection<B: Boundary> {
    faults: Faults<B::Faults>,
    injected: Injected,
    /// The last command doorbell swallowed.
    swallowed: Option<u32>,
}

/// Sets the faults of a [`FaultHal`] and reads what it injected.
pub struct FaultHandle<B: Boundary = Rnic>(Arc<Mutex<Injection<B>>>);

impl<B: Boundary> Clone for FaultHandle<B> {
    fn clone(&self) -> Self {
        FaultHandle(self.0.clone())
    }
}

impl<B: Boundary> FaultHandle<B> {
    fn lock(&self) -> MutexGuard<'_, Injection<B>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Changes the faults.
    pub fn set(&self, f: impl FnOnce(&mut Faults<B::Faults>)) {
        f(&mut self.lock().faults);
    }

    /// What was injected so far.
    pub fn injected(&self) -> Injected {
        self.lock().injected
    }
}

/// A `Hal` that injects faults into the calls it passes on (see the module
/// documentation), into the interface of device kind `B`.
pub struct FaultHal<H: Hal, B: Boundary = Rnic> {
    inner: H,
    shadow: Mutex<(Dma, B)>,
    shared: Arc<Mutex<Injection<B>>>,
}

impl<H: Hal> FaultHal<H, Rnic> {
    /// Wraps `inner`, an rnic device's platform, with no fault set; the
    /// handle sets them.
    pub fn new(inner: H) -> (Self, FaultHandle) {
        Self::of(inner)
    }
}

impl<H: Hal, B: Boundary> FaultHal<H, B> {
    /// Wraps `inner`, the platform of a device of kind `B`, with no fault
    /// set: `FaultHal::<_, Pvrdma>::of(vfio)`.
    pub fn of(inner: H) -> (Self, FaultHandle<B>) {
        let shared = Arc::new(Mutex::new(Injection {
            faults: Faults::default(),
            injected: Injected::default(),
            swallowed: None,
        }));
        let h = FaultHal {
            inner,
            shadow: Mutex::new((Dma::default(), B::default())),
            shared: shared.clone(),
        };
        (h, FaultHandle(shared))
    }

    /// The platform inside.
    pub fn inner(&self) -> &H {
        &self.inner
    }

    fn shared(&self) -> MutexGuard<'_, Injection<B>> {
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn shadow(&self) -> MutexGuard<'_, (Dma, B)> {
        self.shadow.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Applies the faults set on what the device wrote since the last
    /// look.
    fn look(&self) {
        let late = {
            let mut f = self.shared();
            if f.faults.hang_commands {
                None
            } else {
                f.swallowed.take()
            }
        };
        if let Some(v) = late {
            let (bar, offset) = B::COMMAND_DOORBELL;
            if self.write(bar, offset, v) {
                self.inner.mmio_write32(bar, offset, v);
            }
        }
        let mut sh = self.shadow();
        let (dma, device) = &mut *sh;
        let mut f = self.shared();
        let Injection {
            faults, injected, ..
        } = &mut *f;
        device.inject_look(dma, &mut faults.device, injected);
    }

    /// Whether a write is passed on: a swallowed command doorbell is not.
    fn write(&self, bar: u8, offset: usize, value: u32) -> bool {
        self.look();
        if (bar, offset) == B::COMMAND_DOORBELL {
            let mut f = self.shared();
            if f.faults.hang_commands {
                f.injected.commands_hung += 1;
                f.swallowed = Some(value);
                return false;
            }
            f.swallowed = None;
        }
        let mut sh = self.shadow();
        let (dma, device) = &mut *sh;
        let mut f = self.shared();
        let Injection {
            faults, injected, ..
        } = &mut *f;
        device.inject_write(dma, bar, offset, value.into(), &mut faults.device, injected);
        true
    }
}

// SAFETY: every call goes to `inner`, which keeps the trait's promises,
// or fails before reaching it (a failed call hands out nothing); the
// memory overwritten is what the device wrote back into regions `inner`
// handed out and has not taken back, as a faulty device would write it.
unsafe impl<H: Hal, B: Boundary> Hal for FaultHal<H, B> {
    fn dma_alloc(&self, len: usize) -> Result<DmaRegion, HalError> {
        {
            let mut f = self.shared();
            if f.faults.fail_dma_allocs > 0 {
                f.faults.fail_dma_allocs -= 1;
                f.injected.dma_failures += 1;
                return Err(HalError::NoMemory);
            }
        }
        let r = self.inner.dma_alloc(len)?;
        self.shadow().0.alloc(&r);
        Ok(r)
    }

    unsafe fn dma_free(&self, region: DmaRegion) {
        self.shadow().0.free(region.iova());
        // SAFETY: the caller's promise, passed on.
        unsafe { self.inner.dma_free(region) }
    }

    unsafe fn dma_map(&self, vaddr: NonNull<u8>, len: usize) -> Result<u64, HalError> {
        {
            let mut f = self.shared();
            if f.faults.fail_dma_maps > 0 {
                f.faults.fail_dma_maps -= 1;
                f.injected.dma_failures += 1;
                return Err(HalError::NoMemory);
            }
        }
        // SAFETY: the caller's promise, passed on.
        unsafe { self.inner.dma_map(vaddr, len) }
    }

    unsafe fn dma_unmap(&self, iova: u64, len: usize) -> Result<(), HalError> {
        // SAFETY: the caller's promise, passed on.
        unsafe { self.inner.dma_unmap(iova, len) }
    }

    unsafe fn dma_unmap_retired(&self, iova: u64, len: usize) -> Result<(), HalError> {
        if self.shared().faults.retire_unsupported {
            return Err(HalError::Unsupported);
        }
        // SAFETY: the caller's promise, passed on.
        unsafe { self.inner.dma_unmap_retired(iova, len) }
    }

    fn mmio_read32(&self, bar: u8, offset: usize) -> u32 {
        let v = self.inner.mmio_read32(bar, offset);
        self.look();
        self.shadow().1.learn_read(bar, offset, v);
        let mut f = self.shared();
        let forced = f
            .faults
            .reads
            .iter()
            .find(|r| r.0 == bar && r.1 == offset)
            .map(|r| r.2);
        match forced {
            Some(x) => {
                f.injected.reads += 1;
                x
            }
            None => v,
        }
    }

    fn mmio_write32(&self, bar: u8, offset: usize, value: u32) {
        if self.write(bar, offset, value) {
            self.inner.mmio_write32(bar, offset, value);
        }
        self.look();
    }

    fn mmio_write64(&self, bar: u8, offset: usize, value: u64) {
        self.look();
        self.inner.mmio_write64(bar, offset, value);
        self.look();
    }

    fn mmio_write_block(&self, bar: u8, offset: usize, block: &[u64; 8]) -> Result<(), HalError> {
        self.look();
        {
            let mut f = self.shared();
            if f.faults.refuse_blocks {
                f.injected.blocks_refused += 1;
                return Err(HalError::Unsupported);
            }
        }
        let r = self.inner.mmio_write_block(bar, offset, block);
        self.look();
        r
    }

    fn now_ns(&self) -> u64 {
        let t = self.inner.now_ns();
        self.look();
        t
    }

    fn wait_irq(&self, vector: u16, timeout_ns: u64) -> Result<bool, HalError> {
        let r = self.inner.wait_irq(vector, timeout_ns);
        self.look();
        r
    }

    fn irq_eventfd(&self, vector: u16) -> Option<i32> {
        self.inner.irq_eventfd(vector)
    }

    fn bar_address(&self, bar: u8) -> Option<u64> {
        self.inner.bar_address(bar)
    }

    fn relax(&self) {
        self.inner.relax();
        self.look();
    }

    fn poll_empty(&self) {
        self.inner.poll_empty();
        self.look();
    }
}

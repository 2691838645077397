//! [`FaultHal`]: a `Hal` that injects platform and device faults, to test
//! how a driver takes them: registers that read wrong, command doorbells
//! the device never sees (timeouts), DMA allocations and mappings that
//! fail, commands the device refuses or that hand out a number already
//! in use, and
//! CQEs that are corrupt or out of range.
//!
//! Faults are set at any time through a [`FaultHandle`] and each fires
//! once unless it says otherwise. Faults on what the device writes back
//! (command results, CQEs) are applied at the driver's next call after
//! the device wrote it, and right after a write is passed on: with a
//! device that runs in the calling thread (the model's inline mode), that
//! is before the driver reads them.

use std::mem::offset_of;
use std::ptr::NonNull;
use std::sync::{Arc, Mutex, MutexGuard};

use rnic_hw_regs::bar0;
use rnic_hw_regs::cmd::{CmdHeader, CmdOpcode, CmdStatus, CMD_IN_SIZE, CMD_STATUS_OFFSET};
use rnic_hw_regs::cqe::Cqe;
use rnic_hw_regs::pci::BAR_REGS;
use rnic_queues::{DmaRegion, Hal, HalError};

use crate::shadow::{copy, overwrite, Shadow};

/// A change to the next CQE the device writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CqeFault {
    /// Its QP number (a QP the CQ does not serve).
    Qpn(u32),
    /// Its `wqe_counter` (outside the QP's outstanding WQEs).
    WqeCounter(u16),
    /// Its status byte (an unknown value).
    Status(u8),
    /// Its opcode byte.
    Opcode(u8),
}

/// The faults to inject.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// Register reads `(bar, offset)` that give `value` instead, for as
    /// long as they are set.
    pub reads: Vec<(u8, usize, u32)>,
    /// Command doorbells go nowhere, for as long as it is set: the device
    /// does not run the commands, and the driver times out. Cleared, the
    /// last doorbell swallowed reaches the device at the next call, as
    /// from a device that was only slow.
    pub hang_commands: bool,
    /// How many of the next `dma_alloc` calls fail.
    pub fail_dma_allocs: u32,
    /// How many of the next `dma_map` calls fail.
    pub fail_dma_maps: u32,
    /// The next command of this opcode is refused with this status and
    /// syndrome: the device never runs it (it is handed an opcode it does
    /// not know in its place), as a device refuses a command.
    pub fail_command: Option<(CmdOpcode, CmdStatus, u32)>,
    /// The next successful command of this opcode reports this number as
    /// its output's first word (a CQN, QPN, PDN…), whatever the device
    /// chose.
    pub number: Option<(CmdOpcode, u32)>,
    /// The next CQE the device writes is changed so.
    pub cqe: Option<CqeFault>,
    /// `dma_unmap_retired` is not supported, as on a platform that cannot
    /// retire IOVAs.
    pub retire_unsupported: bool,
    /// 64-byte `mmio_write_block` writes (BlueFlame) are unsupported, for
    /// as long as it is set, as on a platform without write-combining
    /// mappings.
    pub refuse_blocks: bool,
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

#[derive(Default)]
struct Shared {
    faults: Faults,
    injected: Injected,
    /// Commands handed over under [`UNKNOWN_OPCODE`]: (index, their own
    /// opcode, the status and syndrome they complete with).
    refused: Vec<(u32, CmdOpcode, CmdStatus, u32)>,
    /// The last command doorbell swallowed.
    swallowed: Option<u32>,
}

/// The opcode a refused command is handed to the device under: one no
/// version of the spec defines, which the device completes without doing
/// anything.
const UNKNOWN_OPCODE: u16 = 0xffff;

/// Sets the faults of a [`FaultHal`] and reads what it injected.
#[derive(Clone)]
pub struct FaultHandle(Arc<Mutex<Shared>>);

impl FaultHandle {
    fn lock(&self) -> MutexGuard<'_, Shared> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Changes the faults.
    pub fn set(&self, f: impl FnOnce(&mut Faults)) {
        f(&mut self.lock().faults);
    }

    /// What was injected so far.
    pub fn injected(&self) -> Injected {
        self.lock().injected
    }
}

/// A `Hal` that injects faults into the calls it passes on (see the module
/// documentation).
pub struct FaultHal<H: Hal> {
    inner: H,
    shadow: Mutex<Shadow>,
    shared: Arc<Mutex<Shared>>,
}

impl<H: Hal> FaultHal<H> {
    /// Wraps `inner`, with no fault set; the handle sets them.
    pub fn new(inner: H) -> (Self, FaultHandle) {
        let shared = Arc::new(Mutex::new(Shared::default()));
        let h = FaultHal {
            inner,
            shadow: Mutex::new(Shadow::default()),
            shared: shared.clone(),
        };
        (h, FaultHandle(shared))
    }

    /// The platform inside.
    pub fn inner(&self) -> &H {
        &self.inner
    }

    fn shared(&self) -> MutexGuard<'_, Shared> {
        self.shared.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn shadow(&self) -> MutexGuard<'_, Shadow> {
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
            if self.write(BAR_REGS, bar0::CMDQ_DB, v) {
                self.inner.mmio_write32(BAR_REGS, bar0::CMDQ_DB, v);
            }
        }
        let mut sh = self.shadow();
        let mut f = self.shared();
        for c in sh.take_completions() {
            let hdr = std::mem::size_of::<CmdHeader>();
            if let Some(i) = f.refused.iter().position(|r| r.0 == c.index) {
                let (_, op, status, syndrome) = f.refused.swap_remove(i);
                overwrite(
                    c.ring,
                    offset_of!(CmdHeader, opcode),
                    &op.raw().to_le_bytes(),
                );
                overwrite(c.ring, CMD_STATUS_OFFSET, &[status.raw()]);
                overwrite(
                    c.ring,
                    offset_of!(CmdHeader, syndrome),
                    &syndrome.to_le_bytes(),
                );
            }
            if let Some((op, n)) = f.faults.number {
                let ok = copy(c.ring, CMD_STATUS_OFFSET, 1)[0] == CmdStatus::Ok.raw();
                if c.op == Some(op) && ok {
                    overwrite(c.ring, hdr + CMD_IN_SIZE, &n.to_le_bytes());
                    f.faults.number = None;
                    f.injected.commands_changed += 1;
                }
            }
            let now = copy(c.ring, 0, c.ring.len);
            sh.learn(c.op, &c.entry, &now);
        }
        for q in sh.take_cqes() {
            let Some(fault) = f.faults.cqe.take() else {
                continue;
            };
            let (at, bytes): (usize, Vec<u8>) = match fault {
                CqeFault::Qpn(n) => (offset_of!(Cqe, qpn), n.to_le_bytes().to_vec()),
                CqeFault::WqeCounter(n) => (offset_of!(Cqe, wqe_counter), n.to_le_bytes().to_vec()),
                CqeFault::Opcode(n) => (offset_of!(Cqe, opcode), vec![n]),
                CqeFault::Status(n) => (offset_of!(Cqe, status), vec![n]),
            };
            overwrite(q.ring, q.at + at, &bytes);
            f.injected.cqes_changed += 1;
        }
    }

    fn write(&self, bar: u8, offset: usize, value: u32) -> bool {
        self.look();
        if bar != BAR_REGS {
            return true;
        }
        if offset == bar0::CMDQ_DB {
            let mut f = self.shared();
            if f.faults.hang_commands {
                f.injected.commands_hung += 1;
                f.swallowed = Some(value);
                return false;
            }
            f.swallowed = None;
        }
        let mut sh = self.shadow();
        for h in sh.on_bar0_write(offset, value) {
            let mut f = self.shared();
            let Some((op, status, syndrome)) = f.faults.fail_command else {
                break;
            };
            let hdr: CmdHeader = crate::decode::read(&h.entry);
            if hdr.opcode.to_ne() != op.raw() {
                continue;
            }
            if let Some(ring) = sh.cmd_entry(h.index) {
                overwrite(
                    ring,
                    offset_of!(CmdHeader, opcode),
                    &UNKNOWN_OPCODE.to_le_bytes(),
                );
                f.refused.push((h.index, op, status, syndrome));
                f.faults.fail_command = None;
                f.injected.commands_changed += 1;
            }
        }
        true
    }
}

// SAFETY: every call goes to `inner`, which keeps the trait's promises,
// or fails before reaching it (a failed call hands out nothing); the
// memory overwritten is what the device wrote back into regions `inner`
// handed out and has not taken back, as a faulty device would write it.
unsafe impl<H: Hal> Hal for FaultHal<H> {
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
        self.shadow().on_alloc(&r);
        Ok(r)
    }

    unsafe fn dma_free(&self, region: DmaRegion) {
        self.shadow().on_free(region.iova());
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

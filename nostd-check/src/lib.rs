//! Build-time proof that the rnic driver stack links without `std`.
//!
//! This crate is `#![no_std]`, brings its own `#[panic_handler]` and
//! `#[global_allocator]`, and uses items of `rnic-hw-regs`, `rnic-pvrdma-regs`,
//! `rnic-queues`, `rnic-driver`, `rnic-pvrdma` and `rnic-cm`. The check is the link build:
//!
//! ```text
//! cargo rustc -p rnic-nostd-check --profile nostd --crate-type staticlib
//! ```
//!
//! It makes a self-contained static library with `panic = "abort"`, so every
//! lang item must be resolved from this crate and its dependencies. If any of
//! them (or anything they depend on) pulls in `std`, `std` brings a second
//! `panic_impl` and the build fails with `error[E0152]: found duplicate lang
//! item panic_impl`, "the lang item is first defined in crate `std` (which
//! `rnic_driver` depends on)". Verified by hand: adding `extern crate std;` to
//! a copy of this file, or removing `#![no_std]` from a copy of the driver,
//! fails that way; reverting makes the build pass again.
//!
//! The panic handler and the allocator exist only in that build
//! (`cfg(panic = "abort")`). Ordinary workspace builds (`cargo clippy
//! --workspace`, `cargo test --workspace`) see a plain rlib without them, for
//! two reasons: rustc refuses a no_std final artifact under their
//! `panic = "unwind"`, and workspace-wide feature unification may turn on the
//! `std` feature of a shared dependency (say `log`) on behalf of the device
//! model, which would be a false alarm here. The link build resolves features
//! for this crate's own dependency graph only.
//!
//! Nothing here runs: the exported functions exist so that the referenced
//! items are really instantiated and linked into the archive.
#![no_std]
#![no_main]
#![deny(missing_docs)]

extern crate alloc;

use alloc::boxed::Box;
use core::ptr::NonNull;
use core::sync::atomic::{AtomicU64, Ordering};

use rnic_driver::Context;
use rnic_hw_regs::cqe::Cqe;
use rnic_pvrdma_regs::bar1::VERSION_QPHANDLE;
use rnic_pvrdma_regs::dsr::Dsr;
use rnic_pvrdma_regs::le32;
use rnic_queues::{ConsumerRing, DmaRegion, Hal, HalError};

/// What a final no_std artifact must provide itself; only the link check
/// (`panic = "abort"`) builds one.
#[cfg(panic = "abort")]
mod runtime {
    use core::alloc::{GlobalAlloc, Layout};
    use core::cell::UnsafeCell;
    use core::sync::atomic::{AtomicUsize, Ordering};

    /// Size of the bump allocator's arena.
    const ARENA_SIZE: usize = 64 * 1024;

    /// A bump allocator over a static arena that never frees: enough to link
    /// `alloc`, which is all this crate needs.
    struct BumpAlloc {
        arena: UnsafeCell<[u8; ARENA_SIZE]>,
        next: AtomicUsize,
    }

    // SAFETY: every allocation hands out a disjoint range of the arena, claimed
    // with an atomic compare-exchange, so concurrent callers never alias.
    unsafe impl Sync for BumpAlloc {}

    // SAFETY: `alloc` returns either null or a range of `layout.size()` bytes
    // aligned to `layout.align()` inside the arena that no other allocation
    // overlaps (ranges are claimed atomically and never reused).
    unsafe impl GlobalAlloc for BumpAlloc {
        unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
            let base = self.arena.get().cast::<u8>();
            let mut cur = self.next.load(Ordering::Relaxed);
            loop {
                let addr = base as usize + cur;
                let start = addr.next_multiple_of(layout.align()) - base as usize;
                let Some(end) = start.checked_add(layout.size()) else {
                    return core::ptr::null_mut();
                };
                if end > ARENA_SIZE {
                    return core::ptr::null_mut();
                }
                match self.next.compare_exchange_weak(
                    cur,
                    end,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                ) {
                    // SAFETY: `start <= end <= ARENA_SIZE`, so the pointer stays
                    // inside the arena.
                    Ok(_) => return unsafe { base.add(start) },
                    Err(seen) => cur = seen,
                }
            }
        }

        unsafe fn dealloc(&self, _ptr: *mut u8, _layout: Layout) {}
    }

    #[global_allocator]
    static ALLOCATOR: BumpAlloc = BumpAlloc {
        arena: UnsafeCell::new([0; ARENA_SIZE]),
        next: AtomicUsize::new(0),
    };

    #[panic_handler]
    fn panic(_info: &core::panic::PanicInfo<'_>) -> ! {
        // No unwinding and no OS to return to: a panic parks the CPU.
        loop {
            core::hint::spin_loop();
        }
    }
}

/// A platform with no device behind it: registers read all ones (as a PCI
/// read of an absent function does), there is no DMA memory, and the clock
/// advances 1 ms per reading so that every driver timeout expires.
#[derive(Debug, Clone, Copy, Default)]
pub struct NullHal;

/// The fake clock of [`NullHal`].
static NULL_HAL_NOW_NS: AtomicU64 = AtomicU64::new(0);

// SAFETY: `dma_alloc` and `dma_map` never succeed, so no region or mapping
// exists for the guarantees to cover, and BAR accesses touch no memory.
unsafe impl Hal for NullHal {
    fn dma_alloc(&self, _len: usize) -> Result<DmaRegion, HalError> {
        Err(HalError::NoMemory)
    }

    unsafe fn dma_free(&self, _region: DmaRegion) {}

    unsafe fn dma_map(&self, _vaddr: NonNull<u8>, _len: usize) -> Result<u64, HalError> {
        Err(HalError::NoIova)
    }

    unsafe fn dma_unmap(&self, _iova: u64, _len: usize) -> Result<(), HalError> {
        Err(HalError::NotMapped)
    }

    fn mmio_read32(&self, _bar: u8, _offset: usize) -> u32 {
        u32::MAX
    }

    fn mmio_write32(&self, _bar: u8, _offset: usize, _value: u32) {}

    fn mmio_write64(&self, _bar: u8, _offset: usize, _value: u64) {}

    fn now_ns(&self) -> u64 {
        NULL_HAL_NOW_NS.fetch_add(1_000_000, Ordering::Relaxed)
    }
}

/// Opens the device behind [`NullHal`] with the driver, which instantiates
/// the driver's generic code in this archive: 1 if bring-up succeeded, else 0
/// (always 0 here: there is no device).
#[no_mangle]
pub extern "C" fn rnic_nostd_check_probe() -> u32 {
    u32::from(Context::open(NullHal).is_ok())
}

/// Opens the device behind [`NullHal`] with the PVRDMA provider: 1 if
/// bring-up succeeded, else 0 (always 0 here: there is no device).
#[no_mangle]
pub extern "C" fn rnic_nostd_check_pvrdma_probe() -> u32 {
    u32::from(rnic_pvrdma::provider::Context::open(NullHal).is_ok())
}

/// Polls a freshly zeroed, heap-allocated four-entry CQ ring with
/// [`ConsumerRing`]; returns the number of CQEs found (0: a zeroed ring holds
/// no valid entries).
#[no_mangle]
pub extern "C" fn rnic_nostd_check_poll_empty_cq() -> u32 {
    const LOG_SIZE: u32 = 2;
    let ring = Box::new([Cqe::default(); 1 << LOG_SIZE]);
    let len = core::mem::size_of_val(&*ring);
    let ring = NonNull::from(Box::leak(ring)).cast::<u8>();
    // SAFETY: the leaked box stays valid for reads and writes of `len` bytes
    // for the rest of the program.
    let region = unsafe { DmaRegion::new(ring, 0, len) };
    // SAFETY: `region` describes leaked memory, which outlives the ring.
    let mut cq = unsafe { ConsumerRing::<Cqe>::new(&region, LOG_SIZE) };
    core::iter::from_fn(|| cq.pop()).count() as u32
}

/// Writes a PVRDMA device-shared region into leaked heap memory through
/// [`DmaRegion`] and reads it back: the PVRDMA layouts link without `std`.
/// Returns the driver version read back.
#[no_mangle]
pub extern "C" fn rnic_nostd_check_pvrdma_dsr() -> u32 {
    let buf = Box::new(Dsr::default());
    let len = core::mem::size_of_val(&*buf);
    let buf = NonNull::from(Box::leak(buf)).cast::<u8>();
    // SAFETY: the leaked box stays valid for reads and writes of `len` bytes
    // for the rest of the program.
    let region = unsafe { DmaRegion::new(buf, 0, len) };
    let dsr = Dsr {
        driver_version: le32::from_ne(VERSION_QPHANDLE),
        ..Default::default()
    };
    region.write(0, dsr);
    region.read::<Dsr>(0).driver_version.to_ne()
}

/// Writes a CM RTU into a MAD and reads it back: the communication
/// manager's wire formats link without `std`. Returns the communication ID
/// read back.
#[no_mangle]
pub extern "C" fn rnic_nostd_check_cm_rtu() -> u32 {
    use rnic_cm::msg::Message;
    use rnic_cm::rtu::{RtuRepr, PRIVATE_DATA_LEN};
    let rtu = Message::Rtu(RtuRepr {
        local_comm_id: 7,
        remote_comm_id: 9,
        private_data: [0; PRIVATE_DATA_LEN],
    });
    match Message::parse(&rtu.emit(1)) {
        Ok((_, Message::Rtu(r))) => r.local_comm_id,
        _ => 0,
    }
}

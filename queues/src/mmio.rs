//! Volatile access to a mapped BAR.

use core::ptr::NonNull;

use volatile::VolatilePtr;

/// A memory-mapped BAR: every access is a volatile load or store of the
/// access's natural width, bounds- and alignment-checked.
#[derive(Debug)]
pub struct MmioRegion {
    base: NonNull<u8>,
    len: usize,
}

// SAFETY: an MmioRegion is a view of device registers; concurrent volatile
// accesses from several threads are what the hardware expects.
unsafe impl Send for MmioRegion {}
// SAFETY: as above; no method hands out references into the region.
unsafe impl Sync for MmioRegion {}

impl MmioRegion {
    /// Wraps a mapped BAR.
    ///
    /// # Safety
    ///
    /// `base .. base + len` must be a mapping of device registers (or of
    /// memory) valid for volatile reads and writes for the lifetime of the
    /// returned value.
    pub unsafe fn new(base: NonNull<u8>, len: usize) -> Self {
        Self { base, len }
    }

    /// Length of the region in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn ptr<T: Copy>(&self, offset: usize) -> VolatilePtr<'_, T> {
        let size = core::mem::size_of::<T>();
        assert!(
            offset % size == 0 && offset.checked_add(size).is_some_and(|end| end <= self.len),
            "MMIO access at {offset:#x} (size {size}) outside a BAR of {:#x} bytes or unaligned",
            self.len
        );
        // SAFETY: the range is inside the mapping (checked above) and the
        // constructor's contract makes it valid for volatile access.
        unsafe { VolatilePtr::new(self.base.add(offset).cast::<T>()) }
    }

    /// Reads the 32-bit register at `offset`.
    pub fn read32(&self, offset: usize) -> u32 {
        u32::from_le(self.ptr::<u32>(offset).read())
    }

    /// Writes the 32-bit register at `offset`.
    pub fn write32(&self, offset: usize, value: u32) {
        self.ptr::<u32>(offset).write(value.to_le());
    }

    /// Writes the 64-bit register at `offset` with one store.
    pub fn write64(&self, offset: usize, value: u64) {
        self.ptr::<u64>(offset).write(value.to_le());
    }
}

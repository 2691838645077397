//! DMA memory regions and doorbell records.

use core::ptr::NonNull;
use core::sync::atomic::{fence, Ordering};

/// A region of DMA memory: host virtual address, device IOVA and length.
///
/// Typed accesses ([`DmaRegion::read`], [`DmaRegion::write`]) are volatile,
/// since the device reads and writes the same bytes concurrently. The bulk
/// copies ([`DmaRegion::read_bytes`], [`DmaRegion::write_bytes`]) are plain
/// memory copies: they move payload whose hand-over to or from the device is
/// ordered by a fence and a doorbell or owner bit, as every descriptor is.
#[derive(Debug)]
pub struct DmaRegion {
    vaddr: NonNull<u8>,
    iova: u64,
    len: usize,
}

// SAFETY: the region is plain memory shared with a device; it has no thread
// affinity and all accesses through it are volatile.
unsafe impl Send for DmaRegion {}
// SAFETY: as above; no method hands out references into the region.
unsafe impl Sync for DmaRegion {}

impl DmaRegion {
    /// Describes a region. Used by [`crate::Hal`] implementations.
    ///
    /// # Safety
    ///
    /// `vaddr .. vaddr + len` must be valid for volatile reads and writes for
    /// as long as the region (or any ring or record made from it) is used.
    pub unsafe fn new(vaddr: NonNull<u8>, iova: u64, len: usize) -> Self {
        Self { vaddr, iova, len }
    }

    /// Host virtual address of the first byte.
    pub fn vaddr(&self) -> NonNull<u8> {
        self.vaddr
    }

    /// Device address (IOVA) of the first byte.
    pub fn iova(&self) -> u64 {
        self.iova
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    fn check(&self, offset: usize, size: usize) {
        assert!(
            offset.checked_add(size).is_some_and(|end| end <= self.len),
            "DMA access at {offset:#x}+{size} outside a region of {:#x} bytes",
            self.len
        );
    }

    /// Reads a `T` at byte `offset` (volatile).
    pub fn read<T: Copy>(&self, offset: usize) -> T {
        self.check(offset, core::mem::size_of::<T>());
        // SAFETY: in bounds (checked); the constructor's contract makes the
        // bytes valid for volatile reads; `T: Copy` has no drop glue and the
        // descriptor types read this way are valid for any bit pattern.
        unsafe { self.vaddr.add(offset).cast::<T>().read_volatile() }
    }

    /// Writes a `T` at byte `offset` (volatile).
    pub fn write<T: Copy>(&self, offset: usize, value: T) {
        self.check(offset, core::mem::size_of::<T>());
        // SAFETY: in bounds (checked) and valid for writes (constructor).
        unsafe { self.vaddr.add(offset).cast::<T>().write_volatile(value) }
    }

    /// Copies `bytes` into the region at `offset`.
    pub fn write_bytes(&self, offset: usize, bytes: &[u8]) {
        self.check(offset, bytes.len());
        // SAFETY: in bounds (checked) and valid for writes (constructor);
        // `bytes` is a distinct Rust borrow, so the ranges do not overlap.
        unsafe {
            core::ptr::copy_nonoverlapping(
                bytes.as_ptr(),
                self.vaddr.add(offset).as_ptr(),
                bytes.len(),
            )
        }
    }

    /// Copies bytes out of the region at `offset` into `out`.
    pub fn read_bytes(&self, offset: usize, out: &mut [u8]) {
        self.check(offset, out.len());
        // SAFETY: in bounds (checked) and valid for reads (constructor).
        unsafe {
            core::ptr::copy_nonoverlapping(
                self.vaddr.add(offset).as_ptr(),
                out.as_mut_ptr(),
                out.len(),
            )
        }
    }

    /// Fills the whole region with zeros.
    pub fn zero(&self) {
        // SAFETY: the whole region is valid for writes (constructor).
        unsafe { core::ptr::write_bytes(self.vaddr.as_ptr(), 0, self.len) }
    }
}

/// A doorbell record: a little-endian 32-bit index in DMA memory that the
/// driver writes and the device reads (or the reverse).
#[derive(Debug)]
pub struct DbRec {
    ptr: NonNull<u32>,
}

// SAFETY: a pointer into DMA memory accessed only with volatile operations.
unsafe impl Send for DbRec {}
// SAFETY: as above.
unsafe impl Sync for DbRec {}

impl DbRec {
    /// A record at byte `offset` of `region`.
    ///
    /// # Safety
    ///
    /// The region must outlive the returned record.
    pub unsafe fn new(region: &DmaRegion, offset: usize) -> Self {
        region.check(offset, 4);
        assert!(
            offset % 4 == 0,
            "doorbell record at {offset:#x} is not 4-byte aligned"
        );
        // SAFETY: in bounds (checked above).
        let ptr = unsafe { region.vaddr.add(offset).cast::<u32>() };
        Self { ptr }
    }

    /// Publishes `value`: everything written to DMA memory before this call
    /// is visible to the device before the new value is.
    pub fn publish(&self, value: u32) {
        // Release: the WQEs (or consumed CQEs) this index covers must be
        // visible before the device can observe the index.
        fence(Ordering::Release);
        // SAFETY: valid, aligned pointer into live DMA memory (constructor).
        unsafe { self.ptr.as_ptr().write_volatile(value.to_le()) }
    }

    /// Reads the current value.
    pub fn read(&self) -> u32 {
        // SAFETY: valid, aligned pointer into live DMA memory (constructor).
        u32::from_le(unsafe { self.ptr.as_ptr().read_volatile() })
    }
}

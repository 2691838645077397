//! Views into DMA regions.

use rnic_queues::DmaRegion;

/// A [`DmaRegion`] describing bytes `offset .. offset + len` of `region`, so
/// a ring or an accessor can start there. The view is never freed: only the
/// region it came from is.
///
/// # Safety
///
/// The view must not be used after `region` is freed.
pub(crate) unsafe fn view(region: &DmaRegion, offset: usize, len: usize) -> DmaRegion {
    assert!(
        offset
            .checked_add(len)
            .is_some_and(|end| end <= region.len()),
        "view {offset:#x}+{len:#x} outside a region of {:#x} bytes",
        region.len()
    );
    // SAFETY: the range lies inside `region` (checked above), which the
    // Hal contract makes valid for volatile access until it is freed; the
    // caller keeps the view from outliving it.
    unsafe {
        DmaRegion::new(
            region.vaddr().add(offset),
            region.iova() + offset as u64,
            len,
        )
    }
}

/// Rounds `n` up to a multiple of the power of two `align`.
pub(crate) const fn align_up(n: usize, align: usize) -> usize {
    (n + align - 1) & !(align - 1)
}

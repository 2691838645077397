//! IOVA allocation within the IOMMU's valid ranges.

use std::collections::BTreeMap;

use crate::error::VfioError;

/// A first-fit allocator of aligned sub-ranges of a set of `u64` ranges.
///
/// Free space is kept as disjoint, coalesced `[start, end)` ranges.
#[derive(Debug, Clone, Default)]
pub(crate) struct RangeAllocator {
    /// start -> end (exclusive) of each free range.
    free: BTreeMap<u64, u64>,
}

impl RangeAllocator {
    /// Adds `[start, end)` to the free space (it must not overlap it).
    pub(crate) fn add(&mut self, start: u64, end: u64) -> bool {
        if start >= end {
            return true;
        }
        // Overlap with the range before or after means a double free.
        if let Some((_, &e)) = self.free.range(..=start).next_back() {
            if e > start {
                return false;
            }
        }
        if let Some((&s, _)) = self.free.range(start..).next() {
            if s < end {
                return false;
            }
        }
        let mut start = start;
        let mut end = end;
        if let Some((&s, &e)) = self.free.range(..start).next_back() {
            if e == start {
                self.free.remove(&s);
                start = s;
            }
        }
        if let Some(&e) = self.free.get(&end) {
            self.free.remove(&end);
            end = e;
        }
        self.free.insert(start, end);
        true
    }

    /// Takes `len` bytes aligned to `align` (a power of two), first fit.
    pub(crate) fn alloc(&mut self, len: u64, align: u64) -> Option<u64> {
        debug_assert!(align.is_power_of_two());
        if len == 0 {
            return None;
        }
        let (start, end, at) = self.free.iter().find_map(|(&s, &e)| {
            let at = s.checked_add(align - 1)? & !(align - 1);
            (at.checked_add(len)? <= e).then_some((s, e, at))
        })?;
        self.free.remove(&start);
        if start < at {
            self.free.insert(start, at);
        }
        if at + len < end {
            self.free.insert(at + len, end);
        }
        Some(at)
    }

    /// Total free bytes.
    pub(crate) fn free_bytes(&self) -> u64 {
        self.free.iter().map(|(s, e)| e - s).sum()
    }

    /// Keeps only the free space that `other` has free too.
    pub(crate) fn intersect(&mut self, other: &RangeAllocator) {
        let mut out = BTreeMap::new();
        for (&s, &e) in &self.free {
            // Free ranges of `other` that overlap [s, e): the one starting
            // at or before s, and those starting inside.
            let first = other.free.range(..=s).next_back();
            let rest = other.free.range(s + 1..e);
            for (&os, &oe) in first.into_iter().chain(rest) {
                let (a, b) = (s.max(os), e.min(oe));
                if a < b {
                    out.insert(a, b);
                }
            }
        }
        self.free = out;
    }

    /// Whether all of `[start, end)` is free (one free range covers it).
    pub(crate) fn is_free(&self, start: u64, end: u64) -> bool {
        self.free
            .range(..=start)
            .next_back()
            .is_some_and(|(_, &e)| e >= end)
    }
}

/// Allocates IOVAs (device addresses) for DMA mappings.
///
/// It hands out page-aligned ranges inside the IOMMU's valid IOVA ranges
/// (from `VFIO_IOMMU_GET_INFO`, which already leaves out reserved regions
/// such as the x86 MSI window `0xfee00000..0xfeefffff`), at or below the
/// device's DMA address limit, and never IOVA page 0, so that a zero device
/// address is always a bug.
#[derive(Debug, Clone)]
pub struct IovaAllocator {
    ranges: RangeAllocator,
    page: u64,
    limit: u64,
}

impl IovaAllocator {
    /// An allocator over `ranges` (inclusive `(start, last)` pairs, as the
    /// kernel reports them), in units of `page` bytes (a power of two),
    /// using no address above `limit` (inclusive; `u64::MAX` for none).
    pub fn new(ranges: &[(u64, u64)], page: u64, limit: u64) -> Self {
        assert!(
            page.is_power_of_two(),
            "IOVA page size {page:#x} is not a power of two"
        );
        let mut alloc = RangeAllocator::default();
        for &(start, last) in ranges {
            let last = last.min(limit);
            if start > last {
                continue;
            }
            // Whole pages only, and never page 0.
            let start = start
                .max(page)
                .checked_add(page - 1)
                .map(|s| s & !(page - 1));
            let end = if last == u64::MAX {
                !(page - 1)
            } else {
                (last + 1) & !(page - 1)
            };
            if let Some(start) = start {
                if start < end && !alloc.add(start, end) {
                    log::warn!("overlapping IOVA ranges reported; ignoring {start:#x}..{end:#x}");
                }
            }
        }
        Self {
            ranges: alloc,
            page,
            limit,
        }
    }

    /// Narrows the space to `ranges` (inclusive `(start, last)` pairs, as
    /// in [`IovaAllocator::new`]): free space outside them is dropped;
    /// allocated ranges are left as they are.
    pub fn restrict(&mut self, ranges: &[(u64, u64)]) {
        let allowed = Self::new(ranges, self.page, self.limit);
        self.ranges.intersect(&allowed.ranges);
    }

    /// The allocation granule.
    pub fn page_size(&self) -> u64 {
        self.page
    }

    /// Allocates `len` bytes (rounded up to whole pages) aligned to `align`
    /// (rounded up to at least a page).
    pub fn alloc(&mut self, len: u64, align: u64) -> Result<u64, VfioError> {
        let no_iova = VfioError::NoIova {
            len,
            limit: self.limit,
        };
        let rounded = len
            .checked_add(self.page - 1)
            .map(|l| l & !(self.page - 1))
            .filter(|&l| l > 0)
            .ok_or(no_iova)?;
        let align = align.max(self.page).next_power_of_two();
        self.ranges.alloc(rounded, align).ok_or(VfioError::NoIova {
            len,
            limit: self.limit,
        })
    }

    /// Returns `len` bytes (rounded up to whole pages) at `iova`.
    pub fn free(&mut self, iova: u64, len: u64) -> Result<(), VfioError> {
        let rounded = len.div_ceil(self.page) * self.page;
        if iova % self.page != 0 || !self.ranges.add(iova, iova + rounded) {
            return Err(VfioError::NotMapped { iova, len });
        }
        Ok(())
    }

    /// Bytes of IOVA space still free.
    pub fn free_bytes(&self) -> u64 {
        self.ranges.free_bytes()
    }

    /// Whether `[iova, iova + len)` is free.
    pub fn is_free(&self, iova: u64, len: u64) -> bool {
        self.ranges.is_free(iova, iova + len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PAGE: u64 = 4096;

    // The ranges an Intel IOMMU with a 39-bit address width reports: all of
    // it except the MSI window.
    const VTD: [(u64, u64); 2] = [(0, 0xfedf_ffff), (0xfef0_0000, 0x7f_ffff_ffff)];

    #[test]
    fn allocates_page_aligned_in_ranges_skipping_page_zero() {
        let mut a = IovaAllocator::new(&VTD, PAGE, u64::MAX);
        let x = a.alloc(100, 1).unwrap();
        assert_eq!(x, PAGE, "page 0 is never handed out");
        let y = a.alloc(PAGE + 1, PAGE).unwrap();
        assert_eq!(y, 2 * PAGE);
        assert_eq!(a.alloc(1, PAGE).unwrap(), 4 * PAGE, "PAGE+1 took two pages");
        assert_eq!(
            a.free_bytes(),
            0xfedf_f000 + (0x7f_ffff_ffff - 0xfef0_0000 + 1) - 4 * PAGE
        );
    }

    #[test]
    fn honours_alignment() {
        let mut a = IovaAllocator::new(&VTD, PAGE, u64::MAX);
        a.alloc(PAGE, PAGE).unwrap();
        let huge = a.alloc(2 << 20, 2 << 20).unwrap();
        assert_eq!(huge % (2 << 20), 0);
        assert_eq!(huge, 2 << 20);
        // The gap below the aligned block is still usable.
        assert_eq!(a.alloc(PAGE, PAGE).unwrap(), 2 * PAGE);
        // Non-power-of-two alignments round up.
        let x = a.alloc(PAGE, 3 * PAGE).unwrap();
        assert_eq!(x % (4 * PAGE), 0);
    }

    #[test]
    fn skips_reserved_window_and_respects_the_limit() {
        // Only the space just below and above the MSI window.
        let ranges = [(0xfed0_0000, 0xfedf_ffff), (0xfef0_0000, 0xfef0_ffff)];
        let mut a = IovaAllocator::new(&ranges, PAGE, u64::MAX);
        let x = a.alloc(1 << 20, PAGE).unwrap();
        assert_eq!(x, 0xfed0_0000);
        let y = a.alloc(PAGE, PAGE).unwrap();
        assert_eq!(y, 0xfef0_0000, "nothing inside 0xfee00000..0xfeefffff");
        assert!(!(0xfee0_0000..0xfef0_0000).contains(&y));

        // A 28-bit DMA mask (QEMU's edu device).
        let mut a = IovaAllocator::new(&VTD, PAGE, (1 << 28) - 1);
        assert_eq!(a.free_bytes(), (1 << 28) - PAGE);
        assert!(a.alloc(1 << 28, PAGE).is_err());
        let x = a.alloc((1 << 28) - PAGE, PAGE).unwrap();
        assert_eq!(x + (1 << 28) - PAGE - 1, (1 << 28) - 1);
    }

    #[test]
    fn exhaustion_then_free_and_reuse() {
        let mut a = IovaAllocator::new(&[(0, 8 * PAGE - 1)], PAGE, u64::MAX);
        assert_eq!(a.free_bytes(), 7 * PAGE);
        let blocks: Vec<u64> = (0..7).map(|_| a.alloc(PAGE, PAGE).unwrap()).collect();
        let e = a.alloc(PAGE, PAGE).unwrap_err();
        assert!(matches!(e, VfioError::NoIova { .. }), "{e}");
        assert!(e.to_string().contains("no free IOVA range"));

        // Free two non-adjacent pages: a two-page request still fails.
        a.free(blocks[1], PAGE).unwrap();
        a.free(blocks[3], PAGE).unwrap();
        assert!(a.alloc(2 * PAGE, PAGE).is_err());
        // Freeing the page between them coalesces the three.
        a.free(blocks[2], PAGE).unwrap();
        assert!(a.is_free(blocks[1], 3 * PAGE));
        assert_eq!(a.alloc(3 * PAGE, PAGE).unwrap(), blocks[1]);

        // Double free and unaligned free are refused.
        a.free(blocks[0], PAGE).unwrap();
        assert!(a.free(blocks[0], PAGE).is_err());
        assert!(a.free(blocks[4] + 1, PAGE).is_err());
        assert_eq!(
            a.alloc(PAGE, PAGE).unwrap(),
            blocks[0],
            "freed IOVA is reused"
        );
    }

    #[test]
    fn restrict_to_narrower_ranges() {
        let mut a = IovaAllocator::new(&VTD, PAGE, (1 << 32) - 1);
        let x = a.alloc(PAGE, PAGE).unwrap();
        let y = a.alloc(PAGE, PAGE).unwrap();
        a.free(x, PAGE).unwrap();
        // Another group's reserved region 0x10000..=0x1ffff, and nothing
        // above 0xfedfffff any more.
        a.restrict(&[(0, 0xffff), (0x2_0000, 0xfedf_ffff)]);
        assert_eq!(
            a.free_bytes(),
            (0x1_0000 - PAGE) + (0xfee0_0000 - 0x2_0000) - PAGE,
            "page 0 and the allocated page `y` stay out"
        );
        assert!(a.is_free(x, PAGE));
        assert!(!a.is_free(0x1_0000, PAGE));
        assert!(!a.is_free(0xfef0_0000, PAGE));
        // Allocations skip the hole; `y` can still be freed.
        let mut got = Vec::new();
        while let Ok(i) = a.alloc(PAGE, PAGE) {
            if i >= 0x2_0000 {
                break;
            }
            got.push(i);
        }
        assert!(got.iter().all(|&i| i < 0x1_0000), "{got:x?}");
        a.free(y, PAGE).unwrap();
    }

    #[test]
    fn degenerate_inputs() {
        let mut a = IovaAllocator::new(&[(0, u64::MAX)], PAGE, u64::MAX);
        assert!(a.alloc(0, PAGE).is_err(), "zero-length allocation");
        assert!(a.alloc(u64::MAX, PAGE).is_err(), "overflowing length");
        let top = a.alloc(PAGE, 1 << 63).unwrap();
        assert_eq!(top, 1 << 63);
        let empty = IovaAllocator::new(&[(0, PAGE - 1)], PAGE, u64::MAX);
        assert_eq!(empty.free_bytes(), 0, "only page 0: nothing usable");
        let ranges = [(0x10_0000, 0x1f_ffff)];
        assert_eq!(
            IovaAllocator::new(&ranges, PAGE, 0xf_ffff).free_bytes(),
            0,
            "limit below every range"
        );
    }
}

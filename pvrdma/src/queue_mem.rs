//! The memory of a queue the device reaches by page directory: a state
//! page and the pages of its entries, with the directory and tables that
//! list them (`pvrdma_page_dir` in Linux's driver).

use alloc::vec::Vec;

use rnic_pvrdma_regs::PAGE_SIZE;
use rnic_queues::{tables_for, write_page_dir, DmaRegion, Hal};
use rnic_verbs::{Error, Result};

/// A state page and `entry_pages` pages of entries, listed in that order
/// by a page directory.
#[derive(Debug)]
pub(crate) struct QueueMem {
    dir: DmaRegion,
    tables: Vec<DmaRegion>,
    /// The ring's indices.
    pub state: DmaRegion,
    /// The entries, one allocation (contiguous for the driver; the device
    /// sees the pages the directory lists).
    pub entries: DmaRegion,
}

impl QueueMem {
    /// Allocates and lists the pages; on failure, frees what it allocated.
    pub(crate) fn alloc<H: Hal>(hal: &H, entry_pages: usize, what: &str) -> Result<Self> {
        // The directory, the state page, the entries, then the tables.
        let ntables = tables_for(entry_pages + 1);
        let sizes = [PAGE_SIZE, PAGE_SIZE, entry_pages * PAGE_SIZE]
            .into_iter()
            .chain(core::iter::repeat(PAGE_SIZE).take(ntables));
        let mut held = alloc_all(hal, sizes, what)?;
        let tables = held.split_off(3);
        let mut parts = held.into_iter();
        let (Some(dir), Some(state), Some(entries)) = (parts.next(), parts.next(), parts.next())
        else {
            unreachable!("three regions were allocated before the tables");
        };
        let mut pages = Vec::with_capacity(entry_pages + 1);
        pages.push(state.iova());
        pages.extend((0..entry_pages).map(|i| entries.iova() + (i * PAGE_SIZE) as u64));
        let mem = Self {
            dir,
            tables,
            state,
            entries,
        };
        if let Err(e) = write_page_dir(&mem.dir, &mem.tables, &pages) {
            // SAFETY: allocated above; the device has not been told of it.
            unsafe { mem.free(hal) };
            return Err(Error::invalid(alloc::format!("{what}: {e}")));
        }
        Ok(mem)
    }

    /// The directory's device address.
    pub(crate) fn pdir_dma(&self) -> u64 {
        self.dir.iova()
    }

    /// Pages the directory lists, the state page included.
    pub(crate) fn nchunks(&self) -> u32 {
        (1 + self.entries.len() / PAGE_SIZE) as u32
    }

    /// After the command that was to make the queue failed: frees the
    /// pages if the device certainly has no queue on them, else keeps them
    /// for good (the device may have made it, and write into them).
    pub(crate) fn release<H: Hal>(self, hal: &H, error: &Error) {
        if error.outcome_unknown() {
            core::mem::forget(self);
        } else {
            // SAFETY: the device refused the command or never got it, so
            // it has no queue on these pages.
            unsafe { self.free(hal) };
        }
    }

    /// Frees every page.
    ///
    /// # Safety
    ///
    /// The device no longer uses the queue: it was never told of it, or it
    /// destroyed it.
    pub(crate) unsafe fn free<H: Hal>(self, hal: &H) {
        for r in [self.dir, self.state, self.entries]
            .into_iter()
            .chain(self.tables)
        {
            // SAFETY: allocated by `alloc` on this platform, and the
            // caller promises the device no longer uses it.
            unsafe { hal.dma_free(r) };
        }
    }
}

/// Zeroed DMA regions of `sizes`, each its own allocation; none if one
/// fails.
pub(crate) fn alloc_all<H: Hal>(
    hal: &H,
    sizes: impl IntoIterator<Item = usize>,
    what: &str,
) -> Result<Vec<DmaRegion>> {
    let mut held = Vec::new();
    for len in sizes {
        match hal.dma_alloc(len) {
            Ok(r) => held.push(r),
            Err(e) => {
                for r in held {
                    // SAFETY: allocated just above on this platform; the
                    // device has not been told of it.
                    unsafe { hal.dma_free(r) };
                }
                return Err(Error::hal(e, what));
            }
        }
    }
    Ok(held)
}

//! Two-level page directories: how a device that takes memory by page
//! list (PVRDMA's MRs, queues and rings) is told where each page is.
//!
//! A directory is one page of table addresses; each table is one page of
//! page addresses, little-endian 64-bit device addresses (IOVAs), so a
//! directory of 4 KiB pages reaches 512 × 512 pages. Page `i` of the
//! memory is entry `i % 512` of table `i / 512`.

use crate::DmaRegion;

/// Entries in one directory or table page of 4 KiB.
pub const PAGE_DIR_ENTRIES: usize = 512;

/// Why a page directory cannot be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageDirError {
    /// More pages than one directory reaches.
    TooManyPages {
        /// Pages asked for.
        pages: usize,
    },
    /// Fewer table pages than the pages need ([`tables_for`]).
    TooFewTables {
        /// Tables needed.
        needed: usize,
        /// Tables given.
        given: usize,
    },
    /// A directory or table region smaller than a page of entries.
    RegionTooSmall {
        /// Its length.
        len: usize,
    },
}

impl core::fmt::Display for PageDirError {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        match self {
            Self::TooManyPages { pages } => write!(
                f,
                "{pages} pages exceed a page directory's {}",
                PAGE_DIR_ENTRIES * PAGE_DIR_ENTRIES
            ),
            Self::TooFewTables { needed, given } => {
                write!(f, "{needed} page tables needed, {given} given")
            }
            Self::RegionTooSmall { len } => write!(
                f,
                "a page directory or table of {len} bytes is smaller than {} entries",
                PAGE_DIR_ENTRIES
            ),
        }
    }
}

/// Table pages a directory of `pages` pages needs.
pub const fn tables_for(pages: usize) -> usize {
    pages.div_ceil(PAGE_DIR_ENTRIES)
}

/// Writes the directory `dir` and its `tables` so that they list `pages`
/// (device addresses, in order); unused entries are zero. Nothing is
/// written if it fails.
pub fn write_page_dir(
    dir: &DmaRegion,
    tables: &[DmaRegion],
    pages: &[u64],
) -> Result<(), PageDirError> {
    if pages.len() > PAGE_DIR_ENTRIES * PAGE_DIR_ENTRIES {
        return Err(PageDirError::TooManyPages { pages: pages.len() });
    }
    let needed = tables_for(pages.len());
    if tables.len() < needed {
        return Err(PageDirError::TooFewTables {
            needed,
            given: tables.len(),
        });
    }
    let entries = PAGE_DIR_ENTRIES * 8;
    if let Some(r) = core::iter::once(dir)
        .chain(&tables[..needed])
        .find(|r| r.len() < entries)
    {
        return Err(PageDirError::RegionTooSmall { len: r.len() });
    }
    for i in 0..PAGE_DIR_ENTRIES {
        let iova = tables[..needed].get(i).map_or(0, DmaRegion::iova);
        dir.write::<u64>(i * 8, iova.to_le());
    }
    for (t, table) in tables[..needed].iter().enumerate() {
        let chunk = &pages[t * PAGE_DIR_ENTRIES..pages.len().min((t + 1) * PAGE_DIR_ENTRIES)];
        for j in 0..PAGE_DIR_ENTRIES {
            table.write::<u64>(j * 8, chunk.get(j).copied().unwrap_or(0).to_le());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    extern crate std;
    use core::ptr::NonNull;
    use std::vec;
    use std::vec::Vec;

    use super::*;

    fn page(buf: &mut [u64], iova: u64) -> DmaRegion {
        let len = core::mem::size_of_val(buf);
        // SAFETY: the buffer outlives the region in each test.
        unsafe { DmaRegion::new(NonNull::new(buf.as_mut_ptr().cast()).unwrap(), iova, len) }
    }

    #[test]
    fn lists_every_page_across_two_tables() {
        let (mut d, mut t0, mut t1) = (vec![7u64; 512], vec![7u64; 512], vec![7u64; 512]);
        let pages: Vec<u64> = (0..600u64).map(|i| 0x10_0000 + i * 0x1000).collect();
        assert_eq!(tables_for(pages.len()), 2);
        let dir = page(&mut d, 0xd000);
        let tables = [page(&mut t0, 0xa000), page(&mut t1, 0xb000)];
        write_page_dir(&dir, &tables, &pages).unwrap();
        assert_eq!(
            &d[..3],
            &[0xa000, 0xb000, 0],
            "the tables' addresses, then zero"
        );
        assert!(d[2..].iter().all(|&e| e == 0));
        assert_eq!(t0, pages[..512]);
        assert_eq!(&t1[..88], &pages[512..]);
        assert!(t1[88..].iter().all(|&e| e == 0), "unused entries are zero");
    }

    #[test]
    fn refuses_what_it_cannot_list_and_writes_nothing() {
        let (mut d, mut t0) = (vec![7u64; 512], vec![7u64; 512]);
        let dir = page(&mut d, 0xd000);
        let tables = [page(&mut t0, 0xa000)];
        let pages = vec![0x1000u64; 513];
        assert_eq!(
            write_page_dir(&dir, &tables, &pages),
            Err(PageDirError::TooFewTables {
                needed: 2,
                given: 1
            })
        );
        let many = vec![0u64; 512 * 512 + 1];
        assert_eq!(
            write_page_dir(&dir, &tables, &many),
            Err(PageDirError::TooManyPages {
                pages: 512 * 512 + 1
            })
        );
        let mut small = vec![0u64; 16];
        let short = [page(&mut small, 0xe000)];
        assert_eq!(
            write_page_dir(&dir, &short, &[0x1000]),
            Err(PageDirError::RegionTooSmall { len: 128 })
        );
        assert!(d.iter().chain(&t0).all(|&e| e == 7), "nothing written");
    }
}

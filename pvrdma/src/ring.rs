//! The device-to-driver rings of bring-up: async events and CQ
//! notifications, each a state page and a page of entries that the device
//! reaches by page directory and produces on (the state page's `rx` ring).

use core::marker::PhantomData;

use rnic_pvrdma_regs::dsr::RingPageInfo;
use rnic_pvrdma_regs::ring::{RX_CONS_HEAD, RX_PROD_TAIL};
use rnic_pvrdma_regs::{le32, le64, PAGE_SIZE};
use rnic_queues::{write_page_dir, DmaRegion, IndexError, IndexRing, Pod};

/// The pages of one event ring.
#[derive(Debug)]
pub(crate) struct RingPages<'a> {
    /// The page directory.
    pub dir: &'a DmaRegion,
    /// Its one table.
    pub table: &'a DmaRegion,
    /// The state page.
    pub state: &'a DmaRegion,
    /// The entries.
    pub entries: &'a DmaRegion,
}

/// A ring of `T` entries, one page of them, that the device produces on.
#[derive(Debug)]
pub(crate) struct EventRing<T: Pod> {
    ring: IndexRing,
    _entry: PhantomData<T>,
}

impl<T: Pod> EventRing<T> {
    /// The ring over `pages`, whose directory this writes.
    pub(crate) fn new(pages: &RingPages<'_>) -> Self {
        let per_page = PAGE_SIZE / core::mem::size_of::<T>();
        const { assert!((PAGE_SIZE / core::mem::size_of::<T>()).is_power_of_two()) };
        write_page_dir(
            pages.dir,
            core::slice::from_ref(pages.table),
            &[pages.state.iova(), pages.entries.iova()],
        )
        .expect("two pages fit one table of a directory");
        Self {
            ring: IndexRing::new(RX_PROD_TAIL, RX_CONS_HEAD, per_page.ilog2()),
            _entry: PhantomData,
        }
    }

    /// What the device-shared region says of the ring over `pages`.
    pub(crate) fn page_info(pages: &RingPages<'_>) -> RingPageInfo {
        RingPageInfo {
            num_pages: le32::from_ne(2),
            reserved: le32::from_ne(0),
            pdir_dma: le64::from_ne(pages.dir.iova()),
        }
    }

    /// Takes the next entry the device produced, if any. An index the
    /// device left out of range is an error, and nothing is taken.
    pub(crate) fn pop(&self, pages: &RingPages<'_>) -> Result<Option<T>, IndexError> {
        let Some(slot) = self.ring.ready_slot(pages.state)? else {
            return Ok(None);
        };
        let entry = pages
            .entries
            .read::<T>(slot as usize * core::mem::size_of::<T>());
        self.ring.consume(pages.state)?;
        Ok(Some(entry))
    }
}

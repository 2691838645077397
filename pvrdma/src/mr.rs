//! Memory regions: the caller's memory mapped for the device and listed,
//! page by page, in a page directory (CREATE_MR).

use alloc::boxed::Box;
use alloc::format;
use alloc::vec::Vec;
use core::ptr::NonNull;

use rnic_pvrdma_regs::cmd::{access, CmdOpcode, CreateMr, CreateMrResp};
use rnic_pvrdma_regs::{le32, le64, PAGE_SIZE};
use rnic_queues::{tables_for, write_page_dir, DmaRegion, Hal, PAGE_DIR_ENTRIES};
use rnic_verbs::{DestroyError, Error, Result};

use crate::context::Pd;
use crate::device::Device;
use crate::queue_mem::alloc_all;

/// The access bits a PVRDMA MR takes (`access`).
const ACCESS_MASK: u32 = access::LOCAL_WRITE
    | access::REMOTE_WRITE
    | access::REMOTE_READ
    | access::REMOTE_ATOMIC
    | access::MW_BIND;

/// A registered memory region. Deregister it with [`Device::dereg_mr`].
#[derive(Debug)]
pub struct Mr {
    handle: u32,
    lkey: u32,
    rkey: u32,
    /// The mapping of the region's whole pages: IOVA and length.
    map: (u64, usize),
    /// The directory, then its tables (boxed: an MR handed back in a
    /// `DestroyError` stays small).
    dir: Box<[DmaRegion]>,
}

impl Mr {
    /// The device's handle.
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// The local key work requests name it by.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    /// The remote key a peer names it by.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }
}

impl<H: Hal> Device<H> {
    /// Registers `len` bytes at `addr` in `pd` (CREATE_MR), with `access`
    /// bits of [`access`]. Work requests address the region from `iova`
    /// (`ibv_reg_mr` passes the buffer's own address), which must lie at
    /// the same offset in its page as `addr`.
    ///
    /// # Safety
    ///
    /// The memory stays valid (not freed, not moved) until the MR is
    /// deregistered, and the caller accepts that the device may read it,
    /// and write it if `access` allows, until then.
    pub unsafe fn reg_mr(
        &self,
        pd: &Pd,
        addr: NonNull<u8>,
        len: usize,
        iova: u64,
        access: u32,
    ) -> Result<Mr> {
        let offset = addr.as_ptr() as usize % PAGE_SIZE;
        if len == 0 {
            return Err(Error::invalid("an MR of 0 bytes"));
        }
        if access & !ACCESS_MASK != 0 {
            return Err(Error::invalid(format!(
                "MR access bits {:#x} are not the device's",
                access & !ACCESS_MASK
            )));
        }
        if iova as usize % PAGE_SIZE != offset {
            return Err(Error::invalid(format!(
                "the MR's address {iova:#x} is not at the buffer's offset in its page \
                 ({offset:#x})"
            )));
        }
        let Some(npages) = len
            .checked_add(offset)
            .map(|end| end.div_ceil(PAGE_SIZE))
            .filter(|&n| n <= PAGE_DIR_ENTRIES * PAGE_DIR_ENTRIES)
        else {
            return Err(Error::invalid(format!(
                "an MR of {len} bytes: a page directory lists at most {} pages",
                PAGE_DIR_ENTRIES * PAGE_DIR_ENTRIES
            )));
        };
        let map_len = npages * PAGE_SIZE;
        // SAFETY: the page holding `addr` starts `offset` bytes before it.
        let base = unsafe { NonNull::new_unchecked(addr.as_ptr().sub(offset)) };
        // SAFETY: the caller keeps the memory valid until `dereg_mr`, which
        // unmaps it; the whole pages around it are the caller's too (a
        // mapping is of pages).
        let map_iova = unsafe { self.hal.dma_map(base, map_len) }
            .map_err(|e| Error::hal(e, "mapping the MR's memory"))?;
        let unmap = |hal: &H| {
            // SAFETY: mapped just above; the device was not told of it.
            let _ = unsafe { hal.dma_unmap(map_iova, map_len) };
        };
        let dir = match alloc_all(
            &self.hal,
            core::iter::repeat(PAGE_SIZE).take(1 + tables_for(npages)),
            "the MR's page directory",
        ) {
            Ok(dir) => dir,
            Err(e) => {
                unmap(&self.hal);
                return Err(e);
            }
        };
        let pages: Vec<u64> = (0..npages)
            .map(|i| map_iova + (i * PAGE_SIZE) as u64)
            .collect();
        if let Err(e) = write_page_dir(&dir[0], &dir[1..], &pages) {
            free_pages(&self.hal, dir);
            unmap(&self.hal);
            return Err(Error::invalid(format!("the MR's page directory: {e}")));
        }
        let req = CreateMr {
            start: le64::from_ne(iova),
            length: le64::from_ne(len as u64),
            pdir_dma: le64::from_ne(dir[0].iova()),
            pd_handle: le32::from_ne(pd.handle),
            access_flags: le32::from_ne(access),
            flags: le32::from_ne(0),
            nchunks: le32::from_ne(npages as u32),
            ..Default::default()
        };
        match self.exec::<_, CreateMrResp>(CmdOpcode::CreateMr, &req) {
            Ok(resp) => Ok(Mr {
                handle: resp.mr_handle.to_ne(),
                lkey: resp.lkey.to_ne(),
                rkey: resp.rkey.to_ne(),
                map: (map_iova, map_len),
                dir: dir.into_boxed_slice(),
            }),
            Err(e) => {
                if e.outcome_unknown() {
                    self.retire(map_iova, map_len, dir);
                } else {
                    free_pages(&self.hal, dir);
                    unmap(&self.hal);
                }
                Err(e)
            }
        }
    }

    /// Deregisters an MR (DESTROY_MR): unmaps its memory and frees its
    /// directory. If the outcome is unknown, the device may still reach the
    /// memory: the platform cuts it off for good where it can, and the
    /// directory is never freed.
    pub fn dereg_mr(&self, mr: Mr) -> core::result::Result<(), DestroyError<Mr>> {
        let handle = mr.handle;
        self.destroy_object(
            CmdOpcode::DestroyMr,
            handle,
            mr,
            |dev, mr| {
                let (iova, len) = mr.map;
                // SAFETY: the device destroyed the MR; this is its mapping.
                let _ = unsafe { dev.hal.dma_unmap(iova, len) };
                free_pages(&dev.hal, mr.dir.into_vec());
            },
            |dev, mr| dev.retire(mr.map.0, mr.map.1, mr.dir.into_vec()),
        )
    }

    /// An MR the device may still hold: its memory is cut off where the
    /// platform can do that for good, and its directory is kept.
    fn retire(&self, iova: u64, len: usize, dir: Vec<DmaRegion>) {
        // SAFETY: the MR's own mapping, not unmapped before.
        if let Err(e) = unsafe { self.hal.dma_unmap_retired(iova, len) } {
            log::warn!(
                "PVRDMA MR at {iova:#x}: the device may still reach its memory ({e}); \
                 the mapping stays until the device is reset"
            );
        }
        core::mem::forget(dir);
    }
}

fn free_pages<H: Hal>(hal: &H, pages: Vec<DmaRegion>) {
    for r in pages {
        // SAFETY: allocated on this platform for a directory the device does
        // not (or no longer) use.
        unsafe { hal.dma_free(r) };
    }
}

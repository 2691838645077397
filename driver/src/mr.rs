//! Memory regions: driver-allocated DMA buffers and registered user memory.

use alloc::format;
use alloc::sync::Arc;
use core::ptr::NonNull;

use rnic_hw_regs::cmd::{CmdOpcode, ObjIn, RegMrIn, RegMrOut, ReregMrIn};
use rnic_hw_regs::{le32, le64};
use rnic_queues::{DmaRegion, Hal};
use rnic_verbs::access;

use crate::bringup::DeviceMem;
use crate::error::{DestroyError, Error, Result};
use crate::pd::{Pd, PdInner};
use rnic_verbs::Sge;

/// A memory region (`struct ibv_mr`).
///
/// Either a buffer the driver allocated ([`Pd::alloc_mr`]), reachable
/// through [`Mr::read`] and [`Mr::write`], or caller memory registered with
/// [`Pd::reg_mr`]. Its addresses are host virtual addresses: an [`Sge`] or a
/// remote address names bytes as `mr.addr() + offset`.
pub struct Mr<H: Hal> {
    pd: Arc<PdInner<H>>,
    /// The bytes: a `dma_alloc` region, or a view of the caller's memory at
    /// its `dma_map` IOVA (empty for a zero-length MR). `None` once
    /// released.
    mem: Option<DmaRegion>,
    /// Where the memory came from.
    source: Source,
    len: usize,
    lkey: u32,
    rkey: u32,
    access: u32,
}

/// Where an MR's memory came from, which says how to give it back.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Source {
    /// `dma_alloc`.
    Allocated,
    /// `dma_map` of the caller's memory.
    Mapped,
    /// Nothing: a zero-length MR has no memory.
    Empty,
}

fn check_access(access: u32) -> Result<()> {
    if access & !access::MR_SUPPORTED != 0 {
        return Err(Error::invalid(format!(
            "MR access flags {access:#x} include unsupported bits {:#x}",
            access & !access::MR_SUPPORTED
        )));
    }
    if access & (access::REMOTE_WRITE | access::REMOTE_ATOMIC) != 0
        && access & access::LOCAL_WRITE == 0
    {
        return Err(Error::invalid(
            "MR access REMOTE_WRITE or REMOTE_ATOMIC requires LOCAL_WRITE",
        ));
    }
    Ok(())
}

impl<H: Hal> Pd<H> {
    /// Allocates `len` bytes of zeroed DMA memory and registers them
    /// (REG_MR) with `access` ([`crate::access`] flags).
    ///
    /// A zero-length MR (`len` 0) is allowed, as the IB specification
    /// allows it: its keys are valid for zero-length accesses only.
    pub fn alloc_mr(&self, len: usize, access: u32) -> Result<Mr<H>> {
        check_access(access)?;
        if len == 0 {
            return self.empty(NonNull::dangling(), access);
        }
        let ctx = &self.inner.ctx;
        let mem = ctx
            .hal()
            .dma_alloc(len)
            .map_err(|e| Error::hal(e, "allocating MR memory"))?;
        mem.zero();
        match self.register(&mem, len, access) {
            Ok(out) => Ok(self.mr(mem, Source::Allocated, len, access, out)),
            Err(e) => {
                // SAFETY: from dma_alloc, given to the device only by this
                // registration.
                unsafe {
                    ctx.dispose_after_failed_create(
                        DeviceMem::Region(mem),
                        format_args!("registering {len} bytes of MR memory"),
                        &e,
                    )
                };
                Err(e)
            }
        }
    }

    /// Registers the caller's memory `ptr .. ptr + len` (`ibv_reg_mr`):
    /// maps it for the device (`Hal::dma_map`) and issues REG_MR.
    ///
    /// # Safety
    ///
    /// The memory must stay valid for reads and writes, and must not move,
    /// until the MR is destroyed or dropped. The device (and [`Mr::read`] /
    /// [`Mr::write`]) may access it at any time until then, so the caller
    /// must not hold Rust references to it that assume exclusive access.
    ///
    /// Where the device does not confirm that it is done with the memory
    /// (`reg_mr` fails with an error whose outcome is unknown, such as a
    /// command timeout: [`Error::command`] is `None` and
    /// [`Error::is_not_issued`] false; or deregistering fails when the MR
    /// is destroyed or dropped), the driver retires the memory's IOVAs
    /// ([`Hal::dma_unmap_retired`]): the device is cut off from it at once
    /// and the stale registration can never reach other memory, so the rule
    /// above still holds. Only on a platform that cannot retire IOVAs does
    /// the memory then stay mapped, and have to stay valid, until the
    /// context is closed (the last handle on it dropped, which resets the
    /// device); the driver logs an error when that happens. An MR whose
    /// deregistration the device refused is handed back by [`Mr::destroy`],
    /// still registered.
    pub unsafe fn reg_mr(&self, ptr: NonNull<u8>, len: usize, access: u32) -> Result<Mr<H>> {
        check_access(access)?;
        if len == 0 {
            return self.empty(ptr, access);
        }
        let ctx = &self.inner.ctx;
        // SAFETY: the caller keeps the memory valid until the MR is gone,
        // and the MR unmaps (or, if the device may still use it, retires)
        // it when it goes; only a platform that cannot retire IOVAs keeps
        // it mapped until shutdown, which the caller's contract covers.
        let iova = unsafe { ctx.hal().dma_map(ptr, len) }
            .map_err(|e| Error::hal(e, "mapping MR memory for the device"))?;
        // SAFETY: the caller keeps `ptr .. ptr + len` valid for reads and
        // writes for as long as the MR (which owns this view) lives.
        let mem = unsafe { DmaRegion::new(ptr, iova, len) };
        match self.register(&mem, len, access) {
            Ok(out) => Ok(self.mr(mem, Source::Mapped, len, access, out)),
            Err(e) => {
                // SAFETY: exactly the mapping made above, not yet unmapped,
                // given to the device only by this registration.
                unsafe {
                    ctx.dispose_after_failed_create(
                        DeviceMem::Mapping { iova, len },
                        format_args!("registering {len} bytes of caller memory"),
                        &e,
                    )
                };
                Err(e)
            }
        }
    }

    /// A zero-length MR at address `va`: registered with no memory.
    fn empty(&self, va: NonNull<u8>, access: u32) -> Result<Mr<H>> {
        // SAFETY: a region of no bytes: nothing is ever accessed through it.
        let mem = unsafe { DmaRegion::new(va, 0, 0) };
        let out = self.register(&mem, 0, access)?;
        Ok(self.mr(mem, Source::Empty, 0, access, out))
    }

    fn register(&self, mem: &DmaRegion, len: usize, access: u32) -> Result<RegMrOut> {
        let input = RegMrIn {
            pdn: le32::from_ne(self.inner.pdn),
            access: le32::from_ne(access),
            va: le64::from_ne(mem.vaddr().as_ptr() as u64),
            length: le64::from_ne(len as u64),
            iova: le64::from_ne(mem.iova()),
        };
        self.inner.ctx.exec(CmdOpcode::RegMr, &input)
    }

    fn mr(&self, mem: DmaRegion, source: Source, len: usize, access: u32, out: RegMrOut) -> Mr<H> {
        Mr {
            pd: Arc::clone(&self.inner),
            mem: Some(mem),
            source,
            len,
            lkey: out.lkey.to_ne(),
            rkey: out.rkey.to_ne(),
            access,
        }
    }
}

impl<H: Hal> Mr<H> {
    fn mem(&self) -> &DmaRegion {
        self.mem
            .as_ref()
            .expect("an MR's memory is present until it is released")
    }

    /// Start address (host virtual address) of the region.
    pub fn addr(&self) -> u64 {
        self.mem().vaddr().as_ptr() as u64
    }

    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the region is empty (a zero-length MR).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Local key.
    pub fn lkey(&self) -> u32 {
        self.lkey
    }

    /// Remote key.
    pub fn rkey(&self) -> u32 {
        self.rkey
    }

    /// Access flags it was registered with.
    pub fn access(&self) -> u32 {
        self.access
    }

    /// The PD number it belongs to.
    pub fn pd_num(&self) -> u32 {
        self.pd.pdn
    }

    fn check_range(&self, offset: usize, len: usize) -> Result<()> {
        if offset.checked_add(len).is_some_and(|end| end <= self.len) {
            Ok(())
        } else {
            Err(Error::invalid(format!(
                "range {offset:#x}+{len:#x} is outside an MR of {:#x} bytes",
                self.len
            )))
        }
    }

    /// A scatter/gather entry for bytes `offset .. offset + length`.
    pub fn sge(&self, offset: usize, length: u32) -> Result<Sge> {
        self.check_range(offset, length as usize)?;
        Ok(Sge {
            addr: self.addr() + offset as u64,
            length,
            lkey: self.lkey,
        })
    }

    /// Copies `data` into the region at `offset`, with relaxed atomic
    /// stores: the device may access the bytes at the same time, and it
    /// copies them atomically too, so that neither is a data race
    /// (docs/architecture.md, "DMA memory and Rust's memory model").
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.check_range(offset, data.len())?;
        self.mem().write_shared(offset, data);
        Ok(())
    }

    /// Copies bytes of the region at `offset` into `out`, with relaxed
    /// atomic loads (see [`Mr::write`]).
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<()> {
        self.check_range(offset, out.len())?;
        self.mem().read_shared(offset, out);
        Ok(())
    }

    /// Changes the MR's PD and/or access flags (`ibv_rereg_mr` with
    /// `IBV_REREG_MR_CHANGE_PD` / `CHANGE_ACCESS`, REREG_MR); its keys and
    /// memory stay. An MR with memory windows bound to it is busy.
    pub fn rereg(&mut self, pd: Option<&Pd<H>>, access: Option<u32>) -> Result<()> {
        use rnic_hw_regs::cmd::rereg;
        if let Some(pd) = pd {
            if !Arc::ptr_eq(&pd.inner.ctx, &self.pd.ctx) {
                return Err(Error::invalid("the PD belongs to another device context"));
            }
        }
        if let Some(a) = access {
            check_access(a)?;
        }
        let flags = pd.map_or(0, |_| rereg::PD) | access.map_or(0, |_| rereg::ACCESS);
        if flags == 0 {
            return Err(Error::invalid("rereg_mr with nothing to change"));
        }
        self.rereg_cmd(flags, pd, access, None)?;
        if let Some(pd) = pd {
            self.pd = Arc::clone(&pd.inner);
        }
        if let Some(a) = access {
            self.access = a;
        }
        Ok(())
    }

    /// Moves the MR to the caller's memory `ptr .. ptr + len`
    /// (`ibv_rereg_mr` with `IBV_REREG_MR_CHANGE_TRANSLATION`): the keys
    /// stay, the old memory is freed or unmapped once the device uses the
    /// new one.
    ///
    /// # Safety
    ///
    /// As for [`Pd::reg_mr`]: the memory stays valid, and does not move,
    /// until the MR is destroyed, dropped or moved again.
    pub unsafe fn rereg_memory(&mut self, ptr: NonNull<u8>, len: usize) -> Result<()> {
        use rnic_hw_regs::cmd::rereg;
        if self.mem.is_none() {
            return Err(Error::invalid("the MR is released"));
        }
        let ctx = Arc::clone(&self.pd.ctx);
        let (mem, source) = if len == 0 {
            // SAFETY: a region of no bytes: nothing is ever accessed
            // through it.
            (unsafe { DmaRegion::new(ptr, 0, 0) }, Source::Empty)
        } else {
            // SAFETY: the caller keeps the memory valid while the MR uses
            // it, as for reg_mr.
            let iova = unsafe { ctx.hal().dma_map(ptr, len) }
                .map_err(|e| Error::hal(e, "mapping MR memory for the device"))?;
            // SAFETY: as above, for as long as the MR owns this view.
            (unsafe { DmaRegion::new(ptr, iova, len) }, Source::Mapped)
        };
        if let Err(e) = self.rereg_cmd(rereg::TRANSLATION, None, None, Some((&mem, len))) {
            if source == Source::Mapped {
                // SAFETY: exactly the mapping made above, given to the
                // device only by this command.
                unsafe {
                    ctx.dispose_after_failed_create(
                        DeviceMem::Mapping {
                            iova: mem.iova(),
                            len,
                        },
                        format_args!("moving MR {:#x}", self.lkey),
                        &e,
                    )
                };
            }
            return Err(e);
        }
        if let Some(old) = self.take_memory() {
            // SAFETY: from this platform; the device moved to the new
            // memory.
            unsafe { old.release(ctx.hal()) };
        }
        self.mem = Some(mem);
        self.source = source;
        self.len = len;
        Ok(())
    }

    fn rereg_cmd(
        &self,
        flags: u32,
        pd: Option<&Pd<H>>,
        access: Option<u32>,
        mem: Option<(&DmaRegion, usize)>,
    ) -> Result<()> {
        let (va, len, iova) = mem.map_or((0, 0, 0), |(m, len)| {
            (m.vaddr().as_ptr() as u64, len as u64, m.iova())
        });
        let input = ReregMrIn {
            lkey: le32::from_ne(self.lkey),
            flags: le32::from_ne(flags),
            pdn: le32::from_ne(pd.map_or(0, |p| p.inner.pdn)),
            access: le32::from_ne(access.unwrap_or(0)),
            va: le64::from_ne(va),
            length: le64::from_ne(len),
            iova: le64::from_ne(iova),
        };
        self.pd.ctx.exec(CmdOpcode::ReregMr, &input)
    }

    /// Deregisters the region (DEREG_MR) and frees or unmaps its memory.
    ///
    /// If the device refuses, or never gets the command, the MR is handed
    /// back, still registered. If the outcome is unknown (a timeout), the
    /// MR is gone ([`DestroyError::object`] is `None`) and DEREG_MR is not
    /// sent again (the key may by then name another MR): registered user
    /// memory is cut off from the device by retiring its IOVAs, or kept
    /// mapped until the context closes where the platform cannot
    /// ([`Pd::reg_mr`]); allocated memory is kept until the context closes.
    pub fn destroy(mut self) -> Result<(), DestroyError<Self>> {
        match self.release() {
            Ok(()) => Ok(()),
            Err(e) if self.mem.is_some() => DestroyError::hand_back(self, Err(e)),
            Err(e) => Err(DestroyError::gone(e)),
        }
    }

    /// Deregisters the MR and releases its memory. On a refusal (or a
    /// command not issued) the MR stays registered and keeps its memory;
    /// when the outcome is unknown the memory is given up (`ContextCore::abandon`)
    /// and the MR is left released.
    fn release(&mut self) -> Result<()> {
        if self.mem.is_none() {
            return Ok(());
        }
        let input = ObjIn {
            id: le32::from_ne(self.lkey),
        };
        match self.pd.ctx.exec::<_, ()>(CmdOpcode::DeregMr, &input) {
            Ok(()) => {
                if let Some(mem) = self.take_memory() {
                    // SAFETY: from reg_mr's dma_map or alloc_mr's dma_alloc
                    // on this context's platform, and the MR using it is
                    // deregistered.
                    unsafe { mem.release(self.pd.ctx.hal()) };
                }
                Ok(())
            }
            Err(e) => {
                if e.outcome_unknown() {
                    let lkey = self.lkey;
                    self.give_up(format_args!("deregistering MR {lkey:#x}"), &e);
                }
                Err(e)
            }
        }
    }

    /// Gives up the memory of an MR that may still be registered.
    fn give_up(&mut self, what: core::fmt::Arguments<'_>, err: &Error) {
        if let Some(mem) = self.take_memory() {
            self.pd.ctx.abandon(mem, what, err);
        }
    }

    /// The memory, as the platform gave it: a region, or the mapping of
    /// the caller's memory (whose `dma_map` IOVA and length the view has).
    fn take_memory(&mut self) -> Option<DeviceMem> {
        let mem = self.mem.take()?;
        match self.source {
            Source::Allocated => Some(DeviceMem::Region(mem)),
            Source::Mapped => Some(DeviceMem::Mapping {
                iova: mem.iova(),
                len: self.len,
            }),
            Source::Empty => None,
        }
    }
}

impl<H: Hal> Drop for Mr<H> {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            // The device's MR entry may still be live: freeing or plainly
            // unmapping the memory would let the device (or a peer with the
            // rkey) reach whatever the platform puts there next. User
            // memory is retired (cut off, its IOVAs never reused), since
            // its owner frees it once the MR is gone; if the platform
            // cannot, and for allocated memory, it is kept until shutdown.
            let lkey = self.lkey;
            self.give_up(format_args!("dropping MR {lkey:#x}"), &e);
        }
    }
}

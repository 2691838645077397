//! Protection domains.

use alloc::format;
use alloc::sync::Arc;

use rnic_hw_regs::cmd::{CmdOpcode, CreatePdOut, ObjIn};
use rnic_hw_regs::le32;
use rnic_queues::Hal;

use crate::context::{Context, ContextCore};
use crate::error::{DestroyError, Error, ErrorKind, Result};

/// A protection domain (`struct ibv_pd`).
///
/// MRs and QPs created from it keep it alive: dropping the `Pd` while they
/// exist defers the device-side deallocation until the last one is gone.
pub struct Pd<H: Hal> {
    pub(crate) inner: Arc<PdInner<H>>,
}

/// The device-side PD, shared by the handle, its MRs and its QPs.
pub(crate) struct PdInner<H: Hal> {
    pub(crate) ctx: Arc<ContextCore<H>>,
    pub(crate) pdn: u32,
    live: bool,
}

impl<H: Hal> PdInner<H> {
    /// Deallocates the PD. When the outcome is unknown (a timeout) the PD
    /// counts as released all the same: DESTROY_PD is never sent again, as
    /// its number may by then belong to a new PD.
    fn release(&mut self) -> Result<()> {
        if self.live {
            let input = ObjIn {
                id: le32::from_ne(self.pdn),
            };
            if let Err(e) = self.ctx.exec::<_, ()>(CmdOpcode::DestroyPd, &input) {
                if e.outcome_unknown() {
                    self.live = false;
                }
                return Err(e);
            }
            self.live = false;
        }
        Ok(())
    }
}

impl<H: Hal> Drop for PdInner<H> {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            log::error!("dropping PD {}: {e}", self.pdn);
        }
    }
}

impl<H: Hal> Context<H> {
    /// Allocates a protection domain (CREATE_PD).
    pub fn alloc_pd(&self) -> Result<Pd<H>> {
        let out: CreatePdOut = self.shared.exec(CmdOpcode::CreatePd, &())?;
        Ok(Pd {
            inner: Arc::new(PdInner {
                ctx: Arc::clone(&self.shared),
                pdn: out.pdn.to_ne(),
                live: true,
            }),
        })
    }
}

impl<H: Hal> Pd<H> {
    /// The PD number.
    pub fn pd_num(&self) -> u32 {
        self.inner.pdn
    }

    /// Deallocates the PD (DESTROY_PD). A PD that still has MRs or QPs is
    /// busy. If the device refuses, or never gets the command, the PD is
    /// handed back; if the outcome is unknown (a timeout), the PD is gone
    /// ([`DestroyError::object`] is `None`) and DESTROY_PD is not sent again
    /// (the number may by then belong to a new PD).
    pub fn destroy(mut self) -> Result<(), DestroyError<Self>> {
        let users = Arc::strong_count(&self.inner) - 1;
        let result = match Arc::get_mut(&mut self.inner) {
            Some(inner) => inner.release(),
            None => Err(Error::new(
                ErrorKind::Busy,
                format!(
                    "PD {} still has {users} memory region(s) or queue pair(s)",
                    self.inner.pdn
                ),
            )),
        };
        match result {
            Err(e) if !self.inner.live => Err(DestroyError::gone(e)),
            result => DestroyError::hand_back(self, result),
        }
    }
}

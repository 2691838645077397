//! User contexts (each with its UAR page of doorbells) and protection
//! domains.

use alloc::format;

use rnic_pvrdma_regs::cmd::{
    CmdOpcode, CreateBind, CreateUc, DestroyBind, Gid, HandleCmd, HandleResp, RespHdr,
};
use rnic_pvrdma_regs::{le32, le64};
use rnic_queues::Hal;
use rnic_verbs::{DestroyError, Error, ErrorKind, Result};

use crate::device::Device;

/// Pages of BAR 2, each one context's doorbells.
pub const UAR_PAGES: usize = 2048;

/// A user context: the device's handle and the UAR page its doorbells are
/// on. Destroy it with [`Device::destroy_uc`] after everything made in it.
#[derive(Debug)]
pub struct Uc {
    pub(crate) handle: u32,
    pub(crate) uar: usize,
}

impl Uc {
    /// The device's handle.
    pub fn handle(&self) -> u32 {
        self.handle
    }

    /// The index of its UAR page in BAR 2.
    pub fn uar(&self) -> usize {
        self.uar
    }
}

/// A protection domain. Destroy it with [`Device::destroy_pd`].
#[derive(Debug)]
pub struct Pd {
    pub(crate) handle: u32,
}

impl Pd {
    /// The device's handle.
    pub fn handle(&self) -> u32 {
        self.handle
    }
}

impl<H: Hal> Device<H> {
    /// A new context on the lowest free UAR page (CREATE_UC).
    pub fn create_uc(&self) -> Result<Uc> {
        let mut uars = self.uars.lock();
        let Some(uar) = uars.iter().position(|used| !used) else {
            return Err(Error::new(
                ErrorKind::NoMemory,
                format!("all {UAR_PAGES} UAR pages are in use"),
            ));
        };
        let req = CreateUc {
            pfn: le64::from_ne(self.uar_pfn + uar as u64),
            ..Default::default()
        };
        let resp: HandleResp = self.exec(CmdOpcode::CreateUc, &req)?;
        uars[uar] = true;
        Ok(Uc {
            handle: resp.handle.to_ne(),
            uar,
        })
    }

    /// Destroys a context (DESTROY_UC) and frees its UAR page. If the
    /// outcome is unknown the device may still ring on the page, and it
    /// stays taken.
    pub fn destroy_uc(&self, uc: Uc) -> core::result::Result<(), DestroyError<Uc>> {
        self.destroy_object(
            CmdOpcode::DestroyUc,
            uc.handle,
            uc,
            |dev, uc| dev.uars.lock()[uc.uar] = false,
            |_, _| {},
        )
    }

    /// A new protection domain in `uc` (CREATE_PD).
    pub fn create_pd(&self, uc: &Uc) -> Result<Pd> {
        let resp: HandleResp = self.exec(
            CmdOpcode::CreatePd,
            &HandleCmd {
                handle: le32::from_ne(uc.handle),
                ..Default::default()
            },
        )?;
        Ok(Pd {
            handle: resp.handle.to_ne(),
        })
    }

    /// Destroys a protection domain (DESTROY_PD).
    pub fn destroy_pd(&self, pd: Pd) -> core::result::Result<(), DestroyError<Pd>> {
        self.destroy_object(CmdOpcode::DestroyPd, pd.handle, pd, |_, _| {}, |_, _| {})
    }

    /// Destroys `object` with command `op`. Destroyed, `freed` releases
    /// what it held; refused (or never issued), it is handed back; with
    /// the outcome unknown, `kept` deals with what the device may still
    /// use, and the object is gone.
    pub(crate) fn destroy_object<T>(
        &self,
        op: CmdOpcode,
        handle: u32,
        object: T,
        freed: impl FnOnce(&Self, T),
        kept: impl FnOnce(&Self, T),
    ) -> core::result::Result<(), DestroyError<T>> {
        match self.destroy(op, handle) {
            Ok(()) => {
                freed(self, object);
                Ok(())
            }
            Err(e) if e.outcome_unknown() => {
                kept(self, object);
                Err(DestroyError::gone(e))
            }
            Err(e) => Err(DestroyError {
                object: Some(object),
                error: e,
            }),
        }
    }

    /// Puts `gid` of `gid_type` (`dsr::GID_TYPE_ROCE_V1` or `_V2`) at
    /// `index` of the port's GID table (CREATE_BIND), where address vectors
    /// name it as their source.
    pub fn create_bind(&self, index: u32, gid: Gid, gid_type: u8) -> Result<()> {
        let len = self.caps().gid_tbl_len.to_ne();
        if index >= len {
            return Err(Error::invalid(format!(
                "GID index {index}: the device's table holds {len}"
            )));
        }
        let req = CreateBind {
            mtu: le32::from_ne(0),
            vlan: le32::from_ne(0),
            index: le32::from_ne(index),
            new_gid: gid,
            gid_type,
            ..Default::default()
        };
        self.exec::<_, RespHdr>(CmdOpcode::CreateBind, &req)
            .map(drop)
    }

    /// Removes `gid` from `index` of the port's GID table (DESTROY_BIND).
    pub fn destroy_bind(&self, index: u32, gid: Gid) -> Result<()> {
        let req = DestroyBind {
            index: le32::from_ne(index),
            dest_gid: gid,
            ..Default::default()
        };
        self.exec::<_, RespHdr>(CmdOpcode::DestroyBind, &req)
            .map(drop)
    }

    /// Runs a destroy command, which names its object by handle and
    /// answers only a header.
    pub(crate) fn destroy(&self, op: CmdOpcode, handle: u32) -> Result<()> {
        let req = HandleCmd {
            handle: le32::from_ne(handle),
            ..Default::default()
        };
        self.exec::<_, RespHdr>(op, &req).map(drop)
    }
}

//! Memory windows (`struct ibv_mw`): remote access to part of an MR under
//! a key of its own, bound and invalidated by work requests.

use alloc::format;
use alloc::sync::Arc;
use core::sync::atomic::{AtomicU32, Ordering};

use rnic_hw_regs::cmd::{AllocMwIn, AllocMwOut, CmdOpcode, ObjIn};
use rnic_hw_regs::le32;
use rnic_queues::Hal;
use rnic_verbs::access;

use crate::error::{DestroyError, Error, PostError, Result};
use crate::mr::Mr;
use crate::pd::{Pd, PdInner};
use crate::qp::Qp;
use rnic_verbs::{MwBind, MwType, Payload, SendOp, SendWr};

/// A memory window.
pub struct Mw<H: Hal> {
    pd: Arc<PdInner<H>>,
    mw_type: MwType,
    /// The rkey as of the last bind work request made for it.
    rkey: AtomicU32,
    live: bool,
}

impl<H: Hal> Pd<H> {
    /// Allocates an unbound memory window (`ibv_alloc_mw`, ALLOC_MW).
    pub fn alloc_mw(&self, mw_type: MwType) -> Result<Mw<H>> {
        let input = AllocMwIn {
            pdn: le32::from_ne(self.inner.pdn),
            mw_type: le32::from_ne(mw_type as u32),
        };
        let out: AllocMwOut = self.inner.ctx.exec(CmdOpcode::AllocMw, &input)?;
        Ok(Mw {
            pd: Arc::clone(&self.inner),
            mw_type,
            rkey: AtomicU32::new(out.rkey.to_ne()),
            live: true,
        })
    }
}

/// The next key of `rkey`: the same index, the key byte plus one
/// (`ibv_inc_rkey`).
fn inc_rkey(rkey: u32) -> u32 {
    (rkey & !0xff) | (rkey.wrapping_add(1) & 0xff)
}

impl<H: Hal> Mw<H> {
    /// Its rkey (`ibv_mw.rkey`): what a peer names it by once bound.
    pub fn rkey(&self) -> u32 {
        self.rkey.load(Ordering::Acquire)
    }

    /// Its type.
    pub fn mw_type(&self) -> MwType {
        self.mw_type
    }

    /// The bind work request that gives the window `length` bytes of `mr`
    /// at `addr` with `access` (`REMOTE_*` flags) under its next rkey,
    /// which [`Mw::rkey`] reports from now on. Checked by the device when
    /// it executes it (`MW_BIND_ERR` on failure).
    pub fn bind_wr(&self, mr: &Mr<H>, addr: u64, length: u64, access: u32) -> MwBind {
        let key = inc_rkey(self.rkey()) as u8;
        self.bind_wr_keyed(mr, (addr, length, access), key)
    }

    /// [`Mw::bind_wr`] with the key byte of the new rkey chosen by the
    /// caller (`ibv_send_wr.bind_mw.rkey`, IBA 10.6.7.2.2: the consumer
    /// owns the key of a type 2 window).
    pub fn bind_wr_keyed(
        &self,
        mr: &Mr<H>,
        (addr, length, access): (u64, u64, u32),
        key: u8,
    ) -> MwBind {
        let old = self.rkey();
        let new = (old & !0xff) | u32::from(key);
        self.rkey.store(new, Ordering::Release);
        MwBind {
            mw_rkey: old,
            new_rkey: new,
            mr_lkey: mr.lkey(),
            addr,
            length,
            access: window_access(access),
        }
    }

    /// Deallocates the window (`ibv_dealloc_mw`, DEALLOC_MW); a bound
    /// window is unbound first. A refusal hands it back.
    pub fn destroy(mut self) -> Result<(), DestroyError<Self>> {
        match self.release() {
            Err(e) if !self.live => Err(DestroyError::gone(e)),
            r => DestroyError::hand_back(self, r),
        }
    }

    fn release(&mut self) -> Result<()> {
        if !self.live {
            return Ok(());
        }
        let input = ObjIn {
            id: le32::from_ne(self.rkey()),
        };
        if let Err(e) = self.pd.ctx.exec::<_, ()>(CmdOpcode::DeallocMw, &input) {
            // Never sent again on an unknown outcome: the key may be
            // another window's by now.
            if e.outcome_unknown() {
                self.live = false;
            }
            return Err(e);
        }
        self.live = false;
        Ok(())
    }
}

impl<H: Hal> Drop for Mw<H> {
    fn drop(&mut self) {
        if let Err(e) = self.release() {
            log::error!("dropping memory window {:#x}: {e}", self.rkey());
        }
    }
}

/// The rights a bind's `access` gives the window. A window grants remote
/// access only; `LOCAL_WRITE`, which programs pass in it (rdma-core's
/// tests do, and rxe and mlx5 accept it), is no right of a window and is
/// dropped.
fn window_access(access: u32) -> u32 {
    access & !access::LOCAL_WRITE
}

impl<H: Hal> Qp<H> {
    /// Binds type 1 window `mw` to `length` bytes of `mr` at `addr` with
    /// `access` (`ibv_bind_mw`): posts the bind work request `wr_id` with
    /// `flags` on this QP and returns the window's new rkey.
    pub fn bind_mw(
        &self,
        mw: &Mw<H>,
        mr: &Mr<H>,
        (addr, length, access): (u64, u64, u32),
        wr_id: u64,
        flags: u32,
    ) -> Result<u32, PostError> {
        let refuse = |error| Err(PostError { index: 0, error });
        if mw.mw_type != MwType::Type1 {
            return refuse(Error::invalid(
                "ibv_bind_mw binds type 1 windows: bind type 2 with a BindMw work request",
            ));
        }
        if window_access(access) & !access::MW_SUPPORTED != 0 {
            return refuse(Error::invalid(format!(
                "memory window access {access:#x} is not a set of REMOTE_* flags"
            )));
        }
        let old = mw.rkey();
        let bind = mw.bind_wr(mr, addr, length, access);
        let r = self.post_send(&[SendWr {
            wr_id,
            op: SendOp::BindMw { bind },
            payload: Payload::Sgl(&[]),
            flags,
        }]);
        if r.is_err() {
            mw.rkey.store(old, Ordering::Release);
        }
        r.map(|()| bind.new_rkey)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_key_keeps_the_index() {
        assert_eq!(inc_rkey(0x1234_56fe), 0x1234_56ff);
        assert_eq!(inc_rkey(0x1234_56ff), 0x1234_5600);
    }
}

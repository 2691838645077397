//! BAR 0: the register file, reset, enable and fatal-error behaviour.

use rnic_hw_regs::bar0::*;
use rnic_hw_regs::cmd::CMD_ENTRY_SIZE;
use rnic_hw_regs::eqe::{EventType, EQE_SIZE};
use rnic_hw_regs::{pci, PAGE_SIZE};

use crate::cmdq::CmdQueue;
use crate::eq::EventQueue;
use crate::iommu::DmaRange;
use crate::state::{Dev, State};

/// Register values that are not derived from the configuration.
#[derive(Debug, Default)]
pub(crate) struct Regs {
    /// `CTRL.enable` as last written.
    pub ctrl_enable: bool,
    pub ready: bool,
    pub enabled: bool,
    pub fatal: bool,
    pub fatal_syndrome: u32,
    pub cmdq_lo: u32,
    pub cmdq_hi: u32,
    /// Command queue IOVA, latched on the `CMDQ_BASE_HI` write.
    pub cmdq_base: u64,
    pub cmdq_ctrl: u32,
    pub eq_lo: u32,
    pub eq_hi: u32,
    /// Event queue IOVA, latched on the `EQ_BASE_HI` write.
    pub eq_base: u64,
    pub eq_ctrl: u32,
    pub intr_cause: u32,
    pub intr_mask: u32,
}

/// The defined bits of `CMDQ_CTRL` (`log_size`).
fn cmdq_ctrl_defined() -> u32 {
    CmdqCtrl::new().with_log_size(0x1f).into_bits().to_ne()
}

/// The defined bits of `EQ_CTRL`: `log_size`, `vector`, `enable`.
fn eq_ctrl_defined() -> u32 {
    EqCtrl::new()
        .with_log_size(0x1f)
        .with_vector(0x7ff)
        .with_enable(true)
        .into_bits()
        .to_ne()
}

/// The defined bits of `INTR_CAUSE` and `INTR_MASK`.
fn intr_defined() -> u32 {
    IntrCause::new()
        .with_async_eq(true)
        .with_cmd_done(true)
        .with_fatal(true)
        .into_bits()
        .to_ne()
}

/// Whether a BAR 0 write at `off` triggers device work (and so is queued to
/// the device worker in thread mode).
pub(crate) fn is_work(off: usize) -> bool {
    matches!(off, CTRL | CMDQ_DB | EQ_DB)
}

/// Reads the register at `off`; undefined offsets read 0.
pub(crate) fn read(dev: &Dev, off: usize) -> u32 {
    let c = &dev.cfg;
    let r = &dev.regs;
    match off {
        ID => MAGIC,
        VERSION => Version::new()
            .with_major(VERSION_MAJOR)
            .with_minor(VERSION_MINOR)
            .into_bits()
            .to_ne(),
        CAP_DEV => DevCaps::new()
            .with_num_ports(1)
            .with_log_max_msg(c.log_max_msg)
            .with_log_max_cmdq(c.log_max_cmdq)
            .with_log_max_eq(c.log_max_eq)
            .with_atomics(true)
            .with_ud(true)
            .with_uc(true)
            .with_srq(c.max_srq > 0)
            .with_bf(true)
            .with_gsi(true)
            .into_bits()
            .to_ne(),
        CAP_MAX_QP => c.max_qp,
        CAP_MAX_CQ => c.max_cq,
        CAP_MAX_MR => c.max_mr,
        CAP_MAX_PD => c.max_pd,
        CAP_QUEUE => QueueCaps::new()
            .with_log_max_wq(c.log_max_wq)
            .with_log_max_cqe(c.log_max_cqe)
            .with_max_sge(c.max_sge)
            .with_max_inline_16((c.max_inline / 16) as u8)
            .with_max_wqe_bbs(c.max_wqe_bbs)
            .into_bits()
            .to_ne(),
        CAP_UAR_PAGES => c.uar_pages,
        CAP_MAX_SRQ => c.max_srq,
        CAP_MAX_EQ => c.max_eq,
        CAP_MSIX => c.msix_vectors.into(),
        CTRL => Ctrl::new().with_enable(r.ctrl_enable).into_bits().to_ne(),
        STATUS => Status::new()
            .with_ready(r.ready)
            .with_enabled(r.enabled)
            .with_fatal(r.fatal)
            .into_bits()
            .to_ne(),
        FATAL_SYNDROME => r.fatal_syndrome,
        CMDQ_BASE_LO => r.cmdq_lo,
        CMDQ_BASE_HI => r.cmdq_hi,
        CMDQ_CTRL => r.cmdq_ctrl,
        EQ_BASE_LO => r.eq_lo,
        EQ_BASE_HI => r.eq_hi,
        EQ_CTRL => r.eq_ctrl,
        INTR_CAUSE => r.intr_cause,
        INTR_MASK => r.intr_mask,
        _ => 0,
    }
}

/// Writes the register at `off`. Writes to read-only or undefined offsets
/// are ignored.
pub(crate) fn write(st: &mut State, off: usize, v: u32) {
    match off {
        CTRL => return ctrl(st, v),
        CMDQ_DB => return crate::cmdq::doorbell(st, v),
        EQ_DB => return crate::eq::doorbell(&mut st.dev, v),
        _ => {}
    }
    let r = &mut st.dev.regs;
    let config = matches!(
        off,
        CMDQ_BASE_LO | CMDQ_BASE_HI | CMDQ_CTRL | EQ_BASE_LO | EQ_BASE_HI | EQ_CTRL
    );
    // Queue configuration is fixed while the device runs and meaningless
    // while it resets: a write then would pull the rings from under it.
    if config && (!r.ready || r.enabled) {
        log::warn!("bar0: write {v:#x} to {off:#x} ignored while not ready or enabled");
        return;
    }
    match off {
        CMDQ_BASE_LO => r.cmdq_lo = v,
        CMDQ_BASE_HI => {
            r.cmdq_hi = v;
            r.cmdq_base = (v as u64) << 32 | r.cmdq_lo as u64;
        }
        // Reserved bits are not stored: they read as zero (spec 1).
        CMDQ_CTRL => r.cmdq_ctrl = v & cmdq_ctrl_defined(),
        EQ_BASE_LO => r.eq_lo = v,
        EQ_BASE_HI => {
            r.eq_hi = v;
            r.eq_base = (v as u64) << 32 | r.eq_lo as u64;
        }
        EQ_CTRL => r.eq_ctrl = v & eq_ctrl_defined(),
        INTR_CAUSE => r.intr_cause &= !v,
        INTR_MASK => r.intr_mask = v & intr_defined(),
        _ => log::warn!("bar0: write {v:#x} to read-only or undefined offset {off:#x} ignored"),
    }
}

fn le(v: u32) -> rnic_hw_regs::le32 {
    rnic_hw_regs::le32::from_ne(v)
}

/// A `CTRL` write: reset, enable or disable.
fn ctrl(st: &mut State, v: u32) {
    let c = Ctrl::from_bits(le(v));
    if c.reset() {
        log::debug!("device reset");
        st.reset();
        return;
    }
    st.dev.regs.ctrl_enable = c.enable();
    if st.dev.regs.fatal {
        log::warn!("bar0: CTRL {v:#x} ignored in the fatal state (only reset leaves it)");
        return;
    }
    match (c.enable(), st.dev.regs.enabled) {
        (true, false) => enable(&mut st.dev),
        (false, true) => {
            log::debug!("device disabled");
            st.dev.regs.enabled = false;
        }
        _ => {}
    }
}

/// Validates the command queue and event queue configuration and starts the
/// device, or enters the fatal state.
fn enable(dev: &mut Dev) {
    let cmdq_ctrl = CmdqCtrl::from_bits(le(dev.regs.cmdq_ctrl));
    let log = cmdq_ctrl.log_size();
    let base = dev.regs.cmdq_base;
    if log > dev.cfg.log_max_cmdq || base % PAGE_SIZE as u64 != 0 {
        return fatal(dev, FatalSyndrome::BadConfig);
    }
    let Some(ring) = DmaRange::new(&dev.iommu, base, CMD_ENTRY_SIZE << log) else {
        return fatal(dev, FatalSyndrome::CmdqDma);
    };
    let eq_ctrl = EqCtrl::from_bits(le(dev.regs.eq_ctrl));
    let eq = if eq_ctrl.enable() {
        let log = eq_ctrl.log_size();
        let base = dev.regs.eq_base;
        if log > dev.cfg.log_max_eq
            || base % PAGE_SIZE as u64 != 0
            || eq_ctrl.vector() >= dev.cfg.msix_vectors
        {
            return fatal(dev, FatalSyndrome::BadConfig);
        }
        let Some(ring) = DmaRange::new(&dev.iommu, base, EQE_SIZE << log) else {
            return fatal(dev, FatalSyndrome::EqDma);
        };
        Some(EventQueue::new(ring, log, eq_ctrl.vector()))
    } else {
        None
    };
    dev.cmdq = Some(CmdQueue::new(ring, log));
    dev.eq = eq;
    dev.regs.enabled = true;
    log::debug!("device enabled: cmdq 2^{log} at {base:#x}");
}

/// Enters the fatal state: the device stops until reset. An internal
/// error goes through [`internal_error`], which also completes the
/// outstanding work.
pub(crate) fn fatal(dev: &mut Dev, syndrome: FatalSyndrome) {
    announce(dev, syndrome);
    stop(dev, syndrome);
}

/// Enters the fatal state for an internal error (the model failed).
/// Host memory is still reachable: outstanding work is completed with
/// FATAL_ERR rather than left waiting. (A model that panicked may panic
/// again doing it: then the work stays.)
pub(crate) fn internal_error(st: &mut State) {
    let first = !st.dev.regs.fatal;
    announce(&mut st.dev, FatalSyndrome::Internal);
    if first {
        let failed = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            crate::qp::fail_all(st);
        }));
        if failed.is_err() {
            log::error!("completing outstanding work after the fatal error failed");
        }
    }
    stop(&mut st.dev, FatalSyndrome::Internal);
}

/// Logs a fatal error and, the first time, while the event queue still
/// works, posts it (`IBV_EVENT_DEVICE_FATAL`); a failing EQ cannot.
fn announce(dev: &mut Dev, syndrome: FatalSyndrome) {
    log::error!("device fatal error: {syndrome:?}");
    if !dev.regs.fatal && syndrome != FatalSyndrome::EqDma {
        crate::eq::post(dev, EventType::DeviceFatal, 0, syndrome as u32);
    }
}

/// Stops the device in the fatal state and raises the fatal cause.
fn stop(dev: &mut Dev, syndrome: FatalSyndrome) {
    dev.regs.fatal = true;
    dev.regs.enabled = false;
    dev.regs.fatal_syndrome = syndrome as u32;
    raise_cause(
        dev,
        IntrCause::new().with_fatal(true),
        pci::MSIX_ASYNC_VECTOR,
    );
}

/// Sets interrupt cause bits and raises `vector` for an unmasked one. The
/// command-done cause raises only when it becomes set, so that a driver that
/// polls commands (and never clears it) costs no wake-up per command; the
/// other causes are already rate-limited (EQ arm, fatal state).
pub(crate) fn raise_cause(dev: &mut Dev, cause: IntrCause, vector: u16) {
    let bits = cause.into_bits().to_ne();
    let new = bits & !dev.regs.intr_cause;
    let cmd_done = IntrCause::new().with_cmd_done(true).into_bits().to_ne();
    dev.regs.intr_cause |= bits;
    if bits & !dev.regs.intr_mask & (new | !cmd_done) != 0 {
        dev.irq.raise(vector);
    }
}

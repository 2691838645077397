//! [`Boundary`]: what one kind of device puts across the `Hal`, as a
//! middleware sees it. [`TraceHal`](crate::TraceHal) and
//! [`FaultHal`](crate::FaultHal) are generic over it: the platform calls
//! are the same for every device, while which register is a doorbell,
//! where the commands and rings lie and how their bytes read are the
//! device's. [`Rnic`](crate::Rnic) and [`Pvrdma`](crate::Pvrdma) are the
//! two; a third device adds its own beside them (docs/providers.md).

use std::collections::BTreeMap;
use std::fmt::Debug;

use rnic_queues::{DmaRegion, HalError, Pod};

use crate::decode::Decoded;
use crate::fault::Injected;
use crate::trace::Lane;

/// A stretch of DMA memory the host can reach. Only this crate makes one
/// ([`Dma::host`], and offsets into what it gave): reading or writing
/// through it is sound only inside a region the platform handed out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Span {
    /// Host address of its start.
    pub(crate) vaddr: usize,
    /// Its length in bytes.
    pub(crate) len: usize,
}

impl Span {
    /// Copies `len` bytes at offset `at` (wrapping within the span; zeros
    /// from an empty span).
    pub(crate) fn copy(self, at: usize, len: usize) -> Vec<u8> {
        if self.len == 0 {
            return vec![0; len];
        }
        (0..len)
            .map(|i| {
                let p = self.vaddr + (at + i) % self.len;
                // SAFETY: spans come only from `Dma::host`, inside a region
                // the platform handed out and has not taken back (regions
                // leave the map at dma_free). The device may be writing it:
                // a volatile byte read sees some value, which only the
                // decoded text or the fault injected depends on.
                unsafe { std::ptr::read_volatile(p as *const u8) }
            })
            .collect()
    }

    /// Writes `bytes` at offset `at` (wrapping within the span; nothing
    /// into an empty one).
    pub(crate) fn overwrite(self, at: usize, bytes: &[u8]) {
        if self.len == 0 {
            return;
        }
        for (i, &b) in bytes.iter().enumerate() {
            let p = self.vaddr + (at + i) % self.len;
            // SAFETY: as in `copy`; a boundary writes only what the device
            // has handed back (a response, a CQE) before the driver reads
            // it, or a command before the device reads it, as a faulty
            // device would have written it.
            unsafe { std::ptr::write_volatile(p as *mut u8, b) };
        }
    }
}

/// The DMA regions the platform handed out, by IOVA: how a middleware
/// finds in host memory what the driver names to the device by address.
/// Its lookups are this crate's: a device's boundary lives in this crate
/// beside `rnic` and `pvrdma`.
#[derive(Debug, Default)]
pub struct Dma(BTreeMap<u64, Span>);

impl Dma {
    /// Notes a region the platform handed out.
    pub(crate) fn alloc(&mut self, r: &DmaRegion) {
        let span = Span {
            vaddr: r.vaddr().as_ptr() as usize,
            len: r.len(),
        };
        self.0.insert(r.iova(), span);
    }

    /// Forgets a region given back.
    pub(crate) fn free(&mut self, iova: u64) {
        self.0.remove(&iova);
    }

    /// The host span of `len` bytes at `iova`, if they lie in one region.
    pub(crate) fn host(&self, iova: u64, len: usize) -> Option<Span> {
        let (&base, r) = self.0.range(..=iova).next_back()?;
        let off = usize::try_from(iova - base).ok()?;
        (off.checked_add(len)? <= r.len).then_some(Span {
            vaddr: r.vaddr + off,
            len,
        })
    }

    /// Reads a plain structure at `iova`, if it lies in one region.
    pub(crate) fn read<T: Pod>(&self, iova: u64) -> Option<T> {
        let span = self.host(iova, std::mem::size_of::<T>())?;
        Some(crate::decode::read(&span.copy(0, span.len)))
    }
}

/// One thing a boundary saw, for the trace to record.
#[derive(Debug)]
pub struct Seen {
    /// Its lane.
    pub lane: Lane,
    /// Its kind (see [`crate::Event::kind`]).
    pub kind: &'static str,
    /// Its decoded text and fields.
    pub decoded: Decoded,
    /// Its bytes.
    pub raw: Vec<u8>,
}

impl Seen {
    /// What the driver told the device.
    pub fn told(kind: &'static str, decoded: Decoded, raw: &[u8]) -> Self {
        Seen {
            lane: Lane::Doorbell,
            kind,
            decoded,
            raw: raw.to_vec(),
        }
    }

    /// What the device wrote.
    pub fn written(kind: &'static str, decoded: Decoded, raw: &[u8]) -> Self {
        Seen {
            lane: Lane::Device,
            kind,
            decoded,
            raw: raw.to_vec(),
        }
    }
}

/// One kind of device's side of the `Hal`: a shadow of what the driver
/// and the device told each other (learned from register writes and the
/// commands that placed rings), decoded for [`TraceHal`](crate::TraceHal)
/// and changed for [`FaultHal`](crate::FaultHal).
///
/// Every method sees the [`Dma`] regions the platform handed out; the
/// middleware calls them with its lock held, in the order of the calls it
/// passes on. A trace calls [`Boundary::read`] to [`Boundary::look`]; a
/// fault injector calls [`Boundary::learn_read`] and the `inject_`
/// methods. Each keeps its own value.
pub trait Boundary: Default + Send + 'static {
    /// The faults of this device's own interface that
    /// [`FaultHal`](crate::FaultHal) can inject (commands, completions).
    type Faults: Debug + Clone + Default + Send;

    /// The register whose write hands the device its commands: `(bar,
    /// offset)`. [`crate::Faults::hang_commands`] swallows its writes.
    const COMMAND_DOORBELL: (u8, usize);

    /// A 32-bit register read that gave `value`, decoded (after
    /// [`Boundary::learn_read`]).
    fn read(&mut self, dma: &Dma, bar: u8, offset: usize, value: u32, seen: &mut Vec<Seen>);

    /// What the shadow learns from a register read (PVRDMA's VERSION says
    /// how the device answers CREATE_QP); nothing by default.
    fn learn_read(&mut self, bar: u8, offset: usize, value: u32) {
        let _ = (bar, offset, value);
    }

    /// A write of `width` bytes the driver makes, before the device has
    /// it: the register or doorbell, and what it hands over (commands,
    /// WQEs).
    fn write(
        &mut self,
        dma: &Dma,
        bar: u8,
        offset: usize,
        value: u64,
        width: u8,
        seen: &mut Vec<Seen>,
    );

    /// A 64-byte write (BlueFlame) before it is passed on, and with its
    /// `result` after.
    fn block(
        &mut self,
        bar: u8,
        offset: usize,
        block: &[u64; 8],
        result: Option<&Result<(), HalError>>,
        seen: &mut Vec<Seen>,
    );

    /// What the device wrote since the last look: responses, CQEs, events.
    fn look(&mut self, dma: &Dma, seen: &mut Vec<Seen>);

    /// Changes a write the driver makes before the device has it (a
    /// command to refuse).
    fn inject_write(
        &mut self,
        dma: &Dma,
        bar: u8,
        offset: usize,
        value: u64,
        faults: &mut Self::Faults,
        injected: &mut Injected,
    );

    /// Changes what the device wrote since the last look, before the
    /// driver reads it.
    fn inject_look(&mut self, dma: &Dma, faults: &mut Self::Faults, injected: &mut Injected);
}

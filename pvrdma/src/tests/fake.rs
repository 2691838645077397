//! A fake PVRDMA device behind a [`Hal`], for the driver's unit tests: DMA
//! memory from the heap at IOVAs of its own, the register BAR, a response
//! vector, and a command handler the test scripts. It does what QEMU's
//! device does with the registers (reads the DSR on DSRHIGH and writes its
//! capabilities, executes a command inside the REQUEST write, sets ERR,
//! raises the vector), and whatever the test tells it to do wrong.

extern crate std;

use core::ptr::NonNull;
use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::boxed::Box;
use std::sync::{Arc, Mutex};
use std::vec;
use std::vec::Vec;

use rnic_pvrdma_regs::bar::{REG, UAR};
use rnic_pvrdma_regs::bar1;
use rnic_pvrdma_regs::cmd::{CmdHdr, RespHdr, CMD_REQ_SIZE, CMD_RESP_SIZE};
use rnic_pvrdma_regs::dsr::{DeviceCaps, DeviceMode, Dsr, DSR_CAPS_OFFSET, GID_TYPE_ROCE_V1};
use rnic_pvrdma_regs::{le32, le64, PAGE_SIZE};
use rnic_queues::{DmaRegion, Hal, HalError};

/// What the device does with one command.
pub struct Reply {
    /// The response's bytes (from offset 0 of the response slot), if the
    /// device writes one.
    pub resp: Option<Vec<u8>>,
    /// What `ERR` reads afterwards.
    pub err_reg: u32,
    /// Whether the response vector fires.
    pub irq: bool,
}

/// A command handler: the request slot's bytes in, the reply out.
pub type Handler = Box<dyn FnMut(&[u8]) -> Reply + Send>;

/// The reply QEMU gives a command it executed: the cookie, the `ack`,
/// `err`, then `body` after the header.
pub fn answer(req: &[u8], err: u8, body: &[u8]) -> Reply {
    let hdr: CmdHdr = read(req, 0);
    let mut resp = vec![0u8; CMD_RESP_SIZE];
    let rh = RespHdr {
        response: hdr.response,
        ack: le32::from_ne(hdr.cmd.to_ne() | rnic_pvrdma_regs::cmd::RESP_BIT),
        err,
        reserved: [0; 3],
    };
    write(&mut resp, 0, rh);
    resp[16..16 + body.len()].copy_from_slice(body);
    Reply {
        resp: Some(resp),
        err_reg: if err == 0 { 0 } else { (-(err as i32)) as u32 },
        irq: true,
    }
}

fn read<T: Copy>(bytes: &[u8], off: usize) -> T {
    assert!(off + core::mem::size_of::<T>() <= bytes.len());
    // SAFETY: in bounds (asserted); the fake reads only Pod layouts.
    unsafe { bytes.as_ptr().add(off).cast::<T>().read_unaligned() }
}

fn write<T: Copy>(bytes: &mut [u8], off: usize, v: T) {
    assert!(off + core::mem::size_of::<T>() <= bytes.len());
    // SAFETY: in bounds (asserted); the fake writes only Pod layouts.
    unsafe { bytes.as_mut_ptr().add(off).cast::<T>().write_unaligned(v) }
}

struct Alloc {
    iova: u64,
    ptr: NonNull<u8>,
    len: usize,
    /// The caller's memory (`dma_map`), not the fake's to free.
    mapped: bool,
}

/// The fake device's state.
pub struct State {
    allocs: Vec<Alloc>,
    next_iova: u64,
    /// Registers of BAR 1, by offset / 4.
    pub regs: [u32; bar1::REGS_SIZE / 4],
    /// Every register write, in order: (offset, value).
    pub writes: Vec<(usize, u32)>,
    /// Every doorbell write to BAR 2, in order: (offset, value).
    pub uar_writes: Vec<(usize, u32)>,
    /// The DSR as the device read it.
    pub dsr: Option<Dsr>,
    /// The capabilities the device writes into the DSR.
    pub caps: DeviceCaps,
    /// The response vector has fired and not been waited for.
    pub irq: bool,
    /// Every request the device was given.
    pub requests: Vec<Vec<u8>>,
    /// The command handler.
    pub handler: Handler,
    /// Nanoseconds, advanced by each look at the clock.
    pub now: u64,
    /// Activation fails: ERR keeps reading 0xffff.
    pub fail_activate: bool,
    /// `dma_map` fails.
    pub refuse_map: bool,
    /// The next wait for the CQ-notification vector finds this CQ's
    /// notification arriving.
    pub notify_cq: Option<u32>,
    /// Every `dma_map`: (address, length).
    pub maps: Vec<(usize, usize)>,
    /// DMA writes the device makes at the driver's next `poll_empty`, as a
    /// device that runs in the polling thread: (IOVA, bytes), in order.
    pub at_poll: Vec<(u64, Vec<u8>)>,
}

// SAFETY: the allocations are plain heap memory, accessed under the lock.
unsafe impl Send for State {}

/// The fake device, as the platform the driver runs on: a handle the test
/// keeps a clone of, to script and inspect the device.
#[derive(Clone)]
pub struct Fake(Arc<Mutex<State>>);

impl core::fmt::Debug for Fake {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        f.write_str("Fake")
    }
}

impl Fake {
    /// A well-behaved device of `version` that answers every command with
    /// success and an empty body.
    pub fn new(version: u32) -> Self {
        let mut regs = [0; bar1::REGS_SIZE / 4];
        regs[bar1::VERSION / 4] = version;
        regs[bar1::ERR / 4] = 0xffff;
        let caps = DeviceCaps {
            mode: DeviceMode::Roce.raw(),
            gid_types: GID_TYPE_ROCE_V1,
            max_qp: le32::from_ne(1024),
            gid_tbl_len: le32::from_ne(16),
            node_guid: le64::from_ne(0x0250_56ff_fe00_0001),
            ..DeviceCaps::default()
        };
        Self(Arc::new(Mutex::new(State {
            allocs: Vec::new(),
            next_iova: 0x10_0000,
            regs,
            writes: Vec::new(),
            uar_writes: Vec::new(),
            dsr: None,
            caps,
            irq: false,
            requests: Vec::new(),
            handler: Box::new(|req| answer(req, 0, &[])),
            now: 0,
            fail_activate: false,
            refuse_map: false,
            notify_cq: None,
            maps: Vec::new(),
            at_poll: Vec::new(),
        })))
    }

    /// The device's state.
    pub fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap()
    }
}

impl State {
    /// The heap bytes of device addresses `iova .. iova + len`, as the
    /// device reaches them; `None` if they are not all mapped.
    pub fn dma(&mut self, iova: u64, len: usize) -> Option<&mut [u8]> {
        let a = self
            .allocs
            .iter()
            .find(|a| iova >= a.iova && iova + len as u64 <= a.iova + a.len as u64)?;
        let off = (iova - a.iova) as usize;
        // SAFETY: inside a live allocation of the fake's (found above),
        // accessed only under the lock.
        Some(unsafe { core::slice::from_raw_parts_mut(a.ptr.as_ptr().add(off), len) })
    }

    /// Regions the driver holds: pages it allocated.
    pub fn allocated(&self) -> usize {
        self.allocs.iter().filter(|a| !a.mapped).count()
    }

    /// Mappings of the caller's memory the device can reach.
    pub fn mapped(&self) -> usize {
        self.allocs.iter().filter(|a| a.mapped).count()
    }

    /// Puts CQ `handle` on the CQ-notification ring, as QEMU's pvrdma
    /// does for every completion, armed or not; false if bring-up gave no
    /// ring.
    pub fn notify(&mut self, handle: u32) -> bool {
        let Some(dsr) = self.dsr else { return false };
        let word = |st: &mut Self, iova: u64| -> Option<u64> {
            Some(u64::from_le_bytes(st.dma(iova, 8)?.try_into().ok()?))
        };
        let Some(table) = word(self, dsr.cq_ring_pages.pdir_dma.to_ne()) else {
            return false;
        };
        let (Some(state), Some(entries)) = (word(self, table), word(self, table + 8)) else {
            return false;
        };
        let tail_at = state + rnic_pvrdma_regs::ring::RX_PROD_TAIL as u64;
        let Some(tail) = self
            .dma(tail_at, 4)
            .map(|t| u32::from_le_bytes([t[0], t[1], t[2], t[3]]))
        else {
            return false;
        };
        let slot = u64::from(tail % 1024);
        if let Some(e) = self.dma(entries + slot * 4, 4) {
            e.copy_from_slice(&handle.to_le_bytes());
        }
        if let Some(t) = self.dma(tail_at, 4) {
            t.copy_from_slice(&((tail + 1) % 2048).to_le_bytes());
        }
        true
    }

    fn dsr_iova(&self) -> u64 {
        (self.regs[bar1::DSRHIGH / 4] as u64) << 32 | self.regs[bar1::DSRLOW / 4] as u64
    }

    fn write_reg(&mut self, off: usize, v: u32) {
        self.writes.push((off, v));
        match off {
            bar1::DSRHIGH => {
                self.regs[off / 4] = v;
                let iova = self.dsr_iova();
                let caps = self.caps;
                let Some(mem) = self.dma(iova, PAGE_SIZE) else {
                    return;
                };
                let dsr: Dsr = read(mem, 0);
                write(mem, DSR_CAPS_OFFSET, caps);
                self.dsr = Some(dsr);
            }
            bar1::CTL
                if v == bar1::Ctl::Activate.raw() && self.dsr.is_some() && !self.fail_activate =>
            {
                self.regs[bar1::ERR / 4] = 0;
            }
            bar1::REQUEST => self.request(),
            bar1::ERR | bar1::VERSION => {}
            _ => self.regs[off / 4] = v,
        }
    }

    fn request(&mut self) {
        let Some(dsr) = self.dsr else { return };
        let (req_iova, resp_iova) = (dsr.cmd_slot_dma.to_ne(), dsr.resp_slot_dma.to_ne());
        let Some(req) = self.dma(req_iova, CMD_REQ_SIZE).map(|r| r.to_vec()) else {
            return;
        };
        self.requests.push(req.clone());
        let reply = (self.handler)(&req);
        if let (Some(bytes), Some(slot)) = (reply.resp, self.dma(resp_iova, CMD_RESP_SIZE)) {
            slot[..bytes.len()].copy_from_slice(&bytes);
        }
        self.regs[bar1::ERR / 4] = reply.err_reg;
        self.irq |= reply.irq;
    }
}

// SAFETY: dma_alloc hands out zeroed, page-aligned heap memory at IOVAs no
// other allocation has, which the fake device reaches exactly (State::dma),
// until dma_free; BAR accesses touch only the register array.
unsafe impl Hal for Fake {
    fn dma_alloc(&self, len: usize) -> Result<DmaRegion, HalError> {
        let len = len.div_ceil(PAGE_SIZE) * PAGE_SIZE;
        let layout = Layout::from_size_align(len, PAGE_SIZE).map_err(|_| HalError::NoMemory)?;
        // SAFETY: a non-zero size (callers ask for at least a page).
        let ptr = NonNull::new(unsafe { alloc_zeroed(layout) }).ok_or(HalError::NoMemory)?;
        let mut st = self.state();
        let iova = st.next_iova;
        st.next_iova += len as u64;
        st.allocs.push(Alloc {
            iova,
            ptr,
            len,
            mapped: false,
        });
        // SAFETY: `len` bytes of live heap memory until dma_free.
        Ok(unsafe { DmaRegion::new(ptr, iova, len) })
    }

    unsafe fn dma_free(&self, region: DmaRegion) {
        let mut st = self.state();
        let i = st
            .allocs
            .iter()
            .position(|a| !a.mapped && a.iova == region.iova())
            .expect("freeing a region the fake allocated");
        let a = st.allocs.swap_remove(i);
        // SAFETY: allocated by dma_alloc with this layout.
        unsafe {
            dealloc(
                a.ptr.as_ptr(),
                Layout::from_size_align(a.len, PAGE_SIZE).unwrap(),
            )
        };
    }

    unsafe fn dma_map(&self, vaddr: NonNull<u8>, len: usize) -> Result<u64, HalError> {
        let mut st = self.state();
        if st.refuse_map {
            return Err(HalError::NoIova);
        }
        let iova = st.next_iova;
        st.next_iova += len.div_ceil(PAGE_SIZE) as u64 * PAGE_SIZE as u64;
        st.allocs.push(Alloc {
            iova,
            ptr: vaddr,
            len,
            mapped: true,
        });
        st.maps.push((vaddr.as_ptr() as usize, len));
        Ok(iova)
    }

    unsafe fn dma_unmap(&self, iova: u64, len: usize) -> Result<(), HalError> {
        let mut st = self.state();
        let i = st
            .allocs
            .iter()
            .position(|a| a.mapped && a.iova == iova && a.len == len)
            .ok_or(HalError::NotMapped)?;
        st.allocs.swap_remove(i);
        Ok(())
    }

    fn mmio_read32(&self, bar: u8, offset: usize) -> u32 {
        let st = self.state();
        match bar {
            REG if offset < bar1::REGS_SIZE => st.regs[offset / 4],
            _ => u32::MAX,
        }
    }

    fn mmio_write32(&self, bar: u8, offset: usize, value: u32) {
        if bar == REG && offset < bar1::REGS_SIZE {
            self.state().write_reg(offset, value);
        } else if bar == UAR {
            self.state().uar_writes.push((offset, value));
        }
    }

    fn mmio_write64(&self, _bar: u8, _offset: usize, _value: u64) {}

    fn now_ns(&self) -> u64 {
        let mut st = self.state();
        st.now += 1_000_000_000;
        st.now
    }

    fn poll_empty(&self) {
        let mut st = self.state();
        for (iova, bytes) in core::mem::take(&mut st.at_poll) {
            if let Some(m) = st.dma(iova, bytes.len()) {
                m.copy_from_slice(&bytes);
            }
        }
    }

    fn bar_address(&self, bar: u8) -> Option<u64> {
        // QEMU's BAR 2, as a q35 guest's firmware placed it.
        (bar == UAR).then_some(0xfe00_0000)
    }

    fn wait_irq(&self, vector: u16, _timeout_ns: u64) -> Result<bool, HalError> {
        let mut st = self.state();
        match vector {
            0 => Ok(core::mem::take(&mut st.irq)),
            2 => Ok(st.notify_cq.take().is_some_and(|cq| st.notify(cq))),
            _ => Ok(false),
        }
    }
}

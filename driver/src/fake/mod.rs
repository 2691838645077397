//! A fake device for the driver's own tests: a [`Hal`] over heap memory
//! with a register file that executes commands synchronously. It models
//! the control path (bring-up, objects, QP states) of the device spec, and
//! lets tests write CQEs and EQEs and inspect DMA memory; it does not move
//! data (that is the device model's job).

mod tests;

extern crate std;

use std::alloc::{alloc_zeroed, dealloc, Layout};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
use std::vec;
use std::vec::Vec;

use core::ptr::NonNull;

use rnic_hw_regs::bar0::{self, DevCaps, FatalSyndrome, QueueCaps, Status, MAGIC};
use rnic_hw_regs::cmd::*;
use rnic_hw_regs::cqe::{Cqe, CQE_SIZE};
use rnic_hw_regs::eqe::{Eqe, EQE_SIZE};
use rnic_hw_regs::verbs::{access, qp_attr, qp_transition, QpState, QpType};
use rnic_hw_regs::{le16, le32, le64, owner_bit, PAGE_SIZE};
use rnic_queues::{device, DmaRegion, Hal, HalError};

/// Test-controlled misbehaviour.
pub(crate) struct Knobs {
    pub(crate) magic: u32,
    pub(crate) version_major: u16,
    pub(crate) never_ready: bool,
    pub(crate) fatal_on_enable: Option<FatalSyndrome>,
    pub(crate) hang_commands: bool,
    /// Fail the next command with this status and syndrome.
    pub(crate) fail_next: Option<(CmdStatus, u32)>,
    /// Number for the next CQ or QP created, which must be free (a real
    /// device reuses numbers as soon as their object is destroyed).
    pub(crate) next_number: Option<u32>,
    /// Number for the next QP created even if a live QP has it (a device
    /// bug); the fake's record of the live QP is replaced.
    pub(crate) duplicate_number: Option<u32>,
    /// `dma_unmap_retired` is not supported (the trait's default).
    pub(crate) retire_unsupported: bool,
}

impl Default for Knobs {
    fn default() -> Self {
        Self {
            magic: MAGIC,
            version_major: bar0::VERSION_MAJOR,
            never_ready: false,
            fatal_on_enable: None,
            hang_commands: false,
            fail_next: None,
            next_number: None,
            duplicate_number: None,
            retire_unsupported: false,
        }
    }
}

#[derive(Clone, Copy)]
pub(crate) struct FakeCq {
    pub(crate) buf: u64,
    pub(crate) log_size: u32,
    pub(crate) pi: u32,
}

#[derive(Clone, Copy)]
pub(crate) struct FakeQp {
    pub(crate) pdn: u32,
    pub(crate) cqns: [u32; 2],
    pub(crate) create: CreateQpIn,
    pub(crate) attrs: QpAttrs,
}

struct Mapping {
    host: usize,
    len: usize,
    allocated: bool,
}

#[derive(Default)]
pub(crate) struct State {
    pub(crate) knobs: Knobs,
    maps: BTreeMap<u64, Mapping>,
    next_iova: u64,
    status: u32,
    fatal: u32,
    regs: BTreeMap<usize, u32>,
    cmd_ci: u32,
    /// The last command queue producer index rung.
    cmd_pi: u32,
    eq_pi: u32,
    /// Every BAR 2 write: (offset, value).
    pub(crate) doorbells: Vec<(usize, u64)>,
    /// Every command executed.
    pub(crate) commands: Vec<CmdOpcode>,
    /// Every range removed by `dma_unmap_retired`: (IOVA, length).
    pub(crate) retired: Vec<(u64, usize)>,
    next_obj: u32,
    pub(crate) pds: Vec<u32>,
    pub(crate) mrs: BTreeMap<u32, u32>,
    pub(crate) cqs: BTreeMap<u32, FakeCq>,
    pub(crate) qps: BTreeMap<u32, FakeQp>,
}

pub(crate) struct FakeDev {
    state: Mutex<State>,
    start: Instant,
}

/// The fake platform; clones share the device.
#[derive(Clone)]
pub(crate) struct FakeHal(pub(crate) Arc<FakeDev>);

impl FakeHal {
    pub(crate) fn new() -> Self {
        Self::with(Knobs::default())
    }

    pub(crate) fn with(knobs: Knobs) -> Self {
        let state = State {
            knobs,
            next_iova: 0x1_0000_0000,
            ..State::default()
        };
        Self(Arc::new(FakeDev {
            state: Mutex::new(state),
            start: Instant::now(),
        }))
    }

    pub(crate) fn state(&self) -> MutexGuard<'_, State> {
        self.0.state.lock().unwrap()
    }
}

impl State {
    fn host(&self, iova: u64, len: usize) -> Option<*mut u8> {
        let (&base, m) = self.maps.range(..=iova).next_back()?;
        let off = (iova - base) as usize;
        (off + len <= m.len).then_some((m.host + off) as *mut u8)
    }

    /// Reads device memory at `iova`; panics if unmapped.
    pub(crate) fn read(&self, iova: u64, len: usize) -> Vec<u8> {
        let p = self.host(iova, len).expect("read of unmapped IOVA");
        let mut v = vec![0; len];
        // SAFETY: `host` found the range inside a live mapping.
        unsafe { core::ptr::copy_nonoverlapping(p, v.as_mut_ptr(), len) };
        v
    }

    fn write(&self, iova: u64, data: &[u8]) {
        let p = self.host(iova, data.len()).expect("write of unmapped IOVA");
        // SAFETY: `host` found the range inside a live mapping.
        unsafe { core::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len()) };
    }

    pub(crate) fn read_obj<T: rnic_queues::Pod>(&self, iova: u64) -> T {
        let v = self.read(iova, core::mem::size_of::<T>());
        // SAFETY: `v` holds size_of::<T>() bytes; any bit pattern is a valid
        // `T` (Pod).
        unsafe { v.as_ptr().cast::<T>().read_unaligned() }
    }

    fn reg(&self, off: usize) -> u32 {
        self.regs.get(&off).copied().unwrap_or(0)
    }

    fn iova64(&self, lo: usize, hi: usize) -> u64 {
        u64::from(self.reg(lo)) | u64::from(self.reg(hi)) << 32
    }

    /// Writes a CQE into CQ `cqn` as the device would.
    pub(crate) fn push_cqe(&mut self, cqn: u32, cqe: Cqe) {
        let cq = self.cqs.get_mut(&cqn).expect("no such CQ");
        let idx = cq.pi & ((1 << cq.log_size) - 1);
        let owner = owner_bit(cq.pi, cq.log_size);
        cq.pi += 1;
        let iova = cq.buf + u64::from(idx) * CQE_SIZE as u64;
        let slot = self.host(iova, CQE_SIZE).expect("CQ unmapped");
        // SAFETY: the slot is inside the mapped CQ buffer, 64-byte aligned.
        unsafe { device::write_entry(NonNull::new(slot).unwrap(), &cqe, owner) };
    }

    /// Writes an EQE into EQ 0.
    pub(crate) fn push_eqe(&mut self, eqe: Eqe) {
        let base = self.iova64(bar0::EQ_BASE_LO, bar0::EQ_BASE_HI);
        let log = self.reg(bar0::EQ_CTRL) & 0x1f;
        let idx = self.eq_pi & ((1 << log) - 1);
        let owner = owner_bit(self.eq_pi, log);
        self.eq_pi += 1;
        let slot = self
            .host(base + u64::from(idx) * EQE_SIZE as u64, EQE_SIZE)
            .expect("EQ unmapped");
        // SAFETY: the slot is inside the mapped EQ, 64-byte aligned.
        unsafe { device::write_entry(NonNull::new(slot).unwrap(), &eqe, owner) };
    }

    fn reset(&mut self) {
        self.regs.clear();
        self.cmd_ci = 0;
        self.eq_pi = 0;
        self.fatal = 0;
        self.pds.clear();
        self.mrs.clear();
        self.cqs.clear();
        self.qps.clear();
        self.status = if self.knobs.never_ready { 0 } else { 1 };
    }

    fn enable(&mut self) {
        let cmdq = self.iova64(bar0::CMDQ_BASE_LO, bar0::CMDQ_BASE_HI);
        let log = self.reg(bar0::CMDQ_CTRL) & 0x1f;
        let syndrome = if let Some(s) = self.knobs.fatal_on_enable {
            Some(s)
        } else if self.host(cmdq, CMD_ENTRY_SIZE << log).is_none() {
            Some(FatalSyndrome::CmdqDma)
        } else {
            None
        };
        let status = Status::from_bits(le32::from_ne(self.status));
        self.status = match syndrome {
            Some(s) => {
                self.fatal = s as u32;
                status.with_fatal(true)
            }
            None => status.with_enabled(true),
        }
        .into_bits()
        .to_ne();
    }

    /// Stops hanging and executes the commands rung meanwhile, as a
    /// device that was only slow would.
    pub(crate) fn resume_commands(&mut self) {
        self.knobs.hang_commands = false;
        self.run_commands(self.cmd_pi);
    }

    fn run_commands(&mut self, pi: u32) {
        self.cmd_pi = pi;
        if self.knobs.hang_commands {
            return;
        }
        let base = self.iova64(bar0::CMDQ_BASE_LO, bar0::CMDQ_BASE_HI);
        let log = self.reg(bar0::CMDQ_CTRL) & 0x1f;
        while self.cmd_ci != pi {
            let entry = base + u64::from(self.cmd_ci & ((1 << log) - 1)) * CMD_ENTRY_SIZE as u64;
            self.cmd_ci = self.cmd_ci.wrapping_add(1);
            let hdr: CmdHeader = self.read_obj(entry);
            let input = self.read(entry + CMD_IN_OFFSET as u64, CMD_IN_SIZE);
            let op = CmdOpcode::from_raw(hdr.opcode.to_ne());
            let (status, syndrome, out) = match (op, self.knobs.fail_next.take()) {
                (_, Some((s, syn))) => (s, syn, Vec::new()),
                (None, None) => (CmdStatus::BadOpcode, 0, Vec::new()),
                (Some(op), None) => {
                    self.commands.push(op);
                    match self.exec(op, &input) {
                        Ok(out) => (CmdStatus::Ok, 0, out),
                        Err((s, syn)) => (s, syn, Vec::new()),
                    }
                }
            };
            self.write(entry + CMD_OUT_OFFSET as u64, &out);
            self.write(entry + CMD_STATUS_OFFSET as u64, &[status.raw()]);
            self.write(entry + 8, &syndrome.to_le_bytes());
            self.write(entry + CMD_OWNER_OFFSET as u64, &[0]);
        }
    }

    fn obj(&mut self) -> u32 {
        self.next_obj += 1;
        self.next_obj
    }

    fn exec(&mut self, op: CmdOpcode, input: &[u8]) -> Result<Vec<u8>, (CmdStatus, u32)> {
        // Syndrome: offset of the offending field + 1.
        let bad = |off: usize| (CmdStatus::BadParam, off as u32 + 1);
        match op {
            CmdOpcode::QueryDevice => Ok(bytes(&QueryDeviceOut {
                fw_ver: le64::from_ne(0x1_0000),
                vendor_id: le32::from_ne(0x1b36),
                vendor_part_id: le32::from_ne(0x10f1),
                max_qp: le32::from_ne(1024),
                max_qp_wr: le32::from_ne(1 << 15),
                max_sge: le32::from_ne(16),
                max_cq: le32::from_ne(1024),
                max_cqe: le32::from_ne(1 << 16),
                max_mr: le32::from_ne(4096),
                max_pd: le32::from_ne(1024),
                max_qp_rd_atom: le32::from_ne(16),
                max_qp_init_rd_atom: le32::from_ne(16),
                max_inline_data: le32::from_ne(256),
                phys_port_cnt: le32::from_ne(1),
                max_msg_sz: le32::from_ne(1 << 31),
                ..Default::default()
            })),
            CmdOpcode::QueryPort => {
                let i: QueryPortIn = obj(input);
                if i.port.to_ne() != 1 {
                    return Err(bad(0));
                }
                Ok(bytes(&QueryPortOut {
                    state: 4,
                    max_mtu: 5,
                    active_mtu: 3,
                    link_layer: 2,
                    gid_tbl_len: le32::from_ne(16),
                    max_msg_sz: le32::from_ne(1 << 31),
                    pkey_tbl_len: le16::from_ne(1),
                    mac: [2, 0, 0, 0, 0, 1],
                    ..Default::default()
                }))
            }
            CmdOpcode::QueryGid => {
                let i: QueryGidIn = obj(input);
                if i.index.to_ne() >= 16 {
                    return Err(bad(4));
                }
                let mut gid = [0u8; 16];
                gid[0] = 0xfe;
                gid[1] = 0x80;
                gid[15] = i.index.to_ne() as u8 + 1;
                Ok(bytes(&QueryGidOut {
                    gid,
                    gid_type: 2,
                    valid: u8::from(i.index.to_ne() == 0),
                    reserved: [0; 2],
                }))
            }
            CmdOpcode::CreatePd => {
                let pdn = self.obj();
                self.pds.push(pdn);
                Ok(bytes(&CreatePdOut {
                    pdn: le32::from_ne(pdn),
                }))
            }
            CmdOpcode::DestroyPd => {
                let pdn = obj::<ObjIn>(input).id.to_ne();
                let Some(pos) = self.pds.iter().position(|&p| p == pdn) else {
                    return Err((CmdStatus::BadResource, 1));
                };
                if self.mrs.values().any(|&p| p == pdn) || self.qps.values().any(|q| q.pdn == pdn) {
                    return Err((CmdStatus::Busy, 0));
                }
                self.pds.remove(pos);
                Ok(Vec::new())
            }
            CmdOpcode::RegMr => {
                let i: RegMrIn = obj(input);
                let pdn = i.pdn.to_ne();
                if !self.pds.contains(&pdn) {
                    return Err((CmdStatus::BadResource, 1));
                }
                let acc = i.access.to_ne();
                if acc & !access::MR_SUPPORTED != 0 {
                    return Err(bad(4));
                }
                if self
                    .host(i.iova.to_ne(), i.length.to_ne() as usize)
                    .is_none()
                {
                    return Err((CmdStatus::BadDma, 25));
                }
                let key = self.obj() << 8 | 0x5a;
                self.mrs.insert(key, pdn);
                Ok(bytes(&RegMrOut {
                    lkey: le32::from_ne(key),
                    rkey: le32::from_ne(key),
                }))
            }
            CmdOpcode::DeregMr => match self.mrs.remove(&obj::<ObjIn>(input).id.to_ne()) {
                Some(_) => Ok(Vec::new()),
                None => Err((CmdStatus::BadResource, 1)),
            },
            CmdOpcode::CreateCq => {
                let i: CreateCqIn = obj(input);
                let log_size = i.log_size.to_ne();
                if log_size > 16 {
                    return Err(bad(0));
                }
                let buf = i.buf_iova.to_ne();
                if self.host(buf, CQE_SIZE << log_size).is_none() {
                    return Err((CmdStatus::BadDma, 17));
                }
                if let Some(n) = self.knobs.duplicate_number.take() {
                    // The device bug a knob plays: a live CQ's number.
                    return Ok(bytes(&CreateCqOut {
                        cqn: le32::from_ne(n),
                    }));
                }
                let cqn = self.knobs.next_number.take().unwrap_or_else(|| self.obj());
                assert!(!self.cqs.contains_key(&cqn), "CQ number {cqn} is in use");
                self.cqs.insert(
                    cqn,
                    FakeCq {
                        buf,
                        log_size,
                        pi: 0,
                    },
                );
                Ok(bytes(&CreateCqOut {
                    cqn: le32::from_ne(cqn),
                }))
            }
            CmdOpcode::DestroyCq => {
                let cqn = obj::<ObjIn>(input).id.to_ne();
                if self.qps.values().any(|q| q.cqns.contains(&cqn)) {
                    return Err((CmdStatus::Busy, 0));
                }
                match self.cqs.remove(&cqn) {
                    Some(_) => Ok(Vec::new()),
                    None => Err((CmdStatus::BadResource, 1)),
                }
            }
            CmdOpcode::CreateQp => {
                let i: CreateQpIn = obj(input);
                if i.qp_type != QpType::Rc.raw() {
                    return Err(bad(0));
                }
                if !self.pds.contains(&i.pdn.to_ne()) {
                    return Err((CmdStatus::BadResource, 5));
                }
                let cqns = [i.send_cqn.to_ne(), i.recv_cqn.to_ne()];
                if !cqns.iter().all(|c| self.cqs.contains_key(c)) {
                    return Err((CmdStatus::BadResource, 9));
                }
                let qpn = match self.knobs.duplicate_number.take() {
                    Some(n) => n,
                    None => {
                        let qpn = self
                            .knobs
                            .next_number
                            .take()
                            .unwrap_or_else(|| self.obj() + 1);
                        assert!(!self.qps.contains_key(&qpn), "QP number {qpn} is in use");
                        qpn
                    }
                };
                self.qps.insert(
                    qpn,
                    FakeQp {
                        pdn: i.pdn.to_ne(),
                        cqns,
                        create: i,
                        attrs: QpAttrs::default(),
                    },
                );
                Ok(bytes(&CreateQpOut {
                    qpn: le32::from_ne(qpn),
                }))
            }
            CmdOpcode::ModifyQp => {
                let i: ModifyQpIn = obj(input);
                let qp = self
                    .qps
                    .get_mut(&i.qpn.to_ne())
                    .ok_or((CmdStatus::BadResource, 1))?;
                let cur = QpState::from_raw(qp.attrs.qp_state).unwrap();
                let next = QpState::from_raw(i.attrs.qp_state).ok_or(bad(8))?;
                let mask = i.attr_mask.to_ne();
                let t = qp_transition(QpType::Rc, cur, next).ok_or((CmdStatus::BadState, 9))?;
                if mask & t.required != t.required || mask & !(t.required | t.optional) != 0 {
                    return Err(bad(4));
                }
                let a = &i.attrs;
                let q = &mut qp.attrs;
                q.qp_state = a.qp_state;
                if mask & qp_attr::PORT != 0 {
                    q.port_num = a.port_num;
                }
                if mask & qp_attr::ACCESS_FLAGS != 0 {
                    q.qp_access_flags = a.qp_access_flags;
                }
                if mask & qp_attr::PATH_MTU != 0 {
                    q.path_mtu = a.path_mtu;
                }
                if mask & qp_attr::DEST_QPN != 0 {
                    q.dest_qp_num = a.dest_qp_num;
                }
                if mask & qp_attr::AV != 0 {
                    q.ah = a.ah;
                }
                if mask & qp_attr::SQ_PSN != 0 {
                    q.sq_psn = a.sq_psn;
                }
                if mask & qp_attr::RNR_RETRY != 0 {
                    q.rnr_retry = a.rnr_retry;
                }
                Ok(Vec::new())
            }
            CmdOpcode::QueryQp => match self.qps.get(&obj::<ObjIn>(input).id.to_ne()) {
                Some(qp) => Ok(bytes(&qp.attrs)),
                None => Err((CmdStatus::BadResource, 1)),
            },
            CmdOpcode::DestroyQp => match self.qps.remove(&obj::<ObjIn>(input).id.to_ne()) {
                Some(_) => Ok(Vec::new()),
                None => Err((CmdStatus::BadResource, 1)),
            },
            _ => Err((CmdStatus::BadOpcode, 0)),
        }
    }
}

fn obj<T: Copy>(b: &[u8]) -> T {
    assert!(b.len() >= core::mem::size_of::<T>());
    // SAFETY: enough bytes (checked); the command layouts are plain data.
    unsafe { b.as_ptr().cast::<T>().read_unaligned() }
}

fn bytes<T: Copy>(v: &T) -> Vec<u8> {
    // SAFETY: the command layouts are plain data without padding.
    unsafe { core::slice::from_raw_parts((v as *const T).cast::<u8>(), core::mem::size_of::<T>()) }
        .to_vec()
}

// SAFETY: regions from dma_alloc are fresh zeroed page-aligned heap blocks,
// reachable by the fake device only through their recorded IOVA range until
// dma_free; dma_map records exactly the caller's range; IOVAs are never
// handed out twice, so dma_unmap_retired can be dma_unmap; BAR accesses only
// touch the fake's register state.
unsafe impl Hal for FakeHal {
    fn dma_alloc(&self, len: usize) -> Result<DmaRegion, HalError> {
        let len = len.div_ceil(PAGE_SIZE).max(1) * PAGE_SIZE;
        let layout = Layout::from_size_align(len, PAGE_SIZE).map_err(|_| HalError::NoMemory)?;
        // SAFETY: the layout has a non-zero size.
        let ptr = NonNull::new(unsafe { alloc_zeroed(layout) }).ok_or(HalError::NoMemory)?;
        let mut st = self.state();
        let iova = st.next_iova;
        st.next_iova += (len + PAGE_SIZE) as u64;
        st.maps.insert(
            iova,
            Mapping {
                host: ptr.as_ptr() as usize,
                len,
                allocated: true,
            },
        );
        // SAFETY: a fresh allocation of `len` bytes, freed only by dma_free.
        Ok(unsafe { DmaRegion::new(ptr, iova, len) })
    }

    unsafe fn dma_free(&self, region: DmaRegion) {
        let m = self
            .state()
            .maps
            .remove(&region.iova())
            .expect("dma_free of an unknown region");
        assert!(m.allocated && m.host == region.vaddr().as_ptr() as usize);
        let layout = Layout::from_size_align(m.len, PAGE_SIZE).unwrap();
        // SAFETY: allocated by dma_alloc with this layout.
        unsafe { dealloc(region.vaddr().as_ptr(), layout) };
    }

    unsafe fn dma_map(&self, vaddr: NonNull<u8>, len: usize) -> Result<u64, HalError> {
        let mut st = self.state();
        let iova = st.next_iova;
        st.next_iova += (len.div_ceil(PAGE_SIZE) + 1) as u64 * PAGE_SIZE as u64;
        st.maps.insert(
            iova,
            Mapping {
                host: vaddr.as_ptr() as usize,
                len,
                allocated: false,
            },
        );
        Ok(iova)
    }

    unsafe fn dma_unmap(&self, iova: u64, len: usize) -> Result<(), HalError> {
        let mut st = self.state();
        match st.maps.get(&iova) {
            Some(m) if !m.allocated && m.len == len => {
                st.maps.remove(&iova);
                Ok(())
            }
            _ => Err(HalError::NotMapped),
        }
    }

    unsafe fn dma_unmap_retired(&self, iova: u64, len: usize) -> Result<(), HalError> {
        if self.state().knobs.retire_unsupported {
            return Err(HalError::Unsupported);
        }
        // SAFETY: forwarded contract.
        unsafe { self.dma_unmap(iova, len) }?;
        self.state().retired.push((iova, len));
        Ok(())
    }

    fn mmio_read32(&self, bar: u8, offset: usize) -> u32 {
        assert_eq!(bar, 0);
        let st = self.state();
        match offset {
            bar0::ID => st.knobs.magic,
            bar0::VERSION => u32::from(st.knobs.version_major) << 16,
            bar0::CAP_DEV => DevCaps::new()
                .with_num_ports(1)
                .with_log_max_msg(31)
                .with_log_max_cmdq(6)
                .with_log_max_eq(10)
                .with_atomics(true)
                .into_bits()
                .to_ne(),
            bar0::CAP_MAX_QP | bar0::CAP_MAX_CQ | bar0::CAP_MAX_PD => 1024,
            bar0::CAP_MAX_MR => 4096,
            bar0::CAP_QUEUE => QueueCaps::new()
                .with_log_max_wq(15)
                .with_log_max_cqe(16)
                .with_max_sge(16)
                .with_max_inline_16(16)
                .with_max_wqe_bbs(8)
                .into_bits()
                .to_ne(),
            bar0::CAP_UAR_PAGES => 4,
            bar0::CTRL => st.reg(bar0::CTRL) & !1,
            bar0::STATUS => st.status,
            bar0::FATAL_SYNDROME => st.fatal,
            off => st.reg(off),
        }
    }

    fn mmio_write32(&self, bar: u8, offset: usize, value: u32) {
        assert_eq!(bar, 0);
        let mut st = self.state();
        match offset {
            bar0::CTRL => {
                if value & 1 != 0 {
                    st.reset();
                }
                st.regs.insert(offset, value & !1);
                if value & 2 != 0 && st.status & 1 != 0 {
                    st.enable();
                }
            }
            bar0::CMDQ_DB => st.run_commands(value),
            off => {
                st.regs.insert(off, value);
            }
        }
    }

    fn mmio_write64(&self, bar: u8, offset: usize, value: u64) {
        assert_eq!(bar, 2);
        self.state().doorbells.push((offset, value));
    }

    fn now_ns(&self) -> u64 {
        self.0.start.elapsed().as_nanos() as u64
    }
}

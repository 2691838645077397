//! Contexts, PDs and CQs against the fake device: what each command asks
//! of the device, what the driver does with the answer, and the memory
//! that is freed or, where the device may still use it, kept.

extern crate std;

use std::string::ToString;
use std::vec::Vec;

use rnic_pvrdma_regs::bar1;
use rnic_pvrdma_regs::cmd::{
    access, CmdHdr, CmdOpcode, CreateBind, CreateCq, CreateMr, CreateQp, CreateUc, HandleCmd,
};
use rnic_pvrdma_regs::ring::{RX_CONS_HEAD, RX_PROD_TAIL};
use rnic_pvrdma_regs::uar::{CQ_ARM, CQ_ARM_SOL, CQ_DB};
use rnic_pvrdma_regs::PAGE_SIZE;
use rnic_verbs::ErrorKind;

use super::fake::{answer, Fake, Reply};
use super::{open, u64_at};

pub(super) fn read<T: Copy>(bytes: &[u8]) -> T {
    assert!(core::mem::size_of::<T>() <= bytes.len());
    // SAFETY: in bounds (asserted); only Pod layouts are read.
    unsafe { bytes.as_ptr().cast::<T>().read_unaligned() }
}

fn opcode(req: &[u8]) -> u32 {
    read::<CmdHdr>(req).cmd.to_ne()
}

/// A device that gives handles 7, 8, 9 ... and grants every CQ what it
/// asks, unless `grant` says otherwise.
pub(super) fn handing_out(fake: &Fake, grant: Option<u32>) {
    let mut next = 7u32;
    fake.state().handler = std::boxed::Box::new(move |req| {
        let handle = next;
        next += 1;
        match opcode(req) {
            op if op == CmdOpcode::CreateCq.raw() => {
                let asked = read::<CreateCq>(req).cqe.to_ne();
                let cqe = grant.unwrap_or(asked);
                let mut body = handle.to_le_bytes().to_vec();
                body.extend(cqe.to_le_bytes());
                answer(req, 0, &body)
            }
            op if op == CmdOpcode::CreateQp.raw() => {
                // Version 17: the QP number, then the capacities asked.
                let q = read::<CreateQp>(req);
                let mut body = handle.to_le_bytes().to_vec();
                for cap in [q.max_send_wr, q.max_recv_wr, q.max_send_sge, q.max_recv_sge] {
                    body.extend(cap.to_ne().to_le_bytes());
                }
                answer(req, 0, &body)
            }
            _ => answer(req, 0, &handle.to_le_bytes()),
        }
    });
}

#[test]
fn contexts_take_the_lowest_free_uar_page_and_free_it_when_destroyed() {
    let fake = Fake::new(bar1::VERSION_ROCEV1);
    let dev = open(&fake);
    handing_out(&fake, None);
    let a = dev.create_uc().unwrap();
    let b = dev.create_uc().unwrap();
    assert_eq!((a.handle(), a.uar(), b.handle(), b.uar()), (7, 0, 8, 1));
    let pfns: Vec<u64> = fake
        .state()
        .requests
        .iter()
        .map(|r| read::<CreateUc>(r).pfn.to_ne())
        .collect();
    assert_eq!(
        pfns,
        [0xfe000, 0xfe001],
        "BAR 2's frame plus the page index"
    );
    dev.destroy_uc(a).unwrap();
    let c = dev.create_uc().unwrap();
    assert_eq!(c.uar(), 0, "the freed page is taken again");

    let pd = dev.create_pd(&c).unwrap();
    let req = fake.state().requests.last().unwrap().clone();
    assert_eq!(opcode(&req), CmdOpcode::CreatePd.raw());
    assert_eq!(
        read::<HandleCmd>(&req).handle.to_ne(),
        c.handle(),
        "the PD's context"
    );
    let pd_handle = pd.handle();
    dev.destroy_pd(pd).unwrap();
    let req = fake.state().requests.last().unwrap().clone();
    assert_eq!(
        (opcode(&req), read::<HandleCmd>(&req).handle.to_ne()),
        (CmdOpcode::DestroyPd.raw(), pd_handle)
    );
}

#[test]
fn a_refused_destroy_hands_the_object_back_and_keeps_its_uar_page() {
    let fake = Fake::new(bar1::VERSION_ROCEV1);
    let dev = open(&fake);
    handing_out(&fake, None);
    let uc = dev.create_uc().unwrap();
    fake.state().handler = std::boxed::Box::new(|req| answer(req, 16, &[]));
    let err = dev.destroy_uc(uc).unwrap_err();
    assert_eq!(err.error.kind(), ErrorKind::Busy, "{err}");
    let uc = err.object.expect("refused: the context is still alive");
    handing_out(&fake, None);
    assert_eq!(dev.create_uc().unwrap().uar(), 1, "page 0 is still taken");
    dev.destroy_uc(uc).unwrap();
}

/// The pages a directory lists, from the device's side.
pub(super) fn listed_pages(fake: &Fake, pdir: u64, count: usize) -> Vec<u64> {
    let table = u64_at(fake, pdir);
    (0..count as u64)
        .map(|i| u64_at(fake, table + 8 * i))
        .collect()
}

#[test]
fn a_cq_is_listed_by_page_directory_polled_in_order_and_armed_through_its_uar() {
    let fake = Fake::new(bar1::VERSION_ROCEV1);
    let dev = open(&fake);
    handing_out(&fake, None);
    let _first = dev.create_uc().unwrap();
    let uc = dev.create_uc().unwrap();
    let before = fake.state().allocated();
    let cq = dev.create_cq(&uc, 100).unwrap();
    assert_eq!(
        (cq.handle(), cq.capacity()),
        (9, 128),
        "rounded to a power of two"
    );
    let req: CreateCq = read(fake.state().requests.last().unwrap());
    assert_eq!(req.ctx_handle.to_ne(), uc.handle());
    assert_eq!(req.cqe.to_ne(), 128);
    assert_eq!(
        req.nchunks.to_ne(),
        3,
        "the state page and 128 × 64 B of CQEs"
    );
    let pages = listed_pages(&fake, req.pdir_dma.to_ne(), 4);
    assert_eq!(
        pages[2],
        pages[1] + PAGE_SIZE as u64,
        "the CQE pages in order"
    );
    assert_eq!(pages[3], 0, "nothing listed past the CQ's pages");
    assert_eq!(
        fake.state().allocated(),
        before + 4,
        "directory, table, state, CQEs"
    );

    // The device writes three CQEs at its tail (wrapping the first page).
    let (state, cqes) = (pages[0], pages[1]);
    assert!(cq.poll().unwrap().is_none(), "nothing completed yet");
    {
        let mut st = fake.state();
        for (i, wr_id) in [11u64, 12, 13].into_iter().enumerate() {
            let at = cqes + (64 + i as u64) * 64;
            st.dma(at, 8).unwrap().copy_from_slice(&wr_id.to_le_bytes());
        }
        st.dma(state + RX_CONS_HEAD as u64, 4)
            .unwrap()
            .copy_from_slice(&64u32.to_le_bytes());
        st.dma(state + RX_PROD_TAIL as u64, 4)
            .unwrap()
            .copy_from_slice(&67u32.to_le_bytes());
    }
    let ids: Vec<u64> = core::iter::from_fn(|| cq.poll().unwrap())
        .map(|c| c.wr_id.to_ne())
        .collect();
    assert_eq!(ids, [11, 12, 13], "the second page of CQEs, in order");
    let head = u32::from_le_bytes(
        fake.state()
            .dma(state + RX_CONS_HEAD as u64, 4)
            .unwrap()
            .try_into()
            .unwrap(),
    );
    assert_eq!(head, 67, "consumed up to the tail");

    dev.arm_cq(&cq, false);
    dev.arm_cq(&cq, true);
    let db = fake.state().uar_writes.clone();
    assert_eq!(
        db,
        [
            (PAGE_SIZE + CQ_DB, 9 | CQ_ARM | CQ_ARM_SOL),
            (PAGE_SIZE + CQ_DB, 9 | CQ_ARM_SOL)
        ],
        "the CQ doorbell of the context's UAR page (page 1)"
    );

    dev.destroy_cq(cq).unwrap();
    assert_eq!(fake.state().allocated(), before, "every CQ page freed");
}

#[test]
fn a_cq_index_beyond_the_ring_is_refused() {
    let fake = Fake::new(bar1::VERSION_ROCEV1);
    let dev = open(&fake);
    handing_out(&fake, None);
    let uc = dev.create_uc().unwrap();
    let cq = dev.create_cq(&uc, 64).unwrap();
    let req: CreateCq = read(fake.state().requests.last().unwrap());
    let state = listed_pages(&fake, req.pdir_dma.to_ne(), 1)[0];
    fake.state()
        .dma(state + RX_PROD_TAIL as u64, 4)
        .unwrap()
        .copy_from_slice(&128u32.to_le_bytes());
    let err = cq.poll().unwrap_err();
    assert_eq!(
        (err.value, err.limit),
        (128, 128),
        "indices run below 2 × 64"
    );
    dev.destroy_cq(cq).unwrap();
}

#[test]
fn a_cq_the_device_refuses_or_grants_wrongly_frees_its_pages() {
    let fake = Fake::new(bar1::VERSION_ROCEV1);
    let dev = open(&fake);
    handing_out(&fake, None);
    let uc = dev.create_uc().unwrap();
    let before = fake.state().allocated();
    for bad in [0, super::super::MAX_CQE + 1] {
        let err = dev.create_cq(&uc, bad).unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    }
    let asked = fake.state().requests.len();

    fake.state().handler = std::boxed::Box::new(|req| answer(req, 12, &[]));
    let err = dev.create_cq(&uc, 64).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NoMemory, "{err}");
    assert_eq!(fake.state().allocated(), before, "refused: its pages freed");

    handing_out(&fake, Some(32));
    let err = dev.create_cq(&uc, 64).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Io, "{err}");
    assert!(err.to_string().contains("granted 32"), "{err}");
    let ops: Vec<u32> = fake.state().requests[asked..]
        .iter()
        .map(|r| opcode(r))
        .collect();
    assert_eq!(
        ops,
        [
            CmdOpcode::CreateCq.raw(),
            CmdOpcode::CreateCq.raw(),
            CmdOpcode::DestroyCq.raw()
        ],
        "no command for a bad size; the wrongly granted CQ destroyed again"
    );
    assert_eq!(fake.state().allocated(), before, "and its pages freed");
}

#[test]
fn a_cq_whose_destroy_times_out_keeps_its_pages() {
    let fake = Fake::new(bar1::VERSION_ROCEV1);
    let dev = open(&fake);
    handing_out(&fake, None);
    let uc = dev.create_uc().unwrap();
    let cq = dev.create_cq(&uc, 64).unwrap();
    let held = fake.state().allocated();
    fake.state().handler = std::boxed::Box::new(|_| Reply {
        resp: None,
        err_reg: 0,
        irq: false,
    });
    let err = dev.destroy_cq(cq).unwrap_err();
    assert_eq!(err.error.kind(), ErrorKind::TimedOut, "{}", err.error);
    assert!(
        err.object.is_none(),
        "the outcome is unknown: the CQ is gone"
    );
    assert_eq!(
        fake.state().allocated(),
        held,
        "the device may still write: kept"
    );
}

/// A buffer of `pages` pages, page-aligned, for an MR.
#[repr(C, align(4096))]
struct Pages([u8; 3 * PAGE_SIZE]);

#[test]
fn an_mr_maps_whole_pages_and_lists_them_for_the_device() {
    let fake = Fake::new(bar1::VERSION_ROCEV1);
    let dev = open(&fake);
    handing_out(&fake, None);
    let uc = dev.create_uc().unwrap();
    let pd = dev.create_pd(&uc).unwrap();
    let before = fake.state().allocated();
    let mut buf = std::boxed::Box::new(Pages([0; 3 * PAGE_SIZE]));
    let base = buf.0.as_mut_ptr();
    // 5000 bytes from 100 bytes into the first page: two pages.
    let addr = core::ptr::NonNull::new(base.wrapping_add(100)).unwrap();
    let va = 0x7f00_0000_0064u64;
    // SAFETY: `buf` outlives the MR, deregistered below.
    let mr = unsafe { dev.reg_mr(&pd, addr, 5000, va, access::LOCAL_WRITE) }.unwrap();
    assert_eq!((mr.handle(), mr.lkey(), mr.rkey()), (9, 0, 0));
    assert_eq!(
        fake.state().maps,
        [(base as usize, 2 * PAGE_SIZE)],
        "the whole pages around the buffer"
    );
    let req: CreateMr = read(fake.state().requests.last().unwrap());
    assert_eq!(
        (req.start.to_ne(), req.length.to_ne(), req.pd_handle.to_ne()),
        (va, 5000, pd.handle())
    );
    assert_eq!(
        (req.access_flags.to_ne(), req.nchunks.to_ne()),
        (access::LOCAL_WRITE, 2)
    );
    let pages = listed_pages(&fake, req.pdir_dma.to_ne(), 3);
    assert_eq!(pages[1], pages[0] + PAGE_SIZE as u64);
    assert_eq!(pages[2], 0);
    // The device reaches the caller's bytes through the listed page.
    buf.0[100] = 0xab;
    assert_eq!(fake.state().dma(pages[0] + 100, 1).unwrap(), [0xab]);

    dev.dereg_mr(mr).unwrap();
    let st = fake.state();
    assert_eq!(
        (st.allocated(), st.mapped()),
        (before, 0),
        "unmapped, directory freed"
    );
}

#[test]
fn a_bad_mr_is_refused_before_the_device_sees_it_and_a_refused_one_frees_everything() {
    let fake = Fake::new(bar1::VERSION_ROCEV1);
    let dev = open(&fake);
    handing_out(&fake, None);
    let uc = dev.create_uc().unwrap();
    let pd = dev.create_pd(&uc).unwrap();
    let before = fake.state().allocated();
    let asked = fake.state().requests.len();
    let mut buf = std::boxed::Box::new(Pages([0; 3 * PAGE_SIZE]));
    let addr = core::ptr::NonNull::new(buf.0.as_mut_ptr()).unwrap();
    let va = addr.as_ptr() as u64;
    let reg = |len: usize, iova: u64, bits: u32| {
        // SAFETY: `buf` outlives every MR made here.
        unsafe { dev.reg_mr(&pd, addr, len, iova, bits) }
    };
    let cases = [
        (reg(0, va, 0), "0 bytes"),
        (reg(64, va, 1 << 7), "access bits"),
        (reg(64, va + 8, 0), "offset in its page"),
        (reg(usize::MAX, va, 0), "at most"),
    ];
    for (r, why) in cases {
        let err = r.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
        assert!(err.to_string().contains(why), "{err}");
    }
    assert_eq!(
        fake.state().requests.len(),
        asked,
        "no command for any of them"
    );
    assert!(fake.state().maps.is_empty(), "nothing mapped");

    fake.state().refuse_map = true;
    let err = reg(64, va, 0).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::NoMemory, "{err}");
    fake.state().refuse_map = false;

    fake.state().handler = std::boxed::Box::new(|req| answer(req, 22, &[]));
    let err = reg(64, va, 0).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    let st = fake.state();
    assert_eq!(
        (st.allocated(), st.mapped()),
        (before, 0),
        "refused: all undone"
    );
}

#[test]
fn an_empty_poll_rings_no_doorbell() {
    let fake = Fake::new(bar1::VERSION_ROCEV1);
    let dev = open(&fake);
    handing_out(&fake, None);
    let uc = dev.create_uc().unwrap();
    let cq = dev.create_cq(&uc, 64).unwrap();
    assert!(dev.poll_cq(&cq).unwrap().is_none());
    assert!(
        fake.state().uar_writes.is_empty(),
        "no POLL: QEMU's pvrdma deadlocks on it"
    );
    let req: CreateCq = read(fake.state().requests.last().unwrap());
    let state = listed_pages(&fake, req.pdir_dma.to_ne(), 1)[0];
    fake.state()
        .dma(state + RX_PROD_TAIL as u64, 4)
        .unwrap()
        .copy_from_slice(&1u32.to_le_bytes());
    // A CQE naming QP 0, which the device does not hold for this driver.
    let err = dev.poll_cq(&cq).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Io, "{err}");
    assert!(err.to_string().contains("names QP 0x0"), "{err}");
    assert!(fake.state().uar_writes.is_empty(), "nor with a CQE there");
    dev.destroy_cq(cq).unwrap();
}

#[test]
fn a_gid_is_bound_only_inside_the_devices_table() {
    let fake = Fake::new(bar1::VERSION_ROCEV1);
    let dev = open(&fake);
    let gid = [
        0xfe, 0x80, 0, 0, 0, 0, 0, 0, 2, 0x50, 0x56, 0xff, 0xfe, 0, 0, 1,
    ];
    let err = dev.create_bind(16, gid, 1).unwrap_err();
    assert_eq!(err.kind(), ErrorKind::InvalidArgument, "{err}");
    assert!(
        fake.state().requests.is_empty(),
        "refused before the device"
    );
    dev.create_bind(1, gid, 1).unwrap();
    let req: CreateBind = read(fake.state().requests.last().unwrap());
    assert_eq!(
        (
            req.hdr.cmd.to_ne(),
            req.index.to_ne(),
            req.new_gid,
            req.gid_type
        ),
        (CmdOpcode::CreateBind.raw(), 1, gid, 1)
    );
    dev.destroy_bind(1, gid).unwrap();
}

#[test]
fn a_cq_notification_is_waited_for_on_its_vector_and_taken_from_the_ring() {
    let fake = Fake::new(bar1::VERSION_ROCEV1);
    let dev = open(&fake);
    assert!(
        dev.wait_cq_notification(3_000_000_000).unwrap().is_none(),
        "none came: the wait ends at its timeout"
    );
    fake.state().notify_cq = Some(9);
    let n = dev.wait_cq_notification(3_000_000_000).unwrap();
    assert_eq!(
        n.map(|n| n.info.to_ne()),
        Some(9),
        "taken once the vector fired"
    );
    assert!(
        dev.wait_cq_notification(1).unwrap().is_none(),
        "and taken only once"
    );
}

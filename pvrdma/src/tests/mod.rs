//! The driver against a fake device ([`fake::Fake`]): bring-up as the
//! device sees it, commands and every way their answers can be wrong,
//! teardown and a second open.

extern crate std;

mod fake;
mod middleware;
mod objects;
mod provider;
mod qp;

use std::boxed::Box;
use std::vec::Vec;

use rnic_pvrdma_regs::bar1;
use rnic_pvrdma_regs::cmd::{
    CmdHdr, CmdOpcode, HandleCmd, HandleResp, PortAttr, QueryPort, QueryPortResp,
};
use rnic_pvrdma_regs::cqe::EventType;
use rnic_pvrdma_regs::dsr::DeviceMode;
use rnic_pvrdma_regs::ring::{RX_CONS_HEAD, RX_PROD_TAIL};
use rnic_pvrdma_regs::{le32, PAGE_SIZE};
use rnic_verbs::{ErrorKind, Refusal};

use crate::Device;
use fake::{answer, Fake, Reply};

fn open(fake: &Fake) -> Device<Fake> {
    Device::open(fake.clone()).expect("bring-up")
}

fn u64_at(fake: &Fake, iova: u64) -> u64 {
    let mut st = fake.state();
    u64::from_le_bytes(st.dma(iova, 8).expect("mapped").try_into().unwrap())
}

#[test]
fn brings_the_device_up_as_linux_does() {
    let fake = Fake::new(bar1::VERSION_ROCEV1);
    let dev = open(&fake);
    assert_eq!(dev.version(), 17);
    assert_eq!(
        dev.caps().max_qp.to_ne(),
        1024,
        "the capabilities the device wrote"
    );
    let (writes, dsr) = {
        let st = fake.state();
        (st.writes.clone(), st.dsr.expect("the device read the DSR"))
    };
    let offsets: Vec<usize> = writes.iter().map(|w| w.0).collect();
    assert_eq!(
        offsets,
        [bar1::DSRLOW, bar1::DSRHIGH, bar1::IMR, bar1::CTL],
        "the DSR's address, low half first, then unmask and activate"
    );
    assert_eq!(writes[2].1, 0, "every interrupt unmasked");
    assert_eq!(writes[3].1, bar1::Ctl::Activate.raw());
    assert_eq!(dsr.driver_version.to_ne(), bar1::VERSION_QPHANDLE);
    assert_eq!(dsr.uar_pfn.to_ne(), 0xfe000);
    assert_eq!((dsr.gos_info.word.bits(), dsr.gos_info.word.kind()), (2, 1));
    let (req, resp) = (dsr.cmd_slot_dma.to_ne(), dsr.resp_slot_dma.to_ne());
    assert_ne!(req, resp);
    assert!(
        fake.state().dma(req, PAGE_SIZE).is_some(),
        "the command slot is a mapped page"
    );
    assert!(
        fake.state().dma(resp, PAGE_SIZE).is_some(),
        "and so is the response slot"
    );
    for ring in [dsr.async_ring_pages, dsr.cq_ring_pages] {
        assert_eq!(
            ring.num_pages.to_ne(),
            2,
            "a state page and a page of entries"
        );
        let table = u64_at(&fake, ring.pdir_dma.to_ne());
        assert_eq!(u64_at(&fake, ring.pdir_dma.to_ne() + 8), 0, "one table");
        let (state, entries) = (u64_at(&fake, table), u64_at(&fake, table + 8));
        assert!(fake.state().dma(state, PAGE_SIZE).is_some());
        assert!(fake.state().dma(entries, PAGE_SIZE).is_some());
        assert_eq!(u64_at(&fake, table + 16), 0, "nothing after the two pages");
    }
    assert_ne!(dsr.async_ring_pages.pdir_dma, dsr.cq_ring_pages.pdir_dma);
}

#[test]
fn runs_a_command_and_checks_its_response() {
    let fake = Fake::new(bar1::VERSION_ROCEV1);
    let dev = open(&fake);
    fake.state().handler = Box::new(|req| {
        let attrs = PortAttr {
            state: le32::from_ne(4),
            active_mtu: le32::from_ne(3),
            ..PortAttr::default()
        };
        // SAFETY: a Pod struct, viewed as its bytes.
        let body =
            unsafe { core::slice::from_raw_parts((&attrs as *const PortAttr).cast::<u8>(), 48) };
        answer(req, 0, body)
    });
    let q = QueryPort {
        port_num: 1,
        ..QueryPort::default()
    };
    for round in 1..=2u64 {
        let r: QueryPortResp = dev.exec(CmdOpcode::QueryPort, &q).unwrap();
        assert_eq!((r.attrs.state.to_ne(), r.attrs.active_mtu.to_ne()), (4, 3));
        let st = fake.state();
        let req = st.requests.last().unwrap();
        // SAFETY: the request slot's first bytes are a CmdHdr.
        let hdr: CmdHdr = unsafe { req.as_ptr().cast::<CmdHdr>().read_unaligned() };
        assert_eq!(hdr.cmd.to_ne(), CmdOpcode::QueryPort.raw());
        assert_eq!(hdr.response.to_ne(), round, "a new cookie for each command");
        assert_eq!(req[16], 1, "the port number after the header");
    }
}

/// Runs DESTROY_PD against a device that replies with `reply`.
fn destroy_pd(
    fake: &Fake,
    dev: &Device<Fake>,
    reply: fn(&[u8]) -> Reply,
) -> rnic_verbs::Result<HandleResp> {
    fake.state().handler = Box::new(reply);
    let req = HandleCmd {
        handle: le32::from_ne(7),
        ..HandleCmd::default()
    };
    dev.exec(CmdOpcode::DestroyPd, &req)
}

#[test]
fn a_response_not_the_commands_is_an_error() {
    let fake = Fake::new(bar1::VERSION_ROCEV1);
    let dev = open(&fake);
    let e = destroy_pd(&fake, &dev, |req| {
        let mut r = answer(req, 0, &[]);
        r.resp.as_mut().unwrap()[0] ^= 0x40;
        r
    })
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Io);
    assert!(e.message().contains("cookie"), "{e}");
    assert!(
        e.outcome_unknown(),
        "another command's answer says nothing of this one"
    );
    let e = destroy_pd(&fake, &dev, |req| {
        let mut r = answer(req, 0, &[]);
        r.resp.as_mut().unwrap()[8] = 9;
        r
    })
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Io);
    assert!(e.message().contains("ack"), "{e}");
    destroy_pd(&fake, &dev, |req| answer(req, 0, &[])).expect("the channel still works");
}

#[test]
fn a_refused_command_carries_its_errno() {
    let fake = Fake::new(bar1::VERSION_ROCEV1);
    let dev = open(&fake);
    let e = destroy_pd(&fake, &dev, |req| answer(req, 16, &[])).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Busy);
    assert_eq!(
        e.refusal(),
        Some(&Refusal {
            command: CmdOpcode::DestroyPd.raw(),
            status: 16,
            detail: (-16i32) as u32,
        })
    );
    assert!(!e.outcome_unknown(), "refused: the PD is as it was");
    // Only the error register says so.
    let e = destroy_pd(&fake, &dev, |req| Reply {
        err_reg: (-12i32) as u32,
        ..answer(req, 0, &[])
    })
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NoMemory);
}

#[test]
fn an_unimplemented_command_is_not_supported() {
    let fake = Fake::new(bar1::VERSION_ROCEV1);
    let dev = open(&fake);
    // QEMU 7.2 has no RESIZE_CQ: ERR 0xffff, no response written.
    let e = destroy_pd(&fake, &dev, |_| Reply {
        resp: None,
        err_reg: 0xffff,
        irq: true,
    })
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotSupported);
    assert_eq!(e.refusal().map(|r| r.status), Some(0xffff));
}

#[test]
fn a_command_with_no_answer_times_out_and_stops_the_channel() {
    let fake = Fake::new(bar1::VERSION_ROCEV1);
    let dev = open(&fake);
    let e = destroy_pd(&fake, &dev, |_| Reply {
        resp: None,
        err_reg: 0,
        irq: false,
    })
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::TimedOut);
    assert!(e.outcome_unknown(), "the device may still run it");
    let e = destroy_pd(&fake, &dev, |req| answer(req, 0, &[])).unwrap_err();
    assert!(e.is_not_issued(), "{e}");
    assert_eq!(
        fake.state().requests.len(),
        1,
        "the second command never reached the device"
    );
}

#[test]
fn bring_up_refuses_a_device_it_cannot_drive() {
    let old = Fake::new(16);
    let e = Device::open(old.clone()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NoDevice);
    assert_eq!(old.state().allocated(), 0);

    let iwarp = Fake::new(bar1::VERSION_ROCEV1);
    iwarp.state().caps.mode = DeviceMode::Iwarp.raw();
    let e = Device::open(iwarp.clone()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NoDevice);
    assert!(e.message().contains("mode 1"), "{e}");
    assert_eq!(iwarp.state().allocated(), 0, "every page freed");

    let no_gids = Fake::new(bar1::VERSION_ROCEV1);
    no_gids.state().caps.gid_types = 0;
    assert_eq!(
        Device::open(no_gids.clone()).unwrap_err().kind(),
        ErrorKind::NoDevice
    );

    // A device whose activation fails leaves ERR set.
    let broken = Fake::new(bar1::VERSION_ROCEV1);
    broken.state().fail_activate = true;
    let e = Device::open(broken.clone()).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Io);
    assert!(e.message().contains("0xffff"), "{e}");
    assert_eq!(broken.state().allocated(), 0);
}

#[test]
fn teardown_masks_interrupts_frees_everything_and_a_second_open_works() {
    let fake = Fake::new(bar1::VERSION_ROCEV1);
    drop(open(&fake));
    {
        let st = fake.state();
        assert_eq!(st.allocated(), 0, "every bring-up page freed");
        assert_eq!(
            st.writes.last(),
            Some(&(bar1::IMR, u32::MAX)),
            "interrupts masked"
        );
    }
    let first = fake.state().dsr.unwrap().cmd_slot_dma.to_ne();
    let dev = open(&fake);
    assert_ne!(
        fake.state().dsr.unwrap().cmd_slot_dma.to_ne(),
        first,
        "the device was given the new pages"
    );
    destroy_pd(&fake, &dev, |req| answer(req, 0, &[])).expect("commands after reopening");
}

/// The state page and the entries page of the ring the DSR describes.
pub(super) fn ring_of(fake: &Fake, info: rnic_pvrdma_regs::dsr::RingPageInfo) -> (u64, u64) {
    let table = u64_at(fake, info.pdir_dma.to_ne());
    (u64_at(fake, table), u64_at(fake, table + 8))
}

/// The device's side of an event ring: writes `entries` (8 bytes each) at
/// the producer's tail and advances it.
pub(super) fn produce(fake: &Fake, (state, entries): (u64, u64), events: &[[u32; 2]]) {
    let mut st = fake.state();
    let tail_at = state + RX_PROD_TAIL as u64;
    let tail = u32::from_le_bytes(st.dma(tail_at, 4).unwrap().try_into().unwrap());
    for (i, ev) in events.iter().enumerate() {
        let slot = (tail as u64 + i as u64) % 512;
        let mem = st.dma(entries + slot * 8, 8).unwrap();
        mem[..4].copy_from_slice(&ev[0].to_le_bytes());
        mem[4..].copy_from_slice(&ev[1].to_le_bytes());
    }
    let new_tail = (tail + events.len() as u32) % 1024;
    st.dma(tail_at, 4)
        .unwrap()
        .copy_from_slice(&new_tail.to_le_bytes());
}

#[test]
fn events_the_device_produces_are_taken_in_order() {
    let fake = Fake::new(bar1::VERSION_ROCEV1);
    let dev = open(&fake);
    let dsr = fake.state().dsr.unwrap();
    let async_ring = ring_of(&fake, dsr.async_ring_pages);
    assert!(
        dev.pop_async_event().unwrap().is_none(),
        "nothing produced yet"
    );
    produce(
        &fake,
        async_ring,
        &[
            [EventType::PortActive.raw(), 1],
            [EventType::QpFatal.raw(), 9],
        ],
    );
    let e = dev.pop_async_event().unwrap().unwrap();
    assert_eq!(
        (e.kind.to_ne(), e.info.to_ne()),
        (EventType::PortActive.raw(), 1)
    );
    let e = dev.pop_async_event().unwrap().unwrap();
    assert_eq!(
        (e.kind.to_ne(), e.info.to_ne()),
        (EventType::QpFatal.raw(), 9)
    );
    assert!(dev.pop_async_event().unwrap().is_none());
    let head = u32::from_le_bytes(
        fake.state()
            .dma(async_ring.0 + RX_CONS_HEAD as u64, 4)
            .unwrap()
            .try_into()
            .unwrap(),
    );
    assert_eq!(head, 2, "the driver's consumer head tells the device");

    let cq_ring = ring_of(&fake, dsr.cq_ring_pages);
    produce(&fake, cq_ring, &[[5, 0]]);
    assert_eq!(dev.pop_cq_notification().unwrap().unwrap().info.to_ne(), 5);
    assert!(
        dev.pop_async_event().unwrap().is_none(),
        "the rings are apart"
    );
}

#[test]
fn an_index_the_device_corrupted_is_refused() {
    let fake = Fake::new(bar1::VERSION_ROCEV1);
    let dev = open(&fake);
    let info = fake.state().dsr.unwrap().async_ring_pages;
    let (state, _) = ring_of(&fake, info);
    fake.state()
        .dma(state + RX_PROD_TAIL as u64, 4)
        .unwrap()
        .copy_from_slice(&5000u32.to_le_bytes());
    assert!(dev.pop_async_event().is_err(), "an index past 2 × 512");
    let head = fake
        .state()
        .dma(state + RX_CONS_HEAD as u64, 4)
        .unwrap()
        .to_vec();
    assert_eq!(head, [0; 4], "nothing consumed");
}

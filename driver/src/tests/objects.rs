//! Bring-up, queries, commands that fail or never run, and the lifetimes
//! of objects and of the memory the device may use.

use std::string::ToString;
use std::sync::{mpsc, Arc};
use std::vec::Vec;

use rnic_hw_regs::bar0::{self, FatalSyndrome, Status, Version};
use rnic_hw_regs::cmd::{CmdOpcode, CmdStatus};
use rnic_hw_regs::pci::{BAR_REGS, VENDOR_ID};
use rnic_verbs::{access, Mtu};

use super::*;
use crate::ErrorKind;

#[test]
fn bring_up_and_queries() {
    let (ctx, rig) = open();
    let cfg = rig.dev.config().clone();
    let dev = ctx.query_device().unwrap();
    assert_eq!(dev, *ctx.device_attr());
    assert_eq!(
        (dev.vendor_id, dev.max_qp, dev.max_sge),
        (u32::from(VENDOR_ID), cfg.max_qp, u32::from(cfg.max_sge))
    );
    let port = ctx.query_port(1).unwrap();
    assert_eq!(port.max_mtu, Mtu::Mtu4096);
    assert_eq!(port.active_mtu, cfg.active_mtu);
    assert_eq!(port.gid_tbl_len, cfg.gid_table_len);
    assert_eq!(port.mac, cfg.mac);
    assert_eq!(
        ctx.query_port(2).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    // GID 0: the port's IPv4 address, IPv4-mapped (RoCEv2).
    let gid = ctx.query_gid(1, 0).unwrap();
    assert_eq!(gid[..12], [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff]);
    assert_eq!(gid[12..], cfg.ipv4);
    let last = cfg.gid_table_len - 1;
    assert_eq!(
        ctx.query_gid(1, last).unwrap(),
        [0; 16],
        "invalid entries read as zero"
    );
    let e = ctx.query_gid(1, cfg.gid_table_len).unwrap_err();
    let f = crate::CmdFailure::of(&e).expect("a device refusal");
    assert_eq!(
        (f.opcode, f.status),
        (CmdOpcode::QueryGid, CmdStatus::BadParam)
    );
    assert_eq!(f.field_offset(), Some(4), "the index field");
    assert!(e.to_string().contains("QueryGid"), "{e}");
    // Bring-up's commands, in order, each done.
    let done = rig.done();
    assert!(done[0].contains("ALLOC_UCTX done: OK"), "{done:?}");
    assert!(done
        .iter()
        .all(|d| d.contains("done: OK") || d.contains("QUERY_GID")));
}

#[test]
fn bring_up_failures() {
    let fail = |reads: Vec<(u8, usize, u32)>| {
        let (hal, rig) = platform();
        rig.faults.set(|f| f.reads = reads);
        let e = Context::open_with(hal, short())
            .err()
            .expect("bring-up must fail");
        (e, rig)
    };
    // A device that is no rnic is refused before anything is written to
    // it: not even the reset.
    let (e, rig) = fail(std::vec![(BAR_REGS, bar0::ID, 0xdead_beef)]);
    assert_eq!(e.kind(), ErrorKind::NoDevice);
    assert!(e.to_string().contains("0xdeadbeef"), "{e}");
    assert!(rig.events("mmio_write").is_empty(), "no register written");
    let v2 = Version::new().with_major(2).into_bits().to_ne();
    let (e, _) = fail(std::vec![(BAR_REGS, bar0::VERSION, v2)]);
    assert_eq!(e.kind(), ErrorKind::NoDevice);
    assert!(e.to_string().contains("2.0"), "{e}");
    let (e, _) = fail(std::vec![(BAR_REGS, bar0::STATUS, 0)]);
    assert_eq!(e.kind(), ErrorKind::TimedOut);
    // Ready after the reset, then fatal when enabled, with a syndrome.
    let fatal = Status::new().with_ready(true).with_fatal(true);
    let (e, rig) = fail(std::vec![
        (BAR_REGS, bar0::STATUS, fatal.into_bits().to_ne()),
        (BAR_REGS, bar0::FATAL_SYNDROME, FatalSyndrome::EqDma as u32),
    ]);
    assert_eq!(e.kind(), ErrorKind::Io, "{e}");
    assert!(e.to_string().contains("EqDma"), "{e}");
    assert!(!rig.events("dma").is_empty());
    assert_eq!(rig.held(), 0, "queues freed after the failure");
}

#[test]
fn command_timeout_and_failure_status() {
    let (ctx, rig) = open_with(short());
    rig.faults
        .set(|f| f.device.fail_command = Some((CmdOpcode::CreatePd, CmdStatus::NoResources, 0)));
    let e = ctx.alloc_pd().err().unwrap();
    assert_eq!(e.kind(), ErrorKind::NoMemory);
    assert_eq!(
        crate::CmdFailure::of(&e).unwrap().status,
        CmdStatus::NoResources
    );
    rig.faults.set(|f| f.hang_commands = true);
    let e = ctx.alloc_pd().err().unwrap();
    assert_eq!(e.kind(), ErrorKind::TimedOut);
    assert!(e.to_string().contains("CreatePd"), "{e}");
    assert_eq!(rig.faults.injected().commands_hung, 1);
}

#[test]
fn pd_busy_until_its_mrs_and_qps_are_gone() {
    let (ctx, rig) = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8).unwrap();
    let mr = pd.alloc_mr(100, access::LOCAL_WRITE).unwrap();
    let q = qp(&pd, &cq, cap(4, 4));
    let e = pd.destroy().unwrap_err();
    assert_eq!(e.error.kind(), ErrorKind::Busy);
    let pd = e.object.expect("handed back");
    let e = cq.destroy().unwrap_err();
    assert_eq!(e.error.kind(), ErrorKind::Busy);
    let cq = e.object.expect("handed back");
    assert_eq!(
        rig.count("DESTROY_PD") + rig.count("DESTROY_CQ"),
        0,
        "refused by the driver"
    );
    mr.destroy().unwrap();
    q.destroy().unwrap();
    cq.destroy().unwrap();
    pd.destroy().unwrap();
    let done = rig.done();
    for op in ["DEREG_MR", "DESTROY_QP", "DESTROY_CQ", "DESTROY_PD"] {
        assert!(
            done.iter()
                .any(|d| d.contains(&std::format!("{op} done: OK"))),
            "{op}: {done:?}"
        );
    }
}

#[test]
fn drop_in_any_order_releases_everything() {
    let (hal, rig) = platform();
    {
        let ctx = Context::open(hal).unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(8).unwrap();
        let q = qp(&pd, &cq, cap(4, 4));
        let mr = pd.alloc_mr(64, 0).unwrap();
        drop(ctx);
        drop(pd);
        drop(cq);
        assert_eq!(
            rig.count("DESTROY_PD"),
            0,
            "the PD lives while its QP and MR do"
        );
        assert_eq!(rig.count("DESTROY_CQ"), 0, "the CQ lives while its QP does");
        drop(q);
        assert_eq!(rig.count("DESTROY_CQ"), 1, "the CQ went with its last QP");
        drop(mr);
        assert_eq!(rig.count("DESTROY_PD"), 1);
    }
    assert_eq!(rig.held(), 0, "all DMA memory freed");
    let ops = rig.issued();
    let last = ops.iter().rposition(|o| o == "DEREG_MR").unwrap();
    assert_eq!(ops[last + 1], "DESTROY_PD", "{ops:?}");
}

#[test]
fn mr_checks_and_accessors() {
    let (ctx, rig) = open();
    let pd = ctx.alloc_pd().unwrap();
    let bad = pd.alloc_mr(64, access::REMOTE_WRITE).err().unwrap();
    assert_eq!(
        bad.kind(),
        ErrorKind::InvalidArgument,
        "remote write needs local write"
    );
    assert_eq!(
        pd.alloc_mr(64, 1 << 7).err().unwrap().kind(),
        ErrorKind::InvalidArgument
    );
    let mr = pd
        .alloc_mr(100, access::LOCAL_WRITE | access::REMOTE_READ)
        .unwrap();
    assert_eq!(mr.len(), 100);
    assert_eq!(mr.lkey(), mr.rkey());
    let data: Vec<u8> = (0..37).collect();
    mr.write(3, &data).unwrap();
    let mut back = [0u8; 37];
    mr.read(3, &mut back).unwrap();
    assert_eq!(&back[..], &data[..]);
    assert_eq!(
        mr.write(90, &data).unwrap_err().kind(),
        ErrorKind::InvalidArgument
    );
    let sge = mr.sge(10, 20).unwrap();
    assert_eq!(
        (sge.addr, sge.length, sge.lkey),
        (mr.addr() + 10, 20, mr.lkey())
    );
    assert!(mr.sge(90, 20).is_err());

    let mut user = std::vec![0u8; 3000];
    let ptr = core::ptr::NonNull::new(user.as_mut_ptr()).unwrap();
    // SAFETY: `user` outlives the MR (destroyed below).
    let umr = unsafe { pd.reg_mr(ptr, user.len(), access::LOCAL_WRITE) }.unwrap();
    assert_eq!(umr.addr(), ptr.as_ptr() as u64);
    umr.write(2990, b"0123456789").unwrap();
    let held = rig.held();
    umr.destroy().unwrap();
    assert_eq!(rig.held(), held - 1, "unmapped");
    assert_eq!(&user[2990..], b"0123456789");
}

/// Memory a failed command leaves with the device: freed when the device
/// refused the command, kept until the reset at shutdown when it may still
/// use it (a timed-out create, a failed destroy or deregistration), except
/// registered user memory, whose IOVAs are retired at once.
#[test]
fn memory_the_device_may_use_is_kept_until_the_reset() {
    let (hal, rig) = platform();
    let mut user = std::vec![0u8; 4096];
    let ptr = core::ptr::NonNull::new(user.as_mut_ptr()).unwrap();
    {
        let ctx = Context::open_with(hal, short()).unwrap();
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx.create_cq(8).unwrap();
        let fail = |op, status| {
            rig.faults
                .set(|f| f.device.fail_command = Some((op, status, 0)))
        };
        let before = rig.held();

        fail(CmdOpcode::CreateCq, CmdStatus::NoResources);
        assert!(ctx.create_cq(8).is_err());
        fail(CmdOpcode::CreateQp, CmdStatus::NoResources);
        assert!(pd.create_qp(&init(&cq, &cq, cap(4, 4))).is_err());
        fail(CmdOpcode::RegMr, CmdStatus::BadParam);
        assert!(pd.alloc_mr(64, 0).is_err());
        fail(CmdOpcode::RegMr, CmdStatus::BadParam);
        // SAFETY: `user` outlives the context.
        assert!(unsafe { pd.reg_mr(ptr, user.len(), 0) }.is_err());
        assert_eq!(rig.held(), before, "refused: freed or unmapped at once");
        assert_eq!(rig.faults.injected().commands_changed, 4);

        // SAFETY: `user` outlives the context.
        let umr = unsafe { pd.reg_mr(ptr, user.len(), 0) }.unwrap();
        let mr = pd.alloc_mr(64, 0).unwrap();
        let q = qp(&pd, &cq, cap(4, 4));
        let objects = rig.held();
        fail(CmdOpcode::DeregMr, CmdStatus::Internal);
        drop(umr);
        assert_eq!(rig.held(), objects - 1, "user memory retired at once");
        assert_eq!(rig.retired(), 1);
        fail(CmdOpcode::DeregMr, CmdStatus::Internal);
        drop(mr);
        fail(CmdOpcode::DestroyQp, CmdStatus::Busy);
        drop(q);
        assert_eq!(
            rig.held(),
            objects - 1,
            "not released: the device may use them"
        );
        let e = cq.destroy().unwrap_err();
        assert_eq!(e.error.kind(), ErrorKind::Busy, "the QP still exists");
        let cq = e.object.expect("handed back");

        rig.faults.set(|f| f.hang_commands = true);
        let e = ctx.create_cq(8).err().unwrap();
        assert_eq!(e.kind(), ErrorKind::TimedOut);
        assert!(!e.is_not_issued());
        assert_eq!(rig.held(), objects, "the device may yet create the CQ");
        drop((cq, pd));
        assert_eq!(rig.held(), objects);
    }
    assert_eq!(
        rig.held(),
        0,
        "everything freed or unmapped after the reset"
    );
    drop(user);
}

/// Registered user memory the device may still reference (a deregistration
/// that failed or timed out, a registration that timed out) is cut off at
/// once by retiring its IOVAs, so its owner may free it; where the platform
/// cannot retire IOVAs it stays mapped until the reset at shutdown.
#[test]
fn user_memory_the_device_may_reference_is_retired() {
    let (hal, rig) = platform();
    let ctx = Context::open_with(hal, short()).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let reg = |buf: &mut Vec<u8>| {
        let ptr = core::ptr::NonNull::new(buf.as_mut_ptr()).unwrap();
        // SAFETY: each buffer outlives its MR, or its IOVAs are retired
        // (checked) before it is freed.
        unsafe { pd.reg_mr(ptr, buf.len(), access::LOCAL_WRITE) }
    };
    let before = rig.held();

    // DEREG_MR refused when the MR is dropped.
    let mut buf = std::vec![0u8; 3000];
    let mr = reg(&mut buf).unwrap();
    rig.faults
        .set(|f| f.device.fail_command = Some((CmdOpcode::DeregMr, CmdStatus::Internal, 0)));
    drop(mr);
    assert_eq!((rig.held(), rig.retired()), (before, 1), "retired");
    let last = rig.events("dma").pop().unwrap();
    assert!(last.text.starts_with("DMA retire 3000 B"), "{}", last.text);
    drop(buf);

    // DEREG_MR timed out on destroy: the MR is gone, its memory retired.
    let mut buf = std::vec![0u8; 100];
    let mr = reg(&mut buf).unwrap();
    rig.faults.set(|f| f.hang_commands = true);
    let e = mr.destroy().unwrap_err();
    assert!(e.object.is_none(), "the MR is gone");
    assert_eq!(e.error.kind(), ErrorKind::TimedOut);
    assert_eq!((rig.held(), rig.retired()), (before, 2));
    drop(buf);

    // REG_MR timed out: the device may yet register the memory.
    let mut buf = std::vec![0u8; 100];
    assert_eq!(reg(&mut buf).err().unwrap().kind(), ErrorKind::TimedOut);
    assert_eq!((rig.held(), rig.retired()), (before, 3));
    drop(buf);
    // The device gets to the two late ones; the registration finds its
    // memory retired.
    rig.faults.set(|f| f.hang_commands = false);
    let cq = ctx.create_cq(8).unwrap();
    let done = rig.done();
    let n = done.len();
    assert!(done[n - 3].contains("DEREG_MR done: OK"), "{done:?}");
    assert!(done[n - 2].contains("REG_MR done: BAD_DMA"), "{done:?}");
    assert!(done[n - 1].contains("CREATE_CQ done: OK"), "{done:?}");

    // A platform that cannot retire IOVAs keeps the mapping until the
    // reset, and the caller's memory must live until then.
    rig.faults.set(|f| f.retire_unsupported = true);
    let mut kept = std::vec![0u8; 100];
    let mr = reg(&mut kept).unwrap();
    rig.faults
        .set(|f| f.device.fail_command = Some((CmdOpcode::DeregMr, CmdStatus::Internal, 0)));
    drop(mr);
    assert_eq!((rig.held(), rig.retired()), (before + 2, 3), "kept mapped");
    drop((cq, pd, ctx));
    assert_eq!(rig.held(), 0, "unmapped after the reset");
    drop(kept);
}

/// A destroy whose outcome is unknown (the command timed out) gives the
/// object up: it is not handed back, and the driver never names its number
/// again, since the device may have given it to a new object. A destroy
/// the device refuses hands the object back.
#[test]
fn destroy_with_unknown_outcome_gives_the_object_up() {
    let (ctx, rig) = open_with(short());
    let hang = |on| rig.faults.set(|f| f.hang_commands = on);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let mr = pd.alloc_mr(512, access::LOCAL_WRITE).unwrap();

    // A QP with completions still in the CQ.
    let a = qp(&pd, &cq, cap(4, 4));
    to_rts(&ctx, &a);
    let n = a.qp_num();
    send_to_self(&a, &mr, 1);
    let objects = rig.held();
    hang(true);
    let e = a.destroy().unwrap_err();
    assert!(e.object.is_none(), "the QP is gone");
    assert_eq!(e.error.kind(), ErrorKind::TimedOut);
    assert!(e.to_string().contains("gone"), "{e}");
    assert_eq!(rig.held(), objects, "its queues are kept until the reset");
    assert!(poll_all(&cq).is_empty(), "its completions are removed");
    // The device executes the DESTROY_QP late, at the next command, and
    // gives the number to B.
    hang(false);
    let b = qp(&pd, &cq, cap(4, 4));
    assert_eq!(b.qp_num(), n, "the model reuses the number freed");
    to_rts(&ctx, &b);
    send_to_self(&b, &mr, 2);
    let wc = poll_all(&cq);
    assert_eq!(wc.len(), 2, "B's send and receive: {wc:?}");
    assert!(wc
        .iter()
        .all(|w| w.qp_num == n && w.status == crate::WcStatus::Success));
    assert_eq!(rig.count("DESTROY_QP"), 1, "never sent again");

    // The same for a CQ, an MR and a PD.
    let c = ctx.create_cq(8).unwrap();
    let m = c.cq_num();
    hang(true);
    assert!(c.destroy().unwrap_err().object.is_none());
    hang(false);
    let c2 = ctx.create_cq(8).unwrap();
    assert_eq!(c2.cq_num(), m);
    let mr2 = pd.alloc_mr(64, 0).unwrap();
    hang(true);
    assert!(mr2.destroy().unwrap_err().object.is_none());
    hang(false);
    let pd2 = ctx.alloc_pd().unwrap();
    hang(true);
    assert!(pd2.destroy().unwrap_err().object.is_none());
    hang(false);
    let sent = ["DESTROY_CQ", "DEREG_MR", "DESTROY_PD"].map(|op| rig.count(op));
    assert_eq!(sent, [1, 1, 1]);

    // Refused: handed back, and destroyed later (the device never ran the
    // refused one: the second one succeeds).
    rig.faults
        .set(|f| f.device.fail_command = Some((CmdOpcode::DestroyQp, CmdStatus::Internal, 0)));
    let e = b.destroy().unwrap_err();
    assert!(!e.to_string().contains("gone"), "{e}");
    let b = e.object.expect("handed back");
    b.destroy().unwrap();
    rig.faults
        .set(|f| f.device.fail_command = Some((CmdOpcode::DestroyCq, CmdStatus::Internal, 0)));
    let c2 = c2.destroy().unwrap_err().object.expect("handed back");
    c2.destroy().unwrap();
    assert_eq!(rig.count("DESTROY_QP"), 3);
    drop((mr, cq, pd, ctx));
    assert_eq!(rig.held(), 0, "freed after the reset");
}

/// A command the driver could not issue (its command queue entry is still
/// the device's after a timeout) is known not to have run: a create frees
/// its memory at once, a destroy hands the object back.
#[test]
fn commands_not_issued_free_their_memory_at_once() {
    let config = Config {
        log_cmdq_size: 0,
        ..short()
    };
    let (ctx, rig) = open_with(config);
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(8).unwrap();
    let q = qp(&pd, &cq, cap(4, 4));
    let mut user = std::vec![0u8; 256];
    let ptr = core::ptr::NonNull::new(user.as_mut_ptr()).unwrap();
    // SAFETY: `user` outlives the context.
    let umr = unsafe { pd.reg_mr(ptr, user.len(), 0) }.unwrap();
    let before = rig.held();

    rig.faults.set(|f| f.hang_commands = true);
    let e = ctx.alloc_pd().err().unwrap();
    assert!(!e.is_not_issued(), "issued, and timed out");
    // The only command queue entry is the device's now.
    let not_issued = |e: crate::Error| {
        assert_eq!(e.kind(), ErrorKind::TimedOut);
        assert!(e.is_not_issued(), "{e}");
        assert!(e.to_string().contains("not issued"), "{e}");
    };
    not_issued(ctx.create_cq(8).err().unwrap());
    not_issued(pd.alloc_mr(64, 0).err().unwrap());
    // SAFETY: `user` outlives the context.
    not_issued(unsafe { pd.reg_mr(ptr, 64, 0) }.err().unwrap());
    not_issued(pd.create_qp(&init(&cq, &cq, cap(4, 4))).err().unwrap());
    assert_eq!(rig.held(), before, "freed or unmapped at once");
    assert_eq!(rig.retired(), 0);
    let e = q.destroy().unwrap_err();
    not_issued(e.error.clone());
    let q = e.object.expect("handed back");
    let e = umr.destroy().unwrap_err();
    not_issued(e.error.clone());
    let umr = e.object.expect("handed back");
    assert_eq!(rig.held(), before);
    assert_eq!(rig.count("CREATE_CQ"), 1, "only the first CQ was issued");

    // The device takes the hung CREATE_PD at the next doorbell; the
    // driver, which gave it up, sees its entry back and goes on.
    rig.faults.set(|f| f.hang_commands = false);
    let done = rig.done().len();
    q.destroy().unwrap();
    umr.destroy().unwrap();
    let late: Vec<_> = rig.done().split_off(done);
    assert!(late[0].contains("CREATE_PD done: OK"), "{late:?}");
    assert!(
        late.iter().any(|d| d.contains("DESTROY_QP done: OK")),
        "{late:?}"
    );
    drop((cq, pd, ctx));
    assert_eq!(rig.held(), 0);
    drop(user);
}

/// A device that gives a new QP the number of a live QP (a device bug)
/// gets the create refused with EIO: the live QP keeps its completions.
#[test]
fn qp_number_in_use_is_refused() {
    let (ctx, rig) = open();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(16).unwrap();
    let other = ctx.create_cq(16).unwrap();
    let mr = pd.alloc_mr(512, access::LOCAL_WRITE).unwrap();
    let a = qp(&pd, &cq, cap(4, 4));
    to_rts(&ctx, &a);
    let n = a.qp_num();
    send_to_self(&a, &mr, 1);
    let held = rig.held();
    for (send_cq, recv_cq) in [(&cq, &cq), (&other, &cq), (&cq, &other)] {
        rig.faults
            .set(|f| f.device.number = Some((CmdOpcode::CreateQp, n)));
        let e = pd
            .create_qp(&init(send_cq, recv_cq, cap(4, 4)))
            .err()
            .unwrap();
        assert_eq!(e.kind(), ErrorKind::Io, "{e}");
        assert!(!other.inner.routes(n), "nothing left attached");
    }
    assert_eq!(rig.faults.injected().commands_changed, 3);
    assert_eq!(
        rig.held(),
        held + 3,
        "the device may use the refused QPs' memory"
    );
    let wc = poll_all(&cq);
    assert_eq!(wc.len(), 2, "A's send and receive completions kept: {wc:?}");
    assert!(wc.iter().all(|w| w.qp_num == n));
    assert!(ctx.shared.qps.read().get(&n).is_some());
    // A's queue accounting was untouched: it can fill its send queue.
    let four: Vec<_> = (0..4).map(|i| inline_send(i, 0)).collect();
    a.post_send(&four).unwrap();
}

/// A device that gives a new CQ the number of a live CQ (a device bug)
/// gets the create refused with EIO: the live CQ keeps its number.
#[test]
fn cq_number_in_use_is_refused() {
    let (ctx, rig) = open();
    let cq = ctx.create_cq(16).unwrap();
    let n = cq.cq_num();
    let held = rig.held();
    rig.faults
        .set(|f| f.device.number = Some((CmdOpcode::CreateCq, n)));
    let e = ctx.create_cq(16).err().unwrap();
    assert_eq!(e.kind(), ErrorKind::Io, "{e}");
    assert!(e.to_string().contains("which a live CQ has"), "{e}");
    assert_eq!(
        rig.held(),
        held + 1,
        "the device may use the refused CQ's memory"
    );
    assert!(ctx.shared.cqs.read().get(&n).is_some());
    // The next CQ gets a number of its own.
    let other = ctx.create_cq(16).unwrap();
    assert_ne!(other.cq_num(), n);
}

/// Regression: a QP number the device reuses while the QP that had it is
/// being destroyed belongs to the new QP. The old QP's release must not
/// remove the new QP from the tables, nor its completions from the CQ,
/// and the old QP's completions must not be taken for the new QP's.
#[test]
fn qp_number_reused_during_destroy_belongs_to_the_new_qp() {
    let (ctx, _rig) = open();
    let pd = Arc::new(ctx.alloc_pd().unwrap());
    let cq = Arc::new(ctx.create_cq(16).unwrap());
    let mr = Arc::new(pd.alloc_mr(512, access::LOCAL_WRITE).unwrap());
    let a = qp(&pd, &cq, cap(4, 4));
    to_rts(&ctx, &a);
    let n = a.qp_num();
    // A's completions are still in the CQ when A is destroyed.
    send_to_self(&a, &mr, 1);
    // Right after DESTROY_QP, before A's release has cleaned up, the
    // device gives A's number to B, created, used and completing as
    // another thread could.
    let (tx, rx) = mpsc::channel();
    let (ctx2, pd2, cq2, mr2) = (
        ctx.clone(),
        Arc::clone(&pd),
        Arc::clone(&cq),
        Arc::clone(&mr),
    );
    *ctx.shared.after_destroy.lock() = Some(std::boxed::Box::new(move |op, id| {
        assert_eq!((op, id), (CmdOpcode::DestroyQp, n));
        let b = qp(&pd2, &cq2, cap(4, 4));
        to_rts(&ctx2, &b);
        send_to_self(&b, &mr2, 2);
        tx.send(b).unwrap();
    }));
    a.destroy().unwrap();
    let b = rx.recv().unwrap();
    assert_eq!(b.qp_num(), n, "the model reuses the number freed");
    let wc = poll_all(&cq);
    assert_eq!(wc.len(), 2, "A's completions removed, B's kept: {wc:?}");
    assert!(wc.iter().all(|w| w.wr_id == 2), "{wc:?}");
    // B's send queue retires: it can be filled and drained repeatedly.
    for round in 0..3u64 {
        post_recvs(&b, &mr, 4 * round..4 * round + 4);
        let mut four: Vec<_> = (0..4).map(|i| inline_send(100 + i, 0)).collect();
        four[3].flags = crate::send_flags::SIGNALED;
        b.post_send(&four).unwrap();
        assert_eq!(
            poll_all(&cq).len(),
            5,
            "round {round}: a send and four receives"
        );
    }
    b.destroy().unwrap();
    assert!(ctx.shared.qps.read().is_empty());
}

/// Regression: a CQ number reused while the CQ that had it is being
/// destroyed keeps the new CQ's arm state.
#[test]
fn cq_number_reused_during_destroy_belongs_to_the_new_cq() {
    let (ctx, rig) = open();
    let a = ctx.create_cq(8).unwrap();
    let n = a.cq_num();
    let (tx, rx) = mpsc::channel();
    let ctx2 = ctx.clone();
    *ctx.shared.after_destroy.lock() = Some(std::boxed::Box::new(move |op, id| {
        assert_eq!((op, id), (CmdOpcode::DestroyCq, n));
        tx.send(ctx2.create_cq(8).unwrap()).unwrap();
    }));
    a.destroy().unwrap();
    let b = rx.recv().unwrap();
    assert_eq!(b.cq_num(), n, "the model reuses the number freed");
    // B armed, then a completion on it: the event reaches B.
    let pd = ctx.alloc_pd().unwrap();
    let mr = pd.alloc_mr(512, access::LOCAL_WRITE).unwrap();
    let q = qp(&pd, &b, cap(4, 4));
    to_rts(&ctx, &q);
    post_recvs(&q, &mr, 0..1);
    b.arm(false);
    q.post_send(&[inline_send(1, crate::send_flags::SIGNALED)])
        .unwrap();
    let ev = ctx.poll_event().expect("a completion event");
    assert_eq!(ev.obj, n);
    b.arm(false);
    let db = rig.doorbells("CQ").pop().unwrap();
    assert_eq!(field(&db, "cqn"), n.to_string());
    assert!(
        db.text.contains("sn 1"),
        "B's arm state was kept: {}",
        db.text
    );
}

#[test]
fn objects_are_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<Context<H>>();
    check::<Pd<H>>();
    check::<crate::Mr<H>>();
    check::<Cq<H>>();
    check::<Qp<H>>();
    check::<crate::Error>();
}

//! Bring-up and queries: device, port and GID attributes against the
//! device configuration.

use rnic_driver::{LinkLayer, PortState};
use rnic_tests::*;

/// A configuration whose every limit differs from the default, so a value
/// that is hard-wired instead of read from the device shows up.
fn custom() -> EmuConfig {
    EmuConfig {
        mac: [0x00, 0x11, 0x22, 0x33, 0x44, 0x55],
        ipv4: [10, 20, 30, 40],
        max_qp: 100,
        max_cq: 50,
        max_mr: 300,
        max_pd: 20,
        log_max_wq: 12,
        log_max_cqe: 13,
        max_sge: 8,
        max_inline: 128,
        log_max_msg: 30,
        gid_table_len: 4,
        max_mr_size: 1 << 36,
        max_rd_atomic: 8,
        active_mtu: Mtu::Mtu2048,
        ..EmuConfig::default()
    }
}

fn query_device_matches_config(mode: ExecMode) {
    for cfg in [EmuConfig::default(), custom()] {
        let ctx = open_with(cfg.clone(), mode);
        let d = ctx.query_device().expect("query_device");
        assert_eq!(d.max_qp, cfg.max_qp);
        assert_eq!(d.max_cq, cfg.max_cq);
        assert_eq!(d.max_mr, cfg.max_mr);
        assert_eq!(d.max_pd, cfg.max_pd);
        assert_eq!(d.max_qp_wr, 1 << cfg.log_max_wq);
        assert_eq!(d.max_cqe, 1 << cfg.log_max_cqe);
        assert_eq!(d.max_sge, u32::from(cfg.max_sge));
        assert_eq!(d.max_sge_rd, u32::from(cfg.max_sge));
        assert_eq!(d.max_inline_data, cfg.max_inline);
        assert_eq!(u64::from(d.max_msg_sz), cfg.max_msg());
        assert_eq!(d.max_mr_size, cfg.max_mr_size);
        assert_eq!(d.max_qp_rd_atom, u32::from(cfg.max_rd_atomic));
        assert_eq!(d.max_qp_init_rd_atom, u32::from(cfg.max_rd_atomic));
        assert_eq!(d.phys_port_cnt, 1);
        assert_eq!(d.atomic_cap, 1, "IBV_ATOMIC_HCA");
        assert_eq!(d.vendor_id, 0x1b36);
        assert_eq!(d.vendor_part_id, 0x10f1);
        assert_eq!(d.node_guid, cfg.node_guid());
        assert_eq!(d.sys_image_guid, cfg.node_guid());
        assert_eq!(d.page_size_cap, 0x1000, "4 KiB pages only");
        assert_eq!(d.device_cap_flags, 0x1000, "IBV_DEVICE_RC_RNR_NAK_GEN");
        assert_eq!(d.hw_ver, 1);
        // What bring-up read is what a later query returns.
        assert_eq!(*ctx.device_attr(), d);
    }
    // The modified EUI-64 of the MAC, spelled out.
    let ctx = open_with(custom(), mode);
    assert_eq!(
        ctx.query_device().unwrap().node_guid,
        [0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55]
    );
}

fn query_port_is_active_roce(mode: ExecMode) {
    for cfg in [EmuConfig::default(), custom()] {
        let ctx = open_with(cfg.clone(), mode);
        let p = ctx.query_port(1).expect("query_port(1)");
        assert_eq!(p.state, PortState::Active);
        assert_eq!(p.link_layer, LinkLayer::Ethernet);
        assert_eq!(p.active_mtu, cfg.active_mtu);
        assert_eq!(p.max_mtu, Mtu::Mtu4096);
        assert_eq!(p.gid_tbl_len, cfg.gid_table_len);
        assert_eq!(u64::from(p.max_msg_sz), cfg.max_msg());
        assert_eq!(p.mac, cfg.mac);
        assert_eq!(p.lid, 0, "no LID on RoCE");
        assert_eq!(p.pkey_tbl_len, 1);
        assert_eq!(p.phys_state, 5, "LinkUp");
        assert_eq!(p.port_cap_flags, 0);
        assert_eq!(p.max_vl_num, 1);
        assert_eq!((p.active_width, p.active_speed), (2, 32), "4X EDR");
        assert_eq!((p.bad_pkey_cntr, p.qkey_viol_cntr), (0, 0));
    }
    let ctx = open(mode);
    for port in [0, 2, 255] {
        let e = ctx.query_port(port).expect_err("only port 1 exists");
        assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    }
}

fn query_gid_default_entries(mode: ExecMode) {
    let ctx = open(mode);
    // ::ffff:192.0.2.1, the IPv4-mapped GID of the default address.
    assert_eq!(
        ctx.query_gid(1, 0).unwrap(),
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 192, 0, 2, 1]
    );
    // fe80::ff:fe00:1 from MAC 02:00:00:00:00:01 (the U/L bit flipped).
    assert_eq!(
        ctx.query_gid(1, 1).unwrap(),
        [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x00, 0x00, 0x00, 0xff, 0xfe, 0x00, 0x00, 0x01]
    );
    let len = ctx.query_port(1).unwrap().gid_tbl_len;
    for i in 2..len {
        assert_eq!(ctx.query_gid(1, i).unwrap(), [0; 16], "entry {i} is empty");
    }
    let e = ctx.query_gid(1, len).expect_err("index past the table");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");
    assert!(e.refusal().is_some(), "the device refused it: {e}");
    let e = ctx.query_gid(2, 0).expect_err("port 2");
    assert_eq!(e.kind(), ErrorKind::InvalidArgument, "{e}");

    let cfg = custom();
    let ctx = open_with(cfg.clone(), mode);
    assert_eq!(
        ctx.query_gid(1, 0).unwrap(),
        [0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 20, 30, 40]
    );
    assert_eq!(ctx.query_gid(1, 0).unwrap(), cfg.ipv4_gid());
    assert_eq!(
        ctx.query_gid(1, 1).unwrap(),
        [0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55]
    );
}

/// Several contexts on several devices are independent, and a device can be
/// opened again after the previous context is gone.
fn reopen_after_close(mode: ExecMode) {
    let dev = EmuDevice::new(EmuConfig::default(), mode);
    for _ in 0..3 {
        let ctx = Context::open(dev.hal()).expect("open");
        let pd = ctx.alloc_pd().expect("alloc_pd");
        let mr = pd.alloc_mr(64, access::LOCAL_WRITE).expect("alloc_mr");
        write_mr(&mr, 0, b"still here");
        assert_eq!(read_mr(&mr, 0, 10), b"still here");
        assert_eq!(ctx.query_port(1).unwrap().state, PortState::Active);
    }
}

both_modes!(
    query_device_matches_config,
    query_port_is_active_roce,
    query_gid_default_entries,
    reopen_after_close,
);

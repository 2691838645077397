//! Object tables at the largest configuration: 2^24 QPNs and 2^24 − 1
//! CQs, MRs and PDs cost memory only as objects are created, and numbers
//! are reused least recently freed first. Alone in its binary, so that the
//! process's resident size is this test's.

mod common;

use common::*;
use rnic_emu::{EmuConfig, ExecMode};
use rnic_hw_regs::cmd::CmdOpcode;
use rnic_verbs::access;

/// The process's resident set in KiB.
fn rss_kib() -> u64 {
    let s = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = s.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn largest_configuration_allocates_on_demand() {
    let before = rss_kib();
    let max = 1 << 24;
    let cfg = EmuConfig {
        max_qp: max,
        max_cq: max - 1,
        max_mr: max - 1,
        max_pd: max - 1,
        ..EmuConfig::default()
    };
    let mut t = bring_up_with(cfg, ExecMode::Inline);
    let pdn = t.create_pd();
    let _mr = t.reg_mr(pdn, 4096, access::LOCAL_WRITE);
    let cq = t.create_cq(4);
    let qps: Vec<_> = (0..64).map(|_| t.create_qp(pdn, &cq, &cq)).collect();
    let numbers: Vec<u32> = qps.iter().map(|q| q.qpn).collect();
    assert_eq!(numbers, (2..66).collect::<Vec<_>>());
    // A table of 2^24 slots of even 64 bytes would be a GiB.
    let grown = rss_kib().saturating_sub(before);
    assert!(grown < 64 * 1024, "resident set grew by {grown} KiB");

    // Destroyed numbers come back oldest first, after churn too.
    for q in [&qps[5], &qps[1], &qps[9]] {
        t.obj(CmdOpcode::DestroyQp, q.qpn).ok::<u32>();
    }
    let again: Vec<u32> = (0..4).map(|_| t.create_qp(pdn, &cq, &cq).qpn).collect();
    assert_eq!(again, [7, 3, 11, 66]);
}

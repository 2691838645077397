//! Poll mode (`EmuBuilder::poll_mode`): two inline NICs on a switch, each
//! run only by the thread that rings its doorbells or polls it. A WRITE
//! from A reaches B's memory only once B is polled, and completes at A only
//! once A is polled after that; without poll mode the posting thread runs
//! both NICs and the WRITE has landed when `post_send` returns.

use std::sync::Arc;

use rnic_emu::net::Switch;
use rnic_tests::fabric::nic_config;
use rnic_tests::*;

struct Two {
    devs: Vec<Arc<EmuDevice>>,
    ctxs: Vec<Ctx>,
}

fn two(poll_mode: bool) -> Two {
    let sw = Switch::new();
    let devs: Vec<Arc<EmuDevice>> = (1..=2)
        .map(|n| {
            EmuDevice::builder(nic_config(n))
                .mode(ExecMode::Inline)
                .poll_mode(poll_mode)
                .wire(sw.port())
                .build()
                .unwrap()
        })
        .collect();
    let ctxs = devs.iter().map(|d| Ctx::open(d.hal()).unwrap()).collect();
    Two { devs, ctxs }
}

fn write_across(poll_mode: bool) {
    let t = two(poll_mode);
    let (pa, pb) = (t.ctxs[0].alloc_pd().unwrap(), t.ctxs[1].alloc_pd().unwrap());
    let (ca, cb) = (
        t.ctxs[0].create_cq(16).unwrap(),
        t.ctxs[1].create_cq(16).unwrap(),
    );
    let a = create_qp(&pa, &ca, &ca, cap(4, 1, 64), false);
    let b = create_qp(&pb, &cb, &cb, cap(4, 1, 64), false);
    connect_to(&t.ctxs[1], &a, b.qp_num(), &Conn::default());
    connect_to(&t.ctxs[0], &b, a.qp_num(), &Conn::default());
    let dst = pb.alloc_mr(64, ALL_ACCESS).unwrap();
    let v = [0x5au8; 16];
    a.post_send(&[SendWr {
        wr_id: 7,
        op: SendOp::RdmaWrite {
            remote: RemoteAddr {
                addr: dst.addr(),
                rkey: dst.rkey(),
            },
        },
        payload: Payload::Inline(&v),
        flags: send_flags::SIGNALED,
    }])
    .unwrap();
    let landed = || {
        let mut got = [0u8; 16];
        dst.read(0, &mut got).unwrap();
        got == v
    };
    let mut wc = [WorkCompletion::default(); 1];
    if !poll_mode {
        assert!(landed(), "the posting thread ran B");
        assert_eq!(ca.poll(&mut wc).unwrap(), 1, "and the ACK back at A");
        return;
    }
    // A alone gets nowhere: B has not run (not even for its neighbour
    // reply), so nothing lands and nothing completes.
    for _ in 0..100 {
        t.devs[0].poll();
    }
    assert!(!landed(), "B ran without being polled");
    assert_eq!(ca.poll(&mut wc).unwrap(), 0);
    // Each NIC polled by "its" thread: the WRITE lands, then completes.
    for _ in 0..100 {
        t.devs[1].poll();
        if landed() {
            break;
        }
        t.devs[0].poll();
    }
    assert!(landed(), "B polled: the WRITE lands");
    for _ in 0..100 {
        t.devs[0].poll();
        if ca.poll(&mut wc).unwrap() == 1 {
            assert_ok(&wc[0], 7, WcOpcode::RdmaWrite);
            return;
        }
        t.devs[1].poll();
    }
    panic!("no completion at A");
}

#[test]
fn poll_mode_nics_run_only_when_polled() {
    write_across(true);
}

#[test]
fn inline_nics_run_the_nics_their_frames_reach() {
    write_across(false);
}

//! Device workers: thread-mode NICs share the process's workers instead
//! of spawning a thread each. With `RNIC_EMU_WORKERS=2`, four NICs on a
//! switch run on two `rnic-emu` threads, WRITEs go round the ring of them
//! both ways, and the threads are gone once the NICs are.

use std::sync::Arc;

use rnic_emu::net::Switch;
use rnic_tests::fabric::nic_config;
use rnic_tests::*;

/// Threads of this process named `rnic-emu`, once they are `n` (a new
/// thread names itself when it starts, an old one takes a moment to go).
fn workers(n: usize) -> usize {
    let start = std::time::Instant::now();
    loop {
        let now = count();
        if now == n || start.elapsed().as_secs() > 5 {
            return now;
        }
        std::thread::yield_now();
    }
}

fn count() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter(|t| {
            let comm = t.as_ref().unwrap().path().join("comm");
            std::fs::read_to_string(comm).is_ok_and(|c| c.trim() == "rnic-emu")
        })
        .count()
}

#[test]
fn four_nics_two_workers() {
    // The only test of this binary: nothing else reads the environment.
    std::env::set_var("RNIC_EMU_WORKERS", "2");
    assert_eq!(workers(0), 0);
    let sw = Switch::new();
    let devs: Vec<Arc<EmuDevice>> = (1..=4)
        .map(|n| {
            EmuDevice::builder(nic_config(n))
                .mode(ExecMode::Thread)
                .wire(sw.port())
                .build()
                .unwrap()
        })
        .collect();
    assert_eq!(workers(2), 2, "four NICs, two workers");
    let ctxs: Vec<Ctx> = devs.iter().map(|d| Ctx::open(d.hal()).unwrap()).collect();
    let pds: Vec<_> = ctxs.iter().map(|c| c.alloc_pd().unwrap()).collect();
    let cqs: Vec<_> = ctxs.iter().map(|c| c.create_cq(64).unwrap()).collect();
    // NIC i's QP `next[i]` talks to NIC i+1's `prev[i+1]`.
    let next: Vec<_> = (0..4)
        .map(|i| create_qp(&pds[i], &cqs[i], &cqs[i], cap(16, 1, 64), true))
        .collect();
    let prev: Vec<_> = (0..4)
        .map(|i| create_qp(&pds[i], &cqs[i], &cqs[i], cap(16, 1, 64), true))
        .collect();
    for i in 0..4 {
        let j = (i + 1) % 4;
        connect_to(&ctxs[j], &next[i], prev[j].qp_num(), &Conn::default());
        connect_to(&ctxs[i], &prev[j], next[i].qp_num(), &Conn::default());
    }
    let mrs: Vec<_> = pds
        .iter()
        .map(|p| p.alloc_mr(4096, ALL_ACCESS).unwrap())
        .collect();
    for round in 0..50u8 {
        for i in 0..4 {
            let (j, k) = ((i + 1) % 4, (i + 3) % 4);
            let v = [round ^ (i as u8 * 16); 32];
            for (qp, peer, off) in [(&next[i], j, 0u64), (&prev[i], k, 64)] {
                qp.post_send(&[SendWr {
                    wr_id: u64::from(round),
                    op: SendOp::RdmaWrite {
                        remote: RemoteAddr {
                            addr: mrs[peer].addr() + off,
                            rkey: mrs[peer].rkey(),
                        },
                    },
                    payload: Payload::Inline(&v),
                    flags: send_flags::SIGNALED,
                }])
                .unwrap();
            }
        }
        // A WRITE's completion says its bytes are in the peer's memory:
        // every NIC's completions first, then every NIC's memory.
        for cq in &cqs {
            for wc in poll_n(cq, 2) {
                assert_ok(&wc, u64::from(round), WcOpcode::RdmaWrite);
            }
        }
        for (i, mr) in mrs.iter().enumerate() {
            // What the neighbours wrote: i-1 forwards at 0, i+1 backwards
            // at 64.
            let (from_prev, from_next) = ((i + 3) % 4, (i + 1) % 4);
            let mut got = [0u8; 64 + 32];
            mr.read(0, &mut got).unwrap();
            assert_eq!(got[..32], [round ^ (from_prev as u8 * 16); 32]);
            assert_eq!(got[64..], [round ^ (from_next as u8 * 16); 32]);
        }
    }
    drop((next, prev, mrs, cqs, pds, ctxs));
    let mut devs = devs;
    devs.truncate(1);
    assert_eq!(workers(1), 1, "the worker of NICs 2 and 4 stops with them");
    drop(devs);
    assert_eq!(workers(0), 0, "the last NIC of a worker stops it");
}

//! The driver's BlueFlame writes (spec 8.1), seen at the platform: one
//! small WQE goes with its doorbell as a 64-byte write and no SQ doorbell;
//! a batch, or a WQE too large, rings the doorbell; a platform that cannot
//! make 64-byte writes gets doorbells from then on, and every WRITE lands
//! in each case, in both execution modes.

use std::sync::Arc;

use rnic_driver::{
    access, send_flags, Context, Cq, Payload, QpInit, QpType, RemoteAddr, SendOp, SendWr, WcStatus,
    WorkCompletion,
};
use rnic_emu::{EmuConfig, EmuDevice, EmuHal, ExecMode};
use rnic_middleware::{FaultHal, Memory, Sink, Timeline, TraceHal};
use rnic_tests::{cap, init_attr, rtr_attr_to, rts_attr, Conn};

/// The emulated device's platform, under FaultHal (which refuses 64-byte
/// writes when told) and TraceHal (whose trace counts them).
type H = TraceHal<FaultHal<EmuHal>>;

fn reap(cq: &Cq<H>, n: usize) {
    let mut wc = [WorkCompletion::default(); 8];
    let mut got = 0;
    let start = std::time::Instant::now();
    while got < n {
        let k = cq.poll(&mut wc).unwrap();
        for w in &wc[..k] {
            assert_eq!(w.status, WcStatus::Success, "{w:?}");
        }
        got += k;
        assert!(start.elapsed().as_secs() < 10, "{got} of {n} completions");
    }
}

fn blueflame(mode: ExecMode) {
    let dev = EmuDevice::new(EmuConfig::default(), mode);
    let (hal, faults) = FaultHal::new(dev.hal());
    let trace = Arc::new(Memory::default());
    let sink: Arc<dyn Sink> = trace.clone();
    let hal = TraceHal::new(hal, Timeline::new(vec![sink]));
    let ctx = Context::open(hal).unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx.create_cq(64).unwrap();
    let qp = || {
        pd.create_qp(&QpInit {
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            cap: cap(16, 1, 128),
            qp_type: QpType::Rc,
            sq_sig_all: true,
        })
        .unwrap()
    };
    let (a, b) = (qp(), qp());
    let gid = ctx.query_gid(1, 0).unwrap();
    let c = Conn::default();
    for (q, dest) in [(&a, b.qp_num()), (&b, a.qp_num())] {
        for (attr, mask) in [init_attr(&c), rtr_attr_to(gid, dest, &c), rts_attr(&c)] {
            q.modify(&attr, mask).unwrap();
        }
    }
    let mr = pd
        .alloc_mr(256, access::LOCAL_WRITE | access::REMOTE_WRITE)
        .unwrap();
    let write = |v: &[u8]| {
        let wr = SendWr {
            wr_id: 1,
            op: SendOp::RdmaWrite {
                remote: RemoteAddr {
                    addr: mr.addr(),
                    rkey: mr.rkey(),
                },
            },
            payload: Payload::Inline(v),
            flags: send_flags::SIGNALED,
        };
        a.post_send(&[wr]).unwrap();
        reap(&cq, 1);
        let mut got = vec![0u8; v.len()];
        mr.read(0, &mut got).unwrap();
        assert_eq!(got, v, "the WRITE landed");
    };
    // BlueFlame writes taken, and SQ doorbells.
    let counts = || {
        let ev = trace.events();
        let n = |kind: &str, text: &str| {
            ev.iter()
                .filter(|e| e.kind == kind && e.text.contains(text))
                .count()
        };
        (
            n("blueflame", "") - n("refused", "BlueFlame"),
            n("doorbell", "SQ doorbell"),
        )
    };
    // 8 inline bytes: 3 segments, a BlueFlame write.
    for i in 1..=10u8 {
        write(&[i; 8]);
    }
    assert_eq!(counts(), (10, 0));
    // 40 inline bytes: 5 segments, a doorbell.
    write(&[0x40; 40]);
    assert_eq!(counts(), (10, 1));
    // Two WQEs behind one doorbell.
    let wr = |v: &'static [u8]| SendWr {
        wr_id: 2,
        op: SendOp::RdmaWrite {
            remote: RemoteAddr {
                addr: mr.addr() + 128,
                rkey: mr.rkey(),
            },
        },
        payload: Payload::Inline(v),
        flags: send_flags::SIGNALED,
    };
    a.post_send(&[wr(&[1; 8]), wr(&[2; 8])]).unwrap();
    reap(&cq, 2);
    assert_eq!(counts(), (10, 2));
    // A platform that refuses: the doorbell, and no more tries.
    faults.set(|f| f.refuse_blocks = true);
    write(&[0x77; 8]);
    faults.set(|f| f.refuse_blocks = false);
    write(&[0x78; 8]);
    assert_eq!(counts(), (10, 4), "BlueFlame stays off once refused");
    assert_eq!(faults.injected().blocks_refused, 1);
}

#[test]
fn blueflame_inline() {
    blueflame(ExecMode::Inline);
}

#[test]
fn blueflame_thread() {
    blueflame(ExecMode::Thread);
}

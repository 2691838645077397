//! Who runs a thread-mode NIC while a program waits, counted rather than
//! timed: a ping-pong of 1,000 exchanges between two NICs of this process,
//! each on its own UDP wire, each side's thread waiting on its own CQ.
//!
//! - Polling: each empty poll lends the thread to its NIC, which runs
//!   there (its lent steps grow by more than one per exchange), and the
//!   device worker finds no work that waited for its clock (`late` stays
//!   0). Its takeovers (a NIC taken back from a thread that the host did
//!   not run for a lending window, with work waiting) are printed, not
//!   asserted: they are the host's scheduling.
//! - Sleeping on completion events: the worker runs the NICs, woken by
//!   every frame that arrives and every doorbell rung while it sleeps,
//!   and again nothing waits for its clock.
//!
//! One test in its own binary: nothing else competes for the two cores
//! while the counts are taken.

use std::net::{SocketAddr, UdpSocket};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use rnic_driver::CompChannel;
use rnic_emu::net::UdpWire;
use rnic_emu::{RunStats, WorkerStats};
use rnic_tests::fabric::nic_config;
use rnic_tests::*;

const EXCHANGES: u32 = 1000;
/// Receives posted ahead.
const DEPTH: u32 = 16;
const SIZE: usize = 4096;

struct Side {
    dev: Arc<EmuDevice>,
    ctx: Ctx,
    ch: Option<CompChannel<EmuHal>>,
    cq: ECq,
    qp: EQp,
    mr: EMr,
    _pd: EPd,
}

/// Two thread-mode NICs whose UDP wires point at each other, a QP each,
/// connected; with `events`, each CQ reports to a completion channel.
fn two(events: bool) -> (Side, Side) {
    let lo = SocketAddr::from(([127, 0, 0, 1], 0));
    let socks = [UdpSocket::bind(lo).unwrap(), UdpSocket::bind(lo).unwrap()];
    let addrs = [
        socks[0].local_addr().unwrap(),
        socks[1].local_addr().unwrap(),
    ];
    let mut sides: Vec<Side> = socks
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            let wire = UdpWire::from_socket(s, addrs[1 - i]).unwrap();
            let dev = EmuDevice::builder(nic_config(i as u8 + 1))
                .mode(ExecMode::Thread)
                .wire(wire)
                .build()
                .unwrap();
            let ctx = Ctx::open(dev.hal()).unwrap();
            let pd = ctx.alloc_pd().unwrap();
            let ch = events.then(|| ctx.create_comp_channel().unwrap());
            let cq = ctx.create_cq_with(4 * DEPTH, ch.as_ref(), 0).unwrap();
            let qp = create_qp(&pd, &cq, &cq, cap(DEPTH, 1, 0), false);
            let mr = pd.alloc_mr(SIZE, ALL_ACCESS).unwrap();
            Side {
                dev,
                ctx,
                ch,
                cq,
                qp,
                mr,
                _pd: pd,
            }
        })
        .collect();
    let b = sides.pop().unwrap();
    let a = sides.pop().unwrap();
    connect_to(&b.ctx, &a.qp, b.qp.qp_num(), &Conn::default());
    connect_to(&a.ctx, &b.qp, a.qp.qp_num(), &Conn::default());
    (a, b)
}

impl Side {
    fn post_recv(&self) {
        let sg = [self.mr.sge(0, SIZE as u32).unwrap()];
        self.qp
            .post_recv(&[RecvWr {
                wr_id: 1,
                sg_list: &sg,
            }])
            .unwrap();
    }

    /// Sends message `k`: every byte `k` as u8.
    fn send(&self, k: u32) {
        self.mr.write(0, &[k as u8; SIZE]).unwrap();
        let sg = [self.mr.sge(0, SIZE as u32).unwrap()];
        self.qp
            .post_send(&[SendWr {
                wr_id: 2,
                op: SendOp::Send,
                payload: Payload::Sgl(&sg),
                flags: send_flags::SIGNALED,
            }])
            .unwrap();
    }

    /// The next completion: polling (each empty poll lends the thread to
    /// the NIC), or sleeping on the channel once the CQ is armed.
    fn next(&self) -> WorkCompletion {
        let mut wc = [WorkCompletion::default()];
        let start = std::time::Instant::now();
        loop {
            assert!(start.elapsed() < TIMEOUT, "no completion");
            if self.cq.poll(&mut wc).unwrap() == 1 {
                assert_eq!(wc[0].status, WcStatus::Success, "{:?}", wc[0]);
                return wc[0];
            }
            let Some(ch) = &self.ch else { continue };
            self.cq.arm(false);
            // One written between the poll and the arm raised no event.
            if self.cq.poll(&mut wc).unwrap() == 1 {
                assert_eq!(wc[0].status, WcStatus::Success, "{:?}", wc[0]);
                return wc[0];
            }
            if ch.get_cq_event(1_000_000_000).unwrap().is_some() {
                self.cq.ack_events(1).unwrap();
            }
        }
    }

    /// Waits for message `k` and checks its bytes.
    fn receive(&self, k: u32) {
        let wc = self.next();
        assert_eq!((wc.opcode, wc.byte_len), (WcOpcode::Recv, SIZE as u32));
        let mut got = vec![0u8; SIZE];
        self.mr.read(0, &mut got).unwrap();
        assert!(got.iter().all(|&b| b == k as u8), "message {k}");
        self.post_recv();
    }
}

/// Runs the ping-pong; returns what each NIC's run counted over it.
fn pingpong(events: bool) -> [(RunStats, RunStats); 2] {
    let (a, b) = two(events);
    for s in [&a, &b] {
        for _ in 0..DEPTH {
            s.post_recv();
        }
    }
    // The setup's commands lent this thread to both NICs: the worker
    // takes them back once that is long past, before the exchanges.
    thread::sleep(Duration::from_millis(10));
    let before = [a.dev.run_stats(), b.dev.run_stats()];
    let server = thread::spawn(move || {
        for k in 0..EXCHANGES {
            b.receive(k);
            b.send(k);
            assert_eq!(b.next().opcode, WcOpcode::Send);
        }
        b
    });
    for k in 0..EXCHANGES {
        a.send(k);
        // The SEND's completion and the answer, in either order.
        let mut answered = false;
        let mut sent = false;
        while !(answered && sent) {
            let wc = a.next();
            match wc.opcode {
                WcOpcode::Send => sent = true,
                WcOpcode::Recv => {
                    assert_eq!(wc.byte_len, SIZE as u32);
                    let mut got = vec![0u8; SIZE];
                    a.mr.read(0, &mut got).unwrap();
                    assert!(got.iter().all(|&x| x == k as u8), "answer {k}");
                    a.post_recv();
                    answered = true;
                }
                other => panic!("unexpected completion {other:?}"),
            }
        }
    }
    let b = server.join().unwrap();
    [
        (before[0], a.dev.run_stats()),
        (before[1], b.dev.run_stats()),
    ]
}

fn worker(r: &RunStats) -> WorkerStats {
    r.worker.expect("a thread-mode NIC has a worker")
}

#[test]
fn no_exchange_waits_on_a_timer() {
    // Polling: the waiting threads run their NICs.
    for (side, (before, after)) in pingpong(false).iter().enumerate() {
        let (w0, w1) = (worker(before), worker(after));
        eprintln!("polling, side {side}: {before:?} -> {after:?}");
        assert!(
            after.lent_steps - before.lent_steps > EXCHANGES as u64,
            "side {side}: the polling thread ran its NIC"
        );
        assert_eq!(
            w1.late, w0.late,
            "side {side}: work waited for the worker's clock"
        );
    }
    // Sleeping: the worker runs them, woken by frames and doorbells.
    for (side, (before, after)) in pingpong(true).iter().enumerate() {
        let (w0, w1) = (worker(before), worker(after));
        eprintln!("events, side {side}: {before:?} -> {after:?}");
        assert!(
            w1.woken - w0.woken >= EXCHANGES as u64,
            "side {side}: the worker was woken for the exchanges"
        );
        assert_eq!(
            w1.late, w0.late,
            "side {side}: work waited for the worker's clock"
        );
    }
}

//! The communication manager on two NICs: each port's `rnic_cm::Manager`
//! speaks through its GSI QP, so a connection is set up by REQ, REP and
//! RTU MADs on the wire between the two QP1s, carries RDMA traffic on the
//! QPs they connected (the passive side's buffer named in the REP's
//! private data), and is torn down by DREQ and DREP; and a REQ lost on
//! the wire is sent again by the manager's timer.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use rnic_cm::manager::{ConnectParams, Event, Gid, Manager, Out, State};
use rnic_cm::path::PathRepr;
use rnic_cm::rep::RepRepr;
use rnic_cm::req::{transport, ReqRepr};
use rnic_cm::{cma, MAD_LEN};
use rnic_tests::fabric::{Fabric, Nic};
use rnic_tests::*;
use rnic_verbs::GSI_QKEY;

const BUF: usize = GRH_LEN + MAD_LEN;
const RECVS: usize = 16;
const SID: u64 = cma::service_id(cma::port_space::TCP, 7174);

/// A port's CM: its manager, its GSI QP and the buffers MADs come and go
/// in.
struct Port<'a> {
    nic: &'a Nic,
    pd: EPd,
    cq: ECq,
    gsi: EQp,
    mr: EMr,
    cm: Manager,
    ahs: HashMap<Gid, Ah<EmuHal>>,
    epoch: Instant,
    sent: usize,
}

impl<'a> Port<'a> {
    fn new(nic: &'a Nic, seed: u32) -> Port<'a> {
        let pd = nic.ctx.alloc_pd().unwrap();
        let cq = nic.ctx.create_cq(64).unwrap();
        let gsi = pd
            .create_qp(&QpInit {
                send_cq: &cq,
                recv_cq: &cq,
                srq: None,
                cap: cap(RECVS as u32, 1, 0),
                qp_type: QpType::Gsi,
                sq_sig_all: true,
            })
            .unwrap();
        let init = QpAttr {
            qp_state: QpState::Init,
            qkey: GSI_QKEY,
            ..QpAttr::default()
        };
        gsi.modify(&init, qp_attr::STATE | qp_attr::PKEY_INDEX | qp_attr::QKEY)
            .unwrap();
        set_state(&gsi, QpState::Rtr).unwrap();
        let rts = QpAttr {
            qp_state: QpState::Rts,
            ..QpAttr::default()
        };
        gsi.modify(&rts, qp_attr::STATE | qp_attr::SQ_PSN).unwrap();
        let mr = pd.alloc_mr(BUF * (RECVS + 1), access::LOCAL_WRITE).unwrap();
        for i in 0..RECVS {
            Self::post(&gsi, &mr, i);
        }
        let guid = u64::from_be_bytes(nic.ctx.query_gid(1, 0).unwrap()[8..].try_into().unwrap());
        Port {
            nic,
            pd,
            cq,
            gsi,
            mr,
            cm: Manager::new(guid, seed),
            ahs: HashMap::new(),
            epoch: Instant::now(),
            sent: 0,
        }
    }

    fn post(gsi: &EQp, mr: &EMr, i: usize) {
        let sg = [mr.sge(i * BUF, BUF as u32).unwrap()];
        gsi.post_recv(&[RecvWr {
            wr_id: i as u64,
            sg_list: &sg,
        }])
        .unwrap();
    }

    fn now(&self) -> u64 {
        self.epoch.elapsed().as_nanos() as u64
    }

    fn gid(&self) -> Gid {
        self.nic.ctx.query_gid(1, 0).unwrap()
    }

    /// Sends `out` to QP1 of its port.
    fn send(&mut self, out: Out) {
        let ah = self.ahs.entry(out.to).or_insert_with(|| {
            self.pd
                .create_ah(&AhAttr {
                    dgid: out.to,
                    is_global: true,
                    hop_limit: 64,
                    port_num: 1,
                    ..AhAttr::default()
                })
                .unwrap()
        });
        let at = RECVS * BUF;
        self.mr.write(at, &out.mad).unwrap();
        let sg = [self.mr.sge(at, MAD_LEN as u32).unwrap()];
        self.gsi
            .post_send(&[SendWr {
                wr_id: 1 << 32,
                op: SendOp::UdSend {
                    dest: ah.dest(1, GSI_QKEY),
                    imm: None,
                },
                payload: Payload::Sgl(&sg),
                flags: send_flags::SIGNALED,
            }])
            .unwrap();
        self.sent += 1;
    }

    /// Takes the GSI QP's completions: each MAD received goes to the
    /// manager, from the sender's GID in its GRH (the IPv4 header in the
    /// GRH's last 20 bytes); what the manager answers is sent. Then runs
    /// the manager's timers. Returns the events.
    fn pump(&mut self) -> Vec<Event> {
        let mut events = Vec::new();
        let mut wc = [WorkCompletion::default(); 8];
        let n = self.cq.poll(&mut wc).unwrap();
        for w in &wc[..n] {
            assert_eq!(w.status, WcStatus::Success, "{w:?}");
            if w.opcode != WcOpcode::Recv {
                continue;
            }
            let i = w.wr_id as usize;
            let mut b = vec![0u8; BUF];
            self.mr.read(i * BUF, &mut b).unwrap();
            Self::post(&self.gsi, &self.mr, i);
            let mut from = [0u8; 16];
            from[10..12].fill(0xff);
            from[12..].copy_from_slice(&b[20 + 12..20 + 16]);
            let now = self.now();
            let (ev, out) = self.cm.receive(now, from, &b[GRH_LEN..]);
            events.extend(ev);
            for o in out {
                self.send(o);
            }
        }
        let now = self.now();
        let (ev, out) = self.cm.poll(now);
        events.extend(ev);
        for o in out {
            self.send(o);
        }
        events
    }
}

/// Pumps both ports, handing each event to `on` (with whether it is A's
/// and its port) until `on` says done, at most 10 s.
fn run<'a>(
    f: &Fabric,
    a: &mut Port<'a>,
    b: &mut Port<'a>,
    mut on: impl FnMut(bool, Event, &mut Port<'a>) -> bool,
) {
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        for (is_a, p) in [(true, &mut *a), (false, &mut *b)] {
            for ev in p.pump() {
                if on(is_a, ev, p) {
                    return;
                }
            }
        }
        assert!(Instant::now() < end, "the exchange did not finish");
        f.idle(Duration::from_micros(50));
    }
}

fn rc_qp(p: &Port<'_>) -> (ECq, EQp) {
    let cq = p.nic.ctx.create_cq(16).unwrap();
    let qp = create_qp(&p.pd, &cq, &cq, cap(8, 1, 0), false);
    to_init(&qp, &Conn::default()).unwrap();
    (cq, qp)
}

/// A REQ for RC QP `qpn` starting at `psn`, from `from` to `to`.
fn req(qpn: u32, psn: u32, from: Gid, to: Gid) -> ReqRepr {
    let mut private_data = [0; rnic_cm::req::PRIVATE_DATA_LEN];
    cma::CmaHdr::v4(
        from[12..].try_into().unwrap(),
        0x4000,
        to[12..].try_into().unwrap(),
    )
    .emit(&mut private_data);
    ReqRepr {
        local_comm_id: 0,
        vendor_id: 0,
        service_id: SID,
        local_ca_guid: 0,
        local_qkey: 0,
        local_qpn: qpn,
        responder_resources: 1,
        local_eecn: 0,
        initiator_depth: 1,
        remote_eecn: 0,
        // 4.096 µs · 2^15 ≈ 134 ms: a REQ lost is sent again soon.
        remote_cm_response_timeout: 15,
        transport: transport::RC,
        end_to_end_flow_control: false,
        starting_psn: psn,
        local_cm_response_timeout: 15,
        retry_count: 7,
        pkey: 0xffff,
        path_mtu: Mtu::Mtu1024 as u8,
        rdc_exists: false,
        rnr_retry_count: 7,
        max_cm_retries: 5,
        srq: false,
        extended_transport: 0,
        primary: PathRepr {
            local_lid: 0xffff,
            remote_lid: 0xffff,
            local_gid: from,
            remote_gid: to,
            hop_limit: 64,
            local_ack_timeout: 14,
            ..PathRepr::default()
        },
        alternate: PathRepr::default(),
        sap_supported: false,
        private_data,
    }
}

fn connect_write_disconnect(lose_first_req: bool) {
    let f = Fabric::new(ExecMode::Thread, 2, 11);
    let mut a = Port::new(&f.nics[0], 0x100);
    let mut b = Port::new(&f.nics[1], 0x900);
    b.cm.listen(SID).unwrap();
    let (a_cq, a_qp) = rc_qp(&a);
    let (_b_cq, b_qp) = rc_qp(&b);
    let target = b.pd.alloc_mr(4096, ALL_ACCESS).unwrap();
    let (ga, gb) = (a.gid(), b.gid());
    let now = a.now();
    let (ia, out) = a.cm.connect(
        now,
        ConnectParams {
            service_id: SID,
            to: gb,
            req: req(a_qp.qp_num(), 0x1000, ga, gb),
        },
    );
    if lose_first_req {
        // The first REQ never reaches the wire: the timer sends it again.
        assert_eq!(a.cm.state(ia), Some(State::ReqSent));
    } else {
        a.send(out);
    }
    let mut ib = 0;
    run(&f, &mut a, &mut b, |is_a, ev, p| {
        match (is_a, ev) {
            (false, Event::Req { id, from, req: r }) => {
                assert_eq!((from, r.local_qpn, r.service_id), (ga, a_qp.qp_num(), SID));
                let hdr = cma::CmaHdr::parse(&r.private_data).unwrap();
                assert_eq!(
                    (hdr.ip_version, hdr.src_addr[12..].to_vec()),
                    (4, ga[12..].to_vec())
                );
                // The passive side readies its QP from the REQ, then
                // answers with its QP and, in the private data, the
                // buffer the active side may write. Each side sends from
                // the starting PSN the other announced, as the kernel's CM
                // has it.
                let c = Conn {
                    rq_psn: 0x2000,
                    sq_psn: r.starting_psn,
                    ..Conn::default()
                };
                let (attr, mask) = rtr_attr_to(from, r.local_qpn, &c);
                b_qp.modify(&attr, mask).unwrap();
                to_rts(&b_qp, &c).unwrap();
                let mut private_data = [0; rnic_cm::rep::PRIVATE_DATA_LEN];
                private_data[..8].copy_from_slice(&target.addr().to_be_bytes());
                private_data[8..12].copy_from_slice(&target.rkey().to_be_bytes());
                let rep = RepRepr {
                    local_comm_id: 0,
                    remote_comm_id: 0,
                    local_qkey: 0,
                    local_qpn: b_qp.qp_num(),
                    local_eecn: 0,
                    starting_psn: 0x2000,
                    vendor_id: 0,
                    responder_resources: 1,
                    initiator_depth: 1,
                    target_ack_delay: 0,
                    failover_accepted: 0,
                    end_to_end_flow_control: false,
                    rnr_retry_count: 7,
                    srq: false,
                    local_ca_guid: 0,
                    private_data,
                };
                let now = p.now();
                let out = p.cm.accept(now, id, rep).unwrap();
                p.send(out);
                ib = id;
                false
            }
            (true, Event::Rep { id, rep }) => {
                assert_eq!((id, rep.local_qpn), (ia, b_qp.qp_num()));
                let c = Conn {
                    rq_psn: 0x1000,
                    sq_psn: rep.starting_psn,
                    ..Conn::default()
                };
                let (attr, mask) = rtr_attr_to(gb, rep.local_qpn, &c);
                a_qp.modify(&attr, mask).unwrap();
                to_rts(&a_qp, &c).unwrap();
                // Write into the buffer the REP named.
                let addr = u64::from_be_bytes(rep.private_data[..8].try_into().unwrap());
                let rkey = u32::from_be_bytes(rep.private_data[8..12].try_into().unwrap());
                let src = p.pd.alloc_mr(4096, ALL_ACCESS).unwrap();
                src.write(0, b"written over a connection the CM made")
                    .unwrap();
                let sg = [src.sge(0, 37).unwrap()];
                a_qp.post_send(&[write(7, &sg, addr, rkey)]).unwrap();
                let out = p.cm.ready(id, &[]).unwrap();
                p.send(out);
                assert_ok(&f.wait_one(&a_cq), 7, WcOpcode::RdmaWrite);
                false
            }
            (false, Event::Established { id }) => {
                assert_eq!(id, ib);
                true
            }
            (_, e) => panic!("unexpected {e:?}"),
        }
    });
    let mut got = [0u8; 37];
    target.read(0, &mut got).unwrap();
    assert_eq!(&got, b"written over a connection the CM made");
    // B disconnects; A is told and answers.
    let now = b.now();
    let out = b.cm.disconnect(now, ib, &[]).unwrap();
    b.send(out);
    let mut seen = (false, false);
    run(&f, &mut a, &mut b, |is_a, ev, _| {
        match (is_a, ev) {
            (true, Event::Disconnect { id, .. }) => {
                assert_eq!(id, ia);
                seen.0 = true;
            }
            (false, Event::Disconnected { id }) => {
                assert_eq!(id, ib);
                seen.1 = true;
            }
            (_, e) => panic!("unexpected {e:?}"),
        }
        seen == (true, true)
    });
    assert_eq!(
        (a.cm.state(ia), b.cm.state(ib)),
        (Some(State::TimeWait), Some(State::TimeWait))
    );
    let resent = a.cm.stats().resent;
    assert_eq!(resent, u64::from(lose_first_req), "REQs sent again");
    // Every MAD crossed the wire between the two QP1s.
    let port = |n: &Nic, c| n.ctx.query_port_counters(1).unwrap().get(c);
    for (p, nic) in [(&a, &f.nics[0]), (&b, &f.nics[1])] {
        assert_eq!(port(nic, counter::MADS_SENT), p.sent as u64);
        assert_eq!(port(nic, counter::MADS_DROPPED), 0);
    }
    assert_eq!(
        port(&f.nics[1], counter::MADS_RECEIVED),
        a.sent as u64,
        "REQ, RTU and DREP"
    );
}

#[test]
fn a_connection_the_cm_made_carries_rdma_and_is_torn_down() {
    connect_write_disconnect(false);
}

#[test]
fn a_lost_req_is_sent_again_by_the_managers_timer() {
    connect_write_disconnect(true);
}

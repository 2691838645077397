//! The structures of `rdma/rdma_cma.h` (and `infiniband/sa.h`'s path
//! record) as the drop-in librdmacm lays them out, field for field
//! against the headers of rdma-core 44 (`librdmacm-dev`), through a C
//! probe.

use std::mem::{offset_of, size_of};
use std::process::Command;

use rnic_rdmacm::abi::*;

/// `(name, value)` pairs a C program prints for `exprs` (sizes and
/// offsets), compiled against the installed headers.
fn probe(exprs: &[(&str, &str)]) -> Vec<(String, usize)> {
    let dir = std::env::temp_dir().join(format!("rnic-rdmacm-layout-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut code = String::from(
        "#include <stddef.h>\n#include <stdio.h>\n#include <rdma/rdma_cma.h>\n#include <infiniband/sa.h>\nint main(void) {\n",
    );
    for (name, e) in exprs {
        code += &format!("printf(\"{name} %zu\\n\", (size_t)({e}));\n");
    }
    code += "return 0; }\n";
    std::fs::write(dir.join("p.c"), code).unwrap();
    let st = Command::new("gcc")
        .arg(dir.join("p.c"))
        .arg("-o")
        .arg(dir.join("p"))
        .status()
        .expect("gcc");
    assert!(
        st.success(),
        "the probe needs librdmacm-dev (scripts/setup.sh installs it)"
    );
    let out = Command::new(dir.join("p")).output().unwrap();
    std::fs::remove_dir_all(&dir).unwrap();
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').unwrap();
            (k.to_owned(), v.parse().unwrap())
        })
        .collect()
}

macro_rules! check {
    ($c:literal, $rust:ty, $($field:ident),*) => {{
        let mut exprs = vec![(concat!($c, ".size"), concat!("sizeof(", $c, ")"))];
        let mut ours = vec![(concat!($c, ".size"), size_of::<$rust>())];
        $(
            exprs.push((concat!($c, ".", stringify!($field)), concat!("offsetof(", $c, ", ", stringify!($field), ")")));
            ours.push((concat!($c, ".", stringify!($field)), offset_of!($rust, $field)));
        )*
        let theirs = probe(&exprs);
        let ours: Vec<(String, usize)> = ours.into_iter().map(|(k, v)| (k.to_owned(), v)).collect();
        assert_eq!(ours, theirs);
    }};
}

#[test]
fn the_structures_are_laid_out_as_the_headers() {
    check!("struct rdma_event_channel", RdmaEventChannel, fd);
    check!("struct rdma_ib_addr", RdmaIbAddr, sgid, dgid, pkey);
    check!("struct rdma_route", RdmaRoute, addr, path_rec, num_paths);
    check!(
        "struct rdma_cm_id",
        RdmaCmId,
        verbs,
        channel,
        context,
        qp,
        route,
        ps,
        port_num,
        event,
        send_cq_channel,
        send_cq,
        recv_cq_channel,
        recv_cq,
        srq,
        pd,
        qp_type
    );
    check!(
        "struct rdma_conn_param",
        RdmaConnParam,
        private_data,
        private_data_len,
        responder_resources,
        initiator_depth,
        flow_control,
        retry_count,
        rnr_retry_count,
        srq,
        qp_num
    );
    check!(
        "struct rdma_ud_param",
        RdmaUdParam,
        private_data,
        private_data_len,
        ah_attr,
        qp_num,
        qkey
    );
    check!(
        "struct rdma_cm_event",
        RdmaCmEvent,
        id,
        listen_id,
        event,
        status,
        param
    );
    check!(
        "struct rdma_addrinfo",
        RdmaAddrinfo,
        ai_flags,
        ai_family,
        ai_qp_type,
        ai_port_space,
        ai_src_len,
        ai_dst_len,
        ai_src_addr,
        ai_dst_addr,
        ai_src_canonname,
        ai_dst_canonname,
        ai_route_len,
        ai_route,
        ai_connect_len,
        ai_connect,
        ai_next
    );
    check!(
        "struct ibv_sa_path_rec",
        IbvSaPathRec,
        dgid,
        sgid,
        dlid,
        slid,
        raw_traffic,
        flow_label,
        hop_limit,
        traffic_class,
        reversible,
        numb_path,
        pkey,
        sl,
        mtu_selector,
        mtu,
        rate_selector,
        rate,
        packet_life_time_selector,
        packet_life_time,
        preference
    );
    // The unions: `struct rdma_addr`'s members, and the event parameters.
    let u = probe(&[
        ("dst", "offsetof(struct rdma_addr, dst_addr)"),
        ("ib", "offsetof(struct rdma_addr, addr)"),
        ("size", "sizeof(struct rdma_addr)"),
        ("param", "sizeof(((struct rdma_cm_event *)0)->param)"),
    ]);
    let ours = [
        ("dst", offset_of!(RdmaAddr, dst)),
        ("ib", offset_of!(RdmaAddr, ibaddr)),
        ("size", size_of::<RdmaAddr>()),
        ("param", size_of::<RdmaCmEventParam>()),
    ];
    assert_eq!(u, ours.map(|(k, v)| (k.to_owned(), v)));
}

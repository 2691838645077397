//! The drop-in libibverbs.so.1 under Debian's unmodified rdma-core
//! programs (scripts/setup.sh installs ibverbs-utils and
//! libibverbs-dev): its exported symbols and versions, its structures
//! against rdma-core 44's header, and `ibv_devices` listing the
//! configured devices.

mod common;

use std::mem::offset_of;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::{c_ok, lib_dir, run, same_layout, text, two_processes};

use rnic_ibverbs::abi::{
    IbvAhAttr, IbvContext, IbvCq, IbvDevice, IbvDeviceAttr, IbvGlobalRoute, IbvMr, IbvPd,
    IbvPortAttr, IbvQp, IbvQpAttr, IbvQpCap, IbvQpInitAttr, IbvWc, COMPAT_PORT_ATTR_LEN,
    OP_POLL_CQ, OP_REQ_NOTIFY_CQ,
};

/// `[("size", size_of::<T>()), ("field", offset_of!(T, field)), …]`: the
/// layout of `T` as `same_layout` compares it with the header.
macro_rules! of {
    ($t:ty, $($f:ident),*) => {
        [("size", size_of::<$t>()), $((stringify!($f), offset_of!($t, $f))),*]
    };
}

/// `(version, symbol)` of every symbol the library defines, from
/// `objdump -T`: functions (`DF .text`) and variables (`DO .bss`/`.data`);
/// the version is the next-to-last column.
fn exported() -> Vec<(String, String)> {
    let so = lib_dir().join("libibverbs.so.1");
    let o = Command::new("objdump").arg("-T").arg(&so).output().unwrap();
    String::from_utf8_lossy(&o.stdout)
        .lines()
        .filter(|l| l.contains(" DF .text") || l.contains(" DO .bss") || l.contains(" DO .data"))
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            Some((cols[cols.len() - 2].to_owned(), (*cols.last()?).to_owned()))
        })
        .collect()
}

#[test]
fn exports_exactly_the_mapped_symbols_with_their_versions() {
    let map = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("libibverbs.map"))
        .unwrap();
    // (version node, symbol) for every symbol the map exports.
    let mut node = "";
    let mut mapped: Vec<(String, String)> = Vec::new();
    for l in map.lines().map(str::trim) {
        if let Some(name) = l.strip_suffix('{').map(str::trim) {
            node = name;
        } else if let Some(sym) = l.strip_suffix(';') {
            if !sym.contains(':') && !sym.contains('*') && !sym.starts_with('}') {
                mapped.push((node.to_owned(), sym.to_owned()));
            }
        }
    }
    assert!(mapped.len() >= 140, "{mapped:?}");
    let defined = exported();
    for m in &mapped {
        assert!(defined.contains(m), "{}@@{} missing: {defined:?}", m.1, m.0);
    }
    assert_eq!(defined.len(), mapped.len(), "nothing else exported");
    let so = lib_dir().join("libibverbs.so.1");
    let d = Command::new("readelf").arg("-d").arg(&so).output().unwrap();
    assert!(String::from_utf8_lossy(&d.stdout).contains("[libibverbs.so.1]"));
}

/// Every libibverbs symbol (with its version) that Debian's
/// ibverbs-utils, perftest and the libraries perftest links (librdmacm,
/// libmlx5, libefa: they are bound at load time, `-z now`) import is
/// defined, so that each of them loads.
#[test]
fn defines_every_symbol_the_programs_and_libraries_import() {
    let mut objects: Vec<PathBuf> = std::fs::read_dir("/usr/bin")
        .unwrap()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            let n = p.file_name().unwrap().to_string_lossy();
            n.starts_with("ibv_") || n.starts_with("ib_")
        })
        .collect();
    let programs = objects.len();
    for lib in ["librdmacm.so.1", "libmlx5.so.1", "libefa.so.1"] {
        objects.push(Path::new("/usr/lib/x86_64-linux-gnu").join(lib));
    }
    let defined = exported();
    let mut imports = 0;
    for obj in &objects {
        let o = Command::new("objdump").arg("-T").arg(obj).output().unwrap();
        assert!(
            o.status.success(),
            "{} (scripts/setup.sh installs it)",
            obj.display()
        );
        for l in String::from_utf8_lossy(&o.stdout).lines() {
            let cols: Vec<&str> = l.split_whitespace().collect();
            if !l.contains("*UND*") || cols.len() < 2 {
                continue;
            }
            let version = cols[cols.len() - 2].trim_matches(|c| c == '(' || c == ')');
            if !version.starts_with("IBVERBS_") {
                continue;
            }
            let sym = cols[cols.len() - 1];
            imports += 1;
            assert!(
                defined.contains(&(version.to_owned(), sym.to_owned())),
                "{} imports {sym}@{version}, which is not defined",
                obj.display()
            );
        }
    }
    // ibverbs-utils' eight and perftest's eight.
    assert!(programs >= 16, "{programs} programs");
    assert!(imports >= 300, "{imports} imports");
}

#[test]
fn structures_are_laid_out_as_the_header() {
    same_layout(
        "struct ibv_device",
        &[
            ("size", size_of::<IbvDevice>()),
            ("_ops", offset_of!(IbvDevice, ops)),
            ("node_type", offset_of!(IbvDevice, node_type)),
            ("transport_type", offset_of!(IbvDevice, transport_type)),
            ("name", offset_of!(IbvDevice, name)),
            ("dev_name", offset_of!(IbvDevice, dev_name)),
            ("dev_path", offset_of!(IbvDevice, dev_path)),
            ("ibdev_path", offset_of!(IbvDevice, ibdev_path)),
        ],
    );
    same_layout(
        "struct ibv_context",
        &[
            ("size", size_of::<IbvContext>()),
            ("device", offset_of!(IbvContext, device)),
            ("ops", offset_of!(IbvContext, ops)),
            ("cmd_fd", offset_of!(IbvContext, cmd_fd)),
            ("async_fd", offset_of!(IbvContext, async_fd)),
            ("num_comp_vectors", offset_of!(IbvContext, num_comp_vectors)),
            ("mutex", offset_of!(IbvContext, mutex)),
            ("abi_compat", offset_of!(IbvContext, abi_compat)),
        ],
    );
    macro_rules! attr {
        ($($f:ident),*) => {
            [("size", size_of::<IbvDeviceAttr>()), $((stringify!($f), offset_of!(IbvDeviceAttr, $f))),*]
        };
    }
    same_layout(
        "struct ibv_device_attr",
        &attr!(
            fw_ver,
            node_guid,
            sys_image_guid,
            max_mr_size,
            page_size_cap,
            vendor_id,
            vendor_part_id,
            hw_ver,
            max_qp,
            max_qp_wr,
            device_cap_flags,
            max_sge,
            max_sge_rd,
            max_cq,
            max_cqe,
            max_mr,
            max_pd,
            max_qp_rd_atom,
            max_ee_rd_atom,
            max_res_rd_atom,
            max_qp_init_rd_atom,
            max_ee_init_rd_atom,
            atomic_cap,
            max_ee,
            max_rdd,
            max_mw,
            max_raw_ipv6_qp,
            max_raw_ethy_qp,
            max_mcast_grp,
            max_mcast_qp_attach,
            max_total_mcast_qp_attach,
            max_ah,
            max_fmr,
            max_map_per_fmr,
            max_srq,
            max_srq_wr,
            max_srq_sge,
            max_pkeys,
            local_ca_ack_delay,
            phys_port_cnt
        ),
    );
}

#[test]
fn port_attributes_are_laid_out_as_the_header() {
    macro_rules! port {
        ($($f:ident),*) => {
            [("size", size_of::<IbvPortAttr>()), $((stringify!($f), offset_of!(IbvPortAttr, $f))),*]
        };
    }
    same_layout(
        "struct ibv_port_attr",
        &port!(
            state,
            max_mtu,
            active_mtu,
            gid_tbl_len,
            port_cap_flags,
            max_msg_sz,
            bad_pkey_cntr,
            qkey_viol_cntr,
            pkey_tbl_len,
            lid,
            sm_lid,
            lmc,
            max_vl_num,
            sm_sl,
            subnet_timeout,
            init_type_reply,
            active_width,
            active_speed,
            phys_state,
            link_layer,
            flags,
            port_cap_flags2
        ),
    );
    // The exported ibv_query_port fills the old layout, which ends before
    // port_cap_flags2.
    assert_eq!(COMPAT_PORT_ATTR_LEN, 48);
}

#[test]
fn pd_and_mr_are_laid_out_as_the_header() {
    same_layout(
        "struct ibv_pd",
        &[
            ("size", size_of::<IbvPd>()),
            ("context", offset_of!(IbvPd, context)),
            ("handle", offset_of!(IbvPd, handle)),
        ],
    );
    same_layout(
        "struct ibv_mr",
        &[
            ("size", size_of::<IbvMr>()),
            ("context", offset_of!(IbvMr, context)),
            ("pd", offset_of!(IbvMr, pd)),
            ("addr", offset_of!(IbvMr, addr)),
            ("length", offset_of!(IbvMr, length)),
            ("handle", offset_of!(IbvMr, handle)),
            ("lkey", offset_of!(IbvMr, lkey)),
            ("rkey", offset_of!(IbvMr, rkey)),
        ],
    );
}

#[test]
fn pd_and_mr_from_c() {
    let code = r#"
int main(void) {
    struct ibv_device **list = ibv_get_device_list(NULL);
    struct ibv_context *ctx = ibv_open_device(list[0]);
    CHECK(ctx, 1);
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    CHECK(pd && pd->context == ctx, 2);
    char *buf = malloc(8192);
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, 8192, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    CHECK(mr, 3);
    CHECK(mr->pd == pd && mr->context == ctx && mr->addr == buf && mr->length == 8192, 4);
    CHECK(mr->lkey != 0 && mr->rkey == mr->lkey, 5);
    CHECK(ibv_dealloc_pd(pd) == EBUSY, 6);
    /* Remote write needs local write (IBA o10-36.2.1). */
    CHECK(!ibv_reg_mr(pd, buf, 64, IBV_ACCESS_REMOTE_WRITE) && errno == EINVAL, 7);
    CHECK(!ibv_reg_mr(NULL, buf, 64, 0) && errno == EINVAL, 8);
    struct ibv_mr *relaxed = ibv_reg_mr(pd, buf, 64, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_RELAXED_ORDERING);
    CHECK(relaxed && ibv_dereg_mr(relaxed) == 0, 15);
    CHECK(!ibv_reg_mr_iova2(pd, buf, 64, 4096, IBV_ACCESS_LOCAL_WRITE) && errno == EOPNOTSUPP, 16);
    CHECK(ibv_dereg_mr(mr) == 0, 9);
    CHECK(ibv_dereg_mr(mr) == EINVAL, 10);
    CHECK(ibv_dealloc_pd(pd) == 0, 11);
    CHECK(ibv_dealloc_pd(pd) == EINVAL, 12);
    CHECK(!ibv_alloc_pd(NULL) && errno == EINVAL, 13);
    CHECK(ibv_close_device(ctx) == 0, 14);
    ibv_free_device_list(list);
    free(buf);
    printf("ok\n");
    return 0;
}
"#;
    let out = c_ok(code, None);
    assert_eq!(out.trim(), "ok");
}

#[test]
fn cq_wc_and_ops_are_laid_out_as_the_header() {
    same_layout(
        "struct ibv_cq",
        &of!(
            IbvCq,
            context,
            channel,
            cq_context,
            handle,
            cqe,
            mutex,
            cond,
            comp_events_completed,
            async_events_completed
        ),
    );
    same_layout(
        "struct ibv_wc",
        &of!(
            IbvWc,
            wr_id,
            status,
            opcode,
            vendor_err,
            byte_len,
            imm_data,
            qp_num,
            src_qp,
            wc_flags,
            pkey_index,
            slid,
            sl,
            dlid_path_bits
        ),
    );
    let ops = offset_of!(IbvContext, ops);
    same_layout(
        "struct ibv_context",
        &[
            ("size", size_of::<IbvContext>()),
            ("ops.poll_cq", ops + 8 * OP_POLL_CQ),
            ("ops.req_notify_cq", ops + 8 * OP_REQ_NOTIFY_CQ),
        ],
    );
}

#[test]
fn cq_from_c() {
    let code = r#"
int main(void) {
    struct ibv_context *ctx = open_first();
    CHECK(ctx, 1);
    int tag;
    struct ibv_cq *cq = ibv_create_cq(ctx, 100, &tag, NULL, 0);
    CHECK(cq && cq->context == ctx && cq->cq_context == &tag && cq->cqe >= 100, 2);
    struct ibv_wc wc[4];
    CHECK(ibv_poll_cq(cq, 4, wc) == 0, 3);
    CHECK(ibv_poll_cq(cq, -1, wc) == -1 && errno == EINVAL, 4);
    CHECK(ibv_req_notify_cq(cq, 0) == 0 && ibv_req_notify_cq(cq, 1) == 0, 5);
    CHECK(!ibv_create_cq(ctx, -1, NULL, NULL, 0) && errno == EINVAL, 6);
    CHECK(!ibv_create_cq(ctx, 1 << 30, NULL, NULL, 0) && errno == EINVAL, 7);
    CHECK(!ibv_create_cq(ctx, 16, NULL, (struct ibv_comp_channel *)&tag, 0) && errno == EINVAL, 8);
    CHECK(!ibv_create_cq(NULL, 16, NULL, NULL, 0) && errno == EINVAL, 9);
    CHECK(ibv_destroy_cq(cq) == 0, 10);
    CHECK(ibv_destroy_cq(cq) == EINVAL, 11);
    CHECK(ibv_close_device(ctx) == 0, 12);
    printf("ok\n");
    return 0;
}
"#;
    let out = c_ok(code, None);
    assert_eq!(out.trim(), "ok");
}

#[test]
fn qp_structures_are_laid_out_as_the_header() {
    same_layout(
        "struct ibv_qp",
        &of!(
            IbvQp,
            context,
            qp_context,
            pd,
            send_cq,
            recv_cq,
            srq,
            handle,
            qp_num,
            state,
            qp_type,
            mutex,
            cond,
            events_completed
        ),
    );
    same_layout(
        "struct ibv_qp_cap",
        &of!(
            IbvQpCap,
            max_send_wr,
            max_recv_wr,
            max_send_sge,
            max_recv_sge,
            max_inline_data
        ),
    );
    same_layout(
        "struct ibv_qp_init_attr",
        &of!(
            IbvQpInitAttr,
            qp_context,
            send_cq,
            recv_cq,
            srq,
            cap,
            qp_type,
            sq_sig_all
        ),
    );
}

#[test]
fn qp_attributes_are_laid_out_as_the_header() {
    same_layout(
        "struct ibv_global_route",
        &of!(
            IbvGlobalRoute,
            dgid,
            flow_label,
            sgid_index,
            hop_limit,
            traffic_class
        ),
    );
    same_layout(
        "struct ibv_ah_attr",
        &of!(
            IbvAhAttr,
            grh,
            dlid,
            sl,
            src_path_bits,
            static_rate,
            is_global,
            port_num
        ),
    );
    same_layout(
        "struct ibv_qp_attr",
        &of!(
            IbvQpAttr,
            qp_state,
            cur_qp_state,
            path_mtu,
            path_mig_state,
            qkey,
            rq_psn,
            sq_psn,
            dest_qp_num,
            qp_access_flags,
            cap,
            ah_attr,
            alt_ah_attr,
            pkey_index,
            alt_pkey_index,
            en_sqd_async_notify,
            sq_draining,
            max_rd_atomic,
            max_dest_rd_atomic,
            min_rnr_timer,
            port_num,
            timeout,
            retry_cnt,
            rnr_retry,
            alt_port_num,
            alt_timeout,
            rate_limit
        ),
    );
}

#[test]
fn qp_state_machine_from_c() {
    let code = r#"
int main(void) {
    struct ibv_context *ctx = open_first();
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
    struct ibv_qp_init_attr ia;
    memset(&ia, 0, sizeof ia);
    ia.send_cq = cq; ia.recv_cq = cq; ia.qp_type = IBV_QPT_RC; ia.sq_sig_all = 1;
    ia.cap.max_send_wr = 4; ia.cap.max_recv_wr = 4; ia.cap.max_send_sge = 1; ia.cap.max_recv_sge = 1;
    struct ibv_qp *a = ibv_create_qp(pd, &ia), *b = ibv_create_qp(pd, &ia);
    CHECK(a && b, 1);
    union ibv_gid gid;
    CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0, 2);
    int rc = to_rts(a, b->qp_num, &gid);
    CHECK(rc == 0, rc);
    rc = to_rts(b, a->qp_num, &gid);
    CHECK(rc == 0, rc);
    CHECK(a->state == IBV_QPS_RTS, 3);
    struct ibv_qp_attr q;
    struct ibv_qp_init_attr qi;
    CHECK(ibv_query_qp(a, &q, IBV_QP_STATE, &qi) == 0, 4);
    CHECK(q.qp_state == IBV_QPS_RTS && q.dest_qp_num == b->qp_num && q.path_mtu == IBV_MTU_1024, 5);
    CHECK(q.sq_psn == 7 && q.timeout == 14 && q.ah_attr.is_global && !memcmp(&q.ah_attr.grh.dgid, &gid, 16), 6);
    CHECK(qi.send_cq == cq && qi.qp_type == IBV_QPT_RC && qi.sq_sig_all == 1 && qi.cap.max_send_wr >= 4, 7);
    struct ibv_qp_attr bad;
    memset(&bad, 0, sizeof bad);
    /* RTS -> INIT is no transition. */
    bad.qp_state = IBV_QPS_INIT;
    CHECK(ibv_modify_qp(a, &bad, IBV_QP_STATE) == EINVAL && a->state == IBV_QPS_RTS, 8);
    bad.qp_state = 99;
    CHECK(ibv_modify_qp(a, &bad, IBV_QP_STATE) == EINVAL, 9);
    CHECK(ibv_modify_qp(a, &bad, IBV_QP_ALT_PATH) == EOPNOTSUPP, 10);
    CHECK(ibv_modify_qp(NULL, &bad, IBV_QP_STATE) == EINVAL && ibv_query_qp(a, NULL, 0, &qi) == EINVAL, 11);
    bad.qp_state = IBV_QPS_ERR;
    CHECK(ibv_modify_qp(a, &bad, IBV_QP_STATE) == 0 && a->state == IBV_QPS_ERR, 12);
    CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0, 13);
    printf("ok\n");
    return 0;
}
"#;
    let out = c_ok(code, None);
    assert_eq!(out.trim(), "ok");
}

#[test]
fn work_requests_are_laid_out_as_the_header() {
    use rnic_ibverbs::abi::{IbvRecvWr, IbvSendWr, IbvSge, WrAtomic, WrRdma, WrUd};
    let wr = offset_of!(IbvSendWr, wr);
    same_layout(
        "struct ibv_send_wr",
        &[
            ("size", size_of::<IbvSendWr>()),
            ("wr_id", offset_of!(IbvSendWr, wr_id)),
            ("next", offset_of!(IbvSendWr, next)),
            ("sg_list", offset_of!(IbvSendWr, sg_list)),
            ("num_sge", offset_of!(IbvSendWr, num_sge)),
            ("opcode", offset_of!(IbvSendWr, opcode)),
            ("send_flags", offset_of!(IbvSendWr, send_flags)),
            ("imm_data", offset_of!(IbvSendWr, imm_data)),
            ("wr.rdma.remote_addr", wr + offset_of!(WrRdma, remote_addr)),
            ("wr.rdma.rkey", wr + offset_of!(WrRdma, rkey)),
            (
                "wr.atomic.compare_add",
                wr + offset_of!(WrAtomic, compare_add),
            ),
            ("wr.atomic.swap", wr + offset_of!(WrAtomic, swap)),
            ("wr.atomic.rkey", wr + offset_of!(WrAtomic, rkey)),
            ("wr.ud.ah", wr + offset_of!(WrUd, ah)),
            ("wr.ud.remote_qkey", wr + offset_of!(WrUd, remote_qkey)),
            ("qp_type", offset_of!(IbvSendWr, qp_type)),
            ("bind_mw", offset_of!(IbvSendWr, ext)),
        ],
    );
    same_layout(
        "struct ibv_recv_wr",
        &[
            ("size", size_of::<IbvRecvWr>()),
            ("wr_id", offset_of!(IbvRecvWr, wr_id)),
            ("next", offset_of!(IbvRecvWr, next)),
            ("sg_list", offset_of!(IbvRecvWr, sg_list)),
            ("num_sge", offset_of!(IbvRecvWr, num_sge)),
        ],
    );
    same_layout(
        "struct ibv_sge",
        &[
            ("size", size_of::<IbvSge>()),
            ("addr", offset_of!(IbvSge, addr)),
            ("length", offset_of!(IbvSge, length)),
            ("lkey", offset_of!(IbvSge, lkey)),
        ],
    );
    let ops = offset_of!(IbvContext, ops);
    use rnic_ibverbs::abi::{OP_POST_RECV, OP_POST_SEND};
    same_layout(
        "struct ibv_context",
        &[
            ("size", size_of::<IbvContext>()),
            ("ops.post_send", ops + 8 * OP_POST_SEND),
            ("ops.post_recv", ops + 8 * OP_POST_RECV),
        ],
    );
}

#[test]
fn data_path_from_c() {
    let code = r#"
int main(void) {
    struct ibv_context *ctx = open_first();
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_cq *ca = ibv_create_cq(ctx, 16, NULL, NULL, 0), *cb = ibv_create_cq(ctx, 16, NULL, NULL, 0);
    struct ibv_qp *a = rc_qp(pd, ca, 8, 2, 64), *b = rc_qp(pd, cb, 8, 2, 64);
    CHECK(a && b, 1);
    union ibv_gid gid;
    ibv_query_gid(ctx, 1, 0, &gid);
    CHECK(!to_rts(a, b->qp_num, &gid) && !to_rts(b, a->qp_num, &gid), 2);
    static char src[4096], dst[4096];
    struct ibv_mr *ms = ibv_reg_mr(pd, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_mr *md = ibv_reg_mr(pd, dst, sizeof dst, IBV_ACCESS_LOCAL_WRITE |
        IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
    CHECK(ms && md, 3);
    struct ibv_wc wc;
    /* SEND of two SGEs into a receive of one. */
    for (int i = 0; i < 300; i++) src[i] = (char)i;
    struct ibv_sge rs = { (uintptr_t)dst, 1000, md->lkey };
    struct ibv_recv_wr rw = { .wr_id = 11, .sg_list = &rs, .num_sge = 1 }, *bad_r;
    CHECK(ibv_post_recv(b, &rw, &bad_r) == 0, 4);
    struct ibv_sge ss[2] = { { (uintptr_t)src, 100, ms->lkey }, { (uintptr_t)src + 100, 200, ms->lkey } };
    struct ibv_send_wr sw, *bad;
    memset(&sw, 0, sizeof sw);
    sw.wr_id = 21; sw.sg_list = ss; sw.num_sge = 2; sw.opcode = IBV_WR_SEND; sw.send_flags = IBV_SEND_SIGNALED;
    CHECK(ibv_post_send(a, &sw, &bad) == 0, 5);
    CHECK(one(ca, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND && wc.wr_id == 21, 6);
    CHECK(one(cb, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RECV && wc.wr_id == 11, 7);
    CHECK(wc.byte_len == 300 && wc.qp_num == b->qp_num && !memcmp(dst, src, 300), 8);
    /* Inline RDMA WRITE with immediate. */
    char msg[] = "inline bytes";
    struct ibv_sge is = { (uintptr_t)msg, sizeof msg, 0 };
    CHECK(ibv_post_recv(b, &rw, &bad_r) == 0, 9);
    memset(&sw, 0, sizeof sw);
    sw.wr_id = 22; sw.sg_list = &is; sw.num_sge = 1; sw.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;
    sw.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE; sw.imm_data = htobe32(0x12345678);
    sw.wr.rdma.remote_addr = (uintptr_t)dst + 2000; sw.wr.rdma.rkey = md->rkey;
    CHECK(ibv_post_send(a, &sw, &bad) == 0, 10);
    CHECK(one(ca, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_WRITE, 11);
    CHECK(one(cb, &wc) == 1 && wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM && (wc.wc_flags & IBV_WC_WITH_IMM), 12);
    CHECK(be32toh(wc.imm_data) == 0x12345678 && !strcmp(dst + 2000, msg), 13);
    /* RDMA READ back, then FETCH_AND_ADD. */
    struct ibv_sge back = { (uintptr_t)src + 1000, sizeof msg, ms->lkey };
    memset(&sw, 0, sizeof sw);
    sw.wr_id = 23; sw.sg_list = &back; sw.num_sge = 1; sw.opcode = IBV_WR_RDMA_READ; sw.send_flags = IBV_SEND_SIGNALED;
    sw.wr.rdma.remote_addr = (uintptr_t)dst + 2000; sw.wr.rdma.rkey = md->rkey;
    CHECK(ibv_post_send(a, &sw, &bad) == 0, 14);
    CHECK(one(ca, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_READ, 15);
    CHECK(!strcmp(src + 1000, msg), 16);
    unsigned long long *counter = (unsigned long long *)(dst + 3000);
    *counter = 40;
    struct ibv_sge old = { (uintptr_t)src + 2048, 8, ms->lkey };
    memset(&sw, 0, sizeof sw);
    sw.wr_id = 24; sw.sg_list = &old; sw.num_sge = 1; sw.opcode = IBV_WR_ATOMIC_FETCH_AND_ADD;
    sw.send_flags = IBV_SEND_SIGNALED; sw.wr.atomic.remote_addr = (uintptr_t)counter;
    sw.wr.atomic.rkey = md->rkey; sw.wr.atomic.compare_add = 2;
    CHECK(ibv_post_send(a, &sw, &bad) == 0, 17);
    CHECK(one(ca, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_FETCH_ADD, 18);
    CHECK(*(unsigned long long *)(src + 2048) == 40 && *counter == 42, 19);
    /* A list whose second request is bad: the first is posted, bad_wr names the second. */
    struct ibv_send_wr two[2];
    memset(two, 0, sizeof two);
    two[0].wr_id = 25; two[0].sg_list = &is; two[0].num_sge = 1; two[0].opcode = IBV_WR_RDMA_WRITE;
    two[0].send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
    two[0].wr.rdma.remote_addr = (uintptr_t)dst; two[0].wr.rdma.rkey = md->rkey;
    two[0].next = &two[1];
    two[1] = two[0]; two[1].next = NULL; two[1].opcode = 42;
    CHECK(ibv_post_send(a, two, &bad) == EINVAL && bad == &two[1], 20);
    CHECK(one(ca, &wc) == 1 && wc.wr_id == 25 && wc.status == IBV_WC_SUCCESS, 21);
    /* A remote key that is wrong: an error completion. */
    memset(&sw, 0, sizeof sw);
    sw.wr_id = 26; sw.sg_list = &is; sw.num_sge = 1; sw.opcode = IBV_WR_RDMA_WRITE;
    sw.send_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
    sw.wr.rdma.remote_addr = (uintptr_t)dst; sw.wr.rdma.rkey = md->rkey ^ 0x100;
    CHECK(ibv_post_send(a, &sw, &bad) == 0, 22);
    CHECK(one(ca, &wc) == 1 && wc.wr_id == 26 && wc.status == IBV_WC_REM_ACCESS_ERR, 23);
    printf("%s\n", ibv_wc_status_str(wc.status));
    return 0;
}
"#;
    let out = c_ok(code, None);
    assert_eq!(out.trim(), "remote access error");
}

#[test]
fn qp_from_c() {
    let code = r#"
int main(void) {
    struct ibv_context *ctx = open_first();
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
    CHECK(ctx && pd && cq, 1);
    int tag;
    struct ibv_qp_init_attr a;
    memset(&a, 0, sizeof a);
    a.qp_context = &tag;
    a.send_cq = cq;
    a.recv_cq = cq;
    a.cap.max_send_wr = 10;
    a.cap.max_recv_wr = 20;
    a.cap.max_send_sge = 1;
    a.cap.max_recv_sge = 1;
    a.cap.max_inline_data = 32;
    a.qp_type = IBV_QPT_RC;
    struct ibv_qp *qp = ibv_create_qp(pd, &a);
    CHECK(qp, 2);
    CHECK(qp->qp_num != 0 && qp->state == IBV_QPS_RESET && qp->qp_type == IBV_QPT_RC, 3);
    CHECK(qp->pd == pd && qp->context == ctx && qp->send_cq == cq && qp->qp_context == &tag, 4);
    CHECK(a.cap.max_send_wr >= 10 && a.cap.max_recv_wr >= 20 && a.cap.max_inline_data >= 32, 5);
    CHECK(ibv_destroy_cq(cq) == EBUSY && ibv_dealloc_pd(pd) == EBUSY, 6);
    a.qp_type = IBV_QPT_UD;
    struct ibv_qp *ud = ibv_create_qp(pd, &a);
    CHECK(ud && ud->qp_type == IBV_QPT_UD && ud->qp_num != qp->qp_num, 7);
    a.qp_type = IBV_QPT_XRC_SEND;
    CHECK(!ibv_create_qp(pd, &a) && errno == EOPNOTSUPP, 8);
    a.qp_type = 7;
    CHECK(!ibv_create_qp(pd, &a) && errno == EINVAL, 9);
    CHECK(!ibv_create_qp(pd, NULL) && errno == EINVAL, 10);
    a.qp_type = IBV_QPT_RC;
    a.send_cq = (struct ibv_cq *)&tag;
    CHECK(!ibv_create_qp(pd, &a) && errno == EINVAL, 11);
    a.send_cq = cq;
    a.cap.max_send_wr = 1 << 30;
    CHECK(!ibv_create_qp(pd, &a) && errno == EINVAL, 12);
    CHECK(ibv_destroy_qp(qp) == 0 && ibv_destroy_qp(ud) == 0, 13);
    CHECK(ibv_destroy_qp(qp) == EINVAL, 14);
    CHECK(ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0, 15);
    CHECK(ibv_close_device(ctx) == 0, 16);
    printf("ok\n");
    return 0;
}
"#;
    let out = c_ok(code, None);
    assert_eq!(out.trim(), "ok");
}

#[test]
fn ibv_devinfo_describes_the_device() {
    let o = run(
        "ibv_devinfo",
        &["-v"],
        Some("name=rnic0,mac=02:11:22:33:44:55,ipv4=10.1.2.3"),
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    let has = |want: &str| {
        assert!(
            out.lines()
                .any(|l| l.split_whitespace().collect::<Vec<_>>().join(" ") == want),
            "`{want}` missing:\n{out}"
        )
    };
    has("hca_id: rnic0");
    has("transport: InfiniBand (0)");
    has("node_guid: 0011:22ff:fe33:4455");
    has("phys_port_cnt: 1");
    has("state: PORT_ACTIVE (4)");
    has("active_mtu: 4096 (5)");
    has("link_layer: Ethernet");
    has("phys_state: LINK_UP (5)");
    has("GID[ 0]: ::ffff:10.1.2.3, RoCE v2");
    has("GID[ 1]: fe80::11:22ff:fe33:4455, RoCE v2");
    assert!(!err.contains("Failed"), "{err}");
}

#[test]
fn open_query_and_close_from_c() {
    let code = r#"
int main(void) {
    int n;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list || n != 2) return 10;
    struct ibv_context *ctx = ibv_open_device(list[1]);
    if (!ctx) { perror("ibv_open_device"); return 11; }
    if (ctx->device != list[1]) return 12;
    struct ibv_device_attr a;
    int rc = ibv_query_device(ctx, &a);
    if (rc) { printf("query %d\n", rc); return 13; }
    printf("fw %s guid %016llx ports %u max_qp %d max_cqe %d max_sge %d atomic %d\n",
           a.fw_ver, (unsigned long long)be64toh(a.node_guid), a.phys_port_cnt,
           a.max_qp, a.max_cqe, a.max_sge, a.atomic_cap);
    if (ibv_query_device(NULL, &a) != EINVAL) return 14;
    if (ibv_query_device(ctx, NULL) != EINVAL) return 15;
    if (ibv_close_device(ctx)) return 16;
    if (ibv_close_device(ctx) != -1 || errno != EINVAL) return 17;
    if (ibv_open_device((struct ibv_device *)&a) || errno != EINVAL) return 18;
    ibv_free_device_list(list);
    return 0;
}
"#;
    let out = c_ok(code, Some("name=a;name=b,mac=02:11:22:33:44:55"));
    let words: Vec<&str> = out.split_whitespace().collect();
    assert_eq!(words[2..4], ["guid", "001122fffe334455"], "{out}");
    assert_eq!(words[4..6], ["ports", "1"], "{out}");
    let num = |k: &str| -> i64 {
        let i = words.iter().position(|w| *w == k).unwrap();
        words[i + 1].parse().unwrap()
    };
    assert!(
        num("max_qp") > 0 && num("max_cqe") > 0 && num("max_sge") > 0,
        "{out}"
    );
    assert_eq!(num("atomic"), 1, "IBV_ATOMIC_HCA: {out}");
}

#[test]
fn ibv_devices_lists_the_configured_devices() {
    let o = run(
        "ibv_devices",
        &[],
        Some("name=rnic0,mac=02:11:22:33:44:55;name=second"),
    );
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    let rows: Vec<Vec<&str>> = out
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|w| w.len() == 2 && w[1].bytes().all(|b| b.is_ascii_hexdigit()))
        .collect();
    assert_eq!(
        rows,
        [
            vec!["rnic0", "001122fffe334455"],
            vec!["second", "000000fffe000002"]
        ],
        "{out}"
    );
    // Without a configuration: one device on a loopback wire.
    let (out, _) = text(&run("ibv_devices", &[], None));
    assert!(
        out.contains("rnic0") && out.contains("000000fffe000001"),
        "{out}"
    );
}

#[test]
fn devices_from_a_file() {
    let path = std::env::temp_dir().join(format!("rnic-devices-{}", std::process::id()));
    std::fs::write(
        &path,
        "# two NICs\nname=left,mac=02:00:00:00:00:0a  # the first\n\nname=right,wire=loopback\n",
    )
    .unwrap();
    let o = Command::new("ibv_devices")
        .env("LD_LIBRARY_PATH", lib_dir())
        .env_remove("RNIC_DEVICES")
        .env("RNIC_DEVICES_FILE", &path)
        .output()
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    let (out, err) = text(&o);
    assert!(o.status.success(), "{err}");
    assert!(
        out.contains("left") && out.contains("000000fffe00000a"),
        "{out}"
    );
    assert!(
        out.contains("right") && out.contains("000000fffe000002"),
        "{out}"
    );
}

#[test]
fn a_bad_configuration_fails_as_libibverbs_fails() {
    let o = run("ibv_devices", &[], Some("mac=02:00"));
    let (out, err) = text(&o);
    assert!(!o.status.success(), "{out}");
    // The reason, then ibv_devices' own report of errno EINVAL.
    assert!(err.contains("rnic libibverbs: mac `02:00`"), "{err}");
    assert!(err.contains("Invalid argument"), "{err}");
}

#[test]
fn ibv_rc_pingpong_between_two_processes() {
    pingpong("ibv_rc_pingpong", &[]);
}

#[test]
fn ibv_uc_pingpong_between_two_processes() {
    pingpong("ibv_uc_pingpong", &[]);
}

#[test]
fn ibv_ud_pingpong_between_two_processes() {
    pingpong("ibv_ud_pingpong", &[]);
}

#[test]
fn ibv_rc_pingpong_with_completion_events() {
    pingpong("ibv_rc_pingpong", &["-e"]);
}

#[test]
fn ibv_ud_pingpong_with_completion_events() {
    pingpong("ibv_ud_pingpong", &["-e"]);
}

#[test]
fn comp_channel_is_laid_out_as_the_header() {
    use rnic_ibverbs::abi::IbvCompChannel;
    same_layout(
        "struct ibv_comp_channel",
        &[
            ("size", size_of::<IbvCompChannel>()),
            ("context", offset_of!(IbvCompChannel, context)),
            ("fd", offset_of!(IbvCompChannel, fd)),
            ("refcnt", offset_of!(IbvCompChannel, refcnt)),
        ],
    );
}

#[test]
fn ibv_srq_pingpong_between_two_processes() {
    pingpong("ibv_srq_pingpong", &[]);
}

#[test]
fn srq_is_laid_out_as_the_header() {
    use rnic_ibverbs::abi::{IbvSrq, IbvSrqAttr, IbvSrqInitAttr, OP_POST_SRQ_RECV};
    same_layout(
        "struct ibv_srq",
        &[
            ("size", size_of::<IbvSrq>()),
            ("context", offset_of!(IbvSrq, context)),
            ("srq_context", offset_of!(IbvSrq, srq_context)),
            ("pd", offset_of!(IbvSrq, pd)),
            ("handle", offset_of!(IbvSrq, handle)),
            ("mutex", offset_of!(IbvSrq, mutex)),
            ("cond", offset_of!(IbvSrq, cond)),
            ("events_completed", offset_of!(IbvSrq, events_completed)),
        ],
    );
    same_layout(
        "struct ibv_srq_attr",
        &[
            ("size", size_of::<IbvSrqAttr>()),
            ("max_wr", offset_of!(IbvSrqAttr, max_wr)),
            ("max_sge", offset_of!(IbvSrqAttr, max_sge)),
            ("srq_limit", offset_of!(IbvSrqAttr, srq_limit)),
        ],
    );
    same_layout(
        "struct ibv_srq_init_attr",
        &[
            ("size", size_of::<IbvSrqInitAttr>()),
            ("srq_context", offset_of!(IbvSrqInitAttr, srq_context)),
            ("attr", offset_of!(IbvSrqInitAttr, attr)),
        ],
    );
    let ops = offset_of!(IbvContext, ops);
    same_layout(
        "struct ibv_context",
        &[
            ("size", size_of::<IbvContext>()),
            ("ops.post_srq_recv", ops + 8 * OP_POST_SRQ_RECV),
        ],
    );
}

#[test]
fn ah_is_laid_out_as_the_header() {
    use rnic_ibverbs::abi::IbvAh;
    same_layout(
        "struct ibv_ah",
        &[
            ("size", size_of::<IbvAh>()),
            ("context", offset_of!(IbvAh, context)),
            ("pd", offset_of!(IbvAh, pd)),
            ("handle", offset_of!(IbvAh, handle)),
        ],
    );
}

/// `program` (one of rdma-core's pingpongs), with `extra` options, as
/// server and client: each exits 0 and reports the 100 iterations of
/// 2048 bytes both ways.
fn pingpong(program: &str, extra: &[&str]) {
    pingpong_sized(program, extra, 2048, 100);
}

/// [`pingpong`] with `iters` iterations of `size` bytes.
fn pingpong_sized(program: &str, extra: &[&str], size: u32, iters: u32) {
    let (s, n) = (size.to_string(), iters.to_string());
    let args = [extra, &["-g", "0", "-n", &n, "-s", &s]].concat();
    let (server, client) = two_processes(program, &args);
    for (who, o) in [("client", &client), ("server", &server)] {
        let (out, err) = text(o);
        assert!(o.status.success(), "{program} {who}: {out}{err}");
        assert!(
            out.contains(&format!("{iters} iters in")),
            "{program} {who}: {out}"
        );
        // Both ways.
        let bytes = 2 * u64::from(iters) * u64::from(size);
        assert!(out.contains(&format!("{bytes} bytes in")), "{who}: {out}");
    }
}

#[test]
fn ibv_rc_pingpong_sizes_and_mtus() {
    for (size, mtu, events) in [
        (1, "256", false),
        (4096, "4096", true),
        (100_000, "1024", false),
    ] {
        let mut extra = vec!["-m", mtu];
        if events {
            extra.push("-e");
        }
        pingpong_sized("ibv_rc_pingpong", &extra, size, 20);
    }
}

//! The extended verbs of the drop-in libibverbs.so.1: `struct
//! verbs_context` and the structures its operations take, against
//! rdma-core 44's header, and C programs calling the header's extended
//! helpers (`ibv_query_device_ex`, `ibv_query_port`, `ibv_create_cq_ex`
//! with `ibv_start_poll`, `ibv_create_qp_ex` with `ibv_wr_*`,
//! `ibv_create_srq_ex`, `ibv_get_srq_num`).

mod common;

use std::mem::offset_of;

use common::{c_ok, same_layout};
use rnic_ibverbs::abi::*;

#[test]
fn verbs_context_is_laid_out_as_the_header() {
    // Every field; the program's pointer is `context`'s.
    same_layout(
        "struct verbs_context",
        &[
            ("size", size_of::<VerbsContext>()),
            ("query_port", offset_of!(VerbsContext, query_port)),
            ("advise_mr", offset_of!(VerbsContext, advise_mr)),
            ("alloc_null_mr", offset_of!(VerbsContext, alloc_null_mr)),
            ("read_counters", offset_of!(VerbsContext, read_counters)),
            (
                "attach_counters_point_flow",
                offset_of!(VerbsContext, attach_counters_point_flow),
            ),
            ("create_counters", offset_of!(VerbsContext, create_counters)),
            (
                "destroy_counters",
                offset_of!(VerbsContext, destroy_counters),
            ),
            ("reg_dm_mr", offset_of!(VerbsContext, reg_dm_mr)),
            ("alloc_dm", offset_of!(VerbsContext, alloc_dm)),
            ("free_dm", offset_of!(VerbsContext, free_dm)),
            (
                "modify_flow_action_esp",
                offset_of!(VerbsContext, modify_flow_action_esp),
            ),
            (
                "destroy_flow_action",
                offset_of!(VerbsContext, destroy_flow_action),
            ),
            (
                "create_flow_action_esp",
                offset_of!(VerbsContext, create_flow_action_esp),
            ),
            (
                "modify_qp_rate_limit",
                offset_of!(VerbsContext, modify_qp_rate_limit),
            ),
            (
                "alloc_parent_domain",
                offset_of!(VerbsContext, alloc_parent_domain),
            ),
            ("dealloc_td", offset_of!(VerbsContext, dealloc_td)),
            ("alloc_td", offset_of!(VerbsContext, alloc_td)),
            ("modify_cq", offset_of!(VerbsContext, modify_cq)),
            ("post_srq_ops", offset_of!(VerbsContext, post_srq_ops)),
            (
                "destroy_rwq_ind_table",
                offset_of!(VerbsContext, destroy_rwq_ind_table),
            ),
            (
                "create_rwq_ind_table",
                offset_of!(VerbsContext, create_rwq_ind_table),
            ),
            ("destroy_wq", offset_of!(VerbsContext, destroy_wq)),
            ("modify_wq", offset_of!(VerbsContext, modify_wq)),
            ("create_wq", offset_of!(VerbsContext, create_wq)),
            ("query_rt_values", offset_of!(VerbsContext, query_rt_values)),
            ("create_cq_ex", offset_of!(VerbsContext, create_cq_ex)),
            ("priv", offset_of!(VerbsContext, priv_)),
            ("query_device_ex", offset_of!(VerbsContext, query_device_ex)),
            (
                "ibv_destroy_flow",
                offset_of!(VerbsContext, ibv_destroy_flow),
            ),
            (
                "ABI_placeholder2",
                offset_of!(VerbsContext, abi_placeholder2),
            ),
            ("ibv_create_flow", offset_of!(VerbsContext, ibv_create_flow)),
            (
                "ABI_placeholder1",
                offset_of!(VerbsContext, abi_placeholder1),
            ),
            ("open_qp", offset_of!(VerbsContext, open_qp)),
            ("create_qp_ex", offset_of!(VerbsContext, create_qp_ex)),
            ("get_srq_num", offset_of!(VerbsContext, get_srq_num)),
            ("create_srq_ex", offset_of!(VerbsContext, create_srq_ex)),
            ("open_xrcd", offset_of!(VerbsContext, open_xrcd)),
            ("close_xrcd", offset_of!(VerbsContext, close_xrcd)),
            (
                "_ABI_placeholder3",
                offset_of!(VerbsContext, abi_placeholder3),
            ),
            ("sz", offset_of!(VerbsContext, sz)),
            ("context", offset_of!(VerbsContext, context)),
        ],
    );
    let ops = offset_of!(IbvContext, ops);
    let slot = size_of::<*mut ()>();
    same_layout(
        "struct ibv_context",
        &[
            ("size", size_of::<IbvContext>()),
            ("ops.alloc_mw", ops + OP_ALLOC_MW * slot),
            ("ops.bind_mw", ops + OP_BIND_MW * slot),
            ("ops.dealloc_mw", ops + OP_DEALLOC_MW * slot),
        ],
    );
}

#[test]
fn extended_structures_are_laid_out_as_the_header() {
    same_layout(
        "struct ibv_device_attr_ex",
        &[
            ("size", size_of::<IbvDeviceAttrEx>()),
            ("comp_mask", offset_of!(IbvDeviceAttrEx, comp_mask)),
            ("odp_caps", offset_of!(IbvDeviceAttrEx, odp_caps)),
            (
                "odp_caps.per_transport_caps.ud_odp_caps",
                offset_of!(IbvDeviceAttrEx, odp_caps) + offset_of!(IbvOdpCaps, ud_odp_caps),
            ),
            (
                "completion_timestamp_mask",
                offset_of!(IbvDeviceAttrEx, completion_timestamp_mask),
            ),
            (
                "device_cap_flags_ex",
                offset_of!(IbvDeviceAttrEx, device_cap_flags_ex),
            ),
            ("tso_caps", offset_of!(IbvDeviceAttrEx, tso_caps)),
            ("rss_caps", offset_of!(IbvDeviceAttrEx, rss_caps)),
            (
                "rss_caps.rx_hash_function",
                offset_of!(IbvDeviceAttrEx, rss_caps) + offset_of!(IbvRssCaps, rx_hash_function),
            ),
            (
                "max_wq_type_rq",
                offset_of!(IbvDeviceAttrEx, max_wq_type_rq),
            ),
            (
                "packet_pacing_caps",
                offset_of!(IbvDeviceAttrEx, packet_pacing_caps),
            ),
            (
                "raw_packet_caps",
                offset_of!(IbvDeviceAttrEx, raw_packet_caps),
            ),
            ("tm_caps", offset_of!(IbvDeviceAttrEx, tm_caps)),
            ("cq_mod_caps", offset_of!(IbvDeviceAttrEx, cq_mod_caps)),
            ("max_dm_size", offset_of!(IbvDeviceAttrEx, max_dm_size)),
            (
                "pci_atomic_caps",
                offset_of!(IbvDeviceAttrEx, pci_atomic_caps),
            ),
            ("xrc_odp_caps", offset_of!(IbvDeviceAttrEx, xrc_odp_caps)),
            (
                "phys_port_cnt_ex",
                offset_of!(IbvDeviceAttrEx, phys_port_cnt_ex),
            ),
        ],
    );
    same_layout(
        "struct ibv_cq_ex",
        &[
            ("size", size_of::<IbvCqEx>()),
            (
                "async_events_completed",
                offset_of!(IbvCqEx, cq) + offset_of!(IbvCq, async_events_completed),
            ),
            ("comp_mask", offset_of!(IbvCqEx, comp_mask)),
            ("status", offset_of!(IbvCqEx, status)),
            ("wr_id", offset_of!(IbvCqEx, wr_id)),
            ("start_poll", offset_of!(IbvCqEx, start_poll)),
            ("next_poll", offset_of!(IbvCqEx, next_poll)),
            ("end_poll", offset_of!(IbvCqEx, end_poll)),
            ("read_opcode", offset_of!(IbvCqEx, read_opcode)),
            ("read_vendor_err", offset_of!(IbvCqEx, read_vendor_err)),
            ("read_byte_len", offset_of!(IbvCqEx, read_byte_len)),
            ("read_imm_data", offset_of!(IbvCqEx, read_imm_data)),
            ("read_qp_num", offset_of!(IbvCqEx, read_qp_num)),
            ("read_src_qp", offset_of!(IbvCqEx, read_src_qp)),
            ("read_wc_flags", offset_of!(IbvCqEx, read_wc_flags)),
            ("read_slid", offset_of!(IbvCqEx, read_slid)),
            ("read_sl", offset_of!(IbvCqEx, read_sl)),
            (
                "read_dlid_path_bits",
                offset_of!(IbvCqEx, read_dlid_path_bits),
            ),
            (
                "read_completion_ts",
                offset_of!(IbvCqEx, read_completion_ts),
            ),
            ("read_cvlan", offset_of!(IbvCqEx, read_cvlan)),
            ("read_flow_tag", offset_of!(IbvCqEx, read_flow_tag)),
            ("read_tm_info", offset_of!(IbvCqEx, read_tm_info)),
            (
                "read_completion_wallclock_ns",
                offset_of!(IbvCqEx, read_completion_wallclock_ns),
            ),
        ],
    );
    same_layout(
        "struct ibv_cq_init_attr_ex",
        &[
            ("size", size_of::<IbvCqInitAttrEx>()),
            ("cqe", offset_of!(IbvCqInitAttrEx, cqe)),
            ("cq_context", offset_of!(IbvCqInitAttrEx, cq_context)),
            ("channel", offset_of!(IbvCqInitAttrEx, channel)),
            ("comp_vector", offset_of!(IbvCqInitAttrEx, comp_vector)),
            ("wc_flags", offset_of!(IbvCqInitAttrEx, wc_flags)),
            ("comp_mask", offset_of!(IbvCqInitAttrEx, comp_mask)),
            ("flags", offset_of!(IbvCqInitAttrEx, flags)),
            ("parent_domain", offset_of!(IbvCqInitAttrEx, parent_domain)),
        ],
    );
    same_layout(
        "struct ibv_qp_ex",
        &[
            ("size", size_of::<IbvQpEx>()),
            ("comp_mask", offset_of!(IbvQpEx, comp_mask)),
            ("wr_id", offset_of!(IbvQpEx, wr_id)),
            ("wr_flags", offset_of!(IbvQpEx, wr_flags)),
            ("wr_atomic_cmp_swp", offset_of!(IbvQpEx, wr_atomic_cmp_swp)),
            (
                "wr_atomic_fetch_add",
                offset_of!(IbvQpEx, wr_atomic_fetch_add),
            ),
            ("wr_bind_mw", offset_of!(IbvQpEx, wr_bind_mw)),
            ("wr_local_inv", offset_of!(IbvQpEx, wr_local_inv)),
            ("wr_rdma_read", offset_of!(IbvQpEx, wr_rdma_read)),
            ("wr_rdma_write", offset_of!(IbvQpEx, wr_rdma_write)),
            ("wr_rdma_write_imm", offset_of!(IbvQpEx, wr_rdma_write_imm)),
            ("wr_send", offset_of!(IbvQpEx, wr_send)),
            ("wr_send_imm", offset_of!(IbvQpEx, wr_send_imm)),
            ("wr_send_inv", offset_of!(IbvQpEx, wr_send_inv)),
            ("wr_send_tso", offset_of!(IbvQpEx, wr_send_tso)),
            ("wr_set_ud_addr", offset_of!(IbvQpEx, wr_set_ud_addr)),
            ("wr_set_xrc_srqn", offset_of!(IbvQpEx, wr_set_xrc_srqn)),
            (
                "wr_set_inline_data",
                offset_of!(IbvQpEx, wr_set_inline_data),
            ),
            (
                "wr_set_inline_data_list",
                offset_of!(IbvQpEx, wr_set_inline_data_list),
            ),
            ("wr_set_sge", offset_of!(IbvQpEx, wr_set_sge)),
            ("wr_set_sge_list", offset_of!(IbvQpEx, wr_set_sge_list)),
            ("wr_start", offset_of!(IbvQpEx, wr_start)),
            ("wr_complete", offset_of!(IbvQpEx, wr_complete)),
            ("wr_abort", offset_of!(IbvQpEx, wr_abort)),
            ("wr_atomic_write", offset_of!(IbvQpEx, wr_atomic_write)),
        ],
    );
    same_layout(
        "struct ibv_qp_init_attr_ex",
        &[
            ("size", size_of::<IbvQpInitAttrEx>()),
            ("send_cq", offset_of!(IbvQpInitAttrEx, send_cq)),
            ("recv_cq", offset_of!(IbvQpInitAttrEx, recv_cq)),
            ("srq", offset_of!(IbvQpInitAttrEx, srq)),
            ("cap", offset_of!(IbvQpInitAttrEx, cap)),
            ("qp_type", offset_of!(IbvQpInitAttrEx, qp_type)),
            ("sq_sig_all", offset_of!(IbvQpInitAttrEx, sq_sig_all)),
            ("comp_mask", offset_of!(IbvQpInitAttrEx, comp_mask)),
            ("pd", offset_of!(IbvQpInitAttrEx, pd)),
            ("xrcd", offset_of!(IbvQpInitAttrEx, xrcd)),
            ("create_flags", offset_of!(IbvQpInitAttrEx, create_flags)),
            (
                "max_tso_header",
                offset_of!(IbvQpInitAttrEx, max_tso_header),
            ),
            ("rwq_ind_tbl", offset_of!(IbvQpInitAttrEx, rwq_ind_tbl)),
            ("rx_hash_conf", offset_of!(IbvQpInitAttrEx, rx_hash_conf)),
            ("source_qpn", offset_of!(IbvQpInitAttrEx, source_qpn)),
            (
                "send_ops_flags",
                offset_of!(IbvQpInitAttrEx, send_ops_flags),
            ),
        ],
    );
    same_layout(
        "struct ibv_srq_init_attr_ex",
        &[
            ("size", size_of::<IbvSrqInitAttrEx>()),
            ("attr", offset_of!(IbvSrqInitAttrEx, attr)),
            ("comp_mask", offset_of!(IbvSrqInitAttrEx, comp_mask)),
            ("srq_type", offset_of!(IbvSrqInitAttrEx, srq_type)),
            ("pd", offset_of!(IbvSrqInitAttrEx, pd)),
            ("xrcd", offset_of!(IbvSrqInitAttrEx, xrcd)),
            ("cq", offset_of!(IbvSrqInitAttrEx, cq)),
            ("tm_cap", offset_of!(IbvSrqInitAttrEx, tm_cap)),
        ],
    );
    same_layout(
        "struct ibv_mw",
        &[
            ("size", size_of::<IbvMw>()),
            ("pd", offset_of!(IbvMw, pd)),
            ("rkey", offset_of!(IbvMw, rkey)),
            ("handle", offset_of!(IbvMw, handle)),
            ("type", offset_of!(IbvMw, mw_type)),
        ],
    );
    same_layout(
        "struct ibv_mw_bind",
        &[
            ("size", size_of::<IbvMwBind>()),
            ("send_flags", offset_of!(IbvMwBind, send_flags)),
            ("bind_info", offset_of!(IbvMwBind, bind_info)),
            (
                "bind_info.mw_access_flags",
                offset_of!(IbvMwBind, bind_info) + offset_of!(IbvMwBindInfo, mw_access_flags),
            ),
        ],
    );
    same_layout(
        "struct ibv_data_buf",
        &[
            ("size", size_of::<IbvDataBuf>()),
            ("length", offset_of!(IbvDataBuf, length)),
        ],
    );
}

#[test]
fn device_and_port_through_the_extended_helpers() {
    let code = r#"
int main(void) {
    struct ibv_context *ctx = open_first();
    CHECK(ctx, 1);
    struct ibv_device_attr a;
    struct ibv_device_attr_ex x;
    memset(&x, 0x5a, sizeof x);
    CHECK(ibv_query_device(ctx, &a) == 0 && ibv_query_device_ex(ctx, NULL, &x) == 0, 2);
    CHECK(!memcmp(&a, &x.orig_attr, sizeof a), 3);
    CHECK(x.phys_port_cnt_ex == 1 && x.device_cap_flags_ex == a.device_cap_flags, 4);
    CHECK(x.comp_mask == 0 && x.odp_caps.general_caps == 0 && x.max_dm_size == 0, 5);
    struct ibv_query_device_ex_input in = { .comp_mask = 1 };
    CHECK(ibv_query_device_ex(ctx, &in, &x) == EINVAL, 6);
    struct ibv_port_attr p;
    memset(&p, 0x5a, sizeof p);
    CHECK(ibv_query_port(ctx, 1, &p) == 0, 7);
    CHECK(p.state == IBV_PORT_ACTIVE && p.link_layer == IBV_LINK_LAYER_ETHERNET, 8);
    CHECK(p.flags == 0 && p.port_cap_flags2 == 0 && p.active_mtu == IBV_MTU_4096, 9);
    CHECK(ibv_query_port(ctx, 2, &p) != 0, 10);
    /* What the header routes elsewhere reports EOPNOTSUPP. */
    struct ibv_td_init_attr td = { 0 };
    CHECK(!ibv_alloc_td(ctx, &td) && errno == EOPNOTSUPP, 11);
    struct ibv_alloc_dm_attr dm = { .length = 64 };
    CHECK(!ibv_alloc_dm(ctx, &dm) && errno == EOPNOTSUPP, 12);
    printf("ports %u flags %#llx\n", x.phys_port_cnt_ex, (unsigned long long)x.device_cap_flags_ex);
    return 0;
}
"#;
    let out = c_ok(code, None);
    assert!(out.starts_with("ports 1 "), "{out}");
}

#[test]
fn cq_ex_and_the_work_request_interface() {
    let code = r#"
/* Every completion of `cq` through the extended interface: n of them, up
 * to 5 s; their wr_ids, opcodes and lengths into the arrays. */
static int poll_ex(struct ibv_cq_ex *cq, int n, uint64_t *ids, int *ops, unsigned *lens, int *sts) {
    int got = 0;
    time_t end = time(NULL) + 5;
    struct ibv_poll_cq_attr pa = { 0 };
    while (got < n && time(NULL) < end) {
        int rc = ibv_start_poll(cq, &pa);
        if (rc == ENOENT) continue;
        if (rc) return -rc;
        do {
            ids[got] = cq->wr_id; sts[got] = cq->status;
            ops[got] = ibv_wc_read_opcode(cq); lens[got] = ibv_wc_read_byte_len(cq);
            got++;
        } while (got < n && ibv_next_poll(cq) == 0);
        ibv_end_poll(cq);
    }
    return got;
}
int main(void) {
    struct ibv_context *ctx = open_first();
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_cq_init_attr_ex ca = { .cqe = 64, .wc_flags = IBV_WC_STANDARD_FLAGS };
    struct ibv_cq_ex *cx = ibv_create_cq_ex(ctx, &ca);
    CHECK(cx, 1);
    struct ibv_cq *cq = ibv_cq_ex_to_cq(cx);
    CHECK(cq->context == ctx && cq->cqe >= 64, 2);
    ca.wc_flags = IBV_WC_EX_WITH_COMPLETION_TIMESTAMP;
    CHECK(!ibv_create_cq_ex(ctx, &ca) && errno == EOPNOTSUPP, 3);
    ca.wc_flags = 0; ca.comp_mask = IBV_CQ_INIT_ATTR_MASK_FLAGS; ca.flags = IBV_CREATE_CQ_ATTR_IGNORE_OVERRUN;
    CHECK(!ibv_create_cq_ex(ctx, &ca) && errno == EOPNOTSUPP, 4);
    struct ibv_qp_init_attr_ex qa;
    memset(&qa, 0, sizeof qa);
    qa.qp_type = IBV_QPT_RC; qa.send_cq = cq; qa.recv_cq = cq;
    qa.cap.max_send_wr = 16; qa.cap.max_recv_wr = 16; qa.cap.max_send_sge = 2; qa.cap.max_recv_sge = 1;
    qa.cap.max_inline_data = 64;
    qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS; qa.pd = pd;
    qa.send_ops_flags = IBV_QP_EX_WITH_RDMA_WRITE | IBV_QP_EX_WITH_SEND_WITH_IMM |
        IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD | IBV_QP_EX_WITH_RDMA_READ;
    struct ibv_qp *a = ibv_create_qp_ex(ctx, &qa);
    qa.comp_mask = IBV_QP_INIT_ATTR_PD;
    struct ibv_qp *b = ibv_create_qp_ex(ctx, &qa);
    CHECK(a && b && qa.cap.max_inline_data >= 64, 5);
    struct ibv_qp_ex *ax = ibv_qp_to_qp_ex(a);
    CHECK(ax && (void *)ax == (void *)a && !ibv_qp_to_qp_ex(b), 6);
    qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    qa.send_ops_flags = IBV_QP_EX_WITH_TSO;
    CHECK(!ibv_create_qp_ex(ctx, &qa) && errno == EOPNOTSUPP, 7);
    qa.comp_mask = IBV_QP_INIT_ATTR_SEND_OPS_FLAGS;
    CHECK(!ibv_create_qp_ex(ctx, &qa) && errno == EINVAL, 8);
    union ibv_gid gid;
    ibv_query_gid(ctx, 1, 0, &gid);
    CHECK(!to_rts(a, b->qp_num, &gid) && !to_rts(b, a->qp_num, &gid), 9);
    static char src[256], dst[4096];
    static unsigned long long counter = 40, old;
    struct ibv_mr *ms = ibv_reg_mr(pd, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_mr *md = ibv_reg_mr(pd, dst, sizeof dst, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
        IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC);
    struct ibv_mr *mc = ibv_reg_mr(pd, &counter, 8, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_ATOMIC);
    struct ibv_mr *mo = ibv_reg_mr(pd, &old, 8, IBV_ACCESS_LOCAL_WRITE);
    CHECK(ms && md && mc && mo, 10);
    for (int i = 0; i < 256; i++) src[i] = (char)(i * 3 + 1);
    struct ibv_sge rs = { (uintptr_t)dst + 3000, 64, md->lkey };
    struct ibv_recv_wr rw = { .wr_id = 50, .sg_list = &rs, .num_sge = 1 }, *bad_r;
    CHECK(ibv_post_recv(b, &rw, &bad_r) == 0, 11);
    /* One list of four: a WRITE of two entries, an inline SEND with
     * immediate, a FETCH_AND_ADD, a READ back. */
    char msg[] = "inline through wr_set_inline_data";
    ibv_wr_start(ax);
    ax->wr_id = 1; ax->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_write(ax, md->rkey, (uintptr_t)dst);
    struct ibv_sge two[2] = { { (uintptr_t)src, 100, ms->lkey }, { (uintptr_t)src + 100, 28, ms->lkey } };
    ibv_wr_set_sge_list(ax, 2, two);
    ax->wr_id = 2; ax->wr_flags = IBV_SEND_SIGNALED | IBV_SEND_INLINE;
    ibv_wr_send_imm(ax, htobe32(0xabcd));
    ibv_wr_set_inline_data(ax, msg, sizeof msg);
    memset(msg, 0, sizeof msg); /* copied already */
    ax->wr_id = 3; ax->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_atomic_fetch_add(ax, mc->rkey, (uintptr_t)&counter, 2);
    ibv_wr_set_sge(ax, mo->lkey, (uintptr_t)&old, 8);
    ax->wr_id = 4;
    ibv_wr_rdma_read(ax, md->rkey, (uintptr_t)dst + 10);
    ibv_wr_set_sge(ax, ms->lkey, (uintptr_t)src + 200, 20);
    CHECK(ibv_wr_complete(ax) == 0, 12);
    uint64_t ids[8]; int ops[8], sts[8]; unsigned lens[8];
    int n = poll_ex(cx, 5, ids, ops, lens, sts);
    CHECK(n == 5, 13);
    int seen = 0;
    for (int i = 0; i < n; i++) {
        CHECK(sts[i] == IBV_WC_SUCCESS, 14);
        if (ids[i] == 50) { CHECK(ops[i] == IBV_WC_RECV && lens[i] == sizeof msg, 15); seen |= 16; }
        else seen |= 1 << (ids[i] - 1);
    }
    CHECK(seen == 31, 16);
    CHECK(!memcmp(dst, src, 128) && !strcmp(dst + 3000, "inline through wr_set_inline_data"), 17);
    CHECK(old == 40 && counter == 42 && !memcmp(src + 200, dst + 10, 20), 18);
    /* A bad call fails the list at wr_complete, and nothing is posted. */
    ibv_wr_start(ax);
    ax->wr_id = 5; ax->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_rdma_write(ax, md->rkey, (uintptr_t)dst);
    ibv_wr_set_sge(ax, ms->lkey, (uintptr_t)src, 8);
    ibv_wr_set_ud_addr(ax, NULL, 1, 1);
    CHECK(ibv_wr_complete(ax) == EINVAL, 19);
    ibv_wr_start(ax);
    ibv_wr_rdma_write(ax, md->rkey, (uintptr_t)dst);
    ibv_wr_set_inline_data(ax, dst, 4000);
    CHECK(ibv_wr_complete(ax) == EINVAL, 20);
    ibv_wr_start(ax);
    ibv_wr_rdma_write(ax, md->rkey, (uintptr_t)dst);
    ibv_wr_set_sge(ax, ms->lkey, (uintptr_t)src, 8);
    ibv_wr_abort(ax);
    CHECK(ibv_wr_complete(ax) == EINVAL, 21);
    struct ibv_poll_cq_attr pa = { 0 };
    CHECK(ibv_start_poll(cx, &pa) == ENOENT, 22);
    pa.comp_mask = 1;
    CHECK(ibv_start_poll(cx, &pa) == EINVAL, 23);
    /* SRQs the extended way. */
    struct ibv_srq_init_attr_ex sa;
    memset(&sa, 0, sizeof sa);
    sa.attr.max_wr = 8; sa.attr.max_sge = 1; sa.comp_mask = IBV_SRQ_INIT_ATTR_PD; sa.pd = pd;
    struct ibv_srq *srq = ibv_create_srq_ex(ctx, &sa);
    CHECK(srq && sa.attr.max_wr >= 8, 24);
    uint32_t num = 0;
    CHECK(ibv_get_srq_num(srq, &num) == 0 && num == srq->handle, 25);
    sa.comp_mask |= IBV_SRQ_INIT_ATTR_TYPE; sa.srq_type = IBV_SRQT_XRC;
    CHECK(!ibv_create_srq_ex(ctx, &sa) && errno == EOPNOTSUPP, 26);
    sa.comp_mask = 0;
    CHECK(!ibv_create_srq_ex(ctx, &sa) && errno == EINVAL, 27);
    CHECK(ibv_destroy_srq(srq) == 0 && ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0, 28);
    CHECK(ibv_destroy_cq(cq) == 0, 29);
    return 0;
}
"#;
    c_ok(code, None);
}

#[test]
fn ud_through_the_work_request_interface() {
    let code = r#"
int main(void) {
    struct ibv_context *ctx = open_first();
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
    struct ibv_qp_init_attr_ex qa;
    memset(&qa, 0, sizeof qa);
    qa.qp_type = IBV_QPT_UD; qa.send_cq = cq; qa.recv_cq = cq;
    qa.cap.max_send_wr = 4; qa.cap.max_recv_wr = 4; qa.cap.max_send_sge = 1; qa.cap.max_recv_sge = 1;
    qa.comp_mask = IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_SEND_OPS_FLAGS; qa.pd = pd;
    qa.send_ops_flags = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;
    struct ibv_qp *q[2] = { ibv_create_qp_ex(ctx, &qa), ibv_create_qp_ex(ctx, &qa) };
    CHECK(q[0] && q[1], 1);
    for (int i = 0; i < 2; i++) {
        struct ibv_qp_attr a;
        memset(&a, 0, sizeof a);
        a.qp_state = IBV_QPS_INIT; a.port_num = 1; a.qkey = 0x22;
        CHECK(!ibv_modify_qp(q[i], &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY), 2);
        a.qp_state = IBV_QPS_RTR;
        CHECK(!ibv_modify_qp(q[i], &a, IBV_QP_STATE), 3);
        a.qp_state = IBV_QPS_RTS;
        CHECK(!ibv_modify_qp(q[i], &a, IBV_QP_STATE | IBV_QP_SQ_PSN), 4);
    }
    static char buf[2][256];
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
    union ibv_gid gid;
    ibv_query_gid(ctx, 1, 0, &gid);
    struct ibv_ah_attr aa = { .is_global = 1, .port_num = 1 };
    aa.grh.dgid = gid; aa.grh.hop_limit = 1;
    struct ibv_ah *ah = ibv_create_ah(pd, &aa);
    CHECK(mr && ah, 5);
    struct ibv_sge rs = { (uintptr_t)buf[1], 256, mr->lkey };
    struct ibv_recv_wr rw = { .wr_id = 9, .sg_list = &rs, .num_sge = 1 }, *bad_r;
    CHECK(ibv_post_recv(q[1], &rw, &bad_r) == 0, 6);
    strcpy(buf[0], "datagram");
    struct ibv_qp_ex *x = ibv_qp_to_qp_ex(q[0]);
    ibv_wr_start(x);
    x->wr_id = 8; x->wr_flags = IBV_SEND_SIGNALED;
    ibv_wr_send_imm(x, htobe32(77));
    ibv_wr_set_ud_addr(x, ah, q[1]->qp_num, 0x22);
    ibv_wr_set_sge(x, mr->lkey, (uintptr_t)buf[0], 9);
    CHECK(ibv_wr_complete(x) == 0, 7);
    struct ibv_wc wc;
    int recv = 0, sent = 0;
    for (int i = 0; i < 2; i++) {
        CHECK(one(cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS, 8);
        if (wc.wr_id == 9) { recv = 1; CHECK(wc.src_qp == q[0]->qp_num && be32toh(wc.imm_data) == 77, 9); }
        if (wc.wr_id == 8) sent = 1;
    }
    CHECK(recv && sent && !strcmp(buf[1] + 40, "datagram"), 10);
    /* Without a destination, a UD SEND is refused at wr_complete. */
    ibv_wr_start(x);
    ibv_wr_send(x);
    ibv_wr_set_sge(x, mr->lkey, (uintptr_t)buf[0], 9);
    CHECK(ibv_wr_complete(x) == EINVAL, 11);
    return 0;
}
"#;
    c_ok(code, None);
}

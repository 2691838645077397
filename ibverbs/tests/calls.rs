//! The calls of the drop-in libibverbs.so.1 beyond the objects and the
//! data path, from C programs: the ones that compute (texts, rates, the
//! kernel-structure copies, the sysfs path) against rdma-core's own
//! library, and P_Keys, GID entries, AHs from received GRHs, CQ
//! resizing, MR reregistration and asynchronous events against rnic
//! devices.

mod common;

use std::process::Command;

use common::{c_ok, c_program, same_layout, text, C_PRELUDE};

/// The output of the C program `code` over rdma-core's libibverbs and
/// over ours, with `env` set for both.
fn both_libraries(code: &str, env: &[(&str, &str)]) -> (String, String) {
    let dir = std::env::temp_dir().join(format!(
        "rnic-ibv-both-{}-{}",
        std::process::id(),
        code.len()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("p.c"), format!("{C_PRELUDE}{code}")).unwrap();
    let st = Command::new("gcc")
        .arg(dir.join("p.c"))
        .args(["-o"])
        .arg(dir.join("p"))
        .arg("-libverbs")
        .status()
        .unwrap();
    assert!(st.success(), "needs libibverbs-dev");
    let theirs = Command::new(dir.join("p"))
        .env_remove("LD_LIBRARY_PATH")
        .envs(env.iter().copied())
        .output()
        .unwrap();
    let mut ours = Command::new(dir.join("p"));
    ours.envs(env.iter().copied());
    let ours = {
        let o = run_with(ours);
        std::fs::remove_dir_all(&dir).unwrap();
        o
    };
    for (who, o) in [("rdma-core's", &theirs), ("ours", &ours)] {
        let (out, err) = text(o);
        assert!(o.status.success(), "over {who}: {:?} {out}{err}", o.status);
    }
    (text(&theirs).0, text(&ours).0)
}

/// `c` run over our library.
fn run_with(mut c: Command) -> std::process::Output {
    c.env("LD_LIBRARY_PATH", common::lib_dir())
        .env_remove("RNIC_DEVICES")
        .env_remove("RNIC_DEVICES_FILE")
        .output()
        .unwrap()
}

#[test]
fn texts_and_rates_are_libibverbs_own() {
    let code = r#"
const char *ibv_get_sysfs_path(void); /* rdma-core's driver.h */
int main(void) {
    for (int s = -2; s < 26; s++) printf("wc %d %s\n", s, ibv_wc_status_str(s));
    for (int s = -2; s < 22; s++) printf("event %d %s\n", s, ibv_event_type_str(s));
    for (int s = -2; s < 9; s++) printf("node %d %s\n", s, ibv_node_type_str(s));
    for (int s = -2; s < 7; s++) printf("port %d %s\n", s, ibv_port_state_str(s));
    for (int r = -1; r < 27; r++)
        printf("rate %d mult %d mbps %d\n", r, ibv_rate_to_mult(r), ibv_rate_to_mbps(r));
    for (int m = -1; m < 500; m++) printf("mult %d rate %d\n", m, mult_to_ibv_rate(m));
    int mbps[] = {-1, 0, 2500, 14062, 25781, 53125, 103125, 1275000, 1275001};
    for (unsigned i = 0; i < sizeof mbps / sizeof *mbps; i++)
        printf("mbps %d rate %d\n", mbps[i], mbps_to_ibv_rate(mbps[i]));
    printf("sysfs %s\n", ibv_get_sysfs_path());
    return 0;
}
"#;
    let (theirs, ours) = both_libraries(code, &[("SYSFS_PATH", "/tmp/nowhere//")]);
    assert!(
        theirs.contains("wc 5 Work Request Flushed Error"),
        "{theirs}"
    );
    assert!(theirs.contains("event 9 port active"), "{theirs}");
    assert!(theirs.contains("rate 16 mult -1 mbps 103125"), "{theirs}");
    assert!(theirs.contains("sysfs /tmp/nowhere\n"), "{theirs}");
    assert_eq!(ours, theirs);
    let (theirs, ours) = both_libraries(code, &[]);
    assert!(theirs.contains("sysfs /sys\n"), "{theirs}");
    assert_eq!(ours, theirs);
}

#[test]
fn kernel_structures_are_copied_as_libibverbs_copies_them() {
    let code = r#"
#include <rdma/ib_user_verbs.h>
#include <rdma/ib_user_sa.h>
#include <infiniband/sa.h>
void ibv_copy_qp_attr_from_kern(struct ibv_qp_attr *dst, struct ib_uverbs_qp_attr *src);
void ibv_copy_ah_attr_from_kern(struct ibv_ah_attr *dst, struct ib_uverbs_ah_attr *src);
void ibv_copy_path_rec_from_kern(struct ibv_sa_path_rec *dst, struct ib_user_path_rec *src);
void ibv_copy_path_rec_to_kern(struct ib_user_path_rec *dst, struct ibv_sa_path_rec *src);
static void fill(void *p, size_t n, int seed) {
    for (size_t i = 0; i < n; i++) ((unsigned char *)p)[i] = (unsigned char)(seed + i * 7);
}
static void dump(const char *name, const void *p, size_t n) {
    printf("%s", name);
    for (size_t i = 0; i < n; i++) printf(" %02x", ((const unsigned char *)p)[i]);
    printf("\n");
}
int main(void) {
    struct ib_uverbs_qp_attr kq; struct ibv_qp_attr q;
    fill(&kq, sizeof kq, 1); fill(&q, sizeof q, 100);
    ibv_copy_qp_attr_from_kern(&q, &kq);
    dump("qp", &q, sizeof q);
    struct ib_uverbs_ah_attr ka; struct ibv_ah_attr a;
    fill(&ka, sizeof ka, 3); fill(&a, sizeof a, 50);
    ibv_copy_ah_attr_from_kern(&a, &ka);
    dump("ah", &a, sizeof a);
    struct ib_user_path_rec kp; struct ibv_sa_path_rec p;
    fill(&kp, sizeof kp, 5); fill(&p, sizeof p, 70);
    ibv_copy_path_rec_from_kern(&p, &kp);
    dump("path", &p, sizeof p);
    fill(&kp, sizeof kp, 9); fill(&p, sizeof p, 11);
    ibv_copy_path_rec_to_kern(&kp, &p);
    dump("kpath", &kp, sizeof kp);
    return 0;
}
"#;
    let (theirs, ours) = both_libraries(code, &[]);
    assert_eq!(theirs.lines().count(), 4, "{theirs}");
    for (t, o) in theirs.lines().zip(ours.lines()) {
        assert_eq!(o, t);
    }
}

#[test]
fn kernel_structures_are_laid_out_as_the_headers() {
    use rnic_ibverbs::marshall::{IbvSaPathRec, KernAhAttr, KernPathRec, KernQpAttr};
    use std::mem::offset_of;
    // `layout` probes include only verbs.h: these need the kernel's.
    let code = r#"
#include <stddef.h>
#include <rdma/ib_user_verbs.h>
#include <rdma/ib_user_sa.h>
#include <infiniband/sa.h>
#define P(t, f) printf("%s %zu\n", #f, offsetof(t, f))
int main(void) {
    printf("%zu %zu %zu %zu\n", sizeof(struct ib_uverbs_ah_attr), sizeof(struct ib_uverbs_qp_attr),
           sizeof(struct ib_user_path_rec), sizeof(struct ibv_sa_path_rec));
    P(struct ib_uverbs_ah_attr, dlid); P(struct ib_uverbs_ah_attr, port_num);
    P(struct ib_uverbs_qp_attr, ah_attr); P(struct ib_uverbs_qp_attr, max_send_wr);
    P(struct ib_uverbs_qp_attr, pkey_index); P(struct ib_uverbs_qp_attr, alt_timeout);
    P(struct ib_user_path_rec, raw_traffic); P(struct ib_user_path_rec, pkey);
    P(struct ib_user_path_rec, preference);
    P(struct ibv_sa_path_rec, raw_traffic); P(struct ibv_sa_path_rec, reversible);
    P(struct ibv_sa_path_rec, pkey); P(struct ibv_sa_path_rec, preference);
    return 0;
}
"#;
    let o = c_program(code, true, None);
    let (out, err) = text(&o);
    assert!(o.status.success(), "{out}{err}");
    let ours = format!(
        "{} {} {} {}\ndlid {}\nport_num {}\nah_attr {}\nmax_send_wr {}\npkey_index {}\n\
         alt_timeout {}\nraw_traffic {}\npkey {}\npreference {}\nraw_traffic {}\n\
         reversible {}\npkey {}\npreference {}\n",
        size_of::<KernAhAttr>(),
        size_of::<KernQpAttr>(),
        size_of::<KernPathRec>(),
        size_of::<IbvSaPathRec>(),
        offset_of!(KernAhAttr, dlid),
        offset_of!(KernAhAttr, port_num),
        offset_of!(KernQpAttr, ah_attr),
        offset_of!(KernQpAttr, max_send_wr),
        offset_of!(KernQpAttr, pkey_index),
        offset_of!(KernQpAttr, alt_timeout),
        offset_of!(KernPathRec, raw_traffic),
        offset_of!(KernPathRec, pkey),
        offset_of!(KernPathRec, preference),
        offset_of!(IbvSaPathRec, raw_traffic),
        offset_of!(IbvSaPathRec, reversible),
        offset_of!(IbvSaPathRec, pkey),
        offset_of!(IbvSaPathRec, preference),
    );
    assert_eq!(out, ours);
}

#[test]
fn gid_entries_and_async_events_are_laid_out_as_the_header() {
    use rnic_ibverbs::abi::{IbvAsyncEvent, IbvGidEntry};
    use std::mem::offset_of;
    same_layout(
        "struct ibv_gid_entry",
        &[
            ("size", size_of::<IbvGidEntry>()),
            ("gid", offset_of!(IbvGidEntry, gid)),
            ("gid_index", offset_of!(IbvGidEntry, gid_index)),
            ("port_num", offset_of!(IbvGidEntry, port_num)),
            ("gid_type", offset_of!(IbvGidEntry, gid_type)),
            ("ndev_ifindex", offset_of!(IbvGidEntry, ndev_ifindex)),
        ],
    );
    same_layout(
        "struct ibv_async_event",
        &[
            ("size", size_of::<IbvAsyncEvent>()),
            ("element", offset_of!(IbvAsyncEvent, element)),
            ("event_type", offset_of!(IbvAsyncEvent, event_type)),
        ],
    );
}

#[test]
fn pkeys_and_gid_entries_from_c() {
    let code = r#"
int main(void) {
    struct ibv_context *ctx = open_first();
    CHECK(ctx, 1);
    struct ibv_port_attr pa;
    CHECK(ibv_query_port(ctx, 1, &pa) == 0, 2);
    __be16 pk = 0;
    CHECK(ibv_query_pkey(ctx, 1, 0, &pk) == 0 && pk == htobe16(0xffff), 3);
    CHECK(ibv_query_pkey(ctx, 1, pa.pkey_tbl_len, &pk) == -1 && errno == ENOENT, 4);
    CHECK(ibv_query_pkey(NULL, 1, 0, &pk) == -1 && errno == EINVAL, 5);
    CHECK(ibv_get_pkey_index(ctx, 1, htobe16(0xffff)) == 0, 6);
    CHECK(ibv_get_pkey_index(ctx, 1, htobe16(0x1234)) == -1, 7);
    union ibv_gid g;
    CHECK(ibv_query_gid(ctx, 1, 0, &g) == 0, 8);
    struct ibv_gid_entry e;
    CHECK(ibv_query_gid_ex(ctx, 1, 0, &e, 0) == 0, 9);
    CHECK(!memcmp(&e.gid, &g, 16) && e.gid_index == 0 && e.port_num == 1, 10);
    CHECK(e.gid_type == IBV_GID_TYPE_ROCE_V2 && e.ndev_ifindex == 0, 11);
    CHECK(ibv_query_gid_ex(ctx, 1, 0, &e, 1) == EOPNOTSUPP, 12);
    CHECK(ibv_query_gid_ex(ctx, 1, pa.gid_tbl_len, &e, 0) == EINVAL, 13);
    CHECK(ibv_query_gid_ex(NULL, 1, 0, &e, 0) == EINVAL, 14);
    struct ibv_gid_entry t[256];
    ssize_t n = ibv_query_gid_table(ctx, t, 256, 0);
    CHECK(n >= 1, 15);
    int unused = 0;
    for (int i = 0; i < pa.gid_tbl_len; i++) {
        union ibv_gid x;
        CHECK(ibv_query_gid(ctx, 1, i, &x) == 0, 16);
        static const union ibv_gid zero;
        if (!memcmp(&x, &zero, 16)) {
            unused++;
            CHECK(ibv_query_gid_ex(ctx, 1, i, &e, 0) == ENODATA, 17);
        }
    }
    CHECK(n + unused == pa.gid_tbl_len, 18);
    CHECK(!memcmp(&t[0].gid, &g, 16) && t[0].gid_type == IBV_GID_TYPE_ROCE_V2, 19);
    CHECK(ibv_query_gid_table(ctx, t, n - 1, 0) == -EINVAL, 20);
    CHECK(ibv_query_gid_table(ctx, t, 256, 1) == -EOPNOTSUPP, 21);
    printf("gids %zd of %d, first %02x%02x\n", n, pa.gid_tbl_len, t[0].gid.raw[10], t[0].gid.raw[11]);
    return 0;
}
"#;
    let out = c_ok(code, Some("ipv4=192.0.2.9"));
    // The IPv4 address's GID comes first, mapped (::ffff:a.b.c.d).
    assert!(out.contains(", first ffff"), "{out}");
}

#[test]
fn ah_from_a_received_ud_message() {
    let code = r#"
static struct ibv_qp *ud(struct ibv_pd *pd, struct ibv_cq *cq) {
    struct ibv_qp_init_attr ia;
    memset(&ia, 0, sizeof ia);
    ia.qp_type = IBV_QPT_UD; ia.send_cq = cq; ia.recv_cq = cq;
    ia.cap.max_send_wr = 4; ia.cap.max_recv_wr = 4; ia.cap.max_send_sge = 1; ia.cap.max_recv_sge = 1;
    struct ibv_qp *qp = ibv_create_qp(pd, &ia);
    if (!qp) return NULL;
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof a);
    a.qp_state = IBV_QPS_INIT; a.port_num = 1; a.qkey = 0x11111111;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY)) return NULL;
    a.qp_state = IBV_QPS_RTR;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE)) return NULL;
    a.qp_state = IBV_QPS_RTS; a.sq_psn = 1;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN)) return NULL;
    return qp;
}
static char buf[2][4096];
static int send_to(struct ibv_qp *qp, struct ibv_mr *mr, struct ibv_ah *ah, unsigned qpn, const char *msg) {
    strcpy(buf[0], msg);
    struct ibv_sge s = { (uintptr_t)buf[0], strlen(msg) + 1, mr->lkey };
    struct ibv_send_wr w, *bad;
    memset(&w, 0, sizeof w);
    w.wr_id = 1; w.sg_list = &s; w.num_sge = 1; w.opcode = IBV_WR_SEND; w.send_flags = IBV_SEND_SIGNALED;
    w.wr.ud.ah = ah; w.wr.ud.remote_qpn = qpn; w.wr.ud.remote_qkey = 0x11111111;
    return ibv_post_send(qp, &w, &bad);
}
static int recv_into(struct ibv_qp *qp, struct ibv_mr *mr) {
    struct ibv_sge s = { (uintptr_t)buf[1], sizeof buf[1], mr->lkey };
    struct ibv_recv_wr w = { .wr_id = 2, .sg_list = &s, .num_sge = 1 }, *bad;
    return ibv_post_recv(qp, &w, &bad);
}
int main(void) {
    struct ibv_context *ctx = open_first();
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
    struct ibv_qp *a = ud(pd, cq), *b = ud(pd, cq);
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE);
    CHECK(a && b && mr, 1);
    union ibv_gid gid;
    ibv_query_gid(ctx, 1, 0, &gid);
    struct ibv_ah_attr aa;
    memset(&aa, 0, sizeof aa);
    aa.is_global = 1; aa.grh.dgid = gid; aa.grh.hop_limit = 7; aa.grh.traffic_class = 0x20; aa.port_num = 1;
    struct ibv_ah *to_b = ibv_create_ah(pd, &aa);
    CHECK(to_b, 2);
    /* a -> b; b answers through an AH made from what it received. */
    CHECK(recv_into(b, mr) == 0 && send_to(a, mr, to_b, b->qp_num, "ping") == 0, 3);
    struct ibv_wc wc, got;
    int recvs = 0;
    for (int i = 0; i < 2; i++) {
        CHECK(one(cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS, 4);
        if (wc.opcode == IBV_WC_RECV) { got = wc; recvs++; }
    }
    CHECK(recvs == 1 && (got.wc_flags & IBV_WC_GRH) && got.src_qp == a->qp_num, 5);
    CHECK(!strcmp(buf[1] + 40, "ping"), 6);
    struct ibv_grh *grh = (struct ibv_grh *)buf[1];
    struct ibv_ah_attr back;
    CHECK(ibv_init_ah_from_wc(ctx, 1, &got, grh, &back) == 0, 7);
    CHECK(back.is_global && !memcmp(&back.grh.dgid, &gid, 16) && back.grh.sgid_index == 0, 8);
    CHECK(back.port_num == 1 && back.grh.hop_limit == 7 && back.grh.traffic_class == 0x20, 9);
    printf("hop %u class %#x\n", back.grh.hop_limit, back.grh.traffic_class);
    struct ibv_ah *to_a = ibv_create_ah_from_wc(pd, &got, grh, 1);
    CHECK(to_a, 10);
    CHECK(recv_into(a, mr) == 0 && send_to(b, mr, to_a, got.src_qp, "pong") == 0, 11);
    recvs = 0;
    for (int i = 0; i < 2; i++) {
        CHECK(one(cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS, 12);
        if (wc.opcode == IBV_WC_RECV) { recvs++; CHECK(wc.qp_num == a->qp_num && wc.src_qp == b->qp_num, 13); }
    }
    CHECK(recvs == 1 && !strcmp(buf[1] + 40, "pong"), 14);
    /* Without IBV_WC_GRH: a local (LID) address, no GRH read. */
    struct ibv_wc nogrh = got;
    nogrh.wc_flags = 0;
    CHECK(ibv_init_ah_from_wc(ctx, 1, &nogrh, NULL, &back) == 0 && !back.is_global, 15);
    /* Sent to an address that is none of the port's GIDs. */
    struct ibv_grh other = *grh;
    ((unsigned char *)&other)[39] ^= 1;
    CHECK(ibv_init_ah_from_wc(ctx, 1, &got, &other, &back) == -1 && errno == EINVAL, 16);
    CHECK(!ibv_create_ah_from_wc(pd, &got, &other, 1) && errno == EINVAL, 17);
    /* Neither IPv4 nor IPv6. */
    memset(&other, 0, sizeof other);
    CHECK(ibv_init_ah_from_wc(ctx, 1, &got, &other, &back) == -1 && errno == EPROTONOSUPPORT, 18);
    CHECK(ibv_init_ah_from_wc(NULL, 1, &got, grh, &back) == -1 && errno == EINVAL, 19);
    return 0;
}
"#;
    let out = c_ok(code, Some("ipv4=192.0.2.9"));
    assert_eq!(out.trim(), "hop 7 class 0x20");
}

#[test]
fn resize_cq_and_rereg_mr_from_c() {
    let code = r#"
int main(void) {
    struct ibv_context *ctx = open_first();
    struct ibv_pd *pd = ibv_alloc_pd(ctx), *pd2 = ibv_alloc_pd(ctx);
    struct ibv_cq *cq = ibv_create_cq(ctx, 2, NULL, NULL, 0);
    CHECK(cq && pd2, 1);
    int small = cq->cqe;
    CHECK(ibv_resize_cq(cq, 64) == 0 && cq->cqe >= 64, 2);
    CHECK(ibv_resize_cq(cq, -1) == EINVAL && ibv_resize_cq(NULL, 8) == EINVAL, 3);
    struct ibv_qp *qp = rc_qp(pd, cq, 32, 1, 0), *peer = rc_qp(pd, cq, 32, 1, 0);
    CHECK(qp && peer, 4);
    union ibv_gid gid;
    ibv_query_gid(ctx, 1, 0, &gid);
    CHECK(!to_rts(qp, peer->qp_num, &gid) && !to_rts(peer, qp->qp_num, &gid), 5);
    static char src[64], a[4096], b[4096];
    struct ibv_mr *ms = ibv_reg_mr(pd, src, sizeof src, 0);
    struct ibv_mr *md = ibv_reg_mr(pd, a, sizeof a, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    CHECK(ms && md, 6);
    unsigned rkey = md->rkey;
    /* The MR moves to b: a peer writing at b lands in b, with the same keys. */
    CHECK(ibv_rereg_mr(md, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, b, sizeof b, 0) == 0, 7);
    CHECK(md->addr == b && md->length == sizeof b && md->rkey == rkey, 8);
    /* More writes than the CQ first held: all complete into the resized CQ. */
    strcpy(src, "moved");
    struct ibv_sge s = { (uintptr_t)src, 6, ms->lkey };
    struct ibv_send_wr w, *bad;
    for (int i = 0; i < 16; i++) {
        memset(&w, 0, sizeof w);
        w.wr_id = i; w.sg_list = &s; w.num_sge = 1; w.opcode = IBV_WR_RDMA_WRITE;
        w.send_flags = IBV_SEND_SIGNALED; w.wr.rdma.remote_addr = (uintptr_t)b + 64 * i; w.wr.rdma.rkey = rkey;
        CHECK(ibv_post_send(qp, &w, &bad) == 0, 9);
    }
    struct ibv_wc wc;
    for (int i = 0; i < 16; i++)
        CHECK(one(cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == (unsigned)i, 10);
    CHECK(!strcmp(b + 64 * 15, "moved") && a[0] == 0, 11);
    /* Bad input changes nothing. */
    CHECK(ibv_rereg_mr(md, 8, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_INPUT && errno == EINVAL, 12);
    CHECK(ibv_rereg_mr(md, 0, NULL, NULL, 0, IBV_ACCESS_REMOTE_READ) == IBV_REREG_MR_ERR_INPUT, 13);
    CHECK(ibv_rereg_mr(md, IBV_REREG_MR_CHANGE_TRANSLATION, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_INPUT, 14);
    CHECK(ibv_rereg_mr(md, IBV_REREG_MR_CHANGE_PD, NULL, NULL, 0, 0) == IBV_REREG_MR_ERR_INPUT, 15);
    CHECK(ibv_rereg_mr(NULL, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0) == IBV_REREG_MR_ERR_INPUT, 16);
    /* Without remote write, the next write is refused. */
    CHECK(ibv_rereg_mr(md, IBV_REREG_MR_CHANGE_ACCESS, NULL, NULL, 0, IBV_ACCESS_LOCAL_WRITE) == 0, 17);
    w.wr_id = 99;
    CHECK(ibv_post_send(qp, &w, &bad) == 0, 18);
    CHECK(one(cq, &wc) == 1 && wc.wr_id == 99 && wc.status == IBV_WC_REM_ACCESS_ERR, 19);
    /* Another PD: the MR follows. */
    CHECK(ibv_rereg_mr(ms, IBV_REREG_MR_CHANGE_PD, pd2, NULL, 0, 0) == 0 && ms->pd == pd2, 20);
    printf("cqe %d then %d\n", small, cq->cqe);
    return 0;
}
"#;
    let out = c_ok(code, None);
    assert!(out.starts_with("cqe "), "{out}");
}

#[test]
fn async_events_from_c() {
    let code = r#"
#include <poll.h>
int main(void) {
    struct ibv_context *ctx = open_first();
    CHECK(ctx->async_fd >= 0, 1);
    struct pollfd p = { .fd = ctx->async_fd, .events = POLLIN };
    CHECK(poll(&p, 1, 50) == 0, 2);
    struct ibv_qp *b = access_error(ctx);
    CHECK(b, 3);
    CHECK(poll(&p, 1, 5000) == 1 && (p.revents & POLLIN), 4);
    struct ibv_async_event ev;
    CHECK(ibv_get_async_event(ctx, &ev) == 0, 5);
    CHECK(ev.event_type == IBV_EVENT_QP_ACCESS_ERR && ev.element.qp == b, 6);
    printf("%s\n", ibv_event_type_str(ev.event_type));
    unsigned before = b->events_completed;
    ibv_ack_async_event(&ev);
    CHECK(b->events_completed == before + 1, 7);
    /* Nothing more waits: the fd is quiet again. */
    p.revents = 0;
    CHECK(poll(&p, 1, 100) == 0, 8);
    CHECK(ibv_get_async_event(NULL, &ev) == -1 && errno == EINVAL, 9);
    CHECK(ibv_get_async_event(ctx, NULL) == -1 && errno == EINVAL, 10);
    /* An event of a destroyed object: acknowledging it touches nothing. */
    CHECK(ibv_destroy_qp(b) == 0, 11);
    ibv_ack_async_event(&ev);
    return 0;
}
"#;
    let out = c_ok(code, None);
    assert_eq!(out.trim(), "local access violation work queue error");
}

#[test]
fn memory_windows_from_c() {
    let code = r#"
int main(void) {
    struct ibv_context *ctx = open_first();
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0), *rcq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
    struct ibv_qp *a = rc_qp(pd, cq, 16, 1, 0), *b = rc_qp(pd, rcq, 16, 1, 0);
    CHECK(a && b, 1);
    union ibv_gid gid;
    ibv_query_gid(ctx, 1, 0, &gid);
    CHECK(!to_rts(a, b->qp_num, &gid) && !to_rts(b, a->qp_num, &gid), 2);
    static char src[64], dst[4096];
    struct ibv_mr *ms = ibv_reg_mr(pd, src, sizeof src, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_mr *md = ibv_reg_mr(pd, dst, sizeof dst, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_MW_BIND);
    CHECK(ms && md, 3);
    /* Type 1: bound with ibv_bind_mw on b, 256 bytes at dst + 1024, remote write. */
    struct ibv_mw *w1 = ibv_alloc_mw(pd, IBV_MW_TYPE_1);
    CHECK(w1 && w1->type == IBV_MW_TYPE_1 && w1->pd == pd && w1->context == ctx, 4);
    unsigned before = w1->rkey;
    struct ibv_mw_bind bind = { .wr_id = 7, .send_flags = IBV_SEND_SIGNALED };
    bind.bind_info.mr = md; bind.bind_info.addr = (uintptr_t)dst + 1024; bind.bind_info.length = 256;
    bind.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
    CHECK(ibv_bind_mw(b, w1, &bind) == 0 && w1->rkey != before, 5);
    struct ibv_wc wc;
    CHECK(one(rcq, &wc) == 1 && wc.wr_id == 7 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_BIND_MW, 6);
    strcpy(src, "through the window");
    struct ibv_sge s = { (uintptr_t)src, 19, ms->lkey };
    struct ibv_send_wr w, *bad;
    memset(&w, 0, sizeof w);
    w.wr_id = 8; w.sg_list = &s; w.num_sge = 1; w.opcode = IBV_WR_RDMA_WRITE; w.send_flags = IBV_SEND_SIGNALED;
    w.wr.rdma.remote_addr = (uintptr_t)dst + 1024; w.wr.rdma.rkey = w1->rkey;
    CHECK(ibv_post_send(a, &w, &bad) == 0, 7);
    CHECK(one(cq, &wc) == 1 && wc.wr_id == 8 && wc.status == IBV_WC_SUCCESS, 8);
    CHECK(!strcmp(dst + 1024, "through the window"), 9);
    /* A bind on no QP, or of no MR, is refused. */
    CHECK(ibv_bind_mw(NULL, w1, &bind) == EINVAL, 10);
    bind.bind_info.mr = NULL;
    CHECK(ibv_bind_mw(b, w1, &bind) == EINVAL, 11);
    /* Type 2: bound by a BIND_MW request of b's, with the next key. */
    struct ibv_mw *w2 = ibv_alloc_mw(pd, IBV_MW_TYPE_2);
    CHECK(w2, 12);
    struct ibv_send_wr bw;
    memset(&bw, 0, sizeof bw);
    bw.wr_id = 9; bw.opcode = IBV_WR_BIND_MW; bw.send_flags = IBV_SEND_SIGNALED;
    bw.bind_mw.mw = w2; bw.bind_mw.rkey = ibv_inc_rkey(w2->rkey);
    bw.bind_mw.bind_info.mr = md; bw.bind_mw.bind_info.addr = (uintptr_t)dst + 2048;
    bw.bind_mw.bind_info.length = 64; bw.bind_mw.bind_info.mw_access_flags = IBV_ACCESS_REMOTE_WRITE;
    CHECK(ibv_post_send(b, &bw, &bad) == 0, 13);
    CHECK(one(rcq, &wc) == 1 && wc.wr_id == 9 && wc.status == IBV_WC_SUCCESS, 14);
    unsigned k2 = bw.bind_mw.rkey;
    w.wr_id = 10; w.wr.rdma.remote_addr = (uintptr_t)dst + 2048; w.wr.rdma.rkey = k2;
    CHECK(ibv_post_send(a, &w, &bad) == 0, 15);
    CHECK(one(cq, &wc) == 1 && wc.wr_id == 10 && wc.status == IBV_WC_SUCCESS, 16);
    CHECK(!strcmp(dst + 2048, "through the window"), 17);
    /* A key of another index is refused at posting. */
    bw.bind_mw.rkey = k2 ^ 0x100;
    CHECK(ibv_post_send(b, &bw, &bad) == EINVAL && bad == &bw, 18);
    /* The peer's SEND with invalidate ends it: the next write is refused. */
    static char rbuf[64];
    struct ibv_mr *mrr = ibv_reg_mr(pd, rbuf, sizeof rbuf, IBV_ACCESS_LOCAL_WRITE);
    struct ibv_sge rs = { (uintptr_t)rbuf, sizeof rbuf, mrr->lkey };
    struct ibv_recv_wr rw = { .wr_id = 11, .sg_list = &rs, .num_sge = 1 }, *bad_r;
    CHECK(ibv_post_recv(b, &rw, &bad_r) == 0, 19);
    struct ibv_send_wr inv;
    memset(&inv, 0, sizeof inv);
    inv.wr_id = 12; inv.sg_list = &s; inv.num_sge = 1; inv.opcode = IBV_WR_SEND_WITH_INV;
    inv.send_flags = IBV_SEND_SIGNALED; inv.invalidate_rkey = k2;
    CHECK(ibv_post_send(a, &inv, &bad) == 0, 20);
    CHECK(one(cq, &wc) == 1 && wc.wr_id == 12 && wc.status == IBV_WC_SUCCESS, 21);
    CHECK(one(rcq, &wc) == 1 && wc.wr_id == 11 && (wc.wc_flags & IBV_WC_WITH_INV), 22);
    /* In host byte order, unlike immediate data. */
    CHECK(wc.invalidated_rkey == k2, 23);
    w.wr_id = 13;
    CHECK(ibv_post_send(a, &w, &bad) == 0, 24);
    CHECK(one(cq, &wc) == 1 && wc.wr_id == 13 && wc.status == IBV_WC_REM_ACCESS_ERR, 25);
    /* Deallocation; an unknown type is refused. */
    CHECK(ibv_dealloc_mw(w2) == 0, 26);
    CHECK(ibv_dealloc_mw(w1) == 0, 27);
    CHECK(!ibv_alloc_mw(pd, 3) && errno == EINVAL, 28);
    return 0;
}
"#;
    c_ok(code, None);
}

#[test]
fn long_lists_are_posted_in_batches_in_order() {
    let code = r#"
int main(void) {
    struct ibv_context *ctx = open_first();
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_cq *cq = ibv_create_cq(ctx, 256, NULL, NULL, 0);
    struct ibv_qp *a = rc_qp(pd, cq, 128, 2, 64), *b = rc_qp(pd, cq, 128, 2, 64);
    union ibv_gid gid;
    ibv_query_gid(ctx, 1, 0, &gid);
    CHECK(a && b && !to_rts(a, b->qp_num, &gid) && !to_rts(b, a->qp_num, &gid), 1);
    static char src[128], dst[100 * 16];
    struct ibv_mr *ms = ibv_reg_mr(pd, src, sizeof src, 0);
    struct ibv_mr *md = ibv_reg_mr(pd, dst, sizeof dst, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    for (int i = 0; i < 128; i++) src[i] = (char)(i + 1);
    /* 100 writes in one list: 16 bytes each, every 7th inline from two
     * entries, every 5th inline from one. */
    static struct ibv_send_wr w[100];
    static struct ibv_sge s[100][2];
    memset(w, 0, sizeof w);
    for (int i = 0; i < 100; i++) {
        w[i].wr_id = 1000 + i; w[i].opcode = IBV_WR_RDMA_WRITE; w[i].send_flags = IBV_SEND_SIGNALED;
        w[i].wr.rdma.remote_addr = (uintptr_t)dst + 16 * i; w[i].wr.rdma.rkey = md->rkey;
        w[i].sg_list = s[i];
        if (i % 7 == 3) {
            s[i][0] = (struct ibv_sge){ (uintptr_t)src + i, 10, 0 };
            s[i][1] = (struct ibv_sge){ (uintptr_t)src + i + 10, 6, 0 };
            w[i].num_sge = 2; w[i].send_flags |= IBV_SEND_INLINE;
        } else {
            s[i][0] = (struct ibv_sge){ (uintptr_t)src + i, 16, ms->lkey };
            w[i].num_sge = 1;
            if (i % 5 == 0) w[i].send_flags |= IBV_SEND_INLINE;
        }
        w[i].next = i < 99 ? &w[i + 1] : NULL;
    }
    struct ibv_send_wr *bad = NULL;
    CHECK(ibv_post_send(a, w, &bad) == 0, 2);
    struct ibv_wc wc;
    for (int i = 0; i < 100; i++)
        CHECK(one(cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == (uint64_t)(1000 + i), 3);
    for (int i = 0; i < 100; i++)
        CHECK(!memcmp(dst + 16 * i, src + i, 16), 4);
    /* A bad request deep in a list: the ones before it are posted, bad_wr
     * names it, the rest are not. */
    memset(dst, 0, sizeof dst);
    w[70].opcode = 77;
    CHECK(ibv_post_send(a, w, &bad) == EINVAL && bad == &w[70], 5);
    for (int i = 0; i < 70; i++)
        CHECK(one(cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == (uint64_t)(1000 + i), 6);
    CHECK(ibv_poll_cq(cq, 1, &wc) == 0 && dst[16 * 71] == 0 && dst[16 * 69] != 0, 7);
    /* More than the queue holds: ENOMEM at the first that does not fit. */
    w[70].opcode = IBV_WR_RDMA_WRITE;
    w[99].next = w;
    w[99].next = NULL;
    static struct ibv_recv_wr r[150];
    static struct ibv_sge rs[150];
    for (int i = 0; i < 150; i++) {
        rs[i] = (struct ibv_sge){ (uintptr_t)dst, 16, md->lkey };
        r[i] = (struct ibv_recv_wr){ .wr_id = i, .sg_list = &rs[i], .num_sge = 1, .next = i < 149 ? &r[i + 1] : NULL };
    }
    struct ibv_recv_wr *bad_r = NULL;
    int rc = ibv_post_recv(b, r, &bad_r);
    CHECK(rc == ENOMEM && bad_r && bad_r - r >= 128 && bad_r - r < 150, 8);
    printf("receives posted %ld\n", (long)(bad_r - r));
    return 0;
}
"#;
    c_ok(code, None);
}

#[test]
fn completion_channel_fd_works_with_poll() {
    let code = r#"
#include <poll.h>
int main(void) {
    struct ibv_context *ctx = open_first();
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
    CHECK(ch && ch->fd >= 0, 1);
    int tag;
    struct ibv_cq *cq = ibv_create_cq(ctx, 16, &tag, ch, 0);
    CHECK(cq && cq->channel == ch, 2);
    struct ibv_qp *a = rc_qp(pd, cq, 4, 1, 0), *b = rc_qp(pd, cq, 4, 1, 0);
    union ibv_gid gid;
    ibv_query_gid(ctx, 1, 0, &gid);
    CHECK(a && b && !to_rts(a, b->qp_num, &gid) && !to_rts(b, a->qp_num, &gid), 3);
    static char buf[64];
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    CHECK(ibv_req_notify_cq(cq, 0) == 0, 4);
    struct pollfd p = { .fd = ch->fd, .events = POLLIN };
    /* Armed, nothing completed: the fd stays quiet. */
    CHECK(poll(&p, 1, 100) == 0, 5);
    CHECK(write_within(a, buf, mr, mr->rkey) == 0, 6);
    /* The completion raises it; the event names the CQ. */
    CHECK(poll(&p, 1, 5000) == 1 && (p.revents & POLLIN), 7);
    struct ibv_cq *ev_cq; void *ev_ctx;
    CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == cq && ev_ctx == &tag, 8);
    struct ibv_wc wc;
    CHECK(ibv_poll_cq(cq, 1, &wc) == 1 && wc.wr_id == 1 && wc.status == IBV_WC_SUCCESS, 9);
    ibv_ack_cq_events(cq, 1);
    /* Taken and not armed again: quiet. */
    p.revents = 0;
    CHECK(poll(&p, 1, 100) == 0, 10);
    CHECK(ibv_destroy_comp_channel(ch) == EBUSY, 11);
    CHECK(ibv_destroy_qp(a) == 0 && ibv_destroy_qp(b) == 0 && ibv_destroy_cq(cq) == 0, 12);
    CHECK(ibv_destroy_comp_channel(ch) == 0, 13);
    return 0;
}
"#;
    c_ok(code, None);
}

/// The channel's fd and the async fd are blocking, as rdma-core's are; a
/// program that makes them non-blocking (UCX does, to wait on them with
/// epoll) gets -1 with `EAGAIN` where nothing waits, as libibverbs' read
/// of such an fd gives, and the event once it is there. The flag stays
/// when the program opens another context of the device.
#[test]
fn nonblocking_event_fds_answer_eagain() {
    let code = r#"
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>
static int nonblock(int fd) { return fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK); }
int main(void) {
    struct ibv_context *ctx = open_first();
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
    /* Blocking until the program says otherwise, as rdma-core's are. */
    CHECK(ch && !(fcntl(ch->fd, F_GETFL) & O_NONBLOCK) && !(fcntl(ctx->async_fd, F_GETFL) & O_NONBLOCK), 11);
    CHECK(nonblock(ch->fd) == 0, 1);
    struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, ch, 0);
    struct ibv_cq *ev_cq; void *ev_ctx;
    errno = 0;
    CHECK(cq && ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == -1 && errno == EAGAIN, 2);
    struct ibv_qp *a = rc_qp(pd, cq, 4, 1, 0), *b = rc_qp(pd, cq, 4, 1, 0);
    union ibv_gid gid;
    ibv_query_gid(ctx, 1, 0, &gid);
    CHECK(a && b && !to_rts(a, b->qp_num, &gid) && !to_rts(b, a->qp_num, &gid), 3);
    static char buf[64];
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    CHECK(ibv_req_notify_cq(cq, 0) == 0, 4);
    CHECK(write_within(a, buf, mr, mr->rkey) == 0, 5);
    struct pollfd p = { .fd = ch->fd, .events = POLLIN };
    CHECK(poll(&p, 1, 5000) == 1, 6);
    CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == cq, 7);
    ibv_ack_cq_events(cq, 1);
    errno = 0;
    CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == -1 && errno == EAGAIN, 8);
    /* The async fd: whatever waits is taken, then EAGAIN. */
    CHECK(nonblock(ctx->async_fd) == 0, 9);
    struct ibv_async_event ae;
    int n = 0;
    while (ibv_get_async_event(ctx, &ae) == 0 && n < 100) { ibv_ack_async_event(&ae); n++; }
    CHECK(n < 100 && errno == EAGAIN, 10);
    /* Another context of the device, opened later (librdmacm's, beside
       UCX's), leaves the program's O_NONBLOCK alone: a wait that blocked
       now would never end (an alarm then fails the test). */
    alarm(30);
    struct ibv_context *other = open_first();
    errno = 0;
    CHECK(other && ibv_get_async_event(ctx, &ae) == -1 && errno == EAGAIN, 12);
    CHECK(ibv_close_device(other) == 0, 13);
    return 0;
}
"#;
    c_ok(code, None);
}

/// Each context has an `async_fd` of its own, as each has its own event
/// file in the kernel: its own flags, and readable for its own events,
/// even when another context of the device took them off the device's
/// one event queue.
#[test]
fn each_context_has_an_async_fd_of_its_own() {
    let code = r#"
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>
int main(void) {
    alarm(60);
    struct ibv_context *x = open_first(), *y = open_first();
    CHECK(x && y && x->async_fd != y->async_fd, 1);
    CHECK(fcntl(x->async_fd, F_SETFL, fcntl(x->async_fd, F_GETFL) | O_NONBLOCK) == 0, 2);
    CHECK(!(fcntl(y->async_fd, F_GETFL) & O_NONBLOCK), 3);
    /* An event of y's: an access error on its QP b. */
    struct ibv_qp *b = access_error(y);
    CHECK(b, 4);
    /* x's fd tells of the device's event, which may be anyone's; x takes
       it off the device's queue, finds it is y's, and says EAGAIN. */
    struct pollfd px = { .fd = x->async_fd, .events = POLLIN };
    CHECK(poll(&px, 1, 5000) == 1, 5);
    struct ibv_async_event ev;
    errno = 0;
    CHECK(ibv_get_async_event(x, &ev) == -1 && errno == EAGAIN, 6);
    /* y's fd tells of it all the same, and y gets it. */
    struct pollfd py = { .fd = y->async_fd, .events = POLLIN };
    CHECK(poll(&py, 1, 5000) == 1, 7);
    CHECK(ibv_get_async_event(y, &ev) == 0 && ev.event_type == IBV_EVENT_QP_ACCESS_ERR && ev.element.qp == b, 8);
    ibv_ack_async_event(&ev);
    /* Then neither tells of anything. */
    px.revents = py.revents = 0;
    CHECK(poll(&px, 1, 100) == 0 && poll(&py, 1, 100) == 0, 9);
    return 0;
}
"#;
    c_ok(code, None);
}

/// A signal handler ends a wait for an event as it ends libibverbs' read
/// of the event file: `EINTR` after a handler without `SA_RESTART` (qperf
/// ends each test with such a `SIGALRM`, then looks at its flag), the
/// wait going on after one with it, until the event comes.
#[test]
fn a_signal_handler_ends_event_waits_as_in_libibverbs() {
    let code = r#"
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <sys/time.h>
#include <unistd.h>
static volatile sig_atomic_t alarms;
static void on_alarm(int s) { (void)s; alarms++; }
/* SIGALRM every 50 ms from now (an alarm before the wait begins ends
   nothing: the next one does), handled with `flags`. */
static int handle(int flags) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = flags;
    struct itimerval t = { { 0, 50000 }, { 0, 50000 } };
    alarms = 0;
    return sigaction(SIGALRM, &sa, NULL) || setitimer(ITIMER_REAL, &t, NULL);
}
static void quiet(void) {
    struct itimerval t = { { 0, 0 }, { 0, 0 } };
    setitimer(ITIMER_REAL, &t, NULL);
}
/* A wait that no signal ends fails the test rather than hang it. */
static void *watchdog(void *arg) {
    (void)arg;
    sleep(60);
    printf("a wait went on after its signal\n");
    fflush(stdout);
    _exit(99);
}
static struct ibv_qp *writer;
static char *wbuf;
static struct ibv_mr *wmr;
static void *write_later(void *arg) {
    (void)arg;
    usleep(400000);
    write_within(writer, wbuf, wmr, wmr->rkey);
    return NULL;
}
int main(void) {
    /* The threads this one starts block SIGALRM (they inherit its mask):
       their sleeps are not cut short. */
    pthread_t t;
    sigset_t alrm;
    sigemptyset(&alrm);
    sigaddset(&alrm, SIGALRM);
    pthread_sigmask(SIG_BLOCK, &alrm, NULL);
    CHECK(pthread_create(&t, NULL, watchdog, NULL) == 0, 12);
    pthread_sigmask(SIG_UNBLOCK, &alrm, NULL);
    struct ibv_context *ctx = open_first();
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_comp_channel *ch = ibv_create_comp_channel(ctx);
    struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, ch, 0);
    CHECK(cq && ibv_req_notify_cq(cq, 0) == 0, 1);
    struct ibv_cq *ev_cq; void *ev_ctx;
    CHECK(handle(0) == 0, 2);
    errno = 0;
    CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == -1 && errno == EINTR && alarms >= 1, 3);
    quiet();
    /* Events already waiting (the port's) are taken first. */
    struct ibv_async_event ae;
    int fl = fcntl(ctx->async_fd, F_GETFL);
    fcntl(ctx->async_fd, F_SETFL, fl | O_NONBLOCK);
    while (ibv_get_async_event(ctx, &ae) == 0) ibv_ack_async_event(&ae);
    fcntl(ctx->async_fd, F_SETFL, fl);
    CHECK(handle(0) == 0, 4);
    errno = 0;
    CHECK(ibv_get_async_event(ctx, &ae) == -1 && errno == EINTR && alarms >= 1, 5);
    quiet();
    struct ibv_qp *a = rc_qp(pd, cq, 4, 1, 0), *b = rc_qp(pd, cq, 4, 1, 0);
    union ibv_gid gid;
    ibv_query_gid(ctx, 1, 0, &gid);
    CHECK(a && b && !to_rts(a, b->qp_num, &gid) && !to_rts(b, a->qp_num, &gid), 6);
    static char buf[64];
    struct ibv_mr *mr = ibv_reg_mr(pd, buf, sizeof buf, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    CHECK(mr != NULL, 5);
    /* Alarms every 50 ms, the completion at 400. */
    writer = a;
    wbuf = buf; wmr = mr;
    pthread_sigmask(SIG_BLOCK, &alrm, NULL);
    CHECK(pthread_create(&t, NULL, write_later, NULL) == 0, 6);
    pthread_sigmask(SIG_UNBLOCK, &alrm, NULL);
    CHECK(handle(SA_RESTART) == 0, 6);
    CHECK(ibv_get_cq_event(ch, &ev_cq, &ev_ctx) == 0 && ev_cq == cq, 7);
    CHECK(alarms >= 2, 8);
    quiet();
    pthread_join(t, NULL);
    ibv_ack_cq_events(cq, 1);
    return 0;
}
"#;
    c_ok(code, None);
}

/// What UCX asks of a device besides the verbs: the uverbs name a kernel
/// would give it (UCX looks for /dev/infiniband/<dev_name>), and an AH
/// whose flow label is wider than the GRH's 20 bits (UCX passes
/// 0xffffffff), which kernel providers take and mask.
#[test]
fn what_ucx_asks_of_a_device() {
    let code = r#"
int main(void) {
    struct ibv_device **list = ibv_get_device_list(NULL);
    CHECK(list && list[0] && strcmp(list[0]->dev_name, "uverbs0") == 0, 1);
    ibv_free_device_list(list);
    struct ibv_context *ctx = open_first();
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    union ibv_gid gid;
    CHECK(pd && ibv_query_gid(ctx, 1, 0, &gid) == 0, 2);
    struct ibv_ah_attr at;
    memset(&at, 0, sizeof at);
    at.is_global = 1;
    at.port_num = 1;
    at.dlid = 0xc000;
    at.grh.dgid = gid;
    at.grh.hop_limit = 64;
    at.grh.flow_label = 0xffffffff;
    struct ibv_ah *ah = ibv_create_ah(pd, &at);
    CHECK(ah && ibv_destroy_ah(ah) == 0, 3);
    return 0;
}
"#;
    c_ok(code, None);
}

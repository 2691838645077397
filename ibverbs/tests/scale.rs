//! What an MPI job asks of the library at scale and across `fork`: every
//! QP the device reports, tens of thousands of address handles, and
//! registered memory that keeps working in a parent whose child (as
//! Open MPI's launcher and a program's `system` do) shares its pages
//! copy-on-write.

mod common;

use common::c_ok;

#[test]
fn every_qp_the_device_reports_and_many_address_handles() {
    let code = r#"
#define AHS 20000
int main(void) {
    struct ibv_context *ctx = open_first();
    CHECK(ctx, 1);
    struct ibv_device_attr da;
    CHECK(ibv_query_device(ctx, &da) == 0 && da.max_qp >= 1024, 2);
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_cq *cq = ibv_create_cq(ctx, 64, NULL, NULL, 0);
    CHECK(pd && cq, 3);
    /* QPNs 0 and 1 are the special QPs': every other one is ours. */
    struct ibv_qp **qps = calloc(da.max_qp, sizeof *qps);
    int n = 0;
    for (; n < da.max_qp; n++) {
        qps[n] = rc_qp(pd, cq, 2, 1, 0);
        if (!qps[n]) break;
    }
    CHECK(n == da.max_qp - 2 && errno == ENOMEM, 4);
    /* Each is its own: the last one made goes to RTS. */
    union ibv_gid gid;
    CHECK(ibv_query_gid(ctx, 1, 0, &gid) == 0, 5);
    CHECK(to_rts(qps[n - 1], qps[n - 1]->qp_num, &gid) == 0, 6);
    for (int i = 0; i < n; i++) CHECK(ibv_destroy_qp(qps[i]) == 0, 7);
    CHECK(da.max_ah >= AHS, 8);
    struct ibv_ah **ahs = calloc(AHS, sizeof *ahs);
    struct ibv_ah_attr at;
    memset(&at, 0, sizeof at);
    at.is_global = 1; at.port_num = 1; at.grh.hop_limit = 64; at.grh.dgid = gid;
    for (int i = 0; i < AHS; i++) {
        /* A peer each: ::ffff:10.x.y.z */
        at.grh.dgid.raw[13] = (unsigned char)(i >> 16);
        at.grh.dgid.raw[14] = (unsigned char)(i >> 8);
        at.grh.dgid.raw[15] = (unsigned char)i;
        ahs[i] = ibv_create_ah(pd, &at);
        CHECK(ahs[i], 9);
    }
    /* Freed in an order of their own, and none twice. */
    for (int i = 0; i < AHS; i += 2) CHECK(ibv_destroy_ah(ahs[i]) == 0, 10);
    for (int i = AHS - 1; i > 0; i -= 2) CHECK(ibv_destroy_ah(ahs[i]) == 0, 11);
    CHECK(ibv_destroy_ah(ahs[0]) == EINVAL, 12);
    /* The QPs' numbers are free again. */
    struct ibv_qp *again = rc_qp(pd, cq, 2, 1, 0);
    CHECK(again && ibv_destroy_qp(again) == 0, 13);
    CHECK(ibv_destroy_cq(cq) == 0 && ibv_dealloc_pd(pd) == 0, 14);
    printf("%d QPs, %d AHs\n", n, AHS);
    return 0;
}
"#;
    let out = c_ok(code, None);
    assert!(out.contains(" QPs, 20000 AHs"), "{out}");
}

#[test]
fn registered_memory_works_in_a_parent_after_fork() {
    let code = r#"
#include <sys/wait.h>
#include <unistd.h>
#define LEN 65536
int main(void) {
    CHECK(ibv_fork_init() == 0 && ibv_is_fork_initialized() == IBV_FORK_UNNEEDED, 1);
    struct ibv_context *ctx = open_first();
    struct ibv_pd *pd = ctx ? ibv_alloc_pd(ctx) : NULL;
    struct ibv_cq *cq = pd ? ibv_create_cq(ctx, 8, NULL, NULL, 0) : NULL;
    CHECK(cq, 2);
    unsigned char *src = malloc(LEN), *dst = malloc(LEN);
    for (int i = 0; i < LEN; i++) { src[i] = (unsigned char)(i * 7 + 3); dst[i] = 0x11; }
    struct ibv_mr *smr = ibv_reg_mr(pd, src, LEN, 0);
    struct ibv_mr *dmr = ibv_reg_mr(pd, dst, LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);
    struct ibv_qp *qp = rc_qp(pd, cq, 4, 1, 0);
    union ibv_gid gid;
    CHECK(smr && dmr && qp && ibv_query_gid(ctx, 1, 0, &gid) == 0, 3);
    CHECK(to_rts(qp, qp->qp_num, &gid) == 0, 4);
    /* The child shares every page copy-on-write; it writes its own copy
     * of the destination and stays until the parent's write is done. */
    int pipefd[2];
    CHECK(pipe(pipefd) == 0, 5);
    pid_t child = fork();
    CHECK(child >= 0, 6);
    if (child == 0) {
        memset(dst, 0x22, LEN);
        char c;
        (void)!read(pipefd[0], &c, 1);
        _exit(dst[0] == 0x22 && dst[LEN - 1] == 0x22 ? 0 : 9);
    }
    /* The parent writes first: its pages are copies now, where a NIC
     * holding the pages pinned at registration would still write the
     * originals. */
    memset(dst, 0x33, LEN);
    struct ibv_sge sge = { (uintptr_t)src, LEN, smr->lkey };
    struct ibv_send_wr wr, *bad;
    memset(&wr, 0, sizeof wr);
    wr.opcode = IBV_WR_RDMA_WRITE; wr.sg_list = &sge; wr.num_sge = 1;
    wr.send_flags = IBV_SEND_SIGNALED;
    wr.wr.rdma.remote_addr = (uintptr_t)dst; wr.wr.rdma.rkey = dmr->rkey;
    CHECK(ibv_post_send(qp, &wr, &bad) == 0, 7);
    struct ibv_wc wc;
    CHECK(one(cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS, 8);
    CHECK(memcmp(src, dst, LEN) == 0, 10);
    CHECK(write(pipefd[1], "x", 1) == 1, 11);
    int st;
    CHECK(waitpid(child, &st, 0) == child && WIFEXITED(st) && WEXITSTATUS(st) == 0, 12);
    /* And after the child is gone. */
    memset(dst, 0, LEN);
    CHECK(ibv_post_send(qp, &wr, &bad) == 0, 13);
    CHECK(one(cq, &wc) == 1 && wc.status == IBV_WC_SUCCESS && memcmp(src, dst, LEN) == 0, 14);
    printf("ok\n");
    return 0;
}
"#;
    assert_eq!(c_ok(code, None), "ok\n");
}

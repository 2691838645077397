/*
 * verbs_peer: the guest half of the rxe interop test (tests/interop/run.sh),
 * written against plain libibverbs so that it runs over Linux rxe.
 *
 * It is the C twin of rnic's examples/rc_pingpong.rs: ibv_rc_pingpong's
 * options, its out-of-band exchange (LID:QPN:PSN:GID over TCP) and its
 * ping-pong, plus what ibv_rc_pingpong cannot check:
 *   -P  every message carries a pattern of its sender, sequence number and
 *       offset, and every received message is checked byte for byte;
 *   -O  after the ping-pong, RDMA WRITE and READ of 1 KiB posted together
 *       (the READ returns what the WRITE placed), RDMA WRITE, READ,
 *       WRITE with immediate,
 *       compare-and-swap and fetch-and-add on the peer's memory, each
 *       result checked, then what the peer did to this side's memory.
 * The two programs must agree on every byte of this protocol; the Rust
 * side's comments say what each step is for.
 *
 * Usage: verbs_peer [-d dev] [-g gid_idx] [-p port] [-s size] [-m mtu]
 *                   [-n iters] [-r rx_depth] [-t timeout] [-e] [-P] [-O] [server]
 * Exits 0 when every check passed.
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include <infiniband/verbs.h>

enum { RECV_WRID = 1, SEND_WRID = 2 };
enum { OPS_LEN = 128 << 10, WAIT_S = 30 };

static struct {
	const char *dev, *server;
	int gid_idx, port, mtu, iters, rx_depth, timeout, events, pattern, ops;
	unsigned size;
} opt = { .port = 18515, .size = 4096, .mtu = 1024, .iters = 1000,
	  .rx_depth = 500, .timeout = 14 };

static struct ibv_context *ctx;
static struct ibv_comp_channel *channel;
static struct ibv_pd *pd;
static struct ibv_cq *cq;
static struct ibv_qp *qp;
static int role; /* 0 server, 1 client */

static void __attribute__((noreturn, format(printf, 1, 2))) FAIL(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

struct dest { unsigned lid, qpn, psn; union ibv_gid gid; };

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec + t.tv_nsec / 1e9;
}

/* Byte `i` of message `k` sent by side `r`; the i >> 8 term tells 256-byte
 * blocks apart, so a packet placed at the wrong offset shows. */
static uint8_t pattern(int r, unsigned k, size_t i)
{
	return (uint8_t)(i * 31 + (i >> 8) + k * 17 + r * 101);
}

/* The bytes side `r` writes into its peer with --ops. */
static uint8_t ops_pattern(int r, size_t i)
{
	return (uint8_t)(i * 7 + r * 13);
}

static void xfer(int fd, void *buf, size_t n, int out)
{
	size_t done = 0;
	while (done < n) {
		ssize_t k = out ? write(fd, (char *)buf + done, n - done)
				: read(fd, (char *)buf + done, n - done);
		if (k <= 0)
			FAIL("out-of-band %s failed: %s", out ? "write" : "read",
			     k ? strerror(errno) : "peer closed");
		done += k;
	}
}

static void put_dest(int fd, const struct dest *d)
{
	char msg[52] = { 0 }, *p;
	p = msg + sprintf(msg, "%04x:%06x:%06x:", d->lid, d->qpn, d->psn);
	for (int i = 0; i < 4; i++) {
		uint32_t w;
		memcpy(&w, d->gid.raw + 4 * i, 4);
		p += sprintf(p, "%08x", htonl(w));
	}
	xfer(fd, msg, sizeof msg, 1);
}

static void get_dest(int fd, struct dest *d)
{
	char msg[52], gid[33];
	xfer(fd, msg, sizeof msg, 0);
	msg[51] = 0;
	if (sscanf(msg, "%x:%x:%x:%32s", &d->lid, &d->qpn, &d->psn, gid) != 4 ||
	    strlen(gid) != 32)
		FAIL("malformed address \"%s\"", msg);
	for (int i = 0; i < 4; i++) {
		char w[9];
		memcpy(w, gid + 8 * i, 8);
		w[8] = 0;
		uint32_t v = htonl(strtoul(w, NULL, 16));
		memcpy(d->gid.raw + 4 * i, &v, 4);
	}
}

static void print_dest(const char *what, const struct dest *d)
{
	char gid[INET6_ADDRSTRLEN];
	inet_ntop(AF_INET6, d->gid.raw, gid, sizeof gid);
	printf("  %s address: %sLID 0x%04x, QPN 0x%06x, PSN 0x%06x, GID %s\n", what,
	       strcmp(what, "local") ? "" : " ", d->lid, d->qpn, d->psn, gid);
}

static enum ibv_mtu mtu_enum(int m)
{
	switch (m) {
	case 256: return IBV_MTU_256;
	case 512: return IBV_MTU_512;
	case 1024: return IBV_MTU_1024;
	case 2048: return IBV_MTU_2048;
	case 4096: return IBV_MTU_4096;
	}
	FAIL("path MTU %d is none of 256..4096", m);
}

static void connect_qp(const struct dest *rem, unsigned my_psn)
{
	int rd = opt.ops ? 16 : 1;
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_RTR, .path_mtu = mtu_enum(opt.mtu),
		.dest_qp_num = rem->qpn, .rq_psn = rem->psn,
		.max_dest_rd_atomic = rd, .min_rnr_timer = 12,
		.ah_attr = { .is_global = 1, .port_num = 1,
			     .grh = { .dgid = rem->gid, .sgid_index = opt.gid_idx,
				      .hop_limit = 1 } },
	};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
			  IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
			  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
		FAIL("Failed to modify QP to RTR");
	a.qp_state = IBV_QPS_RTS;
	a.timeout = opt.timeout;
	a.retry_cnt = 7;
	a.rnr_retry = 7;
	a.sq_psn = my_psn;
	a.max_rd_atomic = rd;
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
			  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
		FAIL("Failed to modify QP to RTS");
}

/* The out-of-band TCP connection: connect to the server, or accept one. */
static int oob_connect(void)
{
	char port[8];
	struct addrinfo hints = { .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM };
	struct addrinfo *res, *t;
	int fd = -1, one = 1;
	snprintf(port, sizeof port, "%d", opt.port);
	if (!opt.server)
		hints.ai_flags = AI_PASSIVE;
	if (getaddrinfo(opt.server, port, &hints, &res))
		FAIL("cannot resolve %s", opt.server ? opt.server : "the listen address");
	for (t = res; t; t = t->ai_next) {
		fd = socket(t->ai_family, t->ai_socktype, t->ai_protocol);
		if (fd < 0)
			continue;
		if (opt.server ? !connect(fd, t->ai_addr, t->ai_addrlen)
			       : (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one),
				  !bind(fd, t->ai_addr, t->ai_addrlen)))
			break;
		close(fd);
		fd = -1;
	}
	freeaddrinfo(res);
	if (fd < 0 && opt.server)
		FAIL("Couldn't connect to %s:%d", opt.server, opt.port);
	if (fd < 0)
		FAIL("Couldn't listen to port %d", opt.port);
	if (opt.server)
		return fd;
	listen(fd, 1);
	int c = accept(fd, NULL, NULL);
	close(fd);
	if (c < 0)
		FAIL("accept() failed");
	return c;
}

/* Waits for completions; every wait ends within WAIT_S seconds. */
static int wait_wc(struct ibv_wc *wc, int max)
{
	double end = now() + WAIT_S;
	for (;;) {
		int n = ibv_poll_cq(cq, max, wc);
		if (n < 0)
			FAIL("poll CQ failed %d", n);
		if (n)
			return n;
		if (now() > end)
			FAIL("no completion for %d s", WAIT_S);
		if (!opt.events)
			continue;
		if (ibv_req_notify_cq(cq, 0))
			FAIL("Couldn't request CQ notification");
		n = ibv_poll_cq(cq, max, wc); /* one may have come before the request */
		if (n < 0)
			FAIL("poll CQ failed %d", n);
		if (n)
			return n;
		struct pollfd p = { .fd = channel->fd, .events = POLLIN };
		if (poll(&p, 1, 1000) == 1) {
			struct ibv_cq *ev_cq;
			void *ev_ctx;
			if (ibv_get_cq_event(channel, &ev_cq, &ev_ctx) || ev_cq != cq)
				FAIL("Failed to get cq_event");
			ibv_ack_cq_events(cq, 1);
		}
	}
}

static char *buf;
static struct ibv_mr *mr;

static void post_recv(int n)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = opt.size, .lkey = mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = RECV_WRID, .sg_list = &sge, .num_sge = 1 }, *bad;
	for (int i = 0; i < n; i++)
		if (ibv_post_recv(qp, &wr, &bad))
			FAIL("Couldn't post receive");
}

/* Posts the buffer as the next SEND of the ping-pong. */
static void post_send(void)
{
	struct ibv_sge sge = { .addr = (uintptr_t)buf, .length = opt.size, .lkey = mr->lkey };
	struct ibv_send_wr wr = { .wr_id = SEND_WRID, .sg_list = &sge, .num_sge = 1,
				  .opcode = IBV_WR_SEND, .send_flags = IBV_SEND_SIGNALED }, *bad;
	if (ibv_post_send(qp, &wr, &bad))
		FAIL("Couldn't post send: %s", strerror(errno));
}

static void check_write_imm(const struct ibv_wc *w)
{
	uint32_t want = htonl(0x12340000u | (1 - role));
	if (w->status != IBV_WC_SUCCESS || w->wr_id != RECV_WRID ||
	    w->opcode != IBV_WC_RECV_RDMA_WITH_IMM || w->byte_len != 1024 ||
	    !(w->wc_flags & IBV_WC_WITH_IMM) || w->imm_data != want)
		FAIL("WRITE with immediate arrived as status %s opcode %d len %u imm 0x%08x",
		     ibv_wc_status_str(w->status), w->opcode, w->byte_len, ntohl(w->imm_data));
	printf("  WRITE with immediate received: ok\n");
}

static int imm_seen;

/* Waits for the completions of work requests first .. first + n - 1, in
 * that order, taking the peer's WRITE with immediate if it comes
 * meanwhile. */
static void await_wrs(uint64_t first, int n)
{
	for (int done = 0; done < n;) {
		struct ibv_wc wc;
		wait_wc(&wc, 1);
		if (wc.status != IBV_WC_SUCCESS)
			FAIL("wr_id %lu failed: %s", (unsigned long)wc.wr_id,
			     ibv_wc_status_str(wc.status));
		if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
			check_write_imm(&wc);
			imm_seen = 1;
		} else if (wc.wr_id == first + done) {
			done++;
		} else if (wc.wr_id > first + done && wc.wr_id < first + n) {
			FAIL("completion of wr_id %lu out of order", (unsigned long)wc.wr_id);
		}
	}
}

/* Posts one signalled work request on one SGE and waits for its
 * completion. */
static void exec(struct ibv_send_wr *wr, void *addr, unsigned len, uint32_t lkey)
{
	struct ibv_sge sge = { .addr = (uintptr_t)addr, .length = len, .lkey = lkey };
	struct ibv_send_wr *bad;
	wr->sg_list = &sge;
	wr->num_sge = 1;
	wr->send_flags = IBV_SEND_SIGNALED;
	if (ibv_post_send(qp, wr, &bad))
		FAIL("Couldn't post wr_id %lu (opcode %d): %s", (unsigned long)wr->wr_id,
		     wr->opcode, strerror(errno));
	await_wrs(wr->wr_id, 1);
}

/* Posts a RDMA WRITE of len bytes from src and a READ of them back into
 * dst, to raddr/rkey, in one call, and waits for both: the responder
 * executes them in order, so the READ returns what the WRITE placed, also
 * when answers are lost and the requester sends both again. */
static void write_then_read(void *src, void *dst, unsigned len, uint32_t lkey,
			    uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sw = { .addr = (uintptr_t)src, .length = len, .lkey = lkey };
	struct ibv_sge sr = { .addr = (uintptr_t)dst, .length = len, .lkey = lkey };
	struct ibv_send_wr rd = { .wr_id = 9, .opcode = IBV_WR_RDMA_READ, .sg_list = &sr,
				  .num_sge = 1, .send_flags = IBV_SEND_SIGNALED };
	struct ibv_send_wr wr = { .wr_id = 8, .opcode = IBV_WR_RDMA_WRITE, .sg_list = &sw,
				  .num_sge = 1, .send_flags = IBV_SEND_SIGNALED, .next = &rd };
	struct ibv_send_wr *bad;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	rd.wr.rdma.remote_addr = raddr;
	rd.wr.rdma.rkey = rkey;
	if (ibv_post_send(qp, &wr, &bad))
		FAIL("Couldn't post the WRITE and the READ: %s", strerror(errno));
	await_wrs(8, 2);
}

/* An RDMA operation at raddr/rkey of the peer's memory. */
static struct ibv_send_wr rdma(uint64_t id, enum ibv_wr_opcode op, uint64_t raddr,
			       uint32_t rkey)
{
	struct ibv_send_wr wr = { .wr_id = id, .opcode = op };
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	return wr;
}

/* An atomic on the peer's word at raddr/rkey. */
static struct ibv_send_wr atomic(uint64_t id, enum ibv_wr_opcode op, uint64_t raddr,
				 uint32_t rkey, uint64_t compare_add, uint64_t swap)
{
	struct ibv_send_wr wr = { .wr_id = id, .opcode = op };
	wr.wr.atomic.remote_addr = raddr;
	wr.wr.atomic.rkey = rkey;
	wr.wr.atomic.compare_add = compare_add;
	wr.wr.atomic.swap = swap;
	return wr;
}

static void ops(int tcp)
{
	int all = IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
		  IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC;
	char *mine = aligned_alloc(4096, OPS_LEN), *scratch = aligned_alloc(4096, OPS_LEN);
	memset(mine, 0, OPS_LEN);
	memset(scratch, 0, OPS_LEN);
	struct ibv_mr *mmr = ibv_reg_mr(pd, mine, OPS_LEN, all);
	struct ibv_mr *smr = ibv_reg_mr(pd, scratch, OPS_LEN, all);
	if (!mmr || !smr)
		FAIL("Couldn't register MR");
	char msg[35], peer[35];
	snprintf(msg, sizeof msg, "%016lx:%08x:%08x", (unsigned long)(uintptr_t)mine,
		 mmr->rkey, OPS_LEN);
	xfer(tcp, msg, sizeof msg, 1);
	xfer(tcp, peer, sizeof peer, 0);
	peer[34] = 0;
	unsigned long raddr;
	unsigned rkey, rlen;
	if (sscanf(peer, "%lx:%x:%x", &raddr, &rkey, &rlen) != 3)
		FAIL("malformed memory \"%s\"", peer);
	if (rlen != OPS_LEN)
		FAIL("peer memory of %u bytes", rlen);
	size_t half = OPS_LEN / 2;
	for (size_t i = 0; i < half; i++)
		scratch[i] = ops_pattern(role, i);
	/* 1 KiB written and read back in one post, at a part of the peer's
	 * memory nothing else uses: one packet each way at either MTU. */
	size_t small = half + 2048;
	write_then_read(scratch, scratch + small, 1024, smr->lkey, raddr + small, rkey);
	if (memcmp(scratch, scratch + small, 1024))
		FAIL("the RDMA READ posted with an RDMA WRITE did not return what it placed");
	printf("  RDMA WRITE and READ of 1024 bytes in one post: ok\n");
	struct ibv_send_wr wr = rdma(10, IBV_WR_RDMA_WRITE, raddr, rkey);
	exec(&wr, scratch, half, smr->lkey);
	wr = rdma(11, IBV_WR_RDMA_READ, raddr, rkey);
	exec(&wr, scratch + half, half, smr->lkey);
	if (memcmp(scratch, scratch + half, half))
		FAIL("RDMA READ did not return what RDMA WRITE placed");
	printf("  RDMA WRITE and READ of %zu bytes: ok\n", half);
	wr = rdma(12, IBV_WR_RDMA_WRITE_WITH_IMM, raddr + half, rkey);
	wr.imm_data = htonl(0x12340000u | role);
	exec(&wr, scratch, 1024, smr->lkey);

	uint64_t *result = (uint64_t *)(scratch + OPS_LEN - 64);
	static const uint64_t cas[3][3] = { { 0, 7, 0 }, { 7, 9, 7 }, { 1, 5, 9 } };
	for (int i = 0; i < 3; i++) {
		wr = atomic(20 + i, IBV_WR_ATOMIC_CMP_AND_SWP, raddr + OPS_LEN - 16, rkey,
			    cas[i][0], cas[i][1]);
		exec(&wr, result, 8, smr->lkey);
		if (*result != cas[i][2])
			FAIL("compare-and-swap %d returned %lu, not %lu", i,
			     (unsigned long)*result, (unsigned long)cas[i][2]);
	}
	for (int i = 0; i < 3; i++) {
		wr = atomic(30 + i, IBV_WR_ATOMIC_FETCH_AND_ADD, raddr + OPS_LEN - 8, rkey, 5, 0);
		exec(&wr, result, 8, smr->lkey);
		if (*result != 5u * i)
			FAIL("fetch-and-add %d returned %lu, not %d", i, (unsigned long)*result, 5 * i);
	}
	printf("  compare-and-swap and fetch-and-add: ok\n");
	while (!imm_seen) {
		struct ibv_wc wc;
		wait_wc(&wc, 1);
		if (wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
			check_write_imm(&wc);
			imm_seen = 1;
		}
	}
	char done[4] = "ops";
	xfer(tcp, done, sizeof done, 1);
	xfer(tcp, done, sizeof done, 0);
	for (size_t i = 0; i < half; i++)
		if ((uint8_t)mine[i] != ops_pattern(1 - role, i))
			FAIL("the peer's RDMA WRITE did not land (byte %zu)", i);
	for (size_t i = 0; i < 1024; i++)
		if ((uint8_t)mine[half + i] != ops_pattern(1 - role, i))
			FAIL("the peer's WRITE with immediate did not land (byte %zu)", i);
	uint64_t words[2];
	memcpy(words, mine + OPS_LEN - 16, 16);
	if (words[0] != 9 || words[1] != 15)
		FAIL("the peer's atomics left (%lu, %lu), not (9, 15)",
		     (unsigned long)words[0], (unsigned long)words[1]);
	printf("  the peer's WRITE, WRITE with immediate and atomics on this side: ok\n");
	ibv_dereg_mr(mmr);
	ibv_dereg_mr(smr);
	free(mine);
	free(scratch);
}

static void fill(unsigned k)
{
	if (opt.pattern)
		for (size_t i = 0; i < opt.size; i++)
			buf[i] = pattern(role, k, i);
}

static void check(unsigned k, const struct ibv_wc *w)
{
	if (w->byte_len != opt.size)
		FAIL("received %u bytes, not %u", w->byte_len, opt.size);
	for (size_t i = 0; i < opt.size; i++) {
		uint8_t want = opt.pattern ? pattern(1 - role, k, i) : 0x7b;
		if ((uint8_t)buf[i] != want)
			FAIL("message %u: byte %zu is 0x%02x, not 0x%02x", k, i,
			     (uint8_t)buf[i], want);
	}
}

int main(int argc, char **argv)
{
	int c;
	while ((c = getopt(argc, argv, "d:g:p:s:m:n:r:t:ePO")) != -1) {
		switch (c) {
		case 'd': opt.dev = optarg; break;
		case 'g': opt.gid_idx = atoi(optarg); break;
		case 'p': opt.port = atoi(optarg); break;
		case 's': opt.size = strtoul(optarg, NULL, 0); break;
		case 'm': opt.mtu = atoi(optarg); break;
		case 'n': opt.iters = atoi(optarg); break;
		case 'r': opt.rx_depth = atoi(optarg); break;
		case 't': opt.timeout = atoi(optarg); break;
		case 'e': opt.events = 1; break;
		case 'P': opt.pattern = 1; break;
		case 'O': opt.ops = 1; break;
		default: FAIL("usage: %s [-d dev] [-g gid] [-p port] [-s size] [-m mtu] "
			      "[-n iters] [-r rx_depth] [-t timeout] [-e] [-P] [-O] [server]",
			      argv[0]);
		}
	}
	if (optind < argc)
		opt.server = argv[optind];
	role = opt.server != NULL;
	if (opt.size < 1 || opt.rx_depth < 2)
		FAIL("size must be at least 1 and rx_depth at least 2");

	int num;
	struct ibv_device **list = ibv_get_device_list(&num), *dev = NULL;
	for (int i = 0; list && i < num; i++)
		if (!opt.dev || !strcmp(ibv_get_device_name(list[i]), opt.dev)) {
			dev = list[i];
			break;
		}
	if (!dev)
		FAIL("IB device %s not found", opt.dev ? opt.dev : "(any)");
	if (!(ctx = ibv_open_device(dev)))
		FAIL("Couldn't get context");
	if (opt.events && !(channel = ibv_create_comp_channel(ctx)))
		FAIL("Couldn't create completion channel");
	if (!(pd = ibv_alloc_pd(ctx)))
		FAIL("Couldn't allocate PD");
	buf = aligned_alloc(4096, (opt.size + 4095) & ~4095u);
	memset(buf, 0x7b, opt.size);
	if (!(mr = ibv_reg_mr(pd, buf, opt.size, IBV_ACCESS_LOCAL_WRITE)))
		FAIL("Couldn't register MR");
	if (!(cq = ibv_create_cq(ctx, opt.rx_depth + 16, NULL, channel, 0)))
		FAIL("Couldn't create CQ");
	struct ibv_qp_init_attr ia = {
		.send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = opt.ops ? 16 : 1, .max_recv_wr = opt.rx_depth,
			 .max_send_sge = 1, .max_recv_sge = 1 },
	};
	if (!(qp = ibv_create_qp(pd, &ia)))
		FAIL("Couldn't create QP");
	struct ibv_qp_attr a = {
		.qp_state = IBV_QPS_INIT, .port_num = 1,
		.qp_access_flags = opt.ops ? IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |
						     IBV_ACCESS_REMOTE_ATOMIC : 0,
	};
	if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
			  IBV_QP_ACCESS_FLAGS))
		FAIL("Failed to modify QP to INIT");
	post_recv(opt.rx_depth);
	int routs = opt.rx_depth;

	struct dest me = { .qpn = qp->qp_num }, rem;
	srand48(getpid() * time(NULL));
	me.psn = lrand48() & 0xffffff;
	if (ibv_query_gid(ctx, 1, opt.gid_idx, &me.gid))
		FAIL("can't read sgid of index %d", opt.gid_idx);
	print_dest("local", &me);
	int tcp = oob_connect();
	if (opt.server) {
		put_dest(tcp, &me);
		get_dest(tcp, &rem);
		connect_qp(&rem, me.psn);
		xfer(tcp, "done", 5, 1);
	} else {
		char done[5];
		get_dest(tcp, &rem);
		connect_qp(&rem, me.psn);
		put_dest(tcp, &me);
		xfer(tcp, done, 5, 0);
		if (memcmp(done, "done", 5))
			FAIL("expected \"done\"");
	}
	print_dest("remote", &rem);

	/* The ping-pong: a send goes out once the last one completed and a
	 * receive arrived; the client starts. */
	unsigned scnt = 0, rcnt = 0;
	int pending = RECV_WRID;
	double start = now();
	if (opt.server) {
		fill(0);
		post_send();
		pending |= SEND_WRID;
	}
	while (rcnt < (unsigned)opt.iters || scnt < (unsigned)opt.iters) {
		struct ibv_wc wc[2];
		int n = wait_wc(wc, 2);
		for (int i = 0; i < n; i++) {
			if (wc[i].status != IBV_WC_SUCCESS)
				FAIL("Failed status %s (%d) for wr_id %d",
				     ibv_wc_status_str(wc[i].status), wc[i].status,
				     (int)wc[i].wr_id);
			if (wc[i].wr_id == SEND_WRID) {
				scnt++;
			} else if (wc[i].wr_id == RECV_WRID) {
				check(rcnt, &wc[i]);
				if (--routs <= 1) {
					post_recv(opt.rx_depth - routs);
					routs = opt.rx_depth;
				}
				rcnt++;
			} else {
				FAIL("Completion for unknown wr_id %d", (int)wc[i].wr_id);
			}
			pending &= ~(int)wc[i].wr_id;
			if (scnt < (unsigned)opt.iters && !pending) {
				fill(scnt);
				post_send();
				pending = RECV_WRID | SEND_WRID;
			}
		}
	}
	double usec = (now() - start) * 1e6;
	long long bytes = (long long)opt.size * opt.iters * 2;
	printf("%lld bytes in %.2f seconds = %.2f Mbit/sec\n", bytes, usec / 1e6, bytes * 8. / usec);
	printf("%d iters in %.2f seconds = %.2f usec/iter\n", opt.iters, usec / 1e6, usec / opt.iters);
	if (opt.pattern)
		printf("  %u messages received, every byte as sent\n", rcnt);
	if (opt.ops)
		ops(tcp);
	close(tcp);
	if (ibv_destroy_qp(qp) || ibv_destroy_cq(cq) || ibv_dereg_mr(mr) || ibv_dealloc_pd(pd) ||
	    (channel && ibv_destroy_comp_channel(channel)) || ibv_close_device(ctx))
		FAIL("Couldn't release resources");
	ibv_free_device_list(list);
	free(buf);
	return 0;
}

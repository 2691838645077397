/*
 * rnic's MPI benchmark, in the manner of the OSU micro-benchmarks:
 * point-to-point latency (ping-pong, half round trip) and bandwidth (a
 * window of non-blocking sends) between ranks 0 and 1, and MPI_Allreduce
 * of floats over every rank, whose result every rank checks element by
 * element. Rank 0 prints one line per figure:
 *
 *   latency <bytes> <usec>
 *   bandwidth <bytes> <MB/s>
 *   allreduce <bytes> <usec>
 *
 * and the program exits non-zero (MPI_Abort) at the first wrong byte or
 * element.
 *
 *   mpirun -np N ./bench [max point-to-point bytes] [max allreduce bytes] [iterations]
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define WINDOW 64

static int rank, size;

static void fail(const char *what, long at) {
    fprintf(stderr, "bench: rank %d: %s at %ld\n", rank, what, at);
    MPI_Abort(MPI_COMM_WORLD, 2);
}

/* Fewer iterations for big messages: about the same bytes each size. */
static int iters_for(long bytes, int iters) {
    long n = (long)iters * 4096 / (bytes > 4096 ? bytes : 4096);
    return n < 10 ? 10 : (int)n;
}

static void fill(unsigned char *b, long n, int seed) {
    for (long i = 0; i < n; i++) b[i] = (unsigned char)(i * 31 + seed);
}

static void check(const unsigned char *b, long n, int seed) {
    for (long i = 0; i < n; i++)
        if (b[i] != (unsigned char)(i * 31 + seed)) fail("a wrong byte", i);
}

static void latency(unsigned char *buf, long max, int iters) {
    for (long n = 1; n <= max; n *= 2) {
        int it = iters_for(n, iters), warm = it / 10 + 1;
        double t0 = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        for (int i = 0; i < warm + it; i++) {
            if (i == warm) t0 = MPI_Wtime();
            if (rank == 0) {
                fill(buf, n, i);
                MPI_Send(buf, (int)n, MPI_BYTE, 1, 1, MPI_COMM_WORLD);
                MPI_Recv(buf, (int)n, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                if (i == warm + it - 1) check(buf, n, i + 1);
            } else if (rank == 1) {
                MPI_Recv(buf, (int)n, MPI_BYTE, 0, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                if (i == warm + it - 1) check(buf, n, i);
                fill(buf, n, i + 1);
                MPI_Send(buf, (int)n, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
            }
        }
        if (rank == 0) printf("latency %ld %.3f\n", n, (MPI_Wtime() - t0) * 1e6 / it / 2);
        fflush(stdout);
    }
}

static void bandwidth(unsigned char *buf, long max, int iters) {
    MPI_Request req[WINDOW];
    for (long n = 1; n <= max; n *= 2) {
        int it = iters_for(n * WINDOW / 8, iters), warm = 2;
        double t0 = 0;
        char ack = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank == 0) fill(buf, n, 7);
        for (int i = 0; i < warm + it; i++) {
            if (i == warm) t0 = MPI_Wtime();
            if (rank == 0) {
                for (int w = 0; w < WINDOW; w++)
                    MPI_Isend(buf, (int)n, MPI_BYTE, 1, 2, MPI_COMM_WORLD, &req[w]);
                MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
                MPI_Recv(&ack, 1, MPI_BYTE, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else if (rank == 1) {
                for (int w = 0; w < WINDOW; w++)
                    MPI_Irecv(buf, (int)n, MPI_BYTE, 0, 2, MPI_COMM_WORLD, &req[w]);
                MPI_Waitall(WINDOW, req, MPI_STATUSES_IGNORE);
                MPI_Send(&ack, 1, MPI_BYTE, 0, 3, MPI_COMM_WORLD);
            }
        }
        double t = MPI_Wtime() - t0;
        if (rank == 1) check(buf, n, 7);
        if (rank == 0) printf("bandwidth %ld %.2f\n", n, (double)n * WINDOW * it / t / 1e6);
        fflush(stdout);
    }
}

static void allreduce(long max, int iters) {
    float *in = malloc(max), *out = malloc(max);
    if (!in || !out) fail("no memory", max);
    /* Small integers: every partial sum is exact in a float. */
    float total = (float)size * (size + 1) / 2;
    for (long n = 8; n <= max; n *= 2) {
        long count = n / sizeof(float);
        int it = iters_for(n, iters / 4 + 1), warm = it / 10 + 1;
        for (long i = 0; i < count; i++) in[i] = (float)((rank + 1) * (i % 7 + 1));
        double t0 = 0;
        MPI_Barrier(MPI_COMM_WORLD);
        for (int i = 0; i < warm + it; i++) {
            if (i == warm) t0 = MPI_Wtime();
            memset(out, 0, (size_t)n);
            MPI_Allreduce(in, out, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
            if (i == 0 || i == warm + it - 1)
                for (long k = 0; k < count; k++)
                    if (out[k] != total * (float)(k % 7 + 1)) fail("a wrong sum", k);
        }
        double t = (MPI_Wtime() - t0) * 1e6 / it, slowest;
        MPI_Reduce(&t, &slowest, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (rank == 0) printf("allreduce %ld %.3f\n", n, slowest);
        fflush(stdout);
    }
    free(in);
    free(out);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    long p2p = argc > 1 ? atol(argv[1]) : 4L << 20;
    long ar = argc > 2 ? atol(argv[2]) : 64L << 20;
    int iters = argc > 3 ? atoi(argv[3]) : 1000;
    if (size < 2 || p2p < 1 || ar < 8 || iters < 1) {
        if (rank == 0) fprintf(stderr, "bench: 2 ranks or more; sizes and iterations positive\n");
        MPI_Finalize();
        return 2;
    }
    unsigned char *buf = malloc((size_t)p2p);
    if (!buf) fail("no memory", p2p);
    latency(buf, p2p, iters);
    bandwidth(buf, p2p, iters);
    allreduce(ar, iters);
    free(buf);
    MPI_Finalize();
    return 0;
}

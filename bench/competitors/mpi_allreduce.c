/* Collective timing through Open MPI, for comparison with gorun.
 *
 *   mpicc -O2 -o bin/mpi_allreduce bench/competitors/mpi_allreduce.c
 *   mpirun --allow-run-as-root --oversubscribe -np 2 --mca btl self,tcp \
 *       bin/mpi_allreduce [op=all_reduce|broadcast|all_gather|reduce_scatter|
 *                          reduce|gather|scatter|alltoall] 8 65536 ...
 *
 * Prints "mpi op=OP np=N bytes=SIZE us=MICROSECONDS" per size: the slowest
 * rank's mean time per call after a warm-up. SIZE counts the whole buffer
 * as gorun's harness does (the gathered buffer for gather, scatter and
 * all_gather, the send buffer for alltoall and reduce_scatter, rounded
 * down to whole blocks of float32 per rank); roots are rank 0. With
 * "--mca btl self,tcp" the ranks talk over loopback TCP; with
 * "self,vader" through shared memory. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void call(const char *op, float *a, float *b, long count, int size) {
    if (!strcmp(op, "reduce"))
        MPI_Reduce(a, b, count, MPI_FLOAT, MPI_SUM, 0, MPI_COMM_WORLD);
    else if (!strcmp(op, "gather"))
        MPI_Gather(a, count / size, MPI_FLOAT, b, count / size, MPI_FLOAT, 0, MPI_COMM_WORLD);
    else if (!strcmp(op, "scatter"))
        MPI_Scatter(a, count / size, MPI_FLOAT, b, count / size, MPI_FLOAT, 0, MPI_COMM_WORLD);
    else if (!strcmp(op, "alltoall"))
        MPI_Alltoall(a, count / size, MPI_FLOAT, b, count / size, MPI_FLOAT, MPI_COMM_WORLD);
    else if (!strcmp(op, "all_gather"))
        MPI_Allgather(a, count / size, MPI_FLOAT, b, count / size, MPI_FLOAT, MPI_COMM_WORLD);
    else if (!strcmp(op, "reduce_scatter"))
        MPI_Reduce_scatter_block(a, b, count / size, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    else if (!strcmp(op, "broadcast"))
        MPI_Bcast(a, count, MPI_FLOAT, 0, MPI_COMM_WORLD);
    else
        MPI_Allreduce(MPI_IN_PLACE, a, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    const char *op = "all_reduce";
    for (int a = 1; a < argc; a++) {
        if (!strncmp(argv[a], "op=", 3)) {
            op = argv[a] + 3;
            continue;
        }
        long bytes = atol(argv[a]);
        long count = bytes / 4 < 2 ? 2 : bytes / 4;
        int blocks = !strcmp(op, "gather") || !strcmp(op, "scatter") || !strcmp(op, "alltoall") ||
                     !strcmp(op, "all_gather") || !strcmp(op, "reduce_scatter");
        if (blocks) {
            count -= count % size;
            if (count < size) count = size;
        }
        float *x = malloc(count * sizeof(float)), *y = malloc(count * sizeof(float));
        for (long i = 0; i < count; i++) x[i] = y[i] = 1;
        long iters = 2e8 / (bytes < 1024 ? 1024 : bytes);
        if (iters < 20) iters = 20;
        if (iters > 20000) iters = 20000;
        for (int i = 0; i < 5; i++) call(op, x, y, count, size);
        MPI_Barrier(MPI_COMM_WORLD);
        double start = MPI_Wtime();
        for (long i = 0; i < iters; i++) call(op, x, y, count, size);
        double per = (MPI_Wtime() - start) / iters, worst;
        MPI_Reduce(&per, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        long shown = blocks ? count * 4 : bytes;
        if (rank == 0) printf("mpi op=%s np=%d bytes=%ld us=%.3f\n", op, size, shown, worst * 1e6);
        fflush(stdout);
        free(x);
        free(y);
    }
    MPI_Finalize();
    return 0;
}

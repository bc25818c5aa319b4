/* All-reduce timing through MPI_Allreduce, for comparison with gorun.
 *
 *   mpicc -O2 -o bin/mpi_allreduce bench/competitors/mpi_allreduce.c
 *   mpirun --allow-run-as-root --oversubscribe -np 2 --mca btl self,tcp \
 *       bin/mpi_allreduce 8 65536 ...
 *
 * Prints "mpi np=N bytes=SIZE us=MICROSECONDS" per size: the slowest rank's
 * mean time per call after a warm-up. With "--mca btl self,tcp" the ranks
 * talk over loopback TCP; with "self,vader" through shared memory. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    for (int a = 1; a < argc; a++) {
        long bytes = atol(argv[a]);
        long count = bytes / 4 < 2 ? 2 : bytes / 4;
        float *buf = malloc(count * sizeof(float));
        for (long i = 0; i < count; i++) buf[i] = 1;
        long iters = 2e8 / (bytes < 1024 ? 1024 : bytes);
        if (iters < 20) iters = 20;
        if (iters > 20000) iters = 20000;
        for (int i = 0; i < 5; i++) MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Barrier(MPI_COMM_WORLD);
        double start = MPI_Wtime();
        for (long i = 0; i < iters; i++) MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        double per = (MPI_Wtime() - start) / iters, worst;
        MPI_Reduce(&per, &worst, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD);
        if (rank == 0) printf("mpi np=%d bytes=%ld us=%.3f\n", size, bytes, worst * 1e6);
        fflush(stdout);
        free(buf);
    }
    MPI_Finalize();
    return 0;
}

/* The same benchmark over MPI, for compare.sh:
 *   mpirun -np N --mca btl self,vader mpi_bench_comm --op all_reduce --sizes 8,1M [--json]
 * Same columns and JSON keys as ringtrain_bench_comm; f32 sum. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static size_t parse_size(const char* s) {
  char* end;
  size_t v = strtoull(s, &end, 10);
  if (*end == 'K' || *end == 'k') v <<= 10;
  if (*end == 'M' || *end == 'm') v <<= 20;
  if (*end == 'G' || *end == 'g') v <<= 30;
  return v;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank, n;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  const char* op = "all_reduce";
  char sizes[1024] = "8";
  int json = 0;
  for (int i = 1; i < argc; ++i) {
    if (!strcmp(argv[i], "--op") && i + 1 < argc) op = argv[++i];
    else if (!strcmp(argv[i], "--sizes") && i + 1 < argc) snprintf(sizes, sizeof(sizes), "%s", argv[++i]);
    else if (!strcmp(argv[i], "--json")) json = 1;
  }
  double factor = !strcmp(op, "all_reduce") ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
  if (rank == 0 && !json)
    printf("# openmpi %s, %d ranks\n#%12s %12s %6s %12s %12s %12s\n", op, n, "size(B)", "count",
           "type", "time(us)", "algbw(GB/s)", "busbw(GB/s)");
  for (char* tok = strtok(sizes, ","); tok; tok = strtok(NULL, ",")) {
    size_t count = parse_size(tok) / 4;
    if (count < 1) count = 1;
    size_t per_rank = count / n ? count / n : 1;
    float* send = malloc(count * 4);
    float* recv = malloc(count * 4);
    for (size_t i = 0; i < count; ++i) send[i] = 1.0f;
#define RUN()                                                                                  \
  do {                                                                                         \
    if (!strcmp(op, "all_gather"))                                                             \
      MPI_Allgather(send, (int)per_rank, MPI_FLOAT, recv, (int)per_rank, MPI_FLOAT, MPI_COMM_WORLD); \
    else if (!strcmp(op, "reduce_scatter"))                                                    \
      MPI_Reduce_scatter_block(send, recv, (int)per_rank, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); \
    else                                                                                       \
      MPI_Allreduce(send, recv, (int)count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);               \
  } while (0)
    for (int i = 0; i < 3; ++i) RUN();
    double t0 = MPI_Wtime();
    for (int i = 0; i < 2; ++i) RUN();
    double per = (MPI_Wtime() - t0) / 2;
    int want = (int)(0.3 / (per > 1e-7 ? per : 1e-7)), iters;
    if (want < 5) want = 5;
    if (want > 20000) want = 20000;
    MPI_Allreduce(&want, &iters, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    for (int i = 0; i < iters; ++i) RUN();
    double us = (MPI_Wtime() - t0) / iters * 1e6;
    double algbw = (double)(count * 4) / (us * 1e-6) / 1e9;
    if (rank == 0) {
      if (json)
        printf("{\"op\":\"%s\",\"ranks\":%d,\"bytes\":%zu,\"time_us\":%.2f,\"algbw_GBps\":%.3f,\"busbw_GBps\":%.3f}\n",
               op, n, count * 4, us, algbw, algbw * factor);
      else
        printf(" %12zu %12zu %6s %12.2f %12.3f %12.3f\n", count * 4, count, "float", us, algbw, algbw * factor);
      fflush(stdout);
    }
    free(send);
    free(recv);
  }
  MPI_Finalize();
  return 0;
}

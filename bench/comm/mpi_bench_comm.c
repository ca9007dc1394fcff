/* The same benchmark over MPI, for compare.sh:
 *   mpirun -np N --mca btl self,vader mpi_bench_comm --op all_reduce --sizes 8,1M [--json]
 * Same columns and JSON keys as ringtrain_bench_comm; f32 sum. Same method too: 3 warm-up ops,
 * 2 timed ones give the count for ~0.3 s (5..MAX_ITERS, the max over ranks), a barrier, then
 * the ops in batches of iters / MAX_SAMPLES (at least 1), each batch timed; time is the median
 * over batches of a batch's time per op on rank 0, mean_us the mean. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_ITERS 200000
#define MAX_SAMPLES 1000

static int cmp_double(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

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
    printf("# openmpi %s, %d ranks\n#%12s %12s %6s %12s %12s %12s %12s\n", op, n, "size(B)", "count",
           "type", "time(us)", "algbw(GB/s)", "busbw(GB/s)", "mean(us)");
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
    double per = 0;
    for (int i = 0; i < 2; ++i) {
      double t0 = MPI_Wtime();
      RUN();
      per += (MPI_Wtime() - t0) / 2;
    }
    double wantd = 0.3 / (per > 1e-7 ? per : 1e-7);
    int want = wantd < 5 ? 5 : wantd > MAX_ITERS ? MAX_ITERS : (int)wantd, iters;
    MPI_Allreduce(&want, &iters, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    int batch = iters / MAX_SAMPLES > 1 ? iters / MAX_SAMPLES : 1, samples = iters / batch;
    iters = samples * batch;
    double* times = malloc((size_t)samples * sizeof(double));
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int s = 0; s < samples; ++s) {
      for (int j = 0; j < batch; ++j) RUN();
      double t1 = MPI_Wtime();
      times[s] = (t1 - t0) / batch;
      t0 = t1;
    }
    double mean_us = 0;
    for (int s = 0; s < samples; ++s) mean_us += times[s];
    mean_us = mean_us / samples * 1e6;
    qsort(times, (size_t)samples, sizeof(double), cmp_double);
    double us = times[samples / 2] * 1e6; /* the median batch, per op */
    free(times);
    double algbw = (double)(count * 4) / (us * 1e-6) / 1e9;
    if (rank == 0) {
      if (json)
        printf("{\"op\":\"%s\",\"ranks\":%d,\"bytes\":%zu,\"time_us\":%.2f,\"algbw_GBps\":%.3f,\"busbw_GBps\":%.3f,\"mean_us\":%.2f,\"iters\":%d}\n",
               op, n, count * 4, us, algbw, algbw * factor, mean_us, iters);
      else
        printf(" %12zu %12zu %6s %12.2f %12.3f %12.3f %12.2f\n", count * 4, count, "float", us, algbw, algbw * factor, mean_us);
      fflush(stdout);
    }
    free(send);
    free(recv);
  }
  MPI_Finalize();
  return 0;
}

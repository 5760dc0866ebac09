/* mpi_allreduce: the Open MPI baseline for `weft-bench --op allreduce`.
 *
 *   mpicc -O2 -o mpi_allreduce bench/mpi_allreduce.c
 *   mpirun -np 8 ./mpi_allreduce [--sizes 4K,1M,64M] [--iters 20] [--warmup 5] [--json]
 *
 * Same scheme as weft-bench: per size, buffers are allocated and filled before timing; `warmup`
 * MPI_Allreduce calls, a barrier, then `iters` back-to-back out-of-place float32 sums are timed. Inputs are
 * (rank + 1) + (index % 97), so every output element is an exactly known small integer and is checked.
 * The reported time is the mean over ranks of each rank's per-iteration time (nccl-tests' convention; an
 * MPI rank may leave the last allreduce before its peers have their result). Output: the same table or
 * JSON lines (op devices instances bytes time_us algbw_GBps busbw_GBps wrong) as weft-bench.
 */
#include <ctype.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kPeriod = 97, kMaxSizes = 64 };

struct options {
  int64_t sizes[kMaxSizes]; /* bytes of one rank's buffer */
  int num_sizes;
  int iters;
  int warmup;
  int json;
};

/* "4K" -> 4096, "64M", "1G", "100"; returns -1 when malformed. */
static int64_t parse_size(const char* text) {
  char* end = NULL;
  long long value = strtoll(text, &end, 10);
  if (end == text || value <= 0) return -1;
  switch (toupper((unsigned char)*end)) {
    case '\0': return value;
    case 'K': value <<= 10; break;
    case 'M': value <<= 20; break;
    case 'G': value <<= 30; break;
    default: return -1;
  }
  return end[1] == '\0' ? value : -1;
}

static int parse_sizes(char* list, struct options* opt) {
  opt->num_sizes = 0;
  for (char* item = strtok(list, ","); item; item = strtok(NULL, ",")) {
    const int64_t size = parse_size(item);
    if (size < 0 || opt->num_sizes == kMaxSizes) return -1;
    opt->sizes[opt->num_sizes++] = size;
  }
  return opt->num_sizes > 0 ? 0 : -1;
}

static int parse_args(int argc, char** argv, struct options* opt) {
  static char default_sizes[] = "4K,1M,64M";
  if (parse_sizes(default_sizes, opt) != 0) return -1;
  opt->iters = 20;
  opt->warmup = 5;
  opt->json = 0;
  for (int i = 1; i < argc; ++i) {
    const int has_value = i + 1 < argc;
    if (strcmp(argv[i], "--json") == 0) {
      opt->json = 1;
    } else if (strcmp(argv[i], "--sizes") == 0 && has_value) {
      if (parse_sizes(argv[++i], opt) != 0) return -1;
    } else if (strcmp(argv[i], "--iters") == 0 && has_value) {
      opt->iters = atoi(argv[++i]);
      if (opt->iters < 1) return -1;
    } else if (strcmp(argv[i], "--warmup") == 0 && has_value) {
      opt->warmup = atoi(argv[++i]);
      if (opt->warmup < 0) return -1;
    } else {
      return -1;
    }
  }
  return 0;
}

/* Times `iters` allreduces after `warmup` ones; returns this rank's seconds per iteration. */
static double time_allreduce(const float* in, float* out, int count, int iters, int warmup) {
  for (int i = 0; i < warmup; ++i) MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  for (int i = 0; i < iters; ++i) MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  return (MPI_Wtime() - start) / iters;
}

/* out[i] must be sum over ranks r of (r + 1) + (i % 97) = n(n+1)/2 + n * (i % 97): exact in float32. */
static int64_t count_wrong(const float* out, int count, int ranks) {
  int64_t wrong = 0;
  for (int i = 0; i < count; ++i) {
    const float expected = (float)(ranks * (ranks + 1) / 2 + ranks * (i % kPeriod));
    wrong += out[i] != expected;
  }
  return wrong;
}

static void report(const struct options* opt, int ranks, int64_t bytes, double seconds, int64_t wrong) {
  const double time_us = seconds * 1e6;
  const double algbw = (double)bytes / seconds / 1e9;
  const double busbw = algbw * 2.0 * (ranks - 1) / ranks;
  if (opt->json)
    printf("{\"op\":\"allreduce\",\"devices\":%d,\"instances\":1,\"bytes\":%lld,\"time_us\":%.3f,"
           "\"algbw_GBps\":%.3f,\"busbw_GBps\":%.3f,\"wrong\":%lld}\n",
           ranks, (long long)bytes, time_us, algbw, busbw, (long long)wrong);
  else
    printf("%12lld%14lld%10s%12.2f%10.2f%10.2f%9lld\n", (long long)bytes, (long long)(bytes / 4), "float32",
           time_us, algbw, busbw, (long long)wrong);
  fflush(stdout);
}

/* One size: returns the number of wrong elements over all ranks (valid on rank 0). */
static int64_t run_size(const struct options* opt, int rank, int ranks, int64_t size) {
  const int count = (int)(size / (int64_t)sizeof(float));
  float* in = malloc((size_t)count * sizeof(float));
  float* out = malloc((size_t)count * sizeof(float));
  if (!in || !out) {
    fprintf(stderr, "mpi_allreduce: out of memory for %lld bytes\n", (long long)size);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  for (int i = 0; i < count; ++i) in[i] = (float)(rank + 1 + i % kPeriod);
  memset(out, 0, (size_t)count * sizeof(float)); /* touch the pages before timing */

  const double mine = time_allreduce(in, out, count, opt->iters, opt->warmup);
  const int64_t my_wrong = count_wrong(out, count, ranks);
  double total_time = 0;
  int64_t wrong = 0;
  MPI_Reduce(&mine, &total_time, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD);
  MPI_Reduce(&my_wrong, &wrong, 1, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0) report(opt, ranks, (int64_t)count * 4, total_time / ranks, wrong);
  free(in);
  free(out);
  return wrong;
}

int main(int argc, char** argv) {
  MPI_Init(&argc, &argv);
  int rank = 0, ranks = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &ranks);

  struct options opt;
  if (parse_args(argc, argv, &opt) != 0) {
    if (rank == 0)
      fprintf(stderr, "usage: mpi_allreduce [--sizes 4K,1M,64M] [--iters N>=1] [--warmup N>=0] [--json]\n");
    MPI_Finalize();
    return 2;
  }
  if (rank == 0 && !opt.json)
    printf("# mpi_allreduce: %d ranks, float32 sum, %d iterations (+%d warmup)\n#\n"
           "#%11s%14s%10s%12s%10s%10s%9s\n#%11s%14s%10s%12s%10s%10s\n",
           ranks, opt.iters, opt.warmup, "size", "count", "type", "time", "algbw", "busbw", "#wrong", "(B)",
           "(elements)", "", "(us)", "(GB/s)", "(GB/s)");

  int64_t wrong = 0;
  for (int s = 0; s < opt.num_sizes; ++s) {
    if (opt.sizes[s] / 4 > INT32_MAX || opt.sizes[s] < 4) {
      if (rank == 0) fprintf(stderr, "mpi_allreduce: size %lld out of range\n", (long long)opt.sizes[s]);
      MPI_Finalize();
      return 2;
    }
    wrong += run_size(&opt, rank, ranks, opt.sizes[s]);
  }
  MPI_Finalize();
  return rank == 0 && wrong != 0 ? 1 : 0;
}

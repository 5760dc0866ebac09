/* mpi_collectives: the Open MPI baseline for `weft-bench`, every op weft-bench measures, at MPI's best.
 *
 *   mpicc -O2 -o mpi_collectives bench/mpi_collectives.c
 *   mpirun -np 8 ./mpi_collectives [--op allreduce|all_gather|reduce_scatter|all_to_all|ppermute]
 *                                  [--sizes 4K,1M,64M] [--budget-ms 200] [--reps 5] [--iters N] [--json]
 *
 * How it times (the conventions of OSU's micro-benchmarks and nccl-tests, so that the baseline is not
 * flattered by too few iterations): per size, buffers are allocated and written before timing; warm-up
 * calls run for about a tenth of the budget (at least 2); the iteration count is then planned from the
 * warm-up so that one repetition lasts about `budget-ms` (the slowest rank's estimate, so every rank runs
 * the same count; at least 5, at most 10^6; or fixed with --iters); `reps` repetitions follow, each started
 * by a barrier, and a repetition's time per iteration is the MAXIMUM over ranks (a collective is done when
 * its slowest member is); the reported time is the MEDIAN over repetitions.
 *
 * The ops and their geometry are weft-bench's (docs/benchmarks.md): --sizes gives one rank's input buffer;
 * float32, inputs (rank + 1) + (i % 97), so every output element is a known small integer and is checked;
 * the reported size is nccl-tests':
 *   allreduce       MPI_Allreduce, sum                      size = one rank's buffer
 *   all_gather      MPI_Allgather                           size = the gathered buffer (n x the input)
 *   reduce_scatter  MPI_Reduce_scatter_block, sum           size = one rank's input (count rounded to n)
 *   all_to_all      MPI_Alltoall                            size = one rank's input (count rounded to n)
 *   ppermute        ring shift, MPI_Sendrecv to rank+1      size = one rank's buffer
 * Output: the same table or JSON lines (op devices instances bytes time_us algbw_GBps busbw_GBps wrong) as
 * weft-bench, plus iters and reps. Exit status 1 if any element is wrong, 2 on bad arguments.
 */
#include <ctype.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { kPeriod = 97, kMaxSizes = 64, kMaxReps = 101 };

enum op { ALLREDUCE, ALL_GATHER, REDUCE_SCATTER, ALL_TO_ALL, PPERMUTE };
static const char* const kOpNames[] = {"allreduce", "all_gather", "reduce_scatter", "all_to_all", "ppermute"};

struct options {
  enum op op;
  int64_t sizes[kMaxSizes]; /* bytes of one rank's input, as weft-bench's --sizes */
  int num_sizes;
  double budget_s; /* wall time of one repetition */
  int reps;
  int fixed_iters; /* 0 = planned from the budget */
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

/* A whole number in [lo, hi], or -1. */
static long parse_int(const char* text, long lo, long hi) {
  char* end = NULL;
  const long value = strtol(text, &end, 10);
  return end != text && *end == '\0' && value >= lo && value <= hi ? value : -1;
}

static int parse_args(int argc, char** argv, struct options* opt) {
  static char default_sizes[] = "4K,1M,64M";
  if (parse_sizes(default_sizes, opt) != 0) return -1;
  opt->op = ALLREDUCE;
  opt->budget_s = 0.2;
  opt->reps = 5;
  opt->fixed_iters = 0;
  opt->json = 0;
  for (int i = 1; i < argc; ++i) {
    const int has_value = i + 1 < argc;
    if (strcmp(argv[i], "--json") == 0) {
      opt->json = 1;
    } else if (strcmp(argv[i], "--op") == 0 && has_value) {
      const char* name = argv[++i];
      int found = 0;
      for (int k = 0; k < (int)(sizeof kOpNames / sizeof kOpNames[0]); ++k)
        if (strcmp(name, kOpNames[k]) == 0) opt->op = (enum op)k, found = 1;
      if (!found) return -1;
    } else if (strcmp(argv[i], "--sizes") == 0 && has_value) {
      if (parse_sizes(argv[++i], opt) != 0) return -1;
    } else if (strcmp(argv[i], "--budget-ms") == 0 && has_value) {
      const long ms = parse_int(argv[++i], 1, 600000);
      if (ms < 0) return -1;
      opt->budget_s = (double)ms / 1e3;
    } else if (strcmp(argv[i], "--reps") == 0 && has_value) {
      opt->reps = (int)parse_int(argv[++i], 1, kMaxReps);
      if (opt->reps < 0) return -1;
    } else if (strcmp(argv[i], "--iters") == 0 && has_value) {
      opt->fixed_iters = (int)parse_int(argv[++i], 1, 1000000000);
      if (opt->fixed_iters < 0) return -1;
    } else {
      return -1;
    }
  }
  return 0;
}

/* Buffers and element counts of one size (see the geometry table in the banner). */
struct geometry {
  int n;
  int64_t count;    /* elements of one rank's input */
  int64_t out_count; /* elements of one rank's output */
  int64_t reported_bytes;
};

static int chunked(enum op op) { return op == REDUCE_SCATTER || op == ALL_TO_ALL; }

static struct geometry geometry_of(enum op op, int n, int64_t bytes) {
  struct geometry g;
  g.n = n;
  g.count = bytes / (int64_t)sizeof(float);
  if (chunked(op)) g.count -= g.count % n;
  g.out_count = op == ALL_GATHER ? g.count * n : op == REDUCE_SCATTER ? g.count / n : g.count;
  g.reported_bytes = (op == ALL_GATHER ? g.count * n : g.count) * (int64_t)sizeof(float);
  return g;
}

static void run_op(enum op op, const struct geometry* g, const float* in, float* out, int rank) {
  const int count = (int)g->count;
  switch (op) {
    case ALLREDUCE: MPI_Allreduce(in, out, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); break;
    case ALL_GATHER: MPI_Allgather(in, count, MPI_FLOAT, out, count, MPI_FLOAT, MPI_COMM_WORLD); break;
    case REDUCE_SCATTER:
      MPI_Reduce_scatter_block(in, out, count / g->n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
      break;
    case ALL_TO_ALL:
      MPI_Alltoall(in, count / g->n, MPI_FLOAT, out, count / g->n, MPI_FLOAT, MPI_COMM_WORLD);
      break;
    case PPERMUTE:
      MPI_Sendrecv(in, count, MPI_FLOAT, (rank + 1) % g->n, 0, out, count, MPI_FLOAT, (rank + g->n - 1) % g->n, 0,
                   MPI_COMM_WORLD, MPI_STATUS_IGNORE);
      break;
  }
}

static float input_value(int rank, int64_t i) { return (float)(rank + 1 + i % kPeriod); }
static float sum_value(int n, int64_t i) { return (float)(n * (n + 1) / 2 + n * (i % kPeriod)); }

/* Elements of rank `rank`'s output that differ from what the op computes. */
static int64_t count_wrong(enum op op, const struct geometry* g, const float* out, int rank) {
  const int64_t chunk = g->count / g->n;
  int64_t wrong = 0;
  for (int64_t j = 0; j < g->out_count; ++j) {
    float want = 0;
    switch (op) {
      case ALLREDUCE: want = sum_value(g->n, j); break;
      case ALL_GATHER: want = input_value((int)(j / g->count), j % g->count); break;
      case REDUCE_SCATTER: want = sum_value(g->n, rank * chunk + j); break;
      case ALL_TO_ALL: want = input_value((int)(j / chunk), rank * chunk + j % chunk); break;
      case PPERMUTE: want = input_value((rank + g->n - 1) % g->n, j); break;
    }
    wrong += out[j] != want;
  }
  return wrong;
}

/* The slowest rank's seconds per call over `iters` calls, started together by a barrier. */
static double timed_calls(enum op op, const struct geometry* g, const float* in, float* out, int rank, int iters) {
  MPI_Barrier(MPI_COMM_WORLD);
  const double start = MPI_Wtime();
  for (int i = 0; i < iters; ++i) run_op(op, g, in, out, rank);
  const double mine = (MPI_Wtime() - start) / iters;
  double slowest = 0;
  MPI_Allreduce(&mine, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return slowest;
}

static int compare_doubles(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static double bus_factor(enum op op, int n) {
  switch (op) {
    case ALLREDUCE: return 2.0 * (n - 1) / n;
    case ALL_GATHER:
    case REDUCE_SCATTER:
    case ALL_TO_ALL: return (double)(n - 1) / n;
    case PPERMUTE: return 1.0;
  }
  return 1.0;
}

static void report(const struct options* opt, int ranks, const struct geometry* g, double seconds, int iters,
                   int64_t wrong) {
  const double time_us = seconds * 1e6;
  const double algbw = (double)g->reported_bytes / seconds / 1e9;
  const double busbw = algbw * bus_factor(opt->op, ranks);
  if (opt->json)
    printf("{\"op\":\"%s\",\"devices\":%d,\"instances\":%d,\"bytes\":%lld,\"time_us\":%.3f,"
           "\"algbw_GBps\":%.3f,\"busbw_GBps\":%.3f,\"wrong\":%lld,\"iters\":%d,\"reps\":%d}\n",
           kOpNames[opt->op], ranks, ranks, (long long)g->reported_bytes, time_us, algbw, busbw, (long long)wrong,
           iters, opt->reps);
  else
    printf("%12lld%14lld%10s%12.2f%10.2f%10.2f%9lld%10d\n", (long long)g->reported_bytes,
           (long long)(g->reported_bytes / 4), "float32", time_us, algbw, busbw, (long long)wrong, iters);
  fflush(stdout);
}

/* One size: returns the number of wrong elements over all ranks (valid on rank 0). */
static int64_t run_size(const struct options* opt, int rank, int ranks, int64_t size) {
  const struct geometry g = geometry_of(opt->op, ranks, size);
  if (g.count <= 0 || g.out_count > INT32_MAX) {
    if (rank == 0) fprintf(stderr, "mpi_collectives: size %lld out of range for %s over %d ranks\n",
                           (long long)size, kOpNames[opt->op], ranks);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  float* in = malloc((size_t)g.count * sizeof(float));
  float* out = malloc((size_t)g.out_count * sizeof(float));
  if (!in || !out) {
    fprintf(stderr, "mpi_collectives: out of memory for %lld bytes\n", (long long)size);
    MPI_Abort(MPI_COMM_WORLD, 2);
  }
  for (int64_t i = 0; i < g.count; ++i) in[i] = input_value(rank, i);
  memset(out, 0, (size_t)g.out_count * sizeof(float)); /* touch the pages before timing */

  /* Warm-up: doubling batches until a tenth of the budget has passed (at least 2 calls); the slowest
   * rank's rate then plans the iterations of a repetition. */
  int iters = opt->fixed_iters;
  double per_call = 0;
  for (int batch = 1, spent_calls = 0; spent_calls < 2 || per_call * spent_calls < opt->budget_s / 10; batch *= 2) {
    per_call = timed_calls(opt->op, &g, in, out, rank, batch);
    spent_calls += batch;
    if (batch >= (1 << 20)) break;
  }
  if (iters == 0) {
    const double planned = per_call > 0 ? opt->budget_s / per_call : 1e6;
    iters = planned < 5 ? 5 : planned > 1e6 ? 1000000 : (int)planned;
  }
  double times[kMaxReps];
  for (int r = 0; r < opt->reps; ++r) times[r] = timed_calls(opt->op, &g, in, out, rank, iters);
  qsort(times, (size_t)opt->reps, sizeof times[0], compare_doubles);
  const double median = opt->reps % 2 ? times[opt->reps / 2] : 0.5 * (times[opt->reps / 2 - 1] + times[opt->reps / 2]);

  const int64_t my_wrong = count_wrong(opt->op, &g, out, rank);
  int64_t wrong = 0;
  MPI_Reduce(&my_wrong, &wrong, 1, MPI_INT64_T, MPI_SUM, 0, MPI_COMM_WORLD);
  if (rank == 0) report(opt, ranks, &g, median, iters, wrong);
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
      fprintf(stderr, "usage: mpi_collectives [--op allreduce|all_gather|reduce_scatter|all_to_all|ppermute] "
                      "[--sizes 4K,1M,64M] [--budget-ms 1..600000] [--reps 1..%d] [--iters N>=1] [--json]\n",
              kMaxReps);
    MPI_Finalize();
    return 2;
  }
  if (rank == 0 && !opt.json)
    printf("# mpi_collectives: %s, %d ranks, float32, median of %d repetitions of ~%.0f ms (max over ranks)\n#\n"
           "#%11s%14s%10s%12s%10s%10s%9s%10s\n#%11s%14s%10s%12s%10s%10s\n",
           kOpNames[opt.op], ranks, opt.reps, opt.budget_s * 1e3, "size", "count", "type", "time", "algbw",
           "busbw", "#wrong", "iters", "(B)", "(elements)", "", "(us)", "(GB/s)", "(GB/s)");

  int64_t wrong = 0;
  for (int s = 0; s < opt.num_sizes; ++s) wrong += run_size(&opt, rank, ranks, opt.sizes[s]);
  MPI_Finalize();
  return rank == 0 && wrong != 0 ? 1 : 0;
}

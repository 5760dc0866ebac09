# bench/common.sh: shell functions shared by bench/compare_training.sh and bench/pytorch_blas_probe.sh, sourced
# (not run): waiting for idle CPUs, per-run BLAS selection for Debian's PyTorch (and its core type), and
# peak-RSS measurement of a process tree. Kept in one place so the training comparison and the BLAS probe
# measure the same way.

BENCH_LIBDIR=/usr/lib/x86_64-linux-gnu
BUSY_STARTS=0  # runs started on a busy machine (IDLE_WAIT ran out)

# Percentage of CPU time, over all CPUs, spent busy during one second (from /proc/stat).
cpu_busy_percent() {
  local -a a b
  read -r -a a </proc/stat
  sleep 1
  read -r -a b </proc/stat
  local total=0 i
  for i in 1 2 3 4 5 6 7 8; do total=$((total + b[i] - a[i])); done
  local idle=$((b[4] - a[4] + b[5] - a[5]))
  echo $((100 * (total - idle) / (total > 0 ? total : 1)))
}

# Two OpenMP threads on two cores with a compiler running beside them run ~10x slower (every parallel region
# waits for a time slice), so timings on a busy machine are noise: wait for idle CPUs, at most IDLE_WAIT s.
wait_for_idle() {
  local waited=0
  while [ "$waited" -lt "${IDLE_WAIT:-0}" ]; do
    [ "$(cpu_busy_percent)" -le 10 ] && return 0
    waited=$((waited + 1))
  done
  [ "${IDLE_WAIT:-0}" -gt 0 ] && echo "bench: CPUs still busy after ${IDLE_WAIT}s; measuring anyway" >&2
  BUSY_STARTS=$((BUSY_STARTS + 1))
}

# Points the alternative NAME back at the library it resolved to before (installing a BLAS package makes
# that BLAS every program's default; the benchmarks only choose one per run, with LD_LIBRARY_PATH).
restore_alternative() {  # restore_alternative NAME RESOLVED_TARGET_BEFORE
  local name="$1" before="$2" path
  [ -n "$before" ] || return 0
  path="$(update-alternatives --list "$name" 2>/dev/null | while read -r p; do
    [ "$(readlink -f "$p")" = "$before" ] && echo "$p"; done | head -n 1)"
  if [ -n "$path" ]; then update-alternatives --set "$name" "$path" >/dev/null 2>&1 || true; fi
}

# Installs the Debian packages that put a libblas.so.3 in $BENCH_LIBDIR/<dir> for each dir named
# (openblas-openmp, openblas-pthread, blis-openmp, blis-pthread), when missing and run as root, keeping the
# system's default BLAS and LAPACK as they were.
install_blas_dirs() {  # install_blas_dirs DIR...
  local missing=() d
  for d in "$@"; do
    [ -e "$BENCH_LIBDIR/$d/libblas.so.3" ] && continue
    case "$d" in
      openblas-openmp) missing+=(libopenblas0-openmp) ;;
      openblas-pthread) missing+=(libopenblas0-pthread) ;;
      blis-openmp) missing+=(libblis4-openmp) ;;
      blis-pthread) missing+=(libblis4-pthread) ;;
    esac
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "bench: not root, cannot install ${missing[*]}" >&2
    return 0
  fi
  echo "bench: installing ${missing[*]} (the default libblas.so.3 stays as it was)" >&2
  local blas lapack
  blas="$(readlink -f "$BENCH_LIBDIR/libblas.so.3" || true)"
  lapack="$(readlink -f "$BENCH_LIBDIR/liblapack.so.3" || true)"
  (DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null 2>&1 ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}"; }) >&2 || true
  restore_alternative libblas.so.3-x86_64-linux-gnu "$blas"
  restore_alternative liblapack.so.3-x86_64-linux-gnu "$lapack"
}

# The OpenBLAS core type the peer runs best with on this CPU: SKYLAKEX (its AVX-512 kernels, the fastest of
# Debian's 0.3.21 on the AVX-512 machines bench/pytorch_blas_probe.sh measured) where the CPU has AVX-512F,
# HASWELL (AVX2) where it has only that (SKYLAKEX's kernels die there with SIGILL: an AMD EPYC VM without
# AVX-512), else empty (OpenBLAS's own detection).
default_coretype() {
  if grep -qw avx512f /proc/cpuinfo; then echo SKYLAKEX
  elif grep -qw avx2 /proc/cpuinfo; then echo HASWELL
  fi
  return 0
}

# The env(1) prefix that runs PyTorch on the BLAS in $BENCH_LIBDIR/LIB ("system" = the default alternative)
# with OPENBLAS_CORETYPE=CORE (empty = unset), into the array BLAS_ENV.
blas_env() {  # blas_env LIB CORE
  BLAS_ENV=(env -u OPENBLAS_CORETYPE)
  [ "$1" != system ] && BLAS_ENV+=(LD_LIBRARY_PATH="$BENCH_LIBDIR/$1${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}")
  [ -n "$2" ] && BLAS_ENV+=(OPENBLAS_CORETYPE="$2")
  return 0
}

# Busy and total CPU jiffies of the whole machine so far (/proc/stat's first line).
cpu_jiffies() {
  local -a a
  read -r -a a </proc/stat
  echo "$((a[1] + a[2] + a[3] + a[6] + a[7] + a[8])) $((a[1] + a[2] + a[3] + a[4] + a[5] + a[6] + a[7] + a[8]))"
}

# Runs a command with stdout and stderr to files and sets PEAK_KIB (the largest single process's peak RSS:
# GNU time's %M when /usr/bin/time exists, else the largest polled VmHWM), SUM_KIB (the sum over every
# process of the tree of its peak VmHWM, polled every 0.5 s: what a multi-process run holds in all),
# OTHER_PCT (CPU time that other processes used during the run, as % of all CPUs: a measurement taken
# beside a compiler is not one to trust; -1 without GNU time), WALL_S and RC.
run_measured() {  # run_measured STDOUT STDERR CMD...
  local out="$1" err="$2"; shift 2
  local timef start jiffies_before
  timef="$(mktemp)"
  start="$(date +%s%N)"
  jiffies_before="$(cpu_jiffies)"
  if [ -x /usr/bin/time ]; then
    /usr/bin/time -f '%M %U %S' -o "$timef" "$@" >"$out" 2>"$err" &
  else
    "$@" >"$out" 2>"$err" &
  fi
  local root=$! peaks
  peaks="$(mktemp)"
  while kill -0 "$root" 2>/dev/null; do
    # One awk over every /proc/PID/status (one fork per poll, so the poller barely loads the machine):
    # parent and VmHWM of each process, then those of the root's descendants.
    awk -v root="$root" '
      FNR == 1 { pid = FILENAME; sub("^/proc/", "", pid); sub("/status$", "", pid) }
      /^PPid:/ { parent[pid] = $2 }
      /^VmHWM:/ { hwm[pid] = $2 }
      END { for (p in hwm) { q = p; while (q in parent && q != root && q > 1) q = parent[q]; if (q == root) print p, hwm[p] } }
    ' /proc/[0-9]*/status 2>/dev/null >>"$peaks" || true
    sleep 0.5
  done
  RC=0
  wait "$root" || RC=$?
  WALL_S="$(awk -v ns="$(($(date +%s%N) - start))" 'BEGIN { printf "%.2f", ns / 1e9 }')"
  SUM_KIB="$(awk '{ if ($2 > m[$1]) m[$1] = $2 } END { s = 0; for (p in m) s += m[p]; print s }' "$peaks")"
  OTHER_PCT=-1
  if [ -x /usr/bin/time ] && [ -s "$timef" ]; then
    local peak user sys
    read -r peak user sys < <(tail -n 1 "$timef")
    PEAK_KIB="$peak"
    # The machine's busy time less this command tree's own CPU time (GNU time counts waited-for children).
    OTHER_PCT="$(awk -v before="$jiffies_before" -v after="$(cpu_jiffies)" -v user="$user" -v sys="$sys" \
                     -v hz="$(getconf CLK_TCK)" '
      BEGIN { split(before, b, " "); split(after, a, " ")
              busy = (a[1] - b[1]) / hz; total = (a[2] - b[2]) / hz; other = busy - user - sys
              printf "%.0f", (total > 0 ? 100 * (other > 0 ? other : 0) / total : 0) }')"
  else
    PEAK_KIB="$(awk '{ if ($2 > m) m = $2 } END { print m + 0 }' "$peaks")"
  fi
  case "$PEAK_KIB" in '' | *[!0-9]*) PEAK_KIB=0 ;; esac
  # A run shorter than one poll leaves no samples: the largest process is then the best lower bound.
  [ "${SUM_KIB:-0}" -ge "$PEAK_KIB" ] || SUM_KIB="$PEAK_KIB"
  rm -f "$timef" "$peaks"
}

#!/bin/sh
# GPU check for the NCCL collective probe (issue 15, docs/collectives.md). Builds what it needs
# (the probe libraries only: no gRPC), then runs a single-node all-reduce over every local GPU
# through the agent's real NCCL path (dlopen of libnccl.so.2 and the CUDA runtime) at 1, 8 and
# 64 MiB; then NCCL across two processes on this node (each process a member with its own GPUs,
# the unique id passed through a shared directory as the agent passes it through the aggregator;
# on a machine of one GPU both processes use GPU 0, which NCCL may refuse: the outcome is printed,
# not failed); and prints nccl-tests' all_reduce_perf next to it when that is installed.
#
# Bounded for one short call: the whole script stays within FW_CHECK_BUDGET_S (270 s; each probe
# run has at most 60 s, and a step that no longer fits is skipped with a line saying so).
# A machine without the build's packages (spdlog, fmt, CLI11, GTest, yaml-cpp, nlohmann-json)
# runs a bundle made elsewhere: FW_PROBE_BUNDLE=DIR, as tests/device/make_probe_bundle.sh DIR
# writes it (the probe and the shared libraries it needs beyond glibc); nothing is built then.
# libnccl.so.2 and the CUDA runtime are found on the loader's path, under /usr/local/cuda, or in
# Python's nvidia-* wheels (nvidia-nccl-cu13, nvidia-cuda-runtime).
#
# Without a GPU it says "skipped: no GPU" and exits 0. Exit 1: NCCL not ready on a GPU machine;
# 2: a probe failed; 3: the build failed.
set -u
# FW_CHECK_FORCE=1 goes on without a GPU (a dry run of the build and the probe's NCCL check).
if [ "${FW_CHECK_FORCE:-0}" != 1 ] && ! ls /dev/nvidia[0-9]* >/dev/null 2>&1 &&
  ! nvidia-smi -L >/dev/null 2>&1; then
  echo "skipped: no GPU"
  exit 0
fi
start=$(date +%s)
budget=${FW_CHECK_BUDGET_S:-270}
# Seconds left of the budget.
left() { echo $((start + budget - $(date +%s))); }
# A probe run's timeout: 60 s, or what is left less a margin; 0 when nothing useful is left.
run_limit() {
  l=$(($(left) - 15))
  [ "$l" -gt 60 ] && l=60
  [ "$l" -lt 10 ] && l=0
  echo "$l"
}
root=$(cd "$(dirname "$0")/../.." && pwd)

# The libraries the probe dlopens, where the loader would not find them.
libdirs=""
have_lib() { ldconfig -p 2>/dev/null | grep -q "$1"; }
add_dir_of() {
  # $1: a file name pattern; the first match's folder joins libdirs.
  for base in /usr/local/cuda/lib64 /usr/local/cuda/targets/x86_64-linux/lib $pydirs; do
    [ -d "$base" ] || continue
    f=$(find "$base" -maxdepth 4 -name "$1" 2>/dev/null | head -1)
    if [ -n "$f" ]; then
      libdirs="$libdirs:$(dirname "$f")"
      return 0
    fi
  done
  return 1
}
pydirs=$(python3 -c 'import site; print(" ".join(d + "/nvidia" for d in site.getsitepackages()))' 2>/dev/null)
have_lib libnccl.so.2 || add_dir_of 'libnccl.so.2' || echo "note: libnccl.so.2 not found"
have_lib libcudart.so.1 || add_dir_of 'libcudart.so.1[0-9]*' || echo "note: no CUDA runtime found"

if [ -n "${FW_PROBE_BUNDLE:-}" ]; then
  bundle=$(cd "$FW_PROBE_BUNDLE" && pwd)
  probe="$bundle/fw_collective_probe"
  libdirs="$bundle/lib$libdirs"
  dlopen_test=""
  echo "== probe from the bundle $bundle (nothing built)"
else
  build=${FW_BUILD_DIR:-$root/build-device}
  gen=""
  command -v ninja >/dev/null 2>&1 && gen="-G Ninja"
  if [ ! -f "$build/CMakeCache.txt" ]; then
    # shellcheck disable=SC2086
    cmake -S "$root" -B "$build" $gen -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFW_BUILD_DAEMONS=OFF \
      -DFW_BUILD_BENCHMARKS=OFF >"$build.cmake.log" 2>&1 || {
      grep -E 'Could not find|not found|CMake Error' "$build.cmake.log" | head -10
      echo "build: configure failed (missing packages?); without them, run a bundle:" \
        "FW_PROBE_BUNDLE=DIR (tests/device/make_probe_bundle.sh)"
      rm -f "$build/CMakeCache.txt"
      exit 3
    }
  fi
  cmake --build "$build" -j"$(nproc)" --target fw_collective_probe collective_nccl_dlopen_test \
    >"$build.build.log" 2>&1 || { tail -30 "$build.build.log"; exit 3; }
  probe="$build/probes/collective/fw_collective_probe"
  dlopen_test="$build/probes/collective/collective_nccl_dlopen_test"
  echo "== built in $(($(date +%s) - start)) s"
fi
if [ -n "$libdirs" ]; then
  LD_LIBRARY_PATH="${libdirs#:}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
  export LD_LIBRARY_PATH
fi

echo "== GPUs"
nvidia-smi -L 2>/dev/null || true
if [ -n "$dlopen_test" ]; then
  echo "== availability (real dlopen path)"
  timeout 60 "$dlopen_test" --gtest_brief=1 2>&1 | tail -3
fi
rc=0
echo "== fabricwatch NCCL probe: all_reduce, every local GPU, one process"
for bytes in 1048576 8388608 67108864; do
  limit=$(run_limit)
  if [ "$limit" -eq 0 ]; then
    echo "size $bytes: skipped, the time budget is spent"
    continue
  fi
  out=$(timeout "$limit" "$probe" nccl --bytes "$bytes" --iterations 50 --warmup 10 2>/dev/null)
  status=$?
  echo "$out" | grep -E '^(nccl:|backend=)'
  [ "$status" -eq 1 ] && exit 1
  [ "$status" -eq 124 ] && echo "size $bytes: timed out after $limit s"
  [ "$status" -ne 0 ] && rc=2
done
ngpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
ngpus=${ngpus:-1}
[ "$ngpus" -lt 1 ] && ngpus=1
echo "== fabricwatch NCCL probe: all_reduce across two processes on this node"
store=$(mktemp -d)
if [ "$ngpus" -ge 2 ]; then
  half=$((ngpus / 2))
  gpus_a=$(seq -s, 0 $((half - 1)))
  gpus_b=$(seq -s, "$half" $((ngpus - 1)))
  ranks=$ngpus
  shared=0
else
  gpus_a=0
  gpus_b=0
  half=1
  ranks=2
  shared=1
fi
for bytes in 1048576 67108864; do
  limit=$(run_limit)
  if [ "$limit" -eq 0 ]; then
    echo "size $bytes: skipped, the time budget is spent"
    continue
  fi
  group="two-proc-$bytes"
  timeout "$limit" "$probe" nccl --bytes "$bytes" --iterations 50 --warmup 10 --ranks "$ranks" \
    --first-rank 0 --gpus "$gpus_a" --store-dir "$store" --group "$group" >"$store/a.out" 2>"$store/a.err" &
  pid_a=$!
  timeout "$limit" "$probe" nccl --bytes "$bytes" --iterations 50 --warmup 10 --ranks "$ranks" \
    --first-rank "$half" --gpus "$gpus_b" --store-dir "$store" --group "$group" >"$store/b.out" 2>"$store/b.err"
  status_b=$?
  wait "$pid_a"
  status_a=$?
  echo "process A (GPUs $gpus_a) exit $status_a: $(grep -E '^backend=' "$store/a.out")"
  echo "process B (GPUs $gpus_b) exit $status_b: $(grep -E '^backend=' "$store/b.out")"
  if [ "$status_a" -ne 0 ] || [ "$status_b" -ne 0 ]; then
    grep -hE 'fw_collective_probe|NCCL call failed|CUDA call failed' "$store/a.err" "$store/b.err" | head -5
    if [ "$shared" -eq 1 ]; then
      echo "two processes on one GPU: not counted as a failure (NCCL may refuse two ranks on one GPU)"
    else
      rc=2
    fi
  fi
done
rm -rf "$store"
echo "== reference: nccl-tests all_reduce_perf"
if command -v all_reduce_perf >/dev/null 2>&1; then
  limit=$(run_limit)
  if [ "$limit" -eq 0 ]; then
    echo "all_reduce_perf: skipped, the time budget is spent"
  else
    timeout "$limit" all_reduce_perf -b 1M -e 64M -f 8 -g "$ngpus" -n 50 -w 10
  fi
else
  echo "all_reduce_perf: not installed (nccl-tests); no reference figures"
fi
echo "== done in $(($(date +%s) - start)) s, exit $rc"
exit $rc

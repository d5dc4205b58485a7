#!/bin/sh
# GPU check for the NCCL collective probe (issue 15, docs/collectives.md). Builds what it needs
# (the probe libraries only: no gRPC), then runs a single-node all-reduce over every local GPU
# through the agent's real NCCL path (dlopen of libnccl.so.2 and the CUDA runtime) at 1, 8 and
# 64 MiB; then NCCL across two processes on this node (each process a member with its own GPUs,
# the unique id passed through a shared directory as the agent passes it through the aggregator;
# on a machine of one GPU both processes use GPU 0, which NCCL may refuse: the outcome is printed,
# not failed); and prints nccl-tests' all_reduce_perf next to it when that is installed. Bounded:
# each probe run has a 120 s timeout.
# Without a GPU it says "skipped: no GPU" and exits 0. Exit 1: NCCL not ready on a GPU machine;
# 2: a probe failed; 3: the build failed.
set -u
if ! ls /dev/nvidia[0-9]* >/dev/null 2>&1 && ! nvidia-smi -L >/dev/null 2>&1; then
  echo "skipped: no GPU"
  exit 0
fi
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${FW_BUILD_DIR:-$root/build-device}
gen=""
command -v ninja >/dev/null 2>&1 && gen="-G Ninja"
if [ ! -f "$build/CMakeCache.txt" ]; then
  # shellcheck disable=SC2086
  cmake -S "$root" -B "$build" $gen -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFW_BUILD_DAEMONS=OFF \
    -DFW_BUILD_BENCHMARKS=OFF >"$build.cmake.log" 2>&1 || { tail -20 "$build.cmake.log"; exit 3; }
fi
cmake --build "$build" -j"$(nproc)" --target fw_collective_probe collective_nccl_dlopen_test \
  >"$build.build.log" 2>&1 || { tail -30 "$build.build.log"; exit 3; }
probe="$build/probes/collective/fw_collective_probe"

echo "== GPUs"
nvidia-smi -L 2>/dev/null || true
echo "== availability (real dlopen path)"
"$build/probes/collective/collective_nccl_dlopen_test" --gtest_brief=1 2>&1 | tail -3
rc=0
echo "== fabricwatch NCCL probe: all_reduce, every local GPU, one process"
for bytes in 1048576 8388608 67108864; do
  out=$(timeout 120 "$probe" nccl --bytes "$bytes" --iterations 50 --warmup 10 2>/dev/null)
  status=$?
  echo "$out" | grep -E '^(nccl:|backend=)'
  [ "$status" -eq 1 ] && exit 1
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
  group="two-proc-$bytes"
  timeout 120 "$probe" nccl --bytes "$bytes" --iterations 50 --warmup 10 --ranks "$ranks" \
    --first-rank 0 --gpus "$gpus_a" --store-dir "$store" --group "$group" >"$store/a.out" 2>"$store/a.err" &
  pid_a=$!
  timeout 120 "$probe" nccl --bytes "$bytes" --iterations 50 --warmup 10 --ranks "$ranks" \
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
  timeout 120 all_reduce_perf -b 1M -e 64M -f 8 -g "$ngpus" -n 50 -w 10
else
  echo "all_reduce_perf: not installed (nccl-tests); no reference figures"
fi
exit $rc

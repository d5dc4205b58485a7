#!/bin/sh
# GPU check for the NCCL collective probe (issue 15, docs/collectives.md). Builds what it needs
# (the probe libraries only: no gRPC), then runs a single-node all-reduce over every local GPU
# through the agent's real NCCL path (dlopen of libnccl.so.2 and the CUDA runtime) at 1, 8 and
# 64 MiB, and prints nccl-tests' all_reduce_perf next to it when that is installed.
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
  out=$("$probe" nccl --bytes "$bytes" --iterations 50 --warmup 10 2>/dev/null)
  status=$?
  echo "$out" | grep -E '^(nccl:|backend=)'
  [ "$status" -eq 1 ] && exit 1
  [ "$status" -ne 0 ] && rc=2
done
echo "== reference: nccl-tests all_reduce_perf"
ngpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
if command -v all_reduce_perf >/dev/null 2>&1; then
  all_reduce_perf -b 1M -e 64M -f 8 -g "${ngpus:-1}" -n 50 -w 10
else
  echo "all_reduce_perf: not installed (nccl-tests); no reference figures"
fi
exit $rc

#!/bin/sh
# Writes what tests/device/nccl_check.sh needs on a GPU machine that lacks the build's packages:
# DIR/fw_collective_probe (without debug sections) and DIR/lib/ with the shared libraries it links
# beyond glibc and the C++ runtime (spdlog, fmt, Gloo and theirs). Run it where the probe was
# built; then, on the GPU machine: FW_PROBE_BUNDLE=DIR sh tests/device/nccl_check.sh.
# Usage: make_probe_bundle.sh DIR   (FW_BUILD_DIR: the build folder, default build/)
set -eu
[ $# -eq 1 ] || { echo "usage: $0 DIR" >&2; exit 2; }
dir=$1
build=${FW_BUILD_DIR:-build}
probe=$build/probes/collective/fw_collective_probe
if [ ! -x "$probe" ]; then
  echo "no $probe: cmake --build $build --target fw_collective_probe" >&2
  exit 3
fi
rm -rf "$dir"
mkdir -p "$dir/lib"
objcopy --strip-debug "$probe" "$dir/fw_collective_probe"
# glibc and the C++ runtime stay the GPU machine's own (an older copy here would shadow a newer
# one there that libnccl or the CUDA runtime may need).
ldd "$probe" | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | while read -r lib; do
  case $(basename "$lib") in
    libc.so.* | libm.so.* | libdl.so.* | libpthread.so.* | librt.so.* | ld-linux*.so.* | \
      libstdc++.so.* | libgcc_s.so.*) continue ;;
  esac
  cp -L "$lib" "$dir/lib/"
done
glibc=$(objdump -T "$dir/fw_collective_probe" "$dir"/lib/* 2>/dev/null |
  grep -o 'GLIBC_2\.[0-9]*' | sort -Vu | tail -1)
cxx=$(objdump -T "$dir/fw_collective_probe" "$dir"/lib/* 2>/dev/null |
  grep -o 'GLIBCXX_3\.4\.[0-9]*' | sort -Vu | tail -1)
echo "$dir: $(du -sh "$dir" | cut -f1), $(ls "$dir/lib" | wc -l) libraries; needs $glibc, $cxx"

# Shared by the package tests (sourced): a temporary directory removed on exit, failure counting,
# and the skip rule for missing tools.
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# require_tools TOOL...: exits 77 (ctest's skip) naming the first tool that is not installed.
require_tools() {
  local tool
  for tool; do
    if ! command -v "$tool" >/dev/null; then
      echo "SKIP: $tool is not installed (scripts/setup installs it)"
      exit 77
    fi
  done
}

# finish: the verdict, as the exit status.
finish() {
  [ "$failures" = 0 ] || { echo "$failures failure(s)"; exit 1; }
  echo "PASS"
  exit 0
}

# Sourced by the cluster tests: their arguments (BIN_DIR MODELS_DIR WORK_DIR) and their
# ends. A test names itself in $test first.
set -euo pipefail
bin=$(realpath "$1") models=$(realpath "$2") work=$(realpath -m "$3")
export PATH=$bin:$PATH
# Exit 77, which ctest reports as skipped; MT_REQUIRE_CLUSTER_TESTS=1: a failure.
skip() {
  [ "${MT_REQUIRE_CLUSTER_TESTS:-0}" = 1 ] && fail "$*"
  echo "$test test: SKIPPED: $*"
  exit 77
}
fail() { echo "$test test: FAILED: $*" >&2; exit 1; }
# Seconds since $1 (an $EPOCHREALTIME), to a tenth.
since() { python3 -c "print(f'{$EPOCHREALTIME - $1:.1f}')"; }
# Whether $1 < $2, as decimals.
below() { python3 -c "import sys; sys.exit(0 if $1 < $2 else 1)"; }

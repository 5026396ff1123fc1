#!/bin/sh
# cuda_backend_test as a GPU node without mtc runs it: plans written beforehand by
# --write-plans. Checks that every case's plan is written and found, that a missing
# plan fails the run (GPU or not), and, without a GPU, that MT_REQUIRE_GPU=1 turns the
# skips into failures. usage: precompiled_plans.sh CUDA_BACKEND_TEST WORK_DIR
set -eu
test_binary=$1 work=$2
rm -rf "$work" && mkdir -p "$work/plans" "$work/empty"
fail() { echo "precompiled_plans: $*" >&2; exit 1; }

"$test_binary" --write-plans "$work/plans" >"$work/write.log" 2>&1 ||
  { cat "$work/write.log"; fail "--write-plans failed"; }
cases=$("$test_binary" --gtest_list_tests --gtest_filter='Ops/*' | grep -c '^  ')
written=$(ls "$work/plans" | grep -c '\.mtp$')
[ "$written" -eq "$cases" ] || fail "$written plans written for $cases cases"
grep -q "^cuda_backend_test: $cases plans written to $work/plans" "$work/write.log" ||
  { cat "$work/write.log"; fail "--write-plans did not report $cases plans"; }

# Every case from the directory: each must find and read its plan.
MT_TEST_PLANS="$work/plans" "$test_binary" --gtest_brief=1 >"$work/run.log" 2>&1 ||
  { cat "$work/run.log"; fail "a case failed with every plan present"; }
grep -q "plans from $work/plans" "$work/run.log" || fail "the run did not use the directory"

# A directory without the plans: every case fails, naming the missing file.
if MT_TEST_PLANS="$work/empty" "$test_binary" --gtest_filter='*gelu_fp32*' >"$work/missing.log" 2>&1; then
  cat "$work/missing.log"; fail "a missing plan passed"
fi
grep -q "no precompiled plan $work/empty/gelu_fp32.mtp" "$work/missing.log" ||
  { cat "$work/missing.log"; fail "the failure does not name the missing plan"; }

# Without a GPU: loud, and a failure when a GPU is required.
if grep -q "no GPU is visible" "$work/run.log"; then
  grep -q "EVERY GPU CASE BELOW IS SKIPPED" "$work/run.log" || fail "the skip is not announced"
  if MT_REQUIRE_GPU=1 MT_TEST_PLANS="$work/plans" "$test_binary" --gtest_filter='CudaAdamW*' \
       >"$work/required.log" 2>&1; then
    cat "$work/required.log"; fail "MT_REQUIRE_GPU=1 passed without a GPU"
  fi
  grep -q "MT_REQUIRE_GPU is set" "$work/required.log" || fail "the failure does not say why"
fi
echo "precompiled_plans: ok ($cases plans)"

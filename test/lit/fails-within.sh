#!/bin/sh
# fails-within SECONDS COMMAND...: succeeds when COMMAND fails (exits non-zero) before
# SECONDS pass. A command that succeeds, or still runs at the limit (a hang: timeout's
# 124), fails the test — `not timeout N ...` would pass a hang.
limit=$1
shift
timeout "$limit" "$@"
status=$?
if [ "$status" -eq 124 ]; then
  echo "fails-within: still running after $limit s (a hang): $*" >&2
  exit 1
fi
if [ "$status" -eq 0 ]; then
  echo "fails-within: succeeded, expected a failure: $*" >&2
  exit 1
fi
exit 0

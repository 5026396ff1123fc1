#!/bin/sh
# fails-within SECONDS COMMAND...: succeeds when COMMAND fails (exits non-zero, or dies
# of a signal) before SECONDS pass. A command that succeeds, is still running at the
# limit (a hang; one that ignores SIGTERM is killed 10 s later), or cannot be run at all
# (125-127) fails the test — `not timeout N ...` would pass a hang.
limit=$1
shift
started=$(date +%s)
timeout -k 10 "$limit" "$@"
status=$?
if [ "$status" -eq 124 ] || [ $(($(date +%s) - started)) -ge "$limit" ]; then
  echo "fails-within: still running after $limit s (a hang): $*" >&2
  exit 1
fi
if [ "$status" -ge 125 ] && [ "$status" -le 127 ]; then
  echo "fails-within: could not run (exit $status): $*" >&2
  exit 1
fi
if [ "$status" -eq 0 ]; then
  echo "fails-within: succeeded, expected a failure: $*" >&2
  exit 1
fi
exit 0

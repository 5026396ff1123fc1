#!/bin/sh
# Runs libexec/<this name> with the bundle's libraries and this machine's CUDA libraries.
here=$(cd "$(dirname "$0")/.." && pwd)
. "$here/lib/paths.sh"
exec "$here/libexec/$(basename "$0")" "$@"

#!/usr/bin/env bash
# README command 2: installs what is missing, builds, and runs every test (lit and
# GoogleTest, under one ctest).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)"

#!/usr/bin/env bash
# Fair shares of the server's memory budget: a 16 MiB HTTP/1.1 download alone, then beside two
# HTTP/2 connections × 128 never-read streams (one-byte window) from another address, against
# one in-process server with a 16 MiB budget. Prints both times; the test behind it asserts
# that the download never waited for the shared budget (docs/security.md, "Fair shares").
#
# Usage: scripts/bench-fair-shares.sh [RUNS]   (default 3; each run is one test invocation)
set -euo pipefail

cd "$(dirname "$0")/.."
runs=${1:-3}
for i in $(seq 1 "$runs"); do
    cargo test -q -p xfer-http --test suite never_read -- --nocapture 2>&1 |
        grep -E "unloaded|test result" | sed "s/^/run $i: /"
done

#!/usr/bin/env bash
# One file from one source and from two, each source behind its own rate-limited relay on
# loopback (crates/test-support, `rate-relay`: one pace shared by all connections of a source,
# server-to-client only): the multi-source download should get close to the sum of the rates.
#
# Usage: scripts/bench-multi-source.sh [OUT_DIR]
#   SIZE=1073741824   bytes (default 1 GiB, in /dev/shm)
#   MBIT=500          rate of each source's relay, Mbit/s
#   RUNS=3            runs of each row, interleaved
#   XFER_ARGS="..."   extra `xfer get` flags (default none: 8 HTTP/1.1 lanes per source)
#
# Prints the goodput of each run (the whole command: stat, agreement, transfer, whole-file
# check) and the load average; writes results.txt to OUT_DIR.
set -euo pipefail

cd "$(dirname "$0")/.."
SIZE=${SIZE:-1073741824}
MBIT=${MBIT:-500}
RUNS=${RUNS:-3}
OUT=${1:-target/bench-multi-source/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"

cargo build --release -q -p xfer-cli -p xfer-test-support --bins
XFER=$PWD/target/release/xfer
RELAY=$PWD/target/release/rate-relay

WORK=$(mktemp -d /dev/shm/xfer-bench-multi.XXXXXX)
PIDS=()
# Servers and relays start inside command substitutions: their PIDs go to a file.
cleanup() {
    for p in "${PIDS[@]}" $(cat "$WORK/pids" 2>/dev/null); do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

start_xfer() {
    local name=$1 log=$WORK/$1.log
    mkdir -p "$WORK/$name"
    (cd "$WORK/$name" && exec "$XFER" serve "$WORK/$name/root" --self-signed --no-quic \
        --listen 127.0.0.1:0 >"$log" 2>&1) &
    echo "$!" >>"$WORK/pids"
    for _ in $(seq 100); do
        if grep -q "serving .* at " "$log" 2>/dev/null; then break; fi
        sleep 0.1
    done
    grep -o 'at https://[0-9.:]*' "$log" | head -1 | cut -d' ' -f2 | sed 's#https://##'
}

mkdir -p "$WORK/a/root" "$WORK/b/root"
head -c "$SIZE" /dev/urandom >"$WORK/a/root/f.bin"
cp "$WORK/a/root/f.bin" "$WORK/b/root/f.bin"
ADDR_A=$(start_xfer a)
ADDR_B=$(start_xfer b)
relay() {
    local out=$WORK/relay.$1
    "$RELAY" "$2" "$MBIT" >"$out" &
    echo "$!" >>"$WORK/pids"
    for _ in $(seq 50); do [[ -s "$out" ]] && break; sleep 0.1; done
    head -1 "$out"
}
RELAY_A=$(relay a "$ADDR_A")
RELAY_B=$(relay b "$ADDR_B")
CA=(--ca-cert "$WORK/a/xfer-cert/cert.pem" --ca-cert "$WORK/b/xfer-cert/cert.pem")
# The servers hash the file once (Repr-Digest) before the first timed run.
"$XFER" get "https://$ADDR_A/f.bin" "https://$ADDR_B/f.bin" "$WORK/warm" "${CA[@]}" --quiet \
    --no-verify >/dev/null
rm -f "$WORK/warm"

row() {
    local name=$1; shift
    local start end
    start=$(date +%s.%N)
    "$XFER" get "$@" "$WORK/out" "${CA[@]}" --overwrite --json ${XFER_ARGS:-} >"$WORK/report.json"
    end=$(date +%s.%N)
    python3 scripts/lib/multi_source_row.py "$name" "$start" "$end" "$SIZE" "$WORK/report.json"
    rm -f "$WORK/out"
}

{
    echo "# $(date -u +%FT%TZ) size $SIZE, each source ${MBIT} Mbit/s, $(nproc) cores"
    echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"
    for i in $(seq "$RUNS"); do
        row "one source" "https://$RELAY_A/f.bin"
        row "two sources" "https://$RELAY_A/f.bin" "https://$RELAY_B/f.bin"
    done
    echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/results.txt"

#!/usr/bin/env bash
# Load on one server: CLIENTS concurrent `xfer get` processes (default 200) against one
# `xfer serve`, a third each over HTTP/1.1 (2 connections), HTTP/2 (1 connection × 4 streams)
# and QUIC (1 connection × 4 streams), mixed file sizes. Every copy is compared with its
# source (SHA-256); the server's peak RSS (VmHWM) is read from /proc at the end.
#
# The run is repeated for each memory budget in BUDGETS (default "64MiB 512MiB") side by side,
# so the cost of a small budget (waiting for room) shows as a ratio within one run.
#
# Usage: scripts/bench-load.sh [OUT_DIR]
#   XFER=path       xfer binary (default: builds target/release/xfer)
#   CLIENTS=n       concurrent clients (default 200)
#   BUDGETS="a b"   --memory-budget values to compare
#   SIZES="a b"     file sizes in bytes (default 64 KiB, 1 MiB, 4 MiB + 1, 16 MiB)
#
# All clients come from 127.0.0.1, so the server's per-address cap (128 connections) is
# raised for the run; everything else is the default.
set -euo pipefail

cd "$(dirname "$0")/.."
CLIENTS=${CLIENTS:-200}
BUDGETS=${BUDGETS:-"64MiB 512MiB"}
SIZES=${SIZES:-"65536 1048576 4194305 16777216"}
OUT=${1:-target/bench-load/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

if [[ -z "${XFER:-}" ]]; then
    cargo build --release -q -p xfer-cli
    XFER=$PWD/target/release/xfer
fi

WORK=$(mktemp -d /dev/shm/xfer-bench-load.XXXXXX)
SERVER=""
cleanup() {
    [[ -n "$SERVER" ]] && kill "$SERVER" 2>/dev/null || true
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

mkdir -p "$WORK/root"
read -r -a sizes <<<"$SIZES"
for i in "${!sizes[@]}"; do
    head -c "${sizes[$i]}" /dev/urandom >"$WORK/root/f$i.bin"
    sha256sum "$WORK/root/f$i.bin" | cut -d' ' -f1 >"$WORK/f$i.sha256"
done

port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
field() { awk -v k="$1" '$1==k {print $2}' "/proc/$2/status"; }
cpu_s() { awk '{printf "%.1f", ($14+$15)/100}' "/proc/$1/stat"; }

printf '%-8s %8s %8s %10s %10s %12s %12s %10s\n' budget clients failed wall_s MB/s srv_peak_MiB srv_after_MiB srv_cpu_s | tee "$OUT/results.txt"
for budget in $BUDGETS; do
    P=$(port)
    "$XFER" serve "$WORK/root" --self-signed --cert-dir "$WORK/cert" --listen "127.0.0.1:$P" \
        --memory-budget "$budget" --max-connections-per-address 4096 \
        >"$OUT/serve-$budget.log" 2>&1 &
    SERVER=$!
    for _ in $(seq 100); do
        (exec 3<>"/dev/tcp/127.0.0.1/$P") 2>/dev/null && break
        sleep 0.1
    done
    rm -rf "$WORK/out"
    mkdir -p "$WORK/out"
    start=$(date +%s.%N)
    pids=()
    for c in $(seq 0 $((CLIENTS - 1))); do
        f=$((c % ${#sizes[@]}))
        case $((c % 3)) in
            0) args=("https://127.0.0.1:$P/f$f.bin" --protocol http1 -c 2) ;;
            1) args=("https://127.0.0.1:$P/f$f.bin" --protocol http2 -c 1 --streams 4) ;;
            2) args=("quic://127.0.0.1:$P/f$f.bin" -c 1 --streams 4) ;;
        esac
        "$XFER" get "${args[@]}" --ca-cert "$WORK/cert/cert.pem" -o "$WORK/out/c$c.bin" \
            >/dev/null 2>>"$OUT/clients-$budget.log" &
        pids+=($!)
    done
    failed=0
    for p in "${pids[@]}"; do wait "$p" || failed=$((failed + 1)); done
    end=$(date +%s.%N)
    bytes=0
    for c in $(seq 0 $((CLIENTS - 1))); do
        f=$((c % ${#sizes[@]}))
        if [[ "$(sha256sum "$WORK/out/c$c.bin" 2>/dev/null | cut -d' ' -f1)" != "$(cat "$WORK/f$f.sha256")" ]]; then
            failed=$((failed + 1))
            echo "client $c: copy differs or is missing" >>"$OUT/clients-$budget.log"
        fi
        bytes=$((bytes + sizes[f]))
    done
    peak=$(field VmHWM: "$SERVER")
    sleep 2
    after=$(field VmRSS: "$SERVER")
    cpu=$(cpu_s "$SERVER")
    kill "$SERVER"
    wait "$SERVER" 2>/dev/null || true
    SERVER=""
    python3 - "$budget" "$CLIENTS" "$failed" "$start" "$end" "$bytes" "$peak" "$after" "$cpu" <<'EOF' | tee -a "$OUT/results.txt"
import sys
b, n, failed, start, end, nbytes, peak, after, cpu = sys.argv[1:]
wall = float(end) - float(start)
print(f"{b:<8} {n:>8} {failed:>8} {wall:>10.1f} {int(nbytes)/wall/1e6:>10.0f} {int(peak)/1024:>12.0f} {int(after)/1024:>12.0f} {cpu:>10}")
EOF
done
echo "load: $(uptime | sed 's/.*load average: //')" | tee -a "$OUT/results.txt"
echo "logs in $OUT"

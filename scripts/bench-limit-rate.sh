#!/usr/bin/env bash
# --limit-rate across an emulated long path (issue 41): one xfer server in the lab's server
# namespace, one `xfer get --limit-rate RATE` from the client namespace over a RATE_MBIT
# (default 1000) Mbit/s, RTT_MS (default 50) ms link, tuned profile. The link is held open by
# the lab's emulator (crates/lab, examples/lab_hold.rs) so that the client interface's byte
# counter can be read once a second while the transfer runs; the script prints the rate of
# every whole second (wire, and payload scaled by the run's payload/wire ratio), each
# second's error against the cap, the mean error, and xfer's own average.
#
# Usage: sudo scripts/bench-limit-rate.sh [OUT_DIR]
#   LIMIT=200Mbit  SIZE=256MiB  RTT_MS=50  RATE_MBIT=1000  PREFIX=xlrt  XFER_ARGS="..."  SERVE_ARGS="..."
#   XFER=path  HOLD=path  (default: release builds of xfer and lab_hold)
# Needs root, iproute2 and /dev/net/tun.
set -euo pipefail

cd "$(dirname "$0")/.."
LIMIT=${LIMIT:-200Mbit}
SIZE=${SIZE:-256MiB}
RTT_MS=${RTT_MS:-50}
RATE_MBIT=${RATE_MBIT:-1000}
PREFIX=${PREFIX:-xlrt}
OUT=${1:-target/bench-limit-rate/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

TARGET=${CARGO_TARGET_DIR:-target}
if [[ -z "${XFER:-}" ]]; then
    cargo build --release -q -p xfer-cli
    XFER=$TARGET/release/xfer
fi
if [[ -z "${HOLD:-}" ]]; then
    cargo build --release -q -p xfer-lab --example lab_hold
    HOLD=$TARGET/release/examples/lab_hold
fi
command -v ip >/dev/null || { echo "needs iproute2" >&2; exit 1; }

WORK=$(mktemp -d /dev/shm/xfer-bench-lrt.XXXXXX)
PIDS=()
# shellcheck source=lib/lab-hold.sh
source scripts/lib/lab-hold.sh
trap lab_hold_cleanup EXIT
lab_hold_start "$PREFIX" "$RTT_MS" "$RATE_MBIT" tuned
SRV_ADDR=10.77.0.1

mkdir -p "$WORK/root"
BYTES=$(python3 -c "
import re,sys
m=re.fullmatch(r'(\d+)(MiB|GiB)', sys.argv[1]); print(int(m[1])*{'MiB':1<<20,'GiB':1<<30}[m[2]])" "$SIZE")
head -c "$BYTES" /dev/urandom >"$WORK/root/f.bin"

ip netns exec "$SRV" "$XFER" serve "$WORK/root" --self-signed --cert-dir "$WORK/cert" \
    --cert-name "$SRV_ADDR" --listen "$SRV_ADDR:8443" --no-quic ${SERVE_ARGS:-} >"$WORK/serve.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do grep -q "serving" "$WORK/serve.log" 2>/dev/null && break; sleep 0.1; done
CA=$WORK/cert/cert.pem

rx() { ip netns exec "$CLI" cat /sys/class/net/xlab0/statistics/rx_bytes; }

ip netns exec "$CLI" "$XFER" get "https://$SRV_ADDR:8443/f.bin" -o "$WORK/out" --ca-cert "$CA" \
    --overwrite --json --limit-rate "$LIMIT" ${XFER_ARGS:-} >"$OUT/report.json" &
GET=$!
PIDS+=($GET)
: >"$OUT/samples.txt"
while kill -0 "$GET" 2>/dev/null; do
    echo "$(date +%s.%N) $(rx)" >>"$OUT/samples.txt"
    sleep "${SAMPLE_SECONDS:-1}"
done
wait "$GET"
echo "$(date +%s.%N) $(rx)" >>"$OUT/samples.txt"

{
    echo "# bench-limit-rate $(date -u +%FT%TZ): xfer get --limit-rate $LIMIT, $SIZE, link ${RATE_MBIT} Mbit/s ${RTT_MS} ms (tuned), $(nproc) cores, $XFER"
    echo "# load: $(cut -d' ' -f1-3 /proc/loadavg)"
    python3 scripts/lib/limit_rate_seconds.py "$OUT/samples.txt" "$OUT/report.json"
} | tee "$OUT/results.txt"

#!/usr/bin/env bash
# Several sources across an emulated long path (issue 14): two xfer servers in the lab's
# server namespace hold the same SIZE file (default 2 GiB, in /dev/shm), each behind its own
# rate-relay that paces all of that source's connections together to MBIT (default 500)
# Mbit/s. From the client namespace, alternating, REPS times (default 2):
#
#   one source    xfer get https://relay-a/f.bin DEST
#   two sources   xfer get https://relay-a/f.bin https://relay-b/f.bin DEST
#
# The link is RATE_MBIT (default 1200) at RTT_MS (default 100), tuned profile, so the sources,
# not the link, are the limit. Goodput is the whole command (stat, agreement of the sources,
# transfer, whole-file SHA-256 check) into /dev/shm.
#
# Usage: sudo scripts/bench-multi-source-lab.sh [OUT_DIR]
#   SIZE=2GiB  MBIT=500  RTT_MS=100  RATE_MBIT=1200  REPS=2  PREFIX=xmsl  XFER_ARGS="..."
#   XFER=path  (default: builds target/release/xfer)
# Needs root, iproute2 and /dev/net/tun.
set -euo pipefail

cd "$(dirname "$0")/.."
SIZE=${SIZE:-2GiB}
MBIT=${MBIT:-500}
RTT_MS=${RTT_MS:-100}
RATE_MBIT=${RATE_MBIT:-1200}
REPS=${REPS:-2}
PREFIX=${PREFIX:-xmsl}
OUT=${1:-target/bench-multi-source-lab/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

if [[ -z "${XFER:-}" ]]; then
    cargo build --release -q -p xfer-cli
    XFER=$PWD/target/release/xfer
fi
cargo build --release -q -p xfer-test-support --bins
cargo build --release -q -p xfer-lab --example lab_hold
RELAY=$PWD/target/release/rate-relay
HOLD=$PWD/target/release/examples/lab_hold
command -v ip >/dev/null || { echo "needs iproute2" >&2; exit 1; }

WORK=$(mktemp -d /dev/shm/xfer-bench-msl.XXXXXX)
PIDS=()
# shellcheck source=lib/lab-hold.sh
source scripts/lib/lab-hold.sh
trap lab_hold_cleanup EXIT
lab_hold_start "$PREFIX" "$RTT_MS" "$RATE_MBIT" tuned
SRV_ADDR=10.77.0.1

BYTES=$(python3 -c "
import re,sys
m=re.fullmatch(r'(\d+)(|KiB|MiB|GiB)', sys.argv[1]); n=int(m[1])
print(n*{'':1,'KiB':1<<10,'MiB':1<<20,'GiB':1<<30}[m[2]])" "$SIZE")
mkdir -p "$WORK/a" "$WORK/b"
head -c "$BYTES" /dev/urandom >"$WORK/a/f.bin"
cp "$WORK/a/f.bin" "$WORK/b/f.bin"

# One certificate for both servers; each listens on loopback inside the server namespace and
# is reached only through its relay on the link's address.
ip netns exec "$SRV" "$XFER" serve "$WORK/a" --self-signed --cert-dir "$WORK/cert" \
    --cert-name "$SRV_ADDR" --listen 127.0.0.1:9001 --no-quic >"$WORK/a.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do [[ -s "$WORK/cert/key.pem" ]] && break; sleep 0.1; done
CA=$WORK/cert/cert.pem
ip netns exec "$SRV" "$XFER" serve "$WORK/b" --tls-cert "$CA" --tls-key "$WORK/cert/key.pem" \
    --listen 127.0.0.1:9002 --no-quic >"$WORK/b.log" 2>&1 &
PIDS+=($!)
for name in a b; do
    for _ in $(seq 100); do grep -q "serving" "$WORK/$name.log" 2>/dev/null && break; sleep 0.1; done
done
ip netns exec "$SRV" "$RELAY" 127.0.0.1:9001 "$MBIT" "$SRV_ADDR:8441" >"$WORK/relay-a" &
PIDS+=($!)
ip netns exec "$SRV" "$RELAY" 127.0.0.1:9002 "$MBIT" "$SRV_ADDR:8442" >"$WORK/relay-b" &
PIDS+=($!)
for r in a b; do
    for _ in $(seq 50); do [[ -s "$WORK/relay-$r" ]] && break; sleep 0.1; done
done
A=https://$SRV_ADDR:8441/f.bin
B=https://$SRV_ADDR:8442/f.bin

# The servers hash the file once (Repr-Digest) before the first timed run.
ip netns exec "$CLI" "$XFER" get "$A" "$B" "$WORK/warm" --ca-cert "$CA" --quiet --no-verify \
    >/dev/null
rm -f "$WORK/warm"

row() {
    local name=$1; shift
    local start end
    start=$(date +%s.%N)
    ip netns exec "$CLI" "$XFER" get "$@" "$WORK/out" --ca-cert "$CA" --overwrite --json \
        ${XFER_ARGS:-} >"$WORK/report.json"
    end=$(date +%s.%N)
    python3 scripts/lib/multi_source_row.py "$name" "$start" "$end" "$BYTES" "$WORK/report.json"
    rm -f "$WORK/out"
}

{
    echo "# bench-multi-source-lab $(date -u +%FT%TZ): $SIZE ($BYTES bytes), each source ${MBIT} Mbit/s, link ${RATE_MBIT} Mbit/s ${RTT_MS} ms (tuned), $(nproc) cores"
    echo "# load before: $(cut -d' ' -f1-3 /proc/loadavg)"
    for i in $(seq "$REPS"); do
        row "one source" "$A"
        row "two sources" "$A" "$B"
    done
    echo "# load after: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/results.txt"

#!/usr/bin/env bash
# How one large download scales with cores (issue 38): `xfer serve` and `xfer get` on
# loopback, both pinned with taskset to the same CPU set, for each set in CPUSETS, TLS and
# SHA-256 verification on (the defaults), memory to memory (synthetic data, written to
# /dev/shm). Prints each run's rate and both processes' CPU seconds, then per protocol the
# rate of every CPU set over the first set's, from runs interleaved round by round.
#
# Usage: scripts/bench-cores.sh [OUT_DIR]
#   SIZE=8589934592   bytes per download (8 GiB)
#   CPUSETS="0 0,1"   taskset CPU lists; the first is the baseline (on a larger host: "0 0-1 0-3 0-7")
#   PROTOCOLS="http1 quic"   http1 (8 connections), http2 or quic (2 x 4)
#   ROUNDS=2          each set and protocol this many times, in turn
#   XFER=path         (default: builds target/release/xfer)
#   GET_ARGS="..."    more `xfer get` arguments for every run (e.g. --no-whole-sha256)
set -euo pipefail

cd "$(dirname "$0")/.."
SIZE=${SIZE:-8589934592}
CPUSETS=${CPUSETS:-"0 0,1"}
PROTOCOLS=${PROTOCOLS:-"http1 quic"}
ROUNDS=${ROUNDS:-2}
OUT=${1:-target/bench-cores/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
if [[ -z "${XFER:-}" ]]; then
    cargo build --release -q -p xfer-cli
    XFER=$(pwd)/${CARGO_TARGET_DIR:-target}/release/xfer
fi
command -v taskset >/dev/null || { echo "needs taskset (util-linux)" >&2; exit 1; }

WORK=$(mktemp -d /dev/shm/xfer-bench-cores.XXXXXX)
SERVER=
cleanup() {
    [[ -n "$SERVER" ]] && kill "$SERVER" 2>/dev/null && wait "$SERVER" 2>/dev/null
    rm -rf "$WORK"
}
trap cleanup EXIT
mkdir -p "$WORK/root"

cpu_of() { awk '{print ($14 + $15) / '"$(getconf CLK_TCK)"'}' "/proc/$1/stat"; }

echo "# bench-cores $(date -u +%FT%TZ): $SIZE bytes, $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), load $(cut -d' ' -f1-3 /proc/loadavg)" | tee "$OUT/results.txt"
printf '%-6s %-8s %-6s %10s %10s %10s\n' protocol cpus round Gbit/s client_s server_s | tee -a "$OUT/results.txt"
for round in $(seq "$ROUNDS"); do
    for cpus in $CPUSETS; do
        taskset -c "$cpus" "$XFER" serve "$WORK/root" --self-signed --cert-dir "$WORK/cert" \
            --listen 127.0.0.1:0 >"$WORK/serve.log" 2>&1 &
        SERVER=$!
        url=
        for _ in $(seq 200); do
            url=$(grep -o 'at https://[0-9.:]*' "$WORK/serve.log" | head -1 | cut -d' ' -f2) || true
            [[ -n "$url" ]] && break
            sleep 0.05
        done
        [[ -n "$url" ]] || { echo "xfer serve did not start:" >&2; cat "$WORK/serve.log" >&2; exit 1; }
        for proto in $PROTOCOLS; do
            case $proto in
                quic) src="quic://${url#https://}" args=() ;;
                *) src=$url args=(--protocol "$proto") ;;
            esac
            before=$(cpu_of "$SERVER")
            /usr/bin/time -f '%U %S' -o "$WORK/time" taskset -c "$cpus" "$XFER" get \
                "$src/.xfer/synthetic?size=$SIZE&seed=5" -o "$WORK/out.bin" --overwrite --quiet \
                --json --ca-cert "$WORK/cert/cert.pem" "${args[@]}" ${GET_ARGS:-} >"$WORK/report.json"
            after=$(cpu_of "$SERVER")
            python3 - "$WORK/report.json" "$WORK/time" "$proto" "$cpus" "$round" "$before" "$after" <<'PY' | tee -a "$OUT/results.txt"
import json, sys
report, timef, proto, cpus, rnd, before, after = sys.argv[1:]
r = json.load(open(report))
user, sys_ = map(float, open(timef).read().split()[-2:])
rate = r["received_bytes"] * 8 / r["seconds"] / 1e9
print(f"{proto:<6} {cpus:<8} {rnd:<6} {rate:10.2f} {user + sys_:10.1f} {float(after) - float(before):10.1f}")
PY
            rm -f "$WORK/out.bin"
        done
        kill "$SERVER"; wait "$SERVER" 2>/dev/null || true; SERVER=
    done
done
python3 - "$OUT/results.txt" "$CPUSETS" <<'PY' | tee -a "$OUT/results.txt"
import sys, collections
rows = [l.split() for l in open(sys.argv[1]) if l[0] != "#" and not l.startswith("protocol")]
sets = sys.argv[2].split()
rates = collections.defaultdict(list)
for proto, cpus, _, rate, *_ in rows:
    rates[(proto, cpus)].append(float(rate))
for proto in dict.fromkeys(r[0] for r in rows):
    base = rates[(proto, sets[0])]
    for s in sets[1:]:
        got = rates[(proto, s)]
        ratios = [g / b for g, b in zip(got, base)]
        print(f"{proto}: cpus {s} over {sets[0]}: " + ", ".join(f"{x:.2f}" for x in ratios)
              + f" (mean rates {sum(got)/len(got):.2f} vs {sum(base)/len(base):.2f} Gbit/s)")
PY

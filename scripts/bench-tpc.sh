#!/usr/bin/env bash
# HTTP third-party copy across an emulated long path (issue 12): a SIZE file (default 2 GiB)
# on xfer server A in the lab's server namespace, xfer server B in its client namespace, and
# in the same run, alternating, REPS times (default 2):
#
#   get        xfer get https://A/big.bin               (in the client namespace, into B's disk)
#   tpc-pull   gfal-copy --copy-mode pull A/big.bin B/  (COPY to B with Source: A; B's engine pulls)
#   tpc-push   gfal-copy --copy-mode push A/big.bin B/  (COPY to A with Destination: B; A pushes)
#
# Bytes flow from A to B in every row, over the same 1 Gbit/s, 100 ms link (tuned profile).
# The token travels as gfal2 sends it: BEARER_TOKEN to the endpoint asked, and as
# TransferHeaderAuthorization for the other one.
#
# Usage: sudo scripts/bench-tpc.sh [OUT_DIR]
#   SIZE=2GiB  RTT_MS=100  RATE_MBIT=1000  REPS=2  PREFIX=xtpcb
#   XFER=path  (default: builds target/release/xfer)
# Needs root, gfal2 + gfal2-plugin-http + gfal2-util-scripts, openssl, iproute2.
set -euo pipefail

cd "$(dirname "$0")/.."
SIZE=${SIZE:-2GiB}
RTT_MS=${RTT_MS:-100}
RATE_MBIT=${RATE_MBIT:-1000}
REPS=${REPS:-2}
PREFIX=${PREFIX:-xtpcb}
OUT=${1:-target/bench-tpc/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)
export GFAL_PYTHONBIN=/usr/bin/python3

if [[ -z "${XFER:-}" ]]; then
    cargo build --release -q -p xfer-cli
    XFER=$PWD/target/release/xfer
fi
cargo build --release -q -p xfer-lab --example lab_hold
HOLD=$PWD/target/release/examples/lab_hold
for tool in gfal-copy openssl ip; do
    command -v "$tool" >/dev/null || { echo "needs $tool" >&2; exit 1; }
done

WORK=$(mktemp -d "${WORKDIR:-$PWD/target}/xfer-bench-tpc.XXXXXX")
PIDS=()
# shellcheck source=lib/lab-hold.sh
source scripts/lib/lab-hold.sh
trap lab_hold_cleanup EXIT
lab_hold_start "$PREFIX" "$RTT_MS" "$RATE_MBIT" tuned

mkdir -p "$WORK/a" "$WORK/b" "$WORK/ca"
BYTES=$(python3 -c "
import re,sys
m=re.fullmatch(r'(\d+)(|KiB|MiB|GiB)', sys.argv[1]); n=int(m[1])
print(n*{'':1,'KiB':1<<10,'MiB':1<<20,'GiB':1<<30}[m[2]])" "$SIZE")
head -c "$BYTES" /dev/urandom >"$WORK/a/big.bin"
SHA=$(sha256sum "$WORK/a/big.bin" | cut -d' ' -f1)
printf '[[token]]\nname = "fts"\ntoken = "bench-token"\naccess = "write"\nprefix = "/"\n' >"$WORK/access.toml"
echo bench-token >"$WORK/token"

# One certificate for both servers (names: both lab addresses); davix trusts it through a
# hashed CA directory, the servers through --tpc-ca-cert.
ip netns exec "$SRV" "$XFER" serve "$WORK/a" --self-signed --cert-dir "$WORK/cert" \
    --cert-name 10.77.0.1 --cert-name 10.77.0.2 --listen 10.77.0.1:8443 --no-quic \
    --access "$WORK/access.toml" --no-anonymous-read --allow-upload \
    --tpc-ca-cert "$WORK/cert/cert.pem" --tpc-allow 10.77.0.0/24 >"$WORK/a.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do [[ -s "$WORK/cert/cert.pem" ]] && break; sleep 0.1; done
CA=$WORK/cert/cert.pem
cp "$CA" "$WORK/ca/$(openssl x509 -hash -noout -in "$CA").0"
ip netns exec "$CLI" "$XFER" serve "$WORK/b" --tls-cert "$CA" --tls-key "$WORK/cert/key.pem" \
    --listen 10.77.0.2:8443 --no-quic --access "$WORK/access.toml" --allow-upload \
    --tpc-ca-cert "$CA" --tpc-allow 10.77.0.0/24 >"$WORK/b.log" 2>&1 &
PIDS+=($!)
sleep 1

A=https://10.77.0.1:8443
B=https://10.77.0.2:8443
GFAL_ENV=(env BEARER_TOKEN=bench-token X509_CERT_DIR="$WORK/ca" GFAL_PYTHONBIN=/usr/bin/python3)
declare -A CMD
CMD[get]="$XFER get $A/big.bin -o $WORK/b/get.bin --ca-cert $CA --token-file $WORK/token --quiet"
CMD[tpc-pull]="${GFAL_ENV[*]} gfal-copy --copy-mode pull -t 600 $A/big.bin $B/pull.bin"
CMD[tpc-push]="${GFAL_ENV[*]} gfal-copy --copy-mode push -t 600 $A/big.bin $B/push.bin"
ROWS=${ROWS:-"get tpc-pull tpc-push"}

{
    echo "# bench-tpc $(date -u +%FT%TZ): $SIZE ($BYTES bytes), ${RATE_MBIT} Mbit/s, ${RTT_MS} ms, tuned profile"
    echo "# $(gfal-copy --version 2>&1 | tr '\n' ' ')"
    printf '%-9s %4s %9s %9s %-6s %s\n' row rep seconds Mbit/s check "load average (1, 5, 15 min) before"
} | tee "$OUT/table.txt"
for rep in $(seq "$REPS"); do
    for row in $ROWS; do
        case $row in get) dest=get.bin ;; tpc-pull) dest=pull.bin ;; tpc-push) dest=push.bin ;; esac
        rm -f "$WORK/b/$dest"
        load=$(cut -d' ' -f1-3 /proc/loadavg)
        start=$(date +%s.%N)
        if ip netns exec "$CLI" ${CMD[$row]} >"$WORK/$row.$rep.log" 2>&1; then status=ok; else status="exit$?"; fi
        end=$(date +%s.%N)
        secs=$(awk -v a="$start" -v b="$end" 'BEGIN {printf "%.2f", b - a}')
        mbps=$(awk -v n="$BYTES" -v s="$secs" 'BEGIN {printf "%.0f", n * 8 / s / 1e6}')
        if [[ $status == ok ]] && [[ "$(sha256sum "$WORK/b/$dest" | cut -d' ' -f1)" != "$SHA" ]]; then
            status=differs
        fi
        printf '%-9s %4s %9s %9s %-6s %s\n' "$row" "$rep" "$secs" "$mbps" "$status" "$load" | tee -a "$OUT/table.txt"
        [[ $status == ok ]] || tail -5 "$WORK/$row.$rep.log" >&2
        rm -f "$WORK/b/$dest"
    done
done
awk '$1 !~ /^#/ && $1 != "row" && $5 == "ok" { s[$1] += $3; n[$1]++ }
     END { if (n["get"]) for (r in s) if (r != "get") printf "# %s / get (mean seconds): %.2f x goodput\n", r, (s["get"]/n["get"]) / (s[r]/n[r]) }' \
    "$OUT/table.txt" | tee -a "$OUT/table.txt"
echo "results in $OUT/table.txt" >&2

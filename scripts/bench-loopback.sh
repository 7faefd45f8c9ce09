#!/usr/bin/env bash
# Side-by-side loopback comparison: `xfer get` (HTTP/1.1 x8, HTTP/2 1x8 tuned and with spec
# defaults, QUIC 2x4; TLS and digests on/off) against curl (one connection, https and http) and
# iperf3 -P 8, all fetching/sending the same number of bytes over 127.0.0.1.
#
# Usage: scripts/bench-loopback.sh [OUT_DIR]
#   SIZE=2147483648   bytes per transfer (default 2 GiB; above 1 GiB the server skips its
#                     background whole-resource hash, so server CPU is per-request work only)
#   XFER=path         xfer binary (default: builds target/release/xfer)
#   ROWS="a,b,..."    only these rows (names as in the table); the `file` rows fetch a real
#                     file of SIZE random bytes, after the server has hashed it (Repr-Digest)
#   ROUNDS=N          run the rows N times over, in turn (names get ` #k`), for side-by-side
#                     samples on a noisy host
#
# Prints a table and writes results.json and results.csv to OUT_DIR (default
# target/bench-loopback/<UTC timestamp>). Client CPU is user+sys of the client process (from
# the kernel's accounting of the waited-for child); server CPU is utime+stime of the separate
# server process, read from /proc/PID/stat before and after each row.
set -euo pipefail

cd "$(dirname "$0")/.."
SIZE=${SIZE:-2147483648}
OUT=${1:-target/bench-loopback/$(date -u +%Y%m%dT%H%M%SZ)}
mkdir -p "$OUT"
OUT=$(cd "$OUT" && pwd)

if [[ -z "${XFER:-}" ]]; then
    cargo build --release -q -p xfer-cli
    XFER=$PWD/target/release/xfer
fi
if ! command -v iperf3 >/dev/null; then
    apt-get install -y iperf3 >/dev/null
fi

WORK=$(mktemp -d /dev/shm/xfer-bench-loopback.XXXXXX)
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    rm -rf "$WORK"
}
trap cleanup EXIT

mkdir -p "$WORK/root" "$WORK/tls" "$WORK/plain"

# Start `xfer serve` and wait for its "serving ... at URL" line; echoes "PID URL".
start_xfer() {
    local mode=$1 dir=$2 log=$2/serve.log
    (cd "$dir" && exec "$XFER" serve "$WORK/root" "$mode" --listen 127.0.0.1:0 >"$log" 2>&1) &
    local pid=$!
    for _ in $(seq 100); do
        if grep -q "serving .* at " "$log" 2>/dev/null; then break; fi
        sleep 0.1
    done
    local url
    url=$(grep -o 'at [a-z]*://[0-9.:]*' "$log" | head -1 | cut -d' ' -f2)
    [[ -n "$url" ]] || { echo "xfer serve $mode did not start:" >&2; cat "$log" >&2; exit 1; }
    echo "$pid $url"
}

read -r TLS_PID TLS_URL < <(start_xfer --self-signed "$WORK/tls")
PIDS+=("$TLS_PID")
read -r PLAIN_PID PLAIN_URL < <(start_xfer --plain "$WORK/plain")
PIDS+=("$PLAIN_PID")
CA=$WORK/tls/xfer-cert/cert.pem
QUIC_URL=quic://${TLS_URL#https://}
IPERF_PORT=$((20000 + RANDOM % 20000))
iperf3 -s -p "$IPERF_PORT" >/dev/null 2>&1 &
IPERF_PID=$!
PIDS+=("$IPERF_PID")
sleep 0.5

export XFER CA SIZE OUT WORK TLS_PID TLS_URL PLAIN_PID PLAIN_URL QUIC_URL IPERF_PORT IPERF_PID
export ROWS=${ROWS:-}
python3 - <<'PY'
import csv, json, os, platform, resource, subprocess, time

env = os.environ
size = int(env["SIZE"])
xfer, ca, work, out = env["XFER"], env["CA"], env["WORK"], env["OUT"]
path = f"/.xfer/synthetic?size={size}&seed=7"
tls_url, plain_url, quic_url = env["TLS_URL"] + path, env["PLAIN_URL"] + path, env["QUIC_URL"] + path
tls_file, quic_file = env["TLS_URL"] + "/file.bin", env["QUIC_URL"] + "/file.bin"
tick = os.sysconf("SC_CLK_TCK")

def cpu_of(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / tick  # utime + stime

def cpu_model():
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"

dest = os.path.join(work, "out.bin")
def xget(url, *flags):
    return [xfer, "get", url, "-o", dest, "--overwrite", "--quiet", "--ca-cert", ca, *flags]

def xbench(base, *flags):
    # Memory to memory, like iperf3: 8 lanes fetching synthetic data for a fixed window.
    return [xfer, "bench", base, "--concurrency", "8", "--duration", env.get("BENCH_SECS", "8"),
            "--mean-size", str(max(size // 8, 1 << 20)), "--size-sd", "0", "--json", "--ca-cert", ca, *flags]

curl_dest = os.path.join(work, "curl.out")

# name, kind, tls, digest, server pid env, command
rows = [
    ("iperf3 -P 8",                 "iperf3", False, False, "IPERF_PID",
        ["iperf3", "-c", "127.0.0.1", "-p", env["IPERF_PORT"], "-P", "8", "-n", str(size), "-J"]),
    ("curl 1x https",               "curl", True, False, "TLS_PID",
        ["curl", "-sS", "-f", "--cacert", ca, "-o", "/dev/null", tls_url]),
    ("curl 1x http",                "curl", False, False, "PLAIN_PID",
        ["curl", "-sS", "-f", "-o", "/dev/null", plain_url]),
    # Writing to tmpfs, as `xfer get` does: page allocation and copy are part of a download.
    ("curl 1x http to tmpfs",       "curl", False, False, "PLAIN_PID",
        ["curl", "-sS", "-f", "-o", curl_dest, plain_url]),
    ("xfer bench h1 x8 plain nodigest mem", "h1", False, False, "PLAIN_PID", xbench(env["PLAIN_URL"], "--protocol", "http1", "--no-verify")),
    ("xfer bench h1 x8 tls digest mem",     "h1", True,  True,  "TLS_PID",   xbench(env["TLS_URL"], "--protocol", "http1")),
    ("xfer bench h2 1x8 tls digest mem",    "h2", True,  True,  "TLS_PID",   xbench(env["TLS_URL"], "--protocol", "http2")),
    ("xfer bench quic 2x4 digest mem",      "quic", True, True, "TLS_PID",   xbench(env["QUIC_URL"])),
    ("xfer h1 x8 plain nodigest",   "h1", False, False, "PLAIN_PID", xget(plain_url, "--protocol", "http1", "--no-verify")),
    ("xfer h1 x8 plain digest",     "h1", False, True,  "PLAIN_PID", xget(plain_url, "--protocol", "http1")),
    ("xfer h1 x8 tls nodigest",     "h1", True,  False, "TLS_PID",   xget(tls_url, "--protocol", "http1", "--no-verify")),
    ("xfer h1 x8 tls digest",       "h1", True,  True,  "TLS_PID",   xget(tls_url, "--protocol", "http1")),
    # The whole-file hash reading every chunk back from the part file, as before 2026-11-27.
    ("xfer h1 x8 tls digest readback", "h1", True, True, "TLS_PID",   xget(tls_url, "--protocol", "http1", "--hash-memory", "0")),
    ("xfer h2 1x8 tls nodigest",    "h2", True,  False, "TLS_PID",   xget(tls_url, "--protocol", "http2", "--no-verify")),
    ("xfer h2 1x8 tls digest",      "h2", True,  True,  "TLS_PID",   xget(tls_url, "--protocol", "http2")),
    ("xfer h2 1x8 tls digest spec", "h2", True,  True,  "TLS_PID",   xget(tls_url, "--protocol", "http2", "--h2-spec-defaults")),
    ("xfer quic 2x4 nodigest",      "quic", True, False, "TLS_PID",  xget(quic_url, "--no-verify")),
    ("xfer quic 2x4 digest",        "quic", True, True,  "TLS_PID",  xget(quic_url)),
    ("xfer quic 2x4 digest readback", "quic", True, True, "TLS_PID",  xget(quic_url, "--hash-memory", "0")),
    # A real file the server has hashed (its Repr-Digest known): the whole-file hash checks
    # every byte, and chunks are hashed one by one only with --check-every-chunk.
    ("xfer h1 x8 tls digest file",  "h1", True,  True,  "TLS_PID",   xget(tls_file, "--protocol", "http1")),
    ("xfer h1 x8 tls digest file every-chunk", "h1", True, True, "TLS_PID", xget(tls_file, "--protocol", "http1", "--check-every-chunk")),
    ("xfer quic 2x4 digest file",   "quic", True, True,  "TLS_PID",  xget(quic_file)),
    ("xfer quic 2x4 digest file every-chunk", "quic", True, True, "TLS_PID", xget(quic_file, "--check-every-chunk")),
]
only = env.get("ROWS", "").strip()

def repr_digest_known(url):
    p = subprocess.run(["curl", "-sS", "-f", "-I", "--cacert", ca, "-H", "Want-Repr-Digest: sha-256", url],
                       stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return "repr-digest:" in p.stdout.lower()

if any(r[0].split(" ")[-1] in ("file", "every-chunk") and (not only or r[0] in only.split(","))
       for r in rows):
    # The file rows need the server's digest of the whole file: ask once (which starts its
    # background hash), then wait for it.
    with open(os.path.join(work, "root", "file.bin"), "wb") as f:
        left = size
        while left:
            n = min(left, 1 << 24)
            f.write(os.urandom(n))
            left -= n
    deadline = time.monotonic() + 300
    while not repr_digest_known(tls_file):
        if time.monotonic() > deadline:
            raise SystemExit("the server did not hash file.bin within 300 s")
        time.sleep(1)

def run(name, cmd, server_pid):
    before_children = resource.getrusage(resource.RUSAGE_CHILDREN)
    server_before = cpu_of(server_pid)
    t0 = time.monotonic()
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    secs = time.monotonic() - t0
    server_cpu = cpu_of(server_pid) - server_before
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    client_cpu = (after.ru_utime - before_children.ru_utime) + (after.ru_stime - before_children.ru_stime)
    for f in (dest, curl_dest):
        try:
            os.remove(f)
        except FileNotFoundError:
            pass
    if p.returncode != 0:
        raise SystemExit(f"{name} failed ({p.returncode}): {p.stderr.strip()}")
    nbytes = size
    if cmd[0] == "iperf3":
        # iperf3's own clock excludes its control connection set-up.
        j = json.loads(p.stdout)
        secs = j["end"]["sum_received"]["seconds"]
    elif cmd[1] == "bench":
        # The bench's own window excludes process start; bytes are what arrived within it.
        j = json.loads(p.stdout)
        secs, nbytes = j["window_s"], j["bytes_received"]
        if j["errors"]:
            raise SystemExit(f"{name}: {j['errors']} errors: {j['error_samples']}")
    return secs, client_cpu, server_cpu, nbytes

gib = size / 2**30
results = []
rounds = int(env.get("ROUNDS", "1"))
for rnd in range(1, rounds + 1):
    for name, kind, tls, digest, pid_var, cmd in rows:
        if only and name not in only.split(","):
            continue
        secs, ccpu, scpu, nbytes = run(name, cmd, int(env[pid_var]))
        gib = nbytes / 2**30
        if rounds > 1:
            name = f"{name} #{rnd}"
        results.append(dict(name=name, kind=kind, tls=tls, digest=digest, bytes=nbytes,
                            seconds=round(secs, 3), gbps=round(nbytes * 8 / secs / 1e9, 3),
                            client_cpu_s_per_gib=round(ccpu / gib, 3),
                            server_cpu_s_per_gib=round(scpu / gib, 3)))

by_name = {r["name"]: r for r in results}
iperf = by_name.get("iperf3 -P 8")
def h1_ref(r):
    mem = " mem" if r["name"].endswith(" mem") else ""
    pre = "xfer bench" if mem else "xfer"
    return by_name.get(f"{pre} h1 x8 {'tls' if r['tls'] else 'plain'} {'digest' if r['digest'] else 'nodigest'}{mem}")
for r in results:
    r["vs_iperf3"] = round(r["gbps"] / iperf["gbps"], 3) if iperf else None
    ref = h1_ref(r)
    r["vs_h1"] = round(r["gbps"] / ref["gbps"], 3) if ref and r["kind"] != "iperf3" else None

load = open("/proc/loadavg").read().split()[:3]
machine = dict(date=time.strftime("%Y-%m-%d %H:%M:%S %Z"), nproc=os.cpu_count(), cpu=cpu_model(),
               kernel=platform.release(), loadavg_before=load, size_bytes=size)
print(f"# {machine['date']}  {machine['nproc']} CPUs  {machine['cpu']}  Linux {machine['kernel']}")
print(f"# load average before: {' '.join(load)}; {size} bytes per transfer; client and server share the CPUs")
hdr = f"{'row':<44} {'s':>7} {'Gbit/s':>7} {'/iperf3':>8} {'/h1':>6} {'cli s/GiB':>10} {'srv s/GiB':>10}"
print(hdr)
print("-" * len(hdr))
fmt = lambda v: "-" if v is None else f"{v:.2f}"
for r in results:
    print(f"{r['name']:<44} {r['seconds']:>7.2f} {r['gbps']:>7.2f} {fmt(r['vs_iperf3']):>8} {fmt(r['vs_h1']):>6} "
          f"{r['client_cpu_s_per_gib']:>10.3f} {r['server_cpu_s_per_gib']:>10.3f}")
machine["loadavg_after"] = open("/proc/loadavg").read().split()[:3]
with open(os.path.join(out, "results.json"), "w") as f:
    json.dump(dict(machine=machine, rows=results), f, indent=2)
with open(os.path.join(out, "results.csv"), "w", newline="") as f:
    w = csv.DictWriter(f, fieldnames=list(results[0].keys()))
    w.writeheader()
    w.writerows(results)
print(f"# written: {out}/results.json, results.csv")
PY

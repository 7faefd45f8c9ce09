#!/usr/bin/env python3
"""CPU per byte on loopback, memory to memory, TLS: `xfer bench` rows (HTTP/1.1, HTTP/2, QUIC;
8 lanes; 100 MiB operations; with and without SHA-256) for one or more xfer binaries side by
side, and chasqui's HTTP/1.1 driver (8 connections, 100 MB files) when CHASQUI names its binary.

Usage: scripts/bench-cpu.py LABEL=XFER_BINARY [LABEL=XFER_BINARY ...]
  CHASQUI=path  chasqui binary (built from github.com/airnandez/chasqui; not part of xfer)
  DUR=10        seconds per row       ROUNDS=1   rounds over all rows
  PLAN=h1n,h1v,h2n,h2v,qn,qv   rows per binary: protocol h1/h2/q, n = --no-verify, v = SHA-256;
                gn/gv: one `xfer get` of a SIZE-byte synthetic file over HTTP/1.1 into /dev/shm
  SIZE=2GiB     size of the gn/gv file
  SIZE_SD=0     `--size-sd` of the bench rows: 0 asks for the same 100 MiB range every time,
                which the server's range-digest memory answers after the first; 20% (with a
                new `--seed` for every row) makes every range new to the server, so it hashes
                every byte it sends
  CONC_<LABEL>=8  lanes (`--concurrency`) of that label's bench rows
  BENCH_ARGS_<LABEL>="..."  more arguments for that label's bench rows
  GET_ARGS_<LABEL>="..."  more arguments for that label's gn/gv rows (two labels may name one
                binary to compare flags: GET_ARGS_skip=--no-whole-sha256 ... skip=XFER)
  CORES=0,1     CPU list (taskset -c) for every server, client and the floor; unset: all cores
  FLOOR=1       first run `xfer bench --floor` (first binary, on the first core of CORES, for
                FLOOR_DUR=7 seconds) and print every row's CPU per GiB also as a multiple of
                the floor: client = TLS open + one copy (+ SHA-256 when verifying), server =
                TLS seal + one copy. FLOOR=0 skips it.

Client CPU is user+sys of the waited-for `xfer bench` (getrusage of children) or of chasqui's
client daemon (/proc/PID/stat); server CPU is utime+stime of the server process before and
after the row. Both divided by the bytes the row moved. Load averages are printed per row."""
import atexit, json, os, re, resource, shutil, subprocess, sys, tempfile, time

CHASQUI = os.environ.get("CHASQUI")
DUR = os.environ.get("DUR", "10")
CORES = os.environ.get("CORES")
PIN = ["taskset", "-c", CORES] if CORES else []
SIZE = os.environ.get("SIZE", "2GiB")
binaries = sys.argv[1:]          # label=path
tick = os.sysconf("SC_CLK_TCK")
GIB = float(1 << 30)

def proc_cpu(pid):
    f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(f[11]) + int(f[12])) / tick

def child_cpu():
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime

work = tempfile.mkdtemp(prefix="cpu-cmp-", dir="/dev/shm")
procs = []
def stop_all():
    # Whatever way the script ends: a daemon left behind keeps its port, and the next run's
    # would fail to bind while the driver measured the old one.
    for p in procs:
        if p.poll() is None:
            p.terminate()
            p.wait()
    shutil.rmtree(work, ignore_errors=True)
atexit.register(stop_all)

def spawn(args, log, cwd=work):
    p = subprocess.Popen(PIN + args, cwd=cwd, stdout=open(log, "w"), stderr=subprocess.STDOUT)
    procs.append(p)
    return p

# TLS material for chasqui (server and its client daemon): CA + leaf for 127.0.0.1.
sh = lambda c: subprocess.run(c, shell=True, cwd=work, check=True, capture_output=True)
sh("openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout ca.key -out ca.pem -days 2 -subj /CN=cpu-ca")
sh("openssl req -newkey ec -pkeyopt ec_paramgen_curve:P-256 -nodes -keyout key.pem -out leaf.csr -subj /CN=127.0.0.1")
open(f"{work}/ext", "w").write("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
sh("openssl x509 -req -in leaf.csr -CA ca.pem -CAkey ca.key -CAcreateserial -out cert.pem -days 2 -extfile ext")
if CHASQUI:
    cs = spawn([CHASQUI, "server", "-addr", "127.0.0.1:25678", "-ca", "ca.pem", "-cert", "cert.pem", "-key", "key.pem"], f"{work}/cs.log")
    cc = spawn([CHASQUI, "client", "-addr", "127.0.0.1:29443", "-ca", "ca.pem", "-cert", "cert.pem", "-key", "key.pem"], f"{work}/cc.log")
    time.sleep(1)
    for name, p in (("server", cs), ("client", cc)):
        if p.poll() is not None:
            sys.exit(f"chasqui {name} exited at start (port in use?): {open(f'{work}/c{name[0]}.log').read()[-500:]}")

floor = None
if os.environ.get("FLOOR", "1") != "0" and binaries:
    first_core = CORES.replace("-", ",").split(",")[0] if CORES else None
    pin1 = ["taskset", "-c", first_core] if first_core else []
    out = subprocess.run(pin1 + [binaries[0].split("=", 1)[1], "bench", "--floor", "--json",
                                 "--duration", os.environ.get("FLOOR_DUR", "7")],
                         capture_output=True, text=True, check=True)
    floor = json.loads(out.stdout)
    floor["load"] = open("/proc/loadavg").read().split()[:3]

servers = {}
for spec in binaries:
    label, path = spec.split("=", 1)
    d = f"{work}/{label}"; os.makedirs(f"{d}/root")
    p = spawn([path, "serve", f"{d}/root", "--self-signed", "--listen", "127.0.0.1:0"], f"{d}/serve.log", cwd=d)
    for _ in range(300):
        m = re.search(r"at (https://[0-9.:]+)", open(f"{d}/serve.log").read())
        if m: break
        time.sleep(0.1)
    servers[label] = (p, path, m.group(1), f"{d}/xfer-cert/cert.pem")
time.sleep(1)

rows = []
def load():
    return open("/proc/loadavg").read().split()[:3]

def chasqui_row():
    s0, c0, l0 = proc_cpu(cs.pid), proc_cpu(cc.pid), load()
    out = subprocess.run(PIN + [CHASQUI, "driver", "-clients", "127.0.0.1:29443", "-servers", "127.0.0.1:25678",
                          "-http1", "-concurrency", "8", "-size", "100", "-duration", f"{DUR}s"],
                         cwd=work, capture_output=True, text=True)
    s1, c1 = proc_cpu(cs.pid), proc_cpu(cc.pid)
    txt = out.stdout + out.stderr
    vol = float(re.search(r"data volume:\s+([0-9.]+) MB", txt).group(1)) * 1e6
    rate = float(re.search(r"download rate:\s+([0-9.]+) MB/sec", txt).group(1)) * 1e6
    rows.append(("chasqui h1 x8 tls", rate / (1 << 20), (c1 - c0) / (vol / GIB), (s1 - s0) / (vol / GIB), l0, txt.count("errors:           0") > 0, False))

SIZE_SD = os.environ.get("SIZE_SD", "0")
# With sizes that vary, each row gets its own size sequence, so no row repeats another's ranges.
seeds = iter(range(1, 1 << 30)) if SIZE_SD not in ("0", "0%") else iter(lambda: 0, None)

def xfer_row(label, proto, verify):
    p, path, url, ca = servers[label]
    u = url if proto != "quic" else "quic://" + url[len("https://"):]
    conc = os.environ.get(f"CONC_{label}", "8")
    args = [path, "bench", u, "--ca-cert", ca, "--concurrency", conc, "--mean-size", "100MiB", "--size-sd", SIZE_SD, "--seed", str(next(seeds)),
            "--duration", DUR, "--json"]
    if proto != "quic": args += ["--protocol", proto]
    if not verify: args.append("--no-verify")
    args += os.environ.get(f"BENCH_ARGS_{label}", "").split()
    s0, c0, l0 = proc_cpu(p.pid), child_cpu(), load()
    out = subprocess.run(PIN + args, capture_output=True, text=True)
    s1, c1 = proc_cpu(p.pid), child_cpu()
    try:
        j = json.loads(out.stdout)
    except Exception:
        print("bench failed:", out.stdout[-2000:], out.stderr[-2000:]); return
    b = j["bytes_received"]
    rows.append((f"{label} {proto} x{conc} {'sha256' if verify else 'noverify'}", j["goodput_bps"] / 8 / (1 << 20),
                 (c1 - c0) / (b / GIB), (s1 - s0) / (b / GIB), l0, j.get("errors", 0) == 0, verify))

def get_row(label, verify):
    """One file of SIZE bytes, fetched whole by `xfer get` (default lanes) into /dev/shm."""
    p, path, url, ca = servers[label]
    dest = f"{work}/{label}/got.bin"
    args = [path, "get", f"{url}/.xfer/synthetic?size={SIZE}&seed=1", "-o", dest, "--overwrite",
            "--json", "--quiet", "--ca-cert", ca, "--protocol", "http1"]
    if not verify: args.append("--no-verify")
    args += os.environ.get(f"GET_ARGS_{label}", "").split()
    s0, c0, l0, w0 = proc_cpu(p.pid), child_cpu(), load(), time.monotonic()
    out = subprocess.run(PIN + args, capture_output=True, text=True)
    s1, c1, w1 = proc_cpu(p.pid), child_cpu(), time.monotonic()
    b = os.path.getsize(dest) if os.path.exists(dest) else 0
    if os.path.exists(dest): os.unlink(dest)
    if out.returncode != 0 or b == 0:
        print("get failed:", out.stdout[-2000:], out.stderr[-2000:]); return
    rows.append((f"{label} get {SIZE} h1 {'sha256' if verify else 'noverify'}", b / (w1 - w0) / (1 << 20),
                 (c1 - c0) / (b / GIB), (s1 - s0) / (b / GIB), l0, True, verify))

plan = os.environ.get("PLAN", "h1n,h1v,h2n,h2v,qn,qv").split(",")
try:
    for rnd in range(int(os.environ.get("ROUNDS", "1"))):
        if CHASQUI:
            chasqui_row()
        for label in servers:
            for item in plan:
                if item[:-1] == "g":
                    get_row(label, item[-1] == "v")
                    continue
                proto = {"h1": "http1", "h2": "http2", "q": "quic"}[item[:-1]]
                xfer_row(label, proto, item[-1] == "v")
finally:
    stop_all()
print(f"cores: {CORES or 'all'} ({os.cpu_count()} online)")
if floor:
    print(f"floor, one core, {floor['negotiated_suite']}, load {' '.join(floor['load'])}:")
    for r in floor["rows"]:
        print(f"  {r['key']:15} {r['gib_per_cpu_second']:7.2f} GiB/s {r['cpu_seconds_per_gib']:7.3f} s/GiB")
    print(f"  client floor {floor['client_floor_no_verify']:.3f} s/GiB (no verification), "
          f"{floor['client_floor_sha256']:.3f} (SHA-256); server floor {floor['server_floor']:.3f}")
print(f"{'row':34} {'MiB/s':>8} {'cli s/GiB':>10} {'srv s/GiB':>10} {'cli xfl':>8} {'srv xfl':>8}  load(1,5,15) ok")
for r in rows:
    if floor:
        cf = floor["client_floor_sha256" if r[6] else "client_floor_no_verify"]
        mult = f"{r[2] / cf:8.2f} {r[3] / floor['server_floor']:8.2f}"
    else:
        mult = f"{'-':>8} {'-':>8}"
    print(f"{r[0]:34} {r[1]:8.0f} {r[2]:10.3f} {r[3]:10.3f} {mult}  {' '.join(r[4])} {r[5]}")

"""Per-second rate of a capped download from the client interface's byte counter.

Usage: limit_rate_seconds.py SAMPLES REPORT_JSON

SAMPLES holds lines `<unix time> <rx bytes of the client's link interface>`, about one a
second. The counter sees IP bytes (TCP/IP and TLS headers, retransmissions included); each
second's payload is estimated by scaling it with the whole run's ratio of payload (the
report's received bytes) to wire bytes between the first and the last sample. The cap is the
report's `limit_rate_bytes_per_second`. Seconds before the first byte are left out; the first
and the last second that moved data are partial (the transfer began or ended inside them), so
they are printed but kept out of the error figures. The last line is the rate xfer's reads
kept while its lanes were busy, from the report's lanes.
"""
import json
import sys

samples = [tuple(map(float, line.split())) for line in open(sys.argv[1]) if line.strip()]
with open(sys.argv[2]) as f:
    report = json.load(f)
cap = float(report["limit_rate_bytes_per_second"])

steps = [(t1, (b1 - b0) / (t1 - t0)) for (t0, b0), (t1, b1) in zip(samples, samples[1:])]
moving = [(t, r) for t, r in steps if r > 0.01 * cap]
span_bytes = samples[-1][1] - samples[0][1]
payload_per_wire = report["received_bytes"] / span_bytes if span_bytes > 0 else 1.0

print(f"cap {cap * 8 / 1e6:.1f} Mbit/s payload; payload/wire ratio over the run {payload_per_wire:.4f}")
print(" second   wire Mbit/s   payload Mbit/s   vs cap")
errors = []
for i, (_, r) in enumerate(moving, 1):
    p = r * payload_per_wire
    err = (p - cap) / cap
    partial = i == 1 or i == len(moving)
    if not partial:
        errors.append(err)
    note = "  (partial)" if partial else ""
    print(f"{i:7d}   {r * 8 / 1e6:11.1f}   {p * 8 / 1e6:14.1f}   {err * 100:+6.2f} %{note}")
if errors:
    mean_abs = sum(abs(e) for e in errors) / len(errors)
    mean = sum(errors) / len(errors)
    worst = max(errors, key=abs)
    print(f"whole seconds {len(errors)}: mean error {mean * 100:+.2f} %, "
          f"mean |error| {mean_abs * 100:.2f} %, worst second {worst * 100:+.2f} %")
avg = report["received_bytes"] / report["seconds"]
print(f"xfer's report: {report['received_bytes']} bytes in {report['seconds']:.2f} s = "
      f"{avg * 8 / 1e6:.1f} Mbit/s ({(avg - cap) / cap * 100:+.2f} % vs cap), "
      f"limit_rate_bytes_per_second {report.get('limit_rate_bytes_per_second')}, "
      f"{len(report['lanes'])} lanes")
# The lanes' busy time leaves out the connection's set-up before the first body and the
# wire's lead over the reads (the bytes sitting in receive windows): the rate the reads kept.
busy = max((lane.get("busy_seconds") or 0.0) for lane in report["lanes"]) if report["lanes"] else 0.0
if busy > 0:
    r = report["received_bytes"] / busy
    print(f"while the lanes were busy ({busy:.2f} s): {r * 8 / 1e6:.1f} Mbit/s "
          f"({(r - cap) / cap * 100:+.2f} % vs cap)")

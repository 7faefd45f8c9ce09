"""One row of a several-sources bench: goodput of the whole command and what each source gave.

Usage: multi_source_row.py NAME START END BYTES REPORT_JSON
"""
import json
import sys

name, start, end, size, path = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
with open(path) as f:
    r = json.load(f)
srcs = ", ".join(
    f"{s['url'].split('/')[2]} {s['bytes'] / 2**20:.0f} MiB up to {s['lanes_max']} lanes {s['errors']} errors"
    for s in r.get("sources", [])
)
print(f"{name:<12} {size * 8 / (end - start) / 1e6:8.1f} Mbit/s  {end - start:5.1f} s  {len(r['lanes'])} lanes  {srcs}")

#!/usr/bin/python3
"""Record Python's slice rules for loader::slice_indices: slices.json.

Each case is [size, start, stop, step, picked]: list(range(size))[start:stop:step], with
null for an omitted bound (sizes 0, 1, 6; bounds None, -8, -6, -1, 0, 1, 3, 6, 8; steps
1, 2, 5, -1, -2, -5), plus the error of a zero step.

    /usr/bin/python3 make_slices.py > slices.json
"""
import json, sys

bounds = [None, -8, -6, -1, 0, 1, 3, 6, 8]
cases = []
for size in (0, 1, 6):
    for start in bounds:
        for stop in bounds:
            for step in (1, 2, 5, -1, -2, -5):
                cases.append([size, start, stop, step, list(range(size))[start:stop:step]])
try:
    [0][::0]
    zero = None
except ValueError as e:
    zero = {"type": "ValueError", "message": str(e)}
json.dump({"description": "list(range(size))[start:stop:step] for every combination; null: omitted",
           "meta": {"python": sys.version.split()[0], "generator": "make_slices.py"},
           "cases": cases, "zero_step": zero}, sys.stdout, separators=(",", ":"))
sys.stdout.write("\n")

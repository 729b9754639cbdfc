#!/usr/bin/env python3
"""Shapes of plan problem the independent generator does not draw, made from problems it did.

The issue #17 family (`independent_problems.py`) draws every job as a gang. A queue of batch work
is not: every job splittable, or half of them. Nor are priorities always spread: a platform with one
priority for all places GPUs, and the cost decides the rest. Each shape changes one thing of every
problem given and writes `<name>-<shape>.json` into OUT:

- nogang: every job splittable (`gang = false`);
- half: each job splittable with probability 1/2 (seed 7 per problem);
- prio1: every job of priority 1;
- big: every job of 8, 16, 32 or 64 GPUs (seed 5 per problem);
- open: no region allow-lists, price caps or budgets;
- poolsonly: no offer capacities and no family pools (only `cores` and `lowPriorityCores`).

    python3 solver/benches/variant_problems.py OUT FILE... [--shapes nogang,half]

The solver was not tuned on these shapes before they were made (session 65: the all-split shape
showed the local search taking split jobs' pieces out whole).
"""

import argparse
import copy
import json
import os
import random

SHAPES = ["nogang", "half", "prio1", "big", "open", "poolsonly"]


def vary(problem, shape):
    q = copy.deepcopy(problem)
    if shape == "nogang":
        for j in q["jobs"]:
            j["gang"] = False
    elif shape == "half":
        r = random.Random(7)
        for j in q["jobs"]:
            if r.random() < 0.5:
                j["gang"] = False
    elif shape == "prio1":
        for j in q["jobs"]:
            j["priority"] = 1
    elif shape == "big":
        r = random.Random(5)
        for j in q["jobs"]:
            j["gpus"] = r.choice([8, 16, 32, 64])
    elif shape == "open":
        for j in q["jobs"]:
            for key in ("regions", "max_price_per_hour", "budget"):
                j.pop(key, None)
    elif shape == "poolsonly":
        for o in q["offers"]:
            o["capacity_vms"] = None
        q["quotas"] = [x for x in q.get("quotas", []) if x["pool"] in ("cores", "lowPriorityCores")]
    else:
        raise SystemExit(f"unknown shape {shape!r}: one of {', '.join(SHAPES)}")
    return q


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("files", nargs="+")
    ap.add_argument("--shapes", default=",".join(SHAPES))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for path in args.files:
        problem = json.load(open(path))
        name = os.path.basename(path)[: -len(".json")]
        for shape in args.shapes.split(","):
            with open(os.path.join(args.out, f"{name}-{shape}.json"), "w") as f:
                json.dump(vary(problem, shape), f)


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""Plan problems drawn apart from `solver::generate`: a second, independently written generator.

It writes problem JSON in the public format (README, "The plan problem format") from its own reading
of issue #17's distribution and from adversarial shapes the issue does not describe, so that the
solver is measured on inputs it was not tuned on. Standard library only.

    python3 solver/benches/independent_problems.py OUT_DIR [--seed S] [--sizes 60,100,300,1000]

writes OUT_DIR/<shape>-<jobs>-<seed>.json for every shape and size. Shapes:

- issue:       the issue's distribution, re-read (own size catalogue and draws)
- tiny:        thousands of 1-GPU jobs of priority 1-3 (many equal weights), tight quota
- huge-gangs:  gangs of 32-256 GPUs among small jobs; few fit anywhere
- one-pool:    one region whose `cores` pool binds every regular offer; families loose
- all-spot:    every job spot-only or spot-preferred; `lowPriorityCores` binds
- tight-caps:  most jobs with a price cap just above (or below) their cheapest offer
- budgets:     budgets near the expected cost of the cheapest offer, long durations
- egress:      data regions and an egress table; jobs pay to run away from their data
- min-gpus:    most jobs ask for 4 or 8 GPUs per VM
- deny-sizes:  deny lists and size allow-lists on most jobs
- split:       a third of the jobs non-gang (split over offers in whole VMs)
"""

import json
import os
import random
import sys

REGIONS = ["eastus", "eastus2", "westus2", "westus3", "southcentralus", "northeurope", "westeurope", "swedencentral"]

# (model, usd per GPU-hour, [(gpus, vcpus)] per family); names are built from them.
CATALOGUE = [
    ("A100-80GB", 3.4, [[(1, 24), (2, 48), (4, 96)], [(8, 96), (8, 112)]]),
    ("H100", 6.9, [[(1, 40), (2, 80)], [(8, 96), (4, 48)]]),
    ("V100", 2.9, [[(1, 6), (2, 12), (4, 24)], [(8, 40), (4, 20)]]),
    ("A10", 1.5, [[(1, 36), (2, 72)], [(1, 18), (4, 64)]]),
    ("T4", 0.55, [[(1, 4), (1, 8), (4, 64)], [(2, 32), (8, 128)]]),
]


def sizes():
    out = []
    for model, per_gpu, families in CATALOGUE:
        for f, fam in enumerate(families):
            family = "standard%sF%dFamily" % (model.replace("-", ""), f)
            for gpus, vcpus in fam:
                name = "Standard_X%d%s_%dg_f%d" % (vcpus, model.replace("-", ""), gpus, f)
                # Bigger VMs cost a little more per GPU (interconnect), smaller ones a little less.
                price = per_gpu * gpus * (1.0 + 0.03 * (gpus.bit_length() - 1)) * (1.0 + vcpus / 2000.0)
                out.append(dict(size=name, model=model, gpus=gpus, vcpus=vcpus, family=family, price=price))
    return out


def offers_for(rng, regions, spot_share=0.7, sold=0.8):
    offers = []
    for region in regions:
        factor = rng.uniform(0.8, 1.25)
        for s in sizes():
            if rng.random() > sold:
                continue
            regular = round(s["price"] * factor * rng.uniform(0.97, 1.03), 4)
            cap = None if rng.random() < 0.5 else rng.randint(2, 40)
            base = dict(region=region, size=s["size"], gpu_model=s["model"], gpus_per_vm=s["gpus"],
                        vcpus_per_vm=s["vcpus"], family=s["family"])
            offers.append(dict(base, priority="regular", price_per_hour=regular, capacity_vms=cap,
                               eviction_rate_per_hour=0.0))
            if rng.random() < spot_share:
                offers.append(dict(base, priority="spot", price_per_hour=round(regular * rng.uniform(0.1, 0.4), 4),
                                   capacity_vms=None if rng.random() < 0.5 else rng.randint(2, 40),
                                   eviction_rate_per_hour=round(rng.uniform(0.005, 0.25), 4)))
    return offers


def quotas_for(rng, regions, cores=(200, 1600), low=(0, 600), fam_limits=(0, 48, 96, 192, 384, 768)):
    quotas = []
    families = sorted({s["family"] for s in sizes()})
    for region in regions:
        quotas.append(dict(region=region, pool="cores", vcpus=rng.randint(*cores)))
        quotas.append(dict(region=region, pool="lowPriorityCores", vcpus=rng.randint(*low)))
        for f in families:
            quotas.append(dict(region=region, pool=f, vcpus=rng.choice(fam_limits)))
    return quotas


def issue_job(rng, i, regions):
    models = [m for m, _, _ in CATALOGUE]
    job = dict(id="j%05d" % i, gpus=rng.choice([1, 1, 2, 4, 8, 8, 16, 32, 64]),
               gpu_models=rng.sample(models, rng.randint(1, 3)), gang=True,
               priority=rng.randint(1, 100), duration_hours=round(rng.uniform(0.5, 48.0), 3),
               spot=rng.choice(["never", "allowed", "preferred"]))
    if rng.random() < 0.5:
        job["regions"] = rng.sample(regions, rng.randint(1, min(3, len(regions))))
    if rng.random() < 0.3:
        job["max_price_per_hour"] = round(job["gpus"] * rng.uniform(0.4, 9.0), 2)
    return job


def cheapest_price(offers, job):
    best = None
    for o in offers:
        if job.get("gpu_models") and o["gpu_model"] not in job["gpu_models"]:
            continue
        if job.get("spot", "never") == "never" and o["priority"] == "spot":
            continue
        vms = -(-job["gpus"] // o["gpus_per_vm"])
        price = vms * o["price_per_hour"]
        best = price if best is None else min(best, price)
    return best


def make(shape, n, seed):
    rng = random.Random("%s-%d-%d" % (shape, n, seed))
    nregions = max(2, min(8, n // 20 + 1))
    regions = REGIONS[:nregions]
    offers = offers_for(rng, regions)
    quotas = quotas_for(rng, regions)
    jobs = [issue_job(rng, i, regions) for i in range(n)]
    egress = []
    if shape == "tiny":
        for j in jobs:
            j.update(gpus=1, priority=rng.randint(1, 3))
        quotas = quotas_for(rng, regions, cores=(40, 300), low=(0, 120), fam_limits=(0, 24, 48, 96))
    elif shape == "huge-gangs":
        for j in jobs:
            if rng.random() < 0.4:
                j.update(gpus=rng.choice([32, 64, 128, 256]), gpu_models=["A100-80GB", "H100", "V100"])
        quotas = quotas_for(rng, regions, cores=(400, 3000), low=(0, 1500), fam_limits=(0, 384, 768, 1536, 3072))
    elif shape == "one-pool":
        regions = regions[:1]
        offers = [o for o in offers if o["region"] == regions[0]]
        for o in offers:
            o["capacity_vms"] = None
        quotas = [dict(region=regions[0], pool="cores", vcpus=rng.randint(600, 1500)),
                  dict(region=regions[0], pool="lowPriorityCores", vcpus=0)]
        for j in jobs:
            j.pop("regions", None)
            j["spot"] = "never"
    elif shape == "all-spot":
        for j in jobs:
            j["spot"] = rng.choice(["only", "preferred"])
        quotas = quotas_for(rng, regions, low=(100, 700))
    elif shape == "tight-caps":
        for j in jobs:
            if rng.random() < 0.8:
                p = cheapest_price(offers, j)
                if p is not None:
                    j["max_price_per_hour"] = round(p * rng.uniform(0.95, 1.6), 3)
    elif shape == "budgets":
        for j in jobs:
            j["duration_hours"] = round(rng.uniform(10, 200), 2)
            p = cheapest_price(offers, j)
            if p is not None and rng.random() < 0.7:
                j["budget"] = round(p * j["duration_hours"] * rng.uniform(0.9, 2.0), 2)
    elif shape == "egress":
        for a in regions:
            for b in regions:
                if a != b and rng.random() < 0.7:
                    egress.append({"from": a, "to": b, "usd_per_gb": rng.choice([0.01, 0.02, 0.05, 0.08])})
        for j in jobs:
            if rng.random() < 0.7:
                j["data_region"] = rng.choice(regions)
                j["data_gb"] = rng.choice([100.0, 1000.0, 5000.0, 20000.0])
    elif shape == "min-gpus":
        for j in jobs:
            if rng.random() < 0.7:
                j["min_gpus_per_vm"] = rng.choice([4, 8])
                j["gpus"] = max(j["gpus"], 8)
    elif shape == "deny-sizes":
        all_sizes = sorted({o["size"] for o in offers})
        for j in jobs:
            j.pop("regions", None)
            if rng.random() < 0.6:
                j["deny_regions"] = rng.sample(regions, rng.randint(1, max(1, len(regions) // 2)))
            if rng.random() < 0.6:
                j["sizes"] = rng.sample(all_sizes, rng.randint(2, 8))
                j.pop("gpu_models", None)
    elif shape == "split":
        for j in jobs:
            if rng.random() < 0.33:
                j["gang"] = False
                j["gpus"] = rng.choice([1, 2, 3, 4, 6, 8, 12, 16])
    elif shape != "issue":
        raise SystemExit("unknown shape " + shape)
    problem = {"offers": offers, "quotas": quotas, "jobs": jobs}
    if egress:
        problem["egress"] = egress
    return problem


SHAPES = ["issue", "tiny", "huge-gangs", "one-pool", "all-spot", "tight-caps", "budgets", "egress", "min-gpus",
          "deny-sizes", "split"]


def main():
    args = sys.argv[1:]
    if not args:
        raise SystemExit(__doc__)
    out = args[0]
    seed = int(args[args.index("--seed") + 1]) if "--seed" in args else 1
    sizes_arg = args[args.index("--sizes") + 1] if "--sizes" in args else "60,100,300,1000"
    shapes = args[args.index("--shapes") + 1].split(",") if "--shapes" in args else SHAPES
    os.makedirs(out, exist_ok=True)
    for shape in shapes:
        for n in [int(x) for x in sizes_arg.split(",")]:
            path = os.path.join(out, "%s-%d-%d.json" % (shape, n, seed))
            with open(path, "w") as f:
                json.dump(make(shape, n, seed), f)
            print(path)


if __name__ == "__main__":
    main()

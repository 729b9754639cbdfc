#!/usr/bin/env python3
"""Placement problems from real data, a family the solver's generators did not shape.

Offers: every T4 / V100 / A10 / A100 / H100 size of `../shared/data/prices/azure-nseries-us.csv`
(real sizes, vCPUs, 8 US regions, on-demand and spot prices; the 8-GPU H100 sizes counted as 8 GPUs
and their spot price, which the file lists wrongly, left out). Jobs: consecutive rows of
`../shared/data/jobs/philly.csv` (real GPU counts, capped at 64, and durations); the priority is one
per virtual cluster (a hash of its id), the GPU models (1-3) and spot policy drawn at random. Quota
(not public): per region `cores` 200-1,600 and `lowPriorityCores` 0-600, per family 0-768 vCPUs.

    python3 solver/benches/real_problems.py DIR      # writes DIR/philly-{60,100,300}-{1,2,3}.json
    python3 solver/benches/real_problems.py DIR --sizes 1000,10000   # philly-{1000,10000}-{1,2,3}
"""
import csv, json, os, random, sys, zlib

SHARED = os.path.join(os.path.dirname(__file__), '..', '..', '..', 'shared', 'data')
if not os.path.isdir(SHARED):
    sys.exit(f'skipped: {SHARED} (the shared data) is absent')
out = sys.argv[1] if len(sys.argv) > 1 else '.'
rows = list(csv.DictReader(open(os.path.join(SHARED, 'prices', 'azure-nseries-us.csv'))))
models = {'T4': 'T4', 'V100': 'V100', 'V100-32GB': 'V100', 'A100': 'A100', 'A100-80GB': 'A100-80GB', 'A10': 'A10', 'H100': 'H100'}
philly = [r for r in csv.DictReader(open(os.path.join(SHARED, 'jobs', 'philly.csv'))) if r['num_gpus'] and int(r['num_gpus']) >= 1]
def make(n, seed):
    rng = random.Random(seed)
    offers, fams, seen = [], set(), set()
    for r in rows:
        m = models.get(r['AcceleratorName'])
        if not m or '_Promo' in r['InstanceType']: continue
        try: g = int(float(r['AcceleratorCount']))
        except: continue
        if g < 1: continue
        if m == 'H100' and 'ND96' in r['InstanceType']: g = 8
        key = (r['Region'], r['InstanceType'])
        if key in seen: continue
        seen.add(key)
        series = ''.join(c for c in r['InstanceType'].replace('Standard_', '') if not c.isdigit())
        fam = 'standard' + series + 'Family'
        fams.add((r['Region'], fam))
        base = dict(region=r['Region'], size=r['InstanceType'], gpu_model=m, gpus_per_vm=g, vcpus_per_vm=int(float(r['vCPUs'])), family=fam, capacity_vms=None, eviction_rate_per_hour=0.0)
        offers.append(dict(base, priority='regular', price_per_hour=float(r['Price'])))
        sp = float(r['SpotPrice'] or 0)
        if sp > 0 and m != 'H100':
            offers.append(dict(base, priority='spot', price_per_hour=sp, eviction_rate_per_hour=0.05))
    quotas = []
    for reg in sorted({o['region'] for o in offers}):
        quotas.append(dict(region=reg, pool='cores', vcpus=rng.choice([200, 400, 800, 1600])))
        quotas.append(dict(region=reg, pool='lowPriorityCores', vcpus=rng.choice([0, 100, 300, 600])))
    for reg, fam in sorted(fams):
        quotas.append(dict(region=reg, pool=fam, vcpus=rng.choice([0, 48, 96, 192, 384, 768])))
    jobs = []
    start = rng.randrange(len(philly) - n * 3)
    for i, r in enumerate(philly[start:start + n]):
        g = min(int(r['num_gpus']), 64)
        prio = 1 + zlib.crc32(r['cluster'].encode()) % 100
        jobs.append(dict(id=f'p{i:04d}', gpus=g, gpu_models=rng.sample(sorted(set(models.values())), rng.choice([1, 2, 3])), gang=True,
                         priority=prio, duration_hours=max(0.1, min(72.0, float(r['duration']) / 3600)), spot=rng.choice(['never', 'allowed', 'preferred'])))
    return dict(offers=offers, quotas=quotas, jobs=jobs)
sizes = [int(x) for x in sys.argv[sys.argv.index('--sizes') + 1].split(',')] if '--sizes' in sys.argv else [60, 100, 300]
for n in sizes:
    for seed in [1, 2, 3]:
        json.dump(make(n, seed), open(os.path.join(out, f'philly-{n}-{seed}.json'), 'w'))

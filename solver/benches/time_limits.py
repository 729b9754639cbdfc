#!/usr/bin/env python3
"""Whether `spillway plan --time-limit-ms N` comes back within N + 10 %, timed as a user times it:
the whole process, wall clock, from start to exit. Per limit, the slowest command and those over
N + 10 %; with two binaries, each file runs on one then the other, so the machine's load falls on
both alike.

    cargo build --release
    python3 solver/benches/time_limits.py --limits 50,100,250 --bin target/release/spillway FILES...
    python3 solver/benches/time_limits.py --limits 200,500 --bin OLD --bin NEW FILES...
"""
import subprocess, sys, time


def main():
    args = sys.argv[1:]
    limits, bins, files = [], [], []
    i = 0
    while i < len(args):
        if args[i] == '--limits':
            limits = [int(v) for v in args[i + 1].split(',')]
            i += 2
        elif args[i] == '--bin':
            bins.append(args[i + 1])
            i += 2
        else:
            files.append(args[i])
            i += 1
    if not limits or not bins or not files:
        sys.exit(__doc__)
    for ms in limits:
        worst = {b: 0.0 for b in bins}
        over = {b: [] for b in bins}
        for f in files:
            for b in bins:
                start = time.perf_counter()
                subprocess.run([b, 'plan', '--problem', f, '--output', 'json', '--time-limit-ms', str(ms)],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
                wall = (time.perf_counter() - start) * 1e3
                worst[b] = max(worst[b], wall)
                if wall > 1.1 * ms:
                    over[b].append(f'{f.rsplit("/", 1)[-1]} {wall:.0f}')
        for b in bins:
            print(f'limit {ms} ms, {b}: worst {worst[b]:.0f} ms, {len(over[b])} of {len(files)} over'
                  + (f' ({", ".join(over[b])})' if over[b] else ''))


main()

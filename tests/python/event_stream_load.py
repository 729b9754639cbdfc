#!/usr/bin/env python3
"""Opens many event streams on a running `spillway serve` and reports the server's threads and
memory before, while they are open, and after they left (RELIABILITY.md, "Event streams").

Not a test (its numbers depend on the machine); standard library only.

    spillway serve --config cfg.toml --data-dir d &     # cfg.toml: [api] max_event_streams = 1100
    python3 tests/python/event_stream_load.py --url http://127.0.0.1:7878 \
        --token-file d/admin.token --pid $! --streams 1000 --rounds 3
"""

import argparse
import asyncio
import resource
import time
import urllib.parse


def status(pid):
    """Threads and resident memory (MB) of the process, from /proc."""
    out = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            if key in ("Threads", "VmRSS"):
                out[key] = int(value.split()[0])
    return out["Threads"], out["VmRSS"] / 1024


async def open_stream(host, port, token, path):
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(
        f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
        f"Accept: text/event-stream\r\n\r\n".encode()
    )
    await writer.drain()
    head = await reader.readuntil(b"\r\n\r\n")
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(head.decode(errors="replace").splitlines()[0])
    return reader, writer


async def drain(reader):
    try:
        while await reader.read(65536):
            pass
    except (ConnectionError, asyncio.CancelledError):
        pass


async def one_round(args, token):
    url = urllib.parse.urlsplit(args.url)
    streams = []
    for i in range(args.streams):
        path = "/v1/events?from=0" if i % 2 == 0 else "/v1/events"
        streams.append(await open_stream(url.hostname, url.port, token, path))
    readers = [asyncio.create_task(drain(r)) for r, _ in streams]
    await asyncio.sleep(args.hold)
    threads, rss = status(args.pid)
    for _, w in streams:
        w.close()
    for t in readers:
        t.cancel()
    await asyncio.gather(*readers, return_exceptions=True)
    return threads, rss


async def main():
    p = argparse.ArgumentParser()
    p.add_argument("--url", required=True)
    p.add_argument("--token-file", required=True)
    p.add_argument("--pid", type=int, required=True)
    p.add_argument("--streams", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--hold", type=float, default=5.0, help="seconds every stream stays open")
    p.add_argument("--settle", type=float, default=20.0, help="seconds after a round before measuring")
    args = p.parse_args()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, args.streams + 100)), hard))
    token = open(args.token_file).read().strip()
    threads, rss = status(args.pid)
    print(f"before: threads {threads}, RSS {rss:.1f} MB")
    for n in range(1, args.rounds + 1):
        start = time.monotonic()
        t_open, rss_open = await one_round(args, token)
        await asyncio.sleep(args.settle)
        t_after, rss_after = status(args.pid)
        print(
            f"round {n}: {args.streams} streams open in {time.monotonic() - start - args.settle:.1f} s: "
            f"threads {t_open}, RSS {rss_open:.1f} MB; {args.settle:.0f} s after: threads {t_after}, "
            f"RSS {rss_after:.1f} MB"
        )


asyncio.run(main())

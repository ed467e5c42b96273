#!/usr/bin/env python
# Copyright: (c) 2026, mindverse infrastructure team
# SPDX-License-Identifier: Apache-2.0
"""Bytes the central registry sends for N pulls of one image: all from it, against through a peer's registry.

Runs the real Distribution registry (Debian's docker-registry) twice on 127.0.0.1: a central one
behind a token endpoint (as Azure Container Registry answers) holding an image of random layers,
and a pull-through proxy of it (what a holder runs, roles/sglang_image serve_peers). This
machine's engine then pulls the image N times with ``image_pull`` (the image removed in between):
straight from the central registry, and with the proxy as its mirror. The central registry's
access log gives the blob bytes it sent. One engine pulls N times, one after the other: this
measures the bytes each source sends, not N nodes pulling at once (the fleet scenario's part).

Usage:
    .venv/bin/python bench/bench_image_peers.py --layers 4 --layer-mb 16 --nodes 3 6 12 --append docs/benchmarks/results.md
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import secrets
import sys
import tempfile
import time

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), '..'))
sys.path.insert(0, os.path.join(REPO, '.cache', 'collections'))
sys.path.insert(0, os.path.join(REPO, 'tests', 'unit'))
sys.path.insert(0, os.path.join(REPO, 'tests', 'integration'))
import docker  # noqa: E402  pylint: disable=wrong-import-position
from ansible_collections.mindverse.sglang_pd.plugins.modules import image_pull  # noqa: E402  pylint: disable=wrong-import-position
from module_runner import run_module  # noqa: E402  pylint: disable=wrong-import-position
from peer_registries import USER, Registry, TokenEndpoint, push_image  # noqa: E402  pylint: disable=wrong-import-position


def forget(engine, name):
    """Remove the image NAME names, so that the next pull fetches it again."""
    try:
        engine.images.remove(engine.images.get(name).id, force=True)
    except docker.errors.ImageNotFound:
        pass


def pulls(engine, name, password, count, mirrors):
    """Seconds of COUNT pulls of NAME (removed before each), through MIRRORS."""
    started = time.perf_counter()
    for _pull in range(count):
        forget(engine, name)
        result = run_module(image_pull, {'name': name, 'username': USER, 'password': password, 'mirrors': mirrors,
                                         'timeout': 300})
        if result.get('failed') or result['source'] != (mirrors[0] if mirrors else 'registry'):
            raise SystemExit('pull failed or came from elsewhere: %s' % result)
    return time.perf_counter() - started


def measure(engine, folder, args, count, through_peer):
    """(central blob bytes, proxy blob bytes, seconds) of COUNT pulls of a fresh image."""
    password = secrets.token_hex(16)
    tokens = TokenEndpoint(password)
    central = Registry(folder, 'central-%d-%s' % (count, through_peer), {'auth': {'silly': {'realm': tokens.url, 'service': 'central'}}})
    upstream = {'remoteurl': 'http://' + central.address, 'username': USER, 'password': password}
    proxy = Registry(folder, 'proxy-%d-%s' % (count, through_peer), {'proxy': upstream})
    try:
        repository, digest = push_image(engine, folder, central.address, password, args.layers, args.layer_mb * 1024 * 1024)
        pushed = central.blob_bytes()
        name = repository + '@' + digest
        seconds = pulls(engine, name, password, count, [proxy.address] if through_peer else [])
        forget(engine, name)
        return central.blob_bytes() - pushed, proxy.blob_bytes(), seconds
    finally:
        proxy.stop()
        central.stop()
        tokens.shutdown()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--layers', type=int, default=4)
    parser.add_argument('--layer-mb', type=int, default=16)
    parser.add_argument('--nodes', type=int, nargs='+', default=[3, 6, 12])
    parser.add_argument('--append', help='append the Markdown result to this file')
    args = parser.parse_args()
    engine = docker.from_env(timeout=300)
    image_mb = args.layers * args.layer_mb
    rows = []
    load_start = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix='bench-image-peers-') as folder:
        for count in args.nodes:
            direct = measure(engine, folder, args, count, False)
            peer = measure(engine, folder, args, count, True)
            rows.append('| %d | %.1f | %.1f | %.1f | %.1f | %.1f |' % (
                count, direct[0] / 2**20, direct[2], peer[0] / 2**20, peer[1] / 2**20, peer[2]))
    load_end = os.getloadavg()
    now = datetime.datetime.now(datetime.timezone.utc).strftime('%Y-%m-%d %H:%M UTC')
    text = '\n'.join([
        '', '## Image from peers: bytes the central registry sends for N pulls (%s)' % now, '',
        'Command: `.venv/bin/python bench/bench_image_peers.py --layers %d --layer-mb %d --nodes %s%s`' % (
            args.layers, args.layer_mb, ' '.join(str(n) for n in args.nodes), ' --append %s' % args.append if args.append else ''),
        '',
        'An image of %d random layers (%d MB of random bytes, which gzip does not shrink) pushed to a '
        'central docker-registry behind a token endpoint; this machine\'s engine pulls it N times with `image_pull` '
        '(removed in between), straight from the central registry, or through a pull-through docker-registry (a '
        'holder\'s peer registry) as its mirror. Blob bytes from each registry\'s access log. One engine pulling N '
        'times in turn: the bytes each source sends, not N nodes at once. Python %s, %s, %d CPUs, load average '
        '%.1f / %.1f / %.1f at the start, %.1f / %.1f / %.1f at the end.' % (
            args.layers, image_mb, platform.python_version(), platform.machine(), os.cpu_count(), *load_start, *load_end),
        '',
        '| N pulls | central only: central MB | central only: s | through the peer: central MB | through the peer: peer MB | through the peer: s |',
        '|---:|---:|---:|---:|---:|---:|',
    ] + rows + [''])
    print(text)
    if args.append:
        with open(args.append, 'a', encoding='utf-8') as handle:
            handle.write(text)


if __name__ == '__main__':
    main()

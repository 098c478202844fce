"""Complete payments per second (open the signed URL, load the card form, submit the success
card, callback delivered) with one and with two ``payplane-server serve --role web`` processes
plus one ``--role worker`` process on one PostgreSQL (TempPostgres(durable=True)).

Baseline: the one-web-process figure of the same run; the ratio is two-web / one-web.
``uv run python bench/scale/run.py [payments] [client threads]``"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "server" / "tests" / "chaos"))

import cluster as harness  # noqa: E402
from payplane_server.testing import CallbackReceiver, TempPostgres  # noqa: E402

harness.CARDS = [harness.SUCCESS]  # complete payments: every one succeeds


def measure(pg: TempPostgres, webs: int, payments: int, threads: int) -> float:
    url = pg.create_database(f"scale_{webs}")
    with tempfile.TemporaryDirectory() as tmp, CallbackReceiver() as receiver:
        cluster = harness.Cluster(url, Path(tmp), webs=webs, workers=1)
        cluster.prepare(receiver.url)
        with cluster:
            harness.run_load(cluster, 20, threads=threads, prefix="warm")
            started = time.monotonic()
            load, _ = harness.run_load(cluster, payments, threads=threads, prefix="run")
            receiver.wait_for(20 + payments, timeout=300)
            elapsed = time.monotonic() - started
    assert len(load.registered) == payments
    return payments / elapsed


def main() -> None:
    payments = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    threads = int(sys.argv[2]) if len(sys.argv) > 2 else 8
    pg = TempPostgres(durable=True).start()
    try:
        one = measure(pg, 1, payments, threads)
        two = measure(pg, 2, payments, threads)
    finally:
        pg.stop()
    print(f"payments per run: {payments}, client threads: {threads}")
    print(f"one web process:  {one:8.1f} complete payments/s (baseline)")
    print(f"two web processes: {two:8.1f} complete payments/s  ratio {two / one:.2f}")


if __name__ == "__main__":
    main()

"""Complete payments per second (open the signed URL, load the card form, submit the success
card, callback delivered) with one and with two ``payplane-server serve --role web`` processes
plus one ``--role worker`` process on one PostgreSQL (TempPostgres(durable=True)).

Baseline: the one-web-process figure of the same run; the ratio is two-web / one-web.
``uv run python bench/scale/run.py [payments] [concurrent customers]``"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "server" / "tests" / "chaos"))

import cluster as harness  # noqa: E402
from payplane_server.testing import CallbackReceiver, TempPostgres  # noqa: E402

harness.CARD_PLAN = [(harness.SUCCESS, None)]  # complete payments: every one succeeds


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def servers_cpu(cluster: harness.Cluster) -> float:
    return sum(cpu_seconds(p.popen.pid) for p in cluster.processes if p.popen is not None)


def measure(pg: TempPostgres, webs: int, payments: int, customers: int) -> dict[str, float]:
    url = pg.create_database(f"scale_{webs}")
    with tempfile.TemporaryDirectory() as tmp, CallbackReceiver() as receiver:
        cluster = harness.Cluster(url, Path(tmp), webs=webs, workers=1)
        cluster.prepare(receiver.url)
        with cluster:
            harness.run_load(cluster, 20, customers=customers, prefix="warm")
            started, client, servers = time.monotonic(), time.process_time(), servers_cpu(cluster)
            load, _ = harness.run_load(cluster, payments, customers=customers, prefix="run")
            receiver.wait_for(20 + payments, timeout=300)
            elapsed = time.monotonic() - started
            client, servers = time.process_time() - client, servers_cpu(cluster) - servers
    assert len(load.registered) == payments
    return {
        "rate": payments / elapsed,
        "client_ms": client * 1000 / payments,
        "servers_ms": servers * 1000 / payments,
    }


def main() -> None:
    payments = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    customers = int(sys.argv[2]) if len(sys.argv) > 2 else 24
    pg = TempPostgres(durable=True).start()
    try:
        one = measure(pg, 1, payments, customers)
        two = measure(pg, 2, payments, customers)
    finally:
        pg.stop()
    print(f"payments per run: {payments}, concurrent customers: {customers}")
    for label, figures in (("one web process", one), ("two web processes", two)):
        print(
            f"{label:<18} {figures['rate']:8.1f} complete payments/s; CPU per payment: "
            f"load generator {figures['client_ms']:.2f} ms, Payplane processes "
            f"{figures['servers_ms']:.2f} ms (PostgreSQL not counted)"
        )
    print(f"ratio two / one: {two['rate'] / one['rate']:.2f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()

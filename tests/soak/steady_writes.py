#!/usr/bin/env python3
"""Steady writes against a running host, printing its memory every 30 s.

Each client thread creates an order, reads it back, and lists orders every tenth time, as fast
as the host answers, for `--secs` seconds; the store's rate limits are raised first so that the
host does the work rather than refuse it. Start a host with the demo store first:

    commerce-host demo --listen 127.0.0.1:8080 --data /tmp/soak-data &
    python3 tests/soak/steady_writes.py --data /tmp/soak-data --pid $! --secs 600

Only the Python standard library is used. See README, "Memory under steady writes".
"""
import argparse
import http.client
import json
import re
import threading
import time
from collections import Counter


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1:8080", help="the host's address")
    parser.add_argument("--data", required=True, help="the demo's data folder (its tokens)")
    parser.add_argument("--pid", type=int, required=True, help="the host's process id")
    parser.add_argument("--secs", type=float, default=600, help="how long to write")
    parser.add_argument("--clients", type=int, default=6, help="client threads")
    args = parser.parse_args()

    shop = open(f"{args.data}/demo-shop-token").read().strip()
    admin = open(f"{args.data}/admin-token").read().strip()
    host, port = args.host.rsplit(":", 1)

    def call(conn, method, path, body=None, token=shop):
        headers = {"Authorization": f"Bearer {token}", "content-type": "application/json"}
        conn.request(method, path, body=None if body is None else json.dumps(body), headers=headers)
        response = conn.getresponse()
        return response.status, response.read()

    conn = http.client.HTTPConnection(host, int(port))
    status, body = call(conn, "GET", "/v1/installation")
    store = re.search(r"store_[0-9a-z]+", body.decode()).group(0)
    limits = {"burst": 1_000_000, "requests_per_second": 1_000_000, "requests_per_minute": 100_000_000}
    status, _ = call(conn, "PATCH", f"/admin/v1/stores/{store}", {"rate_limits": limits}, admin)
    assert status == 200, f"raising the rate limits: {status}"
    status, body = call(conn, "GET", "/v1/customers?limit=1")
    customer = json.loads(body)["data"][0]["id"]
    status, body = call(conn, "GET", "/v1/products?limit=1")
    variant = json.loads(body)["data"][0]["variants"][0]["id"]
    status, _ = call(conn, "POST", "/v1/inventory/adjust", {"variant_id": variant, "set": 100_000_000})
    assert status == 200, f"stocking the variant: {status}"

    def rss_mib():
        with open(f"/proc/{args.pid}/status") as status_file:
            for line in status_file:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) // 1024
        return -1

    counts = Counter()
    stop = time.time() + args.secs
    order = {"currency": "EUR", "customer_id": customer, "line_items": [{"variant_id": variant, "quantity": 1}]}

    def client():
        conn = http.client.HTTPConnection(host, int(port))
        made = 0
        while time.time() < stop:
            try:
                status, body = call(conn, "POST", "/v1/orders", order)
                counts["POST /v1/orders", status] += 1
                if status == 201:
                    status, _ = call(conn, "GET", f"/v1/orders/{json.loads(body)['id']}")
                    counts["GET /v1/orders/{id}", status] += 1
                made += 1
                if made % 10 == 0:
                    status, _ = call(conn, "GET", "/v1/orders?limit=20")
                    counts["GET /v1/orders", status] += 1
            except (OSError, http.client.HTTPException) as error:
                counts["error", type(error).__name__] += 1
                conn = http.client.HTTPConnection(host, int(port))

    threads = [threading.Thread(target=client) for _ in range(args.clients)]
    for thread in threads:
        thread.start()
    started = time.time()
    while time.time() < stop:
        time.sleep(30)
        print(f"{time.time() - started:6.0f} s  RSS {rss_mib()} MiB  {dict(counts)}", flush=True)
    for thread in threads:
        thread.join()


if __name__ == "__main__":
    main()

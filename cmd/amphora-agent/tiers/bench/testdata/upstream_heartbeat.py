"""Times upstream's heartbeat for make bench: python3-octavia's
health_daemon.build_stats_message() and status_message.wrap_envelope() on
the `show stat` sample BenchmarkHeartbeat measures (1 LB x 50 listeners x
200 members).

Only the environment is mocked, as in agent/health/testdata/upstream_build.py:
the list of load balancers (one, running), the stats socket (its two
queries answer from the sample), no LVS listeners. Upstream's own work
stays in: both CSV parses, the counter deltas and the counters file it
persists on every message, JSON, zlib and the HMAC.

stdin: {"csv": str, "amphora_id": str, "key": str, "base_path": str}
stdout: {"build_sign_ns": float, "build_ns": float, "sign_ns": float,
         "calls": int, "listeners": int, "pools": int, "members": int,
         "json_bytes": int, "datagram_bytes": int}

Each figure is the median over 5 repeats of timeit's autorange loop, with
the garbage collector on (timeit turns it off by default; Go's benchmark
pays for its GC).
"""

import gc
import json
import statistics
import sys
import timeit
from unittest import mock

from oslo_config import cfg

import octavia.common.config  # noqa: F401  registers the options
from octavia.amphorae.backends.health_daemon import health_daemon
from octavia.amphorae.backends.health_daemon import status_message
from octavia.amphorae.backends.utils import haproxy_query

REPEATS = 5


def per_call_ns(fn):
    timer = timeit.Timer(fn, setup="gc.enable()", globals={"gc": gc})
    number, _ = timer.autorange()
    runs = timer.repeat(repeat=REPEATS, number=number)
    return statistics.median(runs) / number * 1e9, number * (REPEATS + 1)


def main():
    req = json.load(sys.stdin)
    cfg.CONF([], project="octavia", default_config_files=[])
    cfg.CONF.set_override("base_path", req["base_path"], group="haproxy_amphora")
    cfg.CONF.set_override("amphora_id", req["amphora_id"], group="amphora_agent")
    key = req["key"]
    lines = req["csv"].split("\n")
    backends = "\n".join([lines[0]] + [ln for ln in lines[1:] if ln and ",FRONTEND," not in ln]) + "\n\n"
    answers = {"show stat -1 -1 -1": req["csv"], "show stat -1 6 -1": backends}

    def query(self, q):
        return answers[q].rstrip()

    util = "octavia.amphorae.backends.agent.api_server.util"
    with mock.patch(util + ".get_loadbalancers", return_value=["lb1"]), \
            mock.patch(util + ".is_lb_running", return_value=True), \
            mock.patch(util + ".get_lvs_listeners", return_value=[]), \
            mock.patch.object(haproxy_query.HAProxyQuery, "_query", query):
        msg = health_daemon.build_stats_message()
        datagram = status_message.wrap_envelope(msg, key)

        def build_sign():
            status_message.wrap_envelope(health_daemon.build_stats_message(), key)

        def sign():
            status_message.wrap_envelope(msg, key)

        build_sign_ns, calls = per_call_ns(build_sign)
        build_ns, _ = per_call_ns(health_daemon.build_stats_message)
        sign_ns, _ = per_call_ns(sign)

    json.dump({
        "build_sign_ns": build_sign_ns,
        "build_ns": build_ns,
        "sign_ns": sign_ns,
        "calls": calls,
        "listeners": len(msg["listeners"]),
        "pools": len(msg["pools"]),
        "members": sum(len(p["members"]) for p in msg["pools"].values()),
        "json_bytes": len(json.dumps(msg)),
        "datagram_bytes": len(datagram),
    }, sys.stdout)


if __name__ == "__main__":
    main()

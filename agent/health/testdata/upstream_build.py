"""Runs upstream's heartbeat builder (python3-octavia's health_daemon) on
given `show stat` answers, for the interop test of agent/health.

stdin: {"base_path": str, "amphora_id": str, "seq": int,
        "polls": [{"all": csv, "backends": csv}, ...]}
stdout: [{"message": {...}, "counters_file": str}, ...], one per poll.

Only the environment is mocked: the list of load balancers (one, running),
the stats socket (answers from the poll), no LVS listeners.
"""

import json
import os
import sys
from unittest import mock

from oslo_config import cfg

import octavia.common.config  # noqa: F401  registers the options
from octavia.amphorae.backends.health_daemon import health_daemon
from octavia.amphorae.backends.utils import haproxy_query


def main():
    req = json.load(sys.stdin)
    cfg.CONF([], project="octavia", default_config_files=[])
    cfg.CONF.set_override("base_path", req["base_path"], group="haproxy_amphora")
    cfg.CONF.set_override("amphora_id", req["amphora_id"], group="amphora_agent")
    health_daemon.SEQ = req["seq"]
    out = []
    util = "octavia.amphorae.backends.agent.api_server.util"
    for poll in req["polls"]:
        answers = {"show stat -1 -1 -1": poll["all"], "show stat -1 6 -1": poll["backends"]}

        def query(self, q, answers=answers):
            return answers[q].rstrip()

        with mock.patch(util + ".get_loadbalancers", return_value=["lb1"]), \
                mock.patch(util + ".is_lb_running", return_value=True), \
                mock.patch(util + ".get_lvs_listeners", return_value=[]), \
                mock.patch.object(haproxy_query.HAProxyQuery, "_query", query):
            msg = health_daemon.build_stats_message()
        with open(os.path.join(req["base_path"], "stats_counters.json")) as f:
            out.append({"message": msg, "counters_file": f.read()})
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()

"""The health manager's side of the heartbeat interop test.

Reads a JSON request on stdin:

  {"key": str, "wrong_key": str, "datagrams": [hex, ...], "db_lb": {...}}

and, for every datagram, runs the real Octavia receiver code from
python3-octavia on it, the way UDPStatusGetter.dorecv and check() do:
status_message.unwrap_envelope with the configured key, recv_time added,
then heartbeat_udp.update_stats (statistics path) and
UpdateHealthDb._update_health (status path). The database is replaced by
mocks: the load balancer tree comes from "db_lb", and every status write
and the amphora health refresh are recorded. The same datagram is also
unwrapped with "wrong_key", which must raise.

Prints one JSON report on stdout.
"""

import binascii
import json
import sys
import time
from unittest import mock

import octavia.common.config  # noqa: F401  registers the options
from octavia.amphorae.backends.health_daemon import status_message
from octavia.amphorae.drivers.health import heartbeat_udp
from octavia.common import exceptions


def updates(repo):
    """entity id -> operating_status written through repo.update."""
    out = {}
    for call in repo.update.call_args_list:
        args, kwargs = call
        out[args[1]] = kwargs.get("operating_status")
    return out


def status_path(obj, db_lb):
    with mock.patch("octavia.db.api.get_session"):
        hm = heartbeat_udp.UpdateHealthDb()
        for name in ("amphora_repo", "amphora_health_repo", "listener_repo",
                     "loadbalancer_repo", "member_repo", "pool_repo"):
            setattr(hm, name, mock.MagicMock())
        hm.amphora_repo.get_lb_for_health_update.return_value = db_lb
        hm._update_health(obj, "127.0.0.1")
        return {
            "health_refreshed": hm.amphora_health_repo.replace.called,
            "looked_up_amphora": hm.amphora_repo.get_lb_for_health_update.call_args[0][1],
            "listeners": updates(hm.listener_repo),
            "pools": updates(hm.pool_repo),
            "members": updates(hm.member_repo),
            "loadbalancer": updates(hm.loadbalancer_repo),
        }


def stats_path(obj):
    with mock.patch("octavia.statistics.stats_base.update_stats_via_driver") as drv:
        heartbeat_udp.update_stats(obj)
    (records,), kwargs = drv.call_args
    return {
        "deltas": kwargs.get("deltas"),
        "records": [{
            "listener_id": r.listener_id,
            "amphora_id": r.amphora_id,
            "bytes_in": r.bytes_in,
            "bytes_out": r.bytes_out,
            "active_connections": r.active_connections,
            "total_connections": r.total_connections,
            "request_errors": r.request_errors,
        } for r in records],
    }


def main():
    req = json.load(sys.stdin)
    report = []
    for h in req["datagrams"]:
        data = binascii.unhexlify(h)
        entry = {"size": len(data)}
        # What dorecv() does with a good packet.
        obj = status_message.unwrap_envelope(data, req["key"])
        entry["decoded"] = dict(obj)
        obj["recv_time"] = time.time()
        entry["stats"] = stats_path(obj)
        entry["status"] = status_path(obj, req["db_lb"])
        try:
            status_message.unwrap_envelope(data, req["wrong_key"])
            entry["wrong_key"] = "accepted"
        except exceptions.InvalidHMACException as e:
            entry["wrong_key"] = type(e).__name__
        report.append(entry)
    json.dump(report, sys.stdout)


if __name__ == "__main__":
    main()

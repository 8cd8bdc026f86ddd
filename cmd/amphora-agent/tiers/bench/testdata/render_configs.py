#!/usr/bin/python3
"""Render HAProxy configs as the Octavia controller does, for make bench.

Run with Debian's /usr/bin/python3 (python3-octavia installed). Reads one
JSON object on stdin:

    {"amphora_id": ID, "haproxy_version": "2.6.12",
     "lbs": [{"lb_id": ID, "base_path": P, "base_crt_dir": P, "vip": IP,
              "member_port": N, "connection_limit": N,
              "listeners": [{"id": ID, "pool": ID, "port": N,
                             "members": [ID, ...]}, ...]}, ...]}

and prints a JSON list with one rendered config per entry of "lbs". The
configs come from the driver's own JinjaTemplater (combined listeners)
fed with Octavia's sample data models: HTTP listeners, one pool each,
members on 127.0.0.1, no health monitor.
"""

import json
import sys

from oslo_config import cfg

from octavia.common import config  # noqa: F401 (registers the options)


def main():
    cfg.CONF([], project='octavia')
    from octavia.common import constants
    from octavia.common.jinja.haproxy.combined_listeners import jinja_cfg
    from octavia.tests.unit.common.sample_configs import (
        sample_configs_combined as s)

    req = json.load(sys.stdin)
    amp = s.sample_amphora_tuple(id=req['amphora_id'])
    version = tuple(req.get('haproxy_version', '2.6.12').split('.'))
    out = []
    for spec in req['lbs']:
        lb = s.sample_listener_loadbalancer_tuple()._replace(
            id=spec['lb_id'], vip=s.sample_vip_tuple(ip_address=spec['vip']),
            amphorae=[amp], listeners=[])
        for lst in spec['listeners']:
            members = [
                s.sample_member_tuple(m, '127.0.0.1')._replace(
                    protocol_port=spec['member_port'])
                for m in lst['members']]
            pool = s.sample_pool_tuple(
                listener_id=lst['id'], proto=constants.PROTOCOL_HTTP,
                monitor=False)._replace(id=lst['pool'], members=members)
            lb.listeners.append(s.sample_listener_tuple(
                proto=constants.PROTOCOL_HTTP, id=lst['id'],
                connection_limit=spec['connection_limit'],
                monitor=False)._replace(
                    protocol_port=lst['port'], load_balancer=lb,
                    default_pool=pool, pools=[pool]))
        templater = jinja_cfg.JinjaTemplater(
            base_amp_path=spec['base_path'],
            base_crt_dir=spec['base_crt_dir'])
        out.append(templater.build_config(amp, lb.listeners, {},
                                          haproxy_versions=version))
    json.dump(out, sys.stdout)


if __name__ == '__main__':
    main()

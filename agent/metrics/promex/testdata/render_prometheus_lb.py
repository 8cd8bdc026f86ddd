#!/usr/bin/python3
"""Render a load balancer with a PROMETHEUS listener as the controller does.

Run with Debian's /usr/bin/python3 (python3-octavia installed). The
HAProxy config comes from Octavia's own JinjaTemplater (build_config, with
HAProxy 2.6's version, as the driver calls it) over Octavia's sample data
models: one HTTP listener whose pool has the given members, and one
PROMETHEUS listener, both on the VIP. Prints the config on stdout.

    render_prometheus_lb.py --lb-id ID --vip IP --base-path DIR
        --http-port N --prometheus-port M [--member ID,ADDR,PORT ...]
        [--exporter-port P]

--exporter-port moves the exporter's internal frontend off 127.0.0.1:9101
(the one line changed after rendering) so that a test outside a namespace
cannot collide with anything else on the host.
"""

import argparse
import sys


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--lb-id', required=True)
    p.add_argument('--vip', required=True)
    p.add_argument('--base-path', required=True)
    p.add_argument('--http-listener-id',
                   default='1a0c13c0-8e69-46c7-a68a-ca4937996d74')
    p.add_argument('--prometheus-listener-id',
                   default='0b248d39-eb90-4180-91aa-5363be7df4db')
    p.add_argument('--pool-id', default='e5ba6a9c-4c1b-4d53-9e53-3c1d4c8e2a10')
    p.add_argument('--http-port', type=int, required=True)
    p.add_argument('--prometheus-port', type=int, required=True)
    p.add_argument('--member', action='append', default=[])
    p.add_argument('--exporter-port', type=int)
    args = p.parse_args()

    from octavia_lib.common import constants as lib_consts
    from octavia.common import constants
    from octavia.common.jinja.haproxy.combined_listeners import jinja_cfg
    from octavia.tests.unit.common.sample_configs import (
        sample_configs_combined as s)

    amp = s.sample_amphora_tuple()
    lb = s.sample_listener_loadbalancer_tuple()._replace(
        id=args.lb_id, vip=s.sample_vip_tuple(ip_address=args.vip),
        amphorae=[amp], listeners=[])
    members = []
    for spec in args.member:
        mid, addr, port = spec.split(',')
        members.append(s.sample_member_tuple(mid, addr)._replace(
            protocol_port=int(port)))
    pool = s.sample_pool_tuple(
        listener_id=args.http_listener_id, proto=constants.PROTOCOL_HTTP,
        monitor_expected_codes='200')._replace(id=args.pool_id,
                                                members=members)
    lb.listeners.append(s.sample_listener_tuple(
        proto=constants.PROTOCOL_HTTP, id=args.http_listener_id,
        connection_limit=1000, monitor_expected_codes='200')._replace(
            protocol_port=args.http_port, load_balancer=lb,
            default_pool=pool, pools=[pool]))
    lb.listeners.append(s.sample_listener_tuple(
        proto=lib_consts.PROTOCOL_PROMETHEUS, include_pools=False,
        id=args.prometheus_listener_id, connection_limit=1000)._replace(
            protocol_port=args.prometheus_port, load_balancer=lb))

    templater = jinja_cfg.JinjaTemplater(
        base_amp_path=args.base_path, base_crt_dir=args.base_path + '/certs',
        haproxy_template=None, connection_logging=True)
    config = templater.build_config(
        amp, lb.listeners, {}, haproxy_versions=('2', '6', '12'),
        socket_path='%s/%s.sock' % (args.base_path, args.lb_id))
    if 'prometheus-exporter' not in config:
        sys.exit('the templater rendered no exporter: %s' % config)
    if args.exporter_port:
        config = config.replace(
            'bind 127.0.0.1:9101\n',
            'bind 127.0.0.1:%d\n' % args.exporter_port, 1)
    sys.stdout.write(config)


if __name__ == '__main__':
    main()

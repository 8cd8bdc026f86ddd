#!/usr/bin/python3
"""Plug networks into a running amphora agent with the real controller.

Run with Debian's /usr/bin/python3 (python3-octavia installed). The script
configures oslo.config as the controller services do, loads the amphora
driver through stevedore as the controller worker does, and calls the
driver's own post_vip_plug, post_network_plug and get_interface_from_ip
with the data models the controller builds from Neutron (so the request
bodies are built by _build_net_info and post_network_plug themselves).

Input: --spec, a JSON file describing the amphora, the VIP subnet and
ports (see network_interop_test.go). Output: one JSON object on stdout
with what each call returned or raised. Unexpected errors end the script
with a traceback on stderr and a non-zero status.
"""

import argparse
import json
import os
import sys
import time
import traceback


def write_controller_conf(spec, workdir):
    # Small retry settings: a misbehaving agent fails the test in seconds.
    path = os.path.join(workdir, 'octavia.conf')
    with open(path, 'w') as f:
        f.write('\n'.join([
            '[DEFAULT]',
            'debug = True',
            'use_stderr = True',
            '[haproxy_amphora]',
            'client_cert = %s' % spec['client_cert'],
            'server_ca = %s' % spec['server_ca'],
            'bind_port = %d' % spec['port'],
            'rest_request_conn_timeout = 5',
            'rest_request_read_timeout = 60',
            'connection_max_retries = 3',
            'connection_retry_interval = 1',
            '[controller_worker]',
            'amphora_driver = amphora_haproxy_rest_driver',
            '',
        ]))
    return path


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--spec', required=True)
    p.add_argument('--workdir', required=True)
    args = p.parse_args()
    with open(args.spec) as f:
        spec = json.load(f)

    result_out = os.fdopen(os.dup(sys.stdout.fileno()), 'w')
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())

    from oslo_config import cfg
    from octavia.common import config
    config.init(['--config-file', write_controller_conf(spec, args.workdir)])
    config.setup_logging(cfg.CONF)

    from stevedore import driver as stevedore_driver
    from octavia.common import constants
    from octavia.common import data_models
    from octavia.network import data_models as n_models

    drv = stevedore_driver.DriverManager(
        namespace='octavia.amphora.drivers',
        name=cfg.CONF.controller_worker.amphora_driver,
        invoke_on_load=True,
    ).driver

    def subnet(s):
        return n_models.Subnet(
            id=s['id'], network_id=s['network_id'], cidr=s['cidr'],
            gateway_ip=s['gateway'], ip_version=s['ip_version'],
            host_routes=[n_models.HostRoute(nexthop=h['nexthop'],
                                            destination=h['destination'])
                         for h in s['host_routes']])

    vip_subnet = subnet(spec['vip_subnet'])
    member_subnet = subnet(spec['member_subnet'])
    vip_net = n_models.Network(id=vip_subnet.network_id, mtu=spec['vip_mtu'])
    vrrp_port = n_models.Port(
        id='vrrp-port', mac_address=spec['vip_mac'], network=vip_net,
        network_id=vip_net.id,
        fixed_ips=[n_models.FixedIP(subnet_id=vip_subnet.id,
                                    ip_address=spec['vrrp_ip'],
                                    subnet=vip_subnet)])
    member_port = n_models.Port(
        id='member-port', mac_address=spec['member_mac'],
        network=n_models.Network(id=member_subnet.network_id,
                                 mtu=spec['member_mtu']),
        network_id=member_subnet.network_id,
        fixed_ips=[n_models.FixedIP(subnet_id=member_subnet.id,
                                    ip_address=spec['member_ip'],
                                    subnet=member_subnet)])
    absent_port = n_models.Port(
        id='absent-port', mac_address=spec['absent_mac'],
        network=member_port.network, network_id=member_port.network_id,
        fixed_ips=[])

    amp = data_models.Amphora(
        id=spec['amphora_id'], status=constants.AMPHORA_ALLOCATED,
        lb_network_ip='127.0.0.1', vrrp_ip=spec['vrrp_ip'],
        ha_ip=spec['vip'], vrrp_port_id=vrrp_port.id, ha_port_id='ha-port')
    lb = data_models.LoadBalancer(
        id='lb-1', vip=data_models.Vip(ip_address=spec['vip']),
        amphorae=[amp], topology=spec['topology'])
    additional = [n_models.AdditionalVipData(
        ip_address=a['ip_address'], subnet=subnet(a['subnet']))
        for a in spec['additional_vips']]
    net_config = {amp.id: n_models.AmphoraNetworkConfig(
        amphora=amp, vip_subnet=vip_subnet, vrrp_port=vrrp_port,
        vip_port=vrrp_port, additional_vip_data=additional)}

    results = {}

    def call(name, fn):
        start = time.monotonic()
        entry = {}
        try:
            entry['returned'] = fn()
        except Exception as e:  # recorded; the Go test judges
            entry['raised'] = type(e).__module__ + '.' + type(e).__name__
            entry['error'] = str(e)
        entry['seconds'] = round(time.monotonic() - start, 3)
        results[name] = entry

    # The controller's create-LB flow: VIP first (the retry after a
    # timeout meets a 409, which the driver tolerates), then members.
    call('post_vip_plug', lambda: drv.post_vip_plug(amp, lb, net_config))
    call('post_vip_plug_again',
         lambda: drv.post_vip_plug(amp, lb, net_config))
    # post_network_plug takes this amphora's own network config.
    amp_config = net_config[amp.id]
    call('post_network_plug',
         lambda: drv.post_network_plug(amp, member_port, amp_config))
    call('post_network_plug_again',
         lambda: drv.post_network_plug(amp, member_port, amp_config))
    # The VRRP port itself (a member on the VIP subnet): the driver adds
    # vip_net_info and the agent rewrites the VIP interface.
    call('post_network_plug_vrrp_port',
         lambda: drv.post_network_plug(amp, vrrp_port, amp_config))
    for key, ip in (('vip', spec['vip']), ('vrrp', spec['vrrp_ip']),
                    ('member', spec['member_ip']),
                    ('unknown', spec['unknown_ip'])):
        call('get_interface_from_ip_' + key,
             lambda ip=ip: drv.get_interface_from_ip(amp, ip))
    # A port Nova has not hot-plugged: the agent's 404 makes the client
    # retry until its attempts run out.
    call('post_network_plug_absent',
         lambda: drv.post_network_plug(amp, absent_port, amp_config))

    json.dump(results, result_out, sort_keys=True)
    result_out.write('\n')
    result_out.flush()
    return 0


if __name__ == '__main__':
    try:
        sys.exit(main())
    except Exception:
        traceback.print_exc()
        sys.exit(1)

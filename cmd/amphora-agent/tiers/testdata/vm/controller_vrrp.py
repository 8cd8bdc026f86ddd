#!/usr/bin/python3
"""Run an ACTIVE_STANDBY amphora's VRRP steps as the Octavia controller.

Run with Debian's /usr/bin/python3 (python3-octavia installed). The
controller is set up as in ../interop/octavia_controller.py; the spec (JSON)
describes the load balancer, its two amphorae and which one this run
talks to.

--action configure: the controller's AmphoraVRRPUpdate and
AmphoraVRRPStart tasks: the driver renders the keepalived config with
Octavia's own KeepalivedJinjaTemplater and uploads it, then starts
keepalived.

--action interface: the driver's get_interface_from_ip for the VIP, as
the controller asks which interface holds it.

Prints one JSON object: {"returned": ..., "raised": ..., "config": ...}.
"""

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                '..', 'interop'))
import octavia_controller  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--spec', required=True)
    p.add_argument('--workdir', required=True)
    p.add_argument('--action', choices=('configure', 'interface'),
                   required=True)
    args = p.parse_args()
    with open(args.spec) as f:
        spec = json.load(f)

    out = octavia_controller.take_stdout()
    this = spec['amphorae'][spec['this']]
    conf = octavia_controller.configure(octavia_controller.write_conf(
        args.workdir, spec['client_cert'], spec['server_ca'], this['port']))

    from octavia.common import constants
    from octavia.common import data_models
    from octavia.network import data_models as n_models

    drv = octavia_controller.load_driver(conf)
    subnet = n_models.Subnet(
        id='vip-subnet', network_id='vip-net', cidr=spec['vip_cidr'],
        gateway_ip=spec['vip_gateway'], ip_version=4, host_routes=[])
    amps = []
    for a in spec['amphorae']:
        amps.append(octavia_controller.amphora(
            a['id'], vrrp_ip=a['vrrp_ip'], ha_ip=spec['vip'],
            role=a['role'], vrrp_priority=a['priority'], vrrp_id=1,
            vrrp_interface='eth1', vrrp_port_id='vrrp-' + a['id'],
            ha_port_id='ha-port', load_balancer_id=spec['lb_id']))
    lb = data_models.LoadBalancer(
        id=spec['lb_id'], vip=data_models.Vip(ip_address=spec['vip']),
        amphorae=amps, topology=constants.TOPOLOGY_ACTIVE_STANDBY,
        vrrp_group=data_models.VRRPGroup(
            load_balancer_id=spec['lb_id'],
            vrrp_group_name=spec['lb_id'].replace('-', ''),
            vrrp_auth_type=constants.VRRP_AUTH_DEFAULT,
            vrrp_auth_pass='0123456', advert_int=1))
    for amp in amps:
        amp.load_balancer = lb
    amp = amps[spec['this']]
    net_config = {a.id: n_models.AmphoraNetworkConfig(
        amphora=a, vip_subnet=subnet, additional_vip_data=[])
        for a in amps}

    result = {}
    try:
        if args.action == 'configure':
            from octavia.amphorae.drivers.keepalived.jinja import jinja_cfg
            result['config'] = jinja_cfg.KeepalivedJinjaTemplater(
            ).build_keepalived_config(lb, amp, net_config[amp.id])
            drv.update_vrrp_conf(lb, net_config, amp)
            drv.start_vrrp_service(amp)
            result['returned'] = None
        else:
            result['returned'] = drv.get_interface_from_ip(amp, spec['vip'])
    except Exception as e:  # recorded; the Go test judges
        result['raised'] = octavia_controller.qualified_name(e)
        result['error'] = str(e)
    octavia_controller.emit(out, result)
    return 0


if __name__ == '__main__':
    octavia_controller.run(main)

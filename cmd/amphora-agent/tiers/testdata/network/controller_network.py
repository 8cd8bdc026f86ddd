#!/usr/bin/python3
"""Plug networks into a running amphora agent with the real controller.

Run with Debian's /usr/bin/python3 (python3-octavia installed). The script
configures oslo.config as the controller services do, loads the amphora
driver through stevedore as the controller worker does, and calls the
driver's own post_vip_plug, post_network_plug and get_interface_from_ip
with the data models the controller builds from Neutron (so the request
bodies are built by _build_net_info and post_network_plug themselves).

Input: --spec, a JSON file describing the amphora, the VIP subnet and
ports (see tiers/interop/network_test.go). Output: one JSON object on stdout
with what each call returned or raised. Unexpected errors end the script
with a traceback on stderr and a non-zero status.
"""

import os
import sys
import time

# The controller set-up shared by the interop tier's scripts.
sys.path.insert(0, os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), 'interop'))
import octavia_controller  # noqa: E402


def main():
    args, spec = octavia_controller.spec_arguments(__doc__.splitlines()[0])

    result_out = octavia_controller.take_stdout()
    conf = octavia_controller.configure(octavia_controller.write_conf(
        args.workdir, spec['client_cert'], spec['server_ca'], spec['port']))

    from octavia.common import data_models
    from octavia.network import data_models as n_models

    drv = octavia_controller.load_driver(conf)

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
        id='absent-port', mac_address=spec.get('absent_mac'),
        network=member_port.network, network_id=member_port.network_id,
        fixed_ips=[])

    amp = octavia_controller.amphora(
        spec['amphora_id'], vrrp_ip=spec['vrrp_ip'], ha_ip=spec['vip'],
        vrrp_port_id=vrrp_port.id, ha_port_id='ha-port')
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
            entry['raised'] = octavia_controller.qualified_name(e)
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
    # retry until its attempts run out (left out when the spec has no
    # absent_mac: the VM tier only plugs).
    if spec.get('absent_mac'):
        call('post_network_plug_absent',
             lambda: drv.post_network_plug(amp, absent_port, amp_config))

    octavia_controller.emit(result_out, results)
    return 0


if __name__ == '__main__':
    octavia_controller.run(main)

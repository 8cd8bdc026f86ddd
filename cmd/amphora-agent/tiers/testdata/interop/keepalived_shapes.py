#!/usr/bin/python3
"""Upload every keepalived config shape of --spec as the Octavia controller.

Run with Debian's /usr/bin/python3 (python3-octavia installed). The
controller is set up as in octavia_controller.py, with the agent's
base_path, so that the rendered check script paths are the agent's.

For each VRRP shape the driver's own update_vrrp_conf renders the config
with Octavia's KeepalivedJinjaTemplater (from the data models the v2
flows hand it: the amphora network configs as dicts) and uploads it
(PUT /1.0/vrrp/upload). For each UDP or SCTP shape the driver's own LVS
templater renders the listener and the driver's client uploads it (PUT
/1.0/listeners/{amphora}/{listener}/udp_listener), the two calls
update_amphora_listeners makes before it starts the listener (nothing is
started here). Each "truncated" entry sends the config of the named shape
cut before its last closing brace, through the same client method.

Prints one JSON object: {"results": [{"kind", "name", "config", "status",
"body", "raised"}, ...]} in spec order, "raised" being the exception the
driver's call raised (null when it returned).
"""

import json
import os
import sys
import traceback

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import octavia_controller  # noqa: E402


def parse_args():
    p = octavia_controller.argument_parser(__doc__.splitlines()[0])
    p.add_argument('--spec', required=True, help='JSON file: the shapes')
    p.add_argument('--base-path', required=True,
                   help="the agent's [haproxy_amphora] base_path")
    p.add_argument('--namespace', required=True,
                   help="the agent's network_namespace: the LVS templater "
                        "writes it as net_namespace")
    return p.parse_args()


class Shapes(object):
    def __init__(self, args, conf, drv):
        from octavia.common import constants
        from octavia.common import data_models
        from octavia.network import data_models as n_models
        self.args, self.conf, self.drv = args, conf, drv
        self.c, self.dm, self.nm = constants, data_models, n_models
        self.last = {}
        for client in drv.clients.values():
            self.watch(client.session)
        # The config of the current shape, as rendered and sent.
        self.sent = None
        for client in drv.clients.values():
            upload = getattr(client, 'upload_vrrp_config', None)
            if upload is not None:
                client.upload_vrrp_config = self.keep_config(upload)

    def watch(self, session):
        """Remember the status and body of the last HTTP answer."""
        original = session.request

        def request(method, url, *a, **kw):
            r = original(method, url, *a, **kw)
            self.last = {'status': r.status_code, 'body': r.text}
            return r
        session.request = request

    def keep_config(self, upload):
        def call(amp, config, *a, **kw):
            self.sent = config
            return upload(amp, config, *a, **kw)
        return call

    def amphora(self, **fields):
        return octavia_controller.amphora(
            self.args.amphora_id, self.args.lb_network_ip, **fields)

    def subnet(self, s):
        return self.nm.Subnet(
            id=s['id'], network_id='vip-net', cidr=s['cidr'],
            gateway_ip=s.get('gateway_ip'),
            ip_version=6 if ':' in s['cidr'] else 4,
            host_routes=[self.nm.HostRoute(nexthop=r['nexthop'],
                                           destination=r['destination'])
                         for r in s.get('host_routes') or []])

    def vrrp(self, s):
        """AmphoraVRRPUpdate: the driver renders and uploads the config."""
        c, dm = self.c, self.dm
        lb_id = s['lb_id']
        this = self.amphora(
            vrrp_ip=s['vrrp_ip'], ha_ip=s['vip'], role=s['role'],
            vrrp_priority=s['priority'], vrrp_id=1,
            vrrp_interface=s['interface'], vrrp_port_id='vrrp-port',
            ha_port_id='ha-port', load_balancer_id=lb_id)
        peers = [dm.Amphora(
            id=p['id'], status=p['status'], vrrp_ip=p['vrrp_ip'],
            ha_ip=s['vip'], role=p['role'], vrrp_priority=p['priority'],
            vrrp_id=1, load_balancer_id=lb_id) for p in s['peers']]
        lb = dm.LoadBalancer(
            id=lb_id, vip=dm.Vip(ip_address=s['vip']),
            additional_vips=[dm.AdditionalVip(ip_address=a['ip_address'])
                             for a in s.get('additional_vips') or []],
            amphorae=[this] + peers, topology=c.TOPOLOGY_ACTIVE_STANDBY,
            vrrp_group=dm.VRRPGroup(
                load_balancer_id=lb_id,
                vrrp_group_name=lb_id.replace('-', ''),
                vrrp_auth_type=c.VRRP_AUTH_DEFAULT,
                vrrp_auth_pass=s['auth_pass'], advert_int=s['advert_int']))
        net = self.nm.AmphoraNetworkConfig(
            amphora=this, vip_subnet=self.subnet(s['vip_subnet']),
            additional_vip_data=[
                self.nm.AdditionalVipData(ip_address=a['ip_address'],
                                          subnet=self.subnet(a['subnet']))
                for a in s.get('additional_vips') or []])
        # The v2 flows pass each amphora's network config as a dict
        # (GetAmphoraNetworkConfigs).
        configs = {this.id: net.to_dict(recurse=True)}
        for option, value in s.get('conf', {}).items():
            self.conf.set_override(option, value, group='keepalived_vrrp')
        try:
            self.drv.update_vrrp_conf(lb, configs, this)
        finally:
            for option in s.get('conf', {}):
                self.conf.clear_override(option, group='keepalived_vrrp')
        return self.sent

    def lvs(self, s):
        """update_amphora_listeners for one UDP or SCTP listener, up to
        the upload: the driver's LVS templater, then upload_udp_config."""
        c, dm = self.c, self.dm
        active = c.ACTIVE
        pool = None
        p = s.get('pool')
        if p:
            monitor = None
            m = p.get('monitor')
            if m:
                monitor = dm.HealthMonitor(
                    id=m['id'], type=m['type'], delay=m['delay'],
                    timeout=m['timeout'], fall_threshold=m['fall'],
                    rise_threshold=m['rise'], enabled=m['enabled'],
                    http_method=m.get('http_method'),
                    url_path=m.get('url_path'),
                    expected_codes=m.get('expected_codes'),
                    provisioning_status=m.get('provisioning_status', active))
            persistence = None
            sp = p.get('session_persistence')
            if sp:
                persistence = dm.SessionPersistence(
                    pool_id=p['id'], type=c.SESSION_PERSISTENCE_SOURCE_IP,
                    persistence_timeout=sp.get('timeout'),
                    persistence_granularity=sp.get('granularity'))
            members = [dm.Member(
                id=m['id'], pool_id=p['id'], ip_address=m['address'],
                protocol_port=m['port'], weight=m['weight'],
                enabled=m['enabled'], backup=m.get('backup', False),
                subnet_id=m.get('subnet_id'),
                monitor_address=m.get('monitor_address'),
                monitor_port=m.get('monitor_port'),
                provisioning_status=m.get('provisioning_status', active))
                for m in p.get('members') or []]
            pool = dm.Pool(
                id=p['id'], protocol=s['protocol'],
                lb_algorithm=p['lb_algorithm'], enabled=p['enabled'],
                members=members, health_monitor=monitor,
                session_persistence=persistence,
                provisioning_status=p.get('provisioning_status', active))
        amp = self.amphora()
        lb = dm.LoadBalancer(
            id=s['lb_id'], vip=dm.Vip(ip_address=s['vip']),
            additional_vips=[dm.AdditionalVip(ip_address=a)
                             for a in s.get('additional_vips') or []],
            enabled=s['lb_enabled'], amphorae=[amp])
        listener = dm.Listener(
            id=s['id'], protocol=s['protocol'], protocol_port=s['port'],
            enabled=s['enabled'], connection_limit=s['connection_limit'],
            default_pool=pool, pools=[pool] if pool else [],
            load_balancer=lb, provisioning_status=active)
        lb.listeners = [listener]
        self.sent = self.drv.lvs_jinja.build_config(listener=listener)
        self.upload_lvs(amp, s['id'], self.sent)
        return self.sent

    def upload_lvs(self, amp, listener_id, config):
        self.drv._populate_amphora_api_version(amp)
        self.drv.clients[amp.api_version].upload_udp_config(
            amp, listener_id, config)

    def truncated(self, s, configs):
        """A config the templater cannot produce: a rendered one cut
        before its last closing brace."""
        whole = configs[s['of']]
        cut = self.sent = whole[:whole.rindex('}')]
        amp = self.amphora()
        if s['of_kind'] == 'vrrp':
            self.drv._populate_amphora_api_version(amp)
            self.drv.clients[amp.api_version].upload_vrrp_config(amp, cut)
        else:
            self.upload_lvs(amp, s['listener_id'], cut)
        return cut


def main():
    args = parse_args()
    with open(args.spec) as f:
        spec = json.load(f)

    out = octavia_controller.take_stdout()
    conf = octavia_controller.configure(octavia_controller.write_conf(
        args.workdir, args.client_cert, args.server_ca, args.port,
        haproxy_amphora=[('base_path', args.base_path)]))
    from octavia.common import constants
    # The templater renders constants.AMPHORA_NAMESPACE as net_namespace.
    constants.AMPHORA_NAMESPACE = args.namespace

    shapes = Shapes(args, conf, octavia_controller.load_driver(conf))
    results, configs = [], {}
    for s in spec:
        kind = s['kind']
        result = {'kind': kind, 'name': s['name'], 'raised': None,
                  'config': None}
        shapes.last, shapes.sent = {}, None
        try:
            if kind == 'truncated':
                result['config'] = shapes.truncated(s, configs)
            else:
                result['config'] = getattr(shapes, kind)(s)
        except Exception as e:  # recorded; the Go test judges
            traceback.print_exc()
            result['raised'] = '%s: %s' % (
                octavia_controller.qualified_name(e), e)
            result['config'] = shapes.sent
        configs[s['name']] = result['config']
        result.update(shapes.last)
        results.append(result)
    octavia_controller.emit(out, {'results': results})
    return 0


if __name__ == '__main__':
    octavia_controller.run(main)

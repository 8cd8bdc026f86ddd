"""The drivers' one channel to the Go harness: JSON over HTTP on a unix
socket named by $AMPHORA_TEST_FABRIC, and the translation of its answers
into Octavia's data models."""

import http.client
import json
import os
import socket

from octavia.common import data_models
from octavia.network import data_models as n_models

SOCKET_ENV = 'AMPHORA_TEST_FABRIC'


class FabricError(Exception):
    """The harness refused or does not model a call."""


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        super().__init__('fabric', timeout=timeout)
        self._path = path

    def connect(self):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self._path)
        self.sock = sock


def call(method, timeout=600, **args):
    """POSTs args to /<method>; returns the decoded answer.

    A 404 becomes Octavia's NotFound family where the caller expects it
    (see not_found), any other refusal a FabricError carrying the
    harness's message, so the worker's log says what was not modelled.
    """
    conn = _UnixConnection(os.environ[SOCKET_ENV], timeout)
    try:
        conn.request('POST', '/' + method, body=json.dumps(args),
                     headers={'Content-Type': 'application/json'})
        resp = conn.getresponse()
        body = resp.read()
    finally:
        conn.close()
    answer = json.loads(body) if body else None
    if resp.status == 404:
        raise NotFound(method, (answer or {}).get('error', ''))
    if resp.status != 200:
        raise FabricError('%s: %s %s' % (
            method, resp.status, (answer or {}).get('error', body)))
    return answer


class NotFound(FabricError):
    def __init__(self, method, message):
        super().__init__('%s: not found: %s' % (method, message))
        self.method = method


def not_found(exc_class):
    """Maps the harness's 404 onto exc_class (e.g. PortNotFound)."""
    def wrap(fn):
        def inner(*a, **kw):
            try:
                return fn(*a, **kw)
            except NotFound as e:
                raise exc_class(str(e))
        inner.__name__ = fn.__name__
        inner.__doc__ = fn.__doc__
        return inner
    return wrap


# Octavia's objects in, plain values out: the harness needs ids and
# addresses, never whole database rows.

def vip_dict(vip):
    if vip is None:
        return None
    return {'ip_address': vip.ip_address, 'subnet_id': vip.subnet_id,
            'network_id': vip.network_id, 'port_id': vip.port_id}


def amphora_dict(amp):
    if amp is None:
        return None
    return {'id': amp.id, 'compute_id': amp.compute_id,
            'lb_network_ip': amp.lb_network_ip, 'vrrp_ip': amp.vrrp_ip,
            'ha_ip': amp.ha_ip, 'vrrp_port_id': amp.vrrp_port_id,
            'ha_port_id': amp.ha_port_id, 'role': amp.role}


def lb_dict(lb):
    return {'id': lb.id, 'project_id': lb.project_id,
            'topology': lb.topology, 'vip': vip_dict(lb.vip),
            'amphorae': [amphora_dict(a) for a in (lb.amphorae or [])]}


# Plain values in, Octavia's models out.

def to_subnet(d):
    if d is None:
        return None
    return n_models.Subnet(
        id=d['id'], name=d.get('name'), network_id=d['network_id'],
        project_id=d.get('project_id'), gateway_ip=d.get('gateway_ip'),
        cidr=d['cidr'], ip_version=d['ip_version'],
        host_routes=[n_models.HostRoute(nexthop=r['nexthop'],
                                        destination=r['destination'])
                     for r in d.get('host_routes') or []])


def to_network(d):
    return n_models.Network(
        id=d['id'], name=d.get('name'), subnets=list(d.get('subnets') or []),
        project_id=d.get('project_id'), admin_state_up=True,
        mtu=d.get('mtu'), port_security_enabled=d.get(
            'port_security_enabled', True))


def to_fixed_ips(ips):
    return [n_models.FixedIP(subnet_id=f['subnet_id'],
                             ip_address=f['ip_address'])
            for f in ips or []]


def to_port(d):
    if d is None:
        return None
    return n_models.Port(
        id=d['id'], name=d.get('name'), device_id=d.get('device_id'),
        device_owner=d.get('device_owner'), mac_address=d['mac_address'],
        network_id=d['network_id'], status=d.get('status', 'ACTIVE'),
        project_id=d.get('project_id'), admin_state_up=d.get(
            'admin_state_up', True),
        fixed_ips=to_fixed_ips(d.get('fixed_ips')),
        network=to_network(d['network']) if d.get('network') else None,
        security_group_ids=d.get('security_group_ids') or [])


def to_interface(d):
    return n_models.Interface(
        id=d['port_id'], compute_id=d['compute_id'],
        network_id=d['network_id'], port_id=d['port_id'],
        fixed_ips=to_fixed_ips(d.get('fixed_ips')))


def to_vip(d, lb_id):
    return data_models.Vip(
        load_balancer_id=lb_id, ip_address=d['ip_address'],
        subnet_id=d['subnet_id'], network_id=d['network_id'],
        port_id=d['port_id'], octavia_owned=d.get('octavia_owned', True))

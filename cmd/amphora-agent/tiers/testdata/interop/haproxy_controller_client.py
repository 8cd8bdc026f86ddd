#!/usr/bin/python3
"""Drive a load balancer on a running amphora agent as the Octavia controller.

Run with Debian's /usr/bin/python3 (python3-octavia installed). oslo.config
is set up the way the controller services do it and the amphora driver is
loaded through stevedore (octavia_controller.py), and every HAProxy config is
rendered by the driver's own JinjaTemplater (jinja_combo) from Octavia's
sample data models (octavia/tests/unit/common/sample_configs), adjusted to
the test topology: the VIP, the member addresses and ports, UUIDs as ids, a
health monitor that expects 200 and a connection limit the machine can
serve.

Listener certificates come from Octavia's local cert manager (it stands
in for Barbican), which the driver reads like any cert manager.

The script runs in phases so the Go test can look at the amphora between
them: create, update, start, status, cert-upload, cert-delete, delete
for an HTTP listener; tls-create, tls-rotate, tls-delete-listener for a
load balancer that also has a TERMINATED_HTTPS listener; lvs-create,
lvs-update, lvs-reload, lvs-delete for a load balancer that also has the UDP and SCTP
listeners of --lvs-spec (rendered by the driver's own LVS templater). It prints one
JSON line {"phase": "ready", ...} after start-up, then reads one phase
name per line on stdin ("quit" ends it), runs it and prints one JSON line:

    {"phase": NAME, "result": {...}, "calls": [...], "http": [...],
     "seconds": S}

"calls" lists every call of the driver's REST client (method, arguments,
what it returned or raised); "http" lists every HTTP attempt the client
made (method, path, request body size and md5, status, content type, ETag,
body), so a misbehaving agent can be reported exactly.

Any unexpected exception prints {"phase": NAME, "error": TRACEBACK, ...}
and ends the script with status 1. All of octavia's logging goes to stderr.
"""

import hashlib
import json
import os
import sys
import time
import traceback
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import octavia_controller  # noqa: E402

# The client methods whose calls are recorded; start_listener and
# reload_listener are functools.partial attributes of the client instance.
RECORDED = ('get_api_version', 'get_info', 'get_details', 'upload_config',
            'start_listener', 'reload_listener', 'get_all_listeners',
            'upload_cert_pem', 'get_cert_md5sum', 'delete_cert_pem',
            'delete_listener', 'upload_udp_config')

BODY_LIMIT = 4000


def parse_args():
    p = octavia_controller.argument_parser(__doc__.splitlines()[0])
    p.add_argument('--base-path', required=True,
                   help="the agent's [haproxy_amphora] base_path")
    p.add_argument('--base-cert-dir', required=True,
                   help="the agent's [haproxy_amphora] base_cert_dir")
    p.add_argument('--lb-id', required=True)
    p.add_argument('--listener-id', required=True)
    p.add_argument('--pool-id', required=True)
    p.add_argument('--vip', required=True)
    p.add_argument('--listener-port', type=int, default=80)
    p.add_argument('--connection-limit', type=int, required=True)
    p.add_argument('--member', action='append', required=True,
                   help='ID,ADDRESS,PORT; the first phase uses the first '
                        'member, "update" all of them')
    p.add_argument('--ping-monitor', action='store_true',
                   help='the HTTP pool has a PING health monitor (checked '
                        'every 2 s, DOWN after 2 failures, UP after 1 '
                        'success) instead of the sample HTTP one')
    p.add_argument('--more-listeners', type=int, default=0,
                   help='N more HTTP listeners, each with a pool of the '
                        'same members, on the ports after --listener-port '
                        '(a load balancer of many listeners)')
    p.add_argument('--cert-id', required=True,
                   help='id of the TLS container whose PEM is uploaded')
    # The TERMINATED_HTTPS phases (tls-*) only.
    p.add_argument('--tls-listener-id')
    p.add_argument('--tls-listener-port', type=int, default=443)
    p.add_argument('--tls-pool-id')
    p.add_argument('--tls-member', action='append', default=[],
                   help='member ids of the TLS pool, in --member order')
    p.add_argument('--tls-pem', action='append', default=[],
                   help='CERTFILE,KEYFILE of a tenant certificate, stored '
                        'in the local cert manager: the first for '
                        'tls-create, the second for tls-rotate')
    # The LVS phases (lvs-*) only.
    p.add_argument('--lvs-spec', default='[]',
                   help='JSON list of UDP/SCTP listeners: {"id", "protocol", '
                        '"port", "pool_id", "monitor": null or {"id", '
                        '"delay", "timeout", "fall"}, "members": [{"id", '
                        '"address", "port", "weight", "enabled"}]}')
    p.add_argument('--lvs-spec-file', default=None,
                   help='a file holding a --lvs-spec list, read again by '
                        'each lvs-update phase')
    p.add_argument('--namespace', default=None,
                   help="the agent's network_namespace when it is not "
                        "amphora-haproxy (tests beside each other on one "
                        "host): the LVS templater writes it as net_namespace")
    return p.parse_args()


def write_controller_conf(args):
    """The controller's octavia.conf with the agent's folders and a cert
    manager.

    base_path and base_cert_dir are the agent's folders, so the rendered
    stats socket and server-state-file are the agent's. Octavia's own
    file-backed cert manager stands in for Barbican: the driver fetches
    listener certificates through it.
    """
    storage = os.path.join(args.workdir, 'tenant-certs')
    os.makedirs(storage, exist_ok=True)
    return octavia_controller.write_conf(
        args.workdir, args.client_cert, args.server_ca, args.port,
        haproxy_amphora=[('base_path', args.base_path),
                         ('base_cert_dir', args.base_cert_dir)],
        sections=[('certificates', [('cert_manager', 'local_cert_manager'),
                                    ('storage_path', storage)])])


def jsonable(value):
    """A JSON-friendly summary of a client method's return value."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if hasattr(value, 'status_code') and hasattr(value, 'headers'):
        return {'response_status': value.status_code}
    return repr(value)


def summarize_arg(value):
    if isinstance(value, (bytes, bytearray)):
        return {'bytes': len(value),
                'md5': hashlib.md5(value).hexdigest()}  # nosec
    if isinstance(value, str) and len(value) > 200:
        return {'str': len(value),
                'md5': hashlib.md5(value.encode('utf-8')).hexdigest()}
    if hasattr(value, 'lb_network_ip'):  # the amphora
        return 'amphora %s' % value.id
    return jsonable(value)


def body_text(content):
    text = content.decode('utf-8', 'replace')
    if len(text) > BODY_LIMIT:
        text = text[:BODY_LIMIT] + '... (%d bytes)' % len(content)
    return text


class Recorder(object):
    """Records client calls and HTTP attempts of the current phase."""

    def __init__(self):
        self.calls = []
        self.http = []

    def reset(self):
        self.calls, self.http = [], []

    def wrap_session(self, session, client_name):
        original = session.request

        def request(method, url, *a, **kw):
            data = kw.get('data')
            if isinstance(data, str):
                data = data.encode('utf-8')
            entry = {'client': client_name, 'method': method.upper(),
                     'url': url}
            if data is not None:
                entry['request_bytes'] = len(data)
                entry['request_md5'] = hashlib.md5(data).hexdigest()  # nosec
            if kw.get('json') is not None:
                entry['request_json'] = jsonable(kw['json'])
            self.http.append(entry)
            start = time.monotonic()
            try:
                r = original(method, url, *a, **kw)
            except Exception as e:
                entry['raised'] = '%s.%s: %s' % (
                    type(e).__module__, type(e).__name__, e)
                entry['seconds'] = round(time.monotonic() - start, 3)
                raise
            entry['seconds'] = round(time.monotonic() - start, 3)
            entry['status'] = r.status_code
            entry['content_type'] = r.headers.get('content-type', '')
            entry['etag'] = r.headers.get('etag')
            entry['body'] = body_text(r.content)
            return r

        session.request = request

    def wrap_client(self, client, client_name):
        for name in RECORDED:
            fn = getattr(client, name, None)
            if fn is not None:
                setattr(client, name, self._wrap_call(fn, client_name, name))
        self.wrap_session(client.session, client_name)

    def _wrap_call(self, fn, client_name, name):
        def call(*a, **kw):
            entry = {'client': client_name, 'call': name,
                     'args': [summarize_arg(v) for v in a],
                     'kwargs': {k: summarize_arg(v) for k, v in kw.items()},
                     'raised': None}
            self.calls.append(entry)
            start = time.monotonic()
            try:
                value = fn(*a, **kw)
            except Exception as e:
                entry['raised'] = octavia_controller.qualified_name(e)
                raise
            finally:
                entry['seconds'] = round(time.monotonic() - start, 3)
            entry['returned'] = jsonable(value)
            return value
        return call


class Controller(object):
    def __init__(self, args):
        self.args = args

        conf = octavia_controller.configure(write_controller_conf(args))

        from octavia.amphorae.drivers.haproxy import exceptions as exc
        from octavia.amphorae.drivers.haproxy import rest_api_driver
        from octavia.common import constants
        from octavia.common.tls_utils import cert_parser
        # Imported after config.init: the module reads CONF at import.
        from octavia.tests.common import sample_certs
        from octavia.tests.unit.common.sample_configs import (
            sample_configs_combined as sample)

        self.conf, self.exc, self.constants = conf, exc, constants
        self.sample = sample
        self.cert_parser, self.sample_certs = cert_parser, sample_certs
        self.rest_api_driver = rest_api_driver

        self.drv = octavia_controller.load_driver(conf)
        self.rec = Recorder()
        for name, client in self.drv.clients.items():
            self.rec.wrap_client(client, name)
        self.client = self.drv.clients['1.0']

        self.members = []
        for spec in args.member:
            mid, addr, port = spec.split(',')
            self.members.append((mid, addr, int(port)))
        self.listener = None
        self.pem = None
        self.lvs_spec = json.loads(args.lvs_spec)
        if args.namespace:
            # The templater renders constants.AMPHORA_NAMESPACE.
            constants.AMPHORA_NAMESPACE = args.namespace

        # Tenant certificates, stored as a user's TLS containers would be.
        from oslo_context import context as oslo_context
        self.tls_refs = []
        for spec in args.tls_pem:
            cert_file, key_file = spec.split(',')
            with open(cert_file, 'rb') as f:
                cert = f.read()
            with open(key_file, 'rb') as f:
                key = f.read()
            self.tls_refs.append(self.drv.cert_manager.store_cert(
                oslo_context.RequestContext(project_id='12345'), cert, key))
        self.tls_ref = self.tls_refs[0] if self.tls_refs else None

    def ready(self):
        ha = self.conf.haproxy_amphora
        jinja = self.drv.jinja_combo
        return {
            'driver': octavia_controller.qualified_name(self.drv),
            'templater': octavia_controller.qualified_name(jinja),
            'templater_base_amp_path': jinja.base_amp_path,
            'templater_base_crt_dir': jinja.base_crt_dir,
            'controller_config': {
                'base_path': ha.base_path,
                'base_cert_dir': ha.base_cert_dir,
                'bind_port': ha.bind_port,
                'connection_max_retries': ha.connection_max_retries,
                'connection_retry_interval': ha.connection_retry_interval,
                'rest_request_read_timeout': ha.rest_request_read_timeout,
            },
        }

    def amphora(self):
        # Every controller operation loads the amphora from the database.
        return octavia_controller.amphora(self.args.amphora_id,
                                          self.args.lb_network_ip)

    def load_balancer(self, amp, n_members, tls=False, lvs=False):
        """The sample load balancer with one HTTP listener and its pool,
        and with tls also a TERMINATED_HTTPS listener with its own pool
        whose certificate is the current tenant certificate; with lvs also
        the UDP and SCTP listeners of --lvs-spec."""
        s, a = self.sample, self.args
        lb = s.sample_listener_loadbalancer_tuple()._replace(
            id=a.lb_id, vip=s.sample_vip_tuple(ip_address=a.vip),
            amphorae=[amp], listeners=[])

        def pool(pool_id, listener_id, member_ids):
            members = [
                s.sample_member_tuple(mid, addr)._replace(protocol_port=port)
                for mid, (_, addr, port) in zip(member_ids, self.members)]
            monitor_proto = None
            if a.ping_monitor:
                monitor_proto = self.constants.HEALTH_MONITOR_PING
            p = s.sample_pool_tuple(
                listener_id=listener_id,
                proto=self.constants.PROTOCOL_HTTP,
                monitor_proto=monitor_proto,
                monitor_expected_codes='200')._replace(
                    id=pool_id, members=members[:n_members])
            if a.ping_monitor:
                p = p._replace(health_monitor=p.health_monitor._replace(
                    delay=2, timeout=2, fall_threshold=2, rise_threshold=1))
            return p

        http_pool = pool(a.pool_id, a.listener_id,
                         [m[0] for m in self.members])
        lb.listeners.append(s.sample_listener_tuple(
            proto=self.constants.PROTOCOL_HTTP, id=a.listener_id,
            connection_limit=a.connection_limit,
            monitor_expected_codes='200')._replace(
                protocol_port=a.listener_port, load_balancer=lb,
                default_pool=http_pool, pools=[http_pool]))
        for i in range(1, a.more_listeners + 1):
            lid, pid = (str(uuid.uuid5(uuid.UUID(a.listener_id), kind + str(i)))
                        for kind in ('listener', 'pool'))
            p = pool(pid, lid, [m[0] for m in self.members])
            lb.listeners.append(s.sample_listener_tuple(
                proto=self.constants.PROTOCOL_HTTP, id=lid,
                connection_limit=a.connection_limit,
                monitor_expected_codes='200')._replace(
                    protocol_port=a.listener_port + i, load_balancer=lb,
                    default_pool=p, pools=[p]))
        if tls:
            tls_pool = pool(a.tls_pool_id, a.tls_listener_id, a.tls_member)
            lb.listeners.append(s.sample_listener_tuple(
                proto=self.constants.PROTOCOL_TERMINATED_HTTPS, tls=True,
                id=a.tls_listener_id, connection_limit=a.connection_limit,
                monitor_expected_codes='200')._replace(
                    protocol_port=a.tls_listener_port, load_balancer=lb,
                    tls_certificate_id=self.tls_ref,
                    default_tls_container=None,
                    default_pool=tls_pool, pools=[tls_pool]))
        if lvs:
            lb.listeners.extend(self.lvs_listener(spec, lb)
                                for spec in self.lvs_spec)
        return lb

    def lvs_listener(self, spec, lb):
        """A UDP or SCTP listener with its default pool, members and
        monitor (UDP-CONNECT or SCTP) from one --lvs-spec entry."""
        s, proto = self.sample, spec['protocol']
        members = [
            s.sample_member_tuple(m['id'], m['address'],
                                  enabled=m.get('enabled', True))._replace(
                protocol_port=m['port'], weight=m.get('weight', 1))
            for m in spec['members']]
        pool = s.sample_pool_tuple(
            proto=proto, monitor=spec.get('monitor') is not None,
            persistence=False)._replace(id=spec['pool_id'], members=members)
        if spec.get('monitor'):
            mon = spec['monitor']
            pool = pool._replace(health_monitor=pool.health_monitor._replace(
                id=mon['id'], delay=mon['delay'], timeout=mon['timeout'],
                fall_threshold=mon['fall'], rise_threshold=1))
        return s.sample_listener_tuple(
            proto=proto, monitor=False, persistence=False)._replace(
                id=spec['id'], protocol_port=spec['port'], load_balancer=lb,
                connection_limit=-1, default_pool=pool, pools=[pool])

    def uploaded_configs(self):
        """The configs upload_config sent in this phase (the driver
        renders them inside update_amphora_listeners)."""
        return [c['config'] for c in self.rec.calls
                if c['call'] == 'upload_config' and 'config' in c]

    def capture_configs(self):
        """Keep the text of each uploaded config in its call record."""
        client = self.client
        recorded = client.upload_config
        rec = self.rec

        def upload_config(amp, lb_id, config, *a, **kw):
            try:
                return recorded(amp, lb_id, config, *a, **kw)
            finally:
                rec.calls[-1]['config'] = config
        client.upload_config = upload_config

        recorded_udp = client.upload_udp_config

        def upload_udp_config(amp, listener_id, config, *a, **kw):
            try:
                return recorded_udp(amp, listener_id, config, *a, **kw)
            finally:
                rec.calls[-1]['config'] = config
        client.upload_udp_config = upload_udp_config

    # Phases ------------------------------------------------------------

    def phase_create(self):
        """Listener create on a fresh amphora: the driver's own
        update_amphora_listeners (version discovery, get_info, render,
        upload_config, reload_listener, which starts HAProxy)."""
        amp = self.amphora()
        lb = self.load_balancer(amp, 1)
        self.drv.update_amphora_listeners(lb, amp)
        self.listener = lb.listeners[0]
        return {'api_version': amp.api_version,
                'configs': self.uploaded_configs()}

    def phase_update(self):
        """Member create: the second member joins; the same driver call
        uploads the new config and reloads the running HAProxy."""
        amp = self.amphora()
        lb = self.load_balancer(amp, len(self.members))
        self.drv.update_amphora_listeners(lb, amp)
        self.listener = lb.listeners[0]
        return {'api_version': amp.api_version,
                'configs': self.uploaded_configs()}

    def phase_start(self):
        """The driver's start (failover flows): start_listener on the LB."""
        amp = self.amphora()
        lb = self.load_balancer(amp, len(self.members))
        self.drv.start(lb, amp)
        return {'api_version': amp.api_version}

    def phase_status(self):
        amp = self.amphora()
        self.drv._populate_amphora_api_version(amp)
        return {'listeners': self.client.get_all_listeners(amp),
                'details': self.client.get_details(amp)}

    def phase_cert_upload(self):
        """A listener certificate as the driver uploads it: the PEM built
        by cert_parser.build_pem from a TLS container, sent through
        _upload_cert (md5 check, 404 ignored, then upload); md5 read back;
        _upload_cert again must find it and not upload."""
        sc = self.sample_certs
        container = self.sample.sample_tls_container_tuple(
            id=self.args.cert_id, certificate=sc.X509_CERT,
            private_key=sc.X509_CERT_KEY, intermediates=sc.X509_IMDS_LIST,
            primary_cn=sc.X509_CERT_CN)
        pem = self.cert_parser.build_pem(container)
        if isinstance(pem, str):
            pem = pem.encode('utf-8')
        self.pem = pem
        name = '%s.pem' % self.args.cert_id
        md5sum = hashlib.md5(pem).hexdigest()  # nosec
        amp = self.amphora()
        self.drv._populate_amphora_api_version(amp)
        self.drv._upload_cert(amp, self.args.lb_id, pem, md5sum, name)
        got = self.client.get_cert_md5sum(amp, self.args.lb_id, name)
        self.drv._upload_cert(amp, self.args.lb_id, pem, md5sum, name)
        return {'filename': name, 'pem': pem.decode('utf-8'),
                'md5sum_sent': md5sum, 'md5sum_read': got}

    def phase_cert_delete(self):
        """Delete the certificate; reading it again goes the driver's
        404 paths: ignored (returns None) and, without ignore, NotFound."""
        name = '%s.pem' % self.args.cert_id
        amp = self.amphora()
        self.drv._populate_amphora_api_version(amp)
        self.client.delete_cert_pem(amp, self.args.lb_id, name)
        ignored = self.client.get_cert_md5sum(
            amp, self.args.lb_id, name, ignore=(404,))
        raised = None
        try:
            self.client.get_cert_md5sum(amp, self.args.lb_id, name)
        except self.exc.NotFound as e:
            raised = octavia_controller.qualified_name(e)
        # Deleting it again: the controller ignores 404, the agent says 200.
        self.client.delete_cert_pem(amp, self.args.lb_id, name)
        return {'md5sum_after_delete_ignoring_404': ignored,
                'raised_without_ignore': raised}

    def phase_tls_create(self):
        """Create an LB with an HTTP and a TERMINATED_HTTPS listener:
        update_amphora_listeners uploads the certificate and the crt-list
        (md5 check first), then the config, then reloads."""
        amp = self.amphora()
        lb = self.load_balancer(amp, len(self.members), tls=True)
        self.drv.update_amphora_listeners(lb, amp)
        return {'api_version': amp.api_version, 'cert_ref': self.tls_ref,
                'configs': self.uploaded_configs()}

    def phase_tls_rotate(self):
        """The TLS listener gets another certificate: new PEM, new
        crt-list, same config, reload."""
        self.tls_ref = self.tls_refs[1]
        return self.phase_tls_create()

    def phase_tls_delete_listener(self):
        """Delete the TERMINATED_HTTPS listener while the HTTP one stays:
        the driver deletes its certificate and updates the remaining
        listeners."""
        amp = self.amphora()
        lb = self.load_balancer(amp, len(self.members), tls=True)
        self.drv.delete(lb.listeners[1])
        return {'api_version': amp.api_version,
                'configs': self.uploaded_configs()}

    def lvs_configs(self):
        return {c['args'][1]: c['config'] for c in self.rec.calls
                if c['call'] == 'upload_udp_config' and 'config' in c}

    def phase_lvs_create(self):
        """The load balancer gains UDP/SCTP listeners: one
        update_amphora_listeners call sends every listener, HTTP and LVS
        (upload_udp_config and reload_listener per LVS listener, then the
        HAProxy config and its reload)."""
        amp = self.amphora()
        lb = self.load_balancer(amp, len(self.members), lvs=True)
        self.drv.update_amphora_listeners(lb, amp)
        return {'api_version': amp.api_version,
                'lvs_configs': self.lvs_configs(),
                'configs': self.uploaded_configs()}

    def phase_lvs_update(self):
        """A change of the UDP/SCTP listeners (a member added, removed or
        re-weighted, a monitor changed): --lvs-spec-file says what they
        are now, and the driver sends the whole load balancer again, as
        for lvs-create."""
        with open(self.args.lvs_spec_file) as f:
            self.lvs_spec = json.load(f)
        return self.phase_lvs_create()

    def phase_lvs_reload(self):
        """The driver's reload of the whole load balancer: reload_listener
        for each LVS listener id and for the load balancer id."""
        amp = self.amphora()
        lb = self.load_balancer(amp, len(self.members), lvs=True)
        self.drv.reload(lb, amp)
        return {'listeners': self.client.get_all_listeners(amp)}

    def phase_lvs_delete(self):
        """Delete the LVS listeners (driver.delete sends DELETE
        /1.0/listeners/{listener_id} for each); the HTTP one stays."""
        amp = self.amphora()
        lb = self.load_balancer(amp, len(self.members), lvs=True)
        for listener in lb.listeners:
            if listener.protocol in self.constants.LVS_PROTOCOLS:
                self.drv.delete(listener)
        return {'listeners': self.client.get_all_listeners(amp)}

    def phase_delete(self):
        """Listener delete of the last listener (driver.delete), which
        sends DELETE /1.0/listeners/{lb_id}; then once more, as a retried
        controller task would; then the listener list."""
        amp = self.amphora()
        lb = self.load_balancer(amp, len(self.members))
        self.drv.delete(lb.listeners[0])
        self.client.delete_listener(amp, self.args.lb_id)
        return {'listeners': self.client.get_all_listeners(amp),
                'details': self.client.get_details(amp)}


def main():
    args = parse_args()

    # Keep stdout for the JSON lines.
    out = octavia_controller.take_stdout()

    start = time.monotonic()
    ctl = Controller(args)
    ctl.capture_configs()
    ready = ctl.ready()
    ready.update({'phase': 'ready',
                  'seconds': round(time.monotonic() - start, 3)})
    octavia_controller.emit(out, ready)

    for line in sys.stdin:
        phase = line.strip()
        if not phase:
            continue
        if phase == 'quit':
            return 0
        fn = getattr(ctl, 'phase_' + phase.replace('-', '_'), None)
        ctl.rec.reset()
        start = time.monotonic()
        report = {'phase': phase}
        try:
            if fn is None:
                raise RuntimeError('unknown phase %r' % phase)
            report['result'] = fn()
        except Exception:
            report['error'] = traceback.format_exc()
        report['seconds'] = round(time.monotonic() - start, 3)
        report['calls'] = ctl.rec.calls
        report['http'] = ctl.rec.http
        octavia_controller.emit(out, report)
        if 'error' in report:
            sys.stderr.write(report['error'])
            return 1
    return 0


if __name__ == '__main__':
    octavia_controller.run(main)

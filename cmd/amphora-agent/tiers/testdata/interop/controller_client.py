#!/usr/bin/python3
"""Drive a running amphora agent with the real Octavia controller client.

Run with Debian's /usr/bin/python3 (python3-octavia installed). The script
configures oslo.config the way the controller services do (octavia's config
module registers the options; a generated octavia.conf is parsed with
config.init), loads the amphora driver through stevedore as the controller
worker does, and calls the agent through octavia's own
AmphoraAPIClient1_0 (that set-up is octavia_controller.py's, shared by the
tier's controller scripts). It prints one JSON object on stdout describing
what the client got back; the Go interop test judges it.

Any unexpected exception ends the script with a non-zero status and the
traceback on stderr. All of octavia's logging goes to stderr.
"""

import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import octavia_controller  # noqa: E402


def parse_args():
    p = octavia_controller.argument_parser(__doc__.splitlines()[0])
    p.add_argument('--agent-config', required=True,
                   help='file with the new amphora-agent.conf text to push')
    p.add_argument('--server-pem', required=True,
                   help='file with the new server certificate + key to push')
    p.add_argument('--unknown-path', default='does-not-exist')
    return p.parse_args()


def timed(results, name, fn):
    start = time.monotonic()
    value = fn()
    results.setdefault('seconds', {})[name] = round(
        time.monotonic() - start, 3)
    return value


def main():
    args = parse_args()

    # Keep stdout for the single JSON result.
    result_out = octavia_controller.take_stdout()

    conf_path = octavia_controller.write_conf(
        args.workdir, args.client_cert, args.server_ca, args.port)
    conf = octavia_controller.configure(conf_path)

    from octavia.amphorae.drivers.haproxy import exceptions as exc
    from octavia.amphorae.drivers.haproxy import rest_api_driver

    ha = conf.haproxy_amphora
    results = {
        'controller_config': {
            'client_cert': ha.client_cert,
            'server_ca': ha.server_ca,
            'bind_port': ha.bind_port,
            'rest_request_conn_timeout': ha.rest_request_conn_timeout,
            'rest_request_read_timeout': ha.rest_request_read_timeout,
            'connection_max_retries': ha.connection_max_retries,
            'connection_retry_interval': ha.connection_retry_interval,
            'agent_tls_protocol': conf.amphora_agent.agent_tls_protocol,
        },
    }

    drv = octavia_controller.load_driver(conf)
    results['driver'] = octavia_controller.qualified_name(drv)

    amp = octavia_controller.amphora(args.amphora_id, args.lb_network_ip)

    # Version discovery: GET // on the base client, exactly the call the
    # driver makes (and the reachability probe of failover flows).
    results['api_version_response'] = timed(
        results, 'get_api_version',
        lambda: drv.clients['base'].get_api_version(amp))
    # Then the driver's own bookkeeping, which stores amp.api_version and
    # picks the client class for every later call.
    results['populated_api_version'] = timed(
        results, 'populate_api_version',
        lambda: drv._populate_amphora_api_version(amp))
    results['amphora_api_version'] = amp.api_version

    client = drv.clients[amp.api_version]
    results['client'] = type(client).__name__
    if not isinstance(client, rest_api_driver.AmphoraAPIClient1_0):
        raise RuntimeError('driver picked %r for api_version %r, not '
                           'AmphoraAPIClient1_0' % (client, amp.api_version))

    results['info'] = timed(results, 'get_info',
                            lambda: client.get_info(amp))
    # The controller's parsing of haproxy_version (used to render haproxy
    # configs).
    results['haproxy_versions'] = timed(
        results, 'get_haproxy_versions',
        lambda: drv._get_haproxy_versions(amp))

    results['details'] = timed(results, 'get_details',
                               lambda: client.get_details(amp))

    # The controller renders the agent config with jinja and sends a str.
    with open(args.agent_config, encoding='utf-8') as f:
        agent_config = f.read()
    r = timed(results, 'update_agent_config',
              lambda: client.update_agent_config(amp, agent_config))
    results['update_agent_config'] = {'status': r.status_code,
                                      'body': r.json()}

    # The controller sends the Fernet-decrypted PEM, i.e. bytes.
    with open(args.server_pem, 'rb') as f:
        server_pem = f.read()
    r = timed(results, 'update_cert_for_rotation',
              lambda: client.update_cert_for_rotation(amp, server_pem))
    results['update_cert_for_rotation'] = {'status': r.status_code,
                                           'body': r.json()}

    # A later controller operation opens new connections: a fresh client
    # (new requests session) must accept the rotated certificate, which it
    # verifies against server_ca with the amphora id as hostname.
    fresh = rest_api_driver.AmphoraAPIClient1_0()
    results['info_after_rotation'] = timed(
        results, 'get_info_after_rotation',
        lambda: fresh.get_info(amp))

    # An unknown path through the 1.0 client's request(), checked the way
    # every 1.0 client method checks responses. The agent's JSON 404 must
    # make request() return at once (a non-JSON 404 would be retried as
    # "agent not ready") and check_exception must raise NotFound.
    unknown = {'path': args.unknown_path, 'raised': None}
    start = time.monotonic()
    try:
        r = client.get(amp, args.unknown_path)
        unknown['status'] = r.status_code
        unknown['content_type'] = r.headers.get('content-type', '')
        unknown['body'] = r.text
        exc.check_exception(r)
    except exc.NotFound as e:
        unknown['raised'] = octavia_controller.qualified_name(e)
    unknown['seconds'] = round(time.monotonic() - start, 3)
    results['unknown_path'] = unknown

    octavia_controller.emit(result_out, results)
    return 0


if __name__ == '__main__':
    octavia_controller.run(main)

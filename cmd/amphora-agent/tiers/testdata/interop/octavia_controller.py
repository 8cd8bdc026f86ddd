"""The Octavia controller set-up the interop tier's scripts share.

controller_client.py, haproxy_controller_client.py (both in this folder)
and ../network/controller_network.py run with Debian's /usr/bin/python3
(python3-octavia installed) and set up the controller the same way: a
generated octavia.conf parsed by oslo.config as the controller services
do, the amphora driver loaded through stevedore as the controller worker
does, the amphora as the controller loads it from its database, and JSON
for the Go test on stdout. Each script puts this folder on sys.path from
its own location before importing this module.

Nothing of Octavia is imported at module level: a script first takes
stdout for its JSON (take_stdout), then sets up the controller.
"""

import argparse
import json
import os
import sys
import traceback


def argument_parser(description):
    """An argparse parser with the arguments of a script that drives one
    agent: the amphora, where its agent listens, the controller's
    certificates and a folder for the generated octavia.conf."""
    p = argparse.ArgumentParser(description=description)
    p.add_argument('--amphora-id', required=True)
    p.add_argument('--lb-network-ip', default='127.0.0.1')
    p.add_argument('--port', type=int, required=True)
    p.add_argument('--client-cert', required=True,
                   help='controller client certificate + key (one PEM)')
    p.add_argument('--server-ca', required=True,
                   help='CA that signed the agent certificate')
    p.add_argument('--workdir', required=True,
                   help='folder for the generated controller octavia.conf')
    return p


def spec_arguments(description, parser=None):
    """Parse --spec (a JSON file) and --workdir (a folder for the generated
    octavia.conf), on parser if given; return the arguments and the spec."""
    p = parser or argparse.ArgumentParser(description=description)
    p.add_argument('--spec', required=True)
    p.add_argument('--workdir', required=True)
    args = p.parse_args()
    with open(args.spec) as f:
        return args, json.load(f)


def take_stdout():
    """Keep stdout for the JSON the Go test reads.

    Returns a file writing to the original stdout; from here on anything
    else that would print there (libraries, warnings) goes to stderr.
    """
    out = os.fdopen(os.dup(sys.stdout.fileno()), 'w')
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    return out


def emit(out, obj):
    """Write obj to out as one JSON line (sorted keys) and flush it."""
    out.write(json.dumps(obj, sort_keys=True) + '\n')
    out.flush()


def write_conf(workdir, client_cert, server_ca, port, haproxy_amphora=(),
               sections=()):
    """Write the controller's octavia.conf into workdir; return its path.

    The file holds only what the driver reads. Retries are kept small so a
    misbehaving agent fails the test in seconds instead of the production
    default of 120 x 5 s. haproxy_amphora adds (option, value) pairs to
    that section; sections adds (section, [(option, value), ...]) ones.
    """
    lines = [
        '[DEFAULT]',
        'debug = True',
        'use_stderr = True',
        '',
        '[haproxy_amphora]',
        'client_cert = %s' % client_cert,
        'server_ca = %s' % server_ca,
        'bind_port = %d' % port,
    ]
    lines += ['%s = %s' % option for option in haproxy_amphora]
    lines += [
        'lb_network_interface = lo',
        'rest_request_conn_timeout = 5',
        'rest_request_read_timeout = 60',
        'connection_max_retries = 3',
        'connection_retry_interval = 1',
        '',
        '[amphora_agent]',
        'agent_tls_protocol = TLSv1.2',
        '',
        '[controller_worker]',
        'amphora_driver = amphora_haproxy_rest_driver',
        '',
    ]
    for section, options in sections:
        lines.append('[%s]' % section)
        lines += ['%s = %s' % option for option in options]
        lines.append('')
    path = os.path.join(workdir, 'octavia.conf')
    with open(path, 'w') as f:
        f.write('\n'.join(lines))
    return path


def configure(conf_path):
    """Set up oslo.config and logging as the controller services do.

    Same order as octavia.common.service.prepare_service: importing
    octavia.common.config registers every option group, init() parses the
    config file, then logging is set up. (rpc.init() is left out: it only
    builds the oslo.messaging transport, which the REST client never uses.)
    Returns cfg.CONF.
    """
    from oslo_config import cfg
    from octavia.common import config
    config.init(['--config-file', conf_path])
    config.setup_logging(cfg.CONF)
    return cfg.CONF


def load_driver(conf):
    """The amphora driver, loaded the way the controller worker loads it
    (controller/worker/v2/tasks/amphora_driver_tasks.py)."""
    from stevedore import driver as stevedore_driver
    return stevedore_driver.DriverManager(
        namespace='octavia.amphora.drivers',
        name=conf.controller_worker.amphora_driver,
        invoke_on_load=True,
    ).driver


def amphora(amphora_id, lb_network_ip='127.0.0.1', **fields):
    """The amphora as every controller operation loads it from the
    database: ALLOCATED, and without api_version (the data model has no
    such attribute; the driver adds it on discovery)."""
    from octavia.common import constants
    from octavia.common import data_models
    return data_models.Amphora(
        id=amphora_id,
        status=constants.AMPHORA_ALLOCATED,
        lb_network_ip=lb_network_ip,
        **fields)


def qualified_name(obj):
    """module.Class of obj's type, e.g. of a driver or an exception."""
    return type(obj).__module__ + '.' + type(obj).__name__


def run(main):
    """Exit with main()'s status; an unexpected exception prints its
    traceback on stderr and exits with status 1."""
    try:
        sys.exit(main())
    except Exception:  # report everything unexpected, then fail
        traceback.print_exc()
        sys.exit(1)

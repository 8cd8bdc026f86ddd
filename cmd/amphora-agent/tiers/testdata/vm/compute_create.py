#!/usr/bin/python3
"""Run Octavia's CertComputeCreate task and print what it asks Nova for.

Run with Debian's /usr/bin/python3 (python3-octavia installed). The task is
the one the controller's amphora create flow runs: it renders
amphora-agent.conf (AgentJinjaTemplater) and rsyslog's 10-rsyslog.conf
(LoggingJinjaTemplater), adds the amphora's certificate and the client CA,
renders the cloud-init user data (UserDataJinjaCfg) and hands all of it to
the compute driver's build(). The driver here only records the call: the
VM tier makes the config drive from it as Nova would.

The spec (JSON) holds the controller's settings: amphora_id, topology,
server_pem and client_ca (paths), heartbeat (host:port), heartbeat_key,
heartbeat_interval, user_data_config_drive, key_name, timezone.

Prints one JSON object: the keyword arguments of build() (name, key_name,
user_data, config_drive_files: null when user_data_config_drive is set),
and user_data_files: the files the user data's write_files carry.
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                '..', 'interop'))
import octavia_controller  # noqa: E402


class RecordingCompute(object):
    """A compute driver that keeps the arguments of build()."""

    def __init__(self):
        self.build_args = None

    def build(self, **kwargs):
        self.build_args = kwargs
        return 'compute-' + kwargs['name']


def main():
    args, spec = octavia_controller.spec_arguments(__doc__.splitlines()[0])

    out = octavia_controller.take_stdout()
    lines = [
        '[DEFAULT]',
        'debug = False',
        '',
        '[controller_worker]',
        'client_ca = %s' % spec['client_ca'],
        'loadbalancer_topology = %s' % spec['topology'],
        'user_data_config_drive = %s' % spec['user_data_config_drive'],
        'amp_ssh_key_name = %s' % spec['key_name'],
        'amp_timezone = %s' % spec['timezone'],
        'compute_driver = compute_noop_driver',
        '',
        '[health_manager]',
        'controller_ip_port_list = %s' % spec['heartbeat'],
        'heartbeat_interval = %d' % spec['heartbeat_interval'],
        'heartbeat_key = %s' % spec['heartbeat_key'],
        '',
        '[amphora_agent]',
        'agent_request_read_timeout = 180',
        'agent_tls_protocol = TLSv1.2',
        '',
    ]
    conf_path = os.path.join(args.workdir, 'octavia.conf')
    with open(conf_path, 'w') as f:
        f.write('\n'.join(lines))
    octavia_controller.configure(conf_path)

    from cryptography import fernet
    from octavia.common import utils
    from octavia.controller.worker.v2.tasks import compute_tasks

    # The flow hands the task the certificate encrypted with the
    # controller's passphrase (GenerateServerPEMTask).
    with open(spec['server_pem'], 'rb') as f:
        server_pem = fernet.Fernet(
            utils.get_compatible_server_certs_key_passphrase()).encrypt(
                f.read()).decode('utf-8')
    # The files the task rendered, whichever way they travel: the user
    # data's write_files are made from this same dictionary.
    rendered = {}
    templater = compute_tasks.user_data_jinja_cfg.UserDataJinjaCfg
    build_user_data = templater.build_user_data_config

    def recording_build_user_data(self, user_data):
        rendered.update(user_data)
        return build_user_data(self, user_data)
    templater.build_user_data_config = recording_build_user_data

    task = compute_tasks.CertComputeCreate()
    task.compute = RecordingCompute()
    task.execute(spec['amphora_id'], server_pem, server_group_id=None)
    built = task.compute.build_args
    octavia_controller.emit(out, {
        'name': built['name'],
        'key_name': built['key_name'],
        'user_data': built['user_data'],
        'config_drive_files': built['config_drive_files'],
        'user_data_files': rendered,
    })
    return 0


if __name__ == '__main__':
    octavia_controller.run(main)

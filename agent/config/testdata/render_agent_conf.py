#!/usr/bin/python3
"""Regenerate the controller-rendered golden files in this directory.

Needs Debian's python3-octavia (11.0.0) and python3-jinja2. The 11.0.0 file
comes from the packaged controller code path (AgentJinjaTemplater, so the
real autoescaping and defaults apply). The master file renders the template
taken from the upstream repository (pass its path) with the same context the
master controller builds (the 11.0.0 context minus the upstart options).

    git -C <octavia.git> show HEAD:octavia/amphorae/backends/agent/templates/amphora_agent_conf.template > /tmp/tpl/amphora_agent_conf.template
    /usr/bin/python3 render_agent_conf.py /tmp/tpl/amphora_agent_conf.template
"""
import os
import sys

import jinja2
from oslo_config import cfg
from oslo_log import log

from octavia.common import config  # noqa: F401  registers the options
from octavia.amphorae.backends.agent import agent_jinja_cfg

HERE = os.path.dirname(os.path.abspath(__file__))
CONF = cfg.CONF


def context(amphora_id, topology):
    # Same keys as master's AgentJinjaTemplater.build_agent_config.
    return {
        'agent_server_ca': CONF.amphora_agent.agent_server_ca,
        'agent_server_cert': CONF.amphora_agent.agent_server_cert,
        'agent_server_network_dir':
            CONF.amphora_agent.agent_server_network_dir,
        'agent_request_read_timeout':
            CONF.amphora_agent.agent_request_read_timeout,
        'amphora_id': amphora_id,
        'base_cert_dir': CONF.haproxy_amphora.base_cert_dir,
        'base_path': CONF.haproxy_amphora.base_path,
        'bind_host': CONF.haproxy_amphora.bind_host,
        'bind_port': CONF.haproxy_amphora.bind_port,
        'controller_list': CONF.health_manager.controller_ip_port_list,
        'debug': CONF.debug,
        'haproxy_cmd': CONF.haproxy_amphora.haproxy_cmd,
        'heartbeat_interval': CONF.health_manager.heartbeat_interval,
        'heartbeat_key': CONF.health_manager.heartbeat_key,
        'amphora_udp_driver': CONF.amphora_agent.amphora_udp_driver,
        'agent_tls_protocol': CONF.amphora_agent.agent_tls_protocol,
        'topology': topology,
        'administrative_log_facility':
            CONF.amphora_agent.administrative_log_facility,
        'user_log_facility': CONF.amphora_agent.user_log_facility,
    }


def write(name, text):
    # Byte-exact: no trailing newline is added, as the controller sends it.
    with open(os.path.join(HERE, name), 'w') as f:
        f.write(text)


def main():
    log.register_options(CONF)
    CONF([], project='octavia')

    # 11.0.0: an operator-tuned controller (A/S, debug, facility 3, an
    # interfaces dir, an unbracketed IPv6 health manager).
    CONF.set_override('debug', True)
    CONF.set_override('administrative_log_facility', 3, 'amphora_agent')
    CONF.set_override('user_log_facility', 2, 'amphora_agent')
    CONF.set_override('agent_server_network_dir', '/etc/octavia/interfaces',
                      'amphora_agent')
    CONF.set_override('controller_ip_port_list',
                      ['192.0.2.10:5555', '2001:db8::11:5555'],
                      'health_manager')
    CONF.set_override('heartbeat_key', 'insecure', 'health_manager')
    tpl = agent_jinja_cfg.AgentJinjaTemplater()
    write('controller-11.0.0.conf', tpl.build_agent_config(
        '2f4c1f7e-8a3b-4b6e-9d0c-5e7a1b2c3d4e', 'ACTIVE_STANDBY'))

    # master: defaults, a bracketed IPv6 health manager and a key that the
    # autoescaping mangles.
    for opt, group in (('debug', None),
                       ('administrative_log_facility', 'amphora_agent'),
                       ('user_log_facility', 'amphora_agent'),
                       ('agent_server_network_dir', 'amphora_agent')):
        CONF.clear_override(opt, group)
    CONF.set_override('controller_ip_port_list',
                      ['192.0.2.10:5555', '[2001:db8::11]:5555'],
                      'health_manager')
    CONF.set_override('heartbeat_key', 's3cr&t<k>"\'', 'health_manager')
    path = sys.argv[1]
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(os.path.dirname(path)),
        autoescape=True)
    master = env.get_template(os.path.basename(path))
    write('controller-master.conf', master.render(context(
        '7c9e6679-7425-40de-944b-e07fc1f90ae7', 'SINGLE')))


if __name__ == '__main__':
    main()

#!/usr/bin/python3
"""Render /etc/rsyslog.d/10-rsyslog.conf as the Octavia controller does.

Run with Debian's /usr/bin/python3 (python3-octavia installed). The
[amphora_agent] log offloading options are written into a controller
octavia.conf, oslo.config is set up as the controller services do it
(../interop/octavia_controller.py), and the file is rendered by Octavia's
own LoggingJinjaTemplater, as ComputeCreate puts it on the config drive.

Prints the rendered file on stdout.
"""

import argparse
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                '..', 'interop'))
import octavia_controller  # noqa: E402


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument('--workdir', required=True)
    p.add_argument('--admin-target', action='append', default=[],
                   help='HOST:PORT of an admin_log_targets entry')
    p.add_argument('--tenant-target', action='append', default=[],
                   help='HOST:PORT of a tenant_log_targets entry')
    p.add_argument('--protocol', default='UDP')
    p.add_argument('--disable-local-log-storage', action='store_true')
    args = p.parse_args()

    out = octavia_controller.take_stdout()
    conf_path = os.path.join(args.workdir, 'octavia-logging.conf')
    with open(conf_path, 'w') as f:
        f.write('[DEFAULT]\nuse_stderr = True\n\n[amphora_agent]\n')
        f.write('admin_log_targets = %s\n' % ','.join(args.admin_target))
        f.write('tenant_log_targets = %s\n' % ','.join(args.tenant_target))
        f.write('log_protocol = %s\n' % args.protocol)
        f.write('disable_local_log_storage = %s\n'
                % args.disable_local_log_storage)
    conf = octavia_controller.configure(conf_path)

    from octavia.common.jinja.logging import logging_jinja_cfg
    templater = logging_jinja_cfg.LoggingJinjaTemplater(
        conf.amphora_agent.logging_template_override)
    out.write(templater.build_logging_config())
    out.flush()
    return 0


if __name__ == '__main__':
    octavia_controller.run(main)

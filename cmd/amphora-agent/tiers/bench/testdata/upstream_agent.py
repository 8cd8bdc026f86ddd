"""Runs upstream's amphora agent for make bench: octavia.cmd.agent.main()
from Debian's python3-octavia, the code behind its /usr/bin/amphora-agent,
with the same arguments.

One thing differs: where gunicorn logs. Upstream hard-codes
/var/log/amphora-agent.log plus a syslog socket (/run/rsyslog/octavia/log)
that an amphora image provides; here both go to the file named by
$AMPHORA_BENCH_LOG, so the bench writes nothing outside its own folder and
does not pay for a logging error on every line.

usage: upstream_agent.py --config-file FILE
"""

import os
import sys

from octavia.cmd import agent

LOG_FILE = os.environ["AMPHORA_BENCH_LOG"]
_load_config = agent.AmphoraAgent.load_config


def load_config(self):
    self.options.update(accesslog=LOG_FILE, errorlog=LOG_FILE, syslog=False)
    _load_config(self)


agent.AmphoraAgent.load_config = load_config

if __name__ == "__main__":
    sys.argv[0] = "/usr/bin/amphora-agent"
    sys.exit(agent.main())

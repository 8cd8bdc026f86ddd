#!/usr/bin/python3
"""Run a shell command inside an amphora VM through qemu-guest-agent.

Usage: vm-exec.py QGA_SOCKET 'command'   (prints its output, exits with its status)
"""
import base64
import json
import socket
import sys
import time


def main():
    sock = socket.socket(socket.AF_UNIX)
    sock.connect(sys.argv[1])
    f = sock.makefile('rw')

    def call(command, arguments=None):
        msg = {'execute': command}
        if arguments is not None:
            msg['arguments'] = arguments
        f.write(json.dumps(msg) + '\n')
        f.flush()
        return json.loads(f.readline())['return']

    pid = call('guest-exec', {'path': '/bin/sh', 'arg': ['-c', sys.argv[2]],
                              'capture-output': True})['pid']
    while True:
        status = call('guest-exec-status', {'pid': pid})
        if status['exited']:
            break
        time.sleep(0.2)
    sys.stdout.write(base64.b64decode(status.get('out-data', '')).decode())
    sys.stderr.write(base64.b64decode(status.get('err-data', '')).decode())
    return status.get('exitcode', 1)


if __name__ == '__main__':
    sys.exit(main())

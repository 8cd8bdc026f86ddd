#!/usr/bin/python3
"""Translate an exporter page with upstream's prometheus-proxy code.

Run with Debian's /usr/bin/python3 (python3-octavia installed):

    upstream_translate.py PAGE > OCTAVIA_PAGE
    upstream_translate.py --time N PAGE    # median seconds of N translations

The page goes through PrometheusProxy.do_GET of octavia.cmd.prometheus_proxy
itself, with the page in place of HAProxy's answer and the CPU and memory
readings fixed as upstream's unit test fixes them (load 1 on 2 CPUs, 23.5 %
memory), so the output is upstream's answer body, byte for byte.
"""

import io
import statistics
import sys
import time
from unittest import mock

from octavia.cmd import prometheus_proxy


def translate(page):
    """Upstream's answer body for the page (bytes)."""
    proxy = prometheus_proxy.PrometheusProxy.__new__(
        prometheus_proxy.PrometheusProxy)
    proxy.send_response = mock.Mock()
    proxy.send_header = mock.Mock()
    proxy.end_headers = mock.Mock()
    proxy.wfile = io.BytesIO()
    with mock.patch('urllib.request.urlopen',
                    return_value=io.BytesIO(page)), \
            mock.patch('os.cpu_count', return_value=2), \
            mock.patch('psutil.getloadavg', return_value=(1, 2, 3)), \
            mock.patch('psutil.virtual_memory', return_value=(1, 2, 23.5)):
        proxy.do_GET()
    proxy.send_response.assert_called_once_with(200)
    return proxy.wfile.getvalue()


def main():
    if sys.argv[1] == '--time':
        runs, page_path = int(sys.argv[2]), sys.argv[3]
        with open(page_path, 'rb') as f:
            page = f.read()
        took = []
        for _ in range(runs):
            start = time.perf_counter()
            translate(page)
            took.append(time.perf_counter() - start)
        print(statistics.median(took))
        return
    with open(sys.argv[1], 'rb') as f:
        sys.stdout.buffer.write(translate(f.read()))


if __name__ == '__main__':
    main()

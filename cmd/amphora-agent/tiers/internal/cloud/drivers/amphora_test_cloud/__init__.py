"""Octavia compute and network drivers for amphora-agent's cloud test tier.

They hold no state: every call goes to the test's Go harness (the
"fabric"), which owns the VMs, taps, addresses and their cleanup.
"""

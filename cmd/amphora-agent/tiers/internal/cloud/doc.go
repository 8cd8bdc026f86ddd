// Package cloud runs Octavia's own control plane for the cloud test tier:
// Debian's octavia-api, octavia-worker, octavia-health-manager and
// octavia-housekeeping with a MariaDB and a RabbitMQ of their own, each a
// process group in one network namespace made for the test (so default
// ports never collide with the host or another test), with every file,
// config and log under one folder of the test.
//
// Octavia reaches "the cloud" through the project's own compute and
// network drivers (drivers/amphora_test_cloud, registered by a hand-made
// dist-info on PYTHONPATH, never shipped). They are thin clients of the
// Fabric, served by the test process on a unix socket: the Fabric models
// Neutron's networks, subnets and ports and Nova's servers, and hands
// booting to a Hypervisor, so every resource's lifetime and cleanup stays
// in Go. The management network is a bridge (br-mgmt) in the controller's
// namespace, the controller at ControllerIP on it: the worker reaches an
// amphora at its own address on 9443, the health manager receives its
// heartbeats on ControllerIP:HealthPort.
//
// Everything stops in t.Cleanup, also on failure, after the log digest of
// each service is printed: SIGTERM then SIGKILL to each process group, and
// topo kills whatever is left in the namespace.
package cloud

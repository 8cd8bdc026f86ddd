package cloud

import "fmt"

// octaviaConf is the one config file every Octavia service reads: noauth
// API, the amphora provider (amphorav2 flows, jobboard off), the
// project's compute and network drivers, Octavia's local certificate
// generator and manager on the test's CA, and retry knobs short enough
// for a test yet long enough for an amphora booting under TCG.
// [haproxy_amphora] base_path and base_cert_dir keep their defaults: the
// worker copies them into each amphora's agent config.
func (c *ControlPlane) octaviaConf(o Options) string {
	return fmt.Sprintf(`[DEFAULT]
debug = True
transport_url = rabbit://guest:guest@127.0.0.1:5672/

[api_settings]
bind_host = 127.0.0.1
bind_port = 9876
auth_strategy = noauth
default_provider_driver = amphora
enabled_provider_drivers = amphora:The amphora provider of the cloud tier

[database]
connection = mysql+pymysql://octavia:octavia@127.0.0.1/octavia

[health_manager]
bind_ip = %[1]s
bind_port = %[2]d
heartbeat_key = insecure
controller_ip_port_list = %[1]s:%[2]d
heartbeat_interval = 5
heartbeat_timeout = 60
health_check_interval = 3

[house_keeping]
cleanup_interval = 30

[controller_worker]
amphora_driver = %[3]s
compute_driver = test_cloud_compute
network_driver = test_cloud_network
image_driver = image_noop_driver
loadbalancer_topology = SINGLE
amp_image_tag = amphora
amp_flavor_id = amp-flavor
amp_boot_network_list = %[4]s
amp_active_retries = 60
amp_active_wait_sec = 2
client_ca = %[5]s/certs/ca.pem

[certificates]
cert_generator = local_cert_generator
cert_manager = local_cert_manager
ca_certificate = %[5]s/certs/ca.pem
ca_private_key = %[5]s/certs/ca.key
server_certs_key_passphrase = insecure-key-do-not-use-this-key
storage_path = %[5]s/certstore

[haproxy_amphora]
client_cert = %[5]s/certs/client.pem
server_ca = %[5]s/certs/ca.pem
connection_max_retries = 150
connection_retry_interval = 2
rest_request_conn_timeout = 5
rest_request_read_timeout = 60

[networking]
max_retries = 5
retry_interval = 1

[task_flow]
jobboard_enabled = False

[oslo_concurrency]
lock_path = %[5]s/lock

[oslo_messaging]
topic = octavia_prov

%[6]s
`, ControllerIP, HealthPort, o.AmphoraDriver, c.ManagementNet.ID, c.Dir, o.Extra)
}

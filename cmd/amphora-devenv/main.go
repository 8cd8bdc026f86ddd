// Command amphora-devenv prepares a self-contained local environment for
// `make run`: a dev CA, a server certificate for a generated amphora id, a
// controller client certificate and an amphora-agent.conf that keeps all
// state under one folder and listens on loopback. The amphora id and the
// certificates are kept, so repeated runs reuse the same identity.
package main

import (
	"crypto/rand"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"

	"github.com/amphora-agent/amphora-agent/agent/fsutil"
	"github.com/amphora-agent/amphora-agent/certs/devpki"
)

func main() {
	state := flag.String("state", ".state", "folder for certificates, config and agent state")
	port := flag.Int("port", 9443, "API port on 127.0.0.1")
	hbPort := flag.Int("heartbeat-port", 5555, "UDP port on 127.0.0.1 the heartbeats go to")
	flag.Parse()
	if err := prepare(*state, *port, *hbPort); err != nil {
		fmt.Fprintln(os.Stderr, "amphora-devenv:", err)
		os.Exit(1)
	}
}

type layout struct{ root string }

func (l layout) path(parts ...string) string {
	return filepath.Join(append([]string{l.root}, parts...)...)
}

func prepare(state string, port, hbPort int) error {
	root, err := filepath.Abs(state)
	if err != nil {
		return err
	}
	l := layout{root}
	for _, d := range []string{"certs", "lib", "lib/certs", "interfaces"} {
		if err := os.MkdirAll(l.path(d), 0o700); err != nil {
			return err
		}
	}
	ampID, err := amphoraID(l.path("amphora-id"))
	if err != nil {
		return err
	}
	if !exists(l.path("certs", "ca.pem")) || !exists(l.path("certs", "server.pem")) || !exists(l.path("certs", "client.pem")) {
		if err := issue(l, ampID); err != nil {
			return err
		}
	}
	// The config is rewritten every time so PORT and paths follow the
	// command line; identity and certificates are kept.
	conf := l.path("amphora-agent.conf")
	if err := fsutil.WriteFile(conf, []byte(renderConfig(l, ampID, port, hbPort)), 0o600); err != nil {
		return err
	}
	fmt.Printf(`Dev environment in %[1]s (amphora %[2]s).
Try it from another shell:

  curl --cacert %[1]s/certs/ca.pem --cert %[1]s/certs/client.pem \
       --resolve %[2]s:%[3]d:127.0.0.1 https://%[2]s:%[3]d/1.0/info

`, root, ampID, port)
	return nil
}

func exists(p string) bool { _, err := os.Stat(p); return err == nil }

// amphoraID returns the id stored in path, creating a random UUID first.
func amphoraID(path string) (string, error) {
	if data, err := os.ReadFile(path); err == nil {
		return strings.TrimSpace(string(data)), nil
	}
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	id := fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
	return id, fsutil.WriteFile(path, []byte(id+"\n"), 0o600)
}

func issue(l layout, ampID string) error {
	ca, err := devpki.NewAuthority("amphora-agent dev CA")
	if err != nil {
		return err
	}
	server, err := ca.Server(ampID, net.IPv4(127, 0, 0, 1), net.IPv6loopback)
	if err != nil {
		return err
	}
	client, err := ca.Client("octavia-controller-dev")
	if err != nil {
		return err
	}
	// One CA signs both sides here; on a real amphora the client CA and the
	// server CA are the controller's two separate authorities.
	files := map[string][]byte{
		"ca.pem":     ca.PEM,
		"server.pem": server.Combined(),
		"client.pem": client.Combined(),
	}
	for name, data := range files {
		if err := fsutil.WriteFile(l.path("certs", name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

func renderConfig(l layout, ampID string, port, hbPort int) string {
	return fmt.Sprintf(`# amphora-agent.conf for local development, written by amphora-devenv.
[DEFAULT]
debug = True
use_syslog = False

[haproxy_amphora]
base_path = %[1]s
base_cert_dir = %[2]s
bind_host = 127.0.0.1
bind_port = %[3]d
haproxy_cmd = /usr/sbin/haproxy

[health_manager]
controller_ip_port_list = 127.0.0.1:%[4]d
heartbeat_interval = 10
heartbeat_key = insecure

[amphora_agent]
agent_server_ca = %[5]s
agent_server_cert = %[6]s
agent_server_network_dir = %[7]s
agent_request_read_timeout = 180
agent_tls_protocol = TLSv1.2
amphora_id = %[8]s
network_namespace = amphora-haproxy-dev
plugged_interfaces_file = %[9]s
nftables_rules_file = %[10]s
haproxy_user_group_file = %[11]s
pci_rescan_file = %[12]s

[controller_worker]
loadbalancer_topology = SINGLE
`, l.path("lib"), l.path("lib", "certs"), port, hbPort,
		l.path("certs", "ca.pem"), l.path("certs", "server.pem"), l.path("interfaces"), ampID,
		l.path("lib", "plugged_interfaces"), l.path("lib", "nftables-vip.rules"),
		l.path("lib", "haproxy-default-user-group.conf"), l.path("pci-rescan"))
}

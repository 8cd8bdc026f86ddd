package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/amphora-agent/amphora-agent/agent/config"
	"github.com/amphora-agent/amphora-agent/certs"
)

func TestPrepareKeepsIdentityAndFollowsPort(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	if err := prepare(state, 19443, 5555); err != nil {
		t.Fatal(err)
	}
	id1, _ := os.ReadFile(filepath.Join(state, "amphora-id"))
	cert1, _ := os.ReadFile(filepath.Join(state, "certs", "server.pem"))
	if err := prepare(state, 19444, 5555); err != nil {
		t.Fatal(err)
	}
	id2, _ := os.ReadFile(filepath.Join(state, "amphora-id"))
	cert2, _ := os.ReadFile(filepath.Join(state, "certs", "server.pem"))
	if string(id1) != string(id2) || string(cert1) != string(cert2) {
		t.Fatal("a second run changed the amphora id or the certificates")
	}
	// The config it writes loads, and follows the new port.
	src, err := config.ReadFiles([]string{filepath.Join(state, "amphora-agent.conf")})
	if err != nil {
		t.Fatal(err)
	}
	cfg, _, err := config.Load(src)
	if err != nil {
		t.Fatal(err)
	}
	if cfg.BindPort != 19444 || cfg.BindHost != "127.0.0.1" || cfg.AmphoraID != strings.TrimSpace(string(id2)) {
		t.Fatalf("config: port %d host %s id %s", cfg.BindPort, cfg.BindHost, cfg.AmphoraID)
	}
	// The server certificate names the amphora, as the controller checks.
	pair, err := certs.ParseKeyPair(cert2)
	if err != nil {
		t.Fatal(err)
	}
	if pair.Leaf.Subject.CommonName != cfg.AmphoraID || len(pair.Leaf.DNSNames) == 0 || pair.Leaf.DNSNames[0] != cfg.AmphoraID {
		t.Fatalf("server certificate CN %q SAN %v, want the amphora id", pair.Leaf.Subject.CommonName, pair.Leaf.DNSNames)
	}
	for _, f := range []string{"amphora-agent.conf", "certs/server.pem", "certs/client.pem"} {
		if st, _ := os.Stat(filepath.Join(state, f)); st.Mode().Perm() != 0o600 {
			t.Errorf("%s mode %v", f, st.Mode().Perm())
		}
	}
}

package certs

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"testing"

	"github.com/amphora-agent/amphora-agent/agent/fsutil"
	"github.com/amphora-agent/amphora-agent/certs/devpki"
	"go.uber.org/zap"
)

func mustCA(t *testing.T) *devpki.Authority {
	t.Helper()
	ca, err := devpki.NewAuthority("test CA")
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func mustServer(t *testing.T, ca *devpki.Authority, id string) devpki.Issued {
	t.Helper()
	s, err := ca.Server(id)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestValidateServerPEM(t *testing.T) {
	ca := mustCA(t)
	a, b := mustServer(t, ca, "amp-a"), mustServer(t, ca, "amp-b")
	cases := []struct {
		name string
		pem  []byte
		ok   bool
	}{
		{"cert then key", a.Combined(), true},
		{"key then cert", append(append([]byte{}, a.KeyPEM...), a.CertPEM...), true},
		{"cert with chain then key", append(append(append([]byte{}, a.CertPEM...), ca.PEM...), a.KeyPEM...), true},
		{"certificate only", a.CertPEM, false},
		{"key only", a.KeyPEM, false},
		{"key of another certificate", append(append([]byte{}, a.CertPEM...), b.KeyPEM...), false},
		{"garbage", []byte("hello"), false},
		{"empty", nil, false},
	}
	for _, c := range cases {
		err := ValidateServerPEM(c.pem)
		if (err == nil) != c.ok {
			t.Errorf("%s: err = %v, want ok=%v", c.name, err, c.ok)
		}
	}
}

func served(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	inner, err := cfg.GetConfigForClient(&tls.ClientHelloInfo{})
	if err != nil {
		t.Fatal(err)
	}
	leaf := inner.Certificates[0].Leaf
	if inner.ClientAuth != tls.RequireAndVerifyClientCert || inner.ClientCAs == nil {
		t.Fatal("client certificates are not required")
	}
	return leaf.Subject.CommonName
}

func TestServerConfigFollowsFileAndKeepsLastGood(t *testing.T) {
	dir := t.TempDir()
	ca := mustCA(t)
	certFile, caFile := filepath.Join(dir, "server.pem"), filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := ServerConfig(certFile, caFile, tls.VersionTLS12, zap.NewNop()); err == nil {
		t.Fatal("missing server certificate accepted at start-up")
	}
	if err := os.WriteFile(certFile, mustServer(t, ca, "first").Combined(), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := ServerConfig(certFile, caFile, tls.VersionTLS12, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	if cn := served(t, cfg); cn != "first" {
		t.Fatalf("serving %q, want first", cn)
	}
	if err := fsutil.WriteFile(certFile, mustServer(t, ca, "second").Combined(), 0o600); err != nil {
		t.Fatal(err)
	}
	if cn := served(t, cfg); cn != "second" {
		t.Fatalf("after rotation serving %q, want second", cn)
	}
	if err := fsutil.WriteFile(certFile, []byte("broken"), 0o600); err != nil {
		t.Fatal(err)
	}
	if cn := served(t, cfg); cn != "second" {
		t.Fatalf("after a broken file serving %q, want the last good (second)", cn)
	}
}

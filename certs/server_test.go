package certs

import (
	"crypto/tls"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
		err := ValidateServerPEM(c.pem, "amp-a", time.Now())
		if (err == nil) != c.ok {
			t.Errorf("%s: err = %v, want ok=%v", c.name, err, c.ok)
		}
	}
}

// A rotation the controller could not connect through is refused: not
// valid yet, expired, or issued to another name than the amphora id the
// controller checks (the DNS names when present, else the CN).
func TestValidateServerPEMRefusesLockouts(t *testing.T) {
	ca := mustCA(t)
	now := time.Now()
	issue := func(cn string, dns []string, from, until time.Time) []byte {
		t.Helper()
		c, err := ca.ServerValid(cn, dns, from, until)
		if err != nil {
			t.Fatal(err)
		}
		return c.Combined()
	}
	const id = "9d2b6e1c-4f3a-4c8e-8b7d-2a1e5f6c7d80"
	year := 365 * 24 * time.Hour
	cases := []struct {
		name string
		pem  []byte
		want error
	}{
		{"as the controller issues it", issue(id, []string{id}, now.Add(-time.Minute), now.Add(year)), nil},
		{"names in capitals", issue(strings.ToUpper(id), []string{strings.ToUpper(id)}, now.Add(-time.Minute), now.Add(year)), nil},
		{"CN only", issue(id, nil, now.Add(-time.Minute), now.Add(year)), nil},
		{"expired", issue(id, []string{id}, now.Add(-2*year), now.Add(-time.Minute)), ErrExpired},
		{"not valid yet", issue(id, []string{id}, now.Add(time.Hour), now.Add(year)), ErrNotYetValid},
		{"another amphora", issue("other", []string{"other"}, now.Add(-time.Minute), now.Add(year)), ErrWrongName},
		// The controller's client checks the DNS names, not the CN, when
		// there are any.
		{"right CN, other DNS name", issue(id, []string{"other"}, now.Add(-time.Minute), now.Add(year)), ErrWrongName},
		{"CN only, another amphora", issue("other", nil, now.Add(-time.Minute), now.Add(year)), ErrWrongName},
	}
	for _, c := range cases {
		err := ValidateServerPEM(c.pem, id, now)
		if !errors.Is(err, c.want) || (c.want == nil && err != nil) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
		}
	}
	// Without an amphora id configured only the name check is skipped.
	if err := ValidateServerPEM(issue("other", []string{"other"}, now.Add(-time.Minute), now.Add(year)), "", now); err != nil {
		t.Errorf("no amphora id: %v", err)
	}
	if err := ValidateServerPEM(issue(id, []string{id}, now.Add(-2*year), now.Add(-time.Minute)), "", now); !errors.Is(err, ErrExpired) {
		t.Errorf("no amphora id, expired: %v", err)
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

package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
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
		_, err := ValidateServerPEM(c.pem, "amp-a", time.Now())
		if (err == nil) != c.ok {
			t.Errorf("%s: err = %v, want ok=%v", c.name, err, c.ok)
		}
	}
}

// A rotation the controller could not connect through is refused: expired
// beyond any clock skew, or issued to another name than the amphora id the
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
		{"expired a year ago", issue(id, []string{id}, now.Add(-2*year), now.Add(-year)), ErrExpired},
		{"never valid", issue(id, []string{id}, now.Add(time.Hour), now.Add(time.Minute)), ErrNeverValid},
		{"another amphora", issue("other", []string{"other"}, now.Add(-time.Minute), now.Add(year)), ErrWrongName},
		// The controller's client checks the DNS names, not the CN, when
		// there are any.
		{"right CN, other DNS name", issue(id, []string{"other"}, now.Add(-time.Minute), now.Add(year)), ErrWrongName},
		{"CN only, another amphora", issue("other", nil, now.Add(-time.Minute), now.Add(year)), ErrWrongName},
		{"not valid yet, another amphora", issue("other", []string{"other"}, now.Add(time.Hour), now.Add(year)), ErrWrongName},
	}
	for _, c := range cases {
		_, err := ValidateServerPEM(c.pem, id, now)
		if !errors.Is(err, c.want) || (c.want == nil && err != nil) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
		}
	}
	// Without an amphora id configured only the name check is skipped.
	if _, err := ValidateServerPEM(issue("other", []string{"other"}, now.Add(-time.Minute), now.Add(year)), "", now); err != nil {
		t.Errorf("no amphora id: %v", err)
	}
	if _, err := ValidateServerPEM(issue(id, []string{id}, now.Add(-2*year), now.Add(-year)), "", now); !errors.Is(err, ErrExpired) {
		t.Errorf("no amphora id, expired: %v", err)
	}
}

// The controller stamps NotBefore with its own clock and uploads at once,
// and checks the certificate with its own clock later: a rotation is
// accepted whichever way the amphora's clock is off, unless the
// certificate expired longer than ExpiryTolerance ago. The amphora's
// clock is the now passed in.
func TestValidateServerPEMToleratesClockSkew(t *testing.T) {
	ca := mustCA(t)
	const id = "9d2b6e1c-4f3a-4c8e-8b7d-2a1e5f6c7d80"
	// As the controller issues it: valid from its now for 30 days.
	issued := time.Now().Truncate(time.Second)
	expires := issued.Add(30 * 24 * time.Hour)
	c, err := ca.ServerValid(id, []string{id}, issued, expires)
	if err != nil {
		t.Fatal(err)
	}
	pem := c.Combined()
	cases := []struct {
		name  string
		clock time.Time // the amphora's
		want  Skew
		err   error
	}{
		{"in step", issued.Add(time.Second), Skew{}, nil},
		{"behind by a second", issued.Add(-time.Second), Skew{Early: time.Second}, nil},
		{"behind by 5 minutes", issued.Add(-5 * time.Minute), Skew{Early: 5 * time.Minute}, nil},
		{"behind by 6 hours", issued.Add(-6 * time.Hour), Skew{Early: 6 * time.Hour}, nil},
		{"behind by 3 days", issued.Add(-72 * time.Hour), Skew{Early: 72 * time.Hour}, nil},
		{"ahead by 5 minutes, near the end", expires.Add(-5 * time.Minute), Skew{}, nil},
		{"ahead by 5 minutes, past the end", expires.Add(5 * time.Minute), Skew{Late: 5 * time.Minute}, nil},
		{"ahead by 6 hours, past the end", expires.Add(6 * time.Hour), Skew{Late: 6 * time.Hour}, nil},
		{"at the tolerance", expires.Add(ExpiryTolerance), Skew{Late: ExpiryTolerance}, nil},
		{"a second beyond the tolerance", expires.Add(ExpiryTolerance + time.Second), Skew{}, ErrExpired},
		{"ahead by 3 days, past the end", expires.Add(72 * time.Hour), Skew{}, ErrExpired},
	}
	for _, tc := range cases {
		skew, err := ValidateServerPEM(pem, id, tc.clock)
		if !errors.Is(err, tc.err) || (tc.err == nil && err != nil) || skew != tc.want {
			t.Errorf("%s: skew %+v, err %v; want %+v, %v", tc.name, skew, err, tc.want, tc.err)
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

// handshakeAt runs a full mutual-TLS handshake against cfg over an
// in-memory pipe, the client (the controller) checking the server
// certificate against its own clock, and returns the served certificate.
func handshakeAt(t *testing.T, cfg *tls.Config, ca *devpki.Authority, host string, clientClock time.Time) (*x509.Certificate, error) {
	t.Helper()
	client, err := ca.Client("controller")
	if err != nil {
		t.Fatal(err)
	}
	pair, err := tls.X509KeyPair(client.CertPEM, client.KeyPEM)
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	cc, sc := net.Pipe()
	defer cc.Close()
	defer sc.Close()
	deadline := time.Now().Add(10 * time.Second)
	cc.SetDeadline(deadline)
	sc.SetDeadline(deadline)
	server := tls.Server(sc, cfg)
	done := make(chan error, 1)
	go func() { done <- server.Handshake() }()
	conn := tls.Client(cc, &tls.Config{
		Certificates: []tls.Certificate{pair}, RootCAs: roots, ServerName: host,
		MinVersion: tls.VersionTLS12, Time: func() time.Time { return clientClock },
	})
	err = conn.Handshake()
	if err != nil {
		cc.Close()
		<-done
		return nil, err
	}
	if err := <-done; err != nil {
		return nil, err
	}
	return conn.ConnectionState().PeerCertificates[0], nil
}

// Nothing on the serving side looks at the server certificate's validity:
// the agent starts with, and goes on to serve, a certificate that is not
// valid yet by its own clock, and a controller whose clock is ahead
// connects through it.
func TestServerConfigServesCertificateNotValidYet(t *testing.T) {
	dir := t.TempDir()
	ca := mustCA(t)
	const id = "9d2b6e1c-4f3a-4c8e-8b7d-2a1e5f6c7d80"
	certFile, caFile := filepath.Join(dir, "server.pem"), filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, ca.PEM, 0o600); err != nil {
		t.Fatal(err)
	}
	ahead := 10 * time.Minute
	issue := func() devpki.Issued {
		c, err := ca.ServerValid(id, []string{id}, time.Now().Add(ahead-time.Minute), time.Now().Add(30*24*time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	first, second := issue(), issue()
	if err := fsutil.WriteFile(certFile, first.Combined(), 0o600); err != nil {
		t.Fatal(err)
	}
	cfg, err := ServerConfig(certFile, caFile, tls.VersionTLS12, zap.NewNop())
	if err != nil {
		t.Fatalf("start-up with a certificate not valid yet: %v", err)
	}
	controllerClock := time.Now().Add(ahead)
	for _, want := range []devpki.Issued{first, second} {
		if err := fsutil.WriteFile(certFile, want.Combined(), 0o600); err != nil {
			t.Fatal(err)
		}
		leaf, err := want.Leaf()
		if err != nil {
			t.Fatal(err)
		}
		got, err := handshakeAt(t, cfg, ca, id, controllerClock)
		if err != nil {
			t.Fatalf("handshake with the controller's clock %s ahead: %v", ahead, err)
		}
		if got.SerialNumber.Cmp(leaf.SerialNumber) != 0 {
			t.Fatalf("serving serial %s, want %s", got.SerialNumber, leaf.SerialNumber)
		}
	}
}

//go:build cloud

package cloud_test

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/certs/devpki"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/tiers/internal/cloud"
)

// tlsCert is one certificate the user keeps in the certificate store: its
// names (the first is the CN, all are DNS SANs) and, once stored, its
// reference and certificate.
type tlsCert struct {
	names []string
	ref   string
	leaf  *x509.Certificate
}

// storeCert writes a certificate as Octavia's local certificate manager
// reads it (octavia/certificates/manager/local.py): <ref>.crt, <ref>.key
// and <ref>.int (the chain) in [certificates] storage_path, owner-only
// as the manager writes them. A user of Barbican would upload the same
// PEMs and pass the container's reference.
func storeCert(t *testing.T, dir string, ca *devpki.Authority, c *tlsCert) {
	t.Helper()
	issued, err := ca.ServerValid(c.names[0], c.names, time.Time{}, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if c.leaf, err = issued.Leaf(); err != nil {
		t.Fatal(err)
	}
	id := make([]byte, 8)
	rand.Read(id)
	c.ref = "tls-" + hex.EncodeToString(id)
	for ext, data := range map[string][]byte{".crt": issued.CertPEM, ".key": issued.KeyPEM, ".int": ca.PEM} {
		if err := os.WriteFile(filepath.Join(dir, c.ref+ext), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// terminatedHTTPS: a TERMINATED_HTTPS listener whose default certificate
// and two SNI certificates come from Octavia's local certificate manager,
// on the HTTP listener's pool → a TLS handshake through the VIP gets the
// certificate whose CN or SAN (a wildcard too) matches the server name,
// the default one for an unknown name and for none; requests over TLS
// reach both members. The listener stays for the later scenarios
// (deletes removes it).
func (s *scene) terminatedHTTPS(t *testing.T, pool string) {
	ca, err := devpki.NewAuthority("cloud tier tenant CA")
	if err != nil {
		t.Fatal(err)
	}
	def := &tlsCert{names: []string{"default.example.com"}}
	www := &tlsCert{names: []string{"www.example.org", "alt.example.org"}}
	api := &tlsCert{names: []string{"api.example.net", "*.svc.example.net"}}
	for _, c := range []*tlsCert{def, www, api} {
		storeCert(t, filepath.Join(s.cp.Dir, "certstore"), ca, c)
	}
	var resp struct {
		Listener struct {
			ID string `json:"id"`
		} `json:"listener"`
	}
	s.change(t, "listener TERMINATED_HTTPS:443 with two SNI certificates", func() {
		body := map[string]any{"listener": map[string]any{"name": "l-tls", "protocol": "TERMINATED_HTTPS",
			"protocol_port": 443, "loadbalancer_id": s.lb.ID, "default_pool_id": pool,
			"default_tls_container_ref": def.ref, "sni_container_refs": []string{www.ref, api.ref}}}
		s.rest(t, "POST", "/v2/lbaas/listeners", body, &resp)
	})
	s.tls = &tlsListener{id: resp.Listener.ID, def: def, www: www, api: api, ca: ca.Cert}
	s.checkSNI(t)
	vip := net.JoinHostPort(s.lb.VIPAddress, "443")

	// Verified against the tenant's CA, as a client would.
	roots := x509.NewCertPool()
	roots.AddCert(ca.Cert)
	client := s.cp.NS.HTTPClient(false)
	client.Transport.(*http.Transport).TLSClientConfig = &tls.Config{ServerName: "api.example.net", RootCAs: roots}
	onlyFrom(t, "HTTPS as api.example.net", func() (string, error) {
		resp, err := client.Get("https://" + vip + "/")
		if err != nil {
			return "", err
		}
		resp.Body.Close()
		return resp.Header.Get("X-Member"), nil
	}, "member-1", "member-2")
}

// tlsListener is the TERMINATED_HTTPS listener terminatedHTTPS leaves
// in place (the failover checks it serves again; deletes removes it).
type tlsListener struct {
	id            string
	def, www, api *tlsCert
	ca            *x509.Certificate
}

// checkSNI waits for a TLS handshake through the VIP, then asserts that
// each server name gets the certificate whose CN or SAN (a wildcard too)
// matches it, the default one for an unknown name and for none, each
// with the CA from the local certificate manager's chain.
func (s *scene) checkSNI(t *testing.T) {
	t.Helper()
	vip := net.JoinHostPort(s.lb.VIPAddress, "443")
	cloud.WaitFor(t, 2*time.Minute, "a TLS handshake through the VIP", func() bool {
		_, err := s.tlsPeer(vip, "www.example.org")
		return err == nil
	})
	def, www, api := s.tls.def, s.tls.www, s.tls.api
	for _, c := range []struct {
		name string
		want *tlsCert
	}{
		{"www.example.org", www}, {"alt.example.org", www}, {"api.example.net", api},
		{"db.svc.example.net", api}, {"default.example.com", def}, {"unknown.example.com", def}, {"", def},
	} {
		chain, err := s.tlsPeer(vip, c.name)
		switch {
		case err != nil:
			t.Errorf("server name %q: %v", c.name, err)
		case !chain[0].Equal(c.want.leaf):
			t.Errorf("server name %q: got the certificate of %s %v, want %s %v", c.name,
				chain[0].Subject.CommonName, chain[0].DNSNames, c.want.leaf.Subject.CommonName, c.want.leaf.DNSNames)
		case len(chain) != 2 || !chain[1].Equal(s.tls.ca):
			// The chain the local certificate manager's .int holds.
			t.Errorf("server name %q: %d certificates presented, want the leaf and the CA from <ref>.int", c.name, len(chain))
		default:
			t.Logf("server name %q: certificate of %s", c.name, chain[0].Subject.CommonName)
		}
	}
}

// deleteTLS deletes the TERMINATED_HTTPS listener: port 443 closes.
func (s *scene) deleteTLS(t *testing.T) {
	vip := net.JoinHostPort(s.lb.VIPAddress, "443")
	s.change(t, "delete listener l-tls", func() {
		s.rest(t, "DELETE", "/v2/lbaas/listeners/"+s.tls.id, nil, nil)
	})
	cloud.WaitFor(t, time.Minute, "port 443 closed after the delete", func() bool {
		_, err := s.tlsPeer(vip, "www.example.org")
		return err != nil
	})
}

// tlsPeer makes a TLS handshake with addr from the controller's namespace
// sending serverName as SNI (none when empty) and returns the certificate
// the proxy presented, the leaf first. It does not verify them: which
// came is the test.
func (s *scene) tlsPeer(addr, serverName string) ([]*x509.Certificate, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	raw, err := s.cp.NS.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	conn := tls.Client(raw, &tls.Config{ServerName: serverName, InsecureSkipVerify: true})
	defer conn.Close()
	if err := conn.HandshakeContext(ctx); err != nil {
		return nil, err
	}
	return conn.ConnectionState().PeerCertificates, nil
}

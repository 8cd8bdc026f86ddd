package cloud

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"os"
	"path/filepath"
	"time"
)

// controllerPKI writes what an operator makes before deploying Octavia:
// a CA that Octavia's local_cert_generator signs amphora certificates
// with (ca.pem, ca.key), which also signs the controller's client
// certificate (client.pem: certificate then key) the amphorae check.
// One CA for both directions, as many deployments' docs allow. RSA, as
// Octavia's own scripts make them.
func controllerPKI(dir string) error {
	caKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "amphora-agent cloud tier CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(30 * 24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return err
	}
	clientKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	clientTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "octavia-controller"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(30 * 24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	clientDER, err := x509.CreateCertificate(rand.Reader, clientTmpl, ca, &clientKey.PublicKey, caKey)
	if err != nil {
		return err
	}
	block := func(typ string, der []byte) []byte { return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}) }
	files := map[string][]byte{
		"ca.pem":     block("CERTIFICATE", caDER),
		"ca.key":     block("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(caKey)),
		"client.pem": append(block("CERTIFICATE", clientDER), block("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(clientKey))...),
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			return err
		}
	}
	return nil
}

// ControllerTLS is what the worker presents and checks when it calls an
// amphora's agent: the controller's client certificate, the test's CA as
// the only root, and the amphora's id as the name its certificate must
// carry.
func (c *ControlPlane) ControllerTLS(amphoraID string) (*tls.Config, error) {
	client, err := tls.LoadX509KeyPair(c.path("certs", "client.pem"), c.path("certs", "client.pem"))
	if err != nil {
		return nil, err
	}
	caPEM, err := os.ReadFile(c.path("certs", "ca.pem"))
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("no certificate in %s", c.path("certs", "ca.pem"))
	}
	return &tls.Config{Certificates: []tls.Certificate{client}, RootCAs: roots, ServerName: amphoraID}, nil
}

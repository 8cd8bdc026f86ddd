// Package devpki issues throw-away certificates shaped like the ones the
// Octavia controller issues: a CA, a server certificate whose CN and DNS SAN
// are the amphora id, and a controller client certificate. It serves
// `make run` and the tests; production certificates come from the
// controller.
package devpki

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"time"
)

// Authority is a CA able to issue certificates.
type Authority struct {
	Cert *x509.Certificate
	Key  crypto.Signer
	PEM  []byte
}

// Issued is a certificate and its key in PEM.
type Issued struct {
	CertPEM []byte
	KeyPEM  []byte
}

// Combined is the certificate followed by its key: the layout of the
// agent's agent_server_cert file and of the controller's client_cert.
func (i Issued) Combined() []byte {
	return append(append([]byte{}, i.CertPEM...), i.KeyPEM...)
}

func newKey() (*ecdsa.PrivateKey, error) {
	return ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
}

func serial() (*big.Int, error) {
	return rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 120))
}

// NewAuthority creates a self-signed CA valid for ten years.
func NewAuthority(commonName string) (*Authority, error) {
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	sn, err := serial()
	if err != nil {
		return nil, err
	}
	tmpl := &x509.Certificate{
		SerialNumber:          sn,
		Subject:               pkix.Name{CommonName: commonName},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().AddDate(10, 0, 0),
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &Authority{Cert: cert, Key: key, PEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}, nil
}

// Server issues the amphora's server certificate: CN and DNS SAN are the
// amphora id (the controller verifies the hostname against it); extra IPs
// are added as IP SANs for convenience in local use.
func (a *Authority) Server(amphoraID string, ips ...net.IP) (Issued, error) {
	return a.issue(amphoraID, []string{amphoraID}, ips, x509.ExtKeyUsageServerAuth, time.Time{}, time.Time{})
}

// ServerValid issues a server certificate with the given names and
// validity, for tests of what a rotation must refuse.
func (a *Authority) ServerValid(commonName string, dnsNames []string, notBefore, notAfter time.Time) (Issued, error) {
	return a.issue(commonName, dnsNames, nil, x509.ExtKeyUsageServerAuth, notBefore, notAfter)
}

// Listener makes a CA and the certificate it signs for a TLS listener
// serving dnsName: what a user's certificate for a terminated HTTPS
// listener is, with the CA a client verifies it by.
func Listener(dnsName string) (*Authority, Issued, error) {
	ca, err := NewAuthority("listener CA")
	if err != nil {
		return nil, Issued{}, err
	}
	srv, err := ca.issue(dnsName, []string{dnsName}, nil, x509.ExtKeyUsageServerAuth, time.Time{}, time.Time{})
	return ca, srv, err
}

// Client issues a controller client certificate.
func (a *Authority) Client(commonName string) (Issued, error) {
	return a.issue(commonName, nil, nil, x509.ExtKeyUsageClientAuth, time.Time{}, time.Time{})
}

// issue signs a certificate; zero times mean valid from an hour ago for two
// years.
func (a *Authority) issue(cn string, dns []string, ips []net.IP, usage x509.ExtKeyUsage, notBefore, notAfter time.Time) (Issued, error) {
	if notBefore.IsZero() {
		notBefore = time.Now().Add(-time.Hour)
	}
	if notAfter.IsZero() {
		notAfter = time.Now().AddDate(2, 0, 0)
	}
	key, err := newKey()
	if err != nil {
		return Issued{}, err
	}
	sn, err := serial()
	if err != nil {
		return Issued{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: sn,
		Subject:      pkix.Name{CommonName: cn},
		DNSNames:     dns,
		IPAddresses:  ips,
		NotBefore:    notBefore,
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.Cert, key.Public(), a.Key)
	if err != nil {
		return Issued{}, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return Issued{}, err
	}
	return Issued{
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}

// Leaf parses the issued certificate.
func (i Issued) Leaf() (*x509.Certificate, error) {
	block, _ := pem.Decode(i.CertPEM)
	if block == nil {
		return nil, errors.New("no PEM block in the certificate")
	}
	return x509.ParseCertificate(block.Bytes)
}

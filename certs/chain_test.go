package certs

import (
	"bytes"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/asn1"
	"encoding/pem"
	"errors"
	"math/big"
	"testing"
	"time"

	"github.com/amphora-agent/amphora-agent/certs/devpki"
)

const chainAmphora = "9d2b6e1c-4f3a-4c8e-8b7d-2a1e5f6c7d80"

// controllerShaped issues what the controller's local certificate
// generator uploads: an RSA 2048 certificate with CN and DNS SAN = the
// amphora id, signed by an RSA CA, followed by its key in the traditional
// "RSA PRIVATE KEY" form.
func controllerShaped(t *testing.T, notBefore time.Time) []byte {
	t.Helper()
	caKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "server CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(1, 0, 0),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, caKey.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: chainAmphora}, DNSNames: []string{chainAmphora},
		NotBefore: notBefore, NotAfter: notBefore.Add(30 * 24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, key.Public(), caKey)
	if err != nil {
		t.Fatal(err)
	}
	return append(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)})...)
}

// filler is a self-signed certificate of exactly size bytes (DER), padded
// with a private extension. Ed25519 signatures have a fixed length, so
// the size follows the padding.
func filler(t *testing.T, key ed25519.PrivateKey, size int) []byte {
	t.Helper()
	pad := size / 2
	for range 8 {
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(3), Subject: pkix.Name{CommonName: "filler"},
			NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().AddDate(1, 0, 0),
			ExtraExtensions: []pkix.Extension{{Id: asn1.ObjectIdentifier{1, 3, 6, 1, 4, 1, 55555, 1}, Value: bytes.Repeat([]byte{'x'}, pad)}},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, key.Public(), key)
		if err != nil {
			t.Fatal(err)
		}
		if len(der) == size {
			return der
		}
		pad += size - len(der)
	}
	t.Fatalf("no filler certificate of %d bytes", size)
	return nil
}

// chainOf is leaf's certificate, then extra, then leaf's key.
func chainOf(leaf devpki.Issued, extra ...[]byte) []byte {
	out := append([]byte{}, leaf.CertPEM...)
	for _, der := range extra {
		out = append(out, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})...)
	}
	return append(out, leaf.KeyPEM...)
}

func chainBytes(chain [][]byte) int {
	n := 0
	for _, der := range chain {
		n += len(der)
	}
	return n
}

func leafDER(t *testing.T, leaf devpki.Issued) []byte {
	t.Helper()
	c, err := leaf.Leaf()
	if err != nil {
		t.Fatal(err)
	}
	return c.Raw
}

// A chain TLS cannot carry locks the controller out: its OpenSSL refuses a
// Certificate message over 100 KiB (300 copies of a certificate make
// 114 KB), so such a rotation is refused; so is one over the bounds, while
// the controller's own upload and chains at the bounds are accepted.
func TestValidateServerPEMBoundsTheChain(t *testing.T) {
	ca := mustCA(t)
	leaf := mustServer(t, ca, chainAmphora)
	leafSize := len(leafDER(t, leaf))
	copies := func(der []byte, n int) [][]byte {
		out := make([][]byte, n)
		for i := range out {
			out[i] = der
		}
		return out
	}
	_, fillerKey, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	// Fillers bring the chain to exactly MaxChainBytes in MaxChainCertificates.
	fillers := make([][]byte, MaxChainCertificates-1)
	left := MaxChainBytes - leafSize
	for i := range fillers {
		size := left / (len(fillers) - i)
		fillers[i] = filler(t, fillerKey, size)
		left -= size
	}
	if atBound, err := ParseKeyPair(chainOf(leaf, fillers...)); err != nil || len(atBound.Certificate) != MaxChainCertificates || chainBytes(atBound.Certificate) != MaxChainBytes {
		t.Fatalf("the chain at the bound is not: %v", err)
	}
	overByOne := append(append([][]byte{}, fillers[:len(fillers)-1]...), filler(t, fillerKey, len(fillers[len(fillers)-1])+1))
	cases := []struct {
		name string
		pem  []byte
		want error
	}{
		{"as the controller uploads it", controllerShaped(t, time.Now().Add(-time.Minute)), nil},
		{"the controller's, not valid yet by this clock", controllerShaped(t, time.Now().Add(6*time.Hour)), nil},
		{"a leaf and its CA", chainOf(leaf, ca.Cert.Raw), nil},
		{"300 copies", chainOf(leaf, copies(leafDER(t, leaf), 299)...), ErrChainSize},
		{"certificates at the bound", chainOf(leaf, copies(ca.Cert.Raw, MaxChainCertificates-1)...), nil},
		{"one certificate over the bound", chainOf(leaf, copies(ca.Cert.Raw, MaxChainCertificates)...), ErrChainSize},
		{"bytes at the bound", chainOf(leaf, fillers...), nil},
		{"one byte over the bound", chainOf(leaf, overByOne...), ErrChainSize},
		// Only the leaf is parsed on the way in; the handshake parses the
		// rest, as every client does.
		{"a chain certificate that does not parse", chainOf(leaf, []byte("not DER")), ErrHandshake},
	}
	for _, c := range cases {
		_, err := ValidateServerPEM(c.pem, chainAmphora, time.Now())
		if !errors.Is(err, c.want) || (c.want == nil && err != nil) {
			t.Errorf("%s: err = %v, want %v", c.name, err, c.want)
		}
	}
}

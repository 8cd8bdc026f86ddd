package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// ServerConfig builds a tls.Config for the agent's API. certFile holds the
// server certificate chain followed by its key (the controller's layout);
// caFile holds the CA that signs controller client certificates.
//
// Both files are checked on every handshake and re-parsed only when they
// changed, so PUT /1.0/certificate (or an operator replacing either file)
// takes effect on the next connection. If a changed file does not parse, the
// last good material keeps being served and the error is logged once.
func ServerConfig(certFile, caFile string, minVersion uint16, log *zap.Logger) (*tls.Config, error) {
	s := &source{certFile: certFile, caFile: caFile, minVersion: minVersion, log: log}
	if _, err := s.current(); err != nil {
		return nil, err
	}
	return &tls.Config{
		MinVersion: minVersion,
		// The real configuration is produced per handshake; this outer one
		// only needs to route there.
		GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
			return s.current()
		},
	}, nil
}

type fileStamp struct {
	ino   uint64
	size  int64
	mtime time.Time
}

func stampOf(path string) (fileStamp, error) {
	st, err := os.Stat(path)
	if err != nil {
		return fileStamp{}, err
	}
	fs := fileStamp{size: st.Size(), mtime: st.ModTime()}
	if sys, ok := st.Sys().(*syscall.Stat_t); ok {
		fs.ino = sys.Ino
	}
	return fs, nil
}

type source struct {
	certFile, caFile string
	minVersion       uint16
	log              *zap.Logger

	mu        sync.Mutex
	certStamp fileStamp
	caStamp   fileStamp
	cfg       *tls.Config
	lastErr   string
}

func (s *source) current() (*tls.Config, error) {
	certStamp, certErr := stampOf(s.certFile)
	caStamp, caErr := stampOf(s.caFile)

	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cfg != nil && certErr == nil && caErr == nil && certStamp == s.certStamp && caStamp == s.caStamp {
		return s.cfg, nil
	}
	cfg, err := s.load()
	if err == nil {
		s.cfg, s.certStamp, s.caStamp, s.lastErr = cfg, certStamp, caStamp, ""
		return cfg, nil
	}
	if s.cfg == nil {
		return nil, err
	}
	if err.Error() != s.lastErr {
		s.lastErr = err.Error()
		s.log.Error("TLS material changed but cannot be used; still serving the previous certificate", zap.Error(err))
	}
	return s.cfg, nil
}

func (s *source) load() (*tls.Config, error) {
	pemData, err := os.ReadFile(s.certFile)
	if err != nil {
		return nil, fmt.Errorf("server certificate: %w", err)
	}
	cert, err := ParseKeyPair(pemData)
	if err != nil {
		return nil, fmt.Errorf("server certificate %s: %w", s.certFile, err)
	}
	caData, err := os.ReadFile(s.caFile)
	if err != nil {
		return nil, fmt.Errorf("client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caData) {
		return nil, fmt.Errorf("client CA %s: no PEM certificate found", s.caFile)
	}
	return &tls.Config{
		MinVersion:   s.minVersion,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    pool,
	}, nil
}

// ParseKeyPair accepts the controller's single-PEM layout: one or more
// certificates and the private key of the first one. Anything else (no
// certificate, no key, a key that does not match) is an error.
func ParseKeyPair(pemData []byte) (tls.Certificate, error) {
	cert, err := tls.X509KeyPair(pemData, pemData)
	if err != nil {
		return tls.Certificate{}, err
	}
	if cert.Leaf == nil {
		leaf, err := x509.ParseCertificate(cert.Certificate[0])
		if err != nil {
			return tls.Certificate{}, err
		}
		cert.Leaf = leaf
	}
	return cert, nil
}

// Why ValidateServerPEM refuses an upload.
var (
	ErrNotKeyPair = errors.New("not a PEM certificate with its matching private key")
	ErrExpired    = errors.New("the certificate has expired")
	ErrNeverValid = errors.New("the certificate is never valid")
	ErrWrongName  = errors.New("the certificate is not issued to this amphora")
	ErrChainSize  = errors.New("the certificate chain is too large for TLS clients")
	ErrHandshake  = errors.New("a TLS handshake with the certificate fails")
)

// Bounds on the chain a rotation may carry. A TLS server sends its whole
// chain in one handshake message, and clients refuse large ones: the
// controller's OpenSSL stops at 100 KiB (its default max_cert_list), and
// Go and other clients have had a 64 KiB cap. The controller sends one
// certificate of about 0.8 KB (RSA 2048, from Octavia's local generator),
// so ten certificates and 32 KiB leave a chain with intermediates ample
// room while staying far from every client's limit.
const (
	MaxChainCertificates = 10
	MaxChainBytes        = 32 << 10 // DER, the size on the wire
)

// handshakeTimeout bounds the in-memory handshake of a rotation check; it
// takes milliseconds, the margin is for a loaded machine.
const handshakeTimeout = 10 * time.Second

// ExpiryTolerance is how long past its NotAfter, by the amphora's clock, a
// rotated certificate is still accepted. The controller issues a fresh
// certificate (valid 30 days by default) and checks it with its own clock;
// an amphora whose clock runs ahead of the controller's may see it expired
// when it is not. Only a certificate expired by more than any plausible
// skew is certain to lock the controller out.
const ExpiryTolerance = 24 * time.Hour

// Skew says how far outside its validity period a certificate that
// ValidateServerPEM accepted lies on the amphora's clock. At most one is
// non-zero; both are zero for a certificate valid now.
type Skew struct {
	Early time.Duration // NotBefore is this far after now
	Late  time.Duration // NotAfter is this far before now (at most ExpiryTolerance)
}

// ValidateServerPEM checks a rotated server certificate before it replaces
// the one in use, and refuses only what is certain to lock the controller
// out: no matching key, a chain over MaxChainCertificates or
// MaxChainBytes, a certificate not naming amphoraID (the host name the
// controller checks: it issues CN and DNS SAN = amphora id), one expired
// by more than ExpiryTolerance at now, or a pair a TLS handshake fails
// with. An empty amphoraID (no amphora_id configured) skips the name
// check.
//
// A certificate not valid yet at now is accepted: the controller stamps
// NotBefore with its own clock and uploads at once, so an amphora whose
// clock lags sees every rotation as early. The returned Skew says by how
// much, for the caller to log.
func ValidateServerPEM(pemData []byte, amphoraID string, now time.Time) (Skew, error) {
	cert, err := ParseKeyPair(pemData)
	if err != nil {
		return Skew{}, fmt.Errorf("%w: %v", ErrNotKeyPair, err)
	}
	if err := checkChainSize(cert.Certificate); err != nil {
		return Skew{}, err
	}
	leaf := cert.Leaf
	if leaf.NotAfter.Before(leaf.NotBefore) {
		return Skew{}, fmt.Errorf("%w: valid from %s until %s", ErrNeverValid, stamp(leaf.NotBefore), stamp(leaf.NotAfter))
	}
	var skew Skew
	switch {
	case now.Before(leaf.NotBefore):
		skew.Early = leaf.NotBefore.Sub(now)
	case now.After(leaf.NotAfter):
		skew.Late = now.Sub(leaf.NotAfter)
		if skew.Late > ExpiryTolerance {
			return Skew{}, fmt.Errorf("%w: valid until %s, %s before this amphora's clock (tolerance %s)",
				ErrExpired, stamp(leaf.NotAfter), skew.Late.Round(time.Second), ExpiryTolerance)
		}
	}
	if amphoraID != "" && !namesHost(leaf, amphoraID) {
		return Skew{}, fmt.Errorf("%w %s: names %s", ErrWrongName, amphoraID, certNames(leaf))
	}
	for _, version := range []uint16{tls.VersionTLS12, tls.VersionTLS13} {
		if err := selfHandshake(cert, amphoraID, version); err != nil {
			return Skew{}, fmt.Errorf("%w (%s): %v", ErrHandshake, tls.VersionName(version), err)
		}
	}
	return skew, nil
}

func checkChainSize(chain [][]byte) error {
	if len(chain) > MaxChainCertificates {
		return fmt.Errorf("%w: %d certificates, at most %d are accepted", ErrChainSize, len(chain), MaxChainCertificates)
	}
	total := 0
	for _, der := range chain {
		total += len(der)
	}
	if total > MaxChainBytes {
		return fmt.Errorf("%w: %d bytes of certificates (DER), at most %d are accepted", ErrChainSize, total, MaxChainBytes)
	}
	return nil
}

// selfHandshake runs a TLS handshake of the given version over an
// in-memory pipe with cert on the server side, so a pair no client can
// complete a handshake with (a chain certificate that does not parse, a
// key TLS cannot sign with) is refused before it replaces the one in use.
// The client does not verify the chain: the agent does not hold the CA
// the controller trusts its certificates by (agent_server_ca signs the
// controller's certificates, not the amphora's), and validity times are
// ValidateServerPEM's to judge, with its tolerance of clock skew. Parsing
// every certificate and checking the key's signature are done all the
// same.
func selfHandshake(cert tls.Certificate, serverName string, version uint16) error {
	clientEnd, serverEnd := net.Pipe()
	defer clientEnd.Close()
	defer serverEnd.Close()
	deadline := time.Now().Add(handshakeTimeout)
	clientEnd.SetDeadline(deadline)
	serverEnd.SetDeadline(deadline)
	server := tls.Server(serverEnd, &tls.Config{
		Certificates: []tls.Certificate{cert}, MinVersion: version, MaxVersion: version,
		SessionTicketsDisabled: true, // nothing would read them off the pipe
	})
	served := make(chan error, 1)
	go func() { served <- server.Handshake() }()
	client := tls.Client(clientEnd, &tls.Config{
		ServerName: serverName, MinVersion: version, MaxVersion: version,
		InsecureSkipVerify: true, // see above: the chain is not the agent's to verify
	})
	err := client.Handshake()
	// Closing the client's end ends a server blocked on it.
	clientEnd.Close()
	serverErr := <-served
	if err != nil {
		return err
	}
	return serverErr
}

func stamp(t time.Time) string { return t.UTC().Format(time.RFC3339) }

// namesHost reports whether a TLS client checking host would accept leaf,
// as the controller's Python client does: the DNS names when there are
// any, otherwise the common name.
func namesHost(leaf *x509.Certificate, host string) bool {
	if len(leaf.DNSNames) > 0 {
		return leaf.VerifyHostname(host) == nil
	}
	return strings.EqualFold(leaf.Subject.CommonName, host)
}

func certNames(leaf *x509.Certificate) string {
	names := append([]string{"CN=" + leaf.Subject.CommonName}, leaf.DNSNames...)
	return strings.Join(names, ", ")
}

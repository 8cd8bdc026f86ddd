package certs

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/amphora-agent/amphora-agent/agent/etag"
	"github.com/amphora-agent/amphora-agent/agent/fault"
	"github.com/amphora-agent/amphora-agent/agent/fsutil"
)

// Store keeps the listeners' certificates and crt-lists under
// base_cert_dir/<lb_id>/<filename>.
type Store struct {
	Dir string
}

// filenamePattern is upstream's check, a search rather than a full match:
// "x.pem", "<uuid>.pem" and "<sha1>.pem" pass, "test.bla" does not.
var filenamePattern = regexp.MustCompile(`(\w.)+pem`)

// MaxFilenameLen bounds certificate filenames: the atomic write's
// temporary name (".<name>.tmp-<digits>") must still fit the file
// system's 255 bytes. The controller's names are 40 to 44 bytes.
const MaxFilenameLen = 200

// ValidateFilename applies upstream's rule and, beyond it, refuses names
// that would leave the load balancer's folder or that no file system
// takes.
func ValidateFilename(name string) error {
	if !filenamePattern.MatchString(name) || strings.ContainsAny(name, "/\x00") || name == "." || name == ".." {
		return fault.Invalid("Filename has wrong format")
	}
	if len(name) > MaxFilenameLen {
		return fault.Invalid("Filename has wrong format", fmt.Sprintf("the filename is longer than %d bytes", MaxFilenameLen))
	}
	return nil
}

func (s Store) path(lb, name string, validID func(string) error) (string, error) {
	if err := ValidateFilename(name); err != nil {
		return "", err
	}
	if err := validID(lb); err != nil {
		return "", fault.Invalid("Invalid request", err.Error())
	}
	return filepath.Join(s.Dir, lb, name), nil
}

// Put stores a certificate (0600) and returns its md5. The load balancer
// need not exist yet: the controller uploads certificates first.
func (s Store) Put(lb, name string, body []byte, validID func(string) error) (string, error) {
	p, err := s.path(lb, name, validID)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return "", fault.Internalf("creating %s: %w", filepath.Dir(p), err)
	}
	if err := fsutil.WriteFile(p, body, 0o600); err != nil {
		return "", fault.Internalf("writing %s: %w", p, err)
	}
	return etag.MD5(body), nil
}

// MD5 returns the md5 of a stored certificate.
func (s Store) MD5(lb, name string, validID func(string) error) (string, error) {
	p, err := s.path(lb, name, validID)
	if err != nil {
		return "", err
	}
	data, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return "", fault.NotFound("Certificate Not Found", "No certificate with filename: "+name)
	}
	if err != nil {
		return "", fault.Internalf("reading %s: %w", p, err)
	}
	return etag.MD5(data), nil
}

// Delete removes a stored certificate; a missing one is not an error.
func (s Store) Delete(lb, name string, validID func(string) error) error {
	p, err := s.path(lb, name, validID)
	if err != nil {
		return err
	}
	switch err := os.Remove(p); {
	case errors.Is(err, os.ErrNotExist):
		return nil
	case err != nil:
		return fault.Internalf("removing %s: %w", p, err)
	}
	return fsutil.SyncDir(filepath.Dir(p))
}

// RemoveAll deletes every certificate of lb.
func (s Store) RemoveAll(lb string, validID func(string) error) error {
	if err := validID(lb); err != nil {
		return nil
	}
	if err := os.RemoveAll(filepath.Join(s.Dir, lb)); err != nil {
		return fmt.Errorf("removing certificates of %s: %w", lb, err)
	}
	return nil
}

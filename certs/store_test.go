package certs

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/amphora-agent/amphora-agent/agent/fault"
)

func anyID(string) error { return nil }

func TestValidateFilename(t *testing.T) {
	for name, ok := range map[string]bool{
		"x.pem": true, "6f0e3a0c-2b1f-4d8e-9a57-3c1f0b7e2d11.pem": true,
		"da39a3ee5e6b4b0d3255bfef95601890afd80709.pem": true,
		"test.bla": false, "pem": false, "..": false, "a/b.pem": false, "": false,
	} {
		err := ValidateFilename(name)
		if (err == nil) != ok {
			t.Errorf("%q: %v", name, err)
		}
		if err != nil {
			if fe, _ := fault.As(err); fe.Message != "Filename has wrong format" || fe.HasDetails {
				t.Errorf("%q: body %+v", name, fe)
			}
		}
	}
}

func TestStore(t *testing.T) {
	s := Store{Dir: filepath.Join(t.TempDir(), "certs")}
	body := []byte("-----BEGIN CERTIFICATE-----\n")
	sum, err := s.Put("lb1", "x.pem", body, anyID)
	if err != nil || sum != "c03c900eb26f80d40a9693abcee273fa" {
		t.Fatalf("Put = %s, %v", sum, err)
	}
	st, err := os.Stat(filepath.Join(s.Dir, "lb1", "x.pem"))
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("stored file: %v %v", st, err)
	}
	if got, err := s.MD5("lb1", "x.pem", anyID); err != nil || got != sum {
		t.Fatalf("MD5 = %s, %v", got, err)
	}
	if err := s.Delete("lb1", "x.pem", anyID); err != nil {
		t.Fatal(err)
	}
	_, err = s.MD5("lb1", "x.pem", anyID)
	if fe, ok := fault.As(err); !ok || fe.Kind != fault.KindNotFound || fe.Message != "Certificate Not Found" || fe.Details != "No certificate with filename: x.pem" {
		t.Fatalf("MD5 after delete: %v", err)
	}
	// Deleting what is not there (even the LB's folder) succeeds.
	if err := s.Delete("lb1", "x.pem", anyID); err != nil {
		t.Fatal(err)
	}
	if err := s.Delete("never-seen", "y.pem", anyID); err != nil {
		t.Fatal(err)
	}
	// An id the caller rejects never reaches the disk.
	refuse := func(string) error { return errors.New("bad id") }
	if _, err := s.Put("..", "x.pem", body, refuse); err == nil {
		t.Fatal("unsafe id accepted")
	}
}

package certs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
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

// A name no file system takes is a 400 on every method, not the 500 of a
// failed create; the longest accepted name still stores.
func TestLongFilename(t *testing.T) {
	s := Store{Dir: filepath.Join(t.TempDir(), "certs")}
	longest := strings.Repeat("a", MaxFilenameLen-4) + ".pem"
	if _, err := s.Put("lb1", longest, []byte("pem"), anyID); err != nil {
		t.Fatalf("%d-byte name: %v", len(longest), err)
	}
	long := strings.Repeat("a", 300) + ".pem"
	_, putErr := s.Put("lb1", long, []byte("pem"), anyID)
	_, md5Err := s.MD5("lb1", long, anyID)
	delErr := s.Delete("lb1", long, anyID)
	for i, err := range []error{putErr, md5Err, delErr} {
		fe, ok := fault.As(err)
		if !ok || fe.Kind != fault.KindInvalid || fe.Message != "Filename has wrong format" || !strings.Contains(fe.Details, "longer than") {
			t.Errorf("method %d: %v", i, err)
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

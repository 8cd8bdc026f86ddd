package etag

import "testing"

func TestMD5(t *testing.T) {
	// RFC 1321's test suite value for "abc".
	if got, want := MD5([]byte("abc")), "900150983cd24fb0d6963f7d28e17f72"; got != want {
		t.Fatalf("MD5(abc) = %s, want %s", got, want)
	}
}

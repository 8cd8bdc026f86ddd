package haproxy

import "testing"

// sameAs reports an input where a fast function and the reference it
// replaces disagree.
func sameAs[T any](t *testing.T, name string, in []byte, got, want func([]byte) T, equal func(T, T) bool) {
	t.Helper()
	if g, w := got(in), want(in); !equal(g, w) {
		t.Errorf("%s(%q) = %q, want %q", name, in, any(g), any(w))
	}
}

// fuzzSameAs fuzzes a fast function against its reference from seeds.
func fuzzSameAs[T any](f *testing.F, name string, seeds []string, got, want func([]byte) T, equal func(T, T) bool) {
	for _, in := range seeds {
		f.Add([]byte(in))
	}
	f.Fuzz(func(t *testing.T, in []byte) { sameAs(t, name, in, got, want, equal) })
}

package pidfile

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
)

func TestAlive(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	self := strconv.Itoa(os.Getpid())
	cases := []struct {
		name, path string
		want       bool
	}{
		{"own pid", write("a.pid", self+"\n"), true},
		{"own pid, spaces and more lines", write("b.pid", " "+self+" \n123\n"), true},
		{"garbage", write("c.pid", "abc\n"), false},
		{"zero", write("d.pid", "0\n"), false},
		{"no such process", write("e.pid", "2147483646\n"), false},
		{"missing file", filepath.Join(dir, "none.pid"), false},
	}
	for _, c := range cases {
		if got := Alive("/proc", c.path); got != c.want {
			t.Errorf("%s: Alive = %v, want %v", c.name, got, c.want)
		}
	}
}

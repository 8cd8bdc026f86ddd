package keepalived

import (
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
)

func TestListenersAndRunning(t *testing.T) {
	base := t.TempDir()
	l := LVSLayout{Base: base}
	if ids, err := l.Listeners(); err != nil || ids != nil {
		t.Fatalf("no lvs dir: %v, %v", ids, err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(base, "lvs", "check"), 0o755))
	for _, n := range []string{"octavia-keepalivedlvs-b2.conf", "octavia-keepalivedlvs-a1.conf", "octavia-keepalivedlvs-a1.pid", "other.conf"} {
		must(os.WriteFile(filepath.Join(base, "lvs", n), []byte(strconv.Itoa(os.Getpid())), 0o644))
	}
	ids, err := l.Listeners()
	must(err)
	if !reflect.DeepEqual(ids, []string{"a1", "b2"}) {
		t.Fatalf("Listeners = %v", ids)
	}
	if !l.Running("a1") || l.Running("b2") {
		t.Fatalf("Running: a1=%v b2=%v, want true false", l.Running("a1"), l.Running("b2"))
	}
}

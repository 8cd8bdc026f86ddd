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

func TestStatus(t *testing.T) {
	base := t.TempDir()
	l := LVSLayout{Base: base}
	if err := os.MkdirAll(l.Dir(), 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, content string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(l.Dir(), name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	self := strconv.Itoa(os.Getpid())
	write("octavia-keepalivedlvs-active.conf", "virtual_server_group x {\n}\nvirtual_server group x {\n}\n")
	write("octavia-keepalivedlvs-active.pid", self)
	write("octavia-keepalivedlvs-empty.conf", "global_defs {\n}\n")
	write("octavia-keepalivedlvs-empty.pid", self)
	write("octavia-keepalivedlvs-stopped.conf", "virtual_server group x {\n}\n")
	write("octavia-keepalivedlvs-dead.conf", "virtual_server group x {\n}\n")
	write("octavia-keepalivedlvs-dead.pid", "2147483646")
	for id, want := range map[string]string{"active": StatusActive, "empty": StatusOffline, "stopped": StatusOffline, "dead": StatusError} {
		if got := l.Status(id); got != want {
			t.Errorf("Status(%s) = %s, want %s", id, got, want)
		}
	}
}

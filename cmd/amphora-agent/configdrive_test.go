package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// drive lays out a config drive as Nova writes it.
func drive(t *testing.T, meta string, contents map[string]string) string {
	t.Helper()
	mnt := t.TempDir()
	must := func(err error) {
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(mnt, "openstack", "latest"), 0o755))
	must(os.WriteFile(filepath.Join(mnt, "openstack", "latest", "meta_data.json"), []byte(meta), 0o644))
	for p, c := range contents {
		must(os.MkdirAll(filepath.Dir(filepath.Join(mnt, "openstack", p)), 0o755))
		must(os.WriteFile(filepath.Join(mnt, "openstack", p), []byte(c), 0o644))
	}
	return mnt
}

const novaMeta = `{"uuid": "11111111-2222-3333-4444-555555555555", "name": "amphora-x",
 "files": [{"path": "/etc/octavia/amphora-agent.conf", "content_path": "/content/0000"},
           {"path": "/etc/octavia/certs/server.pem", "content_path": "/content/0001"}]}`

func TestConfigDriveWritesFilesOncePerInstance(t *testing.T) {
	mnt := drive(t, novaMeta, map[string]string{"/content/0000": "[DEFAULT]\n", "/content/0001": "PEM"})
	root := t.TempDir()
	written, err := applyConfigDrive(mnt, root, configDriveStamp)
	if err != nil || len(written) != 2 {
		t.Fatalf("written %v, %v", written, err)
	}
	conf := filepath.Join(root, "etc/octavia/amphora-agent.conf")
	if data, _ := os.ReadFile(conf); string(data) != "[DEFAULT]\n" {
		t.Fatalf("conf %q", data)
	}
	if st, _ := os.Stat(filepath.Join(root, "etc/octavia/certs/server.pem")); st == nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("certificate mode %v", st)
	}
	// The controller changes the file later (PUT /1.0/config); a reboot
	// must not put the drive's version back.
	os.WriteFile(conf, []byte("[DEFAULT]\ndebug = True\n"), 0o600)
	if written, err := applyConfigDrive(mnt, root, configDriveStamp); err != nil || len(written) != 0 {
		t.Fatalf("second boot wrote %v, %v", written, err)
	}
	if data, _ := os.ReadFile(conf); !strings.Contains(string(data), "debug") {
		t.Fatal("a reboot reverted the controller's change")
	}
}

func TestConfigDriveRefusesPathsOutside(t *testing.T) {
	for _, meta := range []string{
		`{"files": [{"path": "etc/octavia/x", "content_path": "/content/0000"}]}`,
		`{"files": [{"path": "/etc/octavia/../../x", "content_path": "/content/0000"}]}`,
		`{"files": [{"path": "/etc/octavia/x", "content_path": "/../../../etc/shadow"}]}`,
		`{"files": [{"path": "/", "content_path": "/content/0000"}]}`,
		`not json`,
	} {
		mnt := drive(t, meta, map[string]string{"/content/0000": "x"})
		root := t.TempDir()
		if written, err := applyConfigDrive(mnt, root, configDriveStamp); err == nil || len(written) != 0 {
			t.Errorf("%s: written %v, %v", meta, written, err)
		}
		entries, _ := os.ReadDir(root)
		if len(entries) != 0 {
			t.Errorf("%s: something was written", meta)
		}
	}
}

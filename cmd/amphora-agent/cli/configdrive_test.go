package cli

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
	"time"
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

// fileTree lists what is under root (path, type, mode, content) to
// compare a root before and after a refused drive.
func fileTree(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		st, err := os.Lstat(p)
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s %v", strings.TrimPrefix(p, root), st.Mode())
		if st.Mode().IsRegular() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			fmt.Fprintf(&b, " %q", data)
		}
		b.WriteString("\n")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// hostileMeta lists the agent's configuration first (a good file, which a
// writer that is not all-or-nothing writes before it fails) and then the
// given files.
func hostileMeta(files ...string) string {
	return `{"uuid": "11111111-2222-3333-4444-555555555555", "files": [
	 {"path": "/etc/octavia/amphora-agent.conf", "content_path": "/content/good"}` + strings.Join(append([]string{""}, files...), ",\n") + `]}`
}

// hostileDrive is a config drive (meta_data.json and what setup adds to
// the drive or the root) that must be refused with err.
type hostileDrive struct {
	name  string
	meta  string
	setup func(mnt, root string)
	err   string
}

// TestConfigDriveRefusesHostileDrives: a drive that would hang the boot,
// copy a file of the amphora into a target, use unbounded memory, or
// fail half-way is refused before anything is written: the root is as it
// was, and no stamp marks the instance done.
func TestConfigDriveRefusesHostileDrives(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(secret, []byte("root:secret-hash:"), 0o600); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	sparse := func(p string, size int64) {
		t.Helper()
		must(os.MkdirAll(filepath.Dir(p), 0o755))
		must(os.WriteFile(p, nil, 0o644))
		must(os.Truncate(p, size))
	}
	manyFiles := func(name, err string, n int, size int64) hostileDrive {
		var list []string
		for i := range n {
			list = append(list, fmt.Sprintf(`{"path": "/etc/octavia/f%d", "content_path": "/content/f%d"}`, i, i))
		}
		return hostileDrive{name, hostileMeta(list...), func(mnt, root string) {
			for i := range n {
				sparse(filepath.Join(mnt, "openstack", "content", fmt.Sprintf("f%d", i)), size)
			}
		}, err}
	}
	second := `{"path": "/etc/octavia/certs/server.pem", "content_path": "/content/0001"}`
	cases := []hostileDrive{
		{"content is a FIFO", hostileMeta(second), func(mnt, root string) {
			must(syscall.Mkfifo(filepath.Join(mnt, "openstack", "content", "0001"), 0o644))
		}, "not a regular file"},
		{"meta_data.json is a FIFO", "", func(mnt, root string) {
			p := filepath.Join(mnt, "openstack", "latest", "meta_data.json")
			must(os.Remove(p))
			must(syscall.Mkfifo(p, 0o644))
		}, "not a regular file"},
		{"content is a link to a file of the amphora", hostileMeta(second), func(mnt, root string) {
			must(os.Symlink(secret, filepath.Join(mnt, "openstack", "content", "0001")))
		}, "symbolic link"},
		{"content is under a link to a folder of the amphora", hostileMeta(`{"path": "/etc/octavia/certs/server.pem", "content_path": "/linked/shadow"}`), func(mnt, root string) {
			must(os.Symlink(filepath.Dir(secret), filepath.Join(mnt, "openstack", "linked")))
		}, "symbolic link"},
		{"meta_data.json is a link", "", func(mnt, root string) {
			p := filepath.Join(mnt, "openstack", "latest", "meta_data.json")
			must(os.Rename(p, p+".real"))
			must(os.Symlink("meta_data.json.real", p))
		}, "symbolic link"},
		{"content of 16 MiB", hostileMeta(second), func(mnt, root string) {
			sparse(filepath.Join(mnt, "openstack", "content", "0001"), 16<<20)
		}, "larger than"},
		{"content one byte over the size cap", hostileMeta(second), func(mnt, root string) {
			sparse(filepath.Join(mnt, "openstack", "content", "0001"), maxDriveFile+1)
		}, "larger than"},
		manyFiles("files over the total cap", "together", maxDriveTotal/maxDriveFile, maxDriveFile),
		manyFiles("more files than the cap", "more than", maxDriveFiles, 1),
		{"NUL in a target", hostileMeta(`{"path": "/etc/octavia/a\u0000b", "content_path": "/content/good"}`), nil, "NUL"},
		{"NUL in a content path", hostileMeta(`{"path": "/etc/octavia/x", "content_path": "/content/go\u0000od"}`), nil, "NUL"},
		{"a name longer than NAME_MAX", hostileMeta(`{"path": "/etc/octavia/` + strings.Repeat("n", 256) + `", "content_path": "/content/good"}`), nil, "longer than"},
		{"a directory as target", hostileMeta(`{"path": "/etc/octavia/certs", "content_path": "/content/good"}`), func(mnt, root string) {
			must(os.MkdirAll(filepath.Join(root, "etc", "octavia", "certs"), 0o755))
		}, "not a regular file"},
		{"a file where a folder must be", hostileMeta(`{"path": "/etc/octavia/amphora-agent.conf.d/x", "content_path": "/content/good"}`), func(mnt, root string) {
			must(os.WriteFile(filepath.Join(root, "etc", "octavia", "amphora-agent.conf.d"), nil, 0o644))
		}, "not a directory"},
		{"a target inside another", hostileMeta(`{"path": "/etc/octavia/amphora-agent.conf/x", "content_path": "/content/good"}`), nil, "inside it"},
		{"a target twice", hostileMeta(`{"path": "/etc/octavia/amphora-agent.conf", "content_path": "/content/good"}`), nil, "twice"},
		// Checks pass; staging fails (the temporary name is too long): what
		// was staged and the folders made are removed.
		{"a failure while writing", hostileMeta(`{"path": "/var/lib/new/` + strings.Repeat("n", 250) + `", "content_path": "/content/good"}`), nil, "name too long"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			meta := c.meta
			if meta == "" {
				meta = hostileMeta()
			}
			mnt := drive(t, meta, map[string]string{"/content/good": "[DEFAULT]\n"})
			root := t.TempDir()
			must(os.MkdirAll(filepath.Join(root, "etc", "octavia"), 0o755))
			must(os.WriteFile(filepath.Join(root, "etc", "octavia", "amphora-agent.conf"), []byte("old\n"), 0o600))
			if c.setup != nil {
				c.setup(mnt, root)
			}
			before := fileTree(t, root)
			written, err := applyBounded(t, mnt, root)
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("error %v, want one saying %q", err, c.err)
			}
			if len(written) != 0 {
				t.Errorf("written %v", written)
			}
			if after := fileTree(t, root); after != before {
				t.Errorf("the root changed:\nbefore\n%s\nafter\n%s", before, after)
			}
		})
	}
}

// applyBounded runs applyConfigDrive with a deadline: a writer that
// blocks on the drive fails the test instead of hanging it. FIFOs of the
// drive are opened for writing then, which lets a blocked reader go on.
func applyBounded(t *testing.T, mnt, root string) ([]string, error) {
	t.Helper()
	type result struct {
		written []string
		err     error
	}
	done := make(chan result, 1)
	go func() {
		w, err := applyConfigDrive(mnt, root, configDriveStamp)
		done <- result{w, err}
	}()
	select {
	case r := <-done:
		return r.written, r.err
	case <-time.After(20 * time.Second):
	}
	filepath.WalkDir(mnt, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type()&fs.ModeNamedPipe != 0 {
			if f, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
				f.Close()
			}
		}
		return nil
	})
	<-done
	t.Fatal("the config-drive writer blocked for 20 s")
	return nil, nil
}

// TestConfigDriveMemoryBounded: files far over the cap are refused from
// their size, before they are read: a drive of 16 MiB files does not
// grow the writer by their size.
func TestConfigDriveMemoryBounded(t *testing.T) {
	const n, size = 8, 16 << 20
	var list []string
	contents := map[string]string{}
	for i := range n {
		list = append(list, fmt.Sprintf(`{"path": "/etc/octavia/big%d", "content_path": "/content/big%d"}`, i, i))
		contents[fmt.Sprintf("/content/big%d", i)] = ""
	}
	mnt := drive(t, `{"files": [`+strings.Join(list, ",")+`]}`, contents)
	for i := range n {
		if err := os.Truncate(filepath.Join(mnt, "openstack", "content", fmt.Sprintf("big%d", i)), size); err != nil {
			t.Fatal(err)
		}
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := applyConfigDrive(mnt, t.TempDir(), configDriveStamp)
	runtime.ReadMemStats(&after)
	if err == nil {
		t.Error("a drive of 16 MiB files was accepted")
	}
	if grew := after.TotalAlloc - before.TotalAlloc; grew > 4<<20 {
		t.Errorf("the writer allocated %d MiB for a drive it refuses", grew>>20)
	}
}

// TestConfigDriveUnitHasStartTimeout: the agent's unit waits for the
// config-drive unit, so that one must not be able to wait forever (a
// oneshot has no start timeout unless given one). The timeout leaves room
// for udev's settle wait.
func TestConfigDriveUnitHasStartTimeout(t *testing.T) {
	data, err := os.ReadFile("../packaging/systemd/amphora-config-drive.service")
	if err != nil {
		t.Fatal(err)
	}
	var timeout time.Duration
	for line := range strings.Lines(string(data)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "TimeoutStartSec="); ok {
			if timeout, err = time.ParseDuration(v); err != nil {
				t.Fatalf("TimeoutStartSec=%s: %v", v, err)
			}
		}
	}
	if timeout < 3*configDriveWait || timeout > 5*time.Minute {
		t.Errorf("TimeoutStartSec is %v, want a bound between %v and 5m", timeout, 3*configDriveWait)
	}
}

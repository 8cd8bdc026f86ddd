package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/amphora-agent/amphora-agent/agent/fsutil"
	"github.com/amphora-agent/amphora-agent/agent/procgroup"
)

// The config drive is how Nova hands an instance the files the controller
// wants on it (amphora-agent.conf, the server certificate, the client
// CA): an ISO 9660 disk labelled config-2 whose openstack/latest/
// meta_data.json lists each file's target path and where its content is.
// Upstream's image reads it with cloud-init; the agent reads it itself,
// once per instance, before it starts.
const (
	configDriveDevice = "/dev/disk/by-label/config-2"
	// configDriveStamp records the instance whose files were written:
	// later boots keep what PUT /1.0/config and /1.0/certificate changed.
	configDriveStamp = "/var/lib/octavia/config-drive-instance"
	configDriveWait  = 10 * time.Second
	maxDriveFile     = 16 << 20
)

type driveMetadata struct {
	UUID  string `json:"uuid"`
	Files []struct {
		Path        string `json:"path"`
		ContentPath string `json:"content_path"`
	} `json:"files"`
}

func runConfigDrive(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("config-drive", flag.ContinueOnError)
	fs.SetOutput(stderr)
	device := fs.String("device", configDriveDevice, "the config drive")
	stamp := fs.String("stamp", configDriveStamp, "file recording the instance already applied")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if _, err := os.Stat(*device); err != nil {
		// Early in boot udev may not have named the disk yet: once its
		// queue is empty, a missing link means there is no config drive
		// (an image booted without one does not wait on every boot).
		ctx, cancel := context.WithTimeout(context.Background(), configDriveWait+time.Second)
		procgroup.Run(procgroup.Command(ctx, "udevadm", "settle", "--timeout="+strconv.Itoa(int(configDriveWait.Seconds()))), nil)
		cancel()
		if _, err := os.Stat(*device); err != nil {
			fmt.Fprintf(stdout, "no config drive (%s): nothing to apply\n", *device)
			return 0
		}
	}
	// /run: early in boot /tmp may not be mounted yet.
	mnt, err := os.MkdirTemp("/run", "config-drive-")
	if err != nil {
		fmt.Fprintln(stderr, "config-drive:", err)
		return 1
	}
	defer os.Remove(mnt)
	if err := syscall.Mount(*device, mnt, "iso9660", syscall.MS_RDONLY|syscall.MS_NOSUID|syscall.MS_NODEV|syscall.MS_NOEXEC, ""); err != nil {
		fmt.Fprintf(stderr, "config-drive: mounting %s: %v\n", *device, err)
		return 1
	}
	defer syscall.Unmount(mnt, 0)
	written, err := applyConfigDrive(mnt, "/", *stamp)
	for _, p := range written {
		fmt.Fprintln(stdout, "wrote", p)
	}
	if err != nil {
		fmt.Fprintln(stderr, "config-drive:", err)
		return 1
	}
	return 0
}

// applyConfigDrive writes the files listed by the drive mounted at mnt
// under root ("/" on an amphora), unless stamp says this instance's files
// were written already. Every file is checked before the first is written.
func applyConfigDrive(mnt, root, stamp string) ([]string, error) {
	data, err := os.ReadFile(filepath.Join(mnt, "openstack", "latest", "meta_data.json"))
	if err != nil {
		return nil, fmt.Errorf("reading the metadata: %w", err)
	}
	var md driveMetadata
	if err := json.Unmarshal(data, &md); err != nil {
		return nil, fmt.Errorf("meta_data.json: %w", err)
	}
	stampPath := filepath.Join(root, stamp)
	if done, err := os.ReadFile(stampPath); err == nil && md.UUID != "" && strings.TrimSpace(string(done)) == md.UUID {
		return nil, nil
	}
	type file struct {
		target string
		data   []byte
	}
	var files []file
	for _, f := range md.Files {
		target, err := drivePath(f.Path)
		if err != nil {
			return nil, err
		}
		src, err := drivePath(f.ContentPath)
		if err != nil {
			return nil, err
		}
		content, err := readBounded(filepath.Join(mnt, "openstack", src))
		if err != nil {
			return nil, fmt.Errorf("content of %s: %w", f.Path, err)
		}
		files = append(files, file{filepath.Join(root, target), content})
	}
	var written []string
	for _, f := range files {
		if err := os.MkdirAll(filepath.Dir(f.target), 0o755); err != nil {
			return written, err
		}
		// Configuration, keys and certificates alike: only root reads them.
		if err := fsutil.WriteFile(f.target, f.data, 0o600); err != nil {
			return written, err
		}
		written = append(written, f.target)
	}
	if md.UUID != "" {
		if err := os.MkdirAll(filepath.Dir(stampPath), 0o755); err != nil {
			return written, err
		}
		if err := fsutil.WriteFile(stampPath, []byte(md.UUID+"\n"), 0o644); err != nil {
			return written, err
		}
	}
	return written, nil
}

// drivePath accepts an absolute, clean path (no "..", no repeated or
// trailing slashes) and returns it.
func drivePath(p string) (string, error) {
	if !strings.HasPrefix(p, "/") || path.Clean(p) != p || p == "/" {
		return "", fmt.Errorf("config drive path %q is not a clean absolute path", p)
	}
	return p, nil
}

func readBounded(p string) ([]byte, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxDriveFile+1))
	if err == nil && len(data) > maxDriveFile {
		err = errors.New("larger than 16 MiB")
	}
	return data, err
}

package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/amphora-agent/amphora-agent/agent/fsutil"
	"github.com/amphora-agent/amphora-agent/agent/procgroup"
	"github.com/amphora-agent/amphora-agent/cmd/amphora-agent/internal/cmdline"
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
)

// What a config drive may ask for, far above what Octavia puts on it
// (amphora-agent.conf, rsyslog's 10-rsyslog.conf, server.pem and
// client_ca.pem: four files of a few KiB; Nova's default quotas allow
// five files of 10 KiB). Everything is held in memory before the first
// write, so these also bound the writer's memory.
const (
	maxDriveFiles    = 64
	maxDriveFile     = 1 << 20
	maxDriveTotal    = 8 << 20
	maxDriveMetadata = 4 << 20
	// The kernel's PATH_MAX (less its NUL) and NAME_MAX: checked before
	// anything is written rather than failing part-way.
	maxDrivePath = 4095
	maxDriveName = 255
)

type driveMetadata struct {
	UUID  string `json:"uuid"`
	Files []struct {
		Path        string `json:"path"`
		ContentPath string `json:"content_path"`
	} `json:"files"`
}

func runConfigDrive(args []string, stdout, stderr io.Writer) int {
	fs := cmdline.New("amphora-agent config-drive", "usage: amphora-agent config-drive [--device PATH] [--stamp PATH]", Version, stdout, stderr)
	device := fs.String("device", configDriveDevice, "the config drive")
	stamp := fs.String("stamp", configDriveStamp, "file recording the instance already applied")
	if code, exit := fs.Parse(args); exit {
		return code
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
// were written already. It writes all of them or none: every path is
// checked and every content read before the first write, and the files
// are staged beside their targets before the first one is put in place.
func applyConfigDrive(mnt, root, stamp string) ([]string, error) {
	data, err := readDriveFile(mnt, "openstack/latest/meta_data.json", maxDriveMetadata)
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
	files, err := readDriveFiles(mnt, root, md)
	if err != nil {
		return nil, err
	}
	if md.UUID != "" {
		files = append(files, driveFile{stampPath, []byte(md.UUID + "\n"), 0o644})
	}
	dirs, err := missingDirs(files)
	if err != nil {
		return nil, err
	}
	if err := writeDriveFiles(dirs, files); err != nil {
		return nil, err
	}
	var written []string
	for _, f := range files {
		if f.target != stampPath {
			written = append(written, f.target)
		}
	}
	return written, nil
}

// driveFile is one file to write: its path under the root, its content
// and mode.
type driveFile struct {
	target string
	data   []byte
	perm   os.FileMode
}

// readDriveFiles checks every file the metadata lists and reads its
// content, within the bounds above.
func readDriveFiles(mnt, root string, md driveMetadata) ([]driveFile, error) {
	if len(md.Files) > maxDriveFiles {
		return nil, fmt.Errorf("the config drive lists %d files, more than %d", len(md.Files), maxDriveFiles)
	}
	var (
		files []driveFile
		total int
		seen  = map[string]bool{}
	)
	for _, f := range md.Files {
		target, err := drivePath(f.Path)
		if err != nil {
			return nil, err
		}
		src, err := drivePath(f.ContentPath)
		if err != nil {
			return nil, err
		}
		if seen[target] {
			return nil, fmt.Errorf("config drive lists %s twice", target)
		}
		seen[target] = true
		content, err := readDriveFile(mnt, "openstack"+src, maxDriveFile)
		if err != nil {
			return nil, fmt.Errorf("content of %s: %w", f.Path, err)
		}
		if total += len(content); total > maxDriveTotal {
			return nil, fmt.Errorf("the config drive's files are larger than %d bytes together", maxDriveTotal)
		}
		// Configuration, keys and certificates alike: only root reads them.
		files = append(files, driveFile{filepath.Join(root, target), content, 0o600})
	}
	for t := range seen {
		for d := path.Dir(t); d != "/"; d = path.Dir(d) {
			if seen[d] {
				return nil, fmt.Errorf("config drive lists %s, and %s inside it", d, t)
			}
		}
	}
	return files, nil
}

// missingDirs checks that each file can be written where it goes (no
// directory in its place, nothing but directories above it) and returns
// the directories to create, each after its parent.
func missingDirs(files []driveFile) ([]string, error) {
	missing := map[string]bool{}
	for _, f := range files {
		for d := filepath.Dir(f.target); !missing[d]; d = filepath.Dir(d) {
			st, err := os.Stat(d)
			if errors.Is(err, os.ErrNotExist) {
				missing[d] = true
				continue
			}
			if err != nil {
				return nil, err
			}
			if !st.IsDir() {
				return nil, fmt.Errorf("cannot write %s: %s is not a directory", f.target, d)
			}
			break
		}
		// A link in the target's place is replaced, not followed.
		if st, err := os.Lstat(f.target); err == nil && !st.Mode().IsRegular() && st.Mode()&os.ModeSymlink == 0 {
			return nil, fmt.Errorf("%s exists and is not a regular file (%s)", f.target, st.Mode().Type())
		} else if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	// A parent's path is a prefix of its children's: sorted, it comes first.
	return slices.Sorted(maps.Keys(missing)), nil
}

// writeDriveFiles creates dirs, stages every file and then puts them all
// in place. A failure before the first rename removes what it made. A
// rename into a checked directory over a checked target does not fail in
// practice; if one did, the files before it stay written and the error
// says so.
func writeDriveFiles(dirs []string, files []driveFile) (err error) {
	var (
		made   []string
		staged []*fsutil.Staged
	)
	defer func() {
		if err == nil {
			return
		}
		for _, s := range staged {
			s.Discard()
		}
		for _, d := range slices.Backward(made) {
			os.Remove(d)
		}
	}()
	for _, d := range dirs {
		if err := os.Mkdir(d, 0o755); err != nil {
			return err
		}
		made = append(made, d)
	}
	for _, f := range files {
		s, err := fsutil.Stage(f.target, f.data, f.perm, fsutil.DataOnly)
		if err != nil {
			return fmt.Errorf("writing %s: %w", f.target, err)
		}
		staged = append(staged, s)
	}
	syncDirs := map[string]bool{}
	for i, s := range staged {
		if err := s.Commit(); err != nil {
			// Those before it are in place: keep them, and their folders.
			staged, made = staged[i:], nil
			return fmt.Errorf("putting %s in place after %d other files: %w", files[i].target, i, err)
		}
		syncDirs[filepath.Dir(files[i].target)] = true
	}
	staged = nil
	for _, d := range dirs {
		syncDirs[filepath.Dir(d)] = true
	}
	for d := range syncDirs {
		if err := fsutil.SyncDir(d); err != nil {
			return err
		}
	}
	return nil
}

// drivePath accepts an absolute, clean path (no "..", no repeated or
// trailing slashes) that the kernel can take (no NUL, within PATH_MAX and
// NAME_MAX) and returns it.
func drivePath(p string) (string, error) {
	if !strings.HasPrefix(p, "/") || path.Clean(p) != p || p == "/" {
		return "", fmt.Errorf("config drive path %q is not a clean absolute path", p)
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("config drive path %q contains a NUL", p)
	}
	if len(p) > maxDrivePath {
		return "", fmt.Errorf("config drive path %.40q... is longer than %d bytes", p, maxDrivePath)
	}
	for name := range strings.SplitSeq(p[1:], "/") {
		if len(name) > maxDriveName {
			return "", fmt.Errorf("config drive path %.40q... has a name longer than %d bytes", p, maxDriveName)
		}
	}
	return p, nil
}

// readDriveFile reads the regular file rel (slash-separated, relative,
// clean) below dir, refusing it when larger than limit. No symbolic link
// is followed on the way (a link on the drive could name any file of the
// amphora), and a FIFO or device is refused without waiting on it: the
// file is opened non-blocking and checked with fstat before any read.
func readDriveFile(dir, rel string, limit int) ([]byte, error) {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: dir, Err: err}
	}
	names := strings.Split(rel, "/")
	for i, name := range names {
		flags := unix.O_RDONLY | unix.O_NOFOLLOW | unix.O_CLOEXEC
		if i < len(names)-1 {
			flags |= unix.O_DIRECTORY
		} else {
			flags |= unix.O_NONBLOCK
		}
		next, err := unix.Openat(fd, name, flags, 0)
		if err != nil {
			// A link is refused with ELOOP, or ENOTDIR where a folder is
			// opened: say which.
			var st unix.Stat_t
			isLink := unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) == nil && st.Mode&unix.S_IFMT == unix.S_IFLNK
			unix.Close(fd)
			at := filepath.Join(dir, filepath.Join(names[:i+1]...))
			if isLink {
				return nil, fmt.Errorf("%s is a symbolic link", at)
			}
			return nil, &os.PathError{Op: "open", Path: at, Err: err}
		}
		unix.Close(fd)
		fd = next
	}
	f := os.NewFile(uintptr(fd), filepath.Join(dir, rel))
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file (%s)", f.Name(), st.Mode().Type())
	}
	if st.Size() > int64(limit) {
		return nil, fmt.Errorf("%s is larger than %d bytes", f.Name(), limit)
	}
	data, err := io.ReadAll(io.LimitReader(f, int64(limit)+1))
	if err == nil && len(data) > limit {
		err = fmt.Errorf("%s is larger than %d bytes", f.Name(), limit)
	}
	return data, err
}

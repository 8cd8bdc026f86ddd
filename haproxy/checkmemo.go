package haproxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"io/fs"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
)

// checkMemo remembers, per load balancer, the fingerprint of the stored
// config that last passed `haproxy -c`, so that the reload right after an
// upload does not run the same check again (it costs as much as HAProxy's
// own reload). The memory is this process's only: after a restart every
// config is checked again.
type checkMemo struct {
	mu sync.Mutex
	m  map[string]string
}

func (c *checkMemo) get(lb string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[lb]
}

func (c *checkMemo) set(lb, fp string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if fp == "" {
		delete(c.m, lb)
		return
	}
	if c.m == nil {
		c.m = map[string]string{}
	}
	c.m[lb] = fp
}

// CheckStored validates lb's stored config as a reload loads it. The check
// is skipped when the config is byte for byte one that passed the check
// in this process with the same HAProxy binary, user/group file, peer name
// and every file the config names (see fingerprint); skipped reports that.
func (s *Store) CheckStored(ctx context.Context, lb, peer string) (out string, skipped bool, err error) {
	path := s.Layout.ConfigPath(lb)
	cfg, err := os.ReadFile(path)
	if err != nil {
		return err.Error(), false, err
	}
	fp := s.fingerprint(cfg, peer)
	if fp != "" && fp == s.memo.get(lb) {
		return "", true, nil
	}
	out, err = s.check(ctx, lb, path, peer)
	if err != nil {
		fp = ""
	}
	s.memo.set(lb, fp)
	return out, false, err
}

// fingerprint identifies everything `haproxy -c` of cfg depends on: cfg
// itself, the peer name, the user/group file's content, the HAProxy binary
// (path, size, modification and change times, inode) and every absolute
// path the config names (certificates, CA and CRL files, crt-lists and the
// files they name, error files, sockets...), by the same identity, with
// the entries of named folders. It is "" (never skip) when the config
// loads Lua, whose scripts may read anything.
func (s *Store) fingerprint(cfg []byte, peer string) string {
	if bytes.Contains(cfg, []byte("lua-")) {
		return ""
	}
	bin, err := exec.LookPath(s.HAProxyCmd)
	if err != nil {
		return ""
	}
	h := sha256.New()
	fmt.Fprintf(h, "peer %q\n", peer)
	h.Write(cfg)
	ug, err := os.ReadFile(s.UserGroupFile)
	if err != nil {
		return ""
	}
	fmt.Fprintf(h, "\nuser-group %x\n", sha256.Sum256(ug))
	fileIdentity(h, bin)
	seen := map[string]bool{}
	for _, p := range absPaths(cfg) {
		pathIdentity(h, p, seen, 1)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// absPaths lists the tokens of data that are absolute paths, quotes and a
// trailing comma stripped.
func absPaths(data []byte) []string {
	var paths []string
	for _, tok := range strings.Fields(string(data)) {
		tok = strings.TrimRight(strings.Trim(tok, `"'`), ",")
		if strings.HasPrefix(tok, "/") {
			paths = append(paths, tok)
		}
	}
	return paths
}

// pathIdentity writes p's identity; a small regular file's absolute paths
// (a crt-list names certificates) are followed depth levels deep.
func pathIdentity(h hash.Hash, p string, seen map[string]bool, depth int) {
	if seen[p] {
		return
	}
	seen[p] = true
	fi := fileIdentity(h, p)
	switch {
	case fi == nil:
	case fi.IsDir():
		entries, _ := os.ReadDir(p)
		for _, e := range entries {
			fileIdentity(h, p+"/"+e.Name())
		}
	case fi.Mode().IsRegular() && depth > 0 && fi.Size() <= 1<<20:
		if data, err := os.ReadFile(p); err == nil {
			for _, q := range absPaths(data) {
				pathIdentity(h, q, seen, depth-1)
			}
		}
	}
}

// fileIdentity writes what changes whenever p is replaced or written to:
// type, size, inode, modification and change times (none for sockets and
// devices, whose times move on their own). It returns p's info, nil when
// p is missing.
func fileIdentity(h hash.Hash, p string) fs.FileInfo {
	fi, err := os.Stat(p)
	if err != nil {
		fmt.Fprintf(h, "%q missing\n", p)
		return nil
	}
	if !fi.Mode().IsRegular() && !fi.IsDir() {
		fmt.Fprintf(h, "%q %v\n", p, fi.Mode().Type())
		return fi
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	if st == nil {
		fmt.Fprintf(h, "%q %v %d %d\n", p, fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
		return fi
	}
	fmt.Fprintf(h, "%q %v %d %d:%d %d.%d %d.%d\n", p, fi.Mode(), st.Size, st.Dev, st.Ino,
		st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
	return fi
}

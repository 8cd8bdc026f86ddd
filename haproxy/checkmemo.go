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
	"unicode"
	"unicode/utf8"
)

// checkMemo remembers, per load balancer, the stored config that last
// passed `haproxy -c` and the fingerprint of what the check depended on,
// so that the reload right after an upload does not run the same check
// again (it costs as much as HAProxy's own reload). The memory is this
// process's only: after a restart every config is checked again.
type checkMemo struct {
	mu sync.Mutex
	m  map[string]*checked
}

// checked is a config that passed the check, what it names, and the
// fingerprint of everything else the check read (see fingerprint).
type checked struct {
	cfg   []byte
	paths []string // absPaths(cfg)
	// lists are the regular files the config names, each with its identity
	// when read and the paths it names: one whose identity has not changed
	// is not read and parsed again (the servers-state file is as large as
	// the config).
	lists map[string]pathList
	fp    string
}

type pathList struct {
	identity string
	paths    []string
}

func (c *checkMemo) get(lb string) *checked {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[lb]
}

func (c *checkMemo) set(lb string, rec *checked) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rec == nil {
		delete(c.m, lb)
		return
	}
	if c.m == nil {
		c.m = map[string]*checked{}
	}
	c.m[lb] = rec
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
	prev := s.memo.get(lb)
	rec := s.fingerprint(cfg, peer, prev)
	if rec != nil && prev != nil && bytes.Equal(cfg, prev.cfg) && rec.fp == prev.fp {
		return "", true, nil
	}
	out, err = s.check(ctx, lb, path, peer)
	if err != nil {
		rec = nil
	}
	s.memo.set(lb, rec)
	return out, false, err
}

// fingerprint identifies everything `haproxy -c` of cfg depends on besides
// cfg itself: the peer name, the user/group file's content, the HAProxy
// binary (path, size, modification and change times, inode) and every
// absolute path the config names (certificates, CA and CRL files,
// crt-lists and the files they name, error files, sockets...), by the
// same identity, with the entries of named folders. What prev already
// knows of the same config and of unchanged files is not parsed again.
// It is nil (never skip) when the config loads Lua, whose scripts may
// read anything.
func (s *Store) fingerprint(cfg []byte, peer string, prev *checked) *checked {
	if bytes.Contains(cfg, []byte("lua-")) {
		return nil
	}
	bin, err := exec.LookPath(s.HAProxyCmd)
	if err != nil {
		return nil
	}
	ug, err := os.ReadFile(s.UserGroupFile)
	if err != nil {
		return nil
	}
	rec := &checked{cfg: cfg, lists: map[string]pathList{}}
	if prev != nil && bytes.Equal(cfg, prev.cfg) {
		rec.paths = prev.paths
	} else {
		rec.paths = absPaths(cfg)
	}
	h := sha256.New()
	fmt.Fprintf(h, "peer %q\nuser-group %x\n", peer, sha256.Sum256(ug))
	_, id := fileIdentity(bin)
	h.Write([]byte(id))
	seen := map[string]bool{}
	for _, p := range rec.paths {
		rec.pathIdentity(h, p, seen, 1, prev)
	}
	rec.fp = hex.EncodeToString(h.Sum(nil))
	return rec
}

// absPaths lists the tokens of data (split at white space as
// strings.Fields does) that are absolute paths, quotes and a trailing
// comma stripped. Only tokens holding a '/' are looked at: the config's
// server lines are most of it.
func absPaths(data []byte) []string {
	var paths []string
	for i := 0; i < len(data); {
		k := bytes.IndexByte(data[i:], '/')
		if k < 0 {
			break
		}
		slash := i + k
		start := slash
		for start > 0 && (data[start-1] == '"' || data[start-1] == '\'') {
			start--
		}
		end := slash + 1
		for end < len(data) {
			r, n := rune(data[end]), 1
			if r >= utf8.RuneSelf {
				r, n = utf8.DecodeRune(data[end:])
			}
			if unicode.IsSpace(r) {
				break
			}
			end += n
		}
		i = end
		if start > 0 {
			if r, _ := utf8.DecodeLastRune(data[:start]); !unicode.IsSpace(r) {
				continue // the token starts before: not a path
			}
		}
		tok := strings.TrimRight(strings.Trim(string(data[start:end]), `"'`), ",")
		if strings.HasPrefix(tok, "/") {
			paths = append(paths, tok)
		}
	}
	return paths
}

// pathIdentity writes p's identity; a small regular file's absolute paths
// (a crt-list names certificates) are followed depth levels deep. A file
// prev read with the same identity is not read again.
func (rec *checked) pathIdentity(h hash.Hash, p string, seen map[string]bool, depth int, prev *checked) {
	if seen[p] {
		return
	}
	seen[p] = true
	fi, id := fileIdentity(p)
	h.Write([]byte(id))
	switch {
	case fi == nil:
	case fi.IsDir():
		entries, _ := os.ReadDir(p)
		for _, e := range entries {
			_, id := fileIdentity(p + "/" + e.Name())
			h.Write([]byte(id))
		}
	case fi.Mode().IsRegular() && depth > 0 && fi.Size() <= 1<<20:
		l, ok := pathList{}, false
		if prev != nil {
			l, ok = prev.lists[p]
			ok = ok && l.identity == id
		}
		if !ok {
			data, err := os.ReadFile(p)
			if err != nil {
				return
			}
			l = pathList{identity: id, paths: absPaths(data)}
		}
		rec.lists[p] = l
		for _, q := range l.paths {
			rec.pathIdentity(h, q, seen, depth-1, prev)
		}
	}
}

// fileIdentity is what changes whenever p is replaced or written to:
// type, size, inode, modification and change times (none for sockets and
// devices, whose times move on their own). It returns p's info too, nil
// when p is missing.
func fileIdentity(p string) (fs.FileInfo, string) {
	fi, err := os.Stat(p)
	if err != nil {
		return nil, fmt.Sprintf("%q missing\n", p)
	}
	if !fi.Mode().IsRegular() && !fi.IsDir() {
		return fi, fmt.Sprintf("%q %v\n", p, fi.Mode().Type())
	}
	st, _ := fi.Sys().(*syscall.Stat_t)
	if st == nil {
		return fi, fmt.Sprintf("%q %v %d %d\n", p, fi.Mode(), fi.Size(), fi.ModTime().UnixNano())
	}
	return fi, fmt.Sprintf("%q %v %d %d:%d %d.%d %d.%d\n", p, fi.Mode(), st.Size, st.Dev, st.Ino,
		st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
}

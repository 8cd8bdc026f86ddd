package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// frontPageMaxLines keeps README.md a page a newcomer reads in five
// minutes; the details live beside the code they describe.
const frontPageMaxLines = 300

// skipDirs are never documentation of the repository: git's own folder
// and what builds and make run leave behind (see .gitignore).
var skipDirs = map[string]bool{".git": true, "bin": true, ".state": true, "__pycache__": true}

// outsideRef is a path outside the repository that documents once pointed
// at; the repository must stand on its own. Built from two parts so that
// this file does not hold it.
var outsideRef = ".." + "/shared"

// TestFrontPageIsShort fails when README.md grows past frontPageMaxLines.
func TestFrontPageIsShort(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repoRoot(t), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := lineCount(data); n > frontPageMaxLines {
		t.Errorf("README.md has %d lines, more than %d: move the details beside the code they describe and link to them", n, frontPageMaxLines)
	}
}

// TestMarkdownLinksResolve fails for a relative link in any .md file whose
// file or folder does not exist, lies outside the repository, or names a
// heading (#anchor) the target Markdown file does not have.
func TestMarkdownLinksResolve(t *testing.T) {
	root := repoRoot(t)
	docs := map[string][]byte{}
	walkRepo(t, root, func(path string, data []byte) {
		if strings.HasSuffix(path, ".md") {
			docs[path] = data
		}
	})
	if len(docs) == 0 {
		t.Fatal("found no Markdown file")
	}
	anchors := map[string]map[string]bool{}
	anchorsOf := func(path string) map[string]bool {
		if a, ok := anchors[path]; ok {
			return a
		}
		data, ok := docs[path]
		if !ok {
			var err error
			if data, err = os.ReadFile(path); err != nil {
				return nil
			}
		}
		anchors[path] = headingAnchors(data)
		return anchors[path]
	}
	for path, data := range docs {
		rel, _ := filepath.Rel(root, path)
		for _, l := range markdownLinks(data) {
			if err := checkLink(root, path, l.target, anchorsOf); err != nil {
				t.Errorf("%s:%d: link %q: %v", rel, l.line, l.target, err)
			}
		}
	}
}

// TestNoReferenceOutsideRepository fails when a text file of the
// repository mentions outsideRef.
func TestNoReferenceOutsideRepository(t *testing.T) {
	walkRepo(t, repoRoot(t), func(path string, data []byte) {
		if i := bytes.Index(data, []byte(outsideRef)); i >= 0 {
			t.Errorf("%s:%d refers to %s, which is not part of the repository", path, lineCount(data[:i])+1, outsideRef)
		}
	})
}

// repoRoot is the folder holding go.mod, found by going up from the
// test's working directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's folder")
		}
		dir = parent
	}
}

// walkRepo calls fn with every regular text file under root (a file with
// a NUL byte is binary), skipping skipDirs and never following symlinks.
func walkRepo(t *testing.T, root string, fn func(path string, data []byte)) {
	t.Helper()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && skipDirs[d.Name()] {
				return filepath.SkipDir
			}
			return nil
		}
		if !d.Type().IsRegular() {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if bytes.IndexByte(data, 0) >= 0 {
			return nil
		}
		fn(path, data)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func lineCount(data []byte) int {
	n := bytes.Count(data, []byte("\n"))
	if len(data) > 0 && data[len(data)-1] != '\n' {
		n++
	}
	return n
}

type mdLink struct {
	line   int
	target string
}

var (
	// inlineLink is [text](target) and ![alt](target); the target may
	// carry a title after a space.
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*(<[^>]*>|[^)\s]*)[^)]*\)`)
	// refLink is a reference definition: [label]: target
	refLink   = regexp.MustCompile(`^\s{0,3}\[[^\]]+\]:\s*(<[^>]*>|\S+)`)
	codeSpan  = regexp.MustCompile("`+[^`]*`+")
	fenceLine = regexp.MustCompile("^\\s{0,3}(```|~~~)")
)

// markdownLinks lists the link targets of a Markdown document, leaving out
// fenced code blocks and code spans, where brackets are only text.
func markdownLinks(data []byte) []mdLink {
	var links []mdLink
	inFence := false
	for i, line := range strings.Split(string(data), "\n") {
		if fenceLine.MatchString(line) {
			inFence = !inFence
			continue
		}
		if inFence {
			continue
		}
		line = codeSpan.ReplaceAllString(line, "")
		for _, m := range inlineLink.FindAllStringSubmatch(line, -1) {
			links = append(links, mdLink{i + 1, strings.Trim(m[1], "<>")})
		}
		if m := refLink.FindStringSubmatch(line); m != nil {
			links = append(links, mdLink{i + 1, strings.Trim(m[1], "<>")})
		}
	}
	return links
}

// checkLink resolves target relative to the document at from. Links to
// the web and mail are not checked; an anchor is checked when it points
// into a Markdown file.
func checkLink(root, from, target string, anchorsOf func(string) map[string]bool) error {
	if target == "" {
		return errors.New("empty target")
	}
	if u, err := url.Parse(target); err == nil && u.Scheme != "" {
		return nil // http:, https:, mailto: and the like
	}
	path, anchor, _ := strings.Cut(target, "#")
	dest := from
	if path != "" {
		p, err := url.PathUnescape(path)
		if err != nil {
			return err
		}
		if filepath.IsAbs(p) {
			return errors.New("absolute path: links must be relative")
		}
		dest = filepath.Join(filepath.Dir(from), filepath.FromSlash(p))
		if rel, err := filepath.Rel(root, dest); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
			return errors.New("points outside the repository")
		}
		if _, err := os.Stat(dest); err != nil {
			return fmt.Errorf("no such file or folder: %s", dest)
		}
	}
	if anchor == "" || !strings.HasSuffix(dest, ".md") {
		return nil
	}
	if a := anchorsOf(dest); !a[anchor] {
		return fmt.Errorf("%s has no heading with the anchor #%s", filepath.Base(dest), anchor)
	}
	return nil
}

var (
	headingLine = regexp.MustCompile(`^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$`)
	textOfLink  = regexp.MustCompile(`!?\[([^\]]*)\]\([^)]*\)`)
)

// headingAnchors lists the anchors of a Markdown document's headings as
// GitHub makes them: the heading's text, lower case, with punctuation
// dropped and spaces turned into hyphens; a repeated one gets -1, -2, ...
func headingAnchors(data []byte) map[string]bool {
	anchors := map[string]bool{}
	seen := map[string]int{}
	inFence := false
	for _, line := range strings.Split(string(data), "\n") {
		if fenceLine.MatchString(line) {
			inFence = !inFence
			continue
		}
		m := headingLine.FindStringSubmatch(line)
		if inFence || m == nil {
			continue
		}
		slug := slugOf(m[1])
		if n := seen[slug]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	return anchors
}

func slugOf(heading string) string {
	text := textOfLink.ReplaceAllString(heading, "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(text) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

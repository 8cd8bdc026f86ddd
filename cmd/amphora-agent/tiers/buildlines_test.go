package tiers_test

import (
	"bufio"
	"bytes"
	"fmt"
	"go/build/constraint"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"testing"
)

// The layering test checks the import graph under every tag set a file of
// the module builds with, read from the //go:build lines rather than from
// a list kept by hand: a tier added under a new tag is checked from its
// first commit. Each tier's package has one tag and no build line joins
// tags with ||, so the sets are "no tag" and each tag alone; a file that
// none of them builds (tags joined with && or ||, say) fails
// TestBuildLines, since no set would show its imports.

// tagSets is "" (no tag) and each build tag of the tree alone.
func tagSets(t *testing.T) []string {
	t.Helper()
	tags, _ := checkBuildLines(readBuildLines(t, moduleRoot(t)))
	return append([]string{""}, tags...)
}

// TestBuildLines fails for a build line that joins tags with || and for a
// file that no tag set of the layering test builds.
func TestBuildLines(t *testing.T) {
	lines := readBuildLines(t, moduleRoot(t))
	tags, problems := checkBuildLines(lines)
	for _, p := range problems {
		t.Error(p)
	}
	if len(tags) == 0 {
		t.Fatalf("no build tag in %d build lines: each tier's package has one", len(lines))
	}
	t.Logf("%d build lines; the layering test's tag sets: no tag, %s", len(lines), strings.Join(tags, ", "))
}

// TestBuildLineChecks runs the checker on made-up build lines, so that a
// checker that never reports anything fails here.
func TestBuildLineChecks(t *testing.T) {
	cases := []struct {
		name     string
		lines    []string
		tags     []string
		problems []string
	}{
		{name: "one tag each", lines: []string{"system", "vm", "system"}, tags: []string{"system", "vm"}},
		{name: "the platform is no tier", lines: []string{"linux && amd64", "!system"}, tags: []string{"system"}},
		{
			name:     "or",
			lines:    []string{"interop || vm"},
			tags:     []string{"interop", "vm"},
			problems: []string{"x.go:1: //go:build interop || vm: joins tags with ||: a file belongs to one tier, under one tag"},
		},
		{
			name:     "and",
			lines:    []string{"system && soak", "system"},
			tags:     []string{"soak", "system"},
			problems: []string{"x.go:1: //go:build system && soak: built under no tag set the layering test checks (no tag, or one of soak, system alone), so its imports go unchecked"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var lines []buildLine
			for _, l := range c.lines {
				expr, err := constraint.Parse("//go:build " + l)
				if err != nil {
					t.Fatal(err)
				}
				lines = append(lines, buildLine{file: "x.go", line: len(lines) + 1, expr: expr})
			}
			tags, problems := checkBuildLines(lines)
			if strings.Join(tags, " ") != strings.Join(c.tags, " ") {
				t.Errorf("tags %q, want %q", tags, c.tags)
			}
			if strings.Join(problems, "\n") != strings.Join(c.problems, "\n") {
				t.Errorf("problems\n%s\nwant\n%s", strings.Join(problems, "\n"), strings.Join(c.problems, "\n"))
			}
		})
	}
}

// buildLine is one file's //go:build constraint; line numbers the made-up
// ones of TestBuildLineChecks.
type buildLine struct {
	file string
	line int
	expr constraint.Expr
}

// checkBuildLines returns the build tags of lines, sorted (the
// platform's own, linux or go1.22, are no tier's), and what is wrong with
// them: a || between tags, a file that neither no tag nor any one tag
// builds.
func checkBuildLines(lines []buildLine) (tags, problems []string) {
	seen := map[string]bool{}
	for _, l := range lines {
		if hasOr(l.expr) {
			problems = append(problems, fmt.Sprintf("%s:%d: //go:build %s: joins tags with ||: a file belongs to one tier, under one tag", l.file, l.line, l.expr))
		}
		for _, tag := range tagsOf(l.expr) {
			if !platformTag(tag) && !seen[tag] {
				seen[tag] = true
				tags = append(tags, tag)
			}
		}
	}
	sort.Strings(tags)
	sets := append([]string{""}, tags...)
	for _, l := range lines {
		built := false
		for _, set := range sets {
			built = built || l.expr.Eval(func(tag string) bool {
				if platformTag(tag) {
					return onThisPlatform(tag)
				}
				return tag == set
			})
		}
		if !built {
			problems = append(problems, fmt.Sprintf("%s:%d: //go:build %s: built under no tag set the layering test checks (no tag, or one of %s alone), so its imports go unchecked",
				l.file, l.line, l.expr, strings.Join(tags, ", ")))
		}
	}
	return tags, problems
}

func hasOr(x constraint.Expr) bool {
	switch x := x.(type) {
	case *constraint.OrExpr:
		return true
	case *constraint.AndExpr:
		return hasOr(x.X) || hasOr(x.Y)
	case *constraint.NotExpr:
		return hasOr(x.X)
	}
	return false
}

// tagsOf lists every tag an expression names (Eval stops at the first
// false operand of an &&).
func tagsOf(x constraint.Expr) []string {
	switch x := x.(type) {
	case *constraint.TagExpr:
		return []string{x.Tag}
	case *constraint.NotExpr:
		return tagsOf(x.X)
	case *constraint.AndExpr:
		return append(tagsOf(x.X), tagsOf(x.Y)...)
	case *constraint.OrExpr:
		return append(tagsOf(x.X), tagsOf(x.Y)...)
	}
	return nil
}

// platformTag reports whether tag is the go command's own rather than a
// tier's: the operating system and architecture, unix, the compiler, cgo
// and the release tags.
func platformTag(tag string) bool {
	switch tag {
	case runtime.GOOS, runtime.GOARCH, "unix", "cgo", "gc", "gccgo":
		return true
	}
	return strings.HasPrefix(tag, "go1.")
}

// onThisPlatform is what the go command makes of a platform tag here.
func onThisPlatform(tag string) bool { return tag != "gccgo" }

// readBuildLines reads the //go:build line of every .go file under root,
// skipping what the go command skips (testdata, vendor, folders starting
// with . or _).
func readBuildLines(t *testing.T, root string) []buildLine {
	t.Helper()
	var lines []buildLine
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		name := d.Name()
		if d.IsDir() {
			if path != root && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(name, ".go") {
			return nil
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		// Only a line before the package clause constrains the file.
		sc := bufio.NewScanner(bytes.NewReader(data))
		for n := 1; sc.Scan(); n++ {
			text := sc.Text()
			if strings.HasPrefix(text, "package ") {
				break
			}
			if constraint.IsPlusBuild(text) {
				t.Errorf("%s:%d: a // +build line: write it as //go:build", rel, n)
			}
			if !constraint.IsGoBuild(text) {
				continue
			}
			expr, err := constraint.Parse(text)
			if err != nil {
				t.Errorf("%s:%d: %v", rel, n, err)
				continue
			}
			lines = append(lines, buildLine{file: rel, line: n, expr: expr})
		}
		return sc.Err()
	})
	if err != nil {
		t.Fatal(err)
	}
	return lines
}

// moduleRoot is the folder of the module's go.mod, as the go command
// finds it.
func moduleRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOMOD").Output()
	gomod := strings.TrimSpace(string(out))
	if err != nil || filepath.Base(gomod) != "go.mod" {
		t.Fatalf("go env GOMOD = %q, %v", gomod, err)
	}
	return filepath.Dir(gomod)
}

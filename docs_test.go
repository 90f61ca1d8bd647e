package dlock_test

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"
)

// TestDocLinks checks that every relative link in the repository's Markdown
// files (outside bench/results, which the benchmark writes) leads to a file
// or directory that exists and, when it names an anchor in a Markdown file,
// to a heading of that file.
func TestDocLinks(t *testing.T) {
	files, err := markdownFiles(".")
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 5 {
		t.Fatalf("found only %d Markdown files: %q", len(files), files)
	}
	for _, bad := range checkLinks(files) {
		t.Error(bad)
	}
}

// TestDocLinksCatchBreakage checks that the check sees a broken file link and
// a broken anchor.
func TestDocLinksCatchBreakage(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("a.md", "# A\n\n## The part\n\n[ok](b.md#b-and-more) [ok](#the-part) [gone](c.md) [no anchor](b.md#nowhere)\n"+
		"`[code](d.md)`\n\n```\n[fenced](e.md)\n```\n[web](https://example.com/x.md)\n")
	write("b.md", "# B, and more!\n")
	files, err := markdownFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	bad := checkLinks(files)
	if len(bad) != 2 || !strings.Contains(bad[0], `"c.md"`) || !strings.Contains(bad[1], `"b.md#nowhere"`) {
		t.Errorf("broken links found: %q; want c.md and b.md#nowhere only", bad)
	}
}

// markdownFiles returns the .md files under root, leaving out hidden
// directories and bench/results.
func markdownFiles(root string) ([]string, error) {
	var files []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != root && (strings.HasPrefix(d.Name(), ".") || filepath.ToSlash(path) == "bench/results") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".md") {
			files = append(files, path)
		}
		return nil
	})
	return files, err
}

var (
	// linkRE matches an inline Markdown link or image: [text](target).
	linkRE = regexp.MustCompile(`\]\(([^)\s]+)(?:\s+"[^"]*")?\)`)
	// codeSpanRE matches an inline code span, whose text is not a link.
	codeSpanRE = regexp.MustCompile("`[^`]*`")
)

// checkLinks returns a line for each relative link in files that leads
// nowhere.
func checkLinks(files []string) []string {
	var bad []string
	anchors := make(map[string]map[string]bool) // by cleaned path
	for _, file := range files {
		text, err := os.ReadFile(file)
		if err != nil {
			bad = append(bad, err.Error())
			continue
		}
		for n, line := range proseLines(string(text)) {
			for _, m := range linkRE.FindAllStringSubmatch(codeSpanRE.ReplaceAllString(line, ""), -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				path, anchor, _ := strings.Cut(target, "#")
				dest := file
				if path != "" {
					dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
				}
				where := fmt.Sprintf("%s:%d: link %q", file, n+1, target)
				if _, err := os.Stat(dest); err != nil {
					bad = append(bad, where+" leads to no file")
					continue
				}
				if anchor == "" || !strings.HasSuffix(dest, ".md") {
					continue
				}
				if anchors[dest] == nil {
					anchors[dest] = headingAnchors(dest)
				}
				if !anchors[dest][anchor] {
					bad = append(bad, where+" leads to no heading of "+dest)
				}
			}
		}
	}
	return bad
}

// proseLines returns the lines of a Markdown text, with those inside fenced
// code blocks blanked, so that line numbers still match.
func proseLines(text string) []string {
	lines := strings.Split(text, "\n")
	inFence := false
	for i, line := range lines {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			inFence = !inFence
			lines[i] = ""
			continue
		}
		if inFence {
			lines[i] = ""
		}
	}
	return lines
}

// headingAnchors returns the anchors GitHub makes for the headings of a
// Markdown file: lower case, spaces to hyphens, punctuation other than
// hyphens and underscores dropped, "-1", "-2"... after repeats.
func headingAnchors(file string) map[string]bool {
	anchors := make(map[string]bool)
	text, err := os.ReadFile(file)
	if err != nil {
		return anchors
	}
	seen := make(map[string]int)
	for _, line := range proseLines(string(text)) {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		heading := strings.TrimSpace(strings.TrimLeft(line, "#"))
		var b strings.Builder
		for _, r := range strings.ToLower(heading) {
			switch {
			case r == ' ':
				b.WriteRune('-')
			case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
				b.WriteRune(r)
			}
		}
		slug := b.String()
		if n := seen[slug]; n > 0 {
			anchors[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	return anchors
}

// TestCommandCopies checks that the copies of README's test command agree
// with it: the Makefile's test target and CONTRIBUTING's line run it as
// written, and every vet command (the Makefile's, CONTRIBUTING's, .ci/run's)
// vets the packages it tests.
func TestCommandCopies(t *testing.T) {
	read := func(name string) string {
		t.Helper()
		b, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, bad := range commandCopies(read("README.md"), read("Makefile"), read("CONTRIBUTING.md"), read(".ci/run")) {
		t.Error(bad)
	}
}

// TestCommandCopiesCatchDrift checks that the check sees a copy that lost a
// module, as CONTRIBUTING's once did.
func TestCommandCopiesCatchDrift(t *testing.T) {
	readme := "# x\n\ngo test -race -p 1 ./... ./a/... ./b/...  # the tests\n"
	mk := "test:\n\tgo test -race -p 1 ./... ./a/... ./b/...\n\nvet:\n\tgofmt -l . && go vet ./... ./a/... ./b/... && cd bench && go vet ./...\n"
	contributing := "go test -race -p 1 ./... ./b/...   # the test command\ngofmt -l . && go vet ./... ./b/...   # make vet\n"
	ci := "go vet ./... ./a/... ./b/...\n"
	bad := commandCopies(readme, mk, contributing, ci)
	if len(bad) != 2 {
		t.Fatalf("a CONTRIBUTING.md without ./a/... gave %d complaints, want 2 (its test and vet lines): %q", len(bad), bad)
	}
	for _, b := range bad {
		t.Logf("caught, as it must be: %s", b)
	}
	if bad := commandCopies(readme, mk, strings.ReplaceAll(contributing, "./... ./b/...", "./... ./a/... ./b/..."), ci); len(bad) != 0 {
		t.Errorf("copies that agree: %q", bad)
	}
}

// commandCopies returns what is wrong with the copies of README's test
// command (the first line that starts with "go test ", less its comment) in
// the Makefile, CONTRIBUTING.md and .ci/run, whose texts it is given.
func commandCopies(readme, makefile, contributing, ci string) []string {
	var cmd string
	for line := range strings.Lines(readme) {
		if strings.HasPrefix(line, "go test ") {
			cmd, _, _ = strings.Cut(strings.TrimSpace(line), "  #")
			break
		}
	}
	if cmd == "" {
		return []string{`README.md has no line that starts with "go test "`}
	}
	var pkgs []string
	for _, f := range strings.Fields(cmd)[2:] {
		if strings.HasPrefix(f, "./") {
			pkgs = append(pkgs, f)
		}
	}
	vet := "go vet " + strings.Join(pkgs, " ")
	var bad []string
	has := func(file, text, want, what string) {
		for line := range strings.Lines(text) {
			if line = strings.TrimSpace(line); line == want || strings.HasPrefix(line, want+" ") {
				return
			}
		}
		bad = append(bad, fmt.Sprintf("%s has no line %s %q", file, what, want))
	}
	has("Makefile", makefile, cmd, "that is README's test command,")
	has("CONTRIBUTING.md", contributing, cmd, "that is README's test command,")
	has(".ci/run", ci, vet, "that vets what README's test command tests,")
	for file, text := range map[string]string{"Makefile": makefile, "CONTRIBUTING.md": contributing} {
		has(file, strings.ReplaceAll(text, "gofmt -l . && ", ""), vet, "that vets what README's test command tests,")
	}
	slices.Sort(bad)
	return bad
}

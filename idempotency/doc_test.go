package idempotency_test

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strings"
	"testing"
)

// TestDocWords: the package's comments speak of what a user of the library
// can see: the library, its API and Redis, never of words that name nothing
// a user knows.
func TestDocWords(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(token.NewFileSet(), f, nil, parser.ParseComments)
		if err != nil {
			t.Fatal(err)
		}
		for _, g := range file.Comments {
			for line := range strings.Lines(g.Text()) {
				for _, w := range []string{"seeds", "annotation"} {
					if strings.Contains(strings.ToLower(line), w) {
						t.Errorf("%s: a comment speaks of %q: %q", f, w, line)
					}
				}
			}
		}
	}
}

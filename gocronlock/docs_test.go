package gocronlock_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"strings"
	"testing"
)

// docExamples are the examples docs/gocronlock.md shows.
var docExamples = []string{"ExampleNewElector", "ExampleNewLocker", "ExampleAlignedStart"}

// TestDocPage: docs/gocronlock.md shows each of docExamples as it is in
// example_test.go, in a go block, so that what the page shows compiles and
// does what its output says.
func TestDocPage(t *testing.T) {
	doc, err := os.ReadFile("../docs/gocronlock.md")
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("example_test.go")
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "example_test.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	funcs := make(map[string]string)
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok {
			funcs[fd.Name.Name] = string(src[fset.Position(fd.Pos()).Offset:fset.Position(fd.End()).Offset])
		}
	}
	for _, name := range docExamples {
		text, ok := funcs[name]
		if !ok {
			t.Errorf("example_test.go has no %s", name)
			continue
		}
		if !strings.Contains(string(doc), "```go\n"+text+"\n```\n") {
			t.Errorf("docs/gocronlock.md does not show %s as example_test.go has it, in a go block", name)
		}
	}
}

package main

import (
	"bytes"
	"flag"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/dlock-go/dlock/internal/redistest"
)

var update = flag.Bool("update", false, "copy main.go into README.md between its markers (make readme)")

// TestQuickstart builds the program and runs it against a server of its own,
// as a reader would run it against theirs, and checks what it prints: the
// second holder's fence is above the first's, the first holder is told that
// its lease ran out, and its late write is refused.
func TestQuickstart(t *testing.T) {
	srv := redistest.Start(t)
	bin := filepath.Join(t.TempDir(), "quickstart")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), "REDIS_ADDR="+srv.Addr)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("quickstart: %v\nstdout:\n%s\nstderr:\n%s", err, out, stderr.Bytes())
	}
	want := regexp.MustCompile(`^first holder wrote with fence (\d+)
second holder writes with fence (\d+)
first holder: dlock: lock lost: "report": its lease of 1s ran out
first holder: write refused: fence (\d+) is below (\d+)
$`)
	m := want.FindStringSubmatch(string(out))
	if m == nil {
		t.Fatalf("quickstart printed:\n%s\nwant lines matching:\n%s", out, want)
	}
	first, _ := strconv.ParseInt(m[1], 10, 64)
	second, _ := strconv.ParseInt(m[2], 10, 64)
	if second <= first || m[3] != m[1] || m[4] != m[2] {
		t.Errorf("fences: first %s, second %s, refused %s below %s: want the second above the first, and the first refused below the second", m[1], m[2], m[3], m[4])
	}
}

// The markers in README.md between which `make readme` puts main.go.
const (
	beginMarker = "<!-- begin examples/quickstart/main.go: make readme copies it here -->\n"
	endMarker   = "<!-- end examples/quickstart/main.go -->\n"
)

// TestREADME checks that README.md shows main.go as it is, between its
// markers; with -update (make readme) it copies main.go there.
func TestREADME(t *testing.T) {
	const path = "../../README.md"
	readme, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	text := string(readme)
	i := strings.Index(text, beginMarker)
	j := strings.Index(text, endMarker)
	if i < 0 || j < i {
		t.Fatalf("README.md has no %q followed by %q", beginMarker, endMarker)
	}
	want := "```go\n" + string(src) + "```\n"
	got := text[i+len(beginMarker) : j]
	if got == want {
		return
	}
	if *update {
		text = text[:i+len(beginMarker)] + want + text[j:]
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("README.md's copy of examples/quickstart/main.go differs from the file: run make readme")
}

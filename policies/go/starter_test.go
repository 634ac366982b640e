package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// The starter `wasmgpu policy new NAME --lang go` writes is filled in from
// the templates in host/src/cli/policy_new/go (FILES says which file goes
// where), with the placeholders below.
const starterTemplates = "../../host/src/cli/policy_new/go"

// starter is the starter for zone-first on this SDK: path in the starter →
// contents.
func starter(t *testing.T) map[string]string {
	t.Helper()
	list, err := os.ReadFile(filepath.Join(starterTemplates, "FILES"))
	if os.IsNotExist(err) {
		t.Skipf("no starter templates at %s (this SDK is not in its checkout)", starterTemplates)
	}
	if err != nil {
		t.Fatal(err)
	}
	sdk, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	fill := strings.NewReplacer("{{name}}", "zone-first", "{{Type}}", "ZoneFirst", "{{ident}}", "zone_first",
		"{{sdk}}", sdk, "{{wasm}}", "zone_first.wasm")
	files := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(list)), "\n") {
		template, path, ok := strings.Cut(line, " -> ")
		if !ok {
			t.Fatalf("FILES: %q is not TEMPLATE -> PATH", line)
		}
		text, err := os.ReadFile(filepath.Join(starterTemplates, template))
		if err != nil {
			t.Fatal(err)
		}
		files[path] = fill.Replace(string(text))
		if strings.Contains(files[path], "{{") {
			t.Fatalf("%s: a placeholder left unfilled", template)
		}
	}
	return files
}

// The README shows the starter's policy and tests verbatim.
func TestTheReadmeShowsTheStarter(t *testing.T) {
	files := starter(t)
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{"main.go", "policy_test.go"} {
		marker := "<!-- starter: " + file + " (wasmgpu policy new zone-first --lang go) -->\n```go\n"
		_, after, ok := strings.Cut(string(readme), marker)
		if !ok {
			t.Fatalf("README.md lacks %q", marker)
		}
		shown, _, _ := strings.Cut(after, "```\n")
		if shown != files[file] {
			t.Fatalf("README.md shows another %s: copy the template (filled for zone-first) into it", file)
		}
	}
}

// The starter, written to a directory outside the checkout, passes gofmt,
// go vet and its own tests against this SDK (what build.sh --test-policy
// runs; the tests that need the host's validator skip without one).
func TestTheStarterPassesItsTests(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go vet and go test on the starter (-short)")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go on PATH")
	}
	dir := t.TempDir()
	for path, text := range starter(t) {
		if err := os.WriteFile(filepath.Join(dir, path), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	run := func(name string, args ...string) string {
		cmd := exec.Command(name, args...)
		cmd.Dir = dir
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s %s in the starter: %v\n%s", name, strings.Join(args, " "), err, out)
		}
		return string(out)
	}
	gofmt, err := exec.LookPath("gofmt")
	if err != nil {
		gofmt = filepath.Join(strings.TrimSpace(run(goTool, "env", "GOROOT")), "bin", "gofmt")
	}
	if unformatted := run(gofmt, "-l", "."); unformatted != "" {
		t.Fatalf("the starter is not gofmt-formatted: %s", unformatted)
	}
	run(goTool, "vet", "./...")
	run(goTool, "test", "./...")
}

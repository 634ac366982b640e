package zonespread

import (
	"os"
	"strings"
	"testing"
)

// The README shows this package's two files verbatim.
func TestTheReadmeShowsThisCode(t *testing.T) {
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{"zonespread.go", "zonespread_test.go"} {
		source, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		marker := "<!-- examples/zonespread/" + file + " -->\n```go\n"
		_, after, ok := strings.Cut(string(readme), marker)
		if !ok {
			t.Fatalf("README.md lacks %q", marker)
		}
		shown, _, _ := strings.Cut(after, "```\n")
		if shown != string(source) {
			t.Fatalf("README.md shows another %s: copy the file into it", file)
		}
	}
}

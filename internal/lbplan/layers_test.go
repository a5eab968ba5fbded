package lbplan

import (
	"go/parser"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestImports: the plan is core. It imports the standard library and
// model, maglev and flowhash only: never the data plane's kernel code,
// the store or a role, so the CLI and tests can call it as it is.
func TestImports(t *testing.T) {
	allowed := map[string]bool{"github.com/azgate/azgate/internal/model": true, "github.com/azgate/azgate/internal/maglev": true,
		"github.com/azgate/azgate/internal/flowhash": true}
	files, _ := filepath.Glob("*.go")
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		af, err := parser.ParseFile(fset, f, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, im := range af.Imports {
			p, _ := strconv.Unquote(im.Path.Value)
			if strings.Contains(strings.Split(p, "/")[0], ".") && !allowed[p] {
				t.Errorf("%s imports %s: lbplan may import model, maglev and flowhash only", f, p)
			}
		}
	}
}

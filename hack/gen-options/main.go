// Command gen-options writes what the option table (OptionTable in
// internal/app/optiontable.go) documents:
//
//   - plugins/modules/kube_proxy_sync_linux_{amd64,arm64,ppc64le}.yml, the binary
//     modules' docs: module-docs.yml.in (this directory) for each
//     architecture, with the options from the table;
//   - in the role roles/kpsync: the options of
//     meta/argument_specs.yml, the variables of defaults/main.yml, the
//     module arguments tasks/main.yml passes and the table of variables in
//     README.md (the role's own variables, which are no option of the
//     binary, are in role.go);
//   - the README's flag table;
//   - the README's result table, from the type the binary prints
//     (internal/app's moduleResult, kpsync.Facts) and its fields' doc
//     comments (result.go);
//   - the README's layout (each package's and each hack/ folder's own first
//     sentence) and its list of the pages of docs/ with their sections
//     (layout.go).
//
// With -verify it also checks what no generator writes (checks.go): that
// every make target a file names exists and make help lists every target,
// and that every relative link of the markdown files leads somewhere.
//
// In the files that hold more than that it rewrites only the lines between
// a "BEGIN GENERATED" and an "END GENERATED" marker line. A file with more
// than one such block names each, after the marker: "BEGIN GENERATED
// flags: ..." and "END GENERATED flags".
//
// From the checkout's root:
//
//	go run ./hack/gen-options           # rewrite them in the checkout (make generate)
//	go run ./hack/gen-options -verify   # write nothing; fail when one is not what it would write (make verify)
package main

import (
	"bytes"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/app"
)

func main() {
	root := flag.String("root", ".", "the checkout: where the files with markers are read from")
	verify := flag.Bool("verify", false, "write nothing: fail, with the difference, when a generated file in the checkout is not what it would write")
	flag.Parse()
	if err := run(*root, *verify); err != nil {
		fmt.Fprintf(os.Stderr, "gen-options: %v\n", err)
		os.Exit(1)
	}
}

func run(root string, verify bool) error {
	checkout := os.DirFS(root)
	files, err := generate(checkout, app.OptionTable())
	if err != nil {
		return err
	}
	if verify {
		diffs, err := stale(checkout, files)
		if err != nil {
			return err
		}
		problems, err := checkDocs(checkout)
		if err != nil {
			return err
		}
		for _, p := range problems {
			fmt.Fprintln(os.Stderr, p)
		}
		paths := make([]string, 0, len(diffs))
		for _, d := range diffs {
			fmt.Fprint(os.Stderr, d.text)
			paths = append(paths, d.path)
		}
		switch {
		case len(diffs) > 0:
			return fmt.Errorf("not what go run ./hack/gen-options writes: %s (edit the source each names, not the generated lines, then run make generate)",
				strings.Join(paths, ", "))
		case len(problems) > 0:
			return fmt.Errorf("%d problems in the docs (above)", len(problems))
		}
		fmt.Fprintf(os.Stderr, "gen-options: the %d generated files are up to date; every make target and link the docs name exists\n", len(files))
		return nil
	}
	for _, path := range sortedKeys(files) {
		dst := filepath.Join(root, filepath.FromSlash(path))
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(dst, files[path], 0o644); err != nil {
			return err
		}
	}
	return nil
}

// generate returns every generated file by its path in the checkout, read
// from checkout (the files with markers, the sources the tables come from).
func generate(checkout fs.FS, table []app.Option) (map[string][]byte, error) {
	files, err := moduleDocs(table)
	if err != nil {
		return nil, err
	}
	blocks := map[string]map[string]string{}
	role, err := roleBlocks(table)
	if err != nil {
		return nil, err
	}
	for path, block := range role {
		blocks[path] = map[string]string{"": block}
	}
	flags, err := readmeTable(checkout, table)
	if err != nil {
		return nil, err
	}
	result, err := resultTable(checkout)
	if err != nil {
		return nil, err
	}
	layout, err := layoutTable(checkout)
	if err != nil {
		return nil, err
	}
	docs, err := docsList(checkout)
	if err != nil {
		return nil, err
	}
	blocks[readmePath] = map[string]string{"flags": flags, "result": result, "layout": layout, "docs": docs}
	for _, path := range sortedKeys(blocks) {
		old, err := fs.ReadFile(checkout, path)
		if err != nil {
			return nil, err
		}
		if files[path], err = replaceBlocks(old, blocks[path]); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	return files, nil
}

// diff is a generated file that is not what is checked in.
type diff struct {
	path, text string
}

// stale compares each generated file with the one in checkout, and says
// where each that differs does.
func stale(checkout fs.FS, files map[string][]byte) ([]diff, error) {
	var out []diff
	for _, path := range sortedKeys(files) {
		have, err := fs.ReadFile(checkout, path)
		if err != nil && !os.IsNotExist(err) {
			return nil, err
		}
		if !bytes.Equal(have, files[path]) {
			out = append(out, diff{path, changedLines(path, string(have), string(files[path]))})
		}
	}
	return out, nil
}

// changedLines shows where have and want differ: the lines between their
// common first and last lines, at most 20 of each.
func changedLines(path, have, want string) string {
	a, b := strings.SplitAfter(have, "\n"), strings.SplitAfter(want, "\n")
	first := 0
	for first < len(a) && first < len(b) && a[first] == b[first] {
		first++
	}
	endA, endB := len(a), len(b)
	for endA > first && endB > first && a[endA-1] == b[endB-1] {
		endA, endB = endA-1, endB-1
	}
	var s strings.Builder
	fmt.Fprintf(&s, "--- %s (checked in)\n+++ %s (generated)\n@@ line %d @@\n", path, path, first+1)
	for _, side := range []struct {
		sign  string
		lines []string
	}{{"-", a[first:endA]}, {"+", b[first:endB]}} {
		for i, line := range side.lines {
			if i == 20 {
				fmt.Fprintf(&s, "%s ... %d more lines\n", side.sign, len(side.lines)-i)
				break
			}
			s.WriteString(side.sign + strings.TrimSuffix(line, "\n") + "\n")
		}
	}
	return s.String()
}

// marker reads a BEGIN GENERATED or END GENERATED marker line: which it
// is, and the block's name ("" for the one block of a file that has one).
func marker(line string) (kind, name string) {
	trimmed := strings.TrimSpace(line)
	for _, prefix := range []string{"# ", "<!-- "} {
		if rest, ok := strings.CutPrefix(trimmed, prefix); ok {
			trimmed = rest
			break
		}
	}
	for _, k := range []string{"BEGIN", "END"} {
		rest, ok := strings.CutPrefix(trimmed, k+" GENERATED")
		if !ok || (rest != "" && rest[0] != ' ') {
			continue
		}
		rest = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "-->"))
		if word, _, _ := strings.Cut(rest, " "); word != "" && word != "by" {
			name = strings.TrimSuffix(word, ":")
		}
		return k, name
	}
	return "", ""
}

// replaceBlocks puts each block between the file's BEGIN GENERATED and END
// GENERATED marker lines of its name, which stay as they are, like every
// other line outside them. Every block needs its markers, and every pair
// of markers a block.
func replaceBlocks(file []byte, blocks map[string]string) ([]byte, error) {
	lines := strings.SplitAfter(string(file), "\n")
	var b bytes.Buffer
	done := map[string]bool{}
	open := -1
	openName := ""
	for i, line := range lines {
		kind, name := marker(line)
		switch {
		case kind == "BEGIN" && open >= 0:
			return nil, fmt.Errorf("line %d: a BEGIN GENERATED marker inside the block begun on line %d", i+1, open+1)
		case kind == "BEGIN":
			if _, ok := blocks[name]; !ok {
				return nil, fmt.Errorf("line %d: no generated block %q", i+1, name)
			}
			if done[name] {
				return nil, fmt.Errorf("line %d: a second BEGIN GENERATED marker for the block %q", i+1, name)
			}
			open, openName = i, name
			b.WriteString(line)
			b.WriteString(blocks[name])
		case kind == "END" && (open < 0 || name != openName):
			return nil, fmt.Errorf("line %d: an END GENERATED marker for the block %q, which is not open", i+1, name)
		case kind == "END":
			done[name], open = true, -1
			b.WriteString(line)
		case open < 0:
			b.WriteString(line)
		}
	}
	if open >= 0 {
		return nil, fmt.Errorf("line %d: no END GENERATED marker for the block %q", open+1, openName)
	}
	for _, name := range sortedKeys(blocks) {
		if !done[name] {
			return nil, fmt.Errorf("no BEGIN GENERATED ... END GENERATED marker lines for the block %q", name)
		}
	}
	return b.Bytes(), nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// wrap breaks text into lines at spaces: the first of at most first
// bytes, the others of at most rest (a longer word gets a line of its own).
func wrap(text string, first, rest int) []string {
	var lines []string
	line := ""
	width := first
	for _, word := range strings.Fields(text) {
		switch {
		case line == "":
			line = word
		case len(line)+1+len(word) <= width:
			line += " " + word
		default:
			lines = append(lines, line)
			line = word
			width = rest
		}
	}
	if line != "" {
		lines = append(lines, line)
	}
	return lines
}

// paragraphs splits Help at its blank lines.
func paragraphs(help string) []string {
	return strings.Split(help, "\n\n")
}

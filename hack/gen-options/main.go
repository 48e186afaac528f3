// Command gen-options writes what the option table (OptionTable in
// internal/app/optiontable.go) documents:
//
//   - plugins/modules/kube_proxy_sync_linux_{amd64,arm64,arm,ppc64le}.yml, the binary
//     modules' docs: module-docs.yml.in (this directory) for each
//     architecture, with the options from the table;
//   - in the role roles/kube_proxy_sync: the options of
//     meta/argument_specs.yml, the variables of defaults/main.yml and the
//     module arguments tasks/main.yml passes (the role's own variables,
//     which are no option of the binary, are in role.go);
//   - the README's flag table.
//
// In the files that hold more than that it rewrites only the lines between
// a "BEGIN GENERATED" and an "END GENERATED" marker line.
//
// From the checkout's root:
//
//	go run ./hack/gen-options            # rewrite them in the checkout
//	go run ./hack/gen-options -out DIR   # write them under DIR instead (hack/verify/generated.sh)
package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/app"
)

func main() {
	root := flag.String("root", ".", "the checkout: where the files with markers are read from")
	out := flag.String("out", "", "where to write the generated files (default: -root)")
	flag.Parse()
	if *out == "" {
		*out = *root
	}
	files, err := generate(*root, app.OptionTable())
	if err != nil {
		fmt.Fprintf(os.Stderr, "gen-options: %v\n", err)
		os.Exit(1)
	}
	paths := make([]string, 0, len(files))
	for path := range files {
		paths = append(paths, path)
	}
	sort.Strings(paths)
	for _, path := range paths {
		dst := filepath.Join(*out, path)
		if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
			fmt.Fprintf(os.Stderr, "gen-options: %v\n", err)
			os.Exit(1)
		}
		if err := os.WriteFile(dst, files[path], 0o644); err != nil {
			fmt.Fprintf(os.Stderr, "gen-options: %v\n", err)
			os.Exit(1)
		}
	}
}

// generate returns every generated file by its path in the checkout.
func generate(root string, table []app.Option) (map[string][]byte, error) {
	files, err := moduleDocs(table)
	if err != nil {
		return nil, err
	}
	blocks, err := roleBlocks(table)
	if err != nil {
		return nil, err
	}
	readme, err := os.ReadFile(filepath.Join(root, readmePath))
	if err != nil {
		return nil, err
	}
	if blocks[readmePath], err = readmeTable(table, string(readme)); err != nil {
		return nil, err
	}
	for path, block := range blocks {
		old, err := os.ReadFile(filepath.Join(root, path))
		if err != nil {
			return nil, err
		}
		if files[path], err = replaceBlock(old, block); err != nil {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
	}
	return files, nil
}

// replaceBlock puts block between the file's BEGIN GENERATED and END
// GENERATED marker lines, which stay as they are, like every other line
// outside them.
func replaceBlock(file []byte, block string) ([]byte, error) {
	lines := strings.SplitAfter(string(file), "\n")
	begin, end := -1, -1
	for i, line := range lines {
		trimmed := strings.TrimLeft(line, " ")
		switch {
		case strings.HasPrefix(trimmed, "# BEGIN GENERATED"), strings.HasPrefix(trimmed, "<!-- BEGIN GENERATED"):
			if begin >= 0 {
				return nil, fmt.Errorf("line %d: a second BEGIN GENERATED marker", i+1)
			}
			begin = i
		case strings.HasPrefix(trimmed, "# END GENERATED"), strings.HasPrefix(trimmed, "<!-- END GENERATED"):
			if end >= 0 {
				return nil, fmt.Errorf("line %d: a second END GENERATED marker", i+1)
			}
			end = i
		}
	}
	if begin < 0 || end < begin {
		return nil, fmt.Errorf("no BEGIN GENERATED ... END GENERATED marker lines, in that order, for the generated block")
	}
	var b bytes.Buffer
	for _, line := range lines[:begin+1] {
		b.WriteString(line)
	}
	b.WriteString(block)
	for _, line := range lines[end:] {
		b.WriteString(line)
	}
	return b.Bytes(), nil
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

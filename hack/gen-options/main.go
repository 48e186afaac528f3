// Command gen-options writes what the option table (OptionTable in
// internal/app/optiontable.go) documents:
//
//   - plugins/modules/kube_proxy_sync_linux_{amd64,arm64}.yml, the binary
//     modules' docs: module-docs.yml.in (this directory) for each
//     architecture, with the options from the table.
//
// From the checkout's root:
//
//	go run ./hack/gen-options            # rewrite them in the checkout
//	go run ./hack/gen-options -out DIR   # write them under DIR instead
package main

import (
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
	return moduleDocs(table)
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

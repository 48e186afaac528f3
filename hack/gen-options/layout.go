package main

import (
	"fmt"
	"go/doc"
	"go/parser"
	"go/token"
	"io/fs"
	"path"
	"sort"
	"strings"
)

// The README's layout and its list of the docs: what each package, each
// folder of hack/ and each page of docs/ says of itself, so that a new one
// is listed by the next make generate, and one without a word on itself
// stops it.

// layoutTable is the README's table of the packages (cmd/, internal/, the
// first sentence of each package's doc comment) and of hack/'s folders
// (the first sentence of each README).
func layoutTable(checkout fs.FS) (string, error) {
	var b strings.Builder
	b.WriteString("| where | what |\n|---|---|\n")
	for _, root := range []string{"cmd", "internal"} {
		dirs, err := goPackages(checkout, root)
		if err != nil {
			return "", err
		}
		for _, dir := range dirs {
			synopsis, err := packageSynopsis(checkout, dir)
			if err != nil {
				return "", err
			}
			b.WriteString("| `" + dir + "` | " + cell(synopsis) + " |\n")
		}
	}
	folders, err := fs.ReadDir(checkout, "hack")
	if err != nil {
		return "", err
	}
	for _, f := range folders {
		if !f.IsDir() {
			continue
		}
		readme := path.Join("hack", f.Name(), "README.md")
		text, err := fs.ReadFile(checkout, readme)
		if err != nil {
			return "", fmt.Errorf("hack/%s/ has no README.md, which says what the folder is for: %w", f.Name(), err)
		}
		first := firstParagraph(string(text))
		if first == "" {
			return "", fmt.Errorf("%s: no paragraph after its title", readme)
		}
		b.WriteString("| [`hack/" + f.Name() + "/`](" + readme + ") | " + cell(strings.TrimSuffix(new(doc.Package).Synopsis(first), ".")) + " |\n")
	}
	return b.String(), nil
}

// goPackages are the directories under root holding a Go package (a .go
// file that is no test), sorted.
func goPackages(checkout fs.FS, root string) ([]string, error) {
	seen := map[string]bool{}
	err := fs.WalkDir(checkout, root, func(name string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(name, ".go") && !strings.HasSuffix(name, "_test.go") {
			seen[path.Dir(name)] = true
		}
		return nil
	})
	dirs := sortedKeys(seen)
	return dirs, err
}

// packageSynopsis is the first sentence of a package's doc comment, without
// "Package name" or "Command name" ("Package lock serialises runs ...":
// "serialises runs ...").
func packageSynopsis(checkout fs.FS, dir string) (string, error) {
	entries, err := fs.ReadDir(checkout, dir)
	if err != nil {
		return "", err
	}
	fset := token.NewFileSet()
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		src, err := fs.ReadFile(checkout, path.Join(dir, e.Name()))
		if err != nil {
			return "", err
		}
		file, err := parser.ParseFile(fset, e.Name(), src, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return "", err
		}
		if file.Doc == nil {
			continue
		}
		text := strings.TrimSuffix(new(doc.Package).Synopsis(file.Doc.Text()), ".")
		for _, prefix := range []string{"Package " + file.Name.Name + " ", "Command " + path.Base(dir) + " "} {
			if rest, ok := strings.CutPrefix(text, prefix); ok {
				rest, _ = strings.CutPrefix(rest, "is ")
				return rest, nil
			}
		}
		return text, nil
	}
	return "", fmt.Errorf("%s: no package doc comment (// Package %s ...), which the README's layout lists", dir, path.Base(dir))
}

// firstParagraph is a markdown text's first paragraph after its title,
// on one line.
func firstParagraph(text string) string {
	var para []string
	for _, line := range outsideCode(text) {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "#") && len(para) == 0:
			continue
		case trimmed == "" && len(para) > 0:
			return strings.Join(para, " ")
		case trimmed != "":
			para = append(para, trimmed)
		}
	}
	return strings.Join(para, " ")
}

// docsList is the README's list of the pages of docs/: each page's title,
// the first sentence of its first paragraph (who it is for), and a link to
// each of its sections.
func docsList(checkout fs.FS) (string, error) {
	pages, err := fs.Glob(checkout, "docs/*.md")
	if err != nil {
		return "", err
	}
	sort.Strings(pages)
	var b strings.Builder
	for _, page := range pages {
		text, err := fs.ReadFile(checkout, page)
		if err != nil {
			return "", err
		}
		hs := headings(string(text))
		if len(hs) == 0 || hs[0].level != 1 {
			return "", fmt.Errorf("%s: no title (# ...) on its first heading", page)
		}
		who := strings.TrimSuffix(new(doc.Package).Synopsis(firstParagraph(string(text))), ".")
		if who == "" {
			return "", fmt.Errorf("%s: no paragraph after its title saying who the page is for", page)
		}
		if rest, ok := strings.CutPrefix(who, "For "); ok {
			who = "for " + rest // "Design, for reviewers ..."
		}
		b.WriteString("- **[" + hs[0].text + "](" + page + ")**, " + who + ".\n")
		var links []string
		for i, a := range headingAnchors(string(text)) {
			if i > 0 && hs[i].level <= 3 {
				links = append(links, "["+hs[i].text+"]("+page+"#"+a+")")
			}
		}
		if len(links) > 0 {
			b.WriteString("  " + strings.Join(links, " · ") + "\n")
		}
	}
	return b.String(), nil
}

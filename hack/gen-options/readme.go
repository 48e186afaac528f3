package main

import (
	"fmt"
	"io/fs"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/app"
)

const readmePath = "README.md"

// readmeTable is the README's flag table: one row per flag, in the
// table's order. A row's See links to the section of that name, in the
// README or a page of docs/.
func readmeTable(checkout fs.FS, table []app.Option) (string, error) {
	var b strings.Builder
	b.WriteString("| flag | default | meaning |\n|---|---|---|\n")
	for _, opt := range table {
		if opt.Flag == "" {
			continue
		}
		name := "--" + opt.Flag
		if opt.Metavar != "" {
			name += " " + opt.Metavar
		}
		flag := "`" + name + "`"
		if opt.Short != "" {
			flag += ", `-" + opt.Short + "`"
		}

		def := ""
		switch {
		case opt.DefaultText != "":
			text, err := markdown(table, opt.DefaultText)
			if err != nil {
				return "", fmt.Errorf("option --%s: %w", opt.Flag, err)
			}
			def = text
		case opt.DefaultString() != "":
			def = "`" + opt.DefaultString() + "`"
		}

		meaning, err := markdown(table, strings.ReplaceAll(opt.Description(), "\n\n", " "))
		if err != nil {
			return "", fmt.Errorf("option --%s: %w", opt.Flag, err)
		}
		meaning = app.Sentence(meaning)
		if opt.See != "" {
			link, err := section(checkout, readmePath, opt.See)
			if err != nil {
				return "", fmt.Errorf("option --%s: %w", opt.Flag, err)
			}
			meaning += fmt.Sprintf(" (see [%s](%s))", opt.See, link)
		}
		b.WriteString(strings.ReplaceAll("| "+cell(flag)+" | "+cell(def)+" | "+cell(meaning)+" |\n", "|  |", "| |"))
	}
	return b.String(), nil
}

// section is the link, from the page from, to the one section called
// heading in the README or a page of docs/.
func section(checkout fs.FS, from, heading string) (string, error) {
	pages, err := fs.Glob(checkout, "docs/*.md")
	if err != nil {
		return "", err
	}
	var found []string
	title := false // the heading is the page's title: link to the page
	for _, page := range append([]string{readmePath}, pages...) {
		text, err := fs.ReadFile(checkout, page)
		if err != nil {
			return "", err
		}
		for i, h := range headings(string(text)) {
			if h.text == heading {
				found = append(found, page)
				title = i == 0 && h.level == 1
			}
		}
	}
	switch {
	case len(found) == 0:
		return "", fmt.Errorf("no section %q in %s or docs/*.md", heading, readmePath)
	case len(found) > 1:
		return "", fmt.Errorf("a section %q in each of %s: name one heading once", heading, strings.Join(found, ", "))
	}
	link := "#" + anchor(heading)
	if found[0] == from {
		return link, nil
	}
	if title {
		link = ""
	}
	rel, err := filepath.Rel(filepath.Dir(from), found[0])
	if err != nil {
		return "", err
	}
	return filepath.ToSlash(rel) + link, nil
}

// markdown renders Help for the README: an option as its flag, values and
// code as code.
func markdown(table []app.Option, help string) (string, error) {
	return app.RenderHelp(help, func(name, value string) (string, error) {
		ref, ok := byName(table, name)
		if !ok || ref.Flag == "" {
			return "", fmt.Errorf("no flag %q", name)
		}
		switch {
		case value == "":
			return "`--" + ref.Flag + "`", nil
		case ref.Kind() == "bool":
			return "`--" + ref.Flag + "=" + value + "`", nil
		}
		return "`--" + ref.Flag + " " + value + "`", nil
	}, func(_, text string) string { return "`" + text + "`" })
}

// cell escapes what would end a table cell.
func cell(s string) string {
	return strings.ReplaceAll(s, "|", `\|`)
}

// anchor is GitHub's anchor of a heading.
func anchor(heading string) string {
	s := strings.ToLower(heading)
	s = regexp.MustCompile(`[^a-z0-9 _-]`).ReplaceAllString(s, "")
	return strings.ReplaceAll(s, " ", "-")
}

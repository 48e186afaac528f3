package main

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/app"
)

const readmePath = "README.md"

// readmeTable is the README's flag table: one row per flag, in the
// table's order. readme is the README, whose sections a row links to.
func readmeTable(table []app.Option, readme string) (string, error) {
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
			if !regexp.MustCompile(`(?m)^#+ ` + regexp.QuoteMeta(opt.See) + `$`).MatchString(readme) {
				return "", fmt.Errorf("option --%s: no README section %q", opt.Flag, opt.See)
			}
			meaning += fmt.Sprintf(" (see [%s](#%s))", opt.See, anchor(opt.See))
		}
		b.WriteString(strings.ReplaceAll("| "+cell(flag)+" | "+cell(def)+" | "+cell(meaning)+" |\n", "|  |", "| |"))
	}
	return b.String(), nil
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

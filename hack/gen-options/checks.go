package main

import (
	"bufio"
	"bytes"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strings"
)

// What the docs name that no generator writes, checked by make verify too:
// the Makefile targets that files name, and the links between the docs.

// skipDirs are the checkout's directories of build outputs and caches
// (.gitignore), whose files are none of the project's.
var skipDirs = map[string]bool{".git": true, ".cache": true, ".venv": true, "bin": true, "dist": true}

// checkDocs returns every problem the checks below find, as "file:line: what".
func checkDocs(checkout fs.FS) ([]string, error) {
	targets, problems, err := makeTargets(checkout)
	if err != nil {
		return nil, err
	}
	more, err := checkFolders(checkout)
	if err != nil {
		return nil, err
	}
	problems = append(problems, more...)
	err = walkText(checkout, func(name string, text []byte) {
		problems = append(problems, checkTargetRefs(name, text, targets)...)
		if strings.HasSuffix(name, ".md") {
			problems = append(problems, checkLinks(checkout, name, text)...)
		}
	})
	return problems, err
}

// checkFolders says which folder the maps of the checkout miss: a folder
// of hack/ that hack/README.md does not link, a directory at the top that
// the README's layout does not name.
func checkFolders(checkout fs.FS) ([]string, error) {
	var problems []string
	hackMap, err := fs.ReadFile(checkout, "hack/README.md")
	if err != nil {
		return nil, err
	}
	folders, err := fs.ReadDir(checkout, "hack")
	if err != nil {
		return nil, err
	}
	for _, f := range folders {
		if f.IsDir() && !bytes.Contains(hackMap, []byte("]("+f.Name()+"/README.md)")) {
			problems = append(problems, fmt.Sprintf("hack/README.md: no row for the folder hack/%s/ (a link to %s/README.md)", f.Name(), f.Name()))
		}
	}
	readme, err := fs.ReadFile(checkout, readmePath)
	if err != nil {
		return nil, err
	}
	layout := string(readme)
	if i := strings.Index(layout, "\n## Layout\n"); i >= 0 {
		layout = layout[i:]
	}
	top, err := fs.ReadDir(checkout, ".")
	if err != nil {
		return nil, err
	}
	for _, d := range top {
		if d.IsDir() && !skipDirs[d.Name()] && !strings.HasPrefix(d.Name(), ".") && !strings.Contains(layout, "`"+d.Name()+"/") {
			problems = append(problems, fmt.Sprintf("%s: the layout does not name the directory %s/", readmePath, d.Name()))
		}
	}
	return problems, nil
}

// walkText calls f with each text file of the checkout, outside skipDirs.
func walkText(checkout fs.FS, f func(name string, text []byte)) error {
	return fs.WalkDir(checkout, ".", func(name string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir() && skipDirs[name]:
			return fs.SkipDir
		case !d.Type().IsRegular():
			return nil
		}
		text, err := fs.ReadFile(checkout, name)
		if err != nil {
			return err
		}
		if len(text) < 1<<20 && !bytes.Contains(text, []byte{0}) {
			f(name, text)
		}
		return nil
	})
}

// makeRule is a rule of the Makefile: its target, and its "## " comment.
var makeRule = regexp.MustCompile(`(?m)^([a-z][a-z0-9-]*):([^=\n][^\n]*)?$`)

// makeTargets returns the Makefile's targets, and what is wrong with them:
// a target make help does not list (no "## " comment), or one not .PHONY.
func makeTargets(checkout fs.FS) (map[string]bool, []string, error) {
	text, err := fs.ReadFile(checkout, "Makefile")
	if err != nil {
		return nil, nil, err
	}
	phony := map[string]bool{}
	if m := regexp.MustCompile(`(?m)^\.PHONY:((?:[^\n\\]|\\\n)*)`).FindSubmatch(text); m != nil {
		for _, t := range strings.Fields(strings.ReplaceAll(string(m[1]), "\\\n", " ")) {
			phony[t] = true
		}
	}
	targets := map[string]bool{}
	var problems []string
	for _, m := range makeRule.FindAllSubmatchIndex(text, -1) {
		target, rest := string(text[m[2]:m[3]]), ""
		if m[4] >= 0 {
			rest = string(text[m[4]:m[5]])
		}
		line := bytes.Count(text[:m[0]], []byte("\n")) + 1
		targets[target] = true
		if !strings.Contains(rest, "## ") {
			problems = append(problems, fmt.Sprintf("Makefile:%d: target %s has no \"## \" comment saying what it does: make help would not list it", line, target))
		}
		if !phony[target] {
			problems = append(problems, fmt.Sprintf("Makefile:%d: target %s is not in .PHONY", line, target))
		}
	}
	for _, t := range sortedKeys(phony) {
		if !targets[t] {
			problems = append(problems, fmt.Sprintf("Makefile: .PHONY names %s, which is no target", t))
		}
	}
	return targets, problems, nil
}

// makeRef is "make", its options and variables, and the first word after
// them: the target, when it is not prose ("make sure").
var makeRef = regexp.MustCompile(`\bmake((?:\s+(?:-C\s+\S+|-[-a-zA-Z0-9]+(?:=\S+)?|[A-Z_][A-Z0-9_]*=\S*))*)[ \t]+([a-z][a-z0-9-]*)\b`)

// notTargets are the words that follow "make" in the project's prose and
// code, and never name a target. A word added here must be prose.
var notTargets = map[string]bool{
	"a": true, "an": true, "and": true, "every": true, "for": true, "func": true, "it": true, "its": true,
	"kube-proxy": true, "sure": true, "that": true, "the": true, "them": true, "target": true, "this": true,
}

// checkTargetRefs finds "make TARGET" in a file and says which target the
// Makefile does not have.
func checkTargetRefs(name string, text []byte, targets map[string]bool) []string {
	var problems []string
	scanner := bufio.NewScanner(bytes.NewReader(text))
	scanner.Buffer(nil, 1<<20)
	for line := 1; scanner.Scan(); line++ {
		for _, m := range makeRef.FindAllStringSubmatch(scanner.Text(), -1) {
			if target := m[2]; !targets[target] && !notTargets[target] {
				problems = append(problems, fmt.Sprintf("%s:%d: make %s: the Makefile has no target %s (make help lists them)", name, line, target, target))
			}
		}
	}
	return problems
}

// mdLink is a markdown link's destination.
var mdLink = regexp.MustCompile(`\]\(([^()\s]+)(?:\s+"[^"]*")?\)`)

// checkLinks says which relative link of a markdown file leads nowhere: to
// no file, or to no heading of a markdown file.
func checkLinks(checkout fs.FS, name string, text []byte) []string {
	var problems []string
	for i, line := range outsideCode(string(text)) {
		for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
			dest := m[1]
			if strings.Contains(dest, "://") || strings.HasPrefix(dest, "mailto:") {
				continue
			}
			file, frag, _ := strings.Cut(dest, "#")
			target := name
			if file != "" {
				target = path.Clean(path.Join(path.Dir(name), file))
			}
			if _, err := fs.Stat(checkout, target); err != nil {
				problems = append(problems, fmt.Sprintf("%s:%d: link %s: no file %s", name, i+1, dest, target))
				continue
			}
			if frag == "" || !strings.HasSuffix(target, ".md") {
				continue
			}
			page, err := fs.ReadFile(checkout, target)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s:%d: link %s: %v", name, i+1, dest, err))
				continue
			}
			if !anchors(string(page))[frag] {
				problems = append(problems, fmt.Sprintf("%s:%d: link %s: no heading of %s has the anchor #%s", name, i+1, dest, target, frag))
			}
		}
	}
	return problems
}

// outsideCode is a markdown text's lines, with those of fenced code blocks
// blanked (their links and headings are none).
func outsideCode(text string) []string {
	lines := strings.Split(text, "\n")
	fence := ""
	for i, line := range lines {
		trimmed := strings.TrimSpace(line)
		switch {
		case fence == "" && (strings.HasPrefix(trimmed, "```") || strings.HasPrefix(trimmed, "~~~")):
			fence = trimmed[:3]
			lines[i] = ""
		case fence != "":
			if strings.HasPrefix(trimmed, fence) {
				fence = ""
			}
			lines[i] = ""
		}
	}
	return lines
}

// heading is a markdown heading: its level and text.
type heading struct {
	level int
	text  string
}

var headingLine = regexp.MustCompile(`^(#{1,6}) +(.+?)\s*$`)

// headings are a markdown text's headings, outside code blocks.
func headings(text string) []heading {
	var out []heading
	for _, line := range outsideCode(text) {
		if m := headingLine.FindStringSubmatch(line); m != nil {
			out = append(out, heading{len(m[1]), m[2]})
		}
	}
	return out
}

// headingAnchors are the anchors GitHub gives a markdown text's headings,
// in order: a heading's anchor, with -1, -2 ... for the second, third of
// the same.
func headingAnchors(text string) []string {
	seen := map[string]int{}
	var out []string
	for _, h := range headings(text) {
		a := anchor(h.text)
		if n := seen[a]; n > 0 {
			out = append(out, fmt.Sprintf("%s-%d", a, n))
		} else {
			out = append(out, a)
		}
		seen[a]++
	}
	return out
}

// anchors are the anchors of a markdown text's headings, as a set.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	for _, a := range headingAnchors(text) {
		out[a] = true
	}
	return out
}

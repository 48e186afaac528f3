package main

import (
	"bufio"
	"io/fs"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/app"
)

// The checkout passes the checks make verify runs.
func TestDocsChecks(t *testing.T) {
	problems, err := checkDocs(checkout)
	require.NoError(t, err)
	assert.Empty(t, problems)
}

// A file that names a target the Makefile does not have fails make verify,
// wherever it is and however the command is written; prose does not.
func TestUnknownMakeTarget(t *testing.T) {
	targets := map[string]bool{"build": true, "test": true, "test-kubespray": true}
	for text, want := range map[string]string{
		"run `MAKE build` first":                       "",
		"MAKE sure the cluster is up":                  "",
		"a rollback would MAKE the pod":                "",
		"\tMAKE --no-print-directory build\n":          "",
		"MAKE -C ../checkout test-kubespray KS=1":      "",
		"MAKE test-kubespray KUBESPRAY_DIR=x":          "",
		"KS_UPGRADE=1 MAKE test-kubespray":             "",
		"func f() { s := make([]string, 0) }":          "",
		"run `MAKE buidl` first":                       "x.md:1: MAKE buidl",
		"# MAKE lint: every linter":                    "x.md:1: MAKE lint",
		"\n\n  MAKE -j4 V=1 test-all\n":                "x.md:3: MAKE test-all",
		"see `MAKE test`, then `MAKE frobnicate` (it)": "x.md:1: MAKE frobnicate",
	} {
		// MAKE: this file is checked too, and names no such targets
		problems := checkTargetRefs("x.md", []byte(strings.ReplaceAll(text, "MAKE", "make")), targets)
		if want == "" {
			assert.Empty(t, problems, text)
			continue
		}
		require.Len(t, problems, 1, text)
		assert.True(t, strings.HasPrefix(problems[0], strings.ReplaceAll(want, "MAKE", "make")+":"), "%q: %s", text, problems[0])
	}

	// in the checkout: the README naming a target that does not exist
	text := string(mustRead(t, readmePath)) + "\nThen run `make " + "frobnicate`.\n"
	problems, err := checkDocs(overlay{readmePath: []byte(text)})
	require.NoError(t, err)
	require.Len(t, problems, 1)
	assert.Contains(t, problems[0], readmePath+":")
	assert.Contains(t, problems[0], "the Makefile has no target frobnicate")
}

// make help lists every target of the Makefile, once, from its "## "
// comments; a target without one fails make verify.
func TestMakeHelp(t *testing.T) {
	targets, problems, err := makeTargets(checkout)
	require.NoError(t, err)
	assert.Empty(t, problems)

	cmd := exec.Command("make", "-s", "--no-print-directory", "-C", "../..", "help")
	cmd.Env = append(cmd.Environ(), "MAKEFLAGS=", "MAKELEVEL=")
	out, err := cmd.Output()
	require.NoError(t, err, "make help")
	listed := map[string]int{}
	scanner := bufio.NewScanner(strings.NewReader(string(out)))
	for scanner.Scan() {
		if fields := strings.Fields(scanner.Text()); len(fields) > 1 {
			listed[fields[0]]++
		}
	}
	for target := range targets {
		assert.Equal(t, 1, listed[target], "make help lists %s once", target)
	}
	assert.Len(t, listed, len(targets), "make help lists the targets and nothing else")

	makefile := string(mustRead(t, "Makefile"))
	undocumented := strings.Replace(makefile, "\nbuild: ## ", "\nbuild: # ", 1)
	require.NotEqual(t, makefile, undocumented)
	_, problems, err = makeTargets(overlay{"Makefile": []byte(undocumented)})
	require.NoError(t, err)
	assert.Equal(t, []string{`Makefile:` + lineOf(undocumented, "\nbuild: # ") + `: target build has no "## " comment saying what it does: make help would not list it`}, problems)
}

// A link to no file, or to no heading of a page, fails make verify; links
// in code blocks and to other sites are not checked.
func TestLinks(t *testing.T) {
	text := string(mustRead(t, readmePath)) + "\n" +
		"[gone](docs/no-such-page.md) [anchor](hack/README.md#no-such-section) [ok](hack/README.md#hack)\n" +
		"[here](#no-such-heading) [site](https://example.com/x#y)\n" +
		"```\n[in code](nowhere.md)\n```\n"
	lines := strings.Count(text, "\n")
	problems := checkLinks(checkout, readmePath, []byte(text))
	assert.Equal(t, []string{
		readmePath + ":" + itoa(lines-4) + ": link docs/no-such-page.md: no file docs/no-such-page.md",
		readmePath + ":" + itoa(lines-4) + ": link hack/README.md#no-such-section: no heading of hack/README.md has the anchor #no-such-section",
		readmePath + ":" + itoa(lines-3) + ": link #no-such-heading: no heading of README.md has the anchor #no-such-heading",
	}, problems)
}

func TestAnchors(t *testing.T) {
	assert.Equal(t, map[string]bool{
		"a-title": true, "a-title-1": true, "running-kubespray-itself-make-test-kubespray": true, "whats-new": true,
	}, anchors("# A title\n\n## A title\n```sh\n# not a heading\n```\n### Running kubespray itself: `make test-kubespray`\n## What's new\n"))
}

func mustRead(t *testing.T, name string) []byte {
	t.Helper()
	text, err := fs.ReadFile(checkout, name)
	require.NoError(t, err)
	return text
}

// lineOf is the line number where s is found in text, for messages.
func lineOf(text, s string) string {
	return itoa(strings.Count(text[:strings.Index(text, s)+1], "\n") + 1)
}

func itoa(n int) string { return strconv.Itoa(n) }

// The layout lists every package of cmd/ and internal/ and every folder of
// hack/, the docs list every page of docs/ and each of its sections; a
// package with no doc comment, a page with no title stop the generator;
// hack/README.md and the README's layout miss no folder.
func TestLayoutAndDocsList(t *testing.T) {
	files := generated(t)
	readme := string(files[readmePath])
	block := func(name string) string {
		return readme[strings.Index(readme, "<!-- BEGIN GENERATED "+name):strings.Index(readme, "<!-- END GENERATED "+name)]
	}
	layout := block("layout")
	for _, root := range []string{"cmd", "internal"} {
		dirs, err := goPackages(checkout, root)
		require.NoError(t, err)
		require.NotEmpty(t, dirs)
		for _, dir := range dirs {
			assert.Contains(t, layout, "| `"+dir+"` | ")
		}
	}
	folders, err := fs.ReadDir(checkout, "hack")
	require.NoError(t, err)
	for _, f := range folders {
		if f.IsDir() {
			assert.Contains(t, layout, "[`hack/"+f.Name()+"/`](hack/"+f.Name()+"/README.md)")
		}
	}
	docs := block("docs")
	pages, err := fs.Glob(checkout, "docs/*.md")
	require.NoError(t, err)
	for _, page := range pages {
		text := string(mustRead(t, page))
		assert.Contains(t, docs, "]("+page+")**")
		for i, a := range headingAnchors(text) {
			if h := headings(text)[i]; i > 0 && h.level <= 3 {
				assert.Contains(t, docs, "]("+page+"#"+a+")", "the section %q", h.text)
			}
		}
	}

	src := string(mustRead(t, "internal/lock/lock.go"))
	i := strings.Index(src, "// Package lock")
	require.GreaterOrEqual(t, i, 0)
	_, err = generate(overlay{"internal/lock/lock.go": []byte(src[strings.Index(src, "package lock"):])}, app.OptionTable())
	assert.ErrorContains(t, err, "internal/lock: no package doc comment")

	page := string(mustRead(t, "docs/testing.md"))
	_, err = generate(overlay{"docs/testing.md": []byte(strings.TrimPrefix(page, "# Testing\n"))}, app.OptionTable())
	assert.ErrorContains(t, err, "docs/testing.md: no title")

	hackMap := string(mustRead(t, "hack/README.md"))
	without := regexp.MustCompile("(?m)^.*\\]\\(kind/README.md\\).*\\n").ReplaceAllString(hackMap, "")
	require.NotEqual(t, hackMap, without)
	problems, err := checkFolders(overlay{"hack/README.md": []byte(without)})
	require.NoError(t, err)
	assert.Equal(t, []string{"hack/README.md: no row for the folder hack/kind/ (a link to kind/README.md)"}, problems)

	noBench := strings.Replace(readme, "`bench/`", "the benchmarks", 1)
	require.NotEqual(t, readme, noBench)
	problems, err = checkFolders(overlay{readmePath: []byte(noBench)})
	require.NoError(t, err)
	assert.Equal(t, []string{readmePath + ": the layout does not name the directory bench/"}, problems)
}

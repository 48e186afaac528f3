package main

import (
	"bufio"
	"io/fs"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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

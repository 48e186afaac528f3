package main

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/app"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpsync"
)

// checkout is the checkout these tests run in.
var checkout = os.DirFS(checkoutDir)

// checkoutDir is its path, for the tests that read files by path.
const checkoutDir = "../.."

func generated(t *testing.T) map[string][]byte {
	t.Helper()
	files, err := generate(checkout, app.OptionTable())
	require.NoError(t, err)
	return files
}

// overlay is the checkout with some files as given.
type overlay map[string][]byte

func (o overlay) Open(name string) (fs.File, error) {
	if content, ok := o[name]; ok {
		return fstest.MapFS{name: {Data: content}}.Open(name)
	}
	return checkout.Open(name)
}

func parse(t *testing.T, files map[string][]byte, path string, v any) {
	t.Helper()
	require.Contains(t, files, path)
	require.NoError(t, yaml.Unmarshal(files[path], v), path)
}

// The same table gives the same bytes, and a second run changes nothing.
func TestGenerateIsStable(t *testing.T) {
	first := generated(t)
	again, err := generate(checkout, app.OptionTable())
	require.NoError(t, err)
	assert.Equal(t, first, again)

	// regenerating from its own output changes nothing either
	fromItself, err := generate(overlay(first), app.OptionTable())
	require.NoError(t, err)
	assert.Equal(t, first, fromItself)
}

// What make verify does (go run ./hack/gen-options -verify): the checkout
// is up to date, and a hand edit of any generated line, in any generated
// file, makes it fail naming that file and the line.
func TestVerifyCatchesAHandEdit(t *testing.T) {
	files := generated(t)
	diffs, err := stale(checkout, files)
	require.NoError(t, err)
	require.Empty(t, diffs, "the checkout is up to date: run make generate")

	for _, path := range sortedKeys(files) {
		lines := strings.SplitAfter(string(files[path]), "\n")
		// edit a line in the middle of each generated block, or of the
		// file when all of it is generated
		var edits []int
		begin := -1
		for i, line := range lines {
			switch kind, _ := marker(line); kind {
			case "BEGIN":
				begin = i
			case "END":
				edits = append(edits, (begin+i+1)/2)
			}
		}
		if len(edits) == 0 {
			edits = []int{len(lines) / 2}
		}
		for _, at := range edits {
			t.Run(fmt.Sprintf("%s:%d", path, at+1), func(t *testing.T) {
				edited := slices.Clone(lines)
				edited[at] = strings.TrimSuffix(edited[at], "\n") + " (edited by hand)\n"
				require.NotEqual(t, lines[at], edited[at])
				hand := overlay{path: []byte(strings.Join(edited, ""))}
				again, err := generate(hand, app.OptionTable())
				require.NoError(t, err)
				diffs, err := stale(hand, again)
				require.NoError(t, err)
				require.Len(t, diffs, 1)
				assert.Equal(t, path, diffs[0].path)
				assert.Contains(t, diffs[0].text, fmt.Sprintf("@@ line %d @@", at+1))
				assert.Contains(t, diffs[0].text, "-"+strings.TrimSuffix(edited[at], "\n")+"\n")
				assert.Contains(t, diffs[0].text, "+"+strings.TrimSuffix(lines[at], "\n")+"\n")
			})
		}
	}
}

// Each module's docs list exactly the binary's module arguments, each with
// a description and a type.
func TestModuleDocs(t *testing.T) {
	files := generated(t)
	for _, a := range arches {
		var docs struct {
			Documentation struct {
				Module  string `json:"module"`
				Options map[string]struct {
					Description any    `json:"description"`
					Type        string `json:"type"`
				} `json:"options"`
			} `json:"DOCUMENTATION"`
		}
		parse(t, files, "plugins/modules/kube_proxy_sync_linux_"+a.arch+".yml", &docs)
		assert.Equal(t, "kube_proxy_sync_linux_"+a.arch, docs.Documentation.Module)
		assert.Equal(t, app.ModuleArgNames(), sortedKeys(docs.Documentation.Options))
		for name, opt := range docs.Documentation.Options {
			assert.NotEmpty(t, opt.Description, name)
			assert.NotEmpty(t, opt.Type, name)
		}
	}
}

// What hack/check-argument-specs.py checked on the files: every variable
// of defaults/main.yml is an option of the argument spec and the other way
// round, each described, with the same default; none is internal; and
// tasks/main.yml passes every option that has a module argument.
func TestRoleAgrees(t *testing.T) {
	files := generated(t)
	var defaults map[string]any
	parse(t, files, roleDir+"defaults/main.yml", &defaults)
	var specs struct {
		ArgumentSpecs map[string]struct {
			Options map[string]map[string]any `json:"options"`
		} `json:"argument_specs"`
	}
	parse(t, files, roleDir+"meta/argument_specs.yml", &specs)
	options := specs.ArgumentSpecs["main"].Options
	assert.Equal(t, sortedKeys(defaults), sortedKeys(options))
	// one entry point: kubespray runs the binary itself (docs/kubespray/0004-*.patch)
	assert.Equal(t, []string{"main"}, sortedKeys(specs.ArgumentSpecs), "the role's entry points")
	for name, spec := range options {
		assert.True(t, strings.HasPrefix(name, "kpsync_"), name)
		assert.NotEmpty(t, spec["description"], name)
		assert.NotEmpty(t, spec["type"], name)
		if d, ok := spec["default"]; ok {
			assert.Equal(t, defaults[name], d, name)
		}
	}

	var tasks []struct {
		Block []struct {
			Args map[string]string `json:"args"`
		} `json:"block"`
	}
	parse(t, files, roleDir+"tasks/main.yml", &tasks)
	var args map[string]string
	for _, task := range tasks[0].Block {
		if task.Args != nil {
			args = task.Args
		}
	}
	require.NotNil(t, args, "the module task's args")
	want := map[string]string{}
	for _, opt := range app.OptionTable() {
		if opt.Role != "" {
			want[opt.Arg] = opt.Role
		}
	}
	// the role passes every argument the module takes: a row with an Arg
	// and no Role is an option the role's users cannot reach
	assert.Equal(t, app.ModuleArgNames(), sortedKeys(want), "module arguments with no role variable")
	assert.Equal(t, sortedKeys(want), sortedKeys(args))
	// the variable itself, or the role's internal _variable that resolves it (vars/main.yml)
	for arg, role := range want {
		assert.Regexp(t, `(?:\b|\b_)`+role+`\b`, args[arg], arg)
	}
}

// The role's README has a row for each variable of defaults/main.yml, in
// its order.
func TestRoleReadme(t *testing.T) {
	files := generated(t)
	var want []string
	for _, m := range regexp.MustCompile(`(?m)^(kpsync_[a-z_]+):`).FindAllStringSubmatch(string(files[roleDir+"defaults/main.yml"]), -1) {
		want = append(want, m[1])
	}
	var defaults map[string]any
	parse(t, files, roleDir+"defaults/main.yml", &defaults)
	require.ElementsMatch(t, sortedKeys(defaults), want, "every variable of defaults/main.yml")
	var rows []string
	for _, m := range regexp.MustCompile("(?m)^\\| `(kpsync_[a-z_]+)` \\|").FindAllStringSubmatch(string(files[roleDir+"README.md"]), -1) {
		rows = append(rows, m[1])
	}
	assert.Equal(t, want, rows)
}

// The README's result table has a row for each key the binary prints
// (kpsync.Facts and the module result's own), and a field with no doc
// comment stops the generator.
func TestResultTable(t *testing.T) {
	files := generated(t)
	readme := string(files[readmePath])
	table := readme[strings.Index(readme, "<!-- BEGIN GENERATED result"):strings.Index(readme, "<!-- END GENERATED result")]
	want := []string{"changed", "failed", "msg", "diff", "pools", "pool_move", "warnings"}
	facts := reflect.TypeOf(kpsync.Facts{})
	for i := 0; i < facts.NumField(); i++ {
		want = append(want, strings.Split(facts.Field(i).Tag.Get("json"), ",")[0])
	}
	var rows []string
	for _, m := range regexp.MustCompile("(?m)^\\| `([a-z_]+)` \\|").FindAllStringSubmatch(table, -1) {
		rows = append(rows, m[1])
	}
	assert.ElementsMatch(t, want, rows)

	src := string(mustRead(t, "internal/kpsync/result.go"))
	undocumented := strings.Replace(src, "\t// RollbackReason is why it rolled back.\n", "", 1)
	require.NotEqual(t, src, undocumented)
	_, err := generate(overlay{"internal/kpsync/result.go": []byte(undocumented)}, app.OptionTable())
	assert.ErrorContains(t, err, "Facts.RollbackReason (rollback_reason) has no doc comment")
}

// The README's table has a row for each flag.
func TestReadmeTable(t *testing.T) {
	files := generated(t)
	readme := string(files[readmePath])
	readme = readme[strings.Index(readme, "<!-- BEGIN GENERATED flags"):strings.Index(readme, "<!-- END GENERATED flags")]
	for _, opt := range app.OptionTable() {
		assert.Len(t, regexp.MustCompile("(?m)^\\| `--"+regexp.QuoteMeta(opt.Flag)+"[ `]").FindAllString(readme, -1), 1, opt.Flag)
	}
}

func TestReplaceBlocks(t *testing.T) {
	file := "a\n  # BEGIN GENERATED by x\nold\n  # END GENERATED\nb\n"
	out, err := replaceBlocks([]byte(file), map[string]string{"": "new\nlines\n"})
	require.NoError(t, err)
	assert.Equal(t, "a\n  # BEGIN GENERATED by x\nnew\nlines\n  # END GENERATED\nb\n", string(out))

	named := "<!-- BEGIN GENERATED one: by x -->\n1\n<!-- END GENERATED one -->\nb\n<!-- BEGIN GENERATED two -->\n<!-- END GENERATED two -->\n"
	out, err = replaceBlocks([]byte(named), map[string]string{"one": "I\n", "two": "II\n"})
	require.NoError(t, err)
	assert.Equal(t, "<!-- BEGIN GENERATED one: by x -->\nI\n<!-- END GENERATED one -->\nb\n<!-- BEGIN GENERATED two -->\nII\n<!-- END GENERATED two -->\n", string(out))

	for name, bad := range map[string]string{
		"no markers":      "a\nb\n",
		"end first":       "# END GENERATED\n# BEGIN GENERATED\n",
		"two begins":      "# BEGIN GENERATED\n# BEGIN GENERATED\n# END GENERATED\n",
		"no end":          "# BEGIN GENERATED\n",
		"two blocks, end": "# BEGIN GENERATED\n# END GENERATED\n# END GENERATED\n",
		"the block twice": "# BEGIN GENERATED\n# END GENERATED\n# BEGIN GENERATED\n# END GENERATED\n",
		"another block":   "# BEGIN GENERATED other\n# END GENERATED other\n",
		"ends another":    "# BEGIN GENERATED\n# END GENERATED other\n",
	} {
		_, err := replaceBlocks([]byte(bad), map[string]string{"": "x\n"})
		assert.Error(t, err, name)
	}
}

// Whatever the text, the YAML reads back as it: plain when it can, quoted
// when a plain scalar would mean something else.
func TestYAMLText(t *testing.T) {
	long := strings.Repeat("word ", 40)
	for _, s := range []string{
		"plain text", "off", "yes", "5", "a: b", "it's", "x #y", "- item", "[a, b]", "{a: 1}", "%x", "@x", "`x`",
		"'quoted'", `"double"`, long + "#tail", long + "- dash", long + "x: y",
	} {
		for _, first := range []string{"      description: ", "        - "} {
			text, err := yamlText(first, "          ", s, 60)
			require.NoError(t, err, s)
			assert.True(t, readsBack(text, s), "%q as\n%s", s, text)
			for _, line := range strings.Split(strings.TrimSuffix(text, "\n"), "\n") {
				assert.LessOrEqual(t, len(line), 60+len(strings.Fields(line)[len(strings.Fields(line))-1]), line)
			}
		}
		assert.True(t, readsBack("["+yamlScalar(s)+"]", s), s)
	}
	assert.Equal(t, `["", "off", auto]`, yamlList([]string{"", "off", "auto"}))
}

// The architectures the collection carries are listed in more places than
// this program writes; each must name exactly arches: RELEASE_ARCHES (what
// make dist and make release build), galaxy.yml's manifest, the sanity
// ignore files and the role's uname -m map.
func TestArchesEverywhere(t *testing.T) {
	var want []string
	for _, a := range arches {
		want = append(want, a.arch)
	}
	sort.Strings(want)
	read := func(path string) string {
		b, err := fs.ReadFile(checkout, path)
		require.NoError(t, err)
		return string(b)
	}
	found := func(re, text string) []string {
		set := map[string]bool{}
		for _, m := range regexp.MustCompile(re).FindAllStringSubmatch(text, -1) {
			set[m[1]] = true
		}
		return sortedKeys(set)
	}

	release := regexp.MustCompile(`(?m)^RELEASE_ARCHES="([^"]*)"$`).FindStringSubmatch(read("hack/lib.sh"))
	require.NotNil(t, release, "hack/lib.sh: no RELEASE_ARCHES")
	got := strings.Fields(release[1])
	sort.Strings(got)
	assert.Equal(t, want, got, "RELEASE_ARCHES in hack/lib.sh")

	galaxy := read("galaxy.yml")
	assert.Equal(t, want, found(`include plugins/modules/kube_proxy_sync_linux_(\w+) `, galaxy), "galaxy.yml: modules in the tarball")
	assert.Equal(t, want, found(`plugins/modules/kube_proxy_sync_linux_(\w+)\.yml\b`, galaxy), "galaxy.yml: module docs in the tarball")

	ignores, err := fs.Glob(checkout, "tests/sanity/ignore-*.txt")
	require.NoError(t, err)
	require.NotEmpty(t, ignores)
	for _, path := range ignores {
		assert.Equal(t, want, found(`(?m)^plugins/modules/kube_proxy_sync_linux_(\w+)\.yml `, read(path)), path)
	}

	var vars struct {
		Arches map[string]string `json:"_kpsync_arches"`
	}
	require.NoError(t, yaml.Unmarshal([]byte(read("roles/kpsync/vars/main.yml")), &vars))
	set := map[string]bool{}
	for _, goarch := range vars.Arches {
		set[goarch] = true
	}
	assert.Equal(t, want, sortedKeys(set), "_kpsync_arches in roles/kpsync/vars/main.yml")
	for _, a := range arches {
		assert.Equal(t, a.arch, vars.Arches[a.machine], "uname -m %s", a.machine)
	}
}

// kubespray is removing `| default()` from variables its kubespray_defaults
// role defines (every play loads it, so the default is dead code that hides
// a rename). Neither the role nor the kubespray patch series
// (docs/kubespray/0*.patch) may put one on a variable the stub of
// kubespray_defaults holds (as kubespray defines them) or one the patches
// add to kubespray_defaults.
func TestNoDefaultOnKubesprayVariables(t *testing.T) {
	stub := filepath.Join(checkoutDir, "molecule/resources/collections/ansible_collections/kubernetes_sigs/kubespray/roles/kubespray_defaults")
	defined := map[string]bool{}
	for _, f := range []string{"defaults/main.yml", "vars/main.yml"} {
		b, err := os.ReadFile(filepath.Join(stub, f))
		require.NoError(t, err)
		var vars map[string]any
		require.NoError(t, yaml.Unmarshal(b, &vars), f)
		for name := range vars {
			defined[name] = true
		}
	}
	patches, err := filepath.Glob(filepath.Join(checkoutDir, "docs/kubespray/0*.patch"))
	require.NoError(t, err)
	require.NotEmpty(t, patches)
	var sources []string
	for _, p := range patches {
		b, err := os.ReadFile(p)
		require.NoError(t, err)
		file := ""
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "+++ ") {
				file = line
				continue
			}
			if strings.HasPrefix(line, "+") {
				// a variable the patch adds to kubespray_defaults is kubespray's from then on
				if m := regexp.MustCompile(`^\+(\w+):`).FindStringSubmatch(line); m != nil && strings.Contains(file, "roles/kubespray_defaults/") {
					defined[m[1]] = true
				}
				sources = append(sources, p+": "+line)
			}
		}
	}
	require.NoError(t, filepath.WalkDir(filepath.Join(checkoutDir, "roles/kpsync"), func(path string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yml") {
			return err
		}
		b, err := os.ReadFile(path)
		for i, line := range strings.Split(string(b), "\n") {
			sources = append(sources, fmt.Sprintf("%s:%d: %s", path, i+1, line))
		}
		return err
	}))
	require.NotEmpty(t, defined)
	withDefault := regexp.MustCompile(`\b(\w+)\)?\s*\|\s*(?:default|d)\(`)
	for _, src := range sources {
		for _, m := range withDefault.FindAllStringSubmatch(src, -1) {
			assert.False(t, defined[m[1]], "default() on kubespray_defaults' %s: %s", m[1], src)
		}
	}
}

// A role variable whose default can be "" must leave the module argument
// out then: passed as "", it would override the binary's default.
func TestRoleOmitsAnEmptyDefault(t *testing.T) {
	for _, opt := range app.OptionTable() {
		if opt.Role == "" || opt.Kind() == "bool" {
			continue
		}
		if opt.RoleDefault == `""` || strings.Contains(opt.RoleDefault, "else ''") {
			assert.Contains(t, rolePass(opt), "default(omit, true)", "%s: its default can be empty", opt.Role)
		}
	}
}

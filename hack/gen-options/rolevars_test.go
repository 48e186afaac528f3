package main

import (
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"sort"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	yaml "go.yaml.in/yaml/v3"
)

// roleMagic are the variables of Ansible's own that the role reads, exactly
// those: the test fails on one it no longer reads, so the list stays short.
var roleMagic = []string{"groups", "inventory_hostname", "item", "omit", "role_path"}

// The role reads only what it is given: its own variables (kpsync_*,
// _kpsync_*, __kpsync_*), the names it registers or sets itself, and a few
// of Ansible's (roleMagic). A caller such as kubespray passes its values in
// as kpsync_* variables; an expression that reads the caller's variables
// (bin_dir, kube_version) breaks when the caller renames one, and copies the
// caller's logic.
func TestRoleReadsOnlyItsOwnVariables(t *testing.T) {
	refs, defined := roleVariables(t, checkout, roleDir)
	require.NotEmpty(t, refs)
	magic := map[string]bool{}
	for _, name := range roleMagic {
		magic[name] = true
	}
	used := map[string]bool{}
	for _, ref := range refs {
		switch {
		case ownVariable(ref.name) || defined[ref.name]:
		case magic[ref.name]:
			used[ref.name] = true
		default:
			assert.Fail(t, "a variable that is not the role's own",
				"%s:%d: %s reads %s, which is not the role's own variable: a caller (kubespray) must pass its "+
					"values in as kpsync_* variables (or add an Ansible magic variable to roleMagic)",
				ref.file, ref.line, ref.where, ref.name)
		}
	}
	for _, name := range roleMagic {
		assert.True(t, used[name], "roleMagic lists %s, which the role no longer reads: remove it", name)
	}
}

// The reading itself: each kind of expression is found, and what is not a
// variable is left out.
func TestRoleVariables(t *testing.T) {
	tasks := `---
- name: "Task {{ title_var }}"
  ansible.builtin.debug:
    msg: >-
      plain bin_dir text {{ kube_version | default(omit, true) | regex_replace('a', b_var, ignorecase=true) }}
      {%- if mode_var is not defined and 'ipvs' in other.attr -%}{{ '{{ in_string }}' ~ {'k': {'l': item.x}} }}{% endif %}
  register: __kpsync_reg
  loop: "{{ [first] + second }}"
  vars:
    local_var: "{{ __kpsync_reg.stdout is match(pattern) }}"
  when:
    - cond_a | bool
    - cond_b is defined or not (cond_c.x == 'y')
- name: Assert
  ansible.builtin.assert:
    that: that_var in ['a', "b"]
  changed_when: changed_var
  failed_when: false
  until: until_var
- name: Fact
  ansible.builtin.set_fact:
    fact_var: 1
  when: "{% for loopvar in items_var %}{{ loopvar }}{% endfor %}"
`
	refs, defined := roleVariables(t, fstest.MapFS{
		"r/tasks/main.yml": {Data: []byte(tasks)},
		"r/vars/main.yml":  {Data: []byte("vars_var: \"{{ fact_var }}\"\n")},
		"r/files/x.yml":    {Data: []byte("not_templated: \"{{ file_var }}\"\n")},
	}, "r/")
	var names []string
	for _, ref := range refs {
		names = append(names, ref.name)
	}
	assert.ElementsMatch(t, []string{
		"title_var", "kube_version", "omit", "b_var", "mode_var", "other", "item", "first", "second",
		"__kpsync_reg", "pattern", "cond_a", "cond_b", "cond_c", "that_var", "changed_var", "until_var", "items_var",
		"loopvar", "fact_var",
	}, names)
	assert.Equal(t, map[string]bool{"__kpsync_reg": true, "local_var": true, "fact_var": true, "loopvar": true, "vars_var": true}, defined)
	for _, ref := range refs {
		if ref.name == "cond_b" {
			assert.Equal(t, roleVarRef{file: "r/tasks/main.yml", line: 13, where: "[0].when[1]", name: "cond_b"}, ref)
		}
	}
}

// roleVarRef is one variable an expression of the role reads.
type roleVarRef struct {
	file  string
	line  int
	where string // the YAML path of the value
	name  string
}

// ownVariable is a name of the role's own prefixes.
func ownVariable(name string) bool {
	return strings.HasPrefix(name, "kpsync_") || strings.HasPrefix(name, "_kpsync_") || strings.HasPrefix(name, "__kpsync_")
}

// roleVariables reads every YAML file of the role under dir (files/ holds
// no templates) and returns the variables its expressions read, and the
// names it defines: its defaults and vars, what it registers, sets as a fact,
// gives a task as vars or names as a loop variable.
func roleVariables(t *testing.T, fsys fs.FS, dir string) ([]roleVarRef, map[string]bool) {
	t.Helper()
	var refs []roleVarRef
	defined := map[string]bool{}
	var files []string
	require.NoError(t, fs.WalkDir(fsys, strings.TrimSuffix(dir, "/"), func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "files" {
			return fs.SkipDir
		}
		if !d.IsDir() && (strings.HasSuffix(p, ".yml") || strings.HasSuffix(p, ".yaml")) {
			files = append(files, p)
		}
		return nil
	}))
	sort.Strings(files)
	require.NotEmpty(t, files, dir)
	for _, file := range files {
		b, err := fs.ReadFile(fsys, file)
		require.NoError(t, err)
		var doc yaml.Node
		require.NoError(t, yaml.Unmarshal(b, &doc), file)
		w := roleWalker{file: file, defined: defined}
		kind := path.Base(path.Dir(file))
		if len(doc.Content) == 1 && (kind == "defaults" || kind == "vars") && doc.Content[0].Kind == yaml.MappingNode {
			for i := 0; i < len(doc.Content[0].Content); i += 2 {
				defined[doc.Content[0].Content[i].Value] = true
			}
		}
		for _, n := range doc.Content {
			w.walk(n, "", "")
		}
		refs = append(refs, w.refs...)
	}
	return refs, defined
}

// roleWalker collects the references of one file.
type roleWalker struct {
	file    string
	defined map[string]bool
	refs    []roleVarRef
}

// bareKeys are the task keywords whose value is an expression without {{ }}.
var bareKeys = map[string]bool{"when": true, "that": true, "changed_when": true, "failed_when": true, "until": true}

func (w *roleWalker) walk(n *yaml.Node, where, key string) {
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, v := n.Content[i].Value, n.Content[i+1]
			switch {
			case k == "register" && v.Kind == yaml.ScalarNode:
				w.defined[v.Value] = true
			case k == "loop_var" && v.Kind == yaml.ScalarNode:
				w.defined[v.Value] = true
			case (k == "vars" || strings.HasSuffix(k, "set_fact")) && v.Kind == yaml.MappingNode:
				for j := 0; j < len(v.Content); j += 2 {
					if name := v.Content[j].Value; name != "cacheable" {
						w.defined[name] = true
					}
				}
			}
			bare := key
			if bareKeys[k] {
				bare = k
			}
			w.walk(v, where+"."+k, bare)
		}
	case yaml.SequenceNode:
		for i, c := range n.Content {
			w.walk(c, fmt.Sprintf("%s[%d]", where, i), key)
		}
	case yaml.ScalarNode:
		if n.Tag != "!!str" {
			return
		}
		// a bare expression, or a templated string (Ansible templates a
		// when: that has {{ }} too)
		exprs := jinjaBlocks(n.Value)
		if key != "" && !jinjaStart.MatchString(n.Value) {
			exprs = []string{n.Value}
		}
		for _, e := range exprs {
			for _, name := range jinjaNames(e, w.defined) {
				w.refs = append(w.refs, roleVarRef{file: w.file, line: n.Line, where: strings.TrimPrefix(where, "."), name: name})
			}
		}
	case yaml.DocumentNode, yaml.AliasNode:
		for _, c := range n.Content {
			w.walk(c, where, key)
		}
	}
}

// jinjaStart opens an expression or a statement.
var jinjaStart = regexp.MustCompile(`\{\{|\{%`)

// jinjaBlocks are the expressions ({{ }}) and statements ({% %}) in a
// templated string, read token by token: a string literal or a dict
// literal in one does not end it.
func jinjaBlocks(s string) []string {
	var out []string
	for {
		loc := jinjaStart.FindStringIndex(s)
		if loc == nil {
			return out
		}
		closing := "}"
		if s[loc[0]+1] == '%' {
			closing = "%"
		}
		rest := s[loc[1]:]
		toks := jinjaToken.FindAllString(rest, -1)
		depth, n, end := 0, 0, -1
		for i, tok := range toks {
			switch {
			case tok == "{":
				depth++
			case tok == closing && depth == 0 && i+1 < len(toks) && toks[i+1] == "}":
				end = n
			case tok == "}":
				depth--
			}
			if end >= 0 {
				break
			}
			n += len(tok)
		}
		if end < 0 {
			return append(out, rest)
		}
		out = append(out, rest[:end])
		s = rest[end+2:]
	}
}

// jinjaWords are Jinja's keywords and literals, and the statements the
// role's templates may use.
var jinjaWords = map[string]bool{
	"and": true, "or": true, "not": true, "in": true, "is": true, "if": true, "else": true, "elif": true, "endif": true,
	"for": true, "endfor": true, "set": true, "true": true, "false": true, "none": true, "True": true, "False": true, "None": true,
}

// jinjaToken is a string literal, a name, or any other character.
var jinjaToken = regexp.MustCompile(`'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|[A-Za-z_][A-Za-z0-9_]*|[0-9][0-9A-Za-z_.]*|\s+|.`)

// jinjaName is a token that is a name.
var jinjaName = regexp.MustCompile(`^[A-Za-z_]`)

// jinjaNames returns the variables an expression reads: names that are not
// inside a string literal, not an attribute (after .), a filter (after |),
// a test (after is, is not), a keyword argument (before =) or a keyword.
// The names a for or set statement binds are added to defined.
func jinjaNames(expr string, defined map[string]bool) []string {
	var toks []string
	for _, tok := range jinjaToken.FindAllString(expr, -1) {
		if strings.TrimSpace(tok) != "" {
			toks = append(toks, tok)
		}
	}
	var names []string
	binding := false
	for i, tok := range toks {
		if !jinjaName.MatchString(tok) {
			continue
		}
		prev, next := "", ""
		if i > 0 {
			prev = toks[i-1]
		}
		if i+1 < len(toks) {
			next = toks[i+1]
		}
		switch {
		case tok == "for" || tok == "set":
			binding = true
			continue
		case tok == "in" || (binding && next == "="):
			if binding && tok != "in" {
				defined[tok] = true
			}
			binding = false
			continue
		case binding:
			defined[tok] = true
			continue
		case jinjaWords[tok]:
			continue
		case prev == "." || prev == "|":
			continue
		case prev == "is" || (prev == "not" && i > 1 && toks[i-2] == "is"):
			continue
		case next == "=" && (i+2 >= len(toks) || toks[i+2] != "="):
			continue
		}
		names = append(names, tok)
	}
	return names
}

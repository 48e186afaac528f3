package main

import (
	"fmt"
	"strings"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/app"
)

const roleDir = "roles/kpsync/"

// roleOnly are the role's variables that are no option of the binary:
// where and how the role runs it. Help may name the binary's options.
var roleOnly = []app.Option{
	{
		Role: "kpsync_kubeadm_config_template", RoleType: "str",
		RoleDefault: `""`,
		Help: "A kubeadm configuration template (Jinja) that the role renders with the variables of this run into a " +
			"temporary file on the host that runs the module, passes as O(kubeadm_config), and removes afterwards. " +
			"Rendered in check mode and under any C(--tags) too, so kube-proxy's settings are never those an earlier run " +
			"left in a file. Found as C(ansible.builtin.template) finds its C(src): a relative name in the templates of " +
			"this role and of the role that includes it. Not with O(kubeadm_config).\n\n" +
			"Empty by default: no template.",
	},
	{
		Role: "kpsync_delegate_to", RoleType: "str",
		RoleDefault:     `"{{ (groups['kube_control_plane'] | default([])) | first | default(inventory_hostname) }}"`,
		RoleDefaultText: "the first C(kube_control_plane) host, else the play's first host",
		Help: "Host that runs the module, once per cluster.\n\n" +
			"Defaults to the first host of the C(kube_control_plane) group, else the play's first host.",
	},
	{
		Role: "kpsync_module", RoleType: "str",
		RoleDefault: "kube_proxy_sync.kube_proxy_sync.kube_proxy_sync_linux",
		Help: "The binary module to run, without its C(_amd64), C(_arm64) or C(_ppc64le) suffix, " +
			"which the role adds for the target.\n\n" +
			"The collection's own by default; a module of that name in a C(library/) directory works too.",
	},
	{
		Role: "kpsync_set_facts", RoleType: "bool",
		RoleDefault: "false",
		Help: "Also set the result as the fact C(kpsync_result) on the play's hosts (an ordinary, never cached " +
			"C(set_fact)).\n\n" +
			"Off by default; read the result through C(register) (C(__kpsync_result)).",
	},
}

// roleBlocks returns the generated block of each role file.
func roleBlocks(table []app.Option) (map[string]string, error) {
	var specs, defaults, pass, readme strings.Builder
	readme.WriteString("| variable | default | what |\n| --- | --- | --- |\n")
	// the binary's options, in the table's order, then the role's own
	var vars []app.Option
	for _, opt := range table {
		if opt.Role != "" {
			vars = append(vars, opt)
		}
	}
	vars = append(vars, roleOnly...)
	for i, opt := range vars {
		help, note, err := roleDescription(table, opt, inAnsible)
		if err != nil {
			return nil, fmt.Errorf("role variable %s: %w", opt.Role, err)
		}
		paras := help
		if note != "" {
			paras = append(paras[:len(paras):len(paras)], note)
		}

		// meta/argument_specs.yml
		specs.WriteString("      " + opt.Role + ":\n")
		specs.WriteString("        type: " + roleType(opt) + "\n")
		templated := strings.Contains(opt.RoleDefault, "{{")
		if !templated {
			specs.WriteString("        default: " + opt.RoleDefault + "\n")
		}
		if len(opt.Choices) > 0 && !templated {
			choices := opt.Choices
			if opt.RoleDefault == `""` {
				choices = append([]string{""}, choices...)
			}
			specs.WriteString("        choices: " + yamlList(choices) + "\n")
		}
		desc, err := description("        ", paras)
		if err != nil {
			return nil, fmt.Errorf("role variable %s: %w", opt.Role, err)
		}
		specs.WriteString(desc)

		// README.md: the first paragraph and the role's note, in markdown
		row, err := roleReadmeRow(table, opt)
		if err != nil {
			return nil, fmt.Errorf("role variable %s: %w", opt.Role, err)
		}
		readme.WriteString(row)

		// defaults/main.yml: the same text, plain
		if i > 0 {
			defaults.WriteString("\n")
		}
		help, note, err = roleDescription(table, opt, inPlain)
		if err != nil {
			return nil, fmt.Errorf("role variable %s: %w", opt.Role, err)
		}
		for _, line := range wrap(strings.Join(append(help, note), " "), 76, 76) {
			defaults.WriteString("# " + line + "\n")
		}
		defaults.WriteString(opt.Role + ": " + opt.RoleDefault + "\n")

		// tasks/main.yml
		if opt.Arg != "" {
			expr := rolePass(opt)
			if strings.ContainsAny(expr, `"\`) {
				return nil, fmt.Errorf("role variable %s: %s: a double quote or a backslash in the pass-through", opt.Role, expr)
			}
			pass.WriteString("        " + opt.Arg + `: "` + expr + "\"\n")
		}
	}
	return map[string]string{
		roleDir + "meta/argument_specs.yml": specs.String(),
		roleDir + "defaults/main.yml":       defaults.String(),
		roleDir + "tasks/main.yml":          pass.String(),
		roleDir + "README.md":               readme.String(),
	}, nil
}

// roleReadmeRow is the variable's row in the role's README: its name, its
// default (RoleDefaultText, else the value in defaults/main.yml) and the
// first paragraph of its description with what the role adds.
func roleReadmeRow(table []app.Option, opt app.Option) (string, error) {
	def := "`" + opt.RoleDefault + "`"
	if opt.RoleDefaultText != "" {
		text, err := roleHelp(table, opt.RoleDefaultText, inMarkdown)
		if err != nil {
			return "", err
		}
		def = text
	}
	help, note, err := roleDescription(table, opt, inMarkdown)
	if err != nil {
		return "", err
	}
	what := help[0]
	if note != "" {
		what += " " + note
	}
	return "| `" + opt.Role + "` | " + cell(def) + " | " + cell(what) + " |\n", nil
}

// style is how a role's text is written: in Ansible's markup
// (argument_specs.yml), plain (defaults/main.yml) or in markdown (README.md).
type style int

const (
	inAnsible style = iota
	inPlain
	inMarkdown
)

// roleDescription is the variable's description in argument_specs.yml,
// defaults/main.yml or README.md: the paragraphs of Help, and what the role
// adds (its note, what an empty value means).
func roleDescription(table []app.Option, opt app.Option, markup style) ([]string, string, error) {
	paras := paragraphs(opt.Description())
	if opt.Kind() == "duration" {
		paras[len(paras)-1] += " A Go duration such as V(5m) or V(90s)."
	}
	var note []string
	if opt.RoleNote != "" {
		note = append(note, opt.RoleNote)
	}
	// "" and null keep the binary's default: say which, when Help cannot
	word := map[string]string{`""`: "Empty", "null": "Null"}[opt.RoleDefault]
	if d := opt.DefaultString(); word != "" && d != "" {
		note = append(note, word+" keeps the binary's default, V("+d+").")
	}
	var err error
	for i := range paras {
		if paras[i], err = roleHelp(table, paras[i], markup); err != nil {
			return nil, "", err
		}
	}
	text, err := roleHelp(table, strings.Join(note, " "), markup)
	return paras, text, err
}

// roleHelp renders Help for the role: an option is named by its role
// variable, in Ansible's markup, as plain text or in markdown.
func roleHelp(table []app.Option, help string, markup style) (string, error) {
	return app.RenderHelp(help, func(name, value string) (string, error) {
		ref, ok := byName(table, name)
		if !ok || ref.Role == "" {
			return "", fmt.Errorf("no role variable for the option %q", name)
		}
		text := ref.Role
		if value != "" {
			text += "=" + value
		}
		switch markup {
		case inAnsible:
			return "O(" + text + ")", nil
		case inMarkdown:
			return "`" + text + "`", nil
		}
		return text, nil
	}, func(kind, text string) string {
		switch markup {
		case inAnsible:
			return kind + "(" + text + ")"
		case inMarkdown:
			return "`" + text + "`"
		}
		return text
	})
}

// roleType is the variable's type in argument_specs.yml.
func roleType(opt app.Option) string {
	if opt.RoleType != "" {
		return opt.RoleType
	}
	return opt.AnsibleType()
}

// rolePass is the value tasks/main.yml passes as the module argument:
// null and "" leave the argument out, so that the binary's default holds.
func rolePass(opt app.Option) string {
	v := opt.Role
	switch {
	case opt.RolePass != "":
		return opt.RolePass
	case opt.RoleDefault == "null":
		return "{{ omit if " + v + " is none else " + v + " }}"
	case opt.Kind() == "bool":
		return "{{ " + v + " | bool }}"
	case opt.RoleDefault == `""`:
		return "{{ " + v + " | default(omit, true) }}"
	}
	return "{{ " + v + " }}"
}

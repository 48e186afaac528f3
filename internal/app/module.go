package app

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
)

// moduleArgs maps the Ansible module's argument names (the option
// table's Arg) onto Options.
func moduleArgs() map[string]func(o *Options, v interface{}) error {
	args := map[string]func(o *Options, v interface{}) error{}
	for _, opt := range OptionTable() {
		if opt.Arg != "" {
			args[opt.Arg] = opt.parseArg
		}
	}
	return args
}

// parseArg sets the option from its module argument.
func (opt Option) parseArg(o *Options, v interface{}) error {
	if opt.parse != nil {
		return opt.parse(o, v)
	}
	switch p := opt.field(o).(type) {
	case *string:
		return str(p, v)
	case *bool:
		return boolean(p, v)
	case *int:
		return integer(p, v)
	case *time.Duration:
		return duration(p, v)
	}
	return fmt.Errorf("option --%s has no module argument parser", opt.Flag)
}

// LoadArgsFile reads the JSON args file Ansible hands a binary module.
// Ansible's own `_ansible_*` keys are accepted; `_ansible_check_mode` and
// `_ansible_diff` (JSON booleans, anything else is refused) turn on check
// and diff mode.
// It is read up to configmap.MaxSize, far more than any module's arguments
// (a manifest is passed by path), so that a wrong path (a device, a huge
// file) fails instead of exhausting memory.
func LoadArgsFile(path string, o *Options) error {
	raw, err := configmap.ReadFileMax(path, configmap.MaxSize, "far more than any module's arguments")
	if err != nil {
		return fmt.Errorf("read module args file: %w", err)
	}
	return ParseArgs(raw, o)
}

// ParseArgs applies module args (a JSON object) to o.
func ParseArgs(raw []byte, o *Options) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var args map[string]interface{}
	if err := dec.Decode(&args); err != nil {
		return fmt.Errorf("module args are not a JSON object: %w", err)
	}
	if args == nil {
		return fmt.Errorf("module args are not a JSON object")
	}
	// one object and nothing after it: `{...} {...}` must not run with the first half
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return fmt.Errorf("module args are not a JSON object: unexpected data after the object at offset %d", dec.InputOffset())
	}
	keys := make([]string, 0, len(args))
	for k := range args {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var unknown []string
	parsers := moduleArgs()
	for _, k := range keys {
		v := args[k]
		switch {
		case k == "_ansible_check_mode" || k == "_ansible_diff":
			// Ansible sends JSON booleans; anything else is refused, so
			// that a check mode that cannot be read never means "write"
			b, ok := v.(bool)
			if !ok {
				return fmt.Errorf("module arg %s: want a JSON boolean, got %s; nothing was done", k, jsonType(v))
			}
			if k == "_ansible_check_mode" {
				o.Check = b
			} else {
				o.Diff = b
			}
		case strings.HasPrefix(k, "_ansible_"):
		case v == nil:
			// Ansible passes unset options as null
		default:
			set, ok := parsers[k]
			if !ok {
				unknown = append(unknown, k)
				continue
			}
			if err := set(o, v); err != nil {
				return fmt.Errorf("module arg %s: %w", k, err)
			}
		}
	}
	if len(unknown) > 0 {
		return fmt.Errorf("unsupported module args: %s (supported: %s)", strings.Join(unknown, ", "), strings.Join(ModuleArgNames(), ", "))
	}
	return nil
}

// ModuleArgNames lists the public module args.
func ModuleArgNames() []string {
	var names []string
	for _, opt := range OptionTable() {
		if opt.Arg != "" {
			names = append(names, opt.Arg)
		}
	}
	sort.Strings(names)
	return names
}

func str(p *string, v interface{}) error {
	s, ok := v.(string)
	if !ok {
		return fmt.Errorf("want a string, got %s", jsonType(v))
	}
	*p = s
	return nil
}

func integer(p *int, v interface{}) error {
	var text string
	switch t := v.(type) {
	case json.Number:
		text = t.String()
	case string: // templated values arrive as strings
		text = t
	default:
		return fmt.Errorf("want a whole number, got %s", jsonType(v))
	}
	n, err := strconv.Atoi(text)
	if err != nil {
		return fmt.Errorf("want a whole number, got %q", text)
	}
	*p = n
	return nil
}

func boolean(p *bool, v interface{}) error {
	switch t := v.(type) {
	case bool:
		*p = t
	case string: // templated values arrive as strings
		b, err := strconv.ParseBool(t)
		if err != nil {
			return fmt.Errorf("want true or false, got %q", t)
		}
		*p = b
	default:
		return fmt.Errorf("want true or false, got %s", jsonType(v))
	}
	return nil
}

// batch takes 5, "5" or "10%".
func batch(o *Options, v interface{}) error {
	switch t := v.(type) {
	case json.Number:
		o.BatchSize = t.String()
	case string:
		o.BatchSize = t
	default:
		return fmt.Errorf("want a number of nodes or a percentage like \"10%%\", got %s", jsonType(v))
	}
	return nil
}

// duration takes "5m", "90s", or a number of seconds.
func duration(p *time.Duration, v interface{}) error {
	var text string
	switch t := v.(type) {
	case json.Number:
		text = t.String() + "s"
	case string:
		text = t
		if _, err := strconv.ParseFloat(t, 64); err == nil {
			text += "s"
		}
	default:
		return fmt.Errorf("want a duration like 5m or a number of seconds, got %s", jsonType(v))
	}
	d, err := time.ParseDuration(text)
	if err != nil {
		return fmt.Errorf("want a duration like 5m or a number of seconds, got %q", text)
	}
	*p = d
	return nil
}

// setArg takes a dict of dotted paths to scalar values.
func setArg(o *Options, v interface{}) error {
	m, ok := v.(map[string]interface{})
	if !ok {
		return fmt.Errorf("want a dict of field paths to values, e.g. {\"ipvs.strictARP\": true}, got %s", jsonType(v))
	}
	set, err := settingsArg(m)
	o.Set = set
	return err
}

// poolsArg is the module's pools: a dict of pool names to a dict of their
// own values (as set's), which the command line gives as --pool and
// --pool-set.
func poolsArg(o *Options, v interface{}) error {
	m, ok := v.(map[string]interface{})
	if !ok {
		return fmt.Errorf(`want a dict of DaemonSet names to their own values, e.g. {"kube-proxy-rhel8": {"mode": "iptables"}}, got %s`, jsonType(v))
	}
	names := make([]string, 0, len(m))
	for name := range m {
		names = append(names, name)
	}
	sort.Strings(names)
	o.Pools, o.PoolSet = o.Pools[:0], o.PoolSet[:0]
	for _, name := range names {
		o.Pools = append(o.Pools, name)
		values, ok := m[name].(map[string]interface{})
		if m[name] != nil && !ok {
			return fmt.Errorf("%s: want a dict of field paths to values ({} for none), got %s", name, jsonType(m[name]))
		}
		set, err := settingsArg(values)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		for _, s := range set {
			o.PoolSet = append(o.PoolSet, name+":"+s)
		}
	}
	return nil
}

// settingsArg is a dict of field paths to values as PATH=VALUE settings,
// sorted by path.
func settingsArg(m map[string]interface{}) ([]string, error) {
	out := []string{}
	paths := make([]string, 0, len(m))
	for k := range m {
		paths = append(paths, k)
	}
	sort.Strings(paths)
	for _, p := range paths {
		if strings.TrimSpace(p) == "" || strings.Contains(p, "=") {
			return nil, fmt.Errorf("%q: want a field path like ipvs.strictARP as the key", p)
		}
		var text string
		switch t := m[p].(type) {
		case string:
			text = t
		case bool:
			text = strconv.FormatBool(t)
		case json.Number:
			text = t.String()
		case []interface{}:
			items := make([]string, 0, len(t))
			for _, it := range t {
				s, ok := it.(string)
				if !ok {
					return nil, fmt.Errorf("%s: want a list of strings", p)
				}
				items = append(items, s)
			}
			text = strings.Join(items, ",")
		default:
			return nil, fmt.Errorf("%s: want a string, number, boolean or list of strings, got %s", p, jsonType(t))
		}
		out = append(out, p+"="+text)
	}
	return out, nil
}

func jsonType(v interface{}) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "a boolean"
	case json.Number:
		return "a number"
	case string:
		return "a string"
	case []interface{}:
		return "a list"
	case map[string]interface{}:
		return "a dict"
	}
	return fmt.Sprintf("%T", v)
}

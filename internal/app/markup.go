package app

import (
	"fmt"
	"regexp"
	"strings"
	"unicode"
	"unicode/utf8"
)

// markup is the part of Ansible's documentation markup that an option's
// Help uses: O(option) or O(option=value), V(value), C(code), RV(key).
var markup = regexp.MustCompile(`\b(RV|O|V|C|[A-Z]+)\(([^()]*)\)`)

// RenderHelp writes Help for one target: ref writes an O() reference to an
// option (value is what follows "=", or ""), lit the text of a V(), C() or
// RV() (kind is "V", "C" or "RV"). Any other markup is an error.
func RenderHelp(text string, ref func(name, value string) (string, error), lit func(kind, text string) string) (string, error) {
	var err error
	out := markup.ReplaceAllStringFunc(text, func(m string) string {
		sub := markup.FindStringSubmatch(m)
		kind, body := sub[1], sub[2]
		switch kind {
		case "O":
			name, value, _ := strings.Cut(body, "=")
			s, e := ref(name, value)
			if e != nil && err == nil {
				err = fmt.Errorf("%s: %w", m, e)
			}
			return s
		case "V", "C", "RV":
			return lit(kind, body)
		}
		if err == nil {
			err = fmt.Errorf("%s: markup the option table does not use (O, V, C, RV only)", m)
		}
		return m
	})
	return out, err
}

// Sentence turns a description into a flag's usage or a table cell's text:
// the first word in lower case when it is a plain capitalised word
// ("Path", not "API" or "KubeProxyConfiguration"), and no final full stop.
func Sentence(s string) string {
	s = strings.TrimSuffix(s, ".")
	first, _, _ := strings.Cut(s, " ")
	r, size := utf8.DecodeRuneInString(first)
	if unicode.IsUpper(r) && strings.ToLower(first[size:]) == first[size:] {
		s = string(unicode.ToLower(r)) + s[size:]
	}
	return s
}

package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"go/types"
	"io/fs"
	"path"
	"reflect"
	"regexp"
	"strconv"
	"strings"
)

// The README's result table: one row per key of the JSON result, written
// from the Go type the binary prints (moduleResult in internal/app, with
// kpsync.Facts inline) and each field's doc comment.

// docsPage is a page of docs/, named in a doc comment.
var docsPage = regexp.MustCompile(`\bdocs/[a-z0-9-]+\.md\b`)

// resultDir and resultType are where the result is declared.
const resultDir, resultType = "internal/app", "moduleResult"

// modulePath is the Go module's path: an import under it is a package of
// the checkout, whose structs the table looks into.
const modulePath = "github.com/kube-proxy-sync/kube-proxy-sync/"

// goStruct is a struct type of the checkout, and the imports of its file.
type goStruct struct {
	dir, name string
	fields    *ast.FieldList
	imports   map[string]string // local name -> import path
}

// resultTable is the README's table of the result's keys.
func resultTable(checkout fs.FS) (string, error) {
	top, err := findStruct(checkout, resultDir, resultType)
	if err != nil {
		return "", err
	}
	if top == nil {
		return "", fmt.Errorf("no struct type %s in %s", resultType, resultDir)
	}
	var b strings.Builder
	b.WriteString("| key | meaning |\n|---|---|\n")
	err = eachKey(checkout, *top, func(key string, field *ast.Field, owner goStruct) error {
		doc := strings.Join(strings.Fields(field.Doc.Text()), " ")
		if doc == "" {
			return fmt.Errorf("%s.%s (%s) has no doc comment: the README's result table is written from it", owner.name, field.Names[0].Name, key)
		}
		// a page of docs/ it names is a link
		meaning := docsPage.ReplaceAllString(strings.TrimSuffix(docText(field.Names[0].Name, doc), "."), "[$0]($0)")
		inner, err := keysOf(checkout, owner, field.Type)
		if err != nil {
			return err
		}
		if inner != "" {
			meaning += "; keys: " + inner
		}
		b.WriteString("| `" + key + "` | " + cell(meaning) + " |\n")
		return nil
	})
	return b.String(), err
}

// docText is a field's doc comment without the field's name it starts
// with ("Restarted: this run ...", "AuditID is the run's ID ...").
func docText(name, doc string) string {
	rest, ok := strings.CutPrefix(doc, name)
	if !ok {
		return doc
	}
	for _, sep := range []string{": ", " is ", " are ", " "} {
		if after, ok := strings.CutPrefix(rest, sep); ok {
			return after
		}
	}
	return doc
}

// eachKey calls f with each JSON key of a struct, in order, and the field
// that has it; a field embedded without a name gives its own keys.
func eachKey(checkout fs.FS, s goStruct, f func(key string, field *ast.Field, owner goStruct) error) error {
	for _, field := range s.fields.List {
		key, ok := jsonKey(field)
		if !ok {
			continue
		}
		if len(field.Names) == 0 {
			inner, err := resolve(checkout, s, field.Type)
			if err != nil {
				return err
			}
			if inner == nil {
				return fmt.Errorf("%s: an embedded field of a type outside the checkout", s.name)
			}
			if err := eachKey(checkout, *inner, f); err != nil {
				return err
			}
			continue
		}
		if err := f(key, field, s); err != nil {
			return err
		}
	}
	return nil
}

// jsonKey is the field's key in JSON: its tag's name, else its Go name;
// false for a field JSON leaves out.
func jsonKey(field *ast.Field) (string, bool) {
	tag := ""
	if field.Tag != nil {
		unquoted, err := strconv.Unquote(field.Tag.Value)
		if err == nil {
			tag = reflect.StructTag(unquoted).Get("json")
		}
	}
	name, _, _ := strings.Cut(tag, ",")
	switch {
	case name == "-":
		return "", false
	case name != "":
		return name, true
	case len(field.Names) == 0:
		return "", true
	case !ast.IsExported(field.Names[0].Name):
		return "", false
	}
	return field.Names[0].Name, true
}

// keysOf lists the keys of a field whose type is a struct of the checkout
// (or a pointer to one, or a list of them), with a list of structs' keys
// in brackets: `desired`, `skipped_nodes` (`[{name, reason}]`). "" for
// any other type.
func keysOf(checkout fs.FS, owner goStruct, expr ast.Expr) (string, error) {
	s, err := resolve(checkout, owner, expr)
	if s == nil || err != nil {
		return "", err
	}
	var keys []string
	err = eachKey(checkout, *s, func(key string, field *ast.Field, fieldOwner goStruct) error {
		inner, err := resolve(checkout, fieldOwner, field.Type)
		if err != nil {
			return err
		}
		if inner == nil {
			keys = append(keys, "`"+key+"`")
			return nil
		}
		var names []string
		err = eachKey(checkout, *inner, func(k string, _ *ast.Field, _ goStruct) error {
			names = append(names, k)
			return nil
		})
		shape := "{" + strings.Join(names, ", ") + "}"
		if _, list := deref(field.Type).(*ast.ArrayType); list {
			shape = "[" + shape + "]"
		}
		keys = append(keys, "`"+key+"` (`"+shape+"`)")
		return err
	})
	return strings.Join(keys, ", "), err
}

// deref strips pointers.
func deref(expr ast.Expr) ast.Expr {
	for {
		star, ok := expr.(*ast.StarExpr)
		if !ok {
			return expr
		}
		expr = star.X
	}
}

// resolve finds the struct a field's type names, through pointers and
// lists; nil when it is no struct of the checkout.
func resolve(checkout fs.FS, owner goStruct, expr ast.Expr) (*goStruct, error) {
	expr = deref(expr)
	if list, ok := expr.(*ast.ArrayType); ok {
		expr = deref(list.Elt)
	}
	switch t := expr.(type) {
	case *ast.Ident:
		if types.Universe.Lookup(t.Name) != nil {
			return nil, nil // string, bool, int64 ...
		}
		return findStruct(checkout, owner.dir, t.Name)
	case *ast.SelectorExpr:
		pkg, ok := t.X.(*ast.Ident)
		if !ok {
			return nil, nil
		}
		if dir, ours := strings.CutPrefix(owner.imports[pkg.Name], modulePath); ours {
			return findStruct(checkout, dir, t.Sel.Name)
		}
	}
	return nil, nil
}

// findStruct parses the package in dir (its Go files but the tests) for
// the struct type name; nil when it declares no such struct.
func findStruct(checkout fs.FS, dir, name string) (*goStruct, error) {
	entries, err := fs.ReadDir(checkout, dir)
	if err != nil {
		return nil, err
	}
	fset := token.NewFileSet()
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		src, err := fs.ReadFile(checkout, path.Join(dir, e.Name()))
		if err != nil {
			return nil, err
		}
		file, err := parser.ParseFile(fset, path.Join(dir, e.Name()), src, parser.ParseComments)
		if err != nil {
			return nil, err
		}
		for _, decl := range file.Decls {
			gen, ok := decl.(*ast.GenDecl)
			if !ok || gen.Tok != token.TYPE {
				continue
			}
			for _, spec := range gen.Specs {
				ts := spec.(*ast.TypeSpec)
				st, ok := ts.Type.(*ast.StructType)
				if !ok || ts.Name.Name != name {
					continue
				}
				imports := map[string]string{}
				for _, imp := range file.Imports {
					p, _ := strconv.Unquote(imp.Path.Value)
					local := path.Base(p)
					if imp.Name != nil {
						local = imp.Name.Name
					}
					imports[local] = p
				}
				return &goStruct{dir: dir, name: name, fields: st.Fields, imports: imports}, nil
			}
		}
	}
	return nil, nil
}

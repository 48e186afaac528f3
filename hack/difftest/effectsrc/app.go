package effectsrc

import (
	"fmt"
	"go/ast"
	"go/format"
	"go/token"
	"path/filepath"
	"strconv"
	"strings"
)

// analyzer walks cmd/kube-proxy/app from its entry points, and the
// packages of k8s.io/kubernetes it hands the whole configuration to (the
// proxiers of 1.37 take it whole).
type analyzer struct {
	internal structs
	root     string
	pkgs     map[string]*pkg
	reads    []rawRead
	seen     map[string]bool
	onStack  map[*ast.FuncDecl]int
	errs     []error
}

// pkg is one parsed package.
type pkg struct {
	path  string
	files []*file
	// funcs by name ("name" for functions, ".name" for methods); a name
	// may have one declaration per OS.
	funcs map[string][]*fnDecl
	// cfgFields are the struct fields of the package typed
	// *KubeProxyConfiguration (ProxyServer.Config, Options.config).
	cfgFields map[string]bool
}

type fnDecl struct {
	decl *ast.FuncDecl
	file *file
	pkg  *pkg
}

type rawRead struct {
	pos, fn   string
	via       string
	path      []string
	modes     Modes
	uncertain string
}

// scope is one walk of one function: its identifiers bound to paths of the
// internal configuration (nil: the whole of it).
type scope struct {
	fn    *fnDecl
	roots map[string][]string
	file  *file
}

// ctx is where a statement runs: the modes, and a condition on the mode
// that could not be evaluated, if any.
type ctx struct {
	modes     Modes
	uncertain string
}

const appPath = "k8s.io/kubernetes/cmd/kube-proxy/app"

func newAnalyzer(app []*file, internal structs, root string) *analyzer {
	a := &analyzer{internal: internal, root: root, pkgs: map[string]*pkg{},
		seen: map[string]bool{}, onStack: map[*ast.FuncDecl]int{}}
	a.pkgs[appPath] = newPkg(appPath, app)
	return a
}

// load parses a package of k8s.io/kubernetes the first time it is asked for.
func (a *analyzer) load(path string) *pkg {
	if p, ok := a.pkgs[path]; ok {
		return p
	}
	files, err := parseDir(filepath.Join(a.root, strings.TrimPrefix(path, "k8s.io/kubernetes/")))
	if err != nil {
		a.errs = append(a.errs, err)
	}
	p := newPkg(path, files)
	a.pkgs[path] = p
	return p
}

func newPkg(path string, files []*file) *pkg {
	a := &pkg{path: path, files: files, funcs: map[string][]*fnDecl{}, cfgFields: map[string]bool{}}
	for _, f := range files {
		for _, d := range f.ast.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				key := d.Name.Name
				if d.Recv != nil {
					key = "." + key
				}
				a.funcs[key] = append(a.funcs[key], &fnDecl{decl: d, file: f, pkg: a})
			case *ast.GenDecl:
				ast.Inspect(d, func(n ast.Node) bool {
					if st, ok := n.(*ast.StructType); ok {
						for _, fl := range st.Fields.List {
							if isCfgType(fl.Type, f) {
								for _, n := range fl.Names {
									a.cfgFields[n.Name] = true
								}
							}
						}
					}
					return true
				})
			}
		}
	}
	return a
}

// isCfgType reports whether t is (*)KubeProxyConfiguration of the internal
// config package, as file f imports it.
func isCfgType(t ast.Expr, f *file) bool {
	if s, ok := t.(*ast.StarExpr); ok {
		t = s.X
	}
	sel, ok := t.(*ast.SelectorExpr)
	if !ok || sel.Sel.Name != "KubeProxyConfiguration" {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && importPath(f, pkg.Name) == cfgImport
}

func importPath(f *file, name string) string {
	for _, imp := range f.ast.Imports {
		p, _ := strconv.Unquote(imp.Path.Value)
		n := p[strings.LastIndex(p, "/")+1:]
		if imp.Name != nil {
			n = imp.Name.Name
		}
		if n == name {
			return p
		}
	}
	return ""
}

// run walks every function no other function of the package names: the
// entry points (NewProxyCommand, and what other packages call).
func (a *analyzer) run() {
	app := a.pkgs[appPath]
	named := map[string]bool{}
	for _, f := range app.files {
		ast.Inspect(f.ast, func(n ast.Node) bool {
			switch x := n.(type) {
			case *ast.FuncDecl:
				ast.Inspect(x.Body, func(n ast.Node) bool {
					switch y := n.(type) {
					case *ast.Ident:
						named[y.Name] = true
					case *ast.SelectorExpr:
						named["."+y.Sel.Name] = true
					}
					return true
				})
				return false
			case *ast.ValueSpec:
				ast.Inspect(x, func(n ast.Node) bool {
					if id, ok := n.(*ast.Ident); ok {
						named[id.Name] = true
					}
					return true
				})
			}
			return true
		})
	}
	for key, decls := range app.funcs {
		if named[key] {
			continue
		}
		for _, d := range decls {
			a.walkFunc(d, nil, ctx{modes: d.file.os})
		}
	}
}

// walkFunc walks fd with its parameters bound by a call (bound[i] is the
// path argument i holds; absent: not a configuration value).
func (a *analyzer) walkFunc(d *fnDecl, bound map[int][]string, c ctx) {
	if d.decl.Body == nil || a.onStack[d.decl] > 0 {
		return
	}
	c.modes &= d.file.os
	if c.modes == 0 {
		return
	}
	a.onStack[d.decl]++
	defer func() { a.onStack[d.decl]-- }()
	sc := &scope{fn: d, roots: map[string][]string{}, file: d.file}
	eachParam(d, func(i int, name string, typ ast.Expr) {
		if p, ok := bound[i]; ok {
			sc.roots[name] = p
		} else if isCfgType(typ, d.file) {
			sc.roots[name] = nil
		}
	})
	a.stmts(d.decl.Body.List, sc, c)
}

// eachParam calls f for each named parameter of d with its position among
// all parameters (an unnamed one takes a position too) and its type.
func eachParam(d *fnDecl, f func(i int, name string, typ ast.Expr)) {
	i := 0
	for _, fl := range d.decl.Type.Params.List {
		if len(fl.Names) == 0 {
			i++
			continue
		}
		for _, n := range fl.Names {
			f(i, n.Name, fl.Type)
			i++
		}
	}
}

func (a *analyzer) funcName(d *fnDecl) string {
	fd := d.decl
	if fd.Recv == nil || len(fd.Recv.List) == 0 {
		return fd.Name.Name
	}
	t := fd.Recv.List[0].Type
	star := ""
	if s, ok := t.(*ast.StarExpr); ok {
		star, t = "*", s.X
	}
	if id, ok := t.(*ast.Ident); ok {
		return fmt.Sprintf("(%s%s).%s", star, id.Name, fd.Name.Name)
	}
	return fd.Name.Name
}

// stmts walks a statement list; it reports whether the list always ends
// in a return (or panic), so what follows an if that returns runs only
// when its condition was false.
func (a *analyzer) stmts(list []ast.Stmt, sc *scope, c ctx) bool {
	for _, s := range list {
		if a.stmt(s, sc, &c) {
			return true
		}
	}
	return false
}

// stmt walks one statement; c may narrow for the statements after it.
func (a *analyzer) stmt(s ast.Stmt, sc *scope, c *ctx) bool {
	switch s := s.(type) {
	case *ast.IfStmt:
		if s.Init != nil {
			a.stmt(s.Init, sc, c)
		}
		a.expr(s.Cond, sc, *c)
		t, f, unc := a.cond(s.Cond, sc)
		tc, fc := narrow(*c, t, unc), narrow(*c, f, unc)
		bodyEnds := a.stmts(s.Body.List, sc, tc)
		elseEnds := false
		if s.Else != nil {
			elseEnds = a.stmt(s.Else, sc, &fc)
		}
		switch {
		case bodyEnds && elseEnds:
			return true
		case bodyEnds:
			*c = fc
		case elseEnds:
			*c = tc
		}
	case *ast.SwitchStmt:
		if s.Init != nil {
			a.stmt(s.Init, sc, c)
		}
		if s.Tag != nil {
			a.expr(s.Tag, sc, *c)
		}
		a.switchStmt(s, sc, *c)
	case *ast.TypeSwitchStmt:
		if s.Init != nil {
			a.stmt(s.Init, sc, c)
		}
		a.stmt(s.Assign, sc, c)
		for _, cc := range s.Body.List {
			a.stmts(cc.(*ast.CaseClause).Body, sc, *c)
		}
	case *ast.SelectStmt:
		for _, cc := range s.Body.List {
			clause := cc.(*ast.CommClause)
			if clause.Comm != nil {
				a.stmt(clause.Comm, sc, c)
			}
			a.stmts(clause.Body, sc, *c)
		}
	case *ast.ForStmt:
		if s.Init != nil {
			a.stmt(s.Init, sc, c)
		}
		if s.Cond != nil {
			a.expr(s.Cond, sc, *c)
		}
		if s.Post != nil {
			a.stmt(s.Post, sc, c)
		}
		a.stmts(s.Body.List, sc, *c)
	case *ast.RangeStmt:
		a.expr(s.X, sc, *c)
		a.stmts(s.Body.List, sc, *c)
	case *ast.BlockStmt:
		return a.stmts(s.List, sc, *c)
	case *ast.LabeledStmt:
		return a.stmt(s.Stmt, sc, c)
	case *ast.GoStmt:
		a.expr(s.Call, sc, *c)
	case *ast.DeferStmt:
		a.expr(s.Call, sc, *c)
	case *ast.ExprStmt:
		a.expr(s.X, sc, *c)
		if ce, ok := s.X.(*ast.CallExpr); ok && isIdent(ce.Fun, "panic") {
			return true
		}
	case *ast.ReturnStmt:
		for _, e := range s.Results {
			if p, ok := a.chain(e, sc); ok && len(p) == 0 {
				continue // handed back whole: read where the caller reads it
			}
			a.expr(e, sc, *c)
		}
		return true
	case *ast.AssignStmt:
		a.assign(s.Lhs, s.Rhs, sc, *c)
	case *ast.DeclStmt:
		gd, ok := s.Decl.(*ast.GenDecl)
		if !ok {
			break
		}
		for _, spec := range gd.Specs {
			vs, ok := spec.(*ast.ValueSpec)
			if !ok {
				continue
			}
			var lhs []ast.Expr
			for _, n := range vs.Names {
				lhs = append(lhs, n)
				if vs.Type != nil && isCfgType(vs.Type, sc.file) {
					sc.roots[n.Name] = nil
				}
			}
			a.assign(lhs, vs.Values, sc, *c)
		}
	case *ast.IncDecStmt:
		a.write(s.X, sc, *c)
	case *ast.SendStmt:
		a.expr(s.Chan, sc, *c)
		a.expr(s.Value, sc, *c)
	}
	return false
}

func narrow(c ctx, m Modes, uncertain string) ctx {
	c.modes &= m
	if uncertain != "" && c.uncertain == "" {
		c.uncertain = uncertain
	}
	return c
}

func (a *analyzer) switchStmt(s *ast.SwitchStmt, sc *scope, c ctx) {
	tagMode := s.Tag != nil && a.isMode(s.Tag, sc)
	if s.Tag != nil && !tagMode {
		for _, cc := range s.Body.List {
			clause := cc.(*ast.CaseClause)
			for _, e := range clause.List {
				a.expr(e, sc, c)
			}
			a.stmts(clause.Body, sc, c)
		}
		return
	}
	// a switch on the mode, or a tagless switch: each case runs where its
	// values (conditions) may hold and no earlier case's must
	rest := c
	var deflt *ast.CaseClause
	for _, cc := range s.Body.List {
		clause := cc.(*ast.CaseClause)
		if clause.List == nil {
			deflt = clause
			continue
		}
		var t, f Modes = 0, All
		unc := ""
		for _, e := range clause.List {
			a.expr(e, sc, rest)
			var et, ef Modes
			var eu string
			if tagMode {
				m := modeConst(e)
				if m == 0 {
					et, ef, eu = All, All, "case "+a.src(e)+" of a switch on the mode"
				} else {
					et, ef = m, All&^m
				}
			} else {
				et, ef, eu = a.cond(e, sc)
			}
			t, f = t|et, f&ef
			if eu != "" {
				unc = eu
			}
		}
		a.stmts(clause.Body, sc, narrow(rest, t, unc))
		rest = narrow(rest, f, unc)
	}
	if deflt != nil {
		a.stmts(deflt.Body, sc, rest)
	}
}

// assign walks an assignment: a configuration chain on the left is a write
// (not a read); an identifier on the left given a configuration chain
// becomes a name for it.
func (a *analyzer) assign(lhs, rhs []ast.Expr, sc *scope, c ctx) {
	if len(rhs) == 1 && len(lhs) > 1 {
		a.bindResults(lhs, rhs[0], sc)
	}
	for i, l := range lhs {
		a.write(l, sc, c)
		if len(rhs) != len(lhs) {
			continue
		}
		r := rhs[i]
		id, ok := l.(*ast.Ident)
		if !ok || id.Name == "_" {
			continue
		}
		if len(lhs) == 1 && a.bindResults(lhs, r, sc) {
			continue
		}
		if p, ok := a.chain(r, sc); ok {
			sc.roots[id.Name] = p
			continue
		}
		// proxyMode := getProxyMode(config.Mode): a mode
		if ce, ok := r.(*ast.CallExpr); ok && a.returnsMode(ce, sc) {
			for _, arg := range ce.Args {
				if a.isMode(arg, sc) {
					sc.roots[id.Name] = []string{"Mode"}
				}
			}
		}
	}
	if len(rhs) == len(lhs) {
		for i, r := range rhs {
			// storing the whole configuration in a field of its type
			// (s.Config = config) reads nothing
			if p, ok := a.chain(r, sc); ok && len(p) == 0 && a.isCfgFieldSel(lhs[i], sc) {
				continue
			}
			a.expr(r, sc, c)
		}
		return
	}
	for _, r := range rhs {
		a.expr(r, sc, c)
	}
}

// bindResults names the configuration a multi-value right side yields:
// cfg, ok := obj.(*KubeProxyConfiguration), or a call of the package whose
// result is one (config, err := o.loadConfigFromFile(...)).
func (a *analyzer) bindResults(lhs []ast.Expr, r ast.Expr, sc *scope) bool {
	bind := func(i int) bool {
		if i >= len(lhs) {
			return false
		}
		id, ok := lhs[i].(*ast.Ident)
		if !ok || id.Name == "_" {
			return false
		}
		sc.roots[id.Name] = nil
		return true
	}
	switch x := r.(type) {
	case *ast.TypeAssertExpr:
		if x.Type != nil && isCfgType(x.Type, sc.file) {
			return bind(0)
		}
	case *ast.CallExpr:
		bound := false
		for _, d := range a.callees(x.Fun, sc, nil) {
			if d.decl.Type.Results == nil {
				continue
			}
			i := 0
			for _, res := range d.decl.Type.Results.List {
				n := max(len(res.Names), 1)
				if isCfgType(res.Type, d.file) {
					for j := 0; j < n; j++ {
						bound = bind(i+j) || bound
					}
				}
				i += n
			}
		}
		return bound
	}
	return false
}

func (a *analyzer) isCfgFieldSel(e ast.Expr, sc *scope) bool {
	s, ok := e.(*ast.SelectorExpr)
	return ok && sc.fn.pkg.cfgFields[s.Sel.Name]
}

// returnsMode reports whether ce calls a function of the package whose one
// result is a ProxyMode.
func (a *analyzer) returnsMode(ce *ast.CallExpr, sc *scope) bool {
	for _, d := range a.callees(ce.Fun, sc, nil) {
		res := d.decl.Type.Results
		if res == nil || len(res.List) != 1 || !isSel(res.List[0].Type, "ProxyMode") {
			return false
		}
		return true
	}
	return false
}

// write walks the left side of an assignment: the configuration chain
// itself is written, not read; index and other expressions in it are.
func (a *analyzer) write(e ast.Expr, sc *scope, c ctx) {
	if _, ok := a.chain(e, sc); ok {
		return
	}
	switch x := e.(type) {
	case *ast.IndexExpr:
		if _, ok := a.chain(x.X, sc); !ok {
			a.expr(x.X, sc, c)
		}
		a.expr(x.Index, sc, c)
	case *ast.Ident:
	default:
		a.expr(e, sc, c)
	}
}

// chain resolves a selector chain on the internal configuration to its
// field path (truncated at a leaf; nil: the whole configuration).
func (a *analyzer) chain(e ast.Expr, sc *scope) ([]string, bool) {
	var path []string
	for {
		switch x := e.(type) {
		case *ast.ParenExpr:
			e = x.X
			continue
		case *ast.StarExpr:
			e = x.X
			continue
		case *ast.Ident:
			root, ok := sc.roots[x.Name]
			if !ok {
				return nil, false
			}
			return a.internal.truncate(join(root, path)), true
		case *ast.SelectorExpr:
			if sc.fn.pkg.cfgFields[x.Sel.Name] {
				if _, isPkg := x.X.(*ast.Ident); !isPkg || importPath(sc.file, x.X.(*ast.Ident).Name) == "" {
					return a.internal.truncate(path), true
				}
			}
			path = append([]string{x.Sel.Name}, path...)
			e = x.X
			continue
		}
		return nil, false
	}
}

// isMode reports whether e is the configuration's mode.
func (a *analyzer) isMode(e ast.Expr, sc *scope) bool {
	p, ok := a.chain(unconvert(e), sc)
	return ok && len(p) == 1 && p[0] == "Mode"
}

// mentionsMode reports whether e uses the mode anywhere.
func (a *analyzer) mentionsMode(e ast.Expr, sc *scope) bool {
	found := false
	ast.Inspect(e, func(n ast.Node) bool {
		if x, ok := n.(ast.Expr); ok && a.isMode(x, sc) {
			found = true
		}
		return !found
	})
	return found
}

// cond returns the modes in which e may be true and those in which it may
// be false; uncertain names e when it involves the mode in a way this
// cannot evaluate (then both are every mode).
func (a *analyzer) cond(e ast.Expr, sc *scope) (t, f Modes, uncertain string) {
	switch x := e.(type) {
	case *ast.ParenExpr:
		return a.cond(x.X, sc)
	case *ast.UnaryExpr:
		if x.Op == token.NOT {
			t, f, u := a.cond(x.X, sc)
			return f, t, u
		}
	case *ast.BinaryExpr:
		switch x.Op {
		case token.LAND, token.LOR:
			t1, f1, u1 := a.cond(x.X, sc)
			t2, f2, u2 := a.cond(x.Y, sc)
			if u1 == "" {
				u1 = u2
			}
			if x.Op == token.LAND {
				return t1 & t2, f1 | f2, u1
			}
			return t1 | t2, f1 & f2, u1
		case token.EQL, token.NEQ:
			var m Modes
			switch {
			case a.isMode(x.X, sc):
				m = modeConst(x.Y)
			case a.isMode(x.Y, sc):
				m = modeConst(x.X)
			default:
				return a.opaque(e, sc)
			}
			if m == 0 {
				return All, All, a.src(e)
			}
			t, f = m, All&^m
			if m == IPTables|Kernelspace { // == "": the OS default
				f = All
			}
			if x.Op == token.NEQ {
				t, f = f, t
			}
			return t, f, ""
		}
	case *ast.CallExpr:
		// a predicate of the package on the mode: isIPTablesBased(mode)
		decls := a.callees(x.Fun, sc, nil)
		if len(decls) == 0 || !a.mentionsMode(x, sc) {
			break
		}
		t, f = 0, 0
		for _, d := range decls {
			body := d.decl.Body
			if body == nil || len(body.List) != 1 {
				return All, All, a.src(e)
			}
			ret, ok := body.List[0].(*ast.ReturnStmt)
			if !ok || len(ret.Results) != 1 {
				return All, All, a.src(e)
			}
			inner := &scope{fn: d, roots: map[string][]string{}, file: d.file}
			for _, p := range a.bindArgs(d, x.Args, sc) {
				inner.roots[p.name] = p.path
			}
			dt, df, du := a.cond(ret.Results[0], inner)
			if du != "" {
				return All, All, a.src(e)
			}
			t, f = t|dt, f|df
		}
		return t, f, ""
	}
	return a.opaque(e, sc)
}

// opaque is a condition that says nothing about the mode, unless it uses
// the mode in a way cond cannot evaluate.
func (a *analyzer) opaque(e ast.Expr, sc *scope) (Modes, Modes, string) {
	if a.mentionsMode(e, sc) {
		return All, All, a.src(e)
	}
	return All, All, ""
}

type binding struct {
	name string
	path []string
}

// bindArgs pairs the parameters of d with the configuration chains among
// args.
func (a *analyzer) bindArgs(d *fnDecl, args []ast.Expr, sc *scope) []binding {
	var out []binding
	eachParam(d, func(i int, name string, _ ast.Expr) {
		if i >= len(args) {
			return
		}
		if p, ok := a.chain(args[i], sc); ok {
			out = append(out, binding{name, p})
		} else if a.isMode(args[i], sc) {
			out = append(out, binding{name, []string{"Mode"}})
		}
	})
	return out
}

// followed reports whether the analysis walks into a package handed the
// whole configuration: the proxiers and their helpers, not the
// configuration's own validation (see the exceptions of the check).
func followed(path string) bool {
	const proxy = "k8s.io/kubernetes/pkg/proxy"
	return (path == proxy || strings.HasPrefix(path, proxy+"/")) && !strings.HasPrefix(path, proxy+"/apis/")
}

// callees are the declarations a call's function names: of the package
// sc is in, or, when args hands the whole configuration on, of another
// package of k8s.io/kubernetes.
func (a *analyzer) callees(fun ast.Expr, sc *scope, args []ast.Expr) []*fnDecl {
	switch f := fun.(type) {
	case *ast.Ident:
		if _, local := sc.roots[f.Name]; local {
			return nil
		}
		return sc.fn.pkg.funcs[f.Name]
	case *ast.SelectorExpr:
		id, ok := f.X.(*ast.Ident)
		if !ok {
			return sc.fn.pkg.funcs["."+f.Sel.Name]
		}
		path := importPath(sc.file, id.Name)
		if path == "" {
			return sc.fn.pkg.funcs["."+f.Sel.Name]
		}
		if !followed(path) {
			return nil
		}
		for _, arg := range args {
			if p, ok := a.chain(arg, sc); ok && len(p) == 0 {
				return a.load(path).funcs[f.Sel.Name]
			}
		}
	}
	return nil
}

// expr walks an expression, recording the configuration chains it reads.
func (a *analyzer) expr(e ast.Expr, sc *scope, c ctx) {
	if e == nil {
		return
	}
	if p, ok := a.chain(e, sc); ok {
		a.record(e, p, sc, c)
		return
	}
	switch x := e.(type) {
	case *ast.CallExpr:
		a.call(x, sc, c)
	case *ast.FuncLit:
		a.stmts(x.Body.List, sc, c)
	case *ast.BinaryExpr:
		if x.Op == token.EQL || x.Op == token.NEQ {
			// config == nil looks at the pointer, not at a field
			for _, pair := range [][2]ast.Expr{{x.X, x.Y}, {x.Y, x.X}} {
				if p, ok := a.chain(pair[0], sc); ok && len(p) == 0 && isIdent(pair[1], "nil") {
					return
				}
			}
		}
		a.expr(x.X, sc, c)
		if x.Op == token.LAND || x.Op == token.LOR {
			t, f, unc := a.cond(x.X, sc)
			if x.Op == token.LOR {
				t = f
			}
			a.expr(x.Y, sc, narrow(c, t, unc))
			return
		}
		a.expr(x.Y, sc, c)
	case *ast.CompositeLit:
		for _, el := range x.Elts {
			if kv, ok := el.(*ast.KeyValueExpr); ok {
				if _, isField := kv.Key.(*ast.Ident); !isField {
					a.expr(kv.Key, sc, c)
				}
				if p, ok := a.chain(kv.Value, sc); ok && len(p) == 0 && isIdentIn(kv.Key, sc.fn.pkg.cfgFields) {
					continue // &ProxyServer{Config: config}: stored, not read
				}
				a.expr(kv.Value, sc, c)
				continue
			}
			a.expr(el, sc, c)
		}
	case *ast.SelectorExpr:
		a.expr(x.X, sc, c)
		if _, isPkg := x.X.(*ast.Ident); isPkg && importPath(sc.file, x.X.(*ast.Ident).Name) != "" {
			return
		}
		// a method value of the package (wait.Until(s.syncSomething, ...))
		for _, d := range sc.fn.pkg.funcs["."+x.Sel.Name] {
			a.walkFunc(d, nil, c)
		}
	case *ast.Ident:
		if _, local := sc.roots[x.Name]; !local {
			for _, d := range sc.fn.pkg.funcs[x.Name] {
				a.walkFunc(d, nil, c)
			}
		}
	default:
		ast.Inspect(e, func(n ast.Node) bool {
			if n == e {
				return true
			}
			if sub, ok := n.(ast.Expr); ok {
				a.expr(sub, sc, c)
				return false
			}
			return true
		})
	}
}

func isIdentIn(e ast.Expr, set map[string]bool) bool {
	id, ok := e.(*ast.Ident)
	return ok && set[id.Name]
}

// call walks a call: into the package's own functions with the
// configuration chains among its arguments bound to their parameters (read
// where the callee reads them), elsewhere as reads at the call.
func (a *analyzer) call(ce *ast.CallExpr, sc *scope, c ctx) {
	decls := a.callees(ce.Fun, sc, ce.Args)
	if len(decls) == 0 {
		a.expr(ce.Fun, sc, c)
		for _, arg := range ce.Args {
			if p, ok := a.chain(arg, sc); ok && len(p) == 0 {
				// the whole configuration, handed to code not followed
				a.recordVia(arg, p, sc, c, a.src(ce.Fun))
				continue
			}
			a.expr(arg, sc, c)
		}
		return
	}
	if s, ok := ce.Fun.(*ast.SelectorExpr); ok {
		a.expr(s.X, sc, c) // the receiver
	}
	for _, d := range decls {
		bound := map[int][]string{}
		idx := map[string]int{}
		i := 0
		for _, fl := range d.decl.Type.Params.List {
			if len(fl.Names) == 0 {
				i++
				continue
			}
			for _, n := range fl.Names {
				idx[n.Name] = i
				i++
			}
		}
		for _, b := range a.bindArgs(d, ce.Args, sc) {
			bound[idx[b.name]] = b.path
		}
		a.walkFunc(d, bound, c)
	}
	for _, arg := range ce.Args {
		if _, ok := a.chain(arg, sc); ok {
			continue // bound to a parameter: read where the callee reads it
		}
		a.expr(arg, sc, c)
	}
}

func (a *analyzer) record(e ast.Expr, path []string, sc *scope, c ctx) {
	a.recordVia(e, path, sc, c, "")
}

func (a *analyzer) recordVia(e ast.Expr, path []string, sc *scope, c ctx, via string) {
	if c.modes == 0 {
		return
	}
	pos := sc.file.fset.Position(e.Pos())
	rel, err := filepath.Rel(a.root, pos.Filename)
	if err != nil {
		rel = pos.Filename
	}
	r := rawRead{pos: fmt.Sprintf("%s:%d", filepath.ToSlash(rel), pos.Line), fn: a.funcName(sc.fn), path: path, modes: c.modes, uncertain: c.uncertain, via: via}
	key := fmt.Sprintf("%+v", r)
	if !a.seen[key] {
		a.seen[key] = true
		a.reads = append(a.reads, r)
	}
}

// src is e as source text, for messages.
func (a *analyzer) src(e ast.Expr) string {
	var b strings.Builder
	if err := format.Node(&b, token.NewFileSet(), e); err != nil {
		return fmt.Sprintf("%T", e)
	}
	return b.String()
}

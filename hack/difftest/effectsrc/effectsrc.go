// Package effectsrc finds, in kube-proxy's own source and without compiling
// it, the proxy modes under which kube-proxy reads each field of its
// KubeProxyConfiguration: the mode column of internal/kpvalidate's field
// table, checked against the code that decides it.
//
// Three parts of the source are read with go/parser:
//   - cmd/kube-proxy/app of k8s.io/kubernetes: every read of the internal
//     configuration (config.IPVS.Scheduler, s.Config.Linux.Conntrack, ...),
//     with the modes under which it runs: inside the branches of an if,
//     else-if or switch on the mode (or on a package predicate such as
//     isIPTablesBased), after an early return on the mode, in a function
//     only such code calls, and in files built for one OS only (a
//     _windows.go file runs in kernelspace mode only, a linux one in the
//     three Linux modes). Functions of the package are followed into from
//     each call with the arguments bound, so a field passed to a helper is
//     read where the helper reads it.
//   - pkg/proxy/apis/config/v1alpha1 of k8s.io/kubernetes: the conversion
//     from the v1alpha1 type (what config.conf holds) to the internal one,
//     itself mode-dependent from 1.31 on (the internal SyncPeriod comes from
//     ipvs.syncPeriod in ipvs mode, nftables.syncPeriod in nftables mode,
//     iptables.syncPeriod otherwise).
//   - config/v1alpha1/types.go of k8s.io/kube-proxy: the json names.
//
// The internal type's Go names are not the file's names lower-camel-cased
// from 1.31 on (Linux.Conntrack is conntrack, DetectLocal.ClusterCIDRs is
// clusterCIDR, SyncPeriod is one of three), hence the conversion.
//
// Nothing imports it: its one user is hack/difftest/effectsrc.sh, which
// downloads those sources and runs TestKubeProxySource here, so it lives
// with the differential test and not with internal/kpvalidate, whose table
// it checks.
package effectsrc

import (
	"fmt"
	"go/ast"
	"go/build/constraint"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Read is one read of a configuration field by kube-proxy.
type Read struct {
	// Pos is file:line under k8s.io/kubernetes.
	Pos string
	// Func is the function it is in ("(*ProxyServer).createProxier").
	Func string
	// Path is the json path it reads, or a prefix of several (an object
	// handed on whole: "winkernel"); "" is the whole configuration, handed
	// to Via, a function the analysis does not walk into.
	Path string
	Via  string
	// Internal is the internal type's field path as the code names it.
	Internal string
	// Modes are those in which it may run.
	Modes Modes
	// Uncertain, when set, is a condition on the mode the analysis could
	// not evaluate, around this read: its Modes are then an upper bound
	// the analysis cannot vouch for.
	Uncertain string
}

// Unmapped is a read of an internal field that no v1alpha1 field converts
// into (set by kube-proxy itself, or a conversion this package cannot read).
type Unmapped struct {
	Pos, Func, Internal string
}

// Result is what Analyze found.
type Result struct {
	Reads    []Read
	Unmapped []Unmapped
}

const cfgImport = "k8s.io/kubernetes/pkg/proxy/apis/config"

// Analyze reads the sources of one kube-proxy minor: k8sDir holds
// k8s.io/kubernetes, kubeProxyDir k8s.io/kube-proxy.
func Analyze(k8sDir, kubeProxyDir string) (Result, error) {
	internal, err := parseStructs(filepath.Join(k8sDir, "pkg/proxy/apis/config/types.go"))
	if err != nil {
		return Result{}, err
	}
	external, err := parseStructs(filepath.Join(kubeProxyDir, "config/v1alpha1/types.go"))
	if err != nil {
		return Result{}, err
	}
	conv, err := parseDir(filepath.Join(k8sDir, "pkg/proxy/apis/config/v1alpha1"))
	if err != nil {
		return Result{}, err
	}
	mapping, err := conversion(conv)
	if err != nil {
		return Result{}, err
	}
	app, err := parseDir(filepath.Join(k8sDir, "cmd/kube-proxy/app"))
	if err != nil {
		return Result{}, err
	}
	a := newAnalyzer(app, internal, k8sDir)
	a.run()
	if len(a.errs) > 0 {
		return Result{}, a.errs[0]
	}
	return a.resolve(mapping, external), nil
}

// file is one parsed source file and the modes of the OSes it is built for.
type file struct {
	name string
	ast  *ast.File
	os   Modes
	fset *token.FileSet
}

// parseDir parses the non-test Go files of dir, keeping those built for
// linux or windows.
func parseDir(dir string) ([]*file, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("read kube-proxy source %s: %w (download it with hack/difftest/effectsrc.sh)", dir, err)
	}
	fset := token.NewFileSet()
	var out []*file
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.ParseComments)
		if err != nil {
			return nil, fmt.Errorf("parse kube-proxy source: %w", err)
		}
		var osModes Modes
		if builds(name, f, "linux") {
			osModes |= Linux
		}
		if builds(name, f, "windows") {
			osModes |= Kernelspace
		}
		if osModes != 0 {
			out = append(out, &file{name: name, ast: f, os: osModes, fset: fset})
		}
	}
	return out, nil
}

// knownOS are the GOOS values a file name suffix may name.
var knownOS = []string{"aix", "android", "darwin", "dragonfly", "freebsd", "illumos", "ios", "js", "linux", "netbsd", "openbsd", "plan9", "solaris", "wasip1", "windows"}

// builds reports whether the file is built for goos (name suffix and
// //go:build line).
func builds(name string, f *ast.File, goos string) bool {
	base := strings.TrimSuffix(name, ".go")
	for _, o := range knownOS {
		if strings.HasSuffix(base, "_"+o) && o != goos {
			return false
		}
	}
	for _, cg := range f.Comments {
		if cg.Pos() > f.Package {
			break
		}
		for _, c := range cg.List {
			if !constraint.IsGoBuild(c.Text) {
				continue
			}
			expr, err := constraint.Parse(c.Text)
			if err != nil {
				continue
			}
			return expr.Eval(func(tag string) bool {
				return tag == goos || tag == "unix" && goos == "linux" || tag == "gc"
			})
		}
	}
	return true
}

// structs are the struct types of one types.go: type -> fields in order.
type structs map[string][]structField

type structField struct {
	name string
	// typ is the name of a struct type of the same file, "" otherwise (a
	// leaf for this analysis: metav1.Duration, a pointer, another package's
	// struct).
	typ  string
	json string
}

func parseStructs(path string) (structs, error) {
	f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
	if err != nil {
		return nil, fmt.Errorf("parse kube-proxy types: %w (download the source with hack/difftest/effectsrc.sh)", err)
	}
	out := structs{}
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.TYPE {
			continue
		}
		for _, s := range gd.Specs {
			ts := s.(*ast.TypeSpec)
			if _, ok := ts.Type.(*ast.StructType); ok {
				out[ts.Name.Name] = nil
			}
		}
	}
	for _, d := range f.Decls {
		gd, ok := d.(*ast.GenDecl)
		if !ok || gd.Tok != token.TYPE {
			continue
		}
		for _, s := range gd.Specs {
			ts := s.(*ast.TypeSpec)
			st, ok := ts.Type.(*ast.StructType)
			if !ok {
				continue
			}
			var fields []structField
			for _, fl := range st.Fields.List {
				typ := ""
				if id, ok := fl.Type.(*ast.Ident); ok {
					if _, local := out[id.Name]; local {
						typ = id.Name
					}
				}
				tag := ""
				if fl.Tag != nil {
					tag = jsonName(fl.Tag.Value)
				}
				for _, n := range fl.Names {
					fields = append(fields, structField{name: n.Name, typ: typ, json: tag})
				}
			}
			out[ts.Name.Name] = fields
		}
	}
	if _, ok := out["KubeProxyConfiguration"]; !ok {
		return nil, fmt.Errorf("%s has no KubeProxyConfiguration type", path)
	}
	return out, nil
}

func jsonName(tag string) string {
	_, rest, ok := strings.Cut(tag, `json:"`)
	if !ok {
		return ""
	}
	name, _, _ := strings.Cut(rest, `"`)
	name, _, _ = strings.Cut(name, ",")
	return name
}

// field finds name among the fields of struct typ.
func (s structs) field(typ, name string) (structField, bool) {
	for _, f := range s[typ] {
		if f.name == name {
			return f, true
		}
	}
	return structField{}, false
}

// truncate cuts a selector chain under KubeProxyConfiguration at its first
// segment that is not a field of a struct of the same file (a leaf's own
// field or method: SyncPeriod.Duration, Mode.String).
func (s structs) truncate(path []string) []string {
	typ := "KubeProxyConfiguration"
	for i, p := range path {
		f, ok := s.field(typ, p)
		if !ok {
			return path[:i]
		}
		if f.typ == "" {
			return path[:i+1]
		}
		typ = f.typ
	}
	return path
}

// jsonPath names a Go field path of the v1alpha1 type by json names; under a
// field of another package's type (clientConnection, logging) it stops
// there, so the read covers every field below.
func (s structs) jsonPath(path []string) (string, bool) {
	typ := "KubeProxyConfiguration"
	var out []string
	for _, p := range path {
		f, ok := s.field(typ, p)
		if !ok || f.json == "" {
			return "", false
		}
		out = append(out, f.json)
		if f.typ == "" {
			break
		}
		typ = f.typ
	}
	return strings.Join(out, "."), true
}

// mapEntry says the internal field path out holds the v1alpha1 field path
// in, in modes.
type mapEntry struct {
	out, in []string
	modes   Modes
}

// conversion reads Convert_v1alpha1_KubeProxyConfiguration_To_config_...
// and what it calls in its package.
func conversion(files []*file) ([]mapEntry, error) {
	funcs := map[string]*ast.FuncDecl{}
	for _, f := range files {
		for _, d := range f.ast.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Recv == nil {
				funcs[fd.Name.Name] = fd
			}
		}
	}
	const top = "Convert_v1alpha1_KubeProxyConfiguration_To_config_KubeProxyConfiguration"
	if funcs[top] == nil {
		return nil, fmt.Errorf("no %s in kube-proxy's conversion package", top)
	}
	c := &converter{funcs: funcs}
	c.fn(funcs[top], nil, nil, All, 0)
	if len(c.out) == 0 {
		return nil, fmt.Errorf("%s converts no field this package can read", top)
	}
	return c.out, nil
}

type converter struct {
	funcs map[string]*ast.FuncDecl
	out   []mapEntry
}

func (c *converter) fn(fd *ast.FuncDecl, inPrefix, outPrefix []string, modes Modes, depth int) {
	if depth > 10 || fd.Body == nil {
		return
	}
	params := fd.Type.Params.List
	if len(params) < 2 || len(params[0].Names) == 0 || len(params[1].Names) == 0 {
		return
	}
	in, out := params[0].Names[0].Name, params[1].Names[0].Name
	cs := &convScope{c: c, in: in, out: out, inPrefix: inPrefix, outPrefix: outPrefix, depth: depth}
	cs.stmts(fd.Body.List, modes)
}

type convScope struct {
	c                   *converter
	in, out             string
	inPrefix, outPrefix []string
	depth               int
}

// chain returns the field path of a selector chain rooted at root.
func chain(e ast.Expr, root string) ([]string, bool) {
	var path []string
	for {
		switch x := e.(type) {
		case *ast.ParenExpr:
			e = x.X
		case *ast.StarExpr:
			e = x.X
		case *ast.UnaryExpr:
			if x.Op != token.AND {
				return nil, false
			}
			e = x.X
		case *ast.SelectorExpr:
			path = append([]string{x.Sel.Name}, path...)
			e = x.X
		case *ast.Ident:
			return path, x.Name == root
		default:
			return nil, false
		}
	}
}

func (cs *convScope) modeExpr(e ast.Expr) bool {
	e = unconvert(e)
	p, ok := chain(e, cs.in)
	return ok && len(cs.inPrefix) == 0 && len(p) == 1 && p[0] == "Mode"
}

func (cs *convScope) stmts(list []ast.Stmt, modes Modes) {
	for _, s := range list {
		switch s := s.(type) {
		case *ast.AssignStmt:
			for i, lhs := range s.Lhs {
				op, ok := chain(lhs, cs.out)
				if !ok || i >= len(s.Rhs) {
					continue
				}
				ast.Inspect(s.Rhs[i], func(n ast.Node) bool {
					e, isExpr := n.(ast.Expr)
					if !isExpr {
						return true
					}
					if ip, ok := chain(e, cs.in); ok && len(cs.inPrefix)+len(ip) > 0 {
						cs.c.out = append(cs.c.out, mapEntry{out: join(cs.outPrefix, op), in: join(cs.inPrefix, ip), modes: modes})
						return false
					}
					return true
				})
			}
		case *ast.IfStmt:
			if s.Init != nil {
				cs.stmts([]ast.Stmt{s.Init}, modes)
			}
			t, f := cs.cond(s.Cond)
			cs.stmts(s.Body.List, modes&t)
			if s.Else != nil {
				cs.stmts([]ast.Stmt{s.Else}, modes&f)
			}
		case *ast.BlockStmt:
			cs.stmts(s.List, modes)
		case *ast.SwitchStmt:
			if s.Tag == nil || !cs.modeExpr(s.Tag) {
				for _, cc := range s.Body.List {
					cs.stmts(cc.(*ast.CaseClause).Body, modes)
				}
				continue
			}
			var listed Modes
			for _, cc := range s.Body.List {
				for _, v := range cc.(*ast.CaseClause).List {
					listed |= modeConst(v)
				}
			}
			for _, cc := range s.Body.List {
				clause := cc.(*ast.CaseClause)
				m := All &^ listed
				if clause.List != nil {
					m = 0
					for _, v := range clause.List {
						m |= modeConst(v)
					}
				}
				cs.stmts(clause.Body, modes&m)
			}
		case *ast.ExprStmt:
			cs.call(s.X, modes)
		case *ast.ReturnStmt:
			for _, r := range s.Results {
				cs.call(r, modes)
			}
		}
		// a conversion call in an if's init: if err := Convert_...(&in.X, &out.Y, s)
		if is, ok := s.(*ast.IfStmt); ok && is.Init != nil {
			if as, ok := is.Init.(*ast.AssignStmt); ok && len(as.Rhs) == 1 {
				cs.call(as.Rhs[0], modes)
			}
		}
	}
}

// call follows Convert_X(&in.A, &out.B, s): into X when it is of this
// package, else (another package's) as a whole-object mapping B <- A.
func (cs *convScope) call(e ast.Expr, modes Modes) {
	ce, ok := e.(*ast.CallExpr)
	if !ok || len(ce.Args) < 2 {
		return
	}
	ip, ok1 := chain(ce.Args[0], cs.in)
	op, ok2 := chain(ce.Args[1], cs.out)
	if !ok1 || !ok2 {
		return
	}
	if id, ok := ce.Fun.(*ast.Ident); ok && cs.c.funcs[id.Name] != nil {
		cs.c.fn(cs.c.funcs[id.Name], join(cs.inPrefix, ip), join(cs.outPrefix, op), modes, cs.depth+1)
		return
	}
	cs.c.out = append(cs.c.out, mapEntry{out: join(cs.outPrefix, op), in: join(cs.inPrefix, ip), modes: modes})
}

func (cs *convScope) cond(e ast.Expr) (t, f Modes) {
	switch x := e.(type) {
	case *ast.ParenExpr:
		return cs.cond(x.X)
	case *ast.UnaryExpr:
		if x.Op == token.NOT {
			t, f = cs.cond(x.X)
			return f, t
		}
	case *ast.BinaryExpr:
		switch x.Op {
		case token.LAND:
			t1, f1 := cs.cond(x.X)
			t2, f2 := cs.cond(x.Y)
			return t1 & t2, f1 | f2
		case token.LOR:
			t1, f1 := cs.cond(x.X)
			t2, f2 := cs.cond(x.Y)
			return t1 | t2, f1 & f2
		case token.EQL, token.NEQ:
			var m Modes
			switch {
			case cs.modeExpr(x.X):
				m = modeConst(x.Y)
			case cs.modeExpr(x.Y):
				m = modeConst(x.X)
			default:
				return All, All
			}
			t, f = m, All&^m
			if x.Op == token.NEQ {
				t, f = f, t
			}
			return t, f
		}
	}
	return All, All
}

func join(a, b []string) []string {
	return append(append([]string{}, a...), b...)
}

// unconvert strips a conversion to a mode type: config.ProxyMode(in.Mode),
// string(mode).
func unconvert(e ast.Expr) ast.Expr {
	for {
		switch x := e.(type) {
		case *ast.ParenExpr:
			e = x.X
			continue
		case *ast.CallExpr:
			if len(x.Args) == 1 && (isSel(x.Fun, "ProxyMode") || isIdent(x.Fun, "string")) {
				e = x.Args[0]
				continue
			}
		}
		return e
	}
}

func isSel(e ast.Expr, name string) bool {
	s, ok := e.(*ast.SelectorExpr)
	return ok && s.Sel.Name == name
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

// modeConst is the mode a constant names (ProxyModeIPVS, "ipvs"); the empty
// mode is the OS's default (iptables on Linux, kernelspace on Windows).
func modeConst(e ast.Expr) Modes {
	switch x := e.(type) {
	case *ast.SelectorExpr:
		return modeConst(x.Sel)
	case *ast.Ident:
		switch x.Name {
		case "ProxyModeIPTables":
			return IPTables
		case "ProxyModeIPVS":
			return IPVS
		case "ProxyModeNFTables":
			return NFTables
		case "ProxyModeKernelspace":
			return Kernelspace
		}
	case *ast.BasicLit:
		if x.Kind == token.STRING {
			s := strings.Trim(x.Value, "`\"")
			if s == "" {
				return IPTables | Kernelspace
			}
			return modeNamed(s)
		}
	}
	return 0
}

// resolve turns the raw reads into json paths through the conversion.
func (a *analyzer) resolve(mapping []mapEntry, external structs) Result {
	var res Result
	seen := map[string]bool{}
	for _, r := range a.reads {
		internal := strings.Join(r.path, ".")
		if len(r.path) == 0 {
			// the whole configuration, handed to code this does not follow
			read := Read{Pos: r.pos, Func: r.fn, Modes: r.modes, Uncertain: r.uncertain, Via: r.via}
			key := fmt.Sprintf("%+v", read)
			if !seen[key] {
				seen[key] = true
				res.Reads = append(res.Reads, read)
			}
			continue
		}
		found := false
		for _, m := range mapping {
			var in []string
			switch {
			case hasPrefix(r.path, m.out):
				in = join(m.in, r.path[len(m.out):])
			case hasPrefix(m.out, r.path):
				in = m.in
			default:
				continue
			}
			modes := r.modes & m.modes
			if modes == 0 {
				continue // that mode's conversion does not fill it
			}
			path, ok := external.jsonPath(in)
			if !ok {
				continue
			}
			found = true
			read := Read{Pos: r.pos, Func: r.fn, Path: path, Internal: internal, Modes: modes, Uncertain: r.uncertain}
			key := fmt.Sprintf("%+v", read)
			if !seen[key] {
				seen[key] = true
				res.Reads = append(res.Reads, read)
			}
		}
		if !found {
			u := Unmapped{Pos: r.pos, Func: r.fn, Internal: internal}
			key := fmt.Sprintf("%+v", u)
			if !seen[key] {
				seen[key] = true
				res.Unmapped = append(res.Unmapped, u)
			}
		}
	}
	sort.Slice(res.Reads, func(i, j int) bool {
		if res.Reads[i].Pos != res.Reads[j].Pos {
			return res.Reads[i].Pos < res.Reads[j].Pos
		}
		return res.Reads[i].Path < res.Reads[j].Path
	})
	return res
}

func hasPrefix(p, prefix []string) bool {
	if len(prefix) > len(p) {
		return false
	}
	for i := range prefix {
		if p[i] != prefix[i] {
			return false
		}
	}
	return true
}

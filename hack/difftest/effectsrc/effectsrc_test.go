package effectsrc

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A kube-proxy in miniature: the internal type, its v1alpha1 twin with json
// names, and a conversion that, like 1.31's, fills the internal SyncPeriod
// from the running mode's block.
var fixture = map[string]string{
	"k8s/pkg/proxy/apis/config/types.go": `package config

type KubeProxyConfiguration struct {
	Mode       ProxyMode
	IPVS       KubeProxyIPVSConfiguration
	SyncPeriod metav1.Duration
	Internal   string
}

type KubeProxyIPVSConfiguration struct {
	Scheduler string
	StrictARP bool
}
`,
	"k8s/pkg/proxy/apis/config/v1alpha1/conversion.go": `package v1alpha1

func Convert_v1alpha1_KubeProxyConfiguration_To_config_KubeProxyConfiguration(in *v1alpha1.KubeProxyConfiguration, out *config.KubeProxyConfiguration, s conversion.Scope) error {
	if err := autoConvert(in, out, s); err != nil {
		return err
	}
	switch config.ProxyMode(in.Mode) {
	case config.ProxyModeIPVS:
		out.SyncPeriod = in.IPVS.SyncPeriod
	default:
		out.SyncPeriod = in.IPTables.SyncPeriod
	}
	return nil
}

func autoConvert(in *v1alpha1.KubeProxyConfiguration, out *config.KubeProxyConfiguration, s conversion.Scope) error {
	out.Mode = config.ProxyMode(in.Mode)
	if err := Convert_IPVS(&in.IPVS, &out.IPVS, s); err != nil {
		return err
	}
	return nil
}

func Convert_IPVS(in *v1alpha1.KubeProxyIPVSConfiguration, out *config.KubeProxyIPVSConfiguration, s conversion.Scope) error {
	*out = *(*config.KubeProxyIPVSConfiguration)(unsafe.Pointer(in))
	return nil
}
`,
	"kp/config/v1alpha1/types.go": `package v1alpha1

type KubeProxyConfiguration struct {
	Mode     ProxyMode                      ` + "`json:\"mode\"`" + `
	IPTables KubeProxyIPTablesConfiguration ` + "`json:\"iptables\"`" + `
	IPVS     KubeProxyIPVSConfiguration     ` + "`json:\"ipvs\"`" + `
}

type KubeProxyIPTablesConfiguration struct {
	SyncPeriod metav1.Duration ` + "`json:\"syncPeriod\"`" + `
}

type KubeProxyIPVSConfiguration struct {
	SyncPeriod metav1.Duration ` + "`json:\"syncPeriod\"`" + `
	Scheduler  string          ` + "`json:\"scheduler\"`" + `
	StrictARP  bool            ` + "`json:\"strictARP\"`" + `
}
`,
}

const appHeader = `package app

import (
	"fmt"

	proxyconfigapi "k8s.io/kubernetes/pkg/proxy/apis/config"
)

type ProxyServer struct {
	Config *proxyconfigapi.KubeProxyConfiguration
}
`

func TestAnalyze(t *testing.T) {
	cases := []struct {
		name string
		// app is cmd/kube-proxy/app: file name -> body after the header
		app map[string]string
		// want is the modes that read each json path
		want      map[string]Modes
		uncertain bool
	}{
		{"if and else on the mode, in a linux file", map[string]string{"server_linux.go": `
func run(config *proxyconfigapi.KubeProxyConfiguration) {
	if config.Mode == proxyconfigapi.ProxyModeIPVS {
		fmt.Println(config.IPVS.Scheduler)
	} else {
		fmt.Println(config.IPVS.StrictARP)
	}
}`}, map[string]Modes{"mode": Linux, "ipvs.scheduler": IPVS, "ipvs.strictARP": IPTables | NFTables}, false},
		{"switch with a default, in a file of every OS", map[string]string{"server.go": `
func run(config *proxyconfigapi.KubeProxyConfiguration) {
	switch config.Mode {
	case proxyconfigapi.ProxyModeIPVS, proxyconfigapi.ProxyModeNFTables:
		fmt.Println(config.IPVS.Scheduler)
	default:
		fmt.Println(config.IPVS.StrictARP)
	}
}`}, map[string]Modes{"mode": All, "ipvs.scheduler": IPVS | NFTables, "ipvs.strictARP": IPTables | Kernelspace}, false},
		{"after an early return", map[string]string{"server.go": `
func run(config *proxyconfigapi.KubeProxyConfiguration) error {
	if config.Mode != proxyconfigapi.ProxyModeIPVS {
		return nil
	}
	fmt.Println(config.IPVS.Scheduler)
	return nil
}`}, map[string]Modes{"mode": All, "ipvs.scheduler": IPVS}, false},
		{"a predicate on the mode, through a struct field", map[string]string{"server.go": `
func isIPTablesBased(mode proxyconfigapi.ProxyMode) bool {
	return mode == proxyconfigapi.ProxyModeIPTables || mode == proxyconfigapi.ProxyModeIPVS
}

func (s *ProxyServer) run() {
	if isIPTablesBased(s.Config.Mode) {
		fmt.Println(s.Config.IPVS.StrictARP)
	}
}`}, map[string]Modes{"mode": All, "ipvs.strictARP": IPTables | IPVS}, false},
		{"a helper reads what the branch hands it", map[string]string{"server.go": `
func run(config *proxyconfigapi.KubeProxyConfiguration) {
	if config.Mode == proxyconfigapi.ProxyModeIPVS {
		helper(config.IPVS)
	}
}

func helper(c proxyconfigapi.KubeProxyIPVSConfiguration) {
	fmt.Println(c.Scheduler)
}`}, map[string]Modes{"mode": All, "ipvs.scheduler": IPVS}, false},
		{"a windows file: kernelspace only; a file of another OS: never", map[string]string{
			"server_windows.go": `
func run(config *proxyconfigapi.KubeProxyConfiguration) {
	fmt.Println(config.IPVS.Scheduler)
}`,
			"server_other.go": "//go:build !windows && !linux\n\n" + `
func run(config *proxyconfigapi.KubeProxyConfiguration) {
	fmt.Println(config.IPVS.StrictARP)
}`}, map[string]Modes{"ipvs.scheduler": Kernelspace}, false},
		{"the conversion decides which block a field comes from", map[string]string{"server.go": `
func run(config *proxyconfigapi.KubeProxyConfiguration) {
	fmt.Println(config.SyncPeriod.Duration)
}`}, map[string]Modes{"ipvs.syncPeriod": IPVS, "iptables.syncPeriod": IPTables | NFTables | Kernelspace}, false},
		{"a write is not a read", map[string]string{"server.go": `
func run(config *proxyconfigapi.KubeProxyConfiguration) {
	config.IPVS.Scheduler = "rr"
}`}, map[string]Modes{}, false},
		{"a condition on the mode it cannot evaluate", map[string]string{"server.go": `
func run(config *proxyconfigapi.KubeProxyConfiguration, other proxyconfigapi.ProxyMode) {
	if config.Mode == other {
		fmt.Println(config.IPVS.Scheduler)
	}
}`}, map[string]Modes{"mode": All, "ipvs.scheduler": All}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			files := map[string]string{}
			for name, body := range fixture {
				files[name] = body
			}
			for name, body := range tc.app {
				if strings.HasPrefix(body, "//go:build") {
					build, rest, _ := strings.Cut(body, "\n\n")
					files["k8s/cmd/kube-proxy/app/"+name] = build + "\n\n" + appHeader + rest
					continue
				}
				files["k8s/cmd/kube-proxy/app/"+name] = appHeader + body
			}
			for name, body := range files {
				path := filepath.Join(dir, name)
				require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
				require.NoError(t, os.WriteFile(path, []byte(body), 0o644))
			}
			res, err := Analyze(filepath.Join(dir, "k8s"), filepath.Join(dir, "kp"))
			require.NoError(t, err)
			got := map[string]Modes{}
			uncertain := false
			for _, r := range res.Reads {
				got[r.Path] |= r.Modes
				uncertain = uncertain || r.Uncertain != "" && r.Path == "ipvs.scheduler"
			}
			assert.Equal(t, tc.want, got)
			assert.Equal(t, tc.uncertain, uncertain, "reads under a condition it cannot evaluate")
			assert.Empty(t, res.Unmapped)
		})
	}
}

func TestAnalyzeUnmapped(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{"k8s/cmd/kube-proxy/app/server.go": appHeader + `
func run(config *proxyconfigapi.KubeProxyConfiguration) {
	fmt.Println(config.Internal)
}`}
	for name, body := range fixture {
		files[name] = body
	}
	for name, body := range files {
		path := filepath.Join(dir, name)
		require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
		require.NoError(t, os.WriteFile(path, []byte(body), 0o644))
	}
	res, err := Analyze(filepath.Join(dir, "k8s"), filepath.Join(dir, "kp"))
	require.NoError(t, err)
	require.Len(t, res.Unmapped, 1)
	assert.Equal(t, "Internal", res.Unmapped[0].Internal)
	assert.Contains(t, strings.Join(Check(37, res).Problems, "\n"), "cannot classify")
}

func TestCheck(t *testing.T) {
	cases := []struct {
		name string
		read Read
		// problem is a text the report must hold ("": none about the
		// read's field beyond a missing read)
		problem string
	}{
		{"a field of ipvs read in iptables mode",
			Read{Pos: "server.go:1", Func: "run", Path: "ipvs.strictARP", Modes: IPTables | IPVS},
			"ipvs.strictARP: the table says only mode ipvs reads it, but server.go:1 (run) reads ipvs.strictARP in mode iptables"},
		{"a field no mode reads, read",
			Read{Pos: "server.go:1", Func: "run", Path: "portRange", Modes: IPTables},
			"portRange: the table says no mode reads it"},
		{"the whole configuration handed to code not followed",
			Read{Pos: "server.go:1", Func: "run", Via: "somewhere.Else", Modes: All},
			"reads the whole configuration, handed to somewhere.Else, in mode"},
		{"an object read whole covers its fields",
			Read{Pos: "server.go:1", Func: "run", Path: "winkernel", Modes: Linux},
			"winkernel.enableDSR: the table says only mode kernelspace reads it"},
		{"a condition it cannot evaluate",
			Read{Pos: "server.go:1", Func: "run", Path: "ipvs.scheduler", Modes: All, Uncertain: "config.Mode == other"},
			"cannot classify"},
		{"a field the table does not have",
			Read{Pos: "server.go:1", Func: "run", Path: "ipvs.noSuchField", Modes: IPVS},
			"a field the table does not have"},
		{"flag registration is excepted",
			Read{Pos: "options.go:1", Func: "(*Options).AddFlags", Path: "ipvs.scheduler", Modes: All}, ""},
		{"validation is excepted",
			Read{Pos: "options.go:1", Func: "(*Options).Validate", Via: "validation.Validate", Modes: All}, ""},
		{"the oom exception is for windows only",
			Read{Pos: "server.go:1", Func: "(*ProxyServer).Run", Path: "oomScoreAdj", Modes: All}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			rep := Check(37, Result{Reads: []Read{tc.read}})
			var others []string
			for _, p := range rep.Problems {
				if !strings.Contains(p, "but no read in that mode was found") {
					others = append(others, p)
				}
			}
			if tc.problem == "" {
				assert.Empty(t, others)
				return
			}
			assert.Contains(t, strings.Join(others, "\n"), tc.problem)
		})
	}
	// a read in one of the table's modes only, and a missing one
	rep := Check(37, Result{Reads: []Read{{Pos: "a.go:1", Func: "f", Path: "ipvs.scheduler", Modes: IPVS}}})
	assert.NotContains(t, strings.Join(rep.Problems, "\n"), "ipvs.scheduler")
	assert.Contains(t, rep.Problems, "ipvs.strictARP: the table says mode ipvs reads it, but no read in that mode was found")
	// the oom exception does not excuse a Linux-only field read on Windows elsewhere
	rep = Check(37, Result{Reads: []Read{{Pos: "a.go:1", Func: "f", Path: "oomScoreAdj", Modes: Kernelspace}}})
	assert.Contains(t, strings.Join(rep.Problems, "\n"), "oomScoreAdj: the table says only mode iptables,ipvs,nftables reads it, but a.go:1 (f)")
}

func TestParseModes(t *testing.T) {
	assert.Equal(t, All, ParseModes("*"))
	assert.Equal(t, Modes(0), ParseModes("-"))
	assert.Equal(t, IPTables|Kernelspace, ParseModes("iptables,kernelspace"))
	assert.Equal(t, "iptables,ipvs", (IPTables | IPVS).String())
}

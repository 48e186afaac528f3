package app

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kpsync"
)

// sidecarDocs is the part of a binary module's sidecar documentation
// (plugins/modules/NAME.yml) that must agree with the binary.
type sidecarDocs struct {
	Documentation struct {
		Module  string `json:"module"`
		Options map[string]struct {
			Type    string        `json:"type"`
			Default interface{}   `json:"default"`
			Choices []interface{} `json:"choices"`
		} `json:"options"`
	} `json:"DOCUMENTATION"`
	Return map[string]interface{} `json:"RETURN"`
}

func loadSidecar(t *testing.T, arch string) sidecarDocs {
	t.Helper()
	path := filepath.Join("..", "..", "plugins", "modules", "kube_proxy_sync_linux_"+arch+".yml")
	raw, err := os.ReadFile(path)
	require.NoError(t, err)
	var d sidecarDocs
	require.NoError(t, yaml.Unmarshal(raw, &d), path)
	require.Equal(t, "kube_proxy_sync_linux_"+arch, d.Documentation.Module)
	return d
}

// The module's documented return values are exactly what it prints (its
// options come from the option table: hack/gen-options, make verify).
func TestSidecarDocsMatchTheBinary(t *testing.T) {
	for _, arch := range []string{"amd64", "arm64"} {
		t.Run(arch, func(t *testing.T) {
			d := loadSidecar(t, arch)
			// moduleResult's own keys but Ansible's standard ones, and the facts
			var returned []string
			own := reflect.TypeOf(moduleResult{})
			for i := 0; i < own.NumField(); i++ {
				key := strings.Split(own.Field(i).Tag.Get("json"), ",")[0]
				if !own.Field(i).Anonymous && !slices.Contains([]string{"changed", "failed", "warnings"}, key) {
					returned = append(returned, key)
				}
			}
			facts := reflect.TypeOf(kpsync.Facts{})
			for i := 0; i < facts.NumField(); i++ {
				returned = append(returned, strings.Split(facts.Field(i).Tag.Get("json"), ",")[0])
			}
			sort.Strings(returned)
			documentedReturn := make([]string, 0, len(d.Return))
			for name := range d.Return {
				documentedReturn = append(documentedReturn, name)
			}
			sort.Strings(documentedReturn)
			assert.Equal(t, returned, documentedReturn, "RETURN must list exactly the result's keys (besides changed and failed)")

			// a key holding an object lists exactly its keys under contains
			for i := 0; i < facts.NumField(); i++ {
				typ := facts.Field(i).Type
				if typ.Kind() == reflect.Pointer {
					typ = typ.Elem()
				}
				if typ.Kind() != reflect.Struct {
					continue
				}
				key := strings.Split(facts.Field(i).Tag.Get("json"), ",")[0]
				var want []string
				for j := 0; j < typ.NumField(); j++ {
					want = append(want, strings.Split(typ.Field(j).Tag.Get("json"), ",")[0])
				}
				entry, _ := d.Return[key].(map[string]interface{})
				contains, _ := entry["contains"].(map[string]interface{})
				documented := make([]string, 0, len(contains))
				for name := range contains {
					documented = append(documented, name)
				}
				assert.ElementsMatch(t, want, documented, "RETURN.%s.contains must list exactly its keys", key)
			}
		})
	}
}

// Each documented default is what the binary does when the option is left
// out: the default, passed explicitly, changes no option.
func TestSidecarDefaultsAreTheBinarys(t *testing.T) {
	d := loadSidecar(t, "amd64")
	for name, opt := range d.Documentation.Options {
		if opt.Default == nil {
			continue
		}
		t.Run(name, func(t *testing.T) {
			raw, err := json.Marshal(map[string]interface{}{name: opt.Default})
			require.NoError(t, err)
			o := NewOptions()
			require.NoError(t, ParseArgs(raw, o))
			assert.Equal(t, NewOptions(), o)
			for _, choice := range opt.Choices {
				raw, err := json.Marshal(map[string]interface{}{name: choice})
				require.NoError(t, err)
				o := NewOptions()
				require.NoError(t, ParseArgs(raw, o))
				require.NoError(t, o.Complete())
				assert.NoError(t, o.Validate(context.Background()), "documented choice %v", choice)
			}
		})
	}
}

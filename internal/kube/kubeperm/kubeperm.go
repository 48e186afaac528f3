// Package kubeperm derives the RBAC permissions kube-proxy-sync needs from
// its client surface, kube.Interface: the product implements only those
// calls (internal/kube), so every verb it can send is a method there, and
// a method added or removed changes what rbac.yaml must grant. Only tests
// import it.
package kubeperm

import (
	"fmt"
	"reflect"
	"sort"
	"strings"

	rbacv1 "k8s.io/api/rbac/v1"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube"
)

// Permission is one verb on one resource.
type Permission struct {
	Group, Resource, Verb string
	// Namespaced: granted by the Role (the run's namespace), else by the ClusterRole.
	Namespaced bool
}

func (p Permission) String() string {
	r := p.Resource
	if p.Group != "" {
		r += "." + p.Group
	}
	return p.Verb + " " + r
}

// resources maps each kube.Interface accessor to its API resource.
var resources = map[string]Permission{
	"ConfigMaps":               {Resource: "configmaps", Namespaced: true},
	"DaemonSets":               {Group: "apps", Resource: "daemonsets", Namespaced: true},
	"ControllerRevisions":      {Group: "apps", Resource: "controllerrevisions", Namespaced: true},
	"Pods":                     {Resource: "pods", Namespaced: true},
	"Nodes":                    {Resource: "nodes"},
	"Services":                 {Resource: "services", Namespaced: true},
	"Leases":                   {Group: "coordination.k8s.io", Resource: "leases", Namespaced: true},
	"Events":                   {Resource: "events", Namespaced: true},
	"SelfSubjectAccessReviews": {Group: "authorization.k8s.io", Resource: "selfsubjectaccessreviews"},
	"ServiceAccounts":          {Resource: "serviceaccounts", Namespaced: true},
	"Roles":                    {Group: "rbac.authorization.k8s.io", Resource: "roles", Namespaced: true},
	"RoleBindings":             {Group: "rbac.authorization.k8s.io", Resource: "rolebindings", Namespaced: true},
	"ClusterRoleBindings":      {Group: "rbac.authorization.k8s.io", Resource: "clusterrolebindings"},
}

// rawCalls are the kube.Interface methods that are not a typed resource:
// what they reach, or "" for what every authenticated user may do.
var rawCalls = map[string]*Permission{
	"ServerVersion": nil, // GET /version: system:public-info-viewer
	// GET /api/v1/nodes/NODE:PORT/proxy/PATH (--verify-health, --verify-endpoints)
	"GetRaw": {Resource: "nodes/proxy", Verb: "get"},
}

// Optional are the permissions only some flags need; rbac.yaml carries
// them commented out, with the flag that needs them.
var Optional = map[Permission]string{
	{Resource: "pods", Verb: "create", Namespaced: true}:                                            "--verify-traffic",
	{Resource: "services", Verb: "get", Namespaced: true}:                                           "--verify-traffic",
	{Resource: "services", Verb: "create", Namespaced: true}:                                        "a proxy-mode change",
	{Resource: "services", Verb: "list", Namespaced: true}:                                          "a proxy-mode change",
	{Resource: "services", Verb: "delete", Namespaced: true}:                                        "a proxy-mode change",
	{Resource: "nodes/proxy", Verb: "get"}:                                                          "--verify-health",
	{Group: "authorization.k8s.io", Resource: "selfsubjectaccessreviews", Verb: "create"}:           "",
	{Resource: "serviceaccounts", Verb: "get", Namespaced: true}:                                    "--template kubeadm",
	{Resource: "serviceaccounts", Verb: "patch", Namespaced: true}:                                  "--template kubeadm",
	{Group: "rbac.authorization.k8s.io", Resource: "roles", Verb: "get", Namespaced: true}:          "--template kubeadm",
	{Group: "rbac.authorization.k8s.io", Resource: "roles", Verb: "patch", Namespaced: true}:        "--template kubeadm",
	{Group: "rbac.authorization.k8s.io", Resource: "rolebindings", Verb: "get", Namespaced: true}:   "--template kubeadm",
	{Group: "rbac.authorization.k8s.io", Resource: "rolebindings", Verb: "patch", Namespaced: true}: "--template kubeadm",
	{Group: "rbac.authorization.k8s.io", Resource: "clusterrolebindings", Verb: "get"}:              "--template kubeadm",
	{Group: "rbac.authorization.k8s.io", Resource: "clusterrolebindings", Verb: "patch"}:            "--template kubeadm",
	{Resource: "nodes", Verb: "patch"}:                                                              "--split and --merge",
	{Group: "apps", Resource: "daemonsets", Verb: "create", Namespaced: true}:                       "--split and --merge",
	{Group: "apps", Resource: "daemonsets", Verb: "delete", Namespaced: true}:                       "--split and --merge",
}

// Calls lists every permission a call of kube.Interface can need, sorted.
// It fails on an accessor or method it does not know, so that a new call
// is looked at.
func Calls() ([]Permission, error) {
	var out []Permission
	it := reflect.TypeOf((*kube.Interface)(nil)).Elem()
	for i := range it.NumMethod() {
		m := it.Method(i)
		if raw, ok := rawCalls[m.Name]; ok {
			if raw != nil {
				out = append(out, *raw)
			}
			continue
		}
		res, ok := resources[m.Name]
		if !ok || m.Type.NumOut() != 1 || m.Type.Out(0).Kind() != reflect.Interface {
			return nil, fmt.Errorf("kube.Interface.%s: not a known resource accessor; add it to kubeperm", m.Name)
		}
		typed := m.Type.Out(0)
		for j := range typed.NumMethod() {
			verb := strings.ToLower(typed.Method(j).Name)
			switch verb {
			case "get", "list", "watch", "create", "update", "patch", "delete":
			default:
				return nil, fmt.Errorf("kube.Interface.%s().%s: not an API verb; add it to kubeperm", m.Name, typed.Method(j).Name)
			}
			p := res
			p.Verb = verb
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out, nil
}

// Required is Calls without the Optional permissions: what rbac.yaml grants.
func Required() ([]Permission, error) {
	calls, err := Calls()
	if err != nil {
		return nil, err
	}
	var out []Permission
	for _, p := range calls {
		if _, opt := Optional[p]; !opt {
			out = append(out, p)
		}
	}
	return out, nil
}

// Granted lists what the rules grant, one Permission per verb and resource.
func Granted(rules []rbacv1.PolicyRule, namespaced bool) []Permission {
	seen := map[Permission]bool{}
	var out []Permission
	for _, r := range rules {
		for _, g := range r.APIGroups {
			for _, res := range r.Resources {
				for _, v := range r.Verbs {
					p := Permission{Group: g, Resource: res, Verb: v, Namespaced: namespaced}
					if !seen[p] {
						seen[p] = true
						out = append(out, p)
					}
				}
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].String() < out[j].String() })
	return out
}

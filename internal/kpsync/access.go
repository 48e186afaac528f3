package kpsync

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"
)

// kube-proxy's access as kubeadm renders it (--template kubeadm): its
// ServiceAccount, the binding of that to system:node-proxier, and the Role
// and RoleBinding that let joining nodes read the ConfigMap. kubeadm's
// addon phase writes them with the ConfigMap and the DaemonSet; an upgrade
// that hands the addon to kube-proxy-sync skips that phase, so what a new
// kubeadm changes in them reaches the cluster here, before the restart
// (new pods may need it). Each object is read; one that is missing or
// differs in what kubeadm sets is server-side applied as kubeadm renders
// it, in kubeadm's namespace.

// accessWrite is one object of kubeadm's rendering to apply.
type accessWrite struct {
	// what names it, e.g. "role kube-system/kube-proxy"
	what string
	// the object, for the permission check before any write; missing:
	// the apply creates it (which the API server checks as create)
	group, resource, namespace, name string
	missing                          bool
	apply                            func(ctx context.Context) error
}

// planAccess reads each object of kubeadm's rendering and returns those
// to write.
func planAccess(ctx context.Context, e *env) ([]accessWrite, error) {
	a, k := e.o.Access, e.d.Kube
	var out []accessWrite
	add := func(w *accessWrite, err error) error {
		if w != nil {
			out = append(out, *w)
		}
		return err
	}
	for _, sa := range a.ServiceAccounts {
		c := k.ServiceAccounts(sa.Namespace)
		err := add(planWrite(ctx, "", "serviceaccounts", sa, c.Get, c.Patch, func(*corev1.ServiceAccount) (bool, error) {
			return true, nil // kubeadm sets nothing in it but its name
		}))
		if err != nil {
			return nil, err
		}
	}
	for _, r := range a.Roles {
		c := k.Roles(r.Namespace)
		err := add(planWrite(ctx, rbacv1.GroupName, "roles", r, c.Get, c.Patch, func(live *rbacv1.Role) (bool, error) {
			return apiequality.Semantic.DeepEqual(live.Rules, r.Rules), nil
		}))
		if err != nil {
			return nil, err
		}
	}
	for _, b := range a.RoleBindings {
		c := k.RoleBindings(b.Namespace)
		err := add(planWrite(ctx, rbacv1.GroupName, "rolebindings", b, c.Get, c.Patch, func(live *rbacv1.RoleBinding) (bool, error) {
			return sameBinding("rolebinding "+b.Namespace+"/"+b.Name, live.RoleRef, b.RoleRef, live.Subjects, b.Subjects)
		}))
		if err != nil {
			return nil, err
		}
	}
	for _, b := range a.ClusterRoleBindings {
		c := k.ClusterRoleBindings()
		err := add(planWrite(ctx, rbacv1.GroupName, "clusterrolebindings", b, c.Get, c.Patch, func(live *rbacv1.ClusterRoleBinding) (bool, error) {
			return sameBinding("clusterrolebinding "+b.Name, live.RoleRef, b.RoleRef, live.Subjects, b.Subjects)
		}))
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// object is what planWrite needs of kubeadm's object.
type object interface {
	GetNamespace() string
	GetName() string
}

// planWrite reads the live object of resource like want and returns the
// write of want when it is missing or same says it differs (nil: nothing
// to write).
func planWrite[T any](ctx context.Context, group, resource string, want object,
	get func(context.Context, string, metav1.GetOptions) (T, error),
	patch func(context.Context, string, types.PatchType, []byte, metav1.PatchOptions, ...string) (T, error),
	same func(T) (bool, error)) (*accessWrite, error) {
	kind := strings.TrimSuffix(resource, "s")
	what := kind + " " + want.GetName()
	if want.GetNamespace() != "" {
		what = kind + " " + want.GetNamespace() + "/" + want.GetName()
	}
	w := &accessWrite{what: what, group: group, resource: resource, namespace: want.GetNamespace(), name: want.GetName()}
	live, err := get(ctx, want.GetName(), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		w.missing = true
	case err != nil:
		return nil, fmt.Errorf("read %s (kubeadm's kube-proxy addon, --template kubeadm): %w", what, err)
	default:
		if ok, err := same(live); err != nil || ok {
			return nil, err
		}
	}
	body, err := applyBody(want)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	w.apply = func(ctx context.Context) error {
		_, err := patch(ctx, want.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: "kube-proxy-sync", Force: ptr.To(true)})
		if err != nil {
			return fmt.Errorf("apply %s as kubeadm renders it (--template kubeadm): %w; the kubeconfig user needs get and patch on it (create when it is missing) and the permissions it grants, or bind (see roles/kpsync/files/rbac.yaml); nothing was restarted", what, err)
		}
		return nil
	}
	return w, nil
}

// applyBody is obj as a server-side apply sends it: kubeadm's fields only.
func applyBody(obj any) ([]byte, error) {
	raw, err := json.Marshal(obj)
	if err != nil {
		return nil, err
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, err
	}
	if meta, ok := m["metadata"].(map[string]any); ok {
		delete(meta, "creationTimestamp")
	}
	return json.Marshal(m)
}

// sameBinding compares a binding with kubeadm's: its subjects as the API
// server defaults kubeadm's (a User or Group subject without an apiGroup
// is rbac.authorization.k8s.io's), and its roleRef, which cannot change.
func sameBinding(what string, liveRef, wantRef rbacv1.RoleRef, live, want []rbacv1.Subject) (bool, error) {
	if liveRef != wantRef {
		return false, fmt.Errorf("%s refers to %s %s, kubeadm's to %s %s, and a binding's roleRef cannot change: nothing was changed; delete the binding and run again, or run without --template",
			what, liveRef.Kind, liveRef.Name, wantRef.Kind, wantRef.Name)
	}
	defaulted := make([]rbacv1.Subject, len(want))
	for i, s := range want {
		if s.APIGroup == "" && (s.Kind == rbacv1.UserKind || s.Kind == rbacv1.GroupKind) {
			s.APIGroup = rbacv1.GroupName
		}
		defaulted[i] = s
	}
	return apiequality.Semantic.DeepEqual(live, defaulted), nil
}

// writeAccess applies p's access writes (none in check mode) and returns
// what they are.
func writeAccess(ctx context.Context, e *env, p plan) ([]string, error) {
	done := []string{}
	for _, w := range p.access {
		if !e.o.Check {
			if err := w.apply(ctx); err != nil {
				return done, err
			}
			e.d.Log.Infof("applied %s as kubeadm renders it", w.what)
		}
		done = append(done, w.what)
	}
	return done, nil
}

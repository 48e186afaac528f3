package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// The resource interfaces below are the calls kube-proxy-sync makes, with
// the same signatures as client-go's typed clients: the product implements
// them over a REST client that knows only these few types (linking
// client-go's clientset would link every API group, ~20 MB of binary), and
// unit tests pass client-go's fake clientset (see package kubefake).

// ConfigMaps reads and writes ConfigMaps in one namespace (an update of
// the whole data, carrying the resourceVersion the run decided on).
type ConfigMaps interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.ConfigMap, error)
	Update(ctx context.Context, cm *corev1.ConfigMap, opts metav1.UpdateOptions) (*corev1.ConfigMap, error)
	// Create, List and Delete handle the immutable copies the pod
	// template mounts (configmap.NewCopy): created before the restart,
	// listed and deleted by the history's garbage collection.
	Create(ctx context.Context, cm *corev1.ConfigMap, opts metav1.CreateOptions) (*corev1.ConfigMap, error)
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.ConfigMapList, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// DaemonSets reads, watches and patches DaemonSets in one namespace; the
// list finds the other DaemonSets that mount kube-proxy's ConfigMaps (a
// Windows kube-proxy, per-pool DaemonSets), whose config is theirs too.
type DaemonSets interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*appsv1.DaemonSet, error)
	List(ctx context.Context, opts metav1.ListOptions) (*appsv1.DaemonSetList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*appsv1.DaemonSet, error)
	// Create and Delete make and retire a pool's DaemonSet (--split,
	// --merge; see internal/pools).
	Create(ctx context.Context, ds *appsv1.DaemonSet, opts metav1.CreateOptions) (*appsv1.DaemonSet, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// ControllerRevisions lists the revisions of the DaemonSets in one
// namespace: the templates `kubectl rollout undo` can restore, so that the
// history of config copies keeps every ConfigMap one of them mounts.
type ControllerRevisions interface {
	List(ctx context.Context, opts metav1.ListOptions) (*appsv1.ControllerRevisionList, error)
}

// Pods lists, watches and deletes pods in one namespace, and creates the
// connectivity check's probe pods.
type Pods interface {
	Create(ctx context.Context, pod *corev1.Pod, opts metav1.CreateOptions) (*corev1.Pod, error)
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.PodList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// Services reads Services (the connectivity check's target), and creates
// and deletes the one a proxy-mode change checks traffic through when no
// Service is named (see kpsync's probeService).
type Services interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Service, error)
	// List counts the cluster's Services (one item and the count of the
	// rest) before a move to nftables, whose first sync grows with them.
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.ServiceList, error)
	Create(ctx context.Context, svc *corev1.Service, opts metav1.CreateOptions) (*corev1.Service, error)
	Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error
}

// NodeReader reads nodes.
type NodeReader interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.Node, error)
	List(ctx context.Context, opts metav1.ListOptions) (*corev1.NodeList, error)
}

// Nodes reads nodes, and labels one into a pool or out of it (--split,
// --merge; see internal/pools).
type Nodes interface {
	NodeReader
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*corev1.Node, error)
}

// Leases reads and writes Leases in one namespace.
type Leases interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error)
	Create(ctx context.Context, lease *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error)
	Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error)
}

// Events records core/v1 Events in one namespace.
type Events interface {
	Create(ctx context.Context, ev *corev1.Event, opts metav1.CreateOptions) (*corev1.Event, error)
}

// AccessReviews asks the API server what the current user may do.
type AccessReviews interface {
	Create(ctx context.Context, review *authorizationv1.SelfSubjectAccessReview, opts metav1.CreateOptions) (*authorizationv1.SelfSubjectAccessReview, error)
}

// ServiceAccounts, Roles, RoleBindings and ClusterRoleBindings read and
// server-side apply kube-proxy's ServiceAccount and RBAC as kubeadm renders
// them (--template kubeadm: kubeadm's whole addon, whose phase an upgrade
// skips).
type ServiceAccounts interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*corev1.ServiceAccount, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*corev1.ServiceAccount, error)
}

type Roles interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*rbacv1.Role, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*rbacv1.Role, error)
}

type RoleBindings interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*rbacv1.RoleBinding, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*rbacv1.RoleBinding, error)
}

type ClusterRoleBindings interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*rbacv1.ClusterRoleBinding, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*rbacv1.ClusterRoleBinding, error)
}

// Interface is every part of the API kube-proxy-sync uses.
type Interface interface {
	ConfigMaps(namespace string) ConfigMaps
	DaemonSets(namespace string) DaemonSets
	ControllerRevisions(namespace string) ControllerRevisions
	Pods(namespace string) Pods
	Nodes() Nodes
	Services(namespace string) Services
	Leases(namespace string) Leases
	Events(namespace string) Events
	SelfSubjectAccessReviews() AccessReviews
	ServiceAccounts(namespace string) ServiceAccounts
	Roles(namespace string) Roles
	RoleBindings(namespace string) RoleBindings
	ClusterRoleBindings() ClusterRoleBindings
	// ServerVersion is the API server's /version.
	ServerVersion(ctx context.Context) (*version.Info, error)
	// GetRaw GETs an API path, e.g. a node proxy URL.
	GetRaw(ctx context.Context, path string) ([]byte, error)
}

// groups is the API groups the client knows, each with its types.
type groups struct {
	core, apps, coordination, authorization, rbac rest.Interface
}

func (c *Client) ConfigMaps(ns string) ConfigMaps {
	return &resource[*corev1.ConfigMap, *corev1.ConfigMapList]{rest: c.groups.core, namespace: ns, plural: "configmaps"}
}

func (c *Client) DaemonSets(ns string) DaemonSets {
	return &resource[*appsv1.DaemonSet, *appsv1.DaemonSetList]{rest: c.groups.apps, namespace: ns, plural: "daemonsets"}
}

func (c *Client) ControllerRevisions(ns string) ControllerRevisions {
	return &resource[*appsv1.ControllerRevision, *appsv1.ControllerRevisionList]{rest: c.groups.apps, namespace: ns, plural: "controllerrevisions"}
}

func (c *Client) Pods(ns string) Pods {
	return &resource[*corev1.Pod, *corev1.PodList]{rest: c.groups.core, namespace: ns, plural: "pods"}
}

func (c *Client) Nodes() Nodes {
	return &resource[*corev1.Node, *corev1.NodeList]{rest: c.groups.core, plural: "nodes"}
}

func (c *Client) Services(ns string) Services {
	return &resource[*corev1.Service, *corev1.ServiceList]{rest: c.groups.core, namespace: ns, plural: "services"}
}

func (c *Client) Leases(ns string) Leases {
	return &resource[*coordinationv1.Lease, *coordinationv1.LeaseList]{rest: c.groups.coordination, namespace: ns, plural: "leases"}
}

func (c *Client) Events(ns string) Events {
	return &resource[*corev1.Event, *corev1.EventList]{rest: c.groups.core, namespace: ns, plural: "events"}
}

// SelfSubjectAccessReviews creates reviews, which only ask: a repeat is harmless.
func (c *Client) SelfSubjectAccessReviews() AccessReviews {
	return &resource[*authorizationv1.SelfSubjectAccessReview, *authorizationv1.SelfSubjectAccessReview]{rest: c.groups.authorization, plural: "selfsubjectaccessreviews", repeatable: true}
}

func (c *Client) ServiceAccounts(ns string) ServiceAccounts {
	return &resource[*corev1.ServiceAccount, *corev1.ServiceAccountList]{rest: c.groups.core, namespace: ns, plural: "serviceaccounts"}
}

func (c *Client) Roles(ns string) Roles {
	return &resource[*rbacv1.Role, *rbacv1.RoleList]{rest: c.groups.rbac, namespace: ns, plural: "roles"}
}

func (c *Client) RoleBindings(ns string) RoleBindings {
	return &resource[*rbacv1.RoleBinding, *rbacv1.RoleBindingList]{rest: c.groups.rbac, namespace: ns, plural: "rolebindings"}
}

func (c *Client) ClusterRoleBindings() ClusterRoleBindings {
	return &resource[*rbacv1.ClusterRoleBinding, *rbacv1.ClusterRoleBindingList]{rest: c.groups.rbac, plural: "clusterrolebindings"}
}

// ServerVersion GETs /version.
func (c *Client) ServerVersion(ctx context.Context) (*version.Info, error) {
	body, err := c.GetRaw(ctx, "/version")
	if err != nil {
		return nil, err
	}
	var info version.Info
	if err := json.Unmarshal(body, &info); err != nil {
		return nil, fmt.Errorf("decode the API server's /version: %w", err)
	}
	return &info, nil
}

// GetRaw GETs path and returns the body.
func (c *Client) GetRaw(ctx context.Context, path string) ([]byte, error) {
	return c.groups.core.Get().AbsPath(path).MaxRetries(0).DoRaw(ctx)
}

// resource is a typed client for one resource of one group: the REST verbs
// the tool needs, decoded into T (one object) or L (a list).
type resource[T runtime.Object, L runtime.Object] struct {
	rest      rest.Interface
	namespace string // "" for cluster-scoped resources
	plural    string
	// repeatable: creating one twice does no harm (nothing is stored)
	repeatable bool
}

// request starts a request on the resource. client-go's own retries are
// off: the retrying transport is the one retry budget (see NewRetryingTransport).
func (r *resource[T, L]) request(verb string) *rest.Request {
	return r.rest.Verb(verb).NamespaceIfScoped(r.namespace, r.namespace != "").Resource(r.plural).MaxRetries(0)
}

func (r *resource[T, L]) Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error) {
	return into[T](r.request("GET").Name(name).VersionedParams(&opts, metav1.ParameterCodec).Do(ctx))
}

func (r *resource[T, L]) List(ctx context.Context, opts metav1.ListOptions) (L, error) {
	req := r.request("GET").VersionedParams(&opts, metav1.ParameterCodec)
	if opts.TimeoutSeconds != nil {
		req = req.Timeout(time.Duration(*opts.TimeoutSeconds) * time.Second)
	}
	return into[L](req.Do(ctx))
}

func (r *resource[T, L]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	req := r.request("GET").VersionedParams(&opts, metav1.ParameterCodec)
	if opts.TimeoutSeconds != nil {
		req = req.Timeout(time.Duration(*opts.TimeoutSeconds) * time.Second)
	}
	return req.Watch(ctx)
}

func (r *resource[T, L]) Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error) {
	if r.repeatable {
		ctx = Repeatable(ctx)
	}
	return into[T](r.request("POST").VersionedParams(&opts, metav1.ParameterCodec).Body(obj).Do(ctx))
}

func (r *resource[T, L]) Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	m, ok := any(obj).(metav1.Object)
	if !ok {
		var zero T
		return zero, fmt.Errorf("%T has no metadata", obj)
	}
	name := m.GetName()
	if m.GetResourceVersion() != "" {
		ctx = Repeatable(ctx)
	}
	return into[T](r.request("PUT").Name(name).VersionedParams(&opts, metav1.ParameterCodec).Body(obj).Do(ctx))
}

func (r *resource[T, L]) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error) {
	if pt == types.ApplyPatchType || patchHasResourceVersion(pt, data) {
		ctx = Repeatable(ctx)
	}
	return into[T](r.rest.Patch(pt).NamespaceIfScoped(r.namespace, r.namespace != "").Resource(r.plural).MaxRetries(0).
		Name(name).SubResource(subresources...).VersionedParams(&opts, metav1.ParameterCodec).Body(data).Do(ctx))
}

func (r *resource[T, L]) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	if opts.Preconditions != nil && (opts.Preconditions.UID != nil || opts.Preconditions.ResourceVersion != nil) {
		// a repeat of a delete that happened finds the object gone (404)
		// or replaced (409), never deletes a second one
		ctx = Repeatable(ctx)
	}
	return r.request("DELETE").Name(name).Body(&opts).Do(ctx).Error()
}

// into decodes a result into a new T.
func into[T runtime.Object](res rest.Result) (T, error) {
	var out T
	obj, err := res.Get()
	if err != nil {
		return out, err
	}
	out, ok := obj.(T)
	if !ok {
		return out, fmt.Errorf("the API server answered with %T, want %T", obj, out)
	}
	return out, nil
}

// patchHasResourceVersion reports whether a merge patch sets
// metadata.resourceVersion, which the API server checks like an update's.
func patchHasResourceVersion(pt types.PatchType, data []byte) bool {
	if pt != types.StrategicMergePatchType && pt != types.MergePatchType {
		return false
	}
	var p struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	return json.Unmarshal(data, &p) == nil && p.Metadata.ResourceVersion != ""
}

// Package kubefake serves kube.Interface from client-go's fake clientset, for
// unit tests: its object tracker, reactors and recorded actions work as in
// kubectl's tests. Only tests import it, so the binary never links the
// clientset.
package kubefake

import (
	"context"
	"errors"

	authorizationv1 "k8s.io/api/authorization/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube"
)

// New is a fake clientset holding objs and the kube.Interface over it.
// SelfSubjectAccessReviews are answered allowed, as for an admin (the bare
// fake returns them unanswered); prepend a reactor to deny.
func New(objs ...runtime.Object) (*fake.Clientset, kube.Interface) {
	cs := fake.NewClientset(objs...)
	cs.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
		r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview).DeepCopy()
		r.Status.Allowed = true
		return true, r, nil
	})
	return cs, Wrap(cs)
}

// Wrap serves kube.Interface from any clientset.
func Wrap(cs kubernetes.Interface) kube.Interface { return clientset{cs} }

type clientset struct{ cs kubernetes.Interface }

func (c clientset) ConfigMaps(ns string) kube.ConfigMaps { return c.cs.CoreV1().ConfigMaps(ns) }
func (c clientset) DaemonSets(ns string) kube.DaemonSets { return c.cs.AppsV1().DaemonSets(ns) }
func (c clientset) Pods(ns string) kube.Pods             { return c.cs.CoreV1().Pods(ns) }
func (c clientset) Nodes() kube.Nodes                    { return c.cs.CoreV1().Nodes() }
func (c clientset) Services(ns string) kube.Services     { return c.cs.CoreV1().Services(ns) }
func (c clientset) Leases(ns string) kube.Leases         { return c.cs.CoordinationV1().Leases(ns) }
func (c clientset) Events(ns string) kube.Events         { return c.cs.CoreV1().Events(ns) }

func (c clientset) SelfSubjectAccessReviews() kube.AccessReviews {
	return c.cs.AuthorizationV1().SelfSubjectAccessReviews()
}

// ServerVersion is the fake discovery's (set FakedServerVersion to change it).
func (c clientset) ServerVersion(context.Context) (*version.Info, error) {
	return c.cs.Discovery().ServerVersion()
}

// GetRaw is not served by the fake clientset: tests of raw paths use an
// httptest server and kube.NewForConfig.
func (c clientset) GetRaw(context.Context, string) ([]byte, error) {
	return nil, errors.New("kubefake: raw GETs are not faked; use an httptest server with kube.NewForConfig")
}

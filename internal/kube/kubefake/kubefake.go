// Package kubefake serves kube.Interface from client-go's fake clientset, for
// unit tests: its object tracker, reactors and recorded actions work as in
// kubectl's tests. Only tests import it, so the binary never links the
// clientset.
package kubefake

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"

	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
	"k8s.io/apimachinery/pkg/version"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube"
)

// New is a fake clientset holding objs and the kube.Interface over it.
// SelfSubjectAccessReviews are answered allowed, as for an admin (the bare
// fake returns them unanswered); prepend a reactor to deny. DaemonSet
// generations move as on the API server (see DaemonSetGenerations).
func New(objs ...runtime.Object) (*fake.Clientset, kube.Interface) {
	cs := DaemonSetGenerations(fake.NewClientset(objs...))
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
func (c clientset) ControllerRevisions(ns string) kube.ControllerRevisions {
	return c.cs.AppsV1().ControllerRevisions(ns)
}
func (c clientset) Nodes() kube.Nodes                { return c.cs.CoreV1().Nodes() }
func (c clientset) Services(ns string) kube.Services { return c.cs.CoreV1().Services(ns) }
func (c clientset) Leases(ns string) kube.Leases     { return c.cs.CoordinationV1().Leases(ns) }
func (c clientset) Events(ns string) kube.Events     { return c.cs.CoreV1().Events(ns) }

func (c clientset) ServiceAccounts(ns string) kube.ServiceAccounts {
	return c.cs.CoreV1().ServiceAccounts(ns)
}
func (c clientset) Roles(ns string) kube.Roles { return c.cs.RbacV1().Roles(ns) }
func (c clientset) RoleBindings(ns string) kube.RoleBindings {
	return c.cs.RbacV1().RoleBindings(ns)
}
func (c clientset) ClusterRoleBindings() kube.ClusterRoleBindings {
	return c.cs.RbacV1().ClusterRoleBindings()
}

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

// templateGenerationAnnotation is where the apps/v1 API server keeps a
// DaemonSet's template generation.
const templateGenerationAnnotation = "deprecated.daemonset.template.generation"

// DaemonSetGenerations makes cs move a DaemonSet's generations on a patch
// or update as the API server does (the bare fake moves none): a changed
// pod template moves metadata.generation and the template generation
// (deprecated.daemonset.template.generation) by one, any other spec change
// moves metadata.generation alone, and a metadata-only write neither. A
// write that leaves the template as it was (the same restartedAt) thus
// replaces no pod, as on a real cluster.
func DaemonSetGenerations(cs *fake.Clientset) *fake.Clientset {
	react := DaemonSetReaction(cs.Tracker())
	for _, verb := range []string{"patch", "update"} {
		cs.PrependReactor(verb, "daemonsets", react)
	}
	return cs
}

// DaemonSetReaction applies a DaemonSet patch or update to the tracker and
// moves the generations as DaemonSetGenerations says; a test reactor that
// handles a write itself (a lost response) calls it to apply the write.
func DaemonSetReaction(tracker k8stesting.ObjectTracker) k8stesting.ReactionFunc {
	apply := k8stesting.ObjectReaction(tracker)
	return func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "" {
			return false, nil, nil
		}
		var name string
		switch a := a.(type) {
		case k8stesting.PatchAction:
			name = a.GetName()
		case k8stesting.UpdateAction:
			name = a.GetObject().(*appsv1.DaemonSet).Name
		default:
			return false, nil, nil
		}
		cur, err := tracker.Get(a.GetResource(), a.GetNamespace(), name)
		if err != nil {
			return apply(a)
		}
		old := cur.(*appsv1.DaemonSet)
		var ds *appsv1.DaemonSet
		var handled bool
		var obj runtime.Object
		dry, isDry := dryRunPatch(a)
		if isDry {
			// the DaemonSet as the patch would leave it, never stored
			if ds, err = dry(old); err != nil {
				return true, nil, err
			}
			handled, obj = true, ds
		} else {
			handled, obj, err = apply(a)
			if err != nil || obj == nil {
				return handled, obj, err
			}
			ds = obj.(*appsv1.DaemonSet).DeepCopy()
		}
		tg := old.Generation
		if g, perr := strconv.ParseInt(old.Annotations[templateGenerationAnnotation], 10, 64); perr == nil {
			tg = g
		}
		switch {
		case !apiequality.Semantic.DeepEqual(old.Spec.Template, ds.Spec.Template):
			ds.Generation, tg = old.Generation+1, tg+1
		case !apiequality.Semantic.DeepEqual(old.Spec, ds.Spec):
			ds.Generation = old.Generation + 1
		default:
			return handled, obj, err
		}
		if ds.Annotations == nil {
			ds.Annotations = map[string]string{}
		}
		ds.Annotations[templateGenerationAnnotation] = strconv.FormatInt(tg, 10)
		if isDry {
			return true, ds, nil
		}
		if err := tracker.Update(a.GetResource(), ds, a.GetNamespace()); err != nil {
			return true, nil, err
		}
		latest, err := tracker.Get(a.GetResource(), a.GetNamespace(), name)
		return true, latest, err
	}
}

// dryRunPatch is, for a strategic merge patch sent as a dry run (which the
// fake's tracker would store), what the patch makes of a DaemonSet, as the
// API server computes it (resourceVersion precondition included).
func dryRunPatch(a k8stesting.Action) (func(*appsv1.DaemonSet) (*appsv1.DaemonSet, error), bool) {
	p, ok := a.(k8stesting.PatchActionImpl)
	if !ok || len(p.PatchOptions.DryRun) == 0 || p.GetPatchType() != types.StrategicMergePatchType {
		return nil, false
	}
	return func(old *appsv1.DaemonSet) (*appsv1.DaemonSet, error) {
		before, err := json.Marshal(old)
		if err != nil {
			return nil, err
		}
		after, err := strategicpatch.StrategicMergePatch(before, p.GetPatch(), &appsv1.DaemonSet{})
		if err != nil {
			return nil, err
		}
		ds := &appsv1.DaemonSet{}
		if err := json.Unmarshal(after, ds); err != nil {
			return nil, err
		}
		if ds.ResourceVersion != old.ResourceVersion {
			return nil, apierrors.NewConflict(appsv1.Resource("daemonsets"), old.Name, errors.New("the object has been modified"))
		}
		return ds, nil
	}, true
}

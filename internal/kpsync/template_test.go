package kpsync

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/configmap"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kubeadm"
	"github.com/kube-proxy-sync/kube-proxy-sync/internal/rollout"
)

// kubeadmTemplate is the pod template a newer kubeadm renders for ds's
// kube-proxy: image, and what kubeadm changed across minors (an argument,
// an environment variable, a volume), no readiness probe (kubeadm's has
// none), its config volume on kubeadm's ConfigMap.
func kubeadmTemplate(ds *appsv1.DaemonSet, image string) *corev1.PodTemplateSpec {
	t := ds.Spec.Template.DeepCopy()
	t.Annotations = nil
	c := &t.Spec.Containers[0]
	c.Image, c.ReadinessProbe, c.LivenessProbe = image, nil, nil
	c.Command = []string{"/usr/local/bin/kube-proxy", "--config=/var/lib/kube-proxy/config.conf", "--hostname-override=$(NODE_NAME)"}
	c.Env = []corev1.EnvVar{{Name: "NODE_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "spec.nodeName"}}}}
	c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: "xtables-lock", MountPath: "/run/xtables.lock"})
	t.Spec.Volumes = append(t.Spec.Volumes, corev1.Volume{Name: "xtables-lock", VolumeSource: corev1.VolumeSource{
		HostPath: &corev1.HostPathVolumeSource{Path: "/run/xtables.lock"},
	}})
	for i := range t.Spec.Volumes {
		if t.Spec.Volumes[i].ConfigMap != nil {
			t.Spec.Volumes[i].ConfigMap.Name = "kube-proxy"
		}
	}
	return t
}

// dryRuns counts the DaemonSet PATCHes sent as dry runs.
func (f *fixture) dryRuns() int {
	n := 0
	for _, a := range f.client.Actions() {
		if p, ok := a.(k8stesting.PatchActionImpl); ok && len(p.PatchOptions.DryRun) > 0 {
			n++
		}
	}
	return n
}

// --template kubeadm: the DaemonSet takes kubeadm's pod template whole, in
// the one restart that moves the image and the config, keeping the fields
// kube-proxy-sync owns (the readiness probe, the config volume on the
// copy). A rerun with the same rendering changes nothing.
func TestTemplateFromKubeadmTakenWholeInTheRestart(t *testing.T) {
	f := newRollingFixture(t, 3)
	withResourceVersions(t, f.fixture)
	live := f.daemonSet(t)
	image := "registry.k8s.io/kube-proxy:v1.34.2"
	kt := kubeadmTemplate(live, image)
	go func() {
		w := <-f.watches
		for i := range f.n {
			f.replace(t, kubeProxyPod(nodeName(i), "2", true))
		}
		w.Modify(f.status("301", f.n, f.n))
	}()
	res, err := f.run(t, Options{Image: image, Template: kt})
	require.NoError(t, err)
	assert.True(t, res.Facts.Restarted)
	assert.True(t, res.Facts.TemplateChanged)
	assert.Equal(t, ReasonImageChanged, res.Facts.RestartReason)
	assert.Equal(t, 2, f.dryRuns(), "the API server judged the template once per plan (the one under the Lease again)")
	assert.Equal(t, 1, f.count("patch", "daemonsets")-f.dryRuns(), "one template change: image, template and config together")

	ds := f.daemonSet(t)
	c := ds.Spec.Template.Spec.Containers[0]
	assert.Equal(t, kt.Spec.Containers[0].Command, c.Command, "kubeadm's arguments")
	assert.Equal(t, kt.Spec.Containers[0].Env, c.Env, "kubeadm's environment")
	assert.Len(t, ds.Spec.Template.Spec.Volumes, 2, "kubeadm's new volume")
	assert.Equal(t, image, c.Image)
	require.NotNil(t, c.ReadinessProbe, "kube-proxy-sync's readiness probe kept")
	assert.Equal(t, "/livez", c.ReadinessProbe.HTTPGet.Path)
	assert.Equal(t, rollout.ConfigVolumeOf(ds, "kube-proxy"), res.Facts.ConfigMapName)
	assert.True(t, configmap.IsCopyName("kube-proxy", rollout.ConfigVolumeOf(ds, "kube-proxy")), "the config volume mounts the copy, not kubeadm's ConfigMap")
	assert.NotEmpty(t, ds.Spec.Template.Annotations[rollout.RestartedAtAnnotation])

	// the same rendering again: the API server says the template would not
	// change, and nothing is written
	res, err = f.run(t, Options{Image: image, Template: kt})
	require.NoError(t, err)
	assert.False(t, res.Facts.Restarted)
	assert.False(t, res.Facts.TemplateChanged)
	assert.Empty(t, f.writes())
	assert.Equal(t, 1, f.dryRuns())
}

// kubeadm's template differing only in what kube-proxy-sync owns (no
// readiness probe, kubeadm's ConfigMap in the config volume) is no change.
func TestTemplateFromKubeadmThatDiffersOnlyInOwnFieldsWritesNothing(t *testing.T) {
	f := newFixture(t, seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))
	kt := f.daemonSet(t).Spec.Template.DeepCopy()
	kt.Spec.Containers[0].ReadinessProbe = nil
	res, err := f.run(t, Options{Template: kt, Image: "registry.k8s.io/kube-proxy:v1.33.6"})
	require.NoError(t, err)
	assert.False(t, res.Changed)
	assert.False(t, res.Facts.TemplateChanged)
	assert.Empty(t, res.Facts.RestartReason)
	assert.Empty(t, f.writes())
}

// kubeadm's template alone (same image, same config) restarts, as
// template-changed; in check mode it only says so.
func TestTemplateFromKubeadmAloneIsARestart(t *testing.T) {
	f := newFixture(t, seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"))
	kt := kubeadmTemplate(f.daemonSet(t), "registry.k8s.io/kube-proxy:v1.33.6")
	res, err := f.run(t, Options{Template: kt, Check: true})
	require.NoError(t, err)
	assert.True(t, res.Changed, "check mode says what the real run does")
	assert.True(t, res.Facts.RestartRequired)
	assert.True(t, res.Facts.TemplateChanged)
	assert.Equal(t, ReasonTemplateChanged, res.Facts.RestartReason)
	assert.Contains(t, res.Msg, "would be kubeadm's")
	assert.Empty(t, f.writes())
	assert.Nil(t, f.daemonSet(t).Spec.Template.Spec.Containers[0].Command, "check mode wrote nothing")
}

// A restart onto kubeadm's template that fails is rolled back to the whole
// template before it: kubeadm's additions gone, the old one as it was.
func TestTemplateFromKubeadmRolledBackWhole(t *testing.T) {
	f := newRollingFixture(t, 5)
	before := f.daemonSet(t).Spec.Template.DeepCopy()
	kt := kubeadmTemplate(f.daemonSet(t), "registry.k8s.io/kube-proxy:v1.34.2")
	go f.crashLoopNode0(t)
	res, err := f.run(t, Options{Image: "registry.k8s.io/kube-proxy:v1.34.2", Template: kt, Access: kubeadmAccess(), RollbackOnFailure: true})
	require.Error(t, err)
	assert.True(t, res.Facts.RolledBack)
	assert.Equal(t, *before, f.daemonSet(t).Spec.Template, "the template before the run, whole")
	// kubeadm's access, applied before the rollout, stays
	assert.Len(t, res.Facts.AccessChanged, 4)
	_, err = f.client.RbacV1().RoleBindings("kube-system").Get(context.Background(), "kube-proxy", metav1.GetOptions{})
	assert.NoError(t, err, "kubeadm's RoleBinding stays after the rollback")
}

// kubeadmAccess is kube-proxy's ServiceAccount and RBAC as kubeadm 1.34
// renders them.
func kubeadmAccess() kubeadm.Access {
	return kubeadm.Access{
		ServiceAccounts: []*corev1.ServiceAccount{{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "ServiceAccount"},
			ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "kube-system"}}},
		ClusterRoleBindings: []*rbacv1.ClusterRoleBinding{{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "ClusterRoleBinding"},
			ObjectMeta: metav1.ObjectMeta{Name: "kubeadm:node-proxier"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "system:node-proxier"},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "kube-proxy", Namespace: "kube-system"}}}},
		Roles: []*rbacv1.Role{{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "Role"},
			ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "kube-system"},
			Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"kube-proxy"}, Verbs: []string{"get"}}}}},
		RoleBindings: []*rbacv1.RoleBinding{{TypeMeta: metav1.TypeMeta{APIVersion: "rbac.authorization.k8s.io/v1", Kind: "RoleBinding"},
			ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "kube-system"},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "kube-proxy"},
			// kubeadm leaves the apiGroup out (the API server defaults it,
			// see defaultSubjects)
			Subjects: []rbacv1.Subject{{Kind: rbacv1.GroupKind, Name: "system:bootstrappers:kubeadm:default-node-token"}}}},
	}
}

// --template kubeadm brings kubeadm's ServiceAccount and RBAC for
// kube-proxy: what is missing or differs is applied (server-side, as
// kubeadm renders it) before the restart; what matches is left alone; a
// rerun writes nothing. Check mode only says what it would apply.
func TestTemplateFromKubeadmAppliesItsAccess(t *testing.T) {
	ds := seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6")
	acc := kubeadmAccess()
	// kubeadm init's ServiceAccount and ClusterRoleBinding are there; an
	// older kubeadm's Role let nodes list, and the RoleBinding is gone
	older := acc.Roles[0].DeepCopy()
	older.Rules[0].Verbs = []string{"get", "list"}
	f := newFixture(t, seedConfigMap(), ds, acc.ServiceAccounts[0].DeepCopy(), acc.ClusterRoleBindings[0].DeepCopy(), older)
	defaultSubjects(f)
	kt := f.daemonSet(t).Spec.Template.DeepCopy() // no template change

	res, err := f.run(t, Options{Template: kt, Access: acc, Check: true})
	require.NoError(t, err)
	assert.True(t, res.Changed)
	assert.Equal(t, []string{"role kube-system/kube-proxy", "rolebinding kube-system/kube-proxy"}, res.Facts.AccessChanged)
	assert.Empty(t, f.writes(), "check mode")

	res, err = f.run(t, Options{Template: kt, Access: acc})
	require.NoError(t, err)
	assert.True(t, res.Changed)
	assert.False(t, res.Facts.Restarted, "access alone restarts nothing")
	assert.Equal(t, []string{"role kube-system/kube-proxy", "rolebinding kube-system/kube-proxy"}, res.Facts.AccessChanged)
	assert.Equal(t, []string{"patch roles", "patch rolebindings"}, f.writes())
	role, err := f.client.RbacV1().Roles("kube-system").Get(context.Background(), "kube-proxy", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, []string{"get"}, role.Rules[0].Verbs, "kubeadm's rules")
	rb, err := f.client.RbacV1().RoleBindings("kube-system").Get(context.Background(), "kube-proxy", metav1.GetOptions{})
	require.NoError(t, err)
	assert.Equal(t, "system:bootstrappers:kubeadm:default-node-token", rb.Subjects[0].Name)

	res, err = f.run(t, Options{Template: kt, Access: acc})
	require.NoError(t, err)
	assert.False(t, res.Changed, "rerun: %s", res.Msg)
	assert.Empty(t, res.Facts.AccessChanged)
	assert.Empty(t, f.writes())
}

// A binding whose roleRef differs from kubeadm's cannot be changed in
// place: the run refuses before any write.
func TestTemplateFromKubeadmRefusesAnotherRoleRef(t *testing.T) {
	acc := kubeadmAccess()
	other := acc.ClusterRoleBindings[0].DeepCopy()
	other.RoleRef.Name = "cluster-admin"
	f := newFixture(t, seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"), other)
	kt := kubeadmTemplate(f.daemonSet(t), "registry.k8s.io/kube-proxy:v1.33.6")
	_, err := f.run(t, Options{Template: kt, Access: acc})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "clusterrolebinding kubeadm:node-proxier refers to ClusterRole cluster-admin")
	assert.Empty(t, f.writes())
}

// kubeadm leaves a Group subject's apiGroup out; the API server stores
// rbac.authorization.k8s.io there, which is no difference.
func TestSameBindingAsTheAPIServerDefaultsIt(t *testing.T) {
	ref := rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "kube-proxy"}
	group := rbacv1.Subject{Kind: rbacv1.GroupKind, Name: "system:bootstrappers:kubeadm:default-node-token"}
	stored := group
	stored.APIGroup = rbacv1.GroupName
	same, err := sameBinding("rolebinding kube-system/kube-proxy", ref, ref, []rbacv1.Subject{stored}, []rbacv1.Subject{group})
	require.NoError(t, err)
	assert.True(t, same)
	same, err = sameBinding("rolebinding kube-system/kube-proxy", ref, ref, []rbacv1.Subject{stored, stored}, []rbacv1.Subject{group})
	require.NoError(t, err)
	assert.False(t, same)
}

// defaultSubjects makes the fake store a RoleBinding's User and Group
// subjects with the apiGroup the API server defaults for them.
func defaultSubjects(f *fixture) {
	f.client.PrependReactor("patch", "rolebindings", func(a k8stesting.Action) (bool, runtime.Object, error) {
		handled, obj, err := k8stesting.ObjectReaction(f.client.Tracker())(a)
		if rb, ok := obj.(*rbacv1.RoleBinding); ok && err == nil {
			for i := range rb.Subjects {
				if rb.Subjects[i].Kind == rbacv1.GroupKind || rb.Subjects[i].Kind == rbacv1.UserKind {
					rb.Subjects[i].APIGroup = rbacv1.GroupName
				}
			}
			err = f.client.Tracker().Update(a.GetResource(), rb, a.GetNamespace())
		}
		return handled, obj, err
	})
}

// The permissions kubeadm's access needs are checked before any write: a
// RoleBinding to create, denied, fails the run with nothing written, in
// check mode too.
func TestTemplateFromKubeadmChecksItsAccessFirst(t *testing.T) {
	for _, check := range []bool{true, false} {
		acc := kubeadmAccess()
		f := newFixture(t, seedConfigMap(), seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6"), acc.ServiceAccounts[0], acc.ClusterRoleBindings[0], acc.Roles[0])
		f.client.PrependReactor("create", "selfsubjectaccessreviews", func(a k8stesting.Action) (bool, runtime.Object, error) {
			r := a.(k8stesting.CreateAction).GetObject().(*authorizationv1.SelfSubjectAccessReview).DeepCopy()
			ra := r.Spec.ResourceAttributes
			r.Status.Allowed = !(ra.Verb == "create" && ra.Resource == "rolebindings")
			return true, r, nil
		})
		kt := kubeadmTemplate(f.daemonSet(t), "registry.k8s.io/kube-proxy:v1.33.6")
		_, err := f.run(t, Options{Template: kt, Access: acc, Check: check})
		require.Error(t, err, "check mode %t", check)
		assert.Contains(t, err.Error(), "create on rolebindings.rbac.authorization.k8s.io")
		assert.Empty(t, f.writes(), "check mode %t", check)
	}
}

// kubeadm's template on the copy layout, differing only in what
// kube-proxy-sync owns (no probe, kubeadm's ConfigMap in the config
// volume, no restartedAt) is no change: the copy stays mounted.
func TestTemplateFromKubeadmOnTheCopyLayoutKeepsTheCopy(t *testing.T) {
	ds := seedDaemonSet("registry.k8s.io/kube-proxy:v1.33.6")
	ds.Spec.Template.Annotations = map[string]string{rollout.RestartedAtAnnotation: "2026-11-20T10:00:00Z"}
	f := newFixture(t, onCopy(seedConfigMap(), ds)...)
	live := f.daemonSet(t)
	require.True(t, configmap.IsCopyName("kube-proxy", rollout.ConfigVolumeOf(live, "kube-proxy")))
	kt := live.Spec.Template.DeepCopy()
	kt.Annotations = nil
	kt.Spec.Containers[0].ReadinessProbe = nil
	kt.Spec.Volumes[0].ConfigMap.Name = "kube-proxy"
	res, err := f.run(t, Options{Template: kt})
	require.NoError(t, err)
	assert.False(t, res.Changed, res.Msg)
	assert.Empty(t, f.writes())
	assert.Equal(t, live.Spec.Template, f.daemonSet(t).Spec.Template)
}

// Another writer moves the template between the plan and the restart
// PATCH (here: sets kubeadm's image itself): the PATCH conflicts, and the
// retry judges kubeadm's template against the template as it is now,
// never putting the image the plan read back.
func TestTemplateFromKubeadmConflictJudgesTheTemplateAgain(t *testing.T) {
	f := newRollingFixture(t, 3)
	withResourceVersions(t, f.fixture)
	image := "registry.k8s.io/kube-proxy:v1.34.2"
	kt := kubeadmTemplate(f.daemonSet(t), image)
	conflicted := false
	f.client.PrependReactor("patch", "daemonsets", func(a k8stesting.Action) (bool, runtime.Object, error) {
		p := a.(k8stesting.PatchActionImpl)
		if conflicted || len(p.PatchOptions.DryRun) > 0 || !strings.Contains(string(p.GetPatch()), "$patch") {
			return false, nil, nil
		}
		conflicted = true
		// another writer: kubectl set image, a moment before this PATCH
		// (the tracker: the fake holds its lock while a reactor runs)
		obj, err := f.client.Tracker().Get(appsv1.SchemeGroupVersion.WithResource("daemonsets"), "kube-system", "kube-proxy")
		require.NoError(t, err)
		ds := obj.(*appsv1.DaemonSet).DeepCopy()
		ds.Spec.Template.Spec.Containers[0].Image = image
		ds.Generation++
		ds.Annotations["deprecated.daemonset.template.generation"] = "2"
		ds.ResourceVersion = "250"
		require.NoError(t, f.client.Tracker().Update(appsv1.SchemeGroupVersion.WithResource("daemonsets"), ds, "kube-system"))
		return true, nil, apierrors.NewConflict(appsv1.Resource("daemonsets"), "kube-proxy", errors.New("the object has been modified"))
	})
	go func() {
		w := <-f.watches
		for i := range f.n {
			f.replace(t, kubeProxyPod(nodeName(i), "3", true))
		}
		w.Modify(&appsv1.DaemonSet{
			ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "kube-system", ResourceVersion: "301", Generation: 3},
			Status: appsv1.DaemonSetStatus{ObservedGeneration: 3, DesiredNumberScheduled: int32(f.n),
				UpdatedNumberScheduled: int32(f.n), NumberAvailable: int32(f.n), NumberReady: int32(f.n)},
		})
	}()
	res, err := f.run(t, Options{Image: image, Template: kt})
	require.NoError(t, err)
	require.True(t, conflicted)
	assert.True(t, res.Facts.TemplateChanged)
	ds := f.daemonSet(t)
	assert.Equal(t, image, ds.Spec.Template.Spec.Containers[0].Image, "the image the other writer set, kubeadm's: never the one the plan read")
	assert.Equal(t, kt.Spec.Containers[0].Command, ds.Spec.Template.Spec.Containers[0].Command)
	assert.Equal(t, 3, f.dryRuns(), "kubeadm's template judged again after the conflict")
}

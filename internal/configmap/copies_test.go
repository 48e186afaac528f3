package configmap

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube/kubefake"
)

// The history's order is the template generation that mounts a copy,
// whatever its creation time; copies without one (made before it was
// recorded) are older than every copy with one, by creation time.
func TestHistoryOrder(t *testing.T) {
	at := func(sec int64) metav1.Time { return metav1.NewTime(time.Unix(sec, 0)) }
	record := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "kube-system"}}
	cp := func(data string, gen int64, created metav1.Time) corev1.ConfigMap {
		c := NewCopy(record, map[string]string{"config.conf": data}, nil, gen)
		c.CreationTimestamp = created
		return *c
	}
	copies := []corev1.ConfigMap{
		cp("a", 0, at(5)), cp("b", 4, at(10)), cp("c", 7, at(10)), cp("d", 0, at(9)), cp("e", 6, at(11)),
	}
	sort.SliceStable(copies, func(i, j int) bool { return Newer(&copies[i], &copies[j]) })
	var order []string
	for _, c := range copies {
		order = append(order, c.Data["config.conf"])
	}
	assert.Equal(t, []string{"c", "e", "b", "d", "a"}, order)
	assert.Equal(t, "7", copies[0].Annotations[CopyGenerationAnnotation])
	assert.NotContains(t, copies[4].Annotations, CopyGenerationAnnotation)
}

// A copy whose delete fails the UID precondition (the name holds another
// object since the list: made again) is not reported deleted; one gone
// already is.
func TestCollectReportsOnlyWhatWentAway(t *testing.T) {
	record := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "kube-proxy", Namespace: "kube-system"}}
	var objs []runtime.Object
	var names []string
	for i := range 3 {
		cp := NewCopy(record, map[string]string{"config.conf": fmt.Sprintf("mode: iptables # %d", i)}, nil, int64(i+1))
		cp.UID = types.UID(fmt.Sprintf("uid-%d", i))
		objs, names = append(objs, cp), append(names, cp.Name)
	}
	cs, kc := kubefake.New(objs...)
	cs.PrependReactor("delete", "configmaps", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.(k8stesting.DeleteAction).GetName() == names[0] {
			return true, nil, apierrors.NewConflict(corev1.Resource("configmaps"), names[0], errors.New("Precondition failed: UID in precondition: uid-0, UID in object meta: uid-new"))
		}
		return false, nil, nil
	})
	c := Copies{ConfigMaps: kc.ConfigMaps("kube-system"), Namespace: "kube-system", Record: "kube-proxy"}
	deleted, err := c.Collect(context.Background(), 1, map[string]bool{})
	require.NoError(t, err)
	assert.Equal(t, []string{names[1]}, deleted, "the newest kept, the one made again not reported")
}

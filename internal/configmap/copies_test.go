package configmap

import (
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

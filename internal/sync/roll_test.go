package sync

import (
	"testing"

	"github.com/stretchr/testify/assert"
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
)

func TestBatchSize(t *testing.T) {
	ds := func(mu *intstr.IntOrString) *appsv1.DaemonSet {
		d := &appsv1.DaemonSet{}
		if mu != nil {
			d.Spec.UpdateStrategy.RollingUpdate = &appsv1.RollingUpdateDaemonSet{MaxUnavailable: mu}
		}
		return d
	}
	ten := intstr.FromString("10%")
	three := intstr.FromInt32(3)
	cases := []struct {
		name string
		flag string
		ds   *appsv1.DaemonSet
		live int
		want int
	}{
		{"default without rollingUpdate is 1", "", ds(nil), 50, 1},
		{"the DaemonSet's maxUnavailable", "", ds(&three), 50, 3},
		{"a percentage of live nodes, rounded up", "", ds(&ten), 45, 5},
		{"flag wins", "5", ds(&three), 50, 5},
		{"flag percentage", "20%", ds(&three), 50, 10},
		{"never zero", "1%", ds(nil), 10, 1},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := batchSize(tc.flag, tc.ds, tc.live)
			assert.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestDecide(t *testing.T) {
	stamped := func(h string) *appsv1.DaemonSet {
		d := &appsv1.DaemonSet{}
		if h != "" {
			d.Annotations = map[string]string{"kube-proxy-sync.io/config-hash": h}
		}
		return d
	}
	cases := []struct {
		name    string
		policy  string
		changed bool
		ds      *appsv1.DaemonSet
		reason  string
		adopt   bool
	}{
		{"in sync", RestartAuto, false, stamped("h"), "", false},
		{"changed now", RestartAuto, true, stamped("old"), ReasonConfigChanged, false},
		{"owed by an earlier run", RestartAuto, false, stamped("old"), ReasonPending, false},
		{"another run already restarted for this data", RestartAuto, true, stamped("h"), "", false},
		{"first run adopts", RestartAuto, false, stamped(""), "", true},
		{"always", RestartAlways, false, stamped("h"), ReasonForced, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			reason, adopt := decide(tc.policy, tc.changed, tc.ds, "h")
			assert.Equal(t, tc.reason, reason)
			assert.Equal(t, tc.adopt, adopt)
		})
	}
}

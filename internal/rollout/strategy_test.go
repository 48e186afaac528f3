package rollout

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

func strategyDS(st appsv1.DaemonSetUpdateStrategy, saved *appsv1.DaemonSetUpdateStrategy, desired int32) *appsv1.DaemonSet {
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{Namespace: "kube-system", Name: "kube-proxy", ResourceVersion: "7", Annotations: map[string]string{}},
		Spec:       appsv1.DaemonSetSpec{UpdateStrategy: st},
		Status:     appsv1.DaemonSetStatus{DesiredNumberScheduled: desired},
	}
	if saved != nil {
		b, _ := json.Marshal(saved)
		ds.Annotations[StrategyAnnotation] = string(b)
	}
	return ds
}

func rolling(maxUnavailable, maxSurge string) appsv1.DaemonSetUpdateStrategy {
	st := appsv1.DaemonSetUpdateStrategy{Type: appsv1.RollingUpdateDaemonSetStrategyType, RollingUpdate: &appsv1.RollingUpdateDaemonSet{}}
	if maxUnavailable != "" {
		st.RollingUpdate.MaxUnavailable = ptr.To(intstr.Parse(maxUnavailable))
	}
	if maxSurge != "" {
		st.RollingUpdate.MaxSurge = ptr.To(intstr.Parse(maxSurge))
	}
	return st
}

var onDelete = appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}

func TestRaiseForResolvesTheBudgetLikeTheController(t *testing.T) {
	for name, tc := range map[string]struct {
		ds          *appsv1.DaemonSet
		stuck       int
		wantTo      string // "" : no raise
		wantRestore bool
	}{
		"kubeadm's 1, one stuck":          {ds: strategyDS(rolling("1", ""), nil, 10), stuck: 1, wantTo: "2"},
		"10% of 25 rounds up to 3":        {ds: strategyDS(rolling("10%", ""), nil, 25), stuck: 2, wantTo: "5"},
		"no maxUnavailable is 1":          {ds: strategyDS(rolling("", ""), nil, 5), stuck: 1, wantTo: "2"},
		"surge: nothing counts":           {ds: strategyDS(rolling("1", "1"), nil, 5), stuck: 1},
		"surge 0 still counts":            {ds: strategyDS(rolling("1", "0"), nil, 5), stuck: 1, wantTo: "2"},
		"none stuck":                      {ds: strategyDS(rolling("1", ""), nil, 5)},
		"none stuck, a raise left over":   {ds: strategyDS(rolling("3", ""), ptr.To(rolling("1", "")), 5), wantRestore: true},
		"a canary left over, none stuck":  {ds: strategyDS(onDelete, ptr.To(rolling("1", "")), 5), wantRestore: true},
		"a canary left over, one stuck":   {ds: strategyDS(onDelete, ptr.To(rolling("1", "")), 5), stuck: 1, wantTo: "2"},
		"the DaemonSet's own is OnDelete": {ds: strategyDS(onDelete, nil, 5), stuck: 1},
	} {
		t.Run(name, func(t *testing.T) {
			var ch Change
			r, err := ch.RaiseFor(tc.ds, tc.stuck)
			require.NoError(t, err)
			orig, _, err := SavedStrategy(tc.ds)
			require.NoError(t, err)
			switch {
			case tc.wantTo != "":
				require.True(t, r.Raised())
				assert.Equal(t, tc.wantTo, ch.Strategy.RollingUpdate.MaxUnavailable.String())
				var saved appsv1.DaemonSetUpdateStrategy
				require.NoError(t, json.Unmarshal([]byte(ch.SaveStrategy), &saved))
				assert.Equal(t, orig, saved, "the DaemonSet's own strategy is what is saved")
				assert.False(t, ch.ClearStrategy)
			case tc.wantRestore:
				assert.False(t, r.Raised())
				require.NotNil(t, ch.Strategy)
				assert.Equal(t, orig, *ch.Strategy)
				assert.True(t, ch.ClearStrategy)
			default:
				assert.False(t, r.Raised())
				assert.Equal(t, Change{}, ch, "nothing to send")
			}
		})
	}
}

func TestRaiseDuringLeavesAStrategyChangedMeanwhileAlone(t *testing.T) {
	// raised by the restart to 2 for one node; a second one goes away
	ds := strategyDS(rolling("2", ""), ptr.To(rolling("1", "")), 5)
	ch, r, ok, err := RaiseDuring(ds, 2)
	require.NoError(t, err)
	require.True(t, ok)
	assert.Equal(t, Raise{From: "1", To: 3, Stuck: 2}, r, "from the DaemonSet's own budget, not the raised one")
	assert.Equal(t, "7", ch.ResourceVersion)
	assert.Equal(t, "3", ch.Strategy.RollingUpdate.MaxUnavailable.String())

	// someone put the DaemonSet on OnDelete meanwhile: nothing is sent
	_, _, ok, err = RaiseDuring(strategyDS(onDelete, ptr.To(rolling("1", "")), 5), 2)
	require.NoError(t, err)
	assert.False(t, ok)
}

func TestSavedStrategyAndRestore(t *testing.T) {
	plain := strategyDS(rolling("1", ""), nil, 3)
	_, saved, err := Restore(plain)
	require.NoError(t, err)
	assert.False(t, saved, "nothing saved, nothing to restore")
	assert.False(t, CanaryLeftover(plain))

	left := strategyDS(onDelete, ptr.To(rolling("1", "")), 3)
	assert.True(t, CanaryLeftover(left))
	ch, saved, err := Restore(left)
	require.NoError(t, err)
	require.True(t, saved)
	assert.Equal(t, "RollingUpdate, maxUnavailable 1", Describe(*ch.Strategy))
	assert.True(t, ch.ClearStrategy)

	bad := strategyDS(onDelete, nil, 3)
	bad.Annotations[StrategyAnnotation] = "{"
	_, _, err = Restore(bad)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "kube-system/kube-proxy annotation "+StrategyAnnotation)

	var on Change
	require.NoError(t, on.OnDelete(plain))
	assert.Equal(t, onDelete, *on.Strategy)
	assert.JSONEq(t, `{"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":1}}`, on.SaveStrategy)
}

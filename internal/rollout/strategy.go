package rollout

import (
	"encoding/json"
	"fmt"

	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"
)

// The DaemonSet's own updateStrategy, while a rollout has it changed (a
// canary on OnDelete, a rolling update with maxUnavailable raised for
// nodes that cannot count), is kept in StrategyAnnotation by the same
// PATCH that changes it, so that any later run puts it back if this one
// dies. Everything that reads or writes that annotation is here.

// SavedStrategy is the DaemonSet's own updateStrategy: the one a run saved
// in StrategyAnnotation while it has it changed (saved is then true), else
// the current one.
func SavedStrategy(ds *appsv1.DaemonSet) (orig appsv1.DaemonSetUpdateStrategy, saved bool, err error) {
	raw := ds.Annotations[StrategyAnnotation]
	if raw == "" {
		return ds.Spec.UpdateStrategy, false, nil
	}
	if err := json.Unmarshal([]byte(raw), &orig); err != nil {
		return orig, true, fmt.Errorf("daemonset %s/%s annotation %s is not an updateStrategy: %w; fix it by hand (its value is the DaemonSet's own updateStrategy as JSON), or remove it and set the updateStrategy yourself", ds.Namespace, ds.Name, StrategyAnnotation, err)
	}
	return orig, true, nil
}

// CanaryLeftover reports whether an earlier canary run stopped half-way:
// the DaemonSet is on OnDelete with its own strategy saved. Its template
// is not verified on every node, so nothing may give it back to the
// controller before a run has finished the canary or replaced the template.
func CanaryLeftover(ds *appsv1.DaemonSet) bool {
	return ds.Annotations[StrategyAnnotation] != "" && ds.Spec.UpdateStrategy.Type == appsv1.OnDeleteDaemonSetStrategyType
}

// Restore is the change that puts back the strategy a run saved, and
// whether there is one. It says nothing of a canary left over: whether to
// give an unfinished canary back to the controller is the caller's call
// (see CanaryLeftover).
func Restore(ds *appsv1.DaemonSet) (Change, bool, error) {
	orig, saved, err := SavedStrategy(ds)
	if err != nil || !saved {
		return Change{}, false, err
	}
	return Change{Strategy: &orig, ClearStrategy: true}, true, nil
}

// Describe names an updateStrategy for a log line: its type, and its
// maxUnavailable if it has one.
func Describe(st appsv1.DaemonSetUpdateStrategy) string {
	what := string(st.Type)
	if ru := st.RollingUpdate; ru != nil && ru.MaxUnavailable != nil {
		what += ", maxUnavailable " + ru.MaxUnavailable.String()
	}
	return what
}

// OnDelete adds to c the switch to OnDelete (a canary: the tool deletes
// the pods itself), saving the DaemonSet's own strategy unless a run
// saved it already.
func (c *Change) OnDelete(ds *appsv1.DaemonSet) error {
	orig, _, err := SavedStrategy(ds)
	if err != nil {
		return err
	}
	b, err := json.Marshal(orig)
	if err != nil {
		return err
	}
	c.SaveStrategy = string(b)
	c.Strategy = &appsv1.DaemonSetUpdateStrategy{Type: appsv1.OnDeleteDaemonSetStrategyType}
	return nil
}

// Raise says what a raise of maxUnavailable did: from the DaemonSet's own
// budget (as written) to To nodes, for Stuck nodes. Its zero value is no
// raise.
type Raise struct {
	From  string
	To    int
	Stuck int
}

// Raised reports whether there is a raise.
func (r Raise) Raised() bool { return r.Stuck > 0 }

// RaiseFor adds to c, the restart PATCH, what the DaemonSet controller
// needs to roll the new template through the live nodes within their
// budget. The controller counts every node without an available pod
// against maxUnavailable, so with maxUnavailable 1 a single stuck pod (on
// a node going away, or unready before) stops it. For the rollout,
// maxUnavailable is raised by stuck, the DaemonSet's own strategy saved.
// With nothing to raise, c restores a strategy a run saved and did not put
// back (a canary left over included: the restart replaces its template).
func (c *Change) RaiseFor(ds *appsv1.DaemonSet, stuck int) (Raise, error) {
	orig, saved, err := SavedStrategy(ds)
	if err != nil {
		return Raise{}, err
	}
	if !Raisable(orig) || stuck == 0 {
		if saved {
			c.Strategy, c.ClearStrategy = &orig, true
		}
		return Raise{}, nil
	}
	return c.raise(ds, orig, stuck)
}

// RaiseDuring is the change that raises maxUnavailable further during a
// rolling update, for stuck nodes in all (a node that started going away
// after the restart and holds a kube-proxy pod that is not Ready still
// counts against maxUnavailable, and with kubeadm's budget of 1 the
// controller would replace no other pod). ok is false when there is
// nothing to send: the DaemonSet is not on a raisable RollingUpdate now
// (someone changed it meanwhile: left alone).
func RaiseDuring(ds *appsv1.DaemonSet, stuck int) (c Change, r Raise, ok bool, err error) {
	orig, _, err := SavedStrategy(ds)
	if err != nil || !Raisable(orig) || ds.Spec.UpdateStrategy.Type != appsv1.RollingUpdateDaemonSetStrategyType {
		return c, r, false, err
	}
	c.ResourceVersion = ds.ResourceVersion
	r, err = c.raise(ds, orig, stuck)
	return c, r, err == nil, err
}

// raise sets c's strategy to orig with maxUnavailable raised by stuck, orig
// saved in StrategyAnnotation.
func (c *Change) raise(ds *appsv1.DaemonSet, orig appsv1.DaemonSetUpdateStrategy, stuck int) (Raise, error) {
	raised, r, err := raise(ds, orig, stuck)
	if err != nil {
		return Raise{}, err
	}
	b, err := json.Marshal(orig)
	if err != nil {
		return Raise{}, err
	}
	c.Strategy, c.SaveStrategy = raised, string(b)
	return r, nil
}

// Raisable: the DaemonSet controller counts a node whose pod is not Ready
// against maxUnavailable only for a RollingUpdate without surge (with
// surge it starts the new pod next to the old one).
func Raisable(orig appsv1.DaemonSetUpdateStrategy) bool {
	ru := orig.RollingUpdate
	surge := ru != nil && ru.MaxSurge != nil && ru.MaxSurge.String() != "0" && ru.MaxSurge.String() != "0%"
	return orig.Type == appsv1.RollingUpdateDaemonSetStrategyType && !surge
}

// raise is the DaemonSet's own strategy with maxUnavailable raised by
// stuck: the budget resolved the way the DaemonSet controller does, over
// the nodes that should run a pod, plus one for each stuck node.
func raise(ds *appsv1.DaemonSet, orig appsv1.DaemonSetUpdateStrategy, stuck int) (*appsv1.DaemonSetUpdateStrategy, Raise, error) {
	budget := intstr.FromInt32(1)
	if ru := orig.RollingUpdate; ru != nil && ru.MaxUnavailable != nil {
		budget = *ru.MaxUnavailable
	}
	n, err := intstr.GetScaledValueFromIntOrPercent(&budget, int(ds.Status.DesiredNumberScheduled), true)
	if err != nil {
		return nil, Raise{}, fmt.Errorf("daemonset %s/%s maxUnavailable %q: %w; set it to a number or a percentage", ds.Namespace, ds.Name, budget.String(), err)
	}
	raised := orig.DeepCopy()
	if raised.RollingUpdate == nil {
		raised.RollingUpdate = &appsv1.RollingUpdateDaemonSet{}
	}
	raised.RollingUpdate.MaxUnavailable = ptr.To(intstr.FromInt32(int32(n + stuck)))
	return raised, Raise{From: budget.String(), To: n + stuck, Stuck: stuck}, nil
}

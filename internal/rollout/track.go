package rollout

import (
	"context"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
	watchtools "k8s.io/client-go/tools/watch"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/nodes"
)

// describe names pending nodes and their pods for an error message.
func (f *Fleet) describe(pending []string) string {
	var parts []string
	for i, n := range pending {
		if i == 10 {
			parts = append(parts, fmt.Sprintf("and %d more", len(pending)-10))
			break
		}
		var pods []string
		for uid := range f.byNode[n] {
			p := f.pods[uid]
			state := "not ready"
			switch {
			case p.deleting:
				state = "terminating"
			case p.gen < f.Generation:
				state = "old template"
			case p.ready:
				state = "ready"
			}
			pods = append(pods, p.name+" "+state)
		}
		if len(pods) == 0 {
			pods = append(pods, "no pod")
		}
		sort.Strings(pods)
		parts = append(parts, fmt.Sprintf("%s (%s)", n, strings.Join(pods, ", ")))
	}
	return strings.Join(parts, "; ")
}

// Track watches the pods from where Observe left off, calling step after
// every change until step reports done or fails. A node finishing (or
// skipped) is progress on t. With no progress for t's recheck period,
// pending nodes are looked at again: one that started to go away meanwhile
// is skipped instead of waited for. With none for the progress deadline,
// Track ends with ErrNoProgress.
func (c Client) Track(ctx context.Context, f *Fleet, policy nodes.Policy, t *Timers, step func() (bool, error)) error {
	if done, err := step(); done || err != nil {
		return err
	}
	w, err := c.watch(ctx, f)
	if err != nil {
		return err
	}
	defer w.Stop()
	pending := f.PendingCount()
	for {
		select {
		case <-ctx.Done():
			return f.NotBack(ctx.Err())
		case ev, ok := <-w.ResultChan():
			if !ok {
				return f.NotBack(fmt.Errorf("pod watch closed"))
			}
			if err := c.apply(f, ev); err != nil {
				return err
			}
		case <-t.tick():
			if t.Overdue() {
				return f.NotBack(ErrNoProgress)
			}
			if t.recheckDue() {
				c.recheck(ctx, f, f.Pending(), policy)
			}
		}
		if n := f.PendingCount(); n < pending {
			t.Progress()
			pending = n
		}
		if done, err := step(); done || err != nil {
			return err
		}
	}
}

// watch follows the fleet's pods from its last list or event.
func (c Client) watch(ctx context.Context, f *Fleet) (watch.Interface, error) {
	pods := c.Pods
	w, err := watchtools.NewRetryWatcherWithContext(ctx, f.resourceVersion, &cache.ListWatch{
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = f.selector
			return pods.Watch(ctx, o)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("watch pods of daemonset %s/%s: %w", c.Namespace, c.Name, err)
	}
	return w, nil
}

// apply records a pod event of watch in the fleet.
func (c Client) apply(f *Fleet, ev watch.Event) error {
	switch ev.Type {
	case watch.Error:
		return fmt.Errorf("watch pods of daemonset %s/%s: %v", c.Namespace, c.Name, apierrors.FromObject(ev.Object))
	case watch.Deleted:
		if p, ok := ev.Object.(*corev1.Pod); ok {
			f.remove(p.UID)
		}
	case watch.Added, watch.Modified:
		if p, ok := ev.Object.(*corev1.Pod); ok {
			f.upsert(p)
		}
	}
	return nil
}

// recheck classifies the pending nodes again (a few GETs, not a list).
func (c Client) recheck(ctx context.Context, f *Fleet, pending []string, policy nodes.Policy) {
	for i, name := range pending {
		if i == 50 {
			return
		}
		n, err := c.Nodes.Get(ctx, name, metav1.GetOptions{})
		reason := ""
		switch {
		case apierrors.IsNotFound(err):
			reason = nodes.Gone
		case err != nil:
			c.Log.Warnf("recheck node %s: %v", name, err)
			continue
		default:
			reason = nodes.Classify(n, c.Clock.Now(), policy)
		}
		if reason != nodes.Live {
			c.Log.Infof("node %s is %s now: no longer waiting for its kube-proxy pod", name, reason)
			f.Skip(name, reason)
		}
	}
}

// NotBack is the error of a wait that ended with nodes pending: it names
// them and their pods.
func (f *Fleet) NotBack(cause error) error {
	pending := f.Pending()
	hint := ""
	for _, n := range pending {
		if !f.HasPod(n) {
			// nothing to roll back or retry here: the pod was never made
			hint = "; a node with no pod is waiting for the DaemonSet controller to create one, which the DaemonSet's events explain (kubectl describe daemonset)"
			break
		}
	}
	return fmt.Errorf("kube-proxy pods on %d live node(s) did not come back: %s%s: %w", len(pending), f.describe(pending), hint, cause)
}

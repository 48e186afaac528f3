package main

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// podWatch follows the DaemonSet's pods with an informer and keeps, from the
// moment it has synced, how many nodes had no Ready pod at the same time:
// unavailable = expected - nodes with a Ready, not terminating pod.
type podWatch struct {
	mu       sync.Mutex
	expected int
	synced   bool
	initial  map[types.UID]bool
	pods     map[types.UID]podState
	// readyOn counts Ready, not terminating pods per node.
	readyOn    map[string]int
	peak       int
	created    int
	deleted    int
	unavailAt0 int
	changed    chan struct{}
	stop       context.CancelFunc
	done       chan struct{}
}

type podState struct {
	node  string
	ready bool
}

// podReport is what a watch saw.
type podReport struct {
	// Expected is the DaemonSet's desiredNumberScheduled when the watch began.
	Expected int `json:"expected"`
	// UnavailableAtStart should be 0: the bench starts from a settled DaemonSet.
	UnavailableAtStart int `json:"unavailable_at_start"`
	// PeakUnavailable is the most nodes without a Ready kube-proxy pod at once.
	PeakUnavailable int `json:"peak_unavailable"`
	// Replaced is how many of the pods present at the start are gone.
	Replaced int `json:"replaced"`
	Created  int `json:"pods_created"`
	Deleted  int `json:"pods_deleted"`
}

func podReadyState(p *corev1.Pod) podState {
	st := podState{node: p.Spec.NodeName}
	if p.DeletionTimestamp != nil || p.Spec.NodeName == "" {
		return st
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			st.ready = true
		}
	}
	return st
}

// watchPods starts the informer and returns once it has synced.
func (b *bench) watchPods(ctx context.Context) (*podWatch, error) {
	ds, err := b.cs.AppsV1().DaemonSets(b.Namespace).Get(ctx, b.Name, metav1.GetOptions{})
	if err != nil {
		return nil, fmt.Errorf("get daemonset %s/%s: %w", b.Namespace, b.Name, err)
	}
	sel := metav1.FormatLabelSelector(ds.Spec.Selector)
	pods := b.cs.CoreV1().Pods(b.Namespace)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.LabelSelector = sel
			return pods.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.LabelSelector = sel
			return pods.Watch(ctx, o)
		},
	}
	w := &podWatch{
		expected: int(ds.Status.DesiredNumberScheduled),
		initial:  map[types.UID]bool{}, pods: map[types.UID]podState{}, readyOn: map[string]int{},
		changed: make(chan struct{}, 1), done: make(chan struct{}),
	}
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerDetailedFuncs{
		AddFunc: func(obj any, initial bool) {
			if p, ok := obj.(*corev1.Pod); ok {
				w.set(p, initial)
			}
		},
		UpdateFunc: func(_, obj any) {
			if p, ok := obj.(*corev1.Pod); ok {
				w.set(p, false)
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				w.remove(p.UID)
			}
		},
	}); err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(ctx)
	w.stop = cancel
	go func() {
		defer close(w.done)
		inf.RunWithContext(wctx)
	}()
	if !cache.WaitForCacheSync(wctx.Done(), inf.HasSynced) {
		cancel()
		return nil, fmt.Errorf("pod watch on %s/%s did not sync", b.Namespace, sel)
	}
	w.mu.Lock()
	w.synced = true
	w.unavailAt0 = w.unavailableLocked()
	w.peak = w.unavailAt0
	w.mu.Unlock()
	return w, nil
}

func (w *podWatch) set(p *corev1.Pod, initial bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	old, had := w.pods[p.UID]
	if had && old.ready {
		w.readyOn[old.node]--
	}
	st := podReadyState(p)
	w.pods[p.UID] = st
	if st.ready {
		w.readyOn[st.node]++
	}
	if initial {
		w.initial[p.UID] = true
	} else if !had && w.synced {
		w.created++
	}
	w.note()
}

func (w *podWatch) remove(uid types.UID) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if old, had := w.pods[uid]; had {
		if old.ready {
			w.readyOn[old.node]--
		}
		delete(w.pods, uid)
		if w.synced {
			w.deleted++
		}
	}
	w.note()
}

// note updates the peak and wakes waiters; w.mu is held.
func (w *podWatch) note() {
	if w.synced {
		if u := w.unavailableLocked(); u > w.peak {
			w.peak = u
		}
	}
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

func (w *podWatch) unavailableLocked() int {
	ready := 0
	for _, n := range w.readyOn {
		if n > 0 {
			ready++
		}
	}
	if u := w.expected - ready; u > 0 {
		return u
	}
	return 0
}

// settledLocked: one Ready pod per expected node, nothing terminating, and
// (if replaced) none of the initial pods left.
func (w *podWatch) settledLocked(wantReplaced bool) bool {
	if len(w.pods) != w.expected || w.unavailableLocked() != 0 {
		return false
	}
	for uid, st := range w.pods {
		if !st.ready || (wantReplaced && w.initial[uid]) {
			return false
		}
	}
	return true
}

// waitSettled waits for settledLocked, driven by the watch's events.
func (w *podWatch) waitSettled(ctx context.Context, timeout time.Duration, wantReplaced bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for {
		w.mu.Lock()
		ok := w.settledLocked(wantReplaced)
		n, u := len(w.pods), w.unavailableLocked()
		w.mu.Unlock()
		if ok {
			return nil
		}
		select {
		case <-w.changed:
		case <-ctx.Done():
			return fmt.Errorf("pods did not settle within %s: %d pods, %d of %d nodes without a Ready pod", timeout, n, u, w.expected)
		}
	}
}

// Stop ends the watch and reports.
func (w *podWatch) Stop() podReport {
	w.stop()
	<-w.done
	w.mu.Lock()
	defer w.mu.Unlock()
	replaced := 0
	for uid := range w.initial {
		if _, ok := w.pods[uid]; !ok {
			replaced++
		}
	}
	return podReport{
		Expected: w.expected, UnavailableAtStart: w.unavailAt0, PeakUnavailable: w.peak,
		Replaced: replaced, Created: w.created, Deleted: w.deleted,
	}
}

package configmap

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/utils/ptr"

	"github.com/kube-proxy-sync/kube-proxy-sync/internal/kube"
)

// The pod template mounts an immutable copy of the record ConfigMap
// (kubeadm's kube-system/kube-proxy), named by a hash of its data: a
// change is a new copy and a new name in the template, so a kube-proxy the
// rollout has not reached keeps reading the copy it mounts, whatever
// restarts it, and a rollback (or `kubectl rollout undo`) is the template
// pointing back. The record is written only when no pod mounts it.
const (
	// CopyOfLabel on a copy names the record it is a copy of.
	CopyOfLabel = "kube-proxy-sync.io/config-of"
	// ManagedByLabel on a copy says kube-proxy-sync made it.
	ManagedByLabel = "app.kubernetes.io/managed-by"
	// CopyHashAnnotation on a copy is the full hash of its data (the name
	// carries the first CopyHashLen characters).
	CopyHashAnnotation = "kube-proxy-sync.io/config-hash"
	// CopyHashLen is how many hex characters of the data hash name a copy:
	// 40 bits, so two configs of one cluster's history never share one.
	CopyHashLen = 10
	// CopyGenerationAnnotation on a copy is the DaemonSet's template
	// generation whose pods mount it (for the copy of the config the fleet
	// ran before a change, kubeadm's layout: the template generation then):
	// the order of the history, newest first, whenever and in whatever
	// order the copies were created.
	CopyGenerationAnnotation = "kube-proxy-sync.io/template-generation"
)

var copySuffix = regexp.MustCompile(`^[0-9a-f]{10}$`)

// Hash is a stable digest of a ConfigMap's content (data and binaryData),
// which names its copies;
// metadata (labels, annotations, resourceVersion) does not count.
func Hash(data map[string]string, binary map[string][]byte) string {
	// encoding/json sorts map keys, so this is canonical
	b, _ := json.Marshal(struct {
		D map[string]string `json:"d"`
		B map[string][]byte `json:"b,omitempty"`
	}{data, binary})
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// CopyName is the name of the copy of record holding data with this hash.
func CopyName(record, hash string) string {
	return record + "-" + hash[:CopyHashLen]
}

// IsCopyName reports whether name is the name of a copy of record.
func IsCopyName(record, name string) bool {
	suffix, ok := strings.CutPrefix(name, record+"-")
	return ok && copySuffix.MatchString(suffix)
}

// NewCopy is the immutable copy of the record with this data (and the
// record's binaryData, which kube-proxy does not read but the copy
// carries, so that its name is the hash of all it holds), owned by the
// DaemonSet that mounts it, so that deleting the DaemonSet deletes its
// history too; generation is the DaemonSet's template generation whose
// pods mount it (CopyGenerationAnnotation; 0: none).
//
// A copy carries none of the record's labels, only its own (CopyOfLabel
// and ManagedByLabel): a cleanup aimed at the record by its labels (kubeadm's
// k8s-app=kube-proxy, a GitOps prune of what its manifests label) must not
// catch the config running pods mount; Copies.list finds the copies by
// CopyOfLabel.
func NewCopy(record *corev1.ConfigMap, data map[string]string, ds *appsv1.DaemonSet, generation int64) *corev1.ConfigMap {
	hash := Hash(data, record.BinaryData)
	l := map[string]string{CopyOfLabel: record.Name, ManagedByLabel: FieldManager}
	annotations := map[string]string{CopyHashAnnotation: hash}
	if generation > 0 {
		annotations[CopyGenerationAnnotation] = strconv.FormatInt(generation, 10)
	}
	cm := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: CopyName(record.Name, hash), Namespace: record.Namespace, Labels: l,
			Annotations: annotations,
		},
		Data:       data,
		BinaryData: record.BinaryData,
		Immutable:  ptr.To(true),
	}
	if ds != nil && ds.UID != "" {
		cm.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet", Name: ds.Name, UID: ds.UID}}
	}
	return cm
}

// Copies creates, reads and collects the copies of one record.
type Copies struct {
	ConfigMaps kube.ConfigMaps
	Namespace  string
	// Record is the name of the record ConfigMap (--configmap).
	Record string
}

// Ensure creates the copy, or finds it there already with the same data
// (an earlier run's, or this run's create whose answer was lost). A copy
// of that name with other data is refused: nothing restarts onto data
// that was not validated.
func (c Copies) Ensure(ctx context.Context, cp *corev1.ConfigMap) (*corev1.ConfigMap, error) {
	// named by its data: a repeat finds it there (AlreadyExists), never a second one
	out, err := c.ConfigMaps.Create(kube.Repeatable(ctx), cp, metav1.CreateOptions{FieldManager: FieldManager})
	if err == nil {
		return out, nil
	}
	if !apierrors.IsAlreadyExists(err) {
		return nil, c.request("create", cp.Name).Explain(err)
	}
	got, err := c.Get(ctx, cp.Name)
	if err != nil {
		return nil, err
	}
	return got, c.usable(got, cp)
}

// Check makes sure the copy cp is there for a pod template to mount, as
// cp holds it: it reads it, and creates it again from cp when it is gone
// (a prune, a label-based cleanup, the garbage collector after the
// DaemonSet was replaced). recreated says so. A copy being deleted, or
// holding other data than cp, is refused.
func (c Copies) Check(ctx context.Context, cp *corev1.ConfigMap) (recreated bool, err error) {
	got, err := c.ConfigMaps.Get(ctx, cp.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err := c.Ensure(ctx, cp)
		return err == nil, err
	}
	if err != nil {
		return false, c.request("get", cp.Name).Explain(err)
	}
	return false, c.usable(got, cp)
}

// usable refuses a copy a pod template must not be pointed at: one being
// deleted (it is gone a moment later, and pods that start then find no
// ConfigMap), or one holding other data than want, which has the same name.
func (c Copies) usable(got, want *corev1.ConfigMap) error {
	if got.DeletionTimestamp != nil {
		return fmt.Errorf("configmap %s/%s is being deleted (since %s, finalizers %v): a pod template pointed at it would mount nothing once it is gone; nothing was restarted onto it: let the deletion finish (or remove the finalizers), then run again, and the run makes it anew",
			c.Namespace, got.Name, got.DeletionTimestamp.UTC().Format(time.RFC3339), got.Finalizers)
	}
	if Hash(got.Data, got.BinaryData) != Hash(want.Data, want.BinaryData) {
		return fmt.Errorf("configmap %s/%s exists with other data than its name says (not made by kube-proxy-sync?): nothing was restarted onto it; delete it and run again", c.Namespace, got.Name)
	}
	return nil
}

// Get reads a copy (or the record) by name.
func (c Copies) Get(ctx context.Context, name string) (*corev1.ConfigMap, error) {
	cm, err := c.ConfigMaps.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, c.request("get", name).Explain(err)
	}
	return cm, nil
}

// list lists the copies of the record, newest first: by the template
// generation that mounts them (CopyGenerationAnnotation). Copies of the
// same generation (a restart owed onto one, then made onto another), or
// without one, go by creation time, then name.
func (c Copies) list(ctx context.Context) ([]corev1.ConfigMap, error) {
	list, err := c.ConfigMaps.List(ctx, metav1.ListOptions{LabelSelector: labels.Set{CopyOfLabel: c.Record}.String()})
	if err != nil {
		return nil, c.request("list", "").Explain(err)
	}
	var out []corev1.ConfigMap
	for _, cm := range list.Items {
		if IsCopyName(c.Record, cm.Name) {
			out = append(out, cm)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return Newer(&out[i], &out[j]) })
	return out, nil
}

// Newer reports whether copy a comes before copy b in the history.
func Newer(a, b *corev1.ConfigMap) bool {
	if ga, gb := copyGeneration(a), copyGeneration(b); ga != gb {
		return ga > gb
	}
	ta, tb := a.CreationTimestamp, b.CreationTimestamp
	if !ta.Equal(&tb) {
		return tb.Before(&ta)
	}
	return a.Name > b.Name
}

// copyGeneration is a copy's CopyGenerationAnnotation, 0 without one.
func copyGeneration(cm *corev1.ConfigMap) int64 {
	g, err := strconv.ParseInt(cm.Annotations[CopyGenerationAnnotation], 10, 64)
	if err != nil {
		return 0
	}
	return g
}

// Collect deletes the copies beyond the newest keep that nothing in use
// references. It returns the names deleted; a copy that cannot be deleted
// is left for the next run and reported in the error.
func (c Copies) Collect(ctx context.Context, keep int, inUse map[string]bool) ([]string, error) {
	copies, err := c.list(ctx)
	if err != nil {
		return nil, err
	}
	var deleted, failed []string
	for i, cm := range copies {
		if i < keep || inUse[cm.Name] {
			continue
		}
		err := c.ConfigMaps.Delete(ctx, cm.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: ptr.To(cm.UID)}})
		switch {
		case err == nil || apierrors.IsNotFound(err):
			deleted = append(deleted, cm.Name)
		case apierrors.IsConflict(err):
			// the UID precondition: another object of that name now (made
			// again since the list), not the one listed: not deleted
		default:
			failed = append(failed, fmt.Sprintf("%s: %v", cm.Name, err))
		}
	}
	if len(failed) > 0 {
		return deleted, fmt.Errorf("delete old copies of configmap %s/%s (left for the next run): %s", c.Namespace, c.Record, strings.Join(failed, "; "))
	}
	return deleted, nil
}

// request is verb on the copy name ("": on the record's copies), as its
// errors tell it (kube.Request.Explain).
func (c Copies) request(verb, name string) kube.Request {
	what := fmt.Sprintf("%s configmap %q", verb, c.Namespace+"/"+name)
	if name == "" {
		what = fmt.Sprintf("%s the copies of configmap %q", verb, c.Namespace+"/"+c.Record)
	}
	return kube.Request{What: what, NotFound: "not found", Needs: verb + " on configmaps in " + c.Namespace}
}

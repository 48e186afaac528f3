package kube

import (
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// rbacFile grants what the tool needs; a forbidden request points at it.
const rbacFile = "roles/kpsync/files/rbac.yaml"

// Request is a request to the API server as the user is told of it when it
// fails (see Explain).
type Request struct {
	// What names the request: `get configmap "kube-system/kube-proxy"`
	// ("": the error names it well enough).
	What string
	// NotFound is what a 404 means here: "not found: check --namespace"
	// ("": a 404 is told like any other error).
	NotFound string
	// Needs is the permission a 403 says the kubeconfig user lacks: "get on
	// configmaps" ("": a 403 is told like any other error).
	Needs string
}

// Explain words err, the API server's answer to r, for the user: "WHAT:
// NOTFOUND: err" for a 404, "WHAT: forbidden: the kubeconfig user needs
// NEEDS (see rbacFile): err" for a 403, "WHAT: err" for any other error. The
// result wraps err: apierrors.IsNotFound and the like still tell it.
func (r Request) Explain(err error) error {
	if err == nil {
		return nil
	}
	var says []string
	if r.What != "" {
		says = append(says, r.What)
	}
	switch {
	case apierrors.IsNotFound(err) && r.NotFound != "":
		says = append(says, r.NotFound)
	case apierrors.IsForbidden(err) && r.Needs != "":
		says = append(says, fmt.Sprintf("forbidden: the kubeconfig user needs %s (see %s)", r.Needs, rbacFile))
	}
	if len(says) == 0 {
		return err
	}
	return fmt.Errorf("%s: %w", strings.Join(says, ": "), err)
}

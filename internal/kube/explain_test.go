package kube

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestExplain(t *testing.T) {
	gr := schema.GroupResource{Resource: "configmaps"}
	notFound := apierrors.NewNotFound(gr, "kube-proxy")
	forbidden := apierrors.NewForbidden(gr, "kube-proxy", errors.New("no RBAC policy matched"))
	conflict := apierrors.NewConflict(gr, "kube-proxy", errors.New("the object has been modified"))
	get := Request{What: `get configmap "kube-system/kube-proxy"`, NotFound: "not found: check --configmap", Needs: "get on configmaps"}
	tests := []struct {
		name string
		r    Request
		err  error
		want string
	}{
		{name: "not found", r: get, err: notFound,
			want: `get configmap "kube-system/kube-proxy": not found: check --configmap: ` + notFound.Error()},
		{name: "forbidden", r: get, err: forbidden,
			want: `get configmap "kube-system/kube-proxy": forbidden: the kubeconfig user needs get on configmaps (see roles/kpsync/files/rbac.yaml): ` + forbidden.Error()},
		{name: "other API error", r: get, err: conflict,
			want: `get configmap "kube-system/kube-proxy": ` + conflict.Error()},
		{name: "not an API error", r: get, err: errors.New("connection refused"),
			want: `get configmap "kube-system/kube-proxy": connection refused`},
		{name: "404 with nothing to say", r: Request{What: "list the copies", Needs: "list on configmaps"}, err: notFound,
			want: "list the copies: " + notFound.Error()},
		{name: "403 with no request named", r: Request{Needs: `update on leases.coordination.k8s.io "kps"`}, err: forbidden,
			want: `forbidden: the kubeconfig user needs update on leases.coordination.k8s.io "kps" (see roles/kpsync/files/rbac.yaml): ` + forbidden.Error()},
		{name: "nothing to say", r: Request{Needs: "update on leases"}, err: notFound,
			want: notFound.Error()},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := tt.r.Explain(tt.err)
			assert.EqualError(t, got, tt.want)
			assert.ErrorIs(t, got, tt.err, "wraps the API server's error")
		})
	}
	assert.NoError(t, get.Explain(nil))
}

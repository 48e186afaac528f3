package probe

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/util/version"
)

// FuzzImageVersion feeds arbitrary image references to ImageVersion. It
// must never panic; a version it returns must round-trip through its
// string form and give a probe path; and a digest appended to a tagged
// reference must not change the answer. Seeds: testdata/fuzz/FuzzImageVersion.
func FuzzImageVersion(f *testing.F) {
	const digest = "@sha256:1111111111111111111111111111111111111111111111111111111111111111"
	f.Fuzz(func(t *testing.T, image string) {
		v, err := ImageVersion(image)
		if err != nil {
			if !strings.Contains(err.Error(), "image ") {
				t.Fatalf("error for %q does not name the image: %v", image, err)
			}
			return
		}
		if v == nil {
			t.Fatalf("ImageVersion(%q): nil version without error", image)
		}
		back, err := version.ParseGeneric(v.String())
		if err != nil || !back.EqualTo(v) {
			t.Fatalf("ImageVersion(%q) = %s, which does not parse back (%v)", image, v, err)
		}
		if p := PathFor(v); p != Livez && p != Healthz {
			t.Fatalf("PathFor(%s) = %q", v, p)
		}
		if !strings.Contains(image, "@") {
			w, err := ImageVersion(image + digest)
			if err != nil || !w.EqualTo(v) {
				t.Fatalf("ImageVersion(%q) = %s, but with a digest: %v, %v", image, v, w, err)
			}
		}
	})
}

package yamledit

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A key given twice: Kubernetes' YAML decoding keeps the last value, so
// that is the one Lookup reads and Set changes.
func TestDuplicateKeysUseTheLast(t *testing.T) {
	d, err := Parse("mode: iptables\nipvs:\n  strictARP: true\nmode: ipvs\nipvs:\n  scheduler: rr\n")
	require.NoError(t, err)
	assert.Equal(t, "ipvs", Lookup(d.Root(), "mode").Value)
	assert.Nil(t, Lookup(d.Root(), "ipvs", "strictARP"), "the first ipvs mapping is not read")

	changed, err := Set(d.Root(), []string{"mode"}, Str("nftables"))
	require.NoError(t, err)
	assert.True(t, changed)
	changed, err = Set(d.Root(), []string{"ipvs", "strictARP"}, Str("false"))
	require.NoError(t, err)
	assert.True(t, changed)
	out, err := d.String()
	require.NoError(t, err)
	assert.Equal(t, "mode: iptables\nipvs:\n  strictARP: true\nmode: nftables\nipvs:\n  scheduler: rr\n  strictARP: \"false\"\n", out)
}

package lab

import "testing"

// SetHostNft makes kube-proxy's images take nft from path for the test.
func SetHostNft(t *testing.T, path string) {
	old := hostNft
	hostNft = path
	t.Cleanup(func() { hostNft = old })
}

// HostNft is the host's nft that kube-proxy's images hold.
func HostNft() string { return hostNft }

package lab

// NftFilesOf are the files kube-proxy's image would hold for the nft at
// path.
func NftFilesOf(path string) (map[string]string, error) { return nftFilesOf(path) }

// HostNft is the host's nft that kube-proxy's images hold.
const HostNft = hostNft

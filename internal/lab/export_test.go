package lab

import (
	"context"
	"io"
)

// NftFilesOf are the files kube-proxy's image would hold for the nft at
// path.
func NftFilesOf(path string) (map[string]string, error) { return nftFilesOf(path) }

// HostNft is the host's nft that kube-proxy's images hold.
const HostNft = hostNft

// NodeFiles are the lab's node files, each node's kubeboot file and
// kubeadm's, and the CA's hash they pin.
func (l Lab) NodeFiles() (kubeboot, kubeadm []string, caHash string, err error) {
	files, plan, err := l.nodeFiles()
	if err != nil {
		return nil, nil, "", err
	}
	for _, f := range files {
		kubeboot = append(kubeboot, string(f.kubeboot))
		kubeadm = append(kubeadm, string(f.kubeadm))
	}
	return kubeboot, kubeadm, plan.CACertHash, nil
}

// ForwardEvents is forwardEvents.
func ForwardEvents(r io.Reader, node string, events chan<- Event, converged chan<- struct{}) {
	forwardEvents(r, node, events, converged)
}

// ImportArchive is importArchive, with run standing in for a machine's Run.
func ImportArchive(ctx context.Context, run func(ctx context.Context, stdin io.Reader, stdout, stderr io.Writer, argv ...string) error, path string, refs []string) error {
	return importArchive(ctx, run, path, refs)
}

// ArchiveRefs is archiveRefs.
func ArchiveRefs(path string) ([]string, error) { return archiveRefs(path) }

// ArchiveKey is archiveKey.
func ArchiveKey(images []Image) (string, error) { return archiveKey(images) }

package lab

import (
	"context"
	"io"
	"strings"
)

// NftFilesOf are the files kube-proxy's image would hold for the nft at
// path.
func NftFilesOf(path string) (map[string]string, error) { return nftFilesOf(path) }

// HostNft is the host's nft that kube-proxy's images hold.
const HostNft = hostNft

// NodeFiles are the lab's node files, each node's kubeboot file and
// kubeadm's, with the CA's hash given.
func (l Lab) NodeFiles(caHash string) (kubeboot, kubeadm []string, err error) {
	files, err := l.nodeFiles()
	for _, f := range files {
		kubeboot = append(kubeboot, strings.ReplaceAll(string(f.kubeboot), caHashPlaceholder, caHash))
		kubeadm = append(kubeadm, strings.ReplaceAll(string(f.kubeadm), caHashPlaceholder, caHash))
	}
	return kubeboot, kubeadm, err
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

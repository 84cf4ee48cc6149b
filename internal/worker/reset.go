package worker

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kubeboot/kubeboot/internal/config"
	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/workflow"
	"github.com/kubeboot/kubeboot/phases"
	"github.com/kubeboot/kubeboot/pki"
)

// defaultKubeletCertDir is where a kubelet keeps its certificates without
// --cert-dir: <root-dir>/pki.
const defaultKubeletCertDir = "/var/lib/kubelet/pki"

// Reset is `kubeboot reset` on a worker: it undoes the worker's join.
// It stops kubelet.service and removes kubeboot's drop-in (see
// phases.StopKubelet), then the runtime's pods (phases.RemovePods); with
// deleteNode, it deletes the node's Node object through the run's API
// client, once the kubelet that would register it again has stopped; then
// it removes the files the join wrote or the kubelet wrote for it:
// kubelet.conf, bootstrap-kubelet.conf, the kubelet's configuration, the
// cluster CA and the kubelet's certificates and keys, and last kubeboot's
// pod network (phases.ResetPodNetwork). Nothing else is touched, and it
// says what it left: the packet filter's rules and the rest of the
// kubelet's directory.
func Reset(deleteNode bool) workflow.Operation[*Node] {
	return workflow.Operation[*Node]{Name: "reset", Run: func(ctx context.Context, s *Node) error {
		return resetWorker(ctx, s, deleteNode)
	}}
}

func resetWorker(ctx context.Context, s *Node, deleteNode bool) error {
	w := s.Config
	// kubelet.conf names the client certificate, and so the cert dir;
	// read it before it goes.
	certDir := kubeletCertDir(s)
	host, port := phases.KubeletAddress(w.Kubelet.ExtraConfig)
	dropIn, err := phases.StopKubelet(ctx, s.Run, host, port)
	if err != nil {
		return err
	}
	if dropIn != "" && !s.Options.DryRun {
		s.Report.Infof("removed %s", dropIn)
	}
	podsLeft, err := phases.RemovePods(ctx, s.Run, w.Kubelet.ContainerRuntimeEndpoint)
	if err != nil {
		return err
	}
	if deleteNode {
		if err := deleteNodeObject(ctx, s); err != nil {
			return err
		}
	}
	paths := []string{
		w.KubeconfigPath(config.KubeconfigKubelet),
		w.KubeconfigPath(config.KubeconfigBootstrapKubelet),
		w.Kubelet.ConfigFile,
		w.CAPath(),
	}
	certs, err := phases.KubeletCerts(s.Run, certDir)
	if err != nil {
		return err
	}
	paths = append(paths, certs...)
	for _, path := range paths {
		// The path itself, not what a symlink there points to.
		if _, err := os.Lstat(filepath.Join(s.Files.HostPath(filepath.Dir(path)), filepath.Base(path))); errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err := s.Files.Remove(path); err != nil {
			return err
		}
		if !s.Options.DryRun {
			s.Report.Infof("removed %s", path)
		}
	}
	// The static pod path the join made, unless something is in it.
	dir := w.Paths.ManifestsDir
	if entries, err := os.ReadDir(s.Files.HostPath(dir)); err == nil {
		if len(entries) > 0 {
			s.Report.Infof("left %s: it holds files kubeboot did not write on a worker", dir)
		} else if err := s.Files.Remove(dir); err != nil {
			return err
		} else if !s.Options.DryRun {
			s.Report.Infof("removed %s", dir)
		}
	}
	// The pod network goes once the kubelet that would start pods on it
	// has stopped.
	_, left, err := phases.ResetPodNetwork(ctx, s.Run, w.Kubelet.ContainerRuntimeEndpoint)
	if err != nil {
		return err
	}
	for _, left := range append(append(podsLeft, left...),
		"iptables, nftables and IPVS rules: kubeboot does not own them",
		"the rest of the kubelet's directory, "+filepath.Dir(certDir)+": the kubelet's own state",
	) {
		s.Report.Infof("left %s", left)
	}
	if !deleteNode {
		s.Report.Infof("left the Node object: `kubectl delete node %s`, or --delete-node, removes it", w.Node.Name)
	}
	return nil
}

// deleteNodeObject deletes the worker's Node through the run's API client;
// a Node that is gone already is no error. A dry run deletes nothing.
func deleteNodeObject(ctx context.Context, s *Node) error {
	name := s.Config.Node.Name
	if s.API == nil {
		return &exit.UsageError{Msg: "--delete-node needs --kubeconfig: a kubeconfig allowed to delete Nodes, such as a control-plane node's admin.conf"}
	}
	if s.Options.DryRun {
		s.Report.Infof("would delete Node %s", name)
		return nil
	}
	err := s.API.CoreV1().Nodes().Delete(ctx, name, metav1.DeleteOptions{})
	switch {
	case apierrors.IsNotFound(err):
		s.Report.Infof("Node %s is not in the cluster", name)
	case err != nil:
		return fmt.Errorf("delete Node %s: %w", name, err)
	default:
		s.Report.Infof("deleted Node %s", name)
	}
	return nil
}

// kubeletCertDir is the dir of the rotating client certificate that
// kubelet.conf names (the kubelet's --cert-dir), or without one the
// kubelet's default.
func kubeletCertDir(s *Node) string {
	data, err := s.Files.ReadFile(s.Config.KubeconfigPath(config.KubeconfigKubelet))
	if err != nil {
		return defaultKubeletCertDir
	}
	cfg, err := clientcmd.Load(data)
	if err != nil || cfg.Contexts[cfg.CurrentContext] == nil {
		return defaultKubeletCertDir
	}
	user := cfg.AuthInfos[cfg.Contexts[cfg.CurrentContext].AuthInfo]
	if user == nil || !filepath.IsAbs(user.ClientCertificate) || filepath.Base(user.ClientCertificate) != pki.KubeletClientFile {
		return defaultKubeletCertDir
	}
	return filepath.Dir(user.ClientCertificate)
}

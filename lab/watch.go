package lab

import (
	"context"
	"crypto/tls"
	"fmt"
	"net/http"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"github.com/kubeboot/kubeboot/config"
	"github.com/kubeboot/kubeboot/health"
	"github.com/kubeboot/kubeboot/inputfile"
)

// watchInterval is how often WatchControlPlane looks: for manifests, then
// at each component. It is the resolution of the moment it reports.
const watchInterval = 20 * time.Millisecond

// ManifestsSeen is the milestone WatchControlPlane reports when it has
// read all four manifests; the others are the components' names.
const ManifestsSeen = "manifests"

// WatchControlPlane returns once the four components of the manifests in
// cfg's manifests dir all answer healthy, or with ctx's error. On the way
// it calls seen with each milestone, from one goroutine at a time:
// ManifestsSeen, then each component's name as it first answers. It is lab
// up's own view of the bring-up, the same whichever tool (kubeboot or
// kubeadm) wrote the manifests, so that make bench can time both alike:
// it reads where each component serves from the manifests, as the wait
// phase does, and polls each at a fixed 20 ms. etcd is checked through its
// client API with the healthcheck client certificate; the others' health
// endpoints need only answer 200 (the API server's with the
// apiserver-kubelet-client certificate), with no check of their serving
// certificates, which kubeadm does not issue for the controller manager
// and the scheduler.
func WatchControlPlane(ctx context.Context, cfg *config.ClusterConfiguration, seen func(milestone string)) error {
	var pods map[string]*corev1.Pod
	err := wait.PollUntilContextCancel(ctx, watchInterval, true, func(context.Context) (bool, error) {
		pods = map[string]*corev1.Pod{}
		for _, name := range config.ComponentNames {
			path := cfg.ManifestPath(name)
			data, err := inputfile.ReadYAML(path, inputfile.ManifestLimit, inputfile.ManifestNodes)
			pod := &corev1.Pod{}
			// A manifest not there yet, or being written in place: look again.
			if err != nil || yaml.Unmarshal(data, pod) != nil || len(pod.Spec.Containers) == 0 {
				return false, nil
			}
			pods[name] = pod
		}
		return true, nil
	})
	if err != nil {
		return err
	}
	seen(ManifestsSeen)
	targets, err := health.Targets(cfg, pods)
	if err != nil {
		return err
	}
	var seenMu sync.Mutex
	var wg sync.WaitGroup
	errs := make([]error, len(targets))
	for i, t := range targets {
		check, err := watchCheck(t)
		if err != nil {
			return err
		}
		wg.Go(func() {
			errs[i] = wait.PollUntilContextCancel(ctx, watchInterval, true, func(ctx context.Context) (bool, error) {
				return check(ctx) == nil, nil
			})
			if errs[i] == nil {
				seenMu.Lock()
				defer seenMu.Unlock()
				seen(t.Component)
			}
		})
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return fmt.Errorf("watch %s: %w", targets[i].Component, err)
		}
	}
	return nil
}

// watchCheck is the check of one target: etcd's probe of package health,
// or a GET of each path that wants 200.
func watchCheck(t health.Target) (func(context.Context) error, error) {
	if len(t.Paths) == 0 {
		p, err := health.NewProbe(t, nil)
		return p.Check, err
	}
	tlsConfig := &tls.Config{InsecureSkipVerify: true} //nolint:gosec // only whether it answers 200 counts; see WatchControlPlane
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("watch %s: %w", t.Component, err)
		}
		tlsConfig.Certificates = []tls.Certificate{cert}
	}
	client := &http.Client{Timeout: time.Second, Transport: &http.Transport{TLSClientConfig: tlsConfig}}
	return func(ctx context.Context) error {
		for _, path := range t.Paths {
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, t.Endpoints[0]+path, nil)
			if err != nil {
				return err
			}
			resp, err := client.Do(req)
			if err != nil {
				return err
			}
			_ = resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("%s%s: %s", t.Endpoints[0], path, resp.Status)
			}
		}
		return nil
	}, nil
}

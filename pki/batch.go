package pki

import (
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/kubeboot/kubeboot/internal/config"
)

// batch collects what one Ensure or Renew call must create, then creates
// it all concurrently.
type batch struct {
	have        Set
	now         time.Time
	algorithm   config.KeyAlgorithm
	renewBefore time.Duration
	caSpecs     map[string]CertSpec
	cas         map[string]*caState
	jobs        []*job
	// newServiceAccount asks run for a new service-account key pair.
	newServiceAccount bool
	out               Set
}

// caState is a CA that a batch issues with. A CA loaded from the node is
// ready at once; one that run creates is ready once its goroutine is done.
type caState struct {
	spec    CertSpec
	created bool
	// key is an existing CA key to certify, when its certificate is missing.
	key []byte
	// broken marks a CA whose problem was already reported.
	broken bool
	ready  chan struct{}
	// auth and err are set before ready is closed.
	auth *authority
	err  error
}

// job is a leaf certificate to issue.
type job struct {
	spec CertSpec
	// key is the existing PEM key to keep; nil generates a new one, or
	// takes the one keyOf generates.
	key   []byte
	keyOf *job
	// kubeconfig, if set, receives the certificate instead of Set.Certs.
	kubeconfig *KubeconfigSpec
	// generated is the job's key once keyReady is closed; it is unset if
	// the key could not be made.
	generated privateKey
	keyReady  chan struct{}
}

// privateKey makes the job's key and hands it to the jobs that share it.
func (j *job) privateKey() (privateKey, error) {
	defer close(j.keyReady)
	if j.keyOf != nil {
		<-j.keyOf.keyReady
		if j.keyOf.generated.signer != nil {
			j.generated = j.keyOf.generated
			return j.generated, nil
		}
	}
	key, err := reuseKey(j.spec.Algorithm, j.key)
	if err == nil {
		j.generated = key
	}
	return key, err
}

func newBatch(cfg *config.ClusterConfiguration, have Set, now time.Time) *batch {
	b := &batch{
		have:        have,
		now:         now,
		algorithm:   cfg.Certificates.KeyAlgorithm,
		renewBefore: cfg.Certificates.RenewBefore.Duration,
		caSpecs:     map[string]CertSpec{},
		cas:         map[string]*caState{},
		out:         Set{Certs: map[string]KeyPair{}, Kubeconfigs: map[string][]byte{}},
	}
	for _, s := range CertSpecs(cfg) {
		if s.Usage == UsageCA {
			b.caSpecs[s.Name] = s
		}
	}
	return b
}

// ca returns the named CA, loading it from the node on first use. A CA
// on the node must be valid now; the renewal window does not apply, as CAs
// are never renewed. A broken CA is reported once: later calls return nil
// and no error.
func (b *batch) ca(name string) (*caState, error) {
	if st, ok := b.cas[name]; ok {
		if st.broken {
			return nil, nil
		}
		return st, nil
	}
	st := &caState{spec: b.caSpecs[name], broken: true}
	b.cas[name] = st
	pair := b.have.Certs[name]
	if len(pair.Cert) == 0 {
		return nil, fmt.Errorf("find CA %q: %s is missing", name, st.spec.File())
	}
	if err := Check(st.spec, pair, nil, b.now, 0); err != nil {
		return nil, err
	}
	auth, err := parseAuthority(pair)
	if err != nil {
		return nil, fmt.Errorf("read CA %q: %w", name, err)
	}
	st.auth, st.broken, st.ready = auth, false, make(chan struct{})
	close(st.ready)
	return st, nil
}

// create registers a CA for run to create, with key when it is not nil.
func (b *batch) create(spec CertSpec, key []byte) {
	b.cas[spec.Name] = &caState{spec: spec, created: true, key: key, ready: make(chan struct{})}
}

// add registers a leaf for run to issue with ca, which needs the CA key.
func (b *batch) add(ca *caState, j job) error {
	if !ca.created && ca.auth.key == nil {
		return fmt.Errorf("issue certificate %q: %s.key is absent (external CA)", j.spec.Name, j.spec.CA)
	}
	j.keyReady = make(chan struct{})
	b.jobs = append(b.jobs, &j)
	return nil
}

// pending returns the job of this batch that generates a new key for the
// named certificate, or nil.
func (b *batch) pending(name string) *job {
	for _, j := range b.jobs {
		if j.spec.Name == name && j.kubeconfig == nil && j.key == nil {
			return j
		}
	}
	return nil
}

// run creates the new CAs and, at the same time, the keys of every leaf;
// each leaf is then signed as soon as its CA is ready. On 2 cores this
// keeps both busy while the slow RSA keys are generated.
func (b *batch) run() (Set, error) {
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		errs []error
	)
	done := func(err error, save func()) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil {
			errs = append(errs, err)
			return
		}
		save()
	}
	for _, ca := range b.cas {
		if !ca.created {
			continue
		}
		wg.Go(func() {
			defer close(ca.ready)
			ca.auth, ca.err = createCA(ca.spec, ca.key)
			done(ca.err, func() {
				pair := ca.auth.pair
				if ca.key != nil {
					pair.Key = nil // the kept key file stays as it is
				}
				b.out.Certs[ca.spec.Name] = pair
			})
		})
	}
	for _, j := range b.jobs {
		ca := b.cas[j.spec.CA]
		wg.Go(func() {
			key, err := j.privateKey()
			if err != nil {
				done(fmt.Errorf("issue certificate %q: %w", j.spec.Name, err), nil)
				return
			}
			<-ca.ready
			if ca.err != nil {
				return // reported by the CA's goroutine
			}
			pair, err := ca.auth.issue(j.spec, key)
			if err == nil && j.kubeconfig != nil {
				var data []byte
				data, err = Kubeconfig(*j.kubeconfig, ca.auth.pair.Cert, pair)
				done(err, func() { b.out.Kubeconfigs[j.kubeconfig.Name] = data })
				return
			}
			if j.key != nil {
				pair.Key = nil // the kept key file stays as it is
			}
			done(err, func() { b.out.Certs[j.spec.Name] = pair })
		})
	}
	if b.newServiceAccount {
		wg.Go(func() {
			sa, err := NewServiceAccountKey(b.algorithm)
			done(err, func() { b.out.ServiceAccount = sa })
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return Set{}, err
	}
	return b.out, nil
}

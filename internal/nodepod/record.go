package nodepod

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// Record is a run's state kept in the cluster: a JSON document under the
// key "state" of the ConfigMap Name in kube-system, written only on the
// resourceVersion this run last saw, so that a second run of Command at
// the same time is refused rather than overwritten.
type Record struct {
	Client kubernetes.Interface
	Name   string
	// Command is the command whose state it is, for the messages.
	Command string
	Poll    time.Duration
	// stored says that the ConfigMap exists, and version is its
	// resourceVersion as this run last read or wrote it.
	stored  bool
	version string
}

// recordKey is the key of the ConfigMap's data that holds the state.
const recordKey = "state"

// Load reads the state into v, saying whether there is one.
func (r *Record) Load(ctx context.Context, v any) (bool, error) {
	cm, err := r.Client.CoreV1().ConfigMaps(metav1.NamespaceSystem).Get(ctx, r.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("read kube-system/%s, the state of %s: %w", r.Name, r.Command, err)
	}
	if err := json.Unmarshal([]byte(cm.Data[recordKey]), v); err != nil {
		return false, fmt.Errorf("kube-system/%s: its %s does not parse (%w): delete the ConfigMap once no %s runs, then run again", r.Name, recordKey, err, r.Command)
	}
	r.stored, r.version = true, cm.ResourceVersion
	return true, nil
}

// Save writes v as the state, retrying while the API server does not
// answer. A conflict counts as this run's own write only when the stored
// state is exactly v (an answer lost while an API server restarted);
// otherwise another run wrote it, and Save fails.
func (r *Record) Save(ctx context.Context, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	cms := r.Client.CoreV1().ConfigMaps(metav1.NamespaceSystem)
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: r.Name, Namespace: metav1.NamespaceSystem, ResourceVersion: r.version}, Data: map[string]string{recordKey: string(data)}}
	var changed error
	err = Retry(ctx, r.Poll, func() error {
		var written *corev1.ConfigMap
		var err error
		if !r.stored {
			written, err = cms.Create(ctx, cm, metav1.CreateOptions{})
		} else {
			written, err = cms.Update(ctx, cm, metav1.UpdateOptions{})
		}
		if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
			if now, gerr := cms.Get(ctx, r.Name, metav1.GetOptions{}); gerr == nil && now.Data[recordKey] == string(data) {
				written, err = now, nil
			} else {
				changed = fmt.Errorf("kube-system/%s changed under this run: another `%s` runs; let it finish, or stop it, then run again", r.Name, r.Command)
				return nil
			}
		}
		if err != nil {
			return fmt.Errorf("record the state of %s in kube-system/%s: %w", r.Command, r.Name, err)
		}
		r.stored, r.version = true, written.ResourceVersion
		return nil
	})
	if err != nil {
		return err
	}
	return changed
}

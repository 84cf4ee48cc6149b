// Package staticpod owns the question "would the kubelet v1.36 accept this
// static pod manifest?".
//
// It decodes a manifest the way the kubelet does (YAML 1.1 converted to JSON,
// first document only, kind Pod, name suffixed with the node name), but it
// is stricter wherever the kubelet is silently lenient: unknown fields,
// extra documents and bare YAML 1.1 booleans are findings here. It then
// applies the pod create validation the kubelet runs, rule by rule for the
// fields a static pod uses, and the rule that a static pod may not
// reference an API object (feature PreventStaticPodAPIReferences). Fields
// that only the scheduler, a controller or a Windows node acts on, and
// volume types it does not check, it refuses rather than vouch for them.
// test/tools/podvalidation holds it to the kubelet's own validation on a
// generated corpus. ValidateDir also lints a manifest directory as the
// kubelet reads it.
//
// The package is pure: it never writes to disk and never prints. Directories
// are read through an fs.FS.
package staticpod

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kubeboot/kubeboot/internal/exit"
)

// Finding is one reason, at one field, why the kubelet would reject a
// manifest (an error) or might not do what its author expects (a warning).
type Finding struct {
	// Field is the path of the offending field, such as
	// "spec.volumes[3].secret"; it is empty for findings about the whole file.
	Field string `json:"field"`
	// Resource is the plural API resource a forbidden reference points to,
	// such as "secrets"; it is empty for every other finding.
	Resource string `json:"resource"`
	// Message says what is wrong and, where it is not obvious, why.
	Message string `json:"message"`
}

// String formats the finding as "<field>: <message>".
func (f Finding) String() string {
	if f.Field == "" {
		return f.Message
	}
	return f.Field + ": " + f.Message
}

// Result is the verdict on one manifest file.
type Result struct {
	// File names the manifest, as given to Validate or relative to the
	// directory given to ValidateDir.
	File string `json:"file"`
	// Accepted reports whether the kubelet would run the pod: no Errors.
	Accepted bool `json:"accepted"`
	// Errors are the findings that make the kubelet reject the file or
	// misbehave with it.
	Errors []Finding `json:"errors"`
	// Warnings are findings the kubelet tolerates but that are likely
	// mistakes.
	Warnings []Finding `json:"warnings"`
}

// finish sets Accepted and turns nil slices into empty ones, so that
// `kubeboot validate -o json` prints [] rather than null.
func (r Result) finish() Result {
	r.Accepted = len(r.Errors) == 0
	if r.Errors == nil {
		r.Errors = []Finding{}
	}
	if r.Warnings == nil {
		r.Warnings = []Finding{}
	}
	return r
}

// RejectedError reports manifests the kubelet would reject. Commands exit
// with ExitCode when they return it.
type RejectedError struct {
	// Results are the rejected results, in the order they were given.
	Results []Result
}

// Error lists every error finding, one per line, as
// "<file>: <field>: <message>". Warnings are left out: they are not why
// the manifests were rejected.
func (e *RejectedError) Error() string {
	var lines []string
	for _, r := range e.Results {
		for _, f := range r.Errors {
			lines = append(lines, r.File+": "+f.String())
		}
	}
	return strings.Join(lines, "\n")
}

// ExitCode returns 3, kubeboot's exit code for a manifest the kubelet would
// reject.
func (e *RejectedError) ExitCode() int { return exit.Rejected }

// Err returns a *RejectedError holding the results that are not accepted,
// or nil when every result is accepted.
func Err(results []Result) error {
	var rejected []Result
	for _, r := range results {
		if !r.Accepted {
			rejected = append(rejected, r)
		}
	}
	if len(rejected) == 0 {
		return nil
	}
	return &RejectedError{Results: rejected}
}

// Validate decides whether the kubelet on node nodeName would run the
// static pod manifest data, read from file. It decodes the manifest, then
// applies ValidatePod. A missing namespace is a warning: the kubelet puts
// the pod in "default", which is rarely what a control-plane pod wants.
func Validate(file string, data []byte, nodeName string) Result {
	res, _ := validate(file, data, nodeName)
	return res
}

// validate is Validate that also returns the decoded pod, or nil when the
// file does not hold a v1 Pod, so ValidateDir can compare pod names.
func validate(file string, data []byte, nodeName string) (Result, *corev1.Pod) {
	res := Result{File: file}
	pod, errs := decode(data)
	res.Errors = errs
	if pod != nil {
		if pod.Namespace == "" {
			res.Warnings = append(res.Warnings, Finding{
				Field:   "metadata.namespace",
				Message: `not set: the kubelet puts the pod in namespace "default"`,
			})
		}
		res.Errors = append(res.Errors, ValidatePod(pod, nodeName)...)
	}
	return res.finish(), pod
}

// report collects findings so that each check reads as one line.
type report []Finding

// add records a finding at path.
func (r *report) add(path *field.Path, format string, args ...any) {
	*r = append(*r, Finding{Field: path.String(), Message: fmt.Sprintf(format, args...)})
}

// oneOf records a finding unless value is empty (defaulting fills it in)
// or one of allowed.
func (r *report) oneOf(path *field.Path, value string, allowed ...string) {
	if value != "" {
		r.oneOfSet(path, value, allowed...)
	}
}

// oneOfSet records a finding unless value is one of allowed; it is for
// optional fields that, once set, have no default.
func (r *report) oneOfSet(path *field.Path, value string, allowed ...string) {
	if !slices.Contains(allowed, value) {
		r.add(path, "unsupported value %q: must be one of %s", value, strings.Join(allowed, ", "))
	}
}

// each records one finding per message, as returned by the apimachinery
// validation helpers.
func (r *report) each(path *field.Path, value any, msgs []string) {
	for _, m := range msgs {
		r.add(path, "invalid value %#v: %s", value, m)
	}
}

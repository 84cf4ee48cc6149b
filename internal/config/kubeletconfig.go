package config

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	sigsjson "sigs.k8s.io/json"
)

// decodeKubeletExtraConfig decodes kubelet.extraConfig at p strictly into
// the kubelet's own KubeletConfiguration, as the kubelet reads its file:
// an unknown field or a value of the wrong type is an error here rather
// than a kubelet that does not start. apiVersion and kind are kubeboot's.
func decodeKubeletExtraConfig(p *field.Path, extra map[string]any) (*kubeletv1beta1.KubeletConfiguration, field.ErrorList) {
	kc := &kubeletv1beta1.KubeletConfiguration{}
	if len(extra) == 0 {
		return kc, nil
	}
	var errs field.ErrorList
	for _, key := range []string{"apiVersion", "kind"} {
		if _, set := extra[key]; set {
			errs = append(errs, field.Forbidden(p.Child(key), "kubeboot writes a kubelet.config.k8s.io/v1beta1 KubeletConfiguration: remove "+key))
		}
	}
	raw, err := json.Marshal(extra)
	if err != nil {
		return kc, append(errs, field.Invalid(p, "", err.Error()))
	}
	strict, err := sigsjson.UnmarshalStrict(raw, kc)
	if err != nil {
		return kc, append(errs, kubeletTypeError(p, raw, err))
	}
	for _, e := range strict {
		path := e.Error()
		var fe sigsjson.FieldError
		if errors.As(e, &fe) {
			path = fe.FieldPath()
		}
		errs = append(errs, field.Invalid(fieldAt(p, path), "", "not a KubeletConfiguration (kubelet.config.k8s.io/v1beta1) field: check its spelling and case"))
	}
	return kc, errs
}

// kubeletTypeError names the field of a type mismatch, which the standard
// library's decoder reports and the strict one does not.
func kubeletTypeError(p *field.Path, raw []byte, err error) *field.Error {
	var te *json.UnmarshalTypeError
	if errors.As(json.Unmarshal(raw, &kubeletv1beta1.KubeletConfiguration{}), &te) && te.Field != "" {
		return field.Invalid(fieldAt(p, te.Field), te.Value, fmt.Sprintf("wrong type: the kubelet wants %s", te.Type))
	}
	return field.Invalid(p, "", err.Error())
}

// fieldAt extends p by a JSON path like a.b[0].c.
func fieldAt(p *field.Path, path string) *field.Path {
	for _, step := range pathStep.FindAllString(path, -1) {
		if i, err := strconv.Atoi(strings.Trim(step, "[]")); err == nil && strings.HasPrefix(step, "[") {
			p = p.Index(i)
		} else {
			p = p.Child(step)
		}
	}
	return p
}

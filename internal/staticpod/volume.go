package staticpod

import (
	"path"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/validate/content"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// checkVolumes checks each volume and returns the volume sources by name,
// for the containers' mounts to refer to.
func checkVolumes(r *report, p *field.Path, volumes []corev1.Volume) map[string]*corev1.VolumeSource {
	byName := map[string]*corev1.VolumeSource{}
	for i := range volumes {
		v := &volumes[i]
		vp := p.Index(i)
		switch {
		case v.Name == "":
			r.add(vp.Child("name"), "required")
		case byName[v.Name] != nil:
			r.add(vp.Child("name"), "duplicate volume name %q", v.Name)
		default:
			r.each(vp.Child("name"), v.Name, content.IsDNS1123Label(v.Name))
			byName[v.Name] = &v.VolumeSource
		}
		checkVolumeSource(r, vp, &v.VolumeSource)
	}
	return byName
}

// checkVolumeSource checks the source of one volume: exactly one type, and
// the fields the kubelet requires of the types a static pod may use.
func checkVolumeSource(r *report, p *field.Path, source *corev1.VolumeSource) {
	if len(setFields(source)) == 0 {
		// The kubelet accepts this, but only because defaulting turns it
		// into an emptyDir, which is rarely what was meant.
		r.add(p, "must specify a volume source: the kubelet would silently make this volume an emptyDir; write emptyDir: {} if that is meant")
	} else {
		r.exactlyOne(p, source, "volume source")
	}

	for _, name := range setFields(source) {
		if resource, ok := volumeTypes[name]; ok && resource == "" && !slices.Contains(checkedVolumeTypes, name) {
			r.add(p.Child(name), "not supported in a static pod: kubeboot does not check %s volumes, so it cannot vouch that the kubelet mounts them; use hostPath for the node's storage", name)
		}
	}
	if hp := source.HostPath; hp != nil {
		hpp := p.Child("hostPath")
		switch {
		case hp.Path == "":
			r.add(hpp.Child("path"), "required")
		case hasBacksteps(hp.Path):
			r.add(hpp.Child("path"), "must not contain '..'")
		}
		if hp.Type != nil {
			r.oneOf(hpp.Child("type"), string(*hp.Type), "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket", "CharDevice", "BlockDevice")
		}
	}
	if ed := source.EmptyDir; ed != nil {
		medium := string(ed.Medium)
		if !strings.HasPrefix(medium, "HugePages-") {
			r.oneOf(p.Child("emptyDir", "medium"), medium, "Memory", "HugePages")
		}
		if ed.SizeLimit != nil && ed.SizeLimit.Sign() < 0 {
			r.add(p.Child("emptyDir", "sizeLimit"), "must not be negative")
		}
	}
	if img := source.Image; img != nil {
		if img.Reference == "" {
			r.add(p.Child("image", "reference"), "required")
		}
		r.oneOf(p.Child("image", "pullPolicy"), string(img.PullPolicy), "Always", "IfNotPresent", "Never")
	}
	if d := source.DownwardAPI; d != nil {
		r.checkMode(p.Child("downwardAPI", "defaultMode"), d.DefaultMode)
		checkDownwardAPIFiles(r, p.Child("downwardAPI", "items"), d.Items)
	}
	if pr := source.Projected; pr != nil {
		r.checkMode(p.Child("projected", "defaultMode"), pr.DefaultMode)
		for j := range pr.Sources {
			sp := p.Child("projected", "sources").Index(j)
			r.exactlyOne(sp, &pr.Sources[j], "projected source")
			if d := pr.Sources[j].DownwardAPI; d != nil {
				checkDownwardAPIFiles(r, sp.Child("downwardAPI", "items"), d.Items)
			}
		}
	}
}

// checkedVolumeTypes are the volume types, of those that reference no API
// object, whose fields kubeboot checks. A static pod reads the node, so
// the others (network and cloud storage, most of them in-tree drivers that
// Kubernetes removed) are refused.
var checkedVolumeTypes = []string{"hostPath", "emptyDir", "image", "downwardAPI", "projected"}

// maxFileMode is the largest permission mode of a file in a volume, 0777.
const maxFileMode = 0o777

// checkMode requires a file mode, when set, to be between 0 and 0777.
func (r *report) checkMode(p *field.Path, mode *int32) {
	if mode != nil && (*mode < 0 || *mode > maxFileMode) {
		r.add(p, "invalid value %d: must be a file mode between 0 and 0777 (octal), 511 in decimal", *mode)
	}
}

// checkDownwardAPIFiles checks the files of a downwardAPI volume or
// projection: each is a relative path inside the volume, from one source.
func checkDownwardAPIFiles(r *report, p *field.Path, files []corev1.DownwardAPIVolumeFile) {
	for i, f := range files {
		fp := p.Index(i)
		r.checkRelativePath(fp.Child("path"), f.Path, true)
		r.checkMode(fp.Child("mode"), f.Mode)
		if (f.FieldRef == nil) == (f.ResourceFieldRef == nil) {
			r.add(fp, "must specify exactly one of fieldRef and resourceFieldRef")
		}
		if f.FieldRef != nil && f.FieldRef.FieldPath == "" {
			r.add(fp.Child("fieldRef", "fieldPath"), "required")
		}
		if f.ResourceFieldRef != nil && f.ResourceFieldRef.Resource == "" {
			r.add(fp.Child("resourceFieldRef", "resource"), "required")
		}
	}
}

// checkRelativePath requires a path that stays below the directory it is
// relative to, such as a volume mount's subPath.
func (r *report) checkRelativePath(p *field.Path, value string, required bool) {
	switch {
	case value == "":
		if required {
			r.add(p, "required")
		}
	case path.IsAbs(value):
		r.add(p, "must be a relative path")
	case hasBacksteps(value):
		r.add(p, "must not contain '..'")
	}
}

// hasBacksteps reports whether a slash-separated path has a ".." element.
func hasBacksteps(p string) bool {
	return slices.Contains(strings.Split(p, "/"), "..")
}

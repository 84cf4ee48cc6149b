package release

import (
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"regexp"
	"runtime/debug"
	"strings"
	"time"
)

// spdxDocument is an SPDX 2.3 document in its JSON form, with the fields
// the release fills.
type spdxDocument struct {
	SPDXVersion       string             `json:"spdxVersion"`
	DataLicense       string             `json:"dataLicense"`
	SPDXID            string             `json:"SPDXID"`
	Name              string             `json:"name"`
	DocumentNamespace string             `json:"documentNamespace"`
	CreationInfo      spdxCreationInfo   `json:"creationInfo"`
	Packages          []spdxPackage      `json:"packages"`
	Relationships     []spdxRelationship `json:"relationships"`
}

type spdxCreationInfo struct {
	Created  string   `json:"created"`
	Creators []string `json:"creators"`
}

type spdxPackage struct {
	Name             string            `json:"name"`
	SPDXID           string            `json:"SPDXID"`
	VersionInfo      string            `json:"versionInfo,omitempty"`
	DownloadLocation string            `json:"downloadLocation"`
	FilesAnalyzed    bool              `json:"filesAnalyzed"`
	Comment          string            `json:"comment,omitempty"`
	ExternalRefs     []spdxExternalRef `json:"externalRefs,omitempty"`
}

type spdxExternalRef struct {
	ReferenceCategory string `json:"referenceCategory"`
	ReferenceType     string `json:"referenceType"`
	ReferenceLocator  string `json:"referenceLocator"`
}

type spdxRelationship struct {
	SPDXElementID      string `json:"spdxElementId"`
	RelationshipType   string `json:"relationshipType"`
	RelatedSPDXElement string `json:"relatedSpdxElement"`
}

// spdxIDUnsafe is what an SPDX identifier may not hold.
var spdxIDUnsafe = regexp.MustCompile(`[^A-Za-z0-9.-]`)

// spdxFromBinary is the SBOM of the Go binary at path: the Go modules its
// build information names (go version -m), each with its version and its
// module sum, and the standard library of its Go release.
func spdxFromBinary(path, version string, at time.Time) ([]byte, error) {
	info, err := buildinfo.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("SBOM: %w", err)
	}
	return spdx(info, version, at)
}

// spdx is the SBOM of a binary of build information info.
func spdx(info *debug.BuildInfo, version string, at time.Time) ([]byte, error) {
	const mainID = "SPDXRef-Package-kubeboot"
	doc := spdxDocument{
		SPDXVersion:       "SPDX-2.3",
		DataLicense:       "CC0-1.0",
		SPDXID:            "SPDXRef-DOCUMENT",
		Name:              "kubeboot-" + version,
		DocumentNamespace: "https://github.com/kubeboot/kubeboot/releases/" + version + "/sbom",
		CreationInfo: spdxCreationInfo{
			Created:  at.UTC().Format(time.RFC3339),
			Creators: []string{"Tool: kubeboot-release", "Organization: kubeboot"},
		},
		Packages: []spdxPackage{{
			Name: "kubeboot", SPDXID: mainID, VersionInfo: version,
			DownloadLocation: "git+https://github.com/kubeboot/kubeboot@" + version,
			ExternalRefs:     []spdxExternalRef{purl(info.Main.Path, version)},
		}, {
			Name: "stdlib", SPDXID: "SPDXRef-Package-stdlib", VersionInfo: info.GoVersion,
			DownloadLocation: "https://go.dev/dl/",
			ExternalRefs:     []spdxExternalRef{purl("stdlib", info.GoVersion)},
		}},
		Relationships: []spdxRelationship{
			{"SPDXRef-DOCUMENT", "DESCRIBES", mainID},
			{mainID, "DEPENDS_ON", "SPDXRef-Package-stdlib"},
		},
	}
	for _, dep := range info.Deps { // in go version -m's order, sorted by path
		m := dep
		if dep.Replace != nil {
			m = dep.Replace
		}
		id := "SPDXRef-Package-" + spdxIDUnsafe.ReplaceAllString(dep.Path, "-")
		p := spdxPackage{
			Name: dep.Path, SPDXID: id, VersionInfo: m.Version,
			DownloadLocation: "https://proxy.golang.org/" + m.Path + "/@v/" + m.Version + ".zip",
			ExternalRefs:     []spdxExternalRef{purl(m.Path, m.Version)},
		}
		var comment []string
		if m.Sum != "" {
			comment = append(comment, "go.sum "+m.Sum)
		}
		if dep.Replace != nil {
			comment = append(comment, fmt.Sprintf("%s replaced by %s", dep.Path, m.Path))
		}
		p.Comment = strings.Join(comment, "; ")
		doc.Packages = append(doc.Packages, p)
		doc.Relationships = append(doc.Relationships, spdxRelationship{mainID, "DEPENDS_ON", id})
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(out, '\n'), nil
}

// purl is a Go module's package URL.
func purl(path, version string) spdxExternalRef {
	return spdxExternalRef{ReferenceCategory: "PACKAGE-MANAGER", ReferenceType: "purl",
		ReferenceLocator: "pkg:golang/" + path + "@" + version}
}

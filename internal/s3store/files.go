package s3store

import (
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"strings"

	"github.com/kubeboot/kubeboot/internal/exit"
	"github.com/kubeboot/kubeboot/internal/inputfile"
)

// credentialsLimit caps the credentials file: a few profiles of keys and
// session tokens take a few KiB, so 1 MiB only guards against the wrong file.
const credentialsLimit = 1 << 20

// accessKey is the key of the credentials file's [default] profile.
type accessKey struct {
	accessKeyID, secretKey, sessionToken string
}

// credentialsFix says what the credentials file must hold.
const credentialsFix = "want the AWS shared credentials format: a [default] section with aws_access_key_id = ... and aws_secret_access_key = ... lines"

// readCredentials reads the [default] profile of the AWS shared
// credentials file at path. Only the key lines are read: a
// credential_process, which would run a command, is not.
func readCredentials(path string) (accessKey, error) {
	data, err := inputfile.Read(path, credentialsLimit)
	if err != nil {
		return accessKey{}, fileError("credentialsFile", path, fmt.Sprintf("cannot read it (%s): %s", reason(err), credentialsFix))
	}
	key, err := parseCredentials(string(data))
	if err != nil {
		return accessKey{}, fileError("credentialsFile", path, fmt.Sprintf("%v: %s", err, credentialsFix))
	}
	return key, nil
}

// parseCredentials reads the [default] profile of a credentials file: an
// INI file of [profile] sections, key = value lines and # or ; comments.
func parseCredentials(text string) (accessKey, error) {
	var key accessKey
	values := map[string]*string{
		"aws_access_key_id":     &key.accessKeyID,
		"aws_secret_access_key": &key.secretKey,
		"aws_session_token":     &key.sessionToken,
	}
	section := ""
	for i, line := range strings.Split(text, "\n") {
		line = strings.TrimSpace(line)
		if line == "" || line[0] == '#' || line[0] == ';' {
			continue
		}
		if name, ok := strings.CutPrefix(line, "["); ok {
			if name, ok = strings.CutSuffix(name, "]"); !ok {
				return accessKey{}, fmt.Errorf("line %d: a section header without its closing ]", i+1)
			}
			section = strings.TrimSpace(name)
			continue
		}
		name, value, ok := strings.Cut(line, "=")
		if !ok {
			return accessKey{}, fmt.Errorf("line %d is neither a [section], a key = value line nor a comment", i+1)
		}
		if dest, known := values[strings.TrimSpace(name)]; known && section == "default" {
			*dest = strings.TrimSpace(value)
		}
	}
	switch {
	case key.accessKeyID == "":
		return accessKey{}, errors.New("its [default] section has no aws_access_key_id")
	case key.secretKey == "":
		return accessKey{}, errors.New("its [default] section has no aws_secret_access_key")
	}
	return key, nil
}

// readCA reads the PEM bundle of CA certificates at path.
func readCA(path string) (*x509.CertPool, error) {
	const fix = "want the PEM bundle of the CA certificates that signed the endpoint's certificate, or no caFile for the node's system CAs"
	data, err := inputfile.Read(path, inputfile.PEMLimit)
	if err != nil {
		return nil, fileError("caFile", path, fmt.Sprintf("cannot read it (%s): %s", reason(err), fix))
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(data) {
		return nil, fileError("caFile", path, "it holds no PEM certificate: "+fix)
	}
	return pool, nil
}

// fileError is the configuration error of the file at path, which the
// field of the bucket's configuration names.
func fileError(name, path, msg string) error {
	return &exit.UsageError{Msg: fmt.Sprintf("%s.%s %s: %s", field, name, path, msg)}
}

// reason is err without the path that fileError shows already.
func reason(err error) string {
	var pathErr *fs.PathError
	if errors.As(err, &pathErr) {
		return pathErr.Op + ": " + pathErr.Err.Error()
	}
	return err.Error()
}

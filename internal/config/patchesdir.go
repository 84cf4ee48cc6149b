package config

import (
	"errors"
	"io/fs"
	"os"

	securejoin "github.com/cyphar/filepath-securejoin"
)

// CheckPatchesDir checks that c's patchesDir, when set, is a directory on
// the node, whose filesystem starts at root ("" or "/" for this machine),
// so that a typo fails before anything is written rather than at the
// manifests phase, after the PKI and the kubeconfigs. It is separate from
// Validate, which knows nothing of the node. file names the configuration
// in the error, an *InvalidError (exit 2).
func CheckPatchesDir(c *ClusterConfiguration, file, root string) error {
	dir := c.PatchesDir
	if dir == "" {
		return nil
	}
	host := dir
	if root != "" {
		// Resolved inside root, as the writers resolve every node path, so
		// an absolute symlink cannot send the check outside it.
		var err error
		if host, err = securejoin.SecureJoin(root, dir); err != nil {
			return &InvalidError{File: file, Problems: []Problem{{Field: "patchesDir", Message: "cannot resolve it under " + root + ": " + err.Error()}}}
		}
	}
	where := ""
	if host != dir {
		where = " (looked for " + host + ")"
	}
	info, err := os.Stat(host)
	var msg string
	switch {
	case errors.Is(err, fs.ErrNotExist):
		msg = dir + " does not exist" + where + ": create it or remove the field"
	case err != nil:
		msg = "cannot read it: " + err.Error()
	case !info.IsDir():
		msg = dir + " is not a directory" + where + ": give the directory that holds the patch files"
	default:
		return nil
	}
	return &InvalidError{File: file, Problems: []Problem{{Field: "patchesDir", Message: msg}}}
}

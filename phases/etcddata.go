package phases

import (
	"errors"
	"fmt"
	"io/fs"
	"strconv"
	"strings"
)

// etcdDataDirMode keeps etcd's data, every Secret included, from other
// users (CIS 1.1.11).
const etcdDataDirMode fs.FileMode = 0o700

// passwdFile is read through the files.Writer, so that an offline render
// would see the image's users rather than this machine's.
const passwdFile = "/etc/passwd"

// EnsureEtcdDataDir creates the local etcd data directory with mode 0700,
// tightening a looser one, and gives it to security.etcdDataDirOwner when
// that user exists (CIS 1.1.12), else leaves it to root with a warning.
// Offline renders describe another machine, whose user IDs this one
// cannot know, so they only create the directory.
func EnsureEtcdDataDir(s *Node) error {
	dir := s.Config.Etcd.Local.DataDir
	if err := s.Files.MkdirAll(dir, etcdDataDirMode); err != nil {
		return err
	}
	owner := s.Config.Security.EtcdDataDirOwner
	if s.Options.Offline || owner == "root" {
		return nil
	}
	passwd, err := s.Files.ReadFile(passwdFile)
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("read user database %q: %w", passwdFile, err)
	}
	uid, gid, ok := lookupUser(passwd, owner)
	if !ok {
		s.Report.Warnf("no user %q in %s: etcd data dir %s stays owned by root; create the user (useradd --system --user-group --no-create-home %s) and re-run, or set security.etcdDataDirOwner: root",
			owner, passwdFile, dir, owner)
		return nil
	}
	return s.Files.Chown(dir, uid, gid)
}

// lookupUser finds a user's ID and primary group ID in the contents of an
// /etc/passwd file: name:password:uid:gid:gecos:home:shell. A dedicated
// system user such as etcd is a local user, so the file is enough.
func lookupUser(passwd []byte, name string) (uid, gid int, ok bool) {
	for _, line := range strings.Split(string(passwd), "\n") {
		fields := strings.Split(line, ":")
		if len(fields) < 4 || fields[0] != name {
			continue
		}
		u, errU := strconv.Atoi(fields[2])
		g, errG := strconv.Atoi(fields[3])
		if errU != nil || errG != nil {
			return 0, 0, false
		}
		return u, g, true
	}
	return 0, 0, false
}

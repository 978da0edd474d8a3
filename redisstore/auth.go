package redisstore

import (
	"errors"
	"fmt"
	"log/slog"

	"github.com/redis/rueidis"

	"github.com/sluicehq/sluice/internal/rotated"
)

// usePasswordFile makes opt authenticate as its user with the password in
// path, read now and again at each new connection, so that a password
// rotated on disk (a Kubernetes Secret mounted as a file, say) is used
// without a restart: Redis keeps the connections authenticated before,
// and new ones need the new password once the old one is removed (ACL
// SETUSER name >new, then <old). A file that cannot be read then leaves
// the last password read in use (rotated.File); files gets it. Not for
// Sentinel, whose client gives the sentinels' connections the same
// credentials.
func usePasswordFile(opt *rueidis.ClientOption, path string, log *slog.Logger, files *[]rotated.Counted) error {
	switch {
	case opt.Sentinel.MasterSet != "":
		return errors.New("redisstore: password_file is not for Sentinel: give the password in the URL")
	case opt.Password != "":
		return errors.New("redisstore: password_file and a password in the URL: give one")
	}
	f, err := rotated.Open(path, "redis password_file", rotated.Text, log)
	if err != nil {
		return fmt.Errorf("redisstore: %w", err)
	}
	*files = append(*files, f)
	user := opt.Username
	opt.AuthCredentialsFn = func(rueidis.AuthCredentialsContext) (rueidis.AuthCredentials, error) {
		password, _ := f.Read() // a failure is logged, and the last password stays
		return rueidis.AuthCredentials{Username: user, Password: password}, nil
	}
	return nil
}

// Package flagenv applies the config precedence every service uses: defaults < environment
// < flags. A flag "-fsync" of service "storage-core" is read from TRIBUTARY_STORAGE_CORE_FSYNC
// when not given on the command line. A flag whose name ends in "-file" names a file whose
// trimmed contents are the secret (see ReadSecret).
package flagenv

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"
)

// EnvName is the environment variable for a service's flag.
func EnvName(service, flagName string) string {
	up := func(s string) string { return strings.ToUpper(strings.NewReplacer("-", "_", ".", "_").Replace(s)) }
	return "TRIBUTARY_" + up(service) + "_" + up(flagName)
}

// Parse parses args into fs, then sets every flag not given on the command line from its
// environment variable when that is set. An invalid environment value is an error naming
// the variable.
func Parse(fs *flag.FlagSet, service string, args []string) error {
	if err := fs.Parse(args); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if given[f.Name] || err != nil {
			return
		}
		if v, ok := os.LookupEnv(EnvName(service, f.Name)); ok {
			if e := fs.Set(f.Name, v); e != nil {
				err = fmt.Errorf("%s=%q: %w", EnvName(service, f.Name), v, e)
			}
		}
	})
	return err
}

// ReadSecret returns the trimmed contents of path, or "" when path is empty.
func ReadSecret(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("read secret: %w", err)
	}
	return strings.TrimSpace(string(b)), nil
}

// Exit ends command name after its run returned err: exit status 0 for nil or
// flag.ErrHelp (-h or --help printed the usage), otherwise "name: err" on standard
// error and status 1.
func Exit(name string, err error) {
	if err == nil || errors.Is(err, flag.ErrHelp) {
		os.Exit(0)
	}
	fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
	os.Exit(1)
}

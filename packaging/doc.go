// Package packaging holds the tests of how rubyperf is installed: the
// static binary (make static) runs in a root that holds nothing else, and
// the Debian package (make deb, packaging/nfpm.yaml) installs with dpkg
// and apt on fresh Debian roots, where it records and reports a Ruby
// program. The package has no code of its own: the build is the
// Makefile's, the packager nfpm (the separate module packaging/tools, so
// that its dependencies stay out of rubyperf's). It must not know how
// rubyperf records: it runs the installed binary as a user would.
package packaging

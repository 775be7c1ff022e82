// Command rubyperf is the CLI: one file per subcommand, flag parsing,
// preflight checks and exit codes (0 ok, 1 failure, 2 usage). Errors are one
// line: "rubyperf: pid 1234: what went wrong; what to do".
//
// Nothing imports it.
package main

module github.com/rubyperf/rubyperf

go 1.26.8

require (
	golang.org/x/arch v0.32.0 // indirect
	golang.org/x/sys v0.49.0 // indirect
)

module github.com/gorun/gorun

go 1.26.8

require (
	github.com/ebitengine/purego v0.11.3
	github.com/hashicorp/go-multierror v1.1.1
	github.com/klauspost/compress v1.20.3
	golang.org/x/sys v0.49.0
)

require github.com/hashicorp/errwrap v1.0.0 // indirect

"""The Go-built test cluster: control plane, node, SPIRE, Argo, Trainer (docs/testing.md)."""

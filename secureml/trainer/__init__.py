"""Multi-node training through Kubeflow Trainer v2 (docs/trainer.md)."""
